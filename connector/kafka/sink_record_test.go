package kafka_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/connector/kafka"
)

// TestSinkRecordFields writes records with headers, through a partition function, from a stream with
// event time, under each delivery guarantee: each record lands in the partition the function picked,
// with its headers and its event time as the Kafka timestamp.
func TestSinkRecordFields(t *testing.T) {
	for _, g := range []kafka.DeliveryGuarantee{kafka.None, kafka.AtLeastOnce, kafka.ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			brokers := txnCluster(t, 4, "out")
			const n = 200
			base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
			env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithParallelism(2),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 50 * time.Millisecond}))
			vals := make([]int64, n)
			for i := range vals {
				vals[i] = int64(i)
			}
			src := runnel.FromSource(env, connector.Collection(vals)).
				WithTimestamps(runnel.MonotonousTimestamps[int64]().WithTimestampAssigner(func(v int64, _ int64) int64 { return base + v*1000 }))
			src.SinkTo(kafka.RecordSink(kafka.SinkConfig{Brokers: brokers, Topic: "out", Guarantee: g, TransactionalIDPrefix: "rec",
				Partition: func(r *kgo.Record, partitions int) int {
					return int(binary.BigEndian.Uint64(r.Value) % uint64(partitions))
				},
			}, func(v int64, r *kgo.Record) error {
				r.Value = binary.BigEndian.AppendUint64(r.Value, uint64(v))
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: "n", Value: fmt.Appendf(nil, "%d", v)})
				return nil
			})).Name("kafka")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if res, err := env.Execute(ctx, "fields"); err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v, %+v", err, res)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			seen := 0
			for seen < n && ctx.Err() == nil {
				cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
					v := int64(binary.BigEndian.Uint64(r.Value))
					if r.Partition != int32(v%4) || len(r.Headers) != 1 || r.Headers[0].Key != "n" || string(r.Headers[0].Value) != fmt.Sprint(v) ||
						r.Timestamp.UnixMilli() != base+v*1000 {
						t.Fatalf("record %d: partition %d, headers %v, timestamp %s", v, r.Partition, r.Headers, r.Timestamp)
					}
					seen++
				})
			}
			if seen != n {
				t.Fatalf("read %d records of %d", seen, n)
			}
		})
	}
}

package kafka_test

// End-to-end tests against a real Apache Kafka broker (internal/kafkabroker): Kafka topic → Runnel with keyed
// state → Kafka topic, with failures injected, checked by reading the output topic back. kfake stays for the
// fast tests in the other files; these prove the connectors against Kafka's own transaction coordinator,
// markers and isolation levels. Without Java or the broker's jars they skip (CI requires them).

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector/kafka"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

// e2eKV is a record of the end-to-end jobs: a key and a value or running sum. (This file keeps its own
// helpers, apart from those of the package's other test files.)
type e2eKV = codec.Tuple2[int64, int64]

var e2eQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func e2eDecode(r kafka.Record) (e2eKV, error) {
	if len(r.Key) != 8 || len(r.Value) != 8 {
		return e2eKV{}, fmt.Errorf("record %s/%d@%d of %d+%d bytes", r.Topic, r.Partition, r.Offset, len(r.Key), len(r.Value))
	}
	return e2eKV{F0: int64(binary.BigEndian.Uint64(r.Key)), F1: int64(binary.BigEndian.Uint64(r.Value))}, nil
}

// e2eKeys is the number of keys of the end-to-end input; prime, so that keys spread over the partitions
// unevenly, as real ones do.
const e2eKeys = 13

// e2eProduce writes n records to topic: key i%e2eKeys and value i, both 8-byte big-endian, partitioned by
// Kafka's default key hash, so that each key's values sit in one partition in increasing order.
func e2eProduce(t *testing.T, b *kafkabroker.Broker, topic string, n int) {
	t.Helper()
	cl := b.Client(t, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range n {
		rec := &kgo.Record{Key: binary.BigEndian.AppendUint64(nil, uint64(i%e2eKeys)), Value: binary.BigEndian.AppendUint64(nil, uint64(i))}
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("producing the input: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flushing the input: %v", err)
	}
}

// e2eRunningSums are, per key, the running sums a keyed sum over e2eProduce's input emits, in order.
func e2eRunningSums(n int) map[int64][]int64 {
	want := map[int64][]int64{}
	sums := map[int64]int64{}
	for i := range int64(n) {
		k := i % e2eKeys
		sums[k] += i
		want[k] = append(want[k], sums[k])
	}
	return want
}

// e2eRead reads every record of topic at the isolation level given (kafkabroker.Broker.ReadTopic) and
// returns per key the values in the order the partition holds them (all of a key's records are in one
// partition).
func e2eRead(t *testing.T, b *kafkabroker.Broker, topic string, level kgo.IsolationLevel) map[int64][]int64 {
	t.Helper()
	got := map[int64][]int64{}
	for _, r := range b.ReadTopic(t, topic, level) {
		if len(r.Key) != 8 || len(r.Value) != 8 {
			t.Fatalf("record %s/%d@%d of %d+%d bytes", r.Topic, r.Partition, r.Offset, len(r.Key), len(r.Value))
		}
		k := int64(binary.BigEndian.Uint64(r.Key))
		got[k] = append(got[k], int64(binary.BigEndian.Uint64(r.Value)))
	}
	return got
}

// e2eSumJob builds the job under test: the input topic read by the Kafka source, a running sum per key
// (keyed state), written as (key, sum) to the output topic by sink.
func e2eSumJob(env *runnel.Environment, b *kafkabroker.Broker, in string, sink runnel.Sink[e2eKV]) {
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: []string{b.Addr}, Topic: in, Bounded: true}, e2eDecode)).
		Name("kafka-in").WithCodec(codec.MustStruct[e2eKV]())
	sums := runnel.Reduce(runnel.KeyBy(src, func(v e2eKV) int64 { return v.F0 }),
		func(a, b e2eKV) (e2eKV, error) { a.F1 += b.F1; return a, nil }).Name("sum")
	sums.SinkTo(sink).Name("kafka-out")
}

func e2eEncode(v e2eKV, key, value []byte) ([]byte, []byte, error) {
	return binary.BigEndian.AppendUint64(key, uint64(v.F0)), binary.BigEndian.AppendUint64(value, uint64(v.F1)), nil
}

// TestBrokerAtLeastOnceUnderFailures runs Kafka → keyed sum → Kafka on the real broker while the sum fails
// twice under region failover: the sink's at-least-once guarantee means each key's every running sum is in
// the output topic, in a valid order: what a restart writes again is a replay of a suffix, never a value the
// sum could not have had.
func TestBrokerAtLeastOnceUnderFailures(t *testing.T) {
	b := kafkabroker.Shared(t)
	in, out := b.Name("e2e-alo-in"), b.Name("e2e-alo-out")
	b.CreateTopic(t, in, 3)
	b.CreateTopic(t, out, 3)
	const n = 30_000
	e2eProduce(t, b, in, n)

	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(e2eQuiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 50 * time.Millisecond}),
		runnel.WithFailureInjection("sum[0]@4000", "sum[0]@12000"), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"))
	e2eSumJob(env, b, in, kafka.Sink(kafka.SinkConfig{Brokers: []string{b.Addr}, Topic: out}, e2eEncode))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "e2e at least once")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if len(res.Failovers) != 2 {
		t.Fatalf("failovers %+v, want 2", res.Failovers)
	}

	want := e2eRunningSums(n)
	got := e2eRead(t, b, out, kgo.ReadUncommitted())
	total := 0
	for k, w := range want {
		g := got[k]
		total += len(g)
		// Every running sum is there, and nothing else: a replay writes sums the key had before.
		distinct := slices.Compact(slices.Sorted(slices.Values(g)))
		if !slices.Equal(distinct, w) {
			t.Fatalf("key %d: %d distinct sums in the output, want the %d running sums %s", k, len(distinct), len(w), e2eFirstDiff(distinct, w))
		}
	}
	t.Logf("%d output records for %d inputs (%d written again after the failovers)", total, n, total-n)
}

// e2eFirstDiff describes where got first differs from want.
func e2eFirstDiff(got, want []int64) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("(first difference at %d: %d, want %d)", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("(same up to %d)", min(len(got), len(want)))
}

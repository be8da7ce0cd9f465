package kafka_test

// The source against a real Apache Kafka broker (internal/kafkabroker; skipped without Java or the jars):
// what kfake could get subtly different from Kafka, the isolation levels with the broker's own markers and
// last stable offset, discovery of a partition Kafka adds, and the group commits a lag dashboard reads.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/connector/kafka"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

// TestBrokerSourceIsolation writes a committed, an aborted and a committed transaction, and leaves a
// fourth open: a bounded read_committed read ends at the last stable offset (before the open one, without
// waiting for it) with the committed records only; read_uncommitted reads all four.
func TestBrokerSourceIsolation(t *testing.T) {
	b := kafkabroker.Shared(t)
	topic := b.Name("src-isolation")
	b.CreateTopic(t, topic, 2)
	brokers := []string{b.Addr}
	cl := b.Client(t, kgo.DefaultProduceTopic(topic), kgo.TransactionalID(topic+"-tx"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for tx, end := range []string{"commit", "abort", "commit", "open"} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range int64(10) {
			if err := cl.ProduceSync(ctx, rec(int32(j%2), 0, int64(tx)*100+j)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if end != "open" {
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(end == "commit")); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer func() {
		if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Error(err)
		}
	}()
	got := valueSet(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: topic}))
	if len(got) != 20 || !got[0] || !got[209] || got[100] {
		t.Fatalf("read_committed read %d records %v, want 0..9 and 200..209", len(got), got)
	}
	got = valueSet(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: topic, ReadUncommitted: true}))
	if len(got) != 40 || !got[100] || !got[309] {
		t.Fatalf("read_uncommitted read %d records, want 40", len(got))
	}
}

// TestBrokerSourceDiscoversAndCommits reads a topic with two subtasks, checkpoints and a group: a
// partition Kafka adds while the job runs is read from its first record, and the group's committed offsets
// reach the end of every partition, the new one included.
func TestBrokerSourceDiscoversAndCommits(t *testing.T) {
	b := kafkabroker.Shared(t)
	topic := b.Name("src-discover")
	b.CreateTopic(t, topic, 2)
	brokers := []string{b.Addr}
	produceTo(t, brokers, topic, rec(0, 0, 0), rec(1, 1, 1))
	var seen seenValues
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 50 * time.Millisecond}))
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: topic, Group: topic + "-dash",
		DiscoveryInterval: 200 * time.Millisecond}, decode)).Name("kafka").WithCodec(codec.MustStruct[kv]())
	runnel.Map(src, func(v kv) (kv, error) { seen.add(v.F1); return v, nil }).SinkTo(connector.Discard[kv]())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := runJob(ctx, env, "discover on a broker")
	waitFor(t, 60*time.Second, func() bool { return seen.n.Load() == 2 }, func() string { return fmt.Sprintf("%d of 2 records", seen.n.Load()) })

	adm := b.Admin(t)
	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer acancel()
	if resp, err := adm.CreatePartitions(actx, 1, topic); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
	// The producer's metadata may lag the new partition for a moment; it retries until it knows it.
	produceTo(t, brokers, topic, rec(2, 2, 2), rec(0, 0, 3))
	waitFor(t, 30*time.Second, func() bool { return seen.n.Load() >= 4 }, func() string { return fmt.Sprintf("%d of 4 records", seen.n.Load()) })
	ends, err := adm.ListEndOffsets(actx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	if len(want) != 3 {
		t.Fatalf("end offsets %v, want 3 partitions", want)
	}
	var last map[int32]int64
	waitFor(t, 30*time.Second, func() bool {
		last = groupOffsets(t, adm, topic+"-dash", topic)
		for p, w := range want {
			if last[p] != w {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("group offsets %v, want the ends %v", last, want) })
	cancel()
	if res, err := wait(); res == nil || res.Status != "CANCELED" {
		t.Fatalf("result %+v, %v", res, err)
	}
	for v := range int64(4) {
		if c := seen.count(v); c != 1 {
			t.Fatalf("value %d read %d times", v, c)
		}
	}
}

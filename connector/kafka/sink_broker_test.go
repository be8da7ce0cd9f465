package kafka_test

// The exactly-once sink against a real Apache Kafka broker (internal/kafkabroker; skips without Java or the
// jars): Kafka's own transaction coordinator answers the commits of a restore, the second commits, and the
// InitProducerId that aborts and fences.

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector/kafka"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

func brokerValues(t *testing.T, b *kafkabroker.Broker, topic string, level kgo.IsolationLevel) []int64 {
	t.Helper()
	var vs []int64
	for _, r := range b.ReadTopic(t, topic, level) {
		if r.Attrs.IsControl() {
			continue
		}
		vs = append(vs, int64(binary.BigEndian.Uint64(r.Value)))
	}
	return vs
}

func brokerOngoing(t *testing.T, b *kafkabroker.Broker, prefix string) []string {
	t.Helper()
	var ids []string
	for _, tx := range b.OngoingTransactions(t, prefix) {
		ids = append(ids, tx.TxnID)
	}
	return ids
}

// TestBrokerExactlyOnceWriterCommitsWhatItsCheckpointLists is TestExactlyOnceWriterCommitsWhatItsCheckpointLists
// on the real broker: the restore commits the transaction its checkpoint lists and aborts the later ones,
// which read_uncommitted still shows; commits again (of a checkpoint notified already, of an older one) are
// harmless; nothing stays open.
func TestBrokerExactlyOnceWriterCommitsWhatItsCheckpointLists(t *testing.T) {
	b := kafkabroker.Shared(t)
	topic, prefix := b.Name("sink-writer-out"), b.Name("sink-writer")
	b.CreateTopic(t, topic, 3)
	s := kafka.Sink(kafka.SinkConfig{Brokers: []string{b.Addr}, Topic: topic, Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: prefix, Linger: time.Millisecond}, encodeInt)

	commitsWhatItsCheckpointLists(t, s, prefix, txnView{
		read: func(committed bool, _ int) []int64 {
			level := kgo.ReadUncommitted()
			if committed {
				level = kgo.ReadCommitted()
			}
			return brokerValues(t, b, topic, level)
		},
		ongoing: func() []string { return brokerOngoing(t, b, prefix) },
		exact:   true,
	})
}

// TestBrokerExactlyOnceSinkUnderFailures is TestExactlyOnceSinkUnderFailures on the real broker (region
// failover): every record once for read_committed, and no transaction left open.
func TestBrokerExactlyOnceSinkUnderFailures(t *testing.T) {
	b := kafkabroker.Shared(t)
	const n = 16_000
	topic, prefix := b.Name("sink-job-out"), b.Name("sink-job")
	b.CreateTopic(t, topic, 3)
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 100 * time.Millisecond}),
		runnel.WithRestartStrategy("fixed-delay:attempts=10,delay=0s"),
		runnel.WithFailureInjection("kafka[0]@2500", "kafka[1]@5000"))
	src := runnel.FromSource(env, generatorSource(n, 10_000)).Name("source")
	src.SinkTo(kafka.Sink(kafka.SinkConfig{Brokers: []string{b.Addr}, Topic: topic, Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: prefix, Linger: time.Millisecond}, encodeInt)).Name("kafka")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "eos-broker")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if len(res.Failovers) != 2 {
		t.Fatalf("%d failovers, want 2", len(res.Failovers))
	}
	committed := brokerValues(t, b, topic, kgo.ReadCommitted())
	checkOnce(t, "read_committed", committed, generated(n))
	all := brokerValues(t, b, topic, kgo.ReadUncommitted())
	t.Logf("read_uncommitted sees %d records, read_committed %d", len(all), len(committed))
	if got := brokerOngoing(t, b, prefix); len(got) != 0 {
		t.Fatalf("open transactions at the end: %v", got)
	}
}

// BenchmarkBrokerSink writes 400,000 records from two subtasks to a 3-partition topic on the real broker,
// at least once and exactly once, with checkpoints every second, and reports records per second: the cost
// of the transactions (flush at the barrier, a commit per checkpoint and subtask).
func BenchmarkBrokerSink(b *testing.B) {
	kb := kafkabroker.Shared(b)
	const n = 2_000_000
	for _, g := range []kafka.DeliveryGuarantee{kafka.AtLeastOnce, kafka.ExactlyOnce} {
		b.Run(g.String(), func(b *testing.B) {
			var elapsed time.Duration
			for i := range b.N {
				topic := kb.Name(fmt.Sprintf("bench-%s-%d", g, i))
				kb.CreateTopic(b, topic, 3)
				env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
					runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Second}))
				runnel.FromSource(env, generatorSource(n, 0)).SinkTo(kafka.Sink(kafka.SinkConfig{Brokers: []string{kb.Addr},
					Topic: topic, Guarantee: g, TransactionalIDPrefix: topic}, encodeInt)).Name("kafka")
				start := time.Now()
				res, err := env.Execute(context.Background(), "bench")
				if err != nil || res.Status != "FINISHED" {
					b.Fatalf("%v, %+v", err, res)
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "records/s")
		})
	}
}

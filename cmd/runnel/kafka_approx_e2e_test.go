package main

import (
	"context"
	be "encoding/binary"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel/cmd/runnel/internal/proccluster"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

// kafkaApproxProgram is a user's job binary: Kafka → keyed reduce that keeps each key's latest record and
// emits every record it gets → Kafka, with the sink's guarantee a flag. Each output record is an input
// record, so the output says which input records made it through.
const kafkaApproxProgram = `package main

import (
	be "encoding/binary"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector/kafka"
)

func main() {
	runnel.RegisterJob("kafkaapprox", "Kafka to Kafka through keyed state, each record passed on", func(flags *pflag.FlagSet) runnel.Job {
		j := &job{}
		flags.StringVar(&j.brokers, "brokers", "", "seed broker")
		flags.StringVar(&j.in, "in", "", "input topic")
		flags.StringVar(&j.out, "out", "", "output topic")
		flags.StringVar(&j.prefix, "prefix", "", "transactional id prefix")
		flags.StringVar(&j.guarantee, "guarantee", "exactly-once", "the sink's guarantee: exactly-once or at-least-once")
		flags.Float64Var(&j.rate, "rate", 0, "records per second of each source subtask (0: as fast as it goes)")
		return j
	})
	runnel.Main()
}

type kv = codec.Tuple2[int64, int64]

type job struct {
	brokers, in, out, prefix, guarantee string
	rate                                float64
}

func (j *job) Build(env *runnel.Environment, args []string) error {
	if len(args) > 0 || j.brokers == "" || j.in == "" || j.out == "" || j.prefix == "" {
		return fmt.Errorf("kafkaapprox needs --brokers, --in, --out and --prefix, and no arguments")
	}
	g := kafka.ExactlyOnce
	switch j.guarantee {
	case "exactly-once":
	case "at-least-once":
		g = kafka.AtLeastOnce
	default:
		return fmt.Errorf("--guarantee %q: use exactly-once or at-least-once", j.guarantee)
	}
	decode := func(r kafka.Record) (kv, error) {
		if len(r.Key) != 8 || len(r.Value) != 8 {
			return kv{}, fmt.Errorf("record of %d+%d bytes", len(r.Key), len(r.Value))
		}
		return kv{F0: int64(be.BigEndian.Uint64(r.Key)), F1: int64(be.BigEndian.Uint64(r.Value))}, nil
	}
	// Small fetches (the input is written in small batches): a poll hands over a few hundred records, which
	// the throttle lets through in a fraction of a second, so that barriers are not held back long.
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: []string{j.brokers}, Topic: j.in, Bounded: true,
		ClientOptions: []kgo.Opt{kgo.FetchMaxBytes(4096), kgo.FetchMaxPartitionBytes(4096)}}, decode)).
		Name("kafka-in").Uid("kafka-in").WithCodec(codec.MustStruct[kv]())
	rate := j.rate
	throttled := runnel.MapWith(src, func() runnel.MapFunction[kv, kv] { return &throttle{rate: rate} }).Name("throttle")
	latest := runnel.Reduce(runnel.KeyBy(throttled, func(v kv) int64 { return v.F0 }),
		func(_, b kv) (kv, error) { return b, nil }).Name("latest").Uid("latest")
	latest.SinkTo(kafka.Sink(kafka.SinkConfig{Brokers: []string{j.brokers}, Topic: j.out, Guarantee: g,
		TransactionalIDPrefix: j.prefix}, func(v kv, key, value []byte) ([]byte, []byte, error) {
		return be.BigEndian.AppendUint64(key, uint64(v.F0)), be.BigEndian.AppendUint64(value, uint64(v.F1)), nil
	})).Name("kafka-out").Uid("kafka-out")
	return nil
}
` + throttleProgram

// TestKafkaApproximateFailover runs Kafka (3 partitions) → keyed reduce → Kafka on a JobManager and two
// TaskManager processes with --failover approximate, and fails the keyed operator's subtasks 0 and 1 once
// each after a checkpoint completed. Approximate failover restarts each failed subtask with its chained
// sink subtask from the last checkpoint while the sources go on: the records the failed attempt processed
// after that checkpoint, and those in flight to it, are lost, and the job reports how many
// (records_lost). What the output holds then depends on the sink:
//
//   - exactly once: the restarted sink aborts the transaction its failed attempt wrote after the
//     checkpoint, so a read_committed reader reads every input record at most once, and misses exactly as
//     many as the job reports lost;
//   - at least once: nothing is aborted, so the output also holds the records the failed attempt wrote
//     after the checkpoint, whose effect on the keyed state was rolled back: every input record at most
//     once still (no source rewinds, the producer is idempotent), and at most as many missing as reported
//     lost.
func TestKafkaApproximateFailover(t *testing.T) {
	b := kafkabroker.Start(t)
	bin := buildUserBinary(t, []byte(kafkaApproxProgram))
	for _, guarantee := range []string{"exactly-once", "at-least-once"} {
		t.Run(guarantee, func(t *testing.T) { kafkaApproximate(t, b, bin, guarantee) })
	}
}

func kafkaApproximate(t *testing.T, b *kafkabroker.Broker, bin, guarantee string) {
	const n, keys = 15_000, 13
	in, out, prefix := b.Name("approx-in-"+guarantee), b.Name("approx-out-"+guarantee), b.Name("approx-"+guarantee)
	b.CreateTopic(t, in, 3)
	b.CreateTopic(t, out, 3)
	prod := b.Client(t, kgo.DefaultProduceTopic(in), kgo.ProducerBatchMaxBytes(4096))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range n {
		prod.Produce(ctx, &kgo.Record{Key: be.BigEndian.AppendUint64(nil, uint64(i%keys)), Value: be.BigEndian.AppendUint64(nil, uint64(i))},
			func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("producing the input: %v", err)
				}
			})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	c := startClusterWith(t, proccluster.Spec{TaskManagers: 2, Slots: 2, Process: proccluster.Options{Binary: bin, Dir: dir}})
	report := filepath.Join(dir, "r.json")
	// 3 source subtasks at 1000 records/s each: about 7 s (the partitions hold 3462, 4615 and 6923 records;
	// the keyed subtasks get 5770, 8077 and 1153). latest[0] fails once checkpoint 2 completed, latest[1]
	// at its 5000th record, some 4 s in: each restore rolls back to a checkpoint the sink committed (on a
	// busy machine a checkpoint may take seconds, so the second failure does not wait for a later one).
	sp, err := proccluster.Start("submit", proccluster.Options{Binary: bin, Dir: dir}, "submit", "kafkaapprox", "--jobmanager", c.addr,
		"--brokers", b.Addr, "--in", in, "--out", out, "--prefix", prefix, "--guarantee", guarantee, "--rate", "1000",
		"--parallelism", "3", "--failover", "approximate", "--checkpoint-interval", "100ms",
		"--checkpoint-storage", filepath.Join(dir, "chk"), "--report", report,
		"--inject-failure", "latest[0]@chk-2", "--inject-failure", "latest[1]@5000")
	if err != nil {
		t.Fatal(err)
	}
	sub := &process{sp}
	t.Cleanup(func() { _ = sp.Kill(); logIfFailed(t, sp) })
	if code := sub.exited(t, 120*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, sub.Stderr())
	}
	r := readReport(t, report)
	if r.Status != "FINISHED" || len(r.Failovers) != 2 || len(r.UnfiredInjections) != 0 {
		t.Fatalf("%s after %d ms with failovers %+v (unfired injections %v; checkpoints %+v; vertices %+v): want 2",
			r.Status, r.WallMillis, r.Failovers, r.UnfiredInjections, r.Checkpoints, r.Vertices)
	}
	for _, f := range r.Failovers {
		if f.Strategy != "approximate" || f.Fallback != "" || f.CheckpointRestored == nil {
			t.Fatalf("failover %+v: want approximate, from a checkpoint", f)
		}
		for _, s := range f.Restarted {
			if strings.Contains(s, "kafka-in") {
				t.Fatalf("failover %+v restarted a source subtask", f)
			}
		}
	}
	lost := r.FailoverTotals.RecordsLost

	level := kgo.ReadCommitted()
	if guarantee == "at-least-once" {
		level = kgo.ReadUncommitted()
	}
	seen := make([]int, n)
	got := b.ReadTopic(t, out, level)
	for _, rec := range got {
		k, v := int64(be.BigEndian.Uint64(rec.Key)), int64(be.BigEndian.Uint64(rec.Value))
		if v < 0 || v >= n || k != v%keys {
			t.Fatalf("output record key %d value %d is no input record", k, v)
		}
		if seen[v]++; seen[v] > 1 {
			t.Fatalf("value %d written twice (%s)", v, guarantee)
		}
	}
	missing := uint64(n - len(got))
	switch {
	case guarantee == "exactly-once" && missing != lost:
		t.Fatalf("read_committed misses %d of %d records; the job reports %d lost (failovers %+v)", missing, n, lost, r.Failovers)
	case missing > lost:
		t.Fatalf("the output misses %d of %d records, more than the %d the job reports lost", missing, n, lost)
	}
	t.Logf("%s: %d records lost by the report, %d missing from the output, %d records out; restarted %v and %v",
		guarantee, lost, missing, len(got), r.Failovers[0].Restarted, r.Failovers[1].Restarted)
	if open := b.OngoingTransactions(t, prefix+"-"); len(open) != 0 {
		t.Fatalf("transactions left Ongoing after the job finished: %+v", open)
	}
}

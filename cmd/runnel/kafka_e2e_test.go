package main

import (
	"context"
	be "encoding/binary"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel/cmd/runnel/internal/proccluster"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
	"github.com/runnel-dev/runnel/internal/report"
)

// kafkaSumProgram is a user's job binary: running sums per key from one Kafka topic to another, with the
// exactly-once sink. --rate throttles each source subtask, so that a run lasts long enough for a TaskManager
// to be killed in the middle of it.
const kafkaSumProgram = `package main

import (
	be "encoding/binary"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector/kafka"
)

func main() {
	runnel.RegisterJob("kafkasum", "running sums per key, Kafka to Kafka, exactly once", func(flags *pflag.FlagSet) runnel.Job {
		j := &job{}
		flags.StringVar(&j.brokers, "brokers", "", "seed broker")
		flags.StringVar(&j.in, "in", "", "input topic")
		flags.StringVar(&j.out, "out", "", "output topic")
		flags.StringVar(&j.prefix, "prefix", "", "transactional id prefix")
		flags.Float64Var(&j.rate, "rate", 0, "records per second of each source subtask (0: as fast as it goes)")
		return j
	})
	runnel.Main()
}

type kv = codec.Tuple2[int64, int64]

type job struct {
	brokers, in, out, prefix string
	rate                     float64
}

func (j *job) Build(env *runnel.Environment, args []string) error {
	if len(args) > 0 || j.brokers == "" || j.in == "" || j.out == "" || j.prefix == "" {
		return fmt.Errorf("kafkasum needs --brokers, --in, --out and --prefix, and no arguments")
	}
	decode := func(r kafka.Record) (kv, error) {
		if len(r.Key) != 8 || len(r.Value) != 8 {
			return kv{}, fmt.Errorf("record of %d+%d bytes", len(r.Key), len(r.Value))
		}
		return kv{F0: int64(be.BigEndian.Uint64(r.Key)), F1: int64(be.BigEndian.Uint64(r.Value))}, nil
	}
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: []string{j.brokers}, Topic: j.in, Bounded: true, MaxPollRecords: 10}, decode)).
		Name("kafka-in").Uid("kafka-in").WithCodec(codec.MustStruct[kv]())
	// The throttle is chained to the source, so that records wait there rather than in the buffers
	// before the sum, where they would hold back the checkpoints' barriers; and a poll of the source
	// emits a few records only, so that barriers and the buffer timeout's flushes come between polls
	// every few milliseconds, not after a whole fetch has passed the throttle.
	rate := j.rate
	throttled := runnel.MapWith(src, func() runnel.MapFunction[kv, kv] { return &throttle{rate: rate} }).Name("throttle")
	sums := runnel.Reduce(runnel.KeyBy(throttled, func(v kv) int64 { return v.F0 }),
		func(a, b kv) (kv, error) { a.F1 += b.F1; return a, nil }).Name("sum").Uid("sum")
	sums.SinkTo(kafka.Sink(kafka.SinkConfig{Brokers: []string{j.brokers}, Topic: j.out, Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: j.prefix}, func(v kv, key, value []byte) ([]byte, []byte, error) {
		return be.BigEndian.AppendUint64(key, uint64(v.F0)), be.BigEndian.AppendUint64(value, uint64(v.F1)), nil
	})).Name("kafka-out").Uid("kafka-out")
	return nil
}
` + throttleProgram

// TestKafkaExactlyOnceKilledTaskManager runs Kafka → running sums → Kafka with the exactly-once sink on a
// JobManager and three TaskManager processes, and SIGKILLs the TaskManager that runs the sink's subtask 0
// once a checkpoint completed and the output holds records of an open transaction.
//
// restarted: the killed attempt's open transaction dies with it, the job restores the checkpoint on the
// TaskManagers that remain (committing what the checkpoint covers, aborting the rest), and a
// read_committed reader of the output reads every running sum of every key once and in order, while a
// read_uncommitted reader also reads the records the killed attempt wrote. No transaction stays open.
//
// failed for good (no restart): no restore follows, and the JobManager settles the sink's subtasks from
// the newest completed checkpoint as the job ends (runnel.Settler): no transaction stays open, and a
// read_committed reader reads, per key, a prefix of the running sums, each once.
func TestKafkaExactlyOnceKilledTaskManager(t *testing.T) {
	b := kafkabroker.Start(t)
	const n, keys = 20_000, 13
	bin := buildUserBinary(t, []byte(kafkaSumProgram))
	for _, tc := range []struct {
		name    string
		restart string
	}{{"restarted", ""}, {"failed for good", "none"}} {
		t.Run(tc.name, func(t *testing.T) {
			slug := strings.ReplaceAll(tc.name, " ", "-")
			in, out, prefix := b.Name("kill-in-"+slug), b.Name("kill-out-"+slug), b.Name("kill-"+slug)
			b.CreateTopic(t, in, 3)
			b.CreateTopic(t, out, 3)
			produceKeyed(t, b, in, n, keys)
			dir := t.TempDir()
			cl := startClusterWith(t, proccluster.Spec{TaskManagers: 3, Slots: 2, Process: proccluster.Options{Binary: bin, Dir: dir}})
			report := filepath.Join(dir, "r.json")
			// 2 source subtasks at 2500 records/s each: about 4 s, so that the kill lands mid-run.
			args := []string{"submit", "kafkasum", "--jobmanager", cl.addr,
				"--brokers", b.Addr, "--in", in, "--out", out, "--prefix", prefix, "--rate", "2500",
				"--parallelism", "2", "--failover", "region", "--checkpoint-interval", "100ms",
				"--checkpoint-storage", filepath.Join(dir, "chk"), "--report", report}
			if tc.restart != "" {
				args = append(args, "--restart-strategy", tc.restart)
			}
			sp, err := proccluster.Start("submit", proccluster.Options{Binary: bin, Dir: dir}, args...)
			if err != nil {
				t.Fatal(err)
			}
			sub := &process{sp}
			t.Cleanup(func() { _ = sp.Kill(); logIfFailed(t, sp) })

			// The kill waits for a commit and for records of an open transaction in the output: so the
			// killed attempt had written records that the job must abort, after others that it committed.
			adm := b.Admin(t)
			ready := func() bool { return committedAndOpen(t, adm, out, prefix) }
			what := "records committed and others open in " + out
			if tc.restart == "" {
				// The open transaction must be one that the restore aborts: written after the newest
				// checkpoint's barrier, not one prepared for a checkpoint that may still complete.
				ready = func() bool { return committedAndOpen(t, adm, out, prefix) && betweenCheckpoints(t, cl) }
				what += " while no checkpoint's barrier passed since the newest one's commit"
			}
			want := runningSums(n, keys)
			read := func(level kgo.IsolationLevel) (map[int64][]int64, int) {
				got := map[int64][]int64{}
				recs := b.ReadTopic(t, out, level)
				for _, r := range recs {
					k := int64(be.BigEndian.Uint64(r.Key))
					got[k] = append(got[k], int64(be.BigEndian.Uint64(r.Value)))
				}
				return got, len(recs)
			}
			if tc.restart == "" {
				victim := killMidRun(t, cl, sub, report, "kafka-out", what, ready)
				// Every running sum of every key once and in order (a key's records sit in one partition).
				committed, nc := read(kgo.ReadCommitted())
				checkRunningSums(t, "read_committed", committed, want)
				if _, nu := read(kgo.ReadUncommitted()); nu <= nc {
					t.Fatalf("read_uncommitted read %d records, read_committed %d: the killed attempt's open transaction held none", nu, nc)
				} else {
					t.Logf("%d records committed, %d written and aborted; killed %s", nc, nu-nc, victim)
				}
			} else {
				victim := killWhenReady(t, cl, "kafka-out", what, ready)
				if code := sub.exited(t, 120*time.Second); code != 1 {
					t.Fatalf("submit exited %d, want 1 (the job failed):\n%s", code, sub.Stderr())
				}
				if r := readReport(t, report); r.Status != "FAILED" || r.Checkpoints == nil || r.Checkpoints.Completed == 0 {
					t.Fatalf("%s with checkpoints %+v: want the job failed by the loss of %s after a checkpoint", r.Status, r.Checkpoints, victim)
				}
				committed, nc := read(kgo.ReadCommitted())
				checkRunningSumPrefixes(t, "read_committed", committed, want)
				if nc == 0 {
					t.Fatal("read_committed read nothing: the completed checkpoints' transactions were not committed")
				}
				t.Logf("%d records committed before the job failed; killed %s", nc, victim)
			}
			if open := b.OngoingTransactions(t, prefix+"-"); len(open) != 0 {
				t.Fatalf("transactions left Ongoing after the job ended: %+v", open)
			}
		})
	}
}

// produceKeyed writes the values 0..n-1 to topic, value i under key i%keys, both as 8 big-endian bytes.
func produceKeyed(t *testing.T, b *kafkabroker.Broker, topic string, n, keys int) {
	t.Helper()
	prod := b.Client(t, kgo.DefaultProduceTopic(topic))
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
}

// committedAndOpen reports whether topic has committed records (a last stable offset above 0) and records of
// an open transaction (a high watermark above the last stable offset) in some partition, while a
// transaction of the sink's (transactional ids under prefix) is Ongoing: records of a transaction that is
// committing already (PrepareCommit) also keep the stable offset back, for the moment its markers take.
func committedAndOpen(t *testing.T, adm *kadm.Client, topic, prefix string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ongoing, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ongoing.Sorted(), func(tx kadm.ListedTransaction) bool { return strings.HasPrefix(tx.TxnID, prefix+"-") }) {
		return false
	}
	hw, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	lso, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, open := false, false
	lso.Each(func(l kadm.ListedOffset) {
		h, _ := hw.Lookup(topic, l.Partition)
		committed = committed || l.Offset > 0
		open = open || h.Offset > l.Offset
	})
	return committed && open
}

// betweenCheckpoints reports whether the cluster's one job is between two checkpoints as its sinks see
// them: the newest completed checkpoint ended at least 50 ms ago (time for its transactions' commits) and
// no subtask acknowledged a later one (no source has emitted its barrier, so none reached a sink). What a
// sink wrote since is then in a transaction that no checkpoint lists, which a failover aborts.
func betweenCheckpoints(t *testing.T, c *testCluster) bool {
	t.Helper()
	var jobs struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	c.get(t, "/v1/jobs", &jobs)
	if len(jobs.Jobs) != 1 {
		return false
	}
	var doc report.CheckpointsDocument
	c.get(t, "/v1/jobs/"+jobs.Jobs[0].ID+"/checkpoints", &doc)
	for i := len(doc.History) - 1; i >= 0; i-- {
		switch cp := doc.History[i]; cp.Status {
		case "IN_PROGRESS":
			if cp.Acknowledged > 0 {
				return false
			}
		case "COMPLETED":
			ended := cp.TriggerTime.Add(time.Duration(cp.DurationMillis) * time.Millisecond)
			return time.Since(ended) >= 50*time.Millisecond
		default:
			return false
		}
	}
	return false
}

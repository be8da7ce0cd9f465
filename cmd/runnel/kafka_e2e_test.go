package main

import (
	"context"
	be "encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
// exactly-once sink. Its source is the Kafka source behind a gate (below) that throttles it to --rate
// records per second, so that a run lasts long enough for a TaskManager to be killed in the middle of it,
// and that holds it at the checkpoint the file --hold names until the file --release exists.
const kafkaSumProgram = `package main

import (
	be "encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
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
		flags.Float64Var(&j.g.rate, "rate", 0, "records per second of each source subtask until --release exists (0: as fast as it goes)")
		flags.StringVar(&j.g.hold, "hold", "", "a file that, once it exists, names a checkpoint: each source subtask stops before its barrier until --release exists")
		flags.StringVar(&j.g.release, "release", "", "the file that releases the sources (see --hold) and lifts --rate")
		return j
	})
	runnel.Main()
}

type kv = codec.Tuple2[int64, int64]

type job struct {
	brokers, in, out, prefix string
	g                        gate
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
	// A poll of the source emits a few records only, so that barriers and the buffer timeout's flushes
	// come between polls every few milliseconds while the gate throttles it.
	g := j.g
	g.src = kafka.Source(kafka.SourceConfig{Brokers: []string{j.brokers}, Topic: j.in, Bounded: true, MaxPollRecords: 10}, decode)
	src := runnel.FromSource(env, runnel.Source[kv](&g)).Name("kafka-in").Uid("kafka-in").WithCodec(codec.MustStruct[kv]())
	sums := runnel.Reduce(runnel.KeyBy(src, func(v kv) int64 { return v.F0 }),
		func(a, b kv) (kv, error) { a.F1 += b.F1; return a, nil }).Name("sum").Uid("sum")
	sums.SinkTo(kafka.Sink(kafka.SinkConfig{Brokers: []string{j.brokers}, Topic: j.out, Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: j.prefix}, func(v kv, key, value []byte) ([]byte, []byte, error) {
		return be.BigEndian.AppendUint64(key, uint64(v.F0)), be.BigEndian.AppendUint64(value, uint64(v.F1)), nil
	})).Name("kafka-out").Uid("kafka-out")
	return nil
}

// gate is a source that reads src's readers, throttled to rate records per second, and that holds every
// subtask at the checkpoint the file hold names: its snapshot of that checkpoint (or a later one) waits,
// before the barrier goes out, until the file release exists. While the sources wait, no later checkpoint
// can complete, and what the sinks wrote since the last barrier stays in transactions no checkpoint lists.
type gate struct {
	src           runnel.Source[kv]
	rate          float64
	hold, release string
}

func (g *gate) Rescalable() bool { return true }

func (g *gate) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[kv], error) {
	r, err := g.src.CreateReader(ctx)
	if err != nil {
		return nil, err
	}
	return &gatedReader{g: g, r: r, out: &counter{}}, nil
}

type gatedReader struct {
	g        *gate
	r        runnel.SourceReader[kv]
	out      *counter
	start    time.Time
	released bool
}

type counter struct {
	out runnel.Collector[kv]
	n   int
}

func (c *counter) Collect(v kv) { c.n++; c.out.Collect(v) }

// releasedNow says whether the release file exists (once it did, always).
func (r *gatedReader) releasedNow() bool {
	if !r.released && r.g.release != "" {
		_, err := os.Stat(r.g.release)
		r.released = err == nil
	}
	return r.released
}

func (r *gatedReader) PollNext(out runnel.Collector[kv]) (runnel.InputStatus, error) {
	if r.g.rate > 0 && !r.releasedNow() {
		if r.start.IsZero() {
			r.start = time.Now()
		}
		if ahead := time.Duration(float64(r.out.n)/r.g.rate*float64(time.Second)) - time.Since(r.start); ahead > 2*time.Millisecond {
			time.Sleep(ahead)
		}
	}
	r.out.out = out
	return r.r.PollNext(r.out)
}

func (r *gatedReader) Available() <-chan struct{} { return r.r.Available() }
func (r *gatedReader) Close() error               { return r.r.Close() }

func (r *gatedReader) SnapshotState(id int64) ([]byte, error) {
	if r.g.hold != "" && !r.releasedNow() {
		if b, err := os.ReadFile(r.g.hold); err == nil {
			at, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("hold file %s: %w", r.g.hold, err)
			}
			for id >= at && !r.releasedNow() {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	return r.r.(runnel.CheckpointedReader).SnapshotState(id)
}

func (r *gatedReader) RestoreState(b []byte) error {
	return r.r.(runnel.CheckpointedReader).RestoreState(b)
}

func (r *gatedReader) NotifyCheckpointComplete(id int64) error {
	return r.r.(runnel.CheckpointListener).NotifyCheckpointComplete(id)
}
`

// TestKafkaExactlyOnceKilledTaskManager runs Kafka → running sums → Kafka with the exactly-once sink on a
// JobManager and three TaskManager processes, and SIGKILLs the TaskManager that runs the sink's subtask 0
// once a checkpoint completed and the output holds records of an open transaction. The sources are held
// before a checkpoint's barrier (kafkaSumProgram's gate) once some output is committed, so the kill lands,
// whatever the machine's load, where the sinks' open transactions hold records that no checkpoint lists.
//
// restarted: the killed attempt's open transaction dies with it, the job restores
// the checkpoint on the TaskManagers that remain (committing what the checkpoint covers, aborting the
// rest), and a read_committed reader of the output reads every running sum of every key once and in
// order, while a read_uncommitted reader also reads the records the killed attempt wrote. No transaction
// stays open.
//
// failed for good (no restart): no restore follows, and the JobManager settles the sink's subtasks from
// the newest completed checkpoint as the job ends (runnel.Settler): no transaction stays open, and a
// read_committed reader reads, per key, a prefix of the running sums, each once.
func TestKafkaExactlyOnceKilledTaskManager(t *testing.T) {
	b := kafkabroker.Start(t)
	// n records at 2500 a second from each of 2 source subtasks: 20 s, time enough to reach the held
	// checkpoint when checkpoints take seconds; a released run goes on at full speed.
	const n, keys = 100_000, 13
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
			hold, release := filepath.Join(dir, "hold"), filepath.Join(dir, "release")
			args := []string{"submit", "kafkasum", "--jobmanager", cl.addr,
				"--brokers", b.Addr, "--in", in, "--out", out, "--prefix", prefix, "--rate", "2500",
				"--parallelism", "2", "--failover", "region", "--checkpoint-interval", "100ms",
				"--checkpoint-storage", filepath.Join(dir, "chk"), "--report", report, "--hold", hold, "--release", release}
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
			// The open transaction must be one that the restore (or the settling) aborts: written after the
			// newest checkpoint's barrier, not one prepared for a checkpoint that may still complete. Held
			// sources make that last until the kill; the release lets the survivors go on (or be cancelled).
			adm := b.Admin(t)
			holdSources(t, cl, adm, out, hold)
			ready := func() bool { return committedAndOpen(t, adm, out, prefix) && betweenCheckpoints(t, cl) }
			what := "records committed and others open in " + out + " while no checkpoint's barrier passed since the newest one's commit"
			victim := killWhenReady(t, cl, "kafka-out", what, ready)
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				t.Fatal(err)
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
				finishedAfterKill(t, sub, report, victim)
				// Every running sum of every key once and in order (a key's records sit in one partition).
				committed, nc := read(kgo.ReadCommitted())
				checkRunningSums(t, "read_committed", committed, want)
				if _, nu := read(kgo.ReadUncommitted()); nu <= nc {
					t.Fatalf("read_uncommitted read %d records, read_committed %d: the killed attempt's open transaction held none", nu, nc)
				} else {
					t.Logf("%d records committed, %d written and aborted; killed %s", nc, nu-nc, victim)
				}
			} else {
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

// holdSources waits (60 s at most) until topic has committed records, then writes to the file hold a
// checkpoint two past the newest the cluster's one job has begun: kafkaSumProgram's sources stop before
// its barrier. The checkpoint before it completes (its barriers went out), and the sinks write what the
// sources emitted since into transactions that stay open; the one after the newest begun is not held, as
// it may begin while the file is written, and a source that took it before the file was there would let
// its barrier pass while the others stop.
func holdSources(t *testing.T, c *testCluster, adm *kadm.Client, topic, hold string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !committed(t, adm, topic) {
		if time.Now().After(deadline) {
			t.Fatalf("no records committed in %s within 60 s", topic)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var jobs struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	c.get(t, "/v1/jobs", &jobs)
	if len(jobs.Jobs) != 1 {
		t.Fatalf("%d jobs, want 1", len(jobs.Jobs))
	}
	var doc report.CheckpointsDocument
	c.get(t, "/v1/jobs/"+jobs.Jobs[0].ID+"/checkpoints", &doc)
	var newest int64
	for _, cp := range doc.History {
		newest = max(newest, cp.ID)
	}
	tmp := hold + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(newest+2, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, hold); err != nil {
		t.Fatal(err)
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
	committed, open := stableOffsets(t, adm, topic)
	return committed && open
}

// committed reports whether topic has committed records: a last stable offset above 0 in some partition.
func committed(t *testing.T, adm *kadm.Client, topic string) bool {
	t.Helper()
	c, _ := stableOffsets(t, adm, topic)
	return c
}

// stableOffsets reports whether some partition of topic has a last stable offset above 0 (committed),
// and whether some has a high watermark above its last stable offset (open).
func stableOffsets(t *testing.T, adm *kadm.Client, topic string) (committed, open bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hw, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	lso, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	lso.Each(func(l kadm.ListedOffset) {
		h, _ := hw.Lookup(topic, l.Partition)
		committed = committed || l.Offset > 0
		open = open || h.Offset > l.Offset
	})
	return committed, open
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

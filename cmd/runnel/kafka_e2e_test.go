package main

import (
	"context"
	be "encoding/binary"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel/cmd/runnel/internal/proccluster"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
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
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: []string{j.brokers}, Topic: j.in, Bounded: true}, decode)).
		Name("kafka-in").Uid("kafka-in").WithCodec(codec.MustStruct[kv]())
	// The throttle is chained to the source, so that records wait there rather than in the buffers
	// before the sum, where they would hold back the checkpoints' barriers.
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

// throttle passes records on at no more than rate per second.
type throttle struct {
	runnel.RichBase
	rate  float64
	start time.Time
	n     float64
}

func (t *throttle) Map(v kv) (kv, error) {
	if t.rate <= 0 {
		return v, nil
	}
	if t.start.IsZero() {
		t.start = time.Now()
	}
	t.n++
	if ahead := time.Duration(t.n/t.rate*float64(time.Second)) - time.Since(t.start); ahead > 2*time.Millisecond {
		time.Sleep(ahead)
	}
	return v, nil
}
`

// TestKafkaExactlyOnceKilledTaskManager runs Kafka → running sums → Kafka with the exactly-once sink on a
// JobManager and three TaskManager processes, and SIGKILLs the TaskManager that runs the sink's subtask 0
// once a checkpoint completed: its open transaction dies with it, the job restores the checkpoint on the
// TaskManagers that remain (committing what the checkpoint covers, aborting the rest), and a
// read_committed reader of the output reads every running sum of every key once and in order, while a
// read_uncommitted reader also reads the records the killed attempt wrote. No transaction stays open.
func TestKafkaExactlyOnceKilledTaskManager(t *testing.T) {
	b := kafkabroker.Start(t)
	const n, keys = 20_000, 13
	in, out, prefix := b.Name("kill-in"), b.Name("kill-out"), b.Name("kill")
	b.CreateTopic(t, in, 3)
	b.CreateTopic(t, out, 3)
	prod := b.Client(t, kgo.DefaultProduceTopic(in))
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

	bin := buildUserBinary(t, []byte(kafkaSumProgram))
	dir := t.TempDir()
	c, err := proccluster.StartCluster(context.Background(), proccluster.Spec{TaskManagers: 3, Slots: 2, InOrder: true,
		StartTimeout: 30 * time.Second, Process: proccluster.Options{Binary: bin, Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{c: c, jm: &process{c.JobManager}, addr: c.Addr, rest: c.REST}
	for _, tm := range c.TaskManagers {
		tc.tms = append(tc.tms, &process{tm})
	}
	t.Cleanup(func() {
		c.Close(0)
		for _, p := range append([]*proccluster.Process{c.JobManager}, c.TaskManagers...) {
			logIfFailed(t, p)
		}
	})
	report := filepath.Join(dir, "r.json")
	// 2 source subtasks at 2500 records/s each: about 4 s, so that the kill lands mid-run.
	sp, err := proccluster.Start("submit", proccluster.Options{Binary: bin, Dir: dir}, "submit", "kafkasum", "--jobmanager", c.Addr,
		"--brokers", b.Addr, "--in", in, "--out", out, "--prefix", prefix, "--rate", "2500",
		"--parallelism", "2", "--failover", "region", "--checkpoint-interval", "100ms",
		"--checkpoint-storage", filepath.Join(dir, "chk"), "--report", report)
	if err != nil {
		t.Fatal(err)
	}
	sub := &process{sp}
	t.Cleanup(func() { _ = sp.Kill(); logIfFailed(t, sp) })

	// The kill waits for a commit and for records of an open transaction in the output: so the killed
	// attempt had written records that the job must abort, after others that it committed.
	adm := b.Admin(t)
	var jobs struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	var live clusterReport
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint completed with records committed and others open in %s: %+v", out, live)
		}
		tc.get(t, "/v1/jobs", &jobs)
		if len(jobs.Jobs) == 1 {
			tc.get(t, "/v1/jobs/"+jobs.Jobs[0].ID, &live)
			if live.Status == "RUNNING" && live.Checkpoints != nil && live.Checkpoints.Completed > 0 && committedAndOpen(t, adm, out) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	before, _ := live.where()
	victim := ""
	for st, tm := range before {
		if strings.Contains(st, "kafka-out") && strings.HasSuffix(st, "[0]") {
			victim = tm
		}
	}
	p := tc.taskManager(victim)
	if p == nil {
		t.Fatalf("the sink's subtask 0 runs on %q, not one of the test's TaskManagers: %v", victim, before)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := sub.exited(t, 120*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, sub.Stderr())
	}
	r := readReport(t, report)
	named := 0
	for _, f := range r.Failovers {
		if f.TaskManager == victim {
			named++
		}
	}
	if r.Status != "FINISHED" || named != 1 {
		t.Fatalf("%s with failovers %+v: want one naming %s", r.Status, r.Failovers, victim)
	}

	// Every running sum of every key once and in order (a key's records sit in one partition).
	sums, want := map[int64]int64{}, map[int64][]int64{}
	for i := range int64(n) {
		sums[i%keys] += i
		want[i%keys] = append(want[i%keys], sums[i%keys])
	}
	read := func(level kgo.IsolationLevel) (map[int64][]int64, int) {
		got := map[int64][]int64{}
		recs := b.ReadTopic(t, out, level)
		for _, r := range recs {
			k := int64(be.BigEndian.Uint64(r.Key))
			got[k] = append(got[k], int64(be.BigEndian.Uint64(r.Value)))
		}
		return got, len(recs)
	}
	committed, nc := read(kgo.ReadCommitted())
	for k, w := range want {
		g := committed[k]
		if len(g) != len(w) {
			t.Fatalf("key %d: read_committed read %d running sums, want %d each once", k, len(g), len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("key %d: running sum %d is %d, want %d", k, i, g[i], w[i])
			}
		}
	}
	if _, nu := read(kgo.ReadUncommitted()); nu <= nc {
		t.Fatalf("read_uncommitted read %d records, read_committed %d: the killed attempt's open transaction held none", nu, nc)
	} else {
		t.Logf("%d records committed, %d written and aborted; killed %s", nc, nu-nc, victim)
	}
	if open := b.OngoingTransactions(t, prefix+"-"); len(open) != 0 {
		t.Fatalf("transactions left Ongoing after the job finished: %+v", open)
	}
}

// committedAndOpen reports whether topic has committed records (a last stable offset above 0) and records of
// an open transaction (a high watermark above the last stable offset) in some partition.
func committedAndOpen(t *testing.T, adm *kadm.Client, topic string) bool {
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
	committed, open := false, false
	lso.Each(func(l kadm.ListedOffset) {
		h, _ := hw.Lookup(topic, l.Partition)
		committed = committed || l.Offset > 0
		open = open || h.Offset > l.Offset
	})
	return committed && open
}

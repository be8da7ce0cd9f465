package kafka_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/connector/kafka"
)

// txnModes are kfake clusters that end transactions as Kafka 4 does by default (transaction.version 2:
// every EndTxn bumps the producer epoch) and as Kafka 3 does (the epoch stays across transactions).
var txnModes = []struct {
	name string
	opts []kfake.Opt
}{
	{"transaction.version 2", nil},
	{"transaction.version 0", []kfake.Opt{kfake.MaxVersions(kversion.V3_9_0())}},
}

func txnCluster(t *testing.T, partitions int32, topic string, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// encodeInt writes v as an 8-byte big-endian value under the key v % 7.
func encodeInt(v int64, key, value []byte) ([]byte, []byte, error) {
	return binary.BigEndian.AppendUint64(key, uint64(v%7)), binary.BigEndian.AppendUint64(value, uint64(v)), nil
}

// readTopic reads topic from the start, read_committed or not, until it has want records (or 20 s
// passed), then 300 ms more, for records that should not be there, and returns the values.
func readTopic(t *testing.T, brokers []string, topic string, committed bool, want int) []int64 {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var vals []int64
	deadline, extra := time.Now().Add(20*time.Second), false
	for {
		if len(vals) >= want && !extra {
			deadline, extra = time.Now().Add(300*time.Millisecond), true
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return vals
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			vals = append(vals, int64(binary.BigEndian.Uint64(r.Value)))
			n++
		})
		if n == 0 && ctx.Err() != nil {
			return vals
		}
	}
}

// openTxns lists the transactional ids with a transaction in state Ongoing.
func openTxns(t *testing.T, brokers []string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrListTransactionsRequest()
	req.StateFilters = []string{"Ongoing"}
	var ids []string
	for _, s := range cl.RequestSharded(context.Background(), req) {
		if s.Err != nil {
			t.Fatal(s.Err)
		}
		for _, st := range s.Resp.(*kmsg.ListTransactionsResponse).TransactionStates {
			ids = append(ids, st.TransactionalID)
		}
	}
	slices.Sort(ids)
	return ids
}

// checkOnce checks that vals hold each of want exactly once.
func checkOnce(t *testing.T, what string, vals []int64, want []int64) {
	t.Helper()
	seen := map[int64]int{}
	for _, v := range vals {
		seen[v]++
	}
	for _, v := range want {
		if seen[v] != 1 {
			t.Fatalf("%s: value %d seen %d times (%d values read, %d wanted)", what, v, seen[v], len(vals), len(want))
		}
		delete(seen, v)
	}
	if len(seen) > 0 {
		t.Fatalf("%s: %d values that were not to be there, e.g. %v", what, len(seen), firstKeys(seen))
	}
}

func firstKeys(m map[int64]int) []int64 {
	var ks []int64
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks[:min(len(ks), 5)]
}

func span(from, to int64) []int64 {
	var vs []int64
	for v := from; v < to; v++ {
		vs = append(vs, v)
	}
	return vs
}

// subtaskCtx is the RuntimeContext of a sink subtask driven by hand: a stand-in for the task, which calls
// the writer as a job would (Write, SnapshotState, NotifyCheckpointComplete, RestoreState, Close).
type subtaskCtx struct {
	runnel.RuntimeContext
	sub, par int
}

func (c subtaskCtx) SubtaskIndex() int     { return c.sub }
func (c subtaskCtx) Parallelism() int      { return c.par }
func (c subtaskCtx) Logger() *slog.Logger  { return quiet }
func (c subtaskCtx) Checkpointing() bool   { return true }
func (c subtaskCtx) Done() <-chan struct{} { return nil }

type eosWriter interface {
	runnel.SinkWriter[int64]
	runnel.CheckpointedWriter
	runnel.CheckpointListener
}

func newWriter(t *testing.T, s runnel.Sink[int64], sub, par int) eosWriter {
	t.Helper()
	w, err := s.CreateWriter(subtaskCtx{sub: sub, par: par})
	if err != nil {
		t.Fatal(err)
	}
	return w.(eosWriter)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeSpan(t *testing.T, w eosWriter, from, to int64) {
	t.Helper()
	for v := from; v < to; v++ {
		must(t, w.Write(v))
	}
}

func snapshot(t *testing.T, w eosWriter, id int64) []byte {
	t.Helper()
	b, err := w.SnapshotState(id)
	must(t, err)
	return b
}

// txnView is what the writer scenarios see of a cluster: the values of topic a read_committed (or a
// read_uncommitted) reader reads, at least n of them, and the transactional ids in state Ongoing.
type txnView struct {
	read    func(committed bool, n int) []int64
	ongoing func() []string
	// exact: read_uncommitted reads exactly the records written (the real broker); kfake may show more.
	exact bool
}

// TestExactlyOnceWriterCommitsWhatItsCheckpointLists drives one subtask's writer through a failure: a
// checkpoint completes but its notification is lost, a second one is prepared but never completes, and
// more records are written. The next attempt restores the first checkpoint: it commits that checkpoint's
// transaction and aborts the others (read_committed sees the first checkpoint's records once,
// read_uncommitted sees every record written), and it fences the failed attempt. A transaction committed
// again, by a restore of a checkpoint whose notification had come, or of an older checkpoint, changes
// nothing; at the end no transaction is open.
func TestExactlyOnceWriterCommitsWhatItsCheckpointLists(t *testing.T) {
	for _, mode := range txnModes {
		t.Run(mode.name, func(t *testing.T) {
			brokers := txnCluster(t, 3, "out", mode.opts...)
			s := kafka.Sink(kafka.SinkConfig{Brokers: brokers, Topic: "out", Guarantee: kafka.ExactlyOnce,
				TransactionalIDPrefix: "eos", Linger: time.Millisecond}, encodeInt)
			commitsWhatItsCheckpointLists(t, s, "eos", txnView{
				read:    func(committed bool, n int) []int64 { return readTopic(t, brokers, "out", committed, n) },
				ongoing: func() []string { return openTxns(t, brokers) },
			})
		})
	}
}

// commitsWhatItsCheckpointLists is the scenario of TestExactlyOnceWriterCommitsWhatItsCheckpointLists
// for the sink s, whose transactional ids start with prefix, on the cluster v shows.
func commitsWhatItsCheckpointLists(t *testing.T, s runnel.Sink[int64], prefix string, v txnView) {
	t.Helper()
	w1 := newWriter(t, s, 0, 1)
	writeSpan(t, w1, 0, 10)
	st1 := snapshot(t, w1, 1) // checkpoint 1 completes; w1 never hears of it
	writeSpan(t, w1, 10, 20)
	snapshot(t, w1, 2) // checkpoint 2 never completes
	writeSpan(t, w1, 20, 30)
	must(t, w1.Flush())
	if got, want := fmt.Sprint(v.ongoing()), fmt.Sprintf("[%[1]s-0-0 %[1]s-0-1 %[1]s-0-2]", prefix); got != want {
		t.Fatalf("open transactions before the failure: %s, want %s", got, want)
	}

	w2 := newWriter(t, s, 0, 1)
	must(t, w2.RestoreState(st1))
	w1.Close() // its abort finds the transaction aborted already, its epoch fenced
	checkOnce(t, "read_committed after the restore", v.read(true, 10), span(0, 10))
	if got := v.read(false, 30); len(got) < 30 || v.exact && len(got) != 30 {
		t.Fatalf("read_uncommitted sees %d records, want the 30 written (the aborted ones too)", len(got))
	}
	if got := v.ongoing(); len(got) != 0 {
		t.Fatalf("open transactions after the restore: %v", got)
	}

	writeSpan(t, w2, 30, 40)
	st3 := snapshot(t, w2, 3)
	must(t, w2.NotifyCheckpointComplete(3))
	writeSpan(t, w2, 40, 45)
	st4 := snapshot(t, w2, 4)
	must(t, w2.NotifyCheckpointComplete(4))
	must(t, w2.Close())

	// Commit again: the newest checkpoint (notified already), an older one, and the oldest.
	for _, st := range [][]byte{st4, st3, st1} {
		w := newWriter(t, s, 0, 1)
		must(t, w.RestoreState(st))
		must(t, w.Close())
	}
	want := append(span(0, 10), span(30, 45)...)
	checkOnce(t, "read_committed after the commits again", v.read(true, len(want)), want)
	if got := v.ongoing(); len(got) != 0 {
		t.Fatalf("open transactions at the end: %v", got)
	}
}

// TestExactlyOnceStartAbortsLeftovers: transactions that an earlier run left prepared (it was cancelled
// before their checkpoint's notification), also those of a subtask beyond the new parallelism, are
// aborted by the subtasks of a run that starts without state, each of its own ids and of the ids of
// subtasks i with i mod parallelism equal to its index; other prefixes are left alone.
func TestExactlyOnceStartAbortsLeftovers(t *testing.T) {
	brokers := txnCluster(t, 2, "out", kfake.SeedTopics(1, "other"))
	cfg := kafka.SinkConfig{Brokers: brokers, Topic: "out", Guarantee: kafka.ExactlyOnce, TransactionalIDPrefix: "run", Linger: time.Millisecond}
	other := cfg // another job's sink, whose open transaction holds back read_committed readers of "other" only
	other.TransactionalIDPrefix, other.Topic = "other", "other"
	for _, c := range []struct {
		cfg      kafka.SinkConfig
		sub, par int
	}{{cfg, 0, 4}, {cfg, 1, 4}, {cfg, 3, 4}, {other, 0, 1}} {
		w := newWriter(t, kafka.Sink(c.cfg, encodeInt), c.sub, c.par)
		writeSpan(t, w, int64(c.sub*10), int64(c.sub*10+5))
		snapshot(t, w, 7)
		must(t, w.Close()) // the prepared transaction stays open: its checkpoint may have completed
	}
	if got := openTxns(t, brokers); fmt.Sprint(got) != "[other-0-0 run-0-0 run-1-0 run-3-0]" {
		t.Fatalf("open transactions left: %v", got)
	}
	s := kafka.Sink(cfg, encodeInt)
	w0, w1 := newWriter(t, s, 0, 2), newWriter(t, s, 1, 2)
	must(t, w0.Write(100))
	must(t, w1.Write(101))
	snapshot(t, w0, 1)
	snapshot(t, w1, 1)
	must(t, w0.NotifyCheckpointComplete(1))
	must(t, w1.NotifyCheckpointComplete(1))
	must(t, w0.Close())
	must(t, w1.Close())
	if got := openTxns(t, brokers); fmt.Sprint(got) != "[other-0-0]" {
		t.Fatalf("open transactions after a new run of 2 subtasks: %v", got)
	}
	checkOnce(t, "read_committed", readTopic(t, brokers, "out", true, 2), []int64{100, 101})
}

// eosJob writes the values 0..n-1 (from two generator subtasks, as sub*1e6+seq) through a map to the
// Kafka sink, exactly once, with checkpoints every 40 ms.
func eosJob(brokers []string, n int, opts ...runnel.Option) *runnel.Environment {
	env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 40 * time.Millisecond}),
		runnel.WithRestartStrategy("fixed-delay:attempts=10,delay=0s")}, opts...)...)
	src := runnel.FromSource(env, generatorSource(n, 20_000)).Name("source")
	m := runnel.Map(src, func(v int64) (int64, error) { return v, nil }).Name("map")
	m.SinkTo(kafka.Sink(kafka.SinkConfig{Brokers: brokers, Topic: "out", Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: "job", Linger: time.Millisecond}, encodeInt)).Name("kafka")
	return env
}

// generatorSource emits n values over two subtasks, sub*1e6+seq, at rate records per second per subtask.
func generatorSource(n int, rate float64) runnel.Source[int64] {
	return connector.Generator(func(sub int, seq uint64) int64 { return int64(sub)*1e6 + int64(seq) },
		connector.GeneratorOptions{TotalRecords: uint64(n), RatePerSubtask: rate})
}

func generated(n int) []int64 {
	var want []int64
	for sub := range 2 {
		for seq := range (n + 1 - sub) / 2 {
			want = append(want, int64(sub)*1e6+int64(seq))
		}
	}
	return want
}

// TestExactlyOnceSinkUnderFailures runs a bounded job whose sink fails twice, under region and task
// failover: a read_committed reader sees every record exactly once (the final checkpoint commits the
// last ones), and no transaction is left open.
func TestExactlyOnceSinkUnderFailures(t *testing.T) {
	const n = 16_000
	for _, failover := range []string{"region", "task"} {
		t.Run(failover, func(t *testing.T) {
			brokers := txnCluster(t, 3, "out")
			env := eosJob(brokers, n, runnel.WithFailover(failover),
				runnel.WithFailureInjection("kafka[0]@2500", "kafka[1]@5000"))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "eos")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v, %+v", err, res)
			}
			if len(res.Failovers) != 2 {
				t.Fatalf("%d failovers, want 2: %+v", len(res.Failovers), res.Failovers)
			}
			want := generated(n)
			committed := readTopic(t, brokers, "out", true, len(want))
			checkOnce(t, "read_committed", committed, want)
			all := readTopic(t, brokers, "out", false, len(want))
			t.Logf("%s failover: read_uncommitted sees %d records, read_committed %d; failovers %s, %s", failover, len(all), len(committed),
				res.Failovers[0].Strategy+res.Failovers[0].Fallback, res.Failovers[1].Strategy+res.Failovers[1].Fallback)
			if got := openTxns(t, brokers); len(got) != 0 {
				t.Fatalf("open transactions at the end: %v", got)
			}
		})
	}
}

// TestExactlyOnceSinkUnderApproximateFailover: the map before the sink fails under approximate failover,
// which restarts it with the sink while the sources go on. The sink aborts what it wrote after the
// restored checkpoint and does not write the records lost in flight again: a read_committed reader
// misses exactly the records the failover reports lost, and sees no record twice.
func TestExactlyOnceSinkUnderApproximateFailover(t *testing.T) {
	const n = 16_000
	brokers := txnCluster(t, 3, "out")
	env := eosJob(brokers, n, runnel.WithChaining(false), runnel.WithFailureInjection("map[0]@3000"),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 40 * time.Millisecond, ApproximateLocalRecovery: true}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "eos-approximate")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if len(res.Failovers) != 1 {
		t.Fatalf("failovers %+v", res.Failovers)
	}
	lost := res.Failovers[0].RecordsLost
	want := generated(n)
	got := readTopic(t, brokers, "out", true, len(want)-int(lost))
	seen := map[int64]int{}
	for _, v := range got {
		if seen[v]++; seen[v] > 1 {
			t.Fatalf("value %d written twice", v)
		}
	}
	missing := 0
	for _, v := range want {
		if seen[v] == 0 {
			missing++
		}
	}
	if uint64(missing) != lost || len(got) != len(want)-missing {
		t.Fatalf("read_committed misses %d of %d records and holds %d; the failover reports %d lost", missing, len(want), len(got), lost)
	}
	t.Logf("approximate failover: %d records lost, restarted %v", lost, res.Failovers[0].Restarted)
	if got := openTxns(t, brokers); len(got) != 0 {
		t.Fatalf("open transactions at the end: %v", got)
	}
}

// TestExactlyOnceSinkRefusedAtSubmission: a transaction timeout shorter than the checkpoint interval plus
// the recovery time is refused naming both values, and so is exactly-once without checkpoints or without
// a transactional id prefix; nothing is written.
func TestExactlyOnceSinkRefusedAtSubmission(t *testing.T) {
	brokers := txnCluster(t, 1, "out")
	for _, c := range []struct {
		name     string
		interval time.Duration
		cfg      kafka.SinkConfig
		want     []string
	}{
		{"timeout", time.Minute, kafka.SinkConfig{TransactionalIDPrefix: "p", TransactionTimeout: 90 * time.Second},
			[]string{`sink "kafka"`, "transaction timeout 1m30s", "checkpoint interval 1m0s", "recovery time 1m0s", "at least 2m0s", "transaction.max.timeout.ms"}},
		{"timeout and recovery", 10 * time.Second, kafka.SinkConfig{TransactionalIDPrefix: "p", TransactionTimeout: time.Minute, RecoveryTime: 5 * time.Minute},
			[]string{"transaction timeout 1m0s", "checkpoint interval 10s", "recovery time 5m0s"}},
		{"no checkpoints", 0, kafka.SinkConfig{TransactionalIDPrefix: "p"}, []string{"takes no periodic checkpoints"}},
		{"no prefix", time.Second, kafka.SinkConfig{}, []string{"TransactionalIDPrefix"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Brokers, cfg.Topic, cfg.Guarantee = brokers, "out", kafka.ExactlyOnce
			env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: c.interval}))
			runnel.FromSource(env, connector.Collection([]int64{1, 2})).SinkTo(kafka.Sink(cfg, encodeInt)).Name("kafka")
			_, err := env.Execute(context.Background(), "refused")
			if err == nil {
				t.Fatal("the job ran")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%q does not say %q", err, w)
				}
			}
		})
	}
	if got := readTopic(t, brokers, "out", false, 0); len(got) != 0 {
		t.Fatalf("refused jobs wrote %d records", len(got))
	}
}

// TestExactlyOnceCancelLeavesNothingOpen cancels an unbounded job between checkpoints: the open
// transaction is aborted (read_uncommitted saw its records, read_committed never does) and none stays
// open.
func TestExactlyOnceCancelLeavesNothingOpen(t *testing.T) {
	brokers := txnCluster(t, 2, "out")
	env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithParallelism(1),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Minute}))
	src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
		connector.GeneratorOptions{RatePerSubtask: 2000}))
	src.SinkTo(kafka.Sink(kafka.SinkConfig{Brokers: brokers, Topic: "out", Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: "cancel", Linger: time.Millisecond}, encodeInt)).Name("kafka")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		res, err := env.Execute(ctx, "cancelled")
		if err == nil && res.Status != "CANCELED" {
			err = fmt.Errorf("status %s", res.Status)
		}
		done <- err
	}()
	if got := readTopic(t, brokers, "out", false, 100); len(got) < 100 {
		cancel()
		t.Fatalf("read_uncommitted sees %d records", len(got))
	}
	if got := openTxns(t, brokers); fmt.Sprint(got) != "[cancel-0-0]" {
		t.Fatalf("open transactions while running: %v", got)
	}
	cancel()
	must(t, <-done)
	if got := openTxns(t, brokers); len(got) != 0 {
		t.Fatalf("open transactions after the cancel: %v", got)
	}
	if got := readTopic(t, brokers, "out", true, 0); len(got) != 0 {
		t.Fatalf("read_committed sees %d records of a job cancelled before its first checkpoint", len(got))
	}
}

// TestExactlyOnceSavepointStopAndResume stops a job with a savepoint halfway and resumes it from the
// savepoint: read_committed sees every record once. What the stopped job left open (its transactions after
// the savepoint's barrier, and the savepoint's own if its completion did not reach the sink) is settled by the
// resumed job: none stays open.
func TestExactlyOnceSavepointStopAndResume(t *testing.T) {
	brokers := txnCluster(t, 3, "out")
	const n = 100_000 // 2.5 s of input: the stop comes while the sources run
	dir := t.TempDir() + "/sp"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		res, err := eosJob(brokers, n, runnel.WithSavepointOnStop(dir)).Execute(ctx, "first")
		if err == nil && (res.Status != "CANCELED" || res.Savepoint != dir) {
			err = fmt.Errorf("status %s, savepoint %q", res.Status, res.Savepoint)
		}
		done <- err
	}()
	if got := readTopic(t, brokers, "out", true, 2000); len(got) < 2000 || len(got) >= n {
		cancel()
		t.Fatalf("before the stop read_committed sees %d records", len(got))
	}
	cancel()
	must(t, <-done)
	t.Logf("open after the stop: %v", openTxns(t, brokers))
	res, err := eosJob(brokers, n, runnel.WithRestoreFrom(dir)).Execute(context.Background(), "second")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	want := generated(n)
	checkOnce(t, "read_committed", readTopic(t, brokers, "out", true, len(want)), want)
	if got := openTxns(t, brokers); len(got) != 0 {
		t.Fatalf("open transactions at the end: %v", got)
	}
}

// TestExactlyOnceFailedJobLeavesNothingOpen: a job that fails for good (no restarts) before its first
// checkpoint aborts its open transactions as it closes.
func TestExactlyOnceFailedJobLeavesNothingOpen(t *testing.T) {
	brokers := txnCluster(t, 3, "out")
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet), runnel.WithRestartStrategy("none"),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Minute}),
		runnel.WithFailureInjection("kafka[1]@3000"))
	runnel.FromSource(env, generatorSource(20_000, 10_000)).Name("source").SinkTo(kafka.Sink(kafka.SinkConfig{Brokers: brokers,
		Topic: "out", Guarantee: kafka.ExactlyOnce, TransactionalIDPrefix: "failed", Linger: time.Millisecond}, encodeInt)).Name("kafka")
	res, err := env.Execute(context.Background(), "failed")
	if err == nil || res == nil || res.Status != "FAILED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if got := readTopic(t, brokers, "out", false, 3000); len(got) < 3000 {
		t.Fatalf("read_uncommitted sees %d records, want the 3000 before the failure at least", len(got))
	}
	if got := openTxns(t, brokers); len(got) != 0 {
		t.Fatalf("open transactions after the job failed: %v", got)
	}
	if got := readTopic(t, brokers, "out", true, 0); len(got) != 0 {
		t.Fatalf("read_committed sees %d records", len(got))
	}
}

// TestGuaranteeChangeAcrossASavepoint: an at-least-once sink restored from an exactly-once sink's state
// commits the transactions the state lists and aborts the rest before it writes without transactions; an
// exactly-once sink restored from an at-least-once one's (empty) state starts afresh.
func TestGuaranteeChangeAcrossASavepoint(t *testing.T) {
	brokers := txnCluster(t, 2, "out")
	cfg := kafka.SinkConfig{Brokers: brokers, Topic: "out", Guarantee: kafka.ExactlyOnce, TransactionalIDPrefix: "switch", Linger: time.Millisecond}
	w1 := newWriter(t, kafka.Sink(cfg, encodeInt), 0, 1)
	writeSpan(t, w1, 0, 10)
	st := snapshot(t, w1, 1)
	writeSpan(t, w1, 10, 20)
	must(t, w1.Flush())
	alo := cfg
	alo.Guarantee = kafka.AtLeastOnce
	w2 := newWriter(t, kafka.Sink(alo, encodeInt), 0, 1)
	must(t, w2.RestoreState(st))
	w1.Close()
	writeSpan(t, w2, 20, 25)
	st2 := snapshot(t, w2, 2)
	must(t, w2.Close())
	if got := openTxns(t, brokers); len(got) != 0 {
		t.Fatalf("open transactions after the at-least-once restore: %v", got)
	}
	w3 := newWriter(t, kafka.Sink(cfg, encodeInt), 0, 1)
	must(t, w3.RestoreState(st2))
	writeSpan(t, w3, 25, 30)
	snapshot(t, w3, 3)
	must(t, w3.NotifyCheckpointComplete(3))
	must(t, w3.Close())
	want := append(span(0, 10), span(20, 30)...)
	checkOnce(t, "read_committed", readTopic(t, brokers, "out", true, len(want)), want)
}

// TestExactlyOnceWriterAbortsWhatAbortedCheckpointsPrepared drives one subtask's writer through aborted
// checkpoints. While it runs, an abort keeps the checkpoint's transaction: the next checkpoint covers its
// records too, and its completion commits them (none is lost). At Close it aborts the transactions
// prepared for the checkpoints it heard aborted when it heard every later one it took aborted too, and
// keeps those a checkpoint that may still complete lists, for the restore of that checkpoint to commit.
func TestExactlyOnceWriterAbortsWhatAbortedCheckpointsPrepared(t *testing.T) {
	for _, mode := range txnModes {
		for _, abortFour := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/checkpoint 4 aborted %v", mode.name, abortFour), func(t *testing.T) {
				brokers := txnCluster(t, 3, "out", mode.opts...)
				s := kafka.Sink(kafka.SinkConfig{Brokers: brokers, Topic: "out", Guarantee: kafka.ExactlyOnce,
					TransactionalIDPrefix: "aborts", Linger: time.Millisecond}, encodeInt)
				w := newWriter(t, s, 0, 1)
				al := w.(runnel.CheckpointAbortListener)
				writeSpan(t, w, 0, 10)
				snapshot(t, w, 1)
				writeSpan(t, w, 10, 20)
				snapshot(t, w, 2)
				must(t, al.NotifyCheckpointAborted(1))
				writeSpan(t, w, 20, 30)
				snapshot(t, w, 3)
				must(t, w.NotifyCheckpointComplete(3))
				checkOnce(t, "read_committed after checkpoint 3", readTopic(t, brokers, "out", true, 30), span(0, 30))

				writeSpan(t, w, 30, 40)
				st4 := snapshot(t, w, 4)
				writeSpan(t, w, 40, 50)
				snapshot(t, w, 5)
				writeSpan(t, w, 50, 55)
				must(t, w.Flush())
				must(t, al.NotifyCheckpointAborted(5))
				must(t, al.NotifyCheckpointAborted(6)) // never snapshotted: nothing to do
				if abortFour {
					must(t, al.NotifyCheckpointAborted(4))
				}
				must(t, w.Close())
				open, want := openTxns(t, brokers), []string{"aborts-0-0"} // checkpoint 4's, the pool's first producer
				if abortFour {
					want = nil
				}
				if !slices.Equal(open, want) {
					t.Fatalf("open transactions after Close: %v, want %v", open, want)
				}
				if got := readTopic(t, brokers, "out", false, 55); len(got) != 55 {
					t.Fatalf("read_uncommitted sees %d records, want the 55 written", len(got))
				}
				if abortFour {
					checkOnce(t, "read_committed after Close", readTopic(t, brokers, "out", true, 30), span(0, 30))
					return
				}
				w2 := newWriter(t, s, 0, 1)
				must(t, w2.RestoreState(st4))
				must(t, w2.Close())
				checkOnce(t, "read_committed after the restore of checkpoint 4", readTopic(t, brokers, "out", true, 40), span(0, 40))
				if got := openTxns(t, brokers); len(got) != 0 {
					t.Fatalf("open transactions after the restore: %v", got)
				}
			})
		}
	}
}

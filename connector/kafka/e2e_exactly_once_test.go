package kafka_test

// End-to-end exactly once on the real broker: the Kafka sink's transactions as Kafka itself commits and
// aborts them, read back by a read_committed verifier (every output record once, in order) and a
// read_uncommitted reader (the aborted records were written: the failures really hit open transactions).

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector/kafka"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

// e2eEOSSink is the exactly-once sink of the end-to-end jobs, writing to topic with transactional ids
// under prefix.
func e2eEOSSink(b *kafkabroker.Broker, topic, prefix string) runnel.Sink[e2eKV] {
	return kafka.Sink(kafka.SinkConfig{Brokers: []string{b.Addr}, Topic: topic, Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: prefix}, e2eEncode)
}

// e2eWindowSums are, per key, the sums of e2eProduce's values in tumbling event-time windows of size ms,
// a value's event time being the value itself (in ms), in window order.
func e2eWindowSums(n int, size int64) map[int64][]int64 {
	want := map[int64][]int64{}
	last := map[int64]int64{}
	for i := range int64(n) {
		k, w := i%e2eKeys, i/size
		if s := want[k]; len(s) == 0 || last[k] != w {
			want[k] = append(s, 0)
			last[k] = w
		}
		want[k][len(want[k])-1] += i
	}
	return want
}

// e2eWhileOpen is a pass-through map that acts once, from the at-th record that passes it (over all
// subtasks and attempts) on, at the first record at which the acting subtask's sink has records of its open
// transaction in the output topic: so that a failure aborts records Kafka holds (a read_uncommitted reader
// then sees them: the read_committed verifier skips them rather than their never being written), and a
// cancel or a failure for good leaves a transaction to clean up. Once armed it passes one record per look,
// every 10 ms, so that records go on flowing into the transaction meanwhile but do not run out. The map is chained to the sink (forward edge,
// same parallelism), so its subtask index is the sink's. act's error fails the subtask.
type e2eWhileOpen struct {
	runnel.RichBase
	topic  string
	prefix string
	at     int64 // < 0: never act
	// afterCommit makes it act only once some records of the output topic are committed: a checkpoint
	// completed (a broker's first transactions take seconds to set up).
	afterCommit bool
	act         func() error
	state       *e2eWhileOpenState
	subtask     int
	lastCheck   time.Time
}

// e2eWhileOpenState is shared by a job's e2eWhileOpen subtasks and read by the test.
type e2eWhileOpenState struct {
	adm     *kadm.Client
	seen    atomic.Int64
	fired   atomic.Bool
	lastErr atomic.Value // error: the last failed look
}

func newE2EWhileOpenState(t *testing.T, b *kafkabroker.Broker) *e2eWhileOpenState {
	return &e2eWhileOpenState{adm: b.Admin(t)}
}

// check fails the test unless the action ran with a transaction open.
func (s *e2eWhileOpenState) check(t *testing.T) {
	t.Helper()
	if !s.fired.Load() {
		e, _ := s.lastErr.Load().(error)
		t.Fatalf("the action never found its sink's open transaction with records in the topic (%d records passed; last error: %v)", s.seen.Load(), e)
	}
}

func e2eFailure() error { return errors.New("e2e: injected failure with a transaction open") }

func (f *e2eWhileOpen) Open(ctx runnel.RuntimeContext) error {
	f.subtask = ctx.SubtaskIndex()
	return nil
}

func (f *e2eWhileOpen) Map(v e2eKV) (e2eKV, error) {
	if n := f.state.seen.Add(1); f.at < 0 || n < f.at || f.state.fired.Load() {
		return v, nil
	}
	// Armed: a look every 10 ms. Without afterCommit the input is all in the topic before the job starts:
	// one record per look, so that it cannot run out before the sink's open transaction has records in the
	// topic (on a quiet machine the whole input takes a fraction of a second); the records already passed
	// reach the broker meanwhile, as the sink produces them in the background. With afterCommit the input
	// arrives over seconds and records pass at full speed between looks: slowed, they would queue ahead of
	// the checkpoint barriers, and the commit the look waits for would never come.
	if wait := 10*time.Millisecond - time.Since(f.lastCheck); wait > 0 {
		if f.afterCommit {
			return v, nil
		}
		time.Sleep(wait)
	}
	f.lastCheck = time.Now()
	open, err := f.openRecords()
	if err != nil {
		f.state.lastErr.Store(err)
	}
	if !open || !f.state.fired.CompareAndSwap(false, true) {
		return v, nil
	}
	return v, f.act()
}

// openRecords reports whether a transaction of this subtask's sink is Ongoing and a partition it writes to
// has records beyond the last stable offset (records of an open transaction).
func (f *e2eWhileOpen) openRecords() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := f.state.adm
	mine := f.prefix + "-" + strconv.Itoa(f.subtask) + "-"
	listed, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		return false, err
	}
	var ids []string
	for _, tx := range listed.Sorted() {
		if strings.HasPrefix(tx.TxnID, mine) {
			ids = append(ids, tx.TxnID)
		}
	}
	if len(ids) == 0 {
		return false, nil
	}
	open, err := adm.DescribeTransactions(ctx, ids...)
	if err != nil {
		return false, err
	}
	hw, err := adm.ListEndOffsets(ctx, f.topic)
	if err != nil {
		return false, err
	}
	lso, err := adm.ListCommittedOffsets(ctx, f.topic)
	if err != nil {
		return false, err
	}
	if f.afterCommit {
		var committed int64
		lso.Each(func(o kadm.ListedOffset) { committed += o.Offset })
		if committed == 0 {
			return false, nil
		}
	}
	for _, tx := range open.Sorted() {
		for _, tp := range tx.Topics.Sorted() {
			for _, p := range tp.Partitions {
				h, _ := hw.Lookup(f.topic, p)
				l, _ := lso.Lookup(f.topic, p)
				if tp.Topic == f.topic && h.Offset > l.Offset {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// e2eEOSCase is one exactly-once pipeline under failures.
type e2eEOSCase struct {
	name     string
	failover string
	window   bool // an event-time window rather than a running sum
}

// TestBrokerExactlyOnceUnderFailures runs Kafka (3 partitions) → keyed state or an event-time window →
// Kafka with the exactly-once sink, failing twice (once by WithFailureInjection, once while the failing
// subtask's transaction has records in the topic) under region and under task failover. The bounded job's
// last records are committed by the final checkpoint. Then a read_committed verifier reads every expected
// output record once and in order, nothing else; a read_uncommitted reader reads more (the aborted
// transactions' records); and no transaction of the job is left Ongoing.
func TestBrokerExactlyOnceUnderFailures(t *testing.T) {
	b := kafkabroker.Shared(t)
	const n = 30_000
	in := b.Name("e2e-eos-in")
	b.CreateTopic(t, in, 3)
	e2eProduce(t, b, in, n)
	for _, tc := range []e2eEOSCase{
		{"running sum, region failover", "region", false},
		{"running sum, task failover", "task", false},
		{"event-time window, region failover", "region", true},
		{"event-time window, task failover", "task", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slug := strings.NewReplacer(" ", "-", ",", "").Replace(tc.name)
			out, prefix := b.Name("e2e-eos-out-"+slug), b.Name("e2e-eos-"+slug)
			b.CreateTopic(t, out, 3)
			st := newE2EWhileOpenState(t, b)
			env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(e2eQuiet), runnel.WithFailover(tc.failover),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 100 * time.Millisecond}),
				runnel.WithFailureInjection("keyed[0]@4000"), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"))
			src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: []string{b.Addr}, Topic: in, Bounded: true}, e2eDecode)).
				Name("kafka-in").WithCodec(codec.MustStruct[e2eKV]())
			var keyed *runnel.Stream[e2eKV]
			if tc.window {
				timed := src.WithTimestamps(runnel.MonotonousTimestamps[e2eKV]().WithTimestampAssigner(func(v e2eKV, _ int64) int64 { return v.F1 }))
				keyed = runnel.WindowReduce(runnel.Window(runnel.KeyBy(timed, func(v e2eKV) int64 { return v.F0 }), runnel.TumblingEventTimeWindows(100*time.Millisecond)),
					func(a, b e2eKV) (e2eKV, error) { a.F1 += b.F1; return a, nil }).Name("keyed")
			} else {
				keyed = runnel.Reduce(runnel.KeyBy(src, func(v e2eKV) int64 { return v.F0 }),
					func(a, b e2eKV) (e2eKV, error) { a.F1 += b.F1; return a, nil }).Name("keyed")
			}
			failAt := int64(15_000) // past the first failure's restart
			if tc.window {
				failAt = 1_500 // a window result per key and 100 ms: 3900 in all
			}
			runnel.MapWith(keyed, func() runnel.MapFunction[e2eKV, e2eKV] {
				return &e2eWhileOpen{topic: out, prefix: prefix, at: failAt, act: e2eFailure, state: st}
			}).Name("fail").SinkTo(e2eEOSSink(b, out, prefix)).Name("kafka-out")

			ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "e2e exactly once")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v, %+v", err, res)
			}
			// Two injected failures. A restore may fail too and make a failover of its own, while the
			// failed attempt's commit of the same transaction is still in flight (Kafka answers
			// CONCURRENT_TRANSACTIONS): logged here, since the output must be exactly once all the same.
			injected := 0
			for _, f := range res.Failovers {
				if strings.Contains(f.Cause, "injected failure") {
					injected++
				} else {
					t.Logf("a failover not injected: %s", f.Cause)
				}
			}
			if injected != 2 {
				t.Fatalf("failovers %+v, want 2 injected", res.Failovers)
			}
			st.check(t)

			want := e2eRunningSums(n)
			if tc.window {
				want = e2eWindowSums(n, 100)
			}
			committed, uncommitted := e2eCheckExactlyOnce(t, b, out, want)
			if uncommitted <= committed {
				t.Fatalf("read_uncommitted read %d records, read_committed %d: no aborted records, the failures hit no open transaction", uncommitted, committed)
			}
			t.Logf("%d records committed, %d more written and aborted", committed, uncommitted-committed)
			if open := b.OngoingTransactions(t, prefix+"-"); len(open) != 0 {
				t.Fatalf("transactions left Ongoing after the job finished: %+v", open)
			}
		})
	}
}

// e2eCheckExactlyOnce reads topic with read_committed and checks that each key's records are want's, each
// once and in order, and nothing else; it returns how many records read_committed and read_uncommitted
// readers read.
func e2eCheckExactlyOnce(t *testing.T, b *kafkabroker.Broker, topic string, want map[int64][]int64) (committed, uncommitted int) {
	t.Helper()
	got := e2eRead(t, b, topic, kgo.ReadCommitted())
	for k, w := range want {
		committed += len(got[k])
		if g := got[k]; !slicesEqual(g, w) {
			t.Fatalf("key %d: read_committed read %d records, want %d, each once and in order %s", k, len(g), len(w), e2eFirstDiff(g, w))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read_committed read %d keys, want %d", len(got), len(want))
	}
	for _, g := range e2eRead(t, b, topic, kgo.ReadUncommitted()) {
		uncommitted += len(g)
	}
	return committed, uncommitted
}

// e2eSumEOSJob is the running sum of e2eSumJob with the e2eWhileOpen map before the exactly-once sink.
func e2eSumEOSJob(env *runnel.Environment, b *kafkabroker.Broker, in, out, prefix string, bounded bool, w *e2eWhileOpen) {
	e2eSumEOSJobAt(env, b, in, out, prefix, bounded, w, false)
}

// e2eSumEOSJobAt is e2eSumEOSJob with the e2eWhileOpen map chained to the sink, or, upstream, to the
// source: then the subtask it acts in is not a sink subtask (it watches the sink subtask of its index).
func e2eSumEOSJobAt(env *runnel.Environment, b *kafkabroker.Broker, in, out, prefix string, bounded bool, w *e2eWhileOpen, upstream bool) {
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: []string{b.Addr}, Topic: in, Bounded: bounded}, e2eDecode)).
		Name("kafka-in").WithCodec(codec.MustStruct[e2eKV]())
	w.topic, w.prefix = out, prefix
	whileOpen := func(s *runnel.Stream[e2eKV]) *runnel.Stream[e2eKV] {
		return runnel.MapWith(s, func() runnel.MapFunction[e2eKV, e2eKV] { c := *w; return &c }).Name("while-open")
	}
	if upstream {
		src = whileOpen(src)
	}
	sums := runnel.Reduce(runnel.KeyBy(src, func(v e2eKV) int64 { return v.F0 }),
		func(a, b e2eKV) (e2eKV, error) { a.F1 += b.F1; return a, nil }).Name("keyed")
	if !upstream {
		sums = whileOpen(sums)
	}
	sums.SinkTo(e2eEOSSink(b, out, prefix)).Name("kafka-out")
}

// TestBrokerExactlyOnceFinalCheckpoint runs a bounded job whose checkpoint interval is longer than the
// job: no periodic checkpoint commits anything, so only the final checkpoint, taken when every input ended,
// can commit the records, and a read_committed reader must still read them all once the job finished.
func TestBrokerExactlyOnceFinalCheckpoint(t *testing.T) {
	b := kafkabroker.Shared(t)
	const n = 5_000
	in, out, prefix := b.Name("e2e-final-in"), b.Name("e2e-final-out"), b.Name("e2e-final")
	b.CreateTopic(t, in, 3)
	b.CreateTopic(t, out, 3)
	e2eProduce(t, b, in, n)
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(e2eQuiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Minute}))
	e2eSumEOSJob(env, b, in, out, prefix, true, &e2eWhileOpen{at: -1, state: &e2eWhileOpenState{}})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "e2e final checkpoint")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	e2eCheckExactlyOnce(t, b, out, e2eRunningSums(n))
	if open := b.OngoingTransactions(t, prefix+"-"); len(open) != 0 {
		t.Fatalf("transactions left Ongoing after the job finished: %+v", open)
	}
}

// e2eEnd is how e2eEndWhileOpen ends a job.
type e2eEnd int

const (
	e2eCancel            e2eEnd = iota // the job's context cancelled, by the test, once a checkpoint committed records
	e2eFailForGood                     // a failure with no restart
	e2eStopWithSavepoint               // cancelled with WithSavepointOnStop
	// e2eExhausted: a failure injected early into the map upstream of the sink (chained to the source) is
	// restarted, and a second one, injected into the same subtask once it heard checkpoint 5 complete
	// (so that records were committed before), exhausts the restart strategy (one restart). The
	// e2eWhileOpen map does not act.
	e2eExhausted
)

// e2eEndWhileOpen runs the unbounded exactly-once running sum over in (which holds 30000 records) into a
// new topic, and ends it as end says at the 10000th running sum, once the ending subtask's sink has records
// of an open transaction in the topic. It returns the output topic, the transactional id prefix, the
// savepoint directory and the job's result.
func e2eEndWhileOpen(t *testing.T, b *kafkabroker.Broker, in, name string, end e2eEnd) (out, prefix, savepoint string, res *runnel.JobResult) {
	return e2eEndWhileOpenLogged(t, b, in, name, end, e2eQuiet)
}

// e2eEndWhileOpenLogged is e2eEndWhileOpen with the job's logger given.
func e2eEndWhileOpenLogged(t *testing.T, b *kafkabroker.Broker, in, name string, end e2eEnd, log *slog.Logger) (out, prefix, savepoint string, res *runnel.JobResult) {
	t.Helper()
	slug := strings.ReplaceAll(name, " ", "-")
	out, prefix = b.Name("e2e-end-out-"+slug), b.Name("e2e-end-"+slug)
	b.CreateTopic(t, out, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	opts := []runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(log),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 100 * time.Millisecond}), runnel.WithRestartStrategy("none")}
	savepoint = filepath.Join(t.TempDir(), "savepoint")
	act, status, upstream := func() error { stop(); return nil }, "CANCELED", false
	switch end {
	case e2eFailForGood:
		act, status = e2eFailure, "FAILED"
	case e2eStopWithSavepoint:
		opts = append(opts, runnel.WithSavepointOnStop(savepoint))
	case e2eExhausted:
		act, status, upstream = nil, "FAILED", true
		opts = append(opts, runnel.WithRestartStrategy("fixed-delay:attempts=1,delay=0s"),
			runnel.WithFailureInjection("while-open[0]@1000", "while-open[0]@chk-5"))
	}
	st := newE2EWhileOpenState(t, b)
	at := int64(10_000)
	if end == e2eCancel {
		// The test cancels, from a goroutine of its own, once a checkpoint committed records and a sink
		// subtask has records of an open transaction in the topic: that does not depend on records
		// passing the map when both hold.
		act = nil
		done := make(chan struct{})
		defer func() { stop(); <-done }()
		go func() {
			defer close(done)
			look := []*e2eWhileOpen{{topic: out, prefix: prefix, state: st, afterCommit: true, subtask: 0},
				{topic: out, prefix: prefix, state: st, afterCommit: true, subtask: 1}}
			for runCtx.Err() == nil {
				for _, f := range look {
					open, err := f.openRecords()
					if err != nil {
						st.lastErr.Store(err)
					}
					if open && st.fired.CompareAndSwap(false, true) {
						stop()
						return
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	if act == nil {
		at = -1
	}
	env := runnel.NewEnvironment(opts...)
	e2eSumEOSJobAt(env, b, in, out, prefix, false, &e2eWhileOpen{at: at, act: act, state: st, afterCommit: end != e2eStopWithSavepoint}, upstream)
	res, err := env.Execute(runCtx, "e2e "+name)
	if res == nil || res.Status != status {
		t.Fatalf("%v, %+v, want status %s", err, res, status)
	}
	if act != nil || end == e2eCancel {
		st.check(t)
	}
	if end == e2eStopWithSavepoint && res.Savepoint != savepoint {
		t.Fatalf("stopped with savepoint %q, want %q: %+v", res.Savepoint, savepoint, res)
	}
	return out, prefix, savepoint, res
}

// TestBrokerExactlyOnceResumesFromSavepoint stops an exactly-once job with a savepoint while its sink has
// records in an open transaction, and resumes it from the savepoint, bounded: no transaction is left Ongoing
// while the job is stopped, the two runs' output together is every running sum once, and once the resumed
// job finished no transaction is left Ongoing.
func TestBrokerExactlyOnceResumesFromSavepoint(t *testing.T) {
	b := kafkabroker.Shared(t)
	const n = 30_000
	in := b.Name("e2e-savepoint-in")
	b.CreateTopic(t, in, 3)
	e2eProduce(t, b, in, n)
	out, prefix, savepoint, _ := e2eEndWhileOpen(t, b, in, "savepoint", e2eStopWithSavepoint)
	// The stop committed the savepoint's transactions (and those of checkpoints before it) and aborted the
	// open one; no periodic checkpoint followed the savepoint: nothing holds back read_committed readers
	// while the job is stopped.
	if open := b.OngoingTransactions(t, prefix+"-"); len(open) != 0 {
		t.Fatalf("transactions left Ongoing by the stop with a savepoint: %+v", open)
	}
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(e2eQuiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 100 * time.Millisecond}), runnel.WithRestoreFrom(savepoint))
	e2eSumEOSJob(env, b, in, out, prefix, true, &e2eWhileOpen{at: -1, state: &e2eWhileOpenState{}})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if res, err := env.Execute(ctx, "e2e resumed"); err != nil || res.Status != "FINISHED" {
		t.Fatalf("resumed: %v, %+v", err, res)
	}
	e2eCheckExactlyOnce(t, b, out, e2eRunningSums(n))
	if open := b.OngoingTransactions(t, prefix+"-"); len(open) != 0 {
		t.Fatalf("transactions left Ongoing after the resumed job finished: %+v", open)
	}
}

// TestBrokerExactlyOnceEndedJobLeavesNothingOpen ends an unbounded exactly-once job while its sink has
// records in open transactions and checkpoints are taken every 100 ms: cancelled, failed for good (a
// subtask upstream of the sink fails a second time, past its restart strategy's one restart), and failed
// for good by a sink subtask itself (an operator chained to it fails, with no restart). The job aborts its
// checkpoints in progress ahead of the cancellations, the sink subtasks hear the aborts and abort what
// they prepared for them as they close, and a commit in flight completes before the cancellations; the
// failed sink subtask, which hears nothing more, is settled once the job ended (runnel.Settler): no
// transaction of the job is left Ongoing, and read_committed readers read, per key, a prefix of the
// running sums, each once.
func TestBrokerExactlyOnceEndedJobLeavesNothingOpen(t *testing.T) {
	b := kafkabroker.Shared(t)
	const n = 30_000
	for _, tc := range []struct {
		name string
		end  e2eEnd
	}{{"cancelled", e2eCancel}, {"failed for good", e2eExhausted}, {"sink failed for good", e2eFailForGood}} {
		t.Run(tc.name, func(t *testing.T) {
			in := b.Name("e2e-ended-in-" + strings.ReplaceAll(tc.name, " ", "-"))
			b.CreateTopic(t, in, 3)
			defer e2eProduceSlowly(t, b, in, n)()
			var aborts atomic.Int64
			out, prefix, _, res := e2eEndWhileOpenLogged(t, b, in, tc.name, tc.end, slog.New(e2eAbortCounter{&aborts}))
			if open := b.OngoingTransactions(t, prefix+"-"); len(open) != 0 {
				t.Fatalf("transactions left Ongoing by the %s job: %+v", tc.name, open)
			}
			if res.Checkpoints == nil || res.Checkpoints.Completed < 1 {
				t.Fatalf("checkpoints %+v: want a few completed before the job ended, for their transactions' commits", res.Checkpoints)
			}
			if tc.end == e2eExhausted && (len(res.Failovers) != 1 || !strings.Contains(res.Error, "injected failure while-open[0]")) {
				t.Fatalf("failovers %+v, error %q: want the one restart the strategy allows, then the failure of while-open[0]", res.Failovers, res.Error)
			}
			e2eAwaitMarkers(t, b, prefix+"-")
			want := e2eRunningSums(n)
			committed := 0
			for k, got := range e2eRead(t, b, out, kgo.ReadCommitted()) {
				if w := want[k]; len(got) > len(w) || !slicesEqual(got, w[:len(got)]) {
					t.Fatalf("key %d: read_committed read %d records, not a prefix of the running sums, each once %s", k, len(got), e2eFirstDiff(got, w[:min(len(got), len(w))]))
				}
				committed += len(got)
			}
			if committed == 0 {
				t.Fatalf("read_committed read nothing, with checkpoints %+v", *res.Checkpoints)
			}
			t.Logf("%d records committed before the job ended; checkpoints %+v; %d prepared transactions of aborted checkpoints aborted at close",
				committed, *res.Checkpoints, aborts.Load())
		})
	}
}

// e2eProduceSlowly produces e2eProduce's n records on a goroutine of its own, 20 every 10 ms (the job's
// source then reads as they come for 15 s, and checkpoints complete while it runs, also where a broker's
// first transactions take seconds), and returns a function that
// stops it and waits for it.
func e2eProduceSlowly(t *testing.T, b *kafkabroker.Broker, topic string, n int) (stop func()) {
	t.Helper()
	cl := b.Client(t, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	done := make(chan struct{})
	var failed atomic.Value // error
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < n && ctx.Err() == nil; {
			for end := min(i+20, n); i < end; i++ {
				rec := &kgo.Record{Key: binary.BigEndian.AppendUint64(nil, uint64(i%e2eKeys)), Value: binary.BigEndian.AppendUint64(nil, uint64(i))}
				cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
					if err != nil && ctx.Err() == nil {
						failed.CompareAndSwap(nil, err)
					}
				})
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
		cl.Flush(ctx)
	}()
	return func() {
		cancel()
		<-done
		if err, _ := failed.Load().(error); err != nil {
			t.Errorf("producing the input: %v", err)
		}
	}
}

// e2eAwaitMarkers waits until no transaction under prefix is between its end and its markers
// (PrepareCommit, PrepareAbort): an EndTxn is answered before the coordinator writes the markers, and a
// read_committed reader reads up to them.
func e2eAwaitMarkers(t *testing.T, b *kafkabroker.Broker, prefix string) {
	t.Helper()
	adm := b.Admin(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		listed, err := adm.ListTransactions(ctx, nil, []string{"PrepareCommit", "PrepareAbort"})
		cancel()
		if err != nil {
			t.Fatalf("listing transactions: %v", err)
		}
		var ending []string
		for _, tx := range listed.Sorted() {
			if strings.HasPrefix(tx.TxnID, prefix) {
				ending = append(ending, tx.TxnID+" "+tx.State)
			}
		}
		if len(ending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("transactions still writing their markers after 30 s: %v", ending)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// e2eAbortCounter is a log handler that drops everything and counts the sink's aborts, at close, of the
// transactions it prepared for aborted checkpoints.
type e2eAbortCounter struct{ n *atomic.Int64 }

func (h e2eAbortCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h e2eAbortCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "aborted the transaction prepared for an aborted checkpoint") {
		h.n.Add(1)
	}
	return nil
}
func (h e2eAbortCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h e2eAbortCounter) WithGroup(string) slog.Handler      { return h }

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBrokerExactlyOnceRefusesTimeoutAboveBrokerMax asks the real broker for a transaction timeout above
// its transaction.max.timeout.ms: Kafka refuses the producer, and the job fails saying which setting to
// change, rather than running without transactions.
func TestBrokerExactlyOnceRefusesTimeoutAboveBrokerMax(t *testing.T) {
	b := kafkabroker.Shared(t)
	in, out, prefix := b.Name("e2e-timeout-in"), b.Name("e2e-timeout-out"), b.Name("e2e-timeout")
	b.CreateTopic(t, in, 1)
	b.CreateTopic(t, out, 1)
	e2eProduce(t, b, in, 100)
	timeout := kafkabroker.TransactionMaxTimeout + time.Minute
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(e2eQuiet), runnel.WithRestartStrategy("none"),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 100 * time.Millisecond}))
	runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: []string{b.Addr}, Topic: in, Bounded: true}, e2eDecode)).
		SinkTo(kafka.Sink(kafka.SinkConfig{Brokers: []string{b.Addr}, Topic: out, Guarantee: kafka.ExactlyOnce,
			TransactionalIDPrefix: prefix, TransactionTimeout: timeout}, e2eEncode))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "e2e timeout")
	if err == nil && res != nil {
		err = errors.New(res.Error)
	}
	if res == nil || res.Status != "FAILED" || !strings.Contains(err.Error(), "transaction.max.timeout.ms") || !strings.Contains(err.Error(), timeout.String()) {
		t.Fatalf("a transaction timeout of %s above the broker's %s: %v, %+v; want the job failed naming both", timeout, kafkabroker.TransactionMaxTimeout, err, res)
	}
}

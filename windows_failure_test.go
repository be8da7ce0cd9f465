package runnel_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// winLine formats a window result and the end its timestamp says as a line of the file sink. Start is
// only known to a process function (0 otherwise), so it is in the line as the function gave it.
type winLine struct {
	runnel.ProcessBase[string]
}

func (winLine) ProcessElement(ctx runnel.ProcessContext, r winResult, out runnel.Collector[string]) error {
	ts, ok := ctx.Timestamp()
	if !ok {
		return fmt.Errorf("window result %+v without a timestamp", r)
	}
	if r.End != 0 && r.End != ts+1 {
		return fmt.Errorf("window result %+v carries timestamp %d, want End-1", r, ts)
	}
	out.Collect(fmt.Sprintf("%s/%d/%d/%d/%d/%d/%d", r.Key, r.Start, ts+1, r.Count, r.Sum, r.Min, r.Max))
	return nil
}

func winLines(rs []winResult, withStart bool) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		start := r.Start
		if !withStart {
			start = 0
		}
		out = append(out, fmt.Sprintf("%s/%d/%d/%d/%d/%d/%d", r.Key, start, r.End, r.Count, r.Sum, r.Min, r.Max))
	}
	slices.Sort(out)
	return out
}

// winStart completes an aggregate's result with its window's start, for WindowAggregateProcess.
type winStart struct {
	runnel.ProcessWindowBase[string]
}

func (winStart) Process(ctx runnel.WindowContext[string], rs []winResult, out runnel.Collector[winResult]) error {
	if len(rs) != 1 {
		return fmt.Errorf("window %+v of %q: %d aggregate results, want 1", ctx.Window(), ctx.CurrentKey(), len(rs))
	}
	r := rs[0]
	r.Start, r.End = ctx.Window().Start, ctx.Window().End
	out.Collect(r)
	return nil
}

// TestWindowsExactlyOnceUnderFailures runs keyed event-time windows (each assigner, each window function)
// over seeded out-of-order input with checkpoints every 20 ms and failures injected into the window
// operator, its source or its sink, under region and full failover, on both state backends, locally and
// over TCP, into a FileSink: the committed lines equal the windows computed directly from the input,
// with no window lost, doubled or changed.
func TestWindowsExactlyOnceUnderFailures(t *testing.T) {
	const bound, n = 30, 8000
	clicks := outOfOrderClicks(n, bound, 11)
	rng := rand.New(rand.NewPCG(11, 11))
	for i := range clicks {
		clicks[i].N = rng.Int64N(1000)
	}
	type assigner struct {
		name             string
		a                runnel.WindowAssigner
		size, slide, gap int64
	}
	tumbling := assigner{"tumbling", runnel.TumblingEventTimeWindows(100 * time.Millisecond), 100, 0, 0}
	sliding := assigner{"sliding", runnel.SlidingEventTimeWindows(100*time.Millisecond, 30*time.Millisecond), 100, 30, 0}
	// A user clicks every 21 ms on average: sessions of a few clicks, and some of dozens.
	session := assigner{"session", runnel.EventTimeSessionWindows(15 * time.Millisecond), 0, 0, 15}
	for _, tc := range []struct {
		as       assigner
		fn       string // reduce, aggregate, process, aggregate-process
		failover string
		backend  string
		tms      int // 1: local channels; 2: TCP
		inject   []string
		// incremental: incremental checkpoints (the memory backend writes deltas).
		incremental bool
	}{
		{tumbling, "reduce", "region", "memory", 1, []string{"windows[0]@2500"}, false},
		{tumbling, "process", "full", "pebble", 2, []string{"windows[1]@3000", "files[0]@150"}, false},
		{sliding, "aggregate", "full", "pebble", 2, []string{"windows[0]@2000"}, false},
		{sliding, "reduce", "region", "pebble", 1, []string{"clicks[1]@1500", "windows[1]@3500"}, false},
		{session, "aggregate", "full", "pebble", 1, []string{"windows[0]@3000", "files[1]@100"}, false},
		{session, "process", "region", "pebble", 2, []string{"windows[1]@2500"}, false},
		{session, "aggregate-process", "region", "memory", 2, []string{"windows[0]@1800", "windows[1]@3800"}, false},
		{sliding, "aggregate-process", "full", "memory", 1, []string{"windows[1]@2200"}, false},
		{sliding, "aggregate", "region", "memory", 2, []string{"windows[0]@2000", "windows[1]@3200"}, true},
		{session, "process", "full", "memory", 1, []string{"windows[1]@2500", "files[0]@120"}, true},
		{tumbling, "aggregate-process", "region", "memory", 1, []string{"clicks[0]@1500", "windows[0]@3000"}, true},
	} {
		name := fmt.Sprintf("%s %s %s %s %dTM", tc.as.name, tc.fn, tc.failover, tc.backend, tc.tms)
		var extra []runnel.Option
		if tc.incremental {
			name += " incremental"
			extra = append(extra, runnel.WithIncrementalCheckpoints())
		}
		t.Run(name, func(t *testing.T) {
			withStart := tc.fn == "process" || tc.fn == "aggregate-process"
			want := winLines(referenceWindows(clicks, tc.as.name, tc.as.size, tc.as.slide, tc.as.gap), withStart)
			// The sources hold after a fifth of their records until a checkpoint completed: a window
			// subtask gets well over 3,300 records, at most 1,600 of them before, so a failure of it between
			// 1,700 and 3,300 restores a checkpoint.
			env, out := failingEnv(t, tc.tms, tc.backend, tc.failover, tc.inject, extra...)
			// Subtask s emits clicks s, s+2, s+4, ...: in order within the bound.
			src := runnel.FromSource(env, gate(func(sub int, seq uint64) click { return clicks[int(seq)*2+sub] }, n)).
				Name("clicks").WithCodec(codec.MustStruct[click]()).
				WithTimestamps(runnel.BoundedOutOfOrderness[click](bound * time.Millisecond).WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
			byUser := func(c click) string { return c.User }
			var results *runnel.Stream[winResult]
			switch tc.fn {
			case "reduce":
				ones := runnel.Map(src, func(c click) (winResult, error) { return one(c), nil }).WithCodec(codec.MustStruct[winResult]())
				results = runnel.WindowReduce(runnel.Window(runnel.KeyBy(ones, func(r winResult) string { return r.Key }), tc.as.a),
					func(a, b winResult) (winResult, error) { return a.add(b), nil })
			case "aggregate":
				results = runnel.WindowAggregate(runnel.Window(runnel.KeyBy(src, byUser), tc.as.a),
					runnel.AggregateFunction[click, winResult, winResult](winAgg{}))
			case "process":
				results = runnel.WindowProcess(runnel.Window(runnel.KeyBy(src, byUser), tc.as.a),
					func() runnel.ProcessWindowFunction[string, click, winResult] { return winList{} })
			case "aggregate-process":
				results = runnel.WindowAggregateProcess(runnel.Window(runnel.KeyBy(src, byUser), tc.as.a),
					runnel.AggregateFunction[click, winResult, winResult](winAgg{}),
					func() runnel.ProcessWindowFunction[string, winResult, winResult] { return winStart{} })
			}
			lines := runnel.ProcessWith(results.Name("windows").WithCodec(codec.MustStruct[winResult]()),
				func() runnel.ProcessFunction[winResult, string] { return winLine{} }).Name("format")
			lines.SinkTo(connector.FileSink(out, func(s string) string { return s })).Name("files")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "windows-exactly-once")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v %+v", err, res)
			}
			checkFailedOver(t, res, tc.failover, tc.inject)
			got := readCommitted(t, out)
			if !slices.Equal(got, want) {
				t.Fatalf("%d window results, want %d; first differences: %v", len(got), len(want), firstDiff(got, want))
			}
			if tc.incremental {
				// The retained checkpoints are incremental, and retention kept exactly what they list.
				st, err := checkpoint.OpenExisting(context.Background(), filepath.Join(filepath.Dir(out), "chk"))
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				checkSharedRetention(t, st)
			}
		})
	}
}

// checkFailedOver fails the test unless the job failed over for the injected failures with the strategy
// and restored a checkpoint at least once, so that an exactly-once result says something about recovery.
// A failure that strikes while an earlier failover is still cancelling is part of that one, so there are
// between one and len(injected) failovers.
// failingEnv is the environment of the exactly-once tests: parallelism 2 on tms TaskManagers, the backend
// and failover given, checkpoints every 20 ms, the failures inject; out is an empty directory for the
// FileSink.
func failingEnv(t *testing.T, tms int, backend, failover string, inject []string, extra ...runnel.Option) (*runnel.Environment, string) {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet), runnel.WithTaskManagers(tms),
		runnel.WithStateBackend(backend), runnel.WithFailover(failover),
		runnel.WithWatermarkInterval(2 * time.Millisecond),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond, Storage: filepath.Join(dir, "chk")}),
		runnel.WithRestartStrategy("fixed-delay:attempts=8,delay=10ms"), runnel.WithFailureInjection(inject...)}, extra...)...)
	return env, out
}

func checkFailedOver(t *testing.T, res *runnel.JobResult, strategy string, injected []string) {
	t.Helper()
	if len(res.Failovers) == 0 || len(res.Failovers) > len(injected) {
		t.Fatalf("%d failovers for %d injected failures: %+v", len(res.Failovers), len(injected), res.Failovers)
	}
	restored := false
	if os.Getenv("DBG") != "" {
		t.Logf("DBG checkpoints %+v", res.Checkpoints)
		for _, f := range res.Failovers {
			t.Logf("DBG failover %+v", f)
		}
	}
	for _, f := range res.Failovers {
		if f.Strategy != strategy || !strings.Contains(f.Cause, "injected failure") {
			t.Fatalf("failover %+v, want strategy %s for an injected failure", f, strategy)
		}
		restored = restored || f.CheckpointRestored != nil
	}
	if !restored {
		t.Fatalf("no failover restored a checkpoint: %+v", res.Failovers)
	}
}

// TestTwoInputJoinsExactlyOnceUnderFailures runs a window join and an interval join of two out-of-order
// keyed streams with checkpoints and injected failures (region and full, memory and pebble, local and
// TCP) into a FileSink: the committed pairs equal those computed directly, each once.
func TestTwoInputJoinsExactlyOnceUnderFailures(t *testing.T) {
	const n = 3000
	orderOf := func(sub int, seq uint64) order { id := int64(seq)*2 + int64(sub); return order{ID: id, At: id * 3} }
	paymentOf := func(sub int, seq uint64) payment {
		id := int64(seq)*2 + int64(sub)
		return payment{ID: id, At: id*3 + id%70 - 30}
	}
	key := func(id int64) int64 { return id % 11 }
	end100 := func(t int64) int64 { return t - ((t%100)+100)%100 + 100 }
	pairLine := func(p joinPair) string { return fmt.Sprintf("%d/%d/%d/%d", p.K, p.End, p.O, p.P) }
	reference := func(join string) []string {
		var want []string
		for i := int64(0); i < n; i++ {
			o := orderOf(int(i%2), uint64(i/2))
			for j := int64(0); j < n; j++ {
				p := paymentOf(int(j%2), uint64(j/2))
				if key(p.ID) != key(o.ID) {
					continue
				}
				switch join {
				case "window":
					// Window ends by floor division: payments may come before the epoch.
					if ow := end100(o.At); end100(p.At) == ow {
						want = append(want, pairLine(joinPair{key(o.ID), ow, o.ID, p.ID}))
					}
				case "interval":
					if p.At >= o.At-10 && p.At <= o.At+40 {
						want = append(want, pairLine(joinPair{key(o.ID), max(o.At, p.At) + 1, o.ID, p.ID}))
					}
				}
			}
		}
		slices.Sort(want)
		return want
	}
	refs := map[string][]string{"window": reference("window"), "interval": reference("interval")}
	for _, tc := range []struct {
		join     string
		failover string
		backend  string
		tms      int
		inject   []string
	}{
		{"window", "region", "pebble", 2, []string{"join[0]@2500"}},
		{"window", "full", "memory", 1, []string{"payments[1]@700", "join[0]@3000"}},
		{"interval", "full", "pebble", 2, []string{"join[0]@2000"}},
		{"interval", "region", "memory", 1, []string{"files[0]@100", "join[0]@3300"}},
	} {
		t.Run(fmt.Sprintf("%s join %s %s %dTM", tc.join, tc.failover, tc.backend, tc.tms), func(t *testing.T) {
			want := refs[tc.join]
			// The sources hold after a fifth of their records (1,200 of both) until a checkpoint completed:
			// join[0] gets over 4,000 records, so a failure of it past 1,200 restores a checkpoint.
			env, out := failingEnv(t, tc.tms, tc.backend, tc.failover, tc.inject)
			orders := runnel.FromSource(env, gate(orderOf, n)).
				Name("orders").WithCodec(codec.MustStruct[order]()).
				WithTimestamps(runnel.MonotonousTimestamps[order]().WithTimestampAssigner(func(o order, _ int64) int64 { return o.At }))
			pays := runnel.FromSource(env, gate(paymentOf, n)).
				Name("payments").WithCodec(codec.MustStruct[payment]()).
				WithTimestamps(runnel.BoundedOutOfOrderness[payment](70 * time.Millisecond).WithTimestampAssigner(func(p payment, _ int64) int64 { return p.At }))
			ko := runnel.KeyBy(orders, func(o order) int64 { return key(o.ID) })
			kp := runnel.KeyBy(pays, func(p payment) int64 { return key(p.ID) })
			var joined *runnel.Stream[joinPair]
			switch tc.join {
			case "window":
				joined = runnel.WindowJoin(ko, kp, runnel.TumblingEventTimeWindows(100*time.Millisecond),
					func(o order, p payment, out runnel.Collector[joinPair]) error {
						out.Collect(joinPair{K: key(o.ID), O: o.ID, P: p.ID})
						return nil
					})
			case "interval":
				joined = runnel.IntervalJoin(ko, kp, -10*time.Millisecond, 40*time.Millisecond,
					func(o order, p payment, _ runnel.JoinContext, out runnel.Collector[joinPair]) error {
						out.Collect(joinPair{K: key(o.ID), O: o.ID, P: p.ID})
						return nil
					})
			}
			lines := runnel.ProcessWith(joined.Name("join").WithCodec(codec.MustStruct[joinPair]()),
				func() runnel.ProcessFunction[joinPair, string] { return pairStamp{} }).Name("format")
			lines.SinkTo(connector.FileSink(out, func(s string) string { return s })).Name("files")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "joins-exactly-once")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v %+v", err, res)
			}
			checkFailedOver(t, res, tc.failover, tc.inject)
			got := readCommitted(t, out)
			if !slices.Equal(got, want) {
				t.Fatalf("%d pairs, want %d; first differences: %v", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// pairStamp formats a join result with the end its timestamp says (End-1 for a window join, the later of
// the pair's times for an interval join).
type pairStamp struct {
	runnel.ProcessBase[string]
}

func (pairStamp) ProcessElement(ctx runnel.ProcessContext, p joinPair, out runnel.Collector[string]) error {
	ts, ok := ctx.Timestamp()
	if !ok {
		return fmt.Errorf("join result %+v without a timestamp", p)
	}
	out.Collect(fmt.Sprintf("%d/%d/%d/%d", p.K, ts+1, p.O, p.P))
	return nil
}

// gate is a deterministic source like connector.Generator (subtask s emits fn(s, seq) for seq below its
// share of total) that, in every attempt, holds after the first fifth of its records until it hears of a
// completed checkpoint, and then emits the rest at 20,000 a second: a failure injected past the records
// that come before the gate restores a checkpoint, whatever the speed of the machine, and windows fire
// between checkpoints.
func gate[T any](fn func(sub int, seq uint64) T, total uint64) runnel.Source[T] {
	return &gated[T]{fn: fn, total: total}
}

type gated[T any] struct {
	fn    func(int, uint64) T
	total uint64
}

// gateRate is the records per second of a gated source's subtask after its gate.
const gateRate = 20_000

func (g *gated[T]) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[T], error) {
	p, sub := uint64(ctx.Parallelism()), uint64(ctx.SubtaskIndex())
	limit := g.total / p
	if sub < g.total%p {
		limit++
	}
	return &gatedReader[T]{g: g, sub: ctx.SubtaskIndex(), limit: limit, hold: limit / 5, wake: make(chan struct{}, 1)}, nil
}

type gatedReader[T any] struct {
	g          *gated[T]
	sub        int
	seq, limit uint64
	hold       uint64
	opened     time.Time // when a checkpoint completed in this attempt; zero: not yet
	base       uint64    // seq when it opened
	timer      *time.Timer
	wake       chan struct{}
}

func (r *gatedReader[T]) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *gatedReader[T]) PollNext(out runnel.Collector[T]) (runnel.InputStatus, error) {
	end := min(r.seq+64, r.limit)
	switch {
	case r.opened.IsZero() && r.seq < r.hold:
		end = min(end, r.hold)
	case r.opened.IsZero():
		return runnel.NothingAvailable, nil
	default:
		due := r.base + uint64(time.Since(r.opened).Seconds()*gateRate) + 1
		if due <= r.seq {
			if r.timer == nil {
				r.timer = time.AfterFunc(time.Millisecond, r.signal)
			} else {
				r.timer.Reset(time.Millisecond)
			}
			return runnel.NothingAvailable, nil
		}
		end = min(end, due)
	}
	for ; r.seq < end; r.seq++ {
		out.Collect(r.g.fn(r.sub, r.seq))
	}
	if r.seq >= r.limit {
		return runnel.EndOfInput, nil
	}
	return runnel.MoreAvailable, nil
}

func (r *gatedReader[T]) Available() <-chan struct{} { return r.wake }

func (r *gatedReader[T]) NotifyCheckpointComplete(int64) error {
	if r.opened.IsZero() {
		r.opened, r.base = time.Now(), r.seq
		r.signal()
	}
	return nil
}

func (r *gatedReader[T]) SnapshotState(int64) ([]byte, error) {
	return binary.AppendUvarint(nil, r.seq), nil
}

func (r *gatedReader[T]) RestoreState(b []byte) error {
	v, n := binary.Uvarint(b)
	if n != len(b) || n <= 0 || v > r.limit {
		return fmt.Errorf("gated source: bad checkpointed position % x", b)
	}
	r.seq = v
	return nil
}

func (r *gatedReader[T]) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

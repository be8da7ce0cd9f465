package runnel_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// arrivalOrder numbers the records of its key in the order they arrive: "n:record". Its output depends on
// the interleaving of its input channels, which nothing but the determinants of task failover can make a
// new attempt reproduce.
type arrivalOrder struct {
	runnel.KeyedProcessBase[int64, string]
	n runnel.ValueState[int64]
}

// recordID is the id a padded record of TestTaskFailoverReplaysArrivalOrder begins with.
func recordID(v string) string { id, _, _ := strings.Cut(v, "|"); return id }

func (a *arrivalOrder) Open(ctx runnel.KeyedContext[int64]) (err error) {
	a.n, err = runnel.NewValueState[int64](ctx, "n")
	return err
}

func (a *arrivalOrder) ProcessElement(_ runnel.KeyedContext[int64], v string, out runnel.Collector[string]) error {
	n, _ := a.n.Value()
	n++
	a.n.Update(n)
	out.Collect(fmt.Sprintf("%d:%s", n, recordID(v)))
	return nil
}

// TestTaskFailoverReplaysArrivalOrder: two throttled sources (even and odd records) feed one keyed
// operator whose output is the arrival order, into an exactly-once file sink downstream. The operator fails
// under task failover; its new attempt replays its input in the order the failed one recorded, so the
// records it emits again are the ones the sink already has, numbered alike, and the sink drops them: the
// committed lines hold every record exactly once and the numbers 1..N exactly once. Without the recorded
// order a replay interleaves the two inputs otherwise, and records come twice or not at all (checked by
// hand: setting the TaskManager's Replay to false fails this test).
func TestTaskFailoverReplaysArrivalOrder(t *testing.T) {
	const perSource = 8000
	for _, tc := range []struct {
		name string
		opts []runnel.Option
	}{
		{"local", nil},
		{"tcp", []runnel.Option{runnel.WithTaskManagers(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithLogger(quiet), runnel.WithParallelism(1), runnel.WithChaining(false),
				runnel.WithFailover("task"), runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 300 * time.Millisecond}),
				runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=10ms"), runnel.WithFailureInjection("order[0]@9000")}, tc.opts...)...)
			// The even records are padded to a kilobyte, the odd ones not: the evens fill a buffer every 30
			// records, the odds only at the buffer timeout, so that the live interleaving (dozens of even
			// buffers to an odd one) is not the round robin a replay of two full logs would take on its own.
			pad := strings.Repeat("x", 1000)
			source := func(name string, parity int64, padding string) *runnel.Stream[string] {
				return runnel.FromSource(env, connector.Generator(func(_ int, s uint64) string { return fmt.Sprintf("%d|%s", 2*int64(s)+parity, padding) },
					connector.GeneratorOptions{RecordsPerSubtask: perSource, RatePerSubtask: 8000})).Name(name).WithCodec(codec.String())
			}
			both := runnel.Union(source("evens", 0, pad), source("odds", 1, ""))
			ordered := runnel.Process(runnel.KeyBy(both, func(string) int64 { return 0 }),
				func() runnel.KeyedProcessFunction[int64, string, string] { return &arrivalOrder{} }).Name("order")
			ordered.SinkTo(connector.FileSink(out, func(s string) string { return s })).Name("files")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "arrival order")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v: %+v", err, res)
			}
			if len(res.Failovers) != 1 || res.Failovers[0].Strategy != "task" || len(res.Failovers[0].Restarted) != 1 {
				t.Fatalf("failovers %+v, want one task failover of order[0]", res.Failovers)
			}
			lines := readCommitted(t, out)
			seen, numbers := map[int64]int{}, map[int64]int{}
			for _, l := range lines {
				n, v, ok := strings.Cut(l, ":")
				if !ok {
					t.Fatalf("line %q", l)
				}
				ni, _ := strconv.ParseInt(n, 10, 64)
				vi, _ := strconv.ParseInt(v, 10, 64)
				numbers[ni]++
				seen[vi]++
			}
			for i := int64(0); i < 2*perSource; i++ {
				if seen[i] != 1 {
					t.Fatalf("record %d committed %d times (%d lines)", i, seen[i], len(lines))
				}
				if numbers[i+1] != 1 {
					t.Fatalf("arrival number %d committed %d times (%d lines)", i+1, numbers[i+1], len(lines))
				}
			}
			if len(lines) != 2*perSource {
				t.Fatalf("%d lines, want %d", len(lines), 2*perSource)
			}
		})
	}
}

// undeclaredSource is connector.Generator's reader without its ReplaysDeterministically: a reader written
// by a user who did not say that its replay is deterministic.
type undeclaredSource struct{ src runnel.Source[string] }

func (u undeclaredSource) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[string], error) {
	r, err := u.src.CreateReader(ctx)
	if err != nil {
		return nil, err
	}
	return undeclaredReader{SourceReader: r, CheckpointedReader: r.(runnel.CheckpointedReader)}, nil
}

type undeclaredReader struct {
	runnel.SourceReader[string]
	runnel.CheckpointedReader
}

// TestTaskFailoverFallsBackWhenReplayCannotHold: under task failover a failed subtask whose new attempt
// cannot replay what the failed one did falls back to region failover, exactly once, and says why: a
// source whose reader does not say it replays deterministically, and a flat map that emits more for the
// same input in its new attempt (the per-step output check of the replay finds it). Without the checks the
// first is silently trusted and the second regenerates output that does not match what its consumer
// drops.
func TestTaskFailoverFallsBackWhenReplayCannotHold(t *testing.T) {
	for _, tc := range []struct {
		name, inject, why string
		undeclared        bool
		diverge           bool
	}{
		// The reasons the job master gives when the TaskManager told the failure's kind from its error's
		// types (jobcore.ReplayFailure), which crossed to it as data.
		{name: "undeclared source", inject: "source[0]@3000", why: "it is a source that cannot replay: ", undeclared: true},
		{name: "diverging flat map", inject: "double[0]@3000", why: "its replay diverged from the failed attempt: ", diverge: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A failure just after a checkpoint leaves a replay of one step, whose output nothing checks:
			// such a run proves nothing about the check, and is run again (at most twice more).
			for try := 0; !runFallback(t, tc.inject, tc.why, tc.undeclared, tc.diverge); try++ {
				if try == 2 {
					t.Fatal("three replays too short to check: the failure always came just after a checkpoint")
				}
			}
		})
	}
}

// runFallback runs one case of TestTaskFailoverFallsBackWhenReplayCannotHold; false: its replay was too
// short to tell (a diverging case whose only failover stayed a task failover after a replay of a few
// records), run it again.
func runFallback(t *testing.T, inject, why string, undeclared, diverge bool) bool {
	t.Helper()
	const records = 6000
	out := t.TempDir()
	env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithParallelism(1), runnel.WithChaining(false),
		runnel.WithFailover("task"), runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 100 * time.Millisecond}),
		runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=10ms"), runnel.WithFailureInjection(inject),
		// Buffers of a few records each: the replay takes many steps, and a step's output is checked
		// when the next is taken (the last replayed step's is not).
		runnel.WithBufferTimeout(time.Millisecond))
	var src runnel.Source[string] = connector.Generator(func(_ int, s uint64) string { return strconv.FormatUint(s, 10) },
		connector.GeneratorOptions{RecordsPerSubtask: records, RatePerSubtask: 6000})
	if undeclared {
		src = undeclaredSource{src}
	}
	var opens atomic.Int32
	double := runnel.FlatMapWith(runnel.FromSource(env, src).Name("source").WithCodec(codec.String()),
		func() runnel.FlatMapFunction[string, string] {
			return &onceThenTwice{opens: &opens, diverge: diverge}
		}).Name("double")
	double.SinkTo(connector.FileSink(out, func(s string) string { return s })).Name("files")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "fallback")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v: %+v", err, res)
	}
	var region *runnel.FailoverResult
	for i, f := range res.Failovers {
		if f.Strategy == "region" {
			region = &res.Failovers[i]
		}
	}
	if region == nil && diverge && len(res.Failovers) == 1 && res.Failovers[0].RecordsReplayed < 20 {
		t.Logf("a replay of %d records: again", res.Failovers[0].RecordsReplayed)
		return false
	}
	if region == nil || !strings.Contains(region.Fallback, why) {
		t.Fatalf("failovers %+v, want a region fallback saying %q", res.Failovers, why)
	}
	t.Logf("fallback: %s", region.Fallback)
	seen := map[string]int{}
	for _, l := range readCommitted(t, out) {
		seen[l]++
	}
	for i := range records {
		want := 1
		if diverge && i%10 == 0 && opens.Load() > 1 {
			want = -1 // the last attempts emit it twice or once, as their function says: at least once
		}
		k := strconv.Itoa(i)
		if (want == 1 && seen[k] != 1) || (want == -1 && seen[k] < 1) {
			t.Fatalf("record %d committed %d times", i, seen[k])
		}
	}
	return true
}

// onceThenTwice emits each record once; with diverge, after its first Open (a later attempt), every
// tenth record twice: a function that is not deterministic across attempts.
type onceThenTwice struct {
	opens   *atomic.Int32
	diverge bool
	twice   bool
}

func (f *onceThenTwice) Open(runnel.RuntimeContext) error {
	f.twice = f.diverge && f.opens.Add(1) > 1
	return nil
}

func (f *onceThenTwice) Close() error { return nil }

func (f *onceThenTwice) FlatMap(v string, out runnel.Collector[string]) error {
	out.Collect(v)
	if n, _ := strconv.Atoi(v); f.twice && n%10 == 0 {
		out.Collect(v)
	}
	return nil
}

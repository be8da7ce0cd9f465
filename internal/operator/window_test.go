package operator

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/task"
)

// keyed is a record of the window tests: a key, a value and an event time.
type keyed struct{ K, V, Ts int64 }

// sumWindow formats a window's sum with its key and bounds.
type sumWindow struct{}

func (sumWindow) Open(KeyedContext[int64]) error { return nil }
func (sumWindow) Close() error                   { return nil }
func (sumWindow) Process(ctx WindowContext[int64], vs []int64, out Collector[string]) error {
	w := ctx.Window()
	for _, v := range vs {
		out.Collect(fmt.Sprintf("%d [%d,%d) %d", ctx.CurrentKey(), w.Start, w.End, v))
	}
	return nil
}

func windowTestContext(backend string) *Context {
	clock := clockwork.NewFakeClockAt(time.UnixMilli(1_000_000))
	rt := &task.Runtime{Info: deploy.Info{Parallelism: 1, MaxParallelism: 16}, Counters: task.NewCounters(), Logger: slog.New(slog.DiscardHandler),
		Clock: clock, StateBackend: backend}
	return NewContext(rt, "window")
}

func sumSpec(size, slide, lateness int64, unsliced bool) *WindowSpec[int64, keyed, int64, int64, string] {
	return &WindowSpec[int64, keyed, int64, int64, string]{
		Key:      func(r keyed) int64 { return r.K },
		KeyCodec: codec.Int64(),
		Assigner: SlidingWindows{Size: size, Slide: slide, EventTime: true},
		Lateness: lateness,
		Timed:    true,
		Inc: &Incremental[keyed, int64, int64]{
			Create: func() int64 { return 0 },
			Add:    func(r keyed, acc int64) (int64, error) { return acc + r.V, nil },
			Result: func(acc int64) int64 { return acc },
			Merge:  func(a, b int64) (int64, error) { return a + b, nil },
			Codec:  codec.Int64(),
		},
		NewProcess: func() ProcessWindowFunction[int64, int64, string] { return sumWindow{} },
		unsliced:   unsliced,
	}
}

// windowHarness is the harness of a window operator of the window tests, restored from snaps if given.
type windowHarness = Harness[Timed[keyed], Timed[string]]

func newWindowHarness[ACC, V any](t *testing.T, backend string, spec *WindowSpec[int64, keyed, ACC, V, string], snaps ...Snapshot) *windowHarness {
	t.Helper()
	return NewHarness[Timed[keyed], Timed[string]](t, spec, HarnessConfig{Name: "window", StateBackend: backend, MaxParallelism: 16,
		ProcessingTime: 1_000_000, Restore: snaps})
}

// feed hands the operator a script: records, and watermarks where the record's key is -1.
func feed(h *windowHarness, script []keyed) {
	for _, x := range script {
		if x.K < 0 {
			h.Watermark(x.Ts)
			continue
		}
		h.Process(Timed[keyed]{V: x, Ts: x.Ts})
	}
}

// results formats what a window operator emitted: "key [start,end) value @ts".
func results(h *windowHarness) []string {
	var got []string
	for _, v := range h.Output() {
		got = append(got, fmt.Sprintf("%s @%d", v.V, v.Ts))
	}
	return got
}

// dropped returns the operator's count of late records dropped.
func dropped(t *testing.T, h *windowHarness) int64 {
	t.Helper()
	n, ok := h.Metric("late_records_dropped")
	if !ok {
		t.Fatal("no late_records_dropped metric")
	}
	return n
}

// windowScript is seeded out-of-order input: n records of a few keys, times moving forward with jitter of
// up to 2·bound (and a straggler in twenty up to 12·bound behind), and a watermark of the highest time minus bound every few records, so that some records
// are within the allowed lateness and some past it; the end of input at last.
func windowScript(seed uint64, n int, bound int64) []keyed {
	rng := rand.New(rand.NewPCG(seed, seed))
	var out []keyed
	var now, high int64
	for i := range n {
		now += rng.Int64N(4)
		ts := now - rng.Int64N(2*bound)
		if rng.IntN(20) == 0 {
			ts -= rng.Int64N(10 * bound) // a straggler, often past its windows
		}
		high = max(high, ts)
		out = append(out, keyed{K: rng.Int64N(7), V: int64(i + 1), Ts: ts})
		if rng.IntN(5) == 0 {
			out = append(out, keyed{K: -1, Ts: high - bound})
		}
	}
	return append(out, keyed{K: -1, Ts: math.MaxInt64})
}

// TestSlicedWindowsEqualWindows runs incremental sliding windows sliced and unsliced over the same out-of-order
// input and watermarks, with and without allowed lateness, on both backends: the same results (and
// late refirings), the same late records dropped. A snapshot of the unsliced operator (a checkpoint from
// before slicing) restored into the sliced one goes on to the same results too.
func TestSlicedWindowsEqualWindows(t *testing.T) {
	for _, tc := range []struct{ size, slide, lateness int64 }{
		{100, 20, 0}, {100, 20, 40}, {100, 30, 0}, {100, 30, 25}, {60, 50, 10},
	} {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(fmt.Sprintf("%d/%d lateness %d %s", tc.size, tc.slide, tc.lateness, backend), func(t *testing.T) {
				if spec := sumSpec(tc.size, tc.slide, tc.lateness, false); spec.sliceWidth() == 0 {
					t.Fatalf("window %d/%d is not sliced", tc.size, tc.slide)
				}
				script := windowScript(uint64(tc.size+tc.slide+tc.lateness), 3000, 30)
				half := len(script) / 2
				whole := newWindowHarness(t, backend, sumSpec(tc.size, tc.slide, tc.lateness, true))
				feed(whole, script[:half])
				snap, emitted := whole.Snapshot(), len(whole.Output())
				feed(whole, script[half:])
				want := results(whole)
				slices.Sort(want)
				if len(want) < 100 {
					t.Fatalf("only %d results", len(want))
				}
				sliced := newWindowHarness(t, backend, sumSpec(tc.size, tc.slide, tc.lateness, false))
				feed(sliced, script)
				if got, want := dropped(t, sliced), dropped(t, whole); got != want || want == 0 {
					t.Errorf("%d late records dropped, want %d (and some)", got, want)
				}
				restored := newWindowHarness(t, backend, sumSpec(tc.size, tc.slide, tc.lateness, false), snap)
				feed(restored, script[half:])
				tail := results(whole)[emitted:]
				for _, c := range []struct {
					name      string
					got, want []string
				}{{"sliced", results(sliced), want}, {"restored", results(restored), tail}} {
					got := slices.Clone(c.got)
					slices.Sort(got)
					slices.Sort(c.want)
					if !slices.Equal(got, c.want) {
						t.Fatalf("%s: %d results, want %d\n%s", c.name, len(got), len(c.want), firstDiff(got, c.want))
					}
				}
				// Every window is done at the end of input: nothing is left, of the slices nor of the windows
				// restored.
				for _, h := range []*windowHarness{whole, sliced, restored} {
					if keys := StateKeys[int64](h); len(keys) != 0 {
						t.Errorf("%d keys hold state at the end", len(keys))
					}
				}
			})
		}
	}
}

// firstDiff describes where two sorted lists first differ.
func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d: got %q, want %q", i, got[i], want[i])
		}
	}
	return "one is a prefix of the other"
}

// TestSlicedWindowsKeepOneAccumulatorPerSlice pins what slicing is for: a record of a hopping window of
// five slides writes one accumulator, and a key holds one timer, not five of each.
func TestSlicedWindowsKeepOneAccumulatorPerSlice(t *testing.T) {
	for _, tc := range []struct {
		unsliced        bool
		entries, timers int
	}{{false, 1000, 1000}, {true, 5000, 5000}} {
		ctx := windowTestContext("memory")
		spec := sumSpec(100, 20, 0, tc.unsliced)
		b, err := newKeyedBackend(ctx, spec.KeyCodec)
		if err != nil {
			t.Fatal(err)
		}
		op, err := newWindowOperator(ctx, spec, b)
		if err != nil {
			t.Fatal(err)
		}
		var acc windowContents[keyed, int64]
		switch op := op.(type) {
		case *windowOp[int64, keyed, int64, int64, string]:
			acc = op.contents
		case *slicedWindowOp[int64, keyed, int64, int64, string]:
			acc = op.acc
		}
		for k := range int64(1000) {
			op.process(keyed{K: k, V: 1}, 1000+k%20) // one slice, [1000, 1020)
		}
		entries := 0
		if err := b.ForEachKey(func(int64) error { entries += acc.(*incrementalContents[keyed, int64, int64]).acc.Len(); return nil }); err != nil {
			t.Fatal(err)
		}
		if timers := op.base().timers.Len(); entries != tc.entries || timers != tc.timers {
			t.Errorf("unsliced %v: %d accumulators and %d timers, want %d and %d", tc.unsliced, entries, timers, tc.entries, tc.timers)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSlicedProcessingTimeWindowsEqualWindows: the same for sliding windows in processing time, on a fake
// clock that moves between batches of records and fires the due timers, as the task's mailbox does.
func TestSlicedProcessingTimeWindowsEqualWindows(t *testing.T) {
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			var got [2][]string
			for i, unsliced := range []bool{true, false} {
				spec := sumSpec(100, 20, 0, unsliced)
				spec.Assigner = SlidingWindows{Size: 100, Slide: 20}
				h := newWindowHarness(t, backend, spec)
				rng := rand.New(rand.NewPCG(3, 3))
				// Timers fire up to the millisecond before the clock's: where a window fired at its last
				// millisecond and records of that millisecond came after, an unsliced window fires again with
				// those alone, a sliced one counts them in the later windows only (docs/eventtime.md §4.4).
				advance := func(d time.Duration) {
					if d == 0 {
						return // nothing is due that was not at the last advance
					}
					now := h.Clock().Now().Add(d).UnixMilli()
					h.SetProcessingTime(now - 1)
					h.Clock().Advance(time.Millisecond)
				}
				for n := range 2000 {
					h.Process(Timed[keyed]{V: keyed{K: rng.Int64N(7), V: int64(n + 1)}})
					if rng.IntN(10) == 0 {
						advance(time.Duration(rng.IntN(15)) * time.Millisecond)
					}
				}
				advance(time.Second)
				got[i] = results(h)
				slices.Sort(got[i])
				if keys := StateKeys[int64](h); len(keys) != 0 {
					t.Errorf("unsliced %v: %d keys hold state after every window fired", unsliced, len(keys))
				}
			}
			if len(got[0]) < 100 || !slices.Equal(got[1], got[0]) {
				t.Fatalf("sliced: %d results, unsliced %d\n%s", len(got[1]), len(got[0]), firstDiff(got[1], got[0]))
			}
		})
	}
}

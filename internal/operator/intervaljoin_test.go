package operator

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// joinStep is a step of an interval join script: a record of the left (side 'a') or right ('b') input at
// ts, or a watermark ('w'). id names the record; its key is id % joinKeys.
type joinStep struct {
	side   byte
	ts, id int64
}

const joinKeys = 3

// joinCase is an interval join's configuration.
type joinCase struct {
	lower, upper                   int64
	lowerExclusive, upperExclusive bool
}

// pairFn is the join function of the tests: it emits "a<id>@<ta> b<id>@<tb>", checks its context, emits
// each key's running count of pairs (kept in keyed state) to the side output "counts", and counts pairs
// in a metric.
type pairFn struct {
	count  state.ValueState[int64]
	pairs  *Counter
	opened bool
}

func (f *pairFn) Open(ctx RuntimeContext) error {
	if ctx.Parallelism() != 1 || ctx.SubtaskIndex() != 0 {
		return fmt.Errorf("runtime context: subtask %d of %d, want 0 of 1", ctx.SubtaskIndex(), ctx.Parallelism())
	}
	var err error
	f.count, err = state.NewValue[int64](KeyedBackend(ctx), "count", codec.Int64())
	f.pairs = ctx.Metrics().Counter("pairs")
	f.opened = true
	return err
}

func (f *pairFn) ProcessElement(a, b int64, jc JoinContext, out Collector[string]) error {
	if !f.opened {
		return fmt.Errorf("ProcessElement before Open")
	}
	if ts, ok := jc.Timestamp(); !ok || ts != max(jc.LeftTimestamp(), jc.RightTimestamp()) {
		return fmt.Errorf("join context: result %d for left %d and right %d", ts, jc.LeftTimestamp(), jc.RightTimestamp())
	}
	out.Collect(fmt.Sprintf("a%d@%d b%d@%d", a, jc.LeftTimestamp(), b, jc.RightTimestamp()))
	n, _ := f.count.Value()
	f.count.Update(n + 1)
	EmitSide(jc, "counts", fmt.Sprintf("k%d=%d", a%joinKeys, n+1))
	f.pairs.Inc()
	return nil
}

func (f *pairFn) Close() error { return nil }

func joinSpec(c joinCase) *IntervalJoinSpec[int64, int64, int64, string] {
	return &IntervalJoinSpec[int64, int64, int64, string]{
		Key1: func(id int64) int64 { return id % joinKeys }, Key2: func(id int64) int64 { return id % joinKeys },
		KeyCodec: codec.Int64(), CodecA: codec.Int64(), CodecB: codec.Int64(),
		Lower: c.lower, Upper: c.upper, LowerExclusive: c.lowerExclusive, UpperExclusive: c.upperExclusive,
		LeftLateTag: "late-a", RightLateTag: "late-b",
		New: func() ProcessJoinFunction[int64, int64, string] { return &pairFn{} },
	}
}

// joinHarness is an interval join of the tests on the two-input harness.
type joinHarness = TwoInputHarness[Timed[int64], Timed[int64], Timed[string]]

func newJoinHarness(t *testing.T, backend string, spec *IntervalJoinSpec[int64, int64, int64, string], snaps ...Snapshot) *joinHarness {
	return NewTwoInputHarness[Timed[int64], Timed[int64], Timed[string]](t, spec,
		HarnessConfig{Name: "join", StateBackend: backend, SideOutputs: []string{"late-a", "late-b", "counts"}, Restore: snaps})
}

// feedJoin hands the harness a script: records of either input, and watermarks of either ('x': the
// first's, 'y': the second's) or of both ('w').
func feedJoin(h *joinHarness, steps []joinStep) {
	for _, s := range steps {
		switch s.side {
		case 'a':
			h.Process1(Timed[int64]{Ts: s.ts, V: s.id})
		case 'b':
			h.Process2(Timed[int64]{Ts: s.ts, V: s.id})
		case 'x':
			h.Watermark1(s.ts)
		case 'y':
			h.Watermark2(s.ts)
		default:
			h.Watermark1(s.ts)
			h.Watermark2(s.ts)
		}
	}
}

// joinOut is what an interval join emitted: its results, the late records of each side and the running
// counts its function emitted to a side output, each as "v@ts".
type joinOut struct {
	pairs, lateA, lateB, counts []string
}

func (o *joinOut) add(h *joinHarness) {
	o.pairs = append(o.pairs, timedStrings(h.Output())...)
	for _, late := range []struct {
		to  *[]string
		tag string
	}{{&o.lateA, "late-a"}, {&o.lateB, "late-b"}} {
		for _, v := range SideOutput[int64](h, late.tag) {
			*late.to = append(*late.to, fmt.Sprintf("%d@%d", v.V, v.Ts))
		}
	}
	o.counts = append(o.counts, timedStrings(SideOutput[string](h, "counts"))...)
}

func metric(t *testing.T, h Harnessed, name string) int64 {
	t.Helper()
	v, ok := h.harnessCore().Metric(name)
	if !ok {
		t.Fatalf("no metric %q", name)
	}
	return v
}

// joinReference computes what an interval join emits for a script, from Flink's rules alone, by a nested
// loop over the records. The join's watermark is the lower of its inputs'. A record is late when its
// timestamp is below the watermark when it arrives; a record that is not late joins every earlier record
// of the other side with its key that is within the bounds and still kept, with the later timestamp of the
// two. A record is kept until a watermark that advances after it arrived reaches its cleanup time: its
// time plus the last offset at which the other side joins it, or its own time if that is later (Flink's
// cleanup timer, which fires when the watermark advances to it).
func joinReference(c joinCase, steps []joinStep) (out joinOut) {
	lo, hi := c.lower, c.upper
	if c.lowerExclusive {
		lo++
	}
	if c.upperExclusive {
		hi--
	}
	type kept struct {
		joinStep
		cleanup int64
		gone    bool
	}
	var recs []kept
	wmA, wmB := int64(math.MinInt64), int64(math.MinInt64)
	wm := int64(math.MinInt64)
	counts := map[int64]int{}
	for _, s := range steps {
		if s.side == 'a' || s.side == 'b' {
			if s.ts < wm {
				late := &out.lateA
				if s.side == 'b' {
					late = &out.lateB
				}
				*late = append(*late, fmt.Sprintf("%d@%d", s.id, s.ts))
				continue
			}
			for _, r := range recs {
				a, b := r.joinStep, s
				if s.side == 'a' {
					a, b = s, r.joinStep
				}
				if r.side != s.side && !r.gone && r.id%joinKeys == s.id%joinKeys && b.ts >= a.ts+lo && b.ts <= a.ts+hi {
					out.pairs = append(out.pairs, fmt.Sprintf("a%d@%d b%d@%d@%d", a.id, a.ts, b.id, b.ts, max(a.ts, b.ts)))
					counts[a.id%joinKeys]++
				}
			}
			// The last time the other side joins: ta+hi for a record of the first input, tb-lo for one of
			// the second.
			last := s.ts + hi
			if s.side == 'b' {
				last = s.ts - lo
			}
			recs = append(recs, kept{joinStep: s, cleanup: max(last, s.ts)})
			continue
		}
		if s.side != 'y' {
			wmA = max(wmA, s.ts)
		}
		if s.side != 'x' {
			wmB = max(wmB, s.ts)
		}
		if m := min(wmA, wmB); m > wm {
			wm = m
			for i := range recs {
				recs[i].gone = recs[i].gone || recs[i].cleanup <= wm
			}
		}
	}
	for k, n := range counts {
		out.counts = append(out.counts, fmt.Sprintf("k%d=%d", k, n))
	}
	return out
}

// finalCounts keeps the last count per key of the function's side output (counts only grow).
func finalCounts(got []string) []string {
	last := map[int64]string{}
	for _, g := range got {
		var k, n, ts int64
		if _, err := fmt.Sscanf(g, "k%d=%d@%d", &k, &n, &ts); err != nil {
			panic(err)
		}
		last[k] = fmt.Sprintf("k%d=%d", k, n)
	}
	return slices.Collect(maps.Values(last))
}

// inputWatermarks returns the watermark steps that bring each input to where steps leave it.
func inputWatermarks(steps []joinStep) []joinStep {
	wm := map[byte]int64{}
	for _, s := range steps {
		switch s.side {
		case 'x', 'y':
			wm[s.side] = max(wm[s.side], s.ts)
		case 'w':
			wm['x'], wm['y'] = max(wm['x'], s.ts), max(wm['y'], s.ts)
		}
	}
	var out []joinStep
	for _, side := range []byte("xy") {
		if ts, ok := wm[side]; ok {
			out = append(out, joinStep{side: side, ts: ts})
		}
	}
	return out
}

// randomJoinScript returns a script of n steps: records of both inputs within a spread of the watermark,
// a sixth of it before (some late), and watermarks of either input that advance by up to half the spread
// now and then, the inputs' up to a spread apart. A small spread puts records at the watermark and at the
// bounds often.
func randomJoinScript(rng *rand.Rand, n int, spread int64) []joinStep {
	var steps []joinStep
	wm := [2]int64{1000, 1000}
	for i := range n {
		switch r := rng.IntN(10); {
		case r < 2:
			in := rng.IntN(2)
			if wm[in] > wm[1-in]+spread {
				in = 1 - in
			}
			wm[in] += rng.Int64N(spread / 2)
			steps = append(steps, joinStep{side: "xy"[in], ts: wm[in]})
		default:
			side := byte('a')
			if r >= 6 {
				side = 'b'
			}
			steps = append(steps, joinStep{side: side, ts: min(wm[0], wm[1]) - spread/6 + rng.Int64N(spread), id: int64(i)})
		}
	}
	return steps
}

// TestIntervalJoinMatchesReference runs random scripts through the operator, with inclusive and exclusive
// bounds of every sign, on both backends, once straight and once with a snapshot restored into a new
// operator at a random step, and compares the pairs, their timestamps, each side's late records (on their
// side outputs, at their own timestamps) and the function's keyed state (its last count per key, on a side
// output) with joinReference.
func TestIntervalJoinMatchesReference(t *testing.T) {
	cases := []joinCase{
		{lower: -20, upper: 20},
		{lower: -20, upper: 20, lowerExclusive: true, upperExclusive: true},
		{lower: 0, upper: 0},
		{lower: 0, upper: 1, upperExclusive: true},
		{lower: -1, upper: 0, lowerExclusive: true},
		{lower: 5, upper: 25, lowerExclusive: true},
		{lower: -25, upper: -5, upperExclusive: true},
		{lower: -40, upper: -30},
		{lower: -1, upper: 1},
	}
	for _, c := range cases {
		for _, backend := range []string{"memory", "pebble"} {
			name := fmt.Sprintf("%d%s,%d%s/%s", c.lower, map[bool]string{true: "x"}[c.lowerExclusive], c.upper, map[bool]string{true: "x"}[c.upperExclusive], backend)
			t.Run(name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(c.lower+100), uint64(c.upper+100)))
				var pairs, lateA, lateB int
				for round, spread := range []int64{60, 60, 12, 12, 6} {
					steps := randomJoinScript(rng, 200, spread)
					want := joinReference(c, steps)
					pairs, lateA, lateB = pairs+len(want.pairs), lateA+len(want.lateA), lateB+len(want.lateB)
					for _, cut := range []int{-1, rng.IntN(len(steps))} {
						var got joinOut
						h := newJoinHarness(t, backend, joinSpec(c))
						if cut >= 0 {
							feedJoin(h, steps[:cut])
							snap := h.Snapshot()
							got.add(h)
							h.Close()
							h = newJoinHarness(t, backend, joinSpec(c), snap)
							// The restore keeps the join's watermark, not its inputs': they come again from
							// upstream, as a restored job's sources make them again.
							feedJoin(h, inputWatermarks(steps[:cut]))
							feedJoin(h, steps[cut:])
						} else {
							feedJoin(h, steps)
							if n := metric(t, h, "pairs"); n != int64(len(want.pairs)) {
								t.Errorf("round %d: metric pairs = %d, want %d", round, n, len(want.pairs))
							}
						}
						if n := metric(t, h, "late_records_dropped"); n != 0 {
							t.Errorf("round %d: %d late records dropped with late tags on both sides", round, n)
						}
						got.add(h)
						h.Close()
						for _, x := range []struct {
							what      string
							got, want []string
						}{
							{"pairs", got.pairs, want.pairs},
							{"left late", got.lateA, want.lateA},
							{"right late", got.lateB, want.lateB},
							{"counts", finalCounts(got.counts), want.counts},
						} {
							if g, w := sorted(x.got), sorted(x.want); !slices.Equal(g, w) {
								t.Fatalf("round %d, cut at %d: %s:\ngot  %q\nwant %q", round, cut, x.what, g, w)
							}
						}
					}
				}
				if pairs < 20 || lateA < 20 || lateB < 20 {
					t.Fatalf("the scripts test too little: %d pairs, %d and %d late", pairs, lateA, lateB)
				}
			})
		}
	}
}

// TestIntervalJoinLateness holds the interval join to Flink's rules, worked out by hand for each script: a
// record is late only when its timestamp is below the watermark (one at the watermark joins), a pair
// a at ta and b at tb joins when ta+lower <= tb <= ta+upper and carries max(ta, tb), and a side's record
// stays in state until the watermark reaches ta+upper (left) or tb-lower (right), but never goes before
// the watermark reaches its own timestamp. Without late tags, late records are dropped and counted; at
// the end no key holds state. Both backends.
func TestIntervalJoinLateness(t *testing.T) {
	for _, tc := range []struct {
		name         string
		lower, upper int64
		script       []joinStep
		want         []string
		dropped      int64
	}{
		// a@1000 and b@1000 are at the watermark: not late. a@999 is below it: late, dropped, though b@1200
		// would join it (999+500 >= 1200).
		{"at the watermark", -500, 500,
			[]joinStep{{'w', 1000, 0}, {'a', 1000, 0}, {'a', 999, 0}, {'b', 1200, 0}, {'b', 1000, 0}},
			[]string{"a1000 b1000@1000", "a1000 b1200@1200"}, 1},
		{"at the watermark, the right side first", -500, 500,
			[]joinStep{{'w', 1000, 0}, {'b', 1000, 0}, {'b', 999, 0}, {'a', 1200, 0}},
			[]string{"a1200 b1000@1200"}, 1},
		// The join's watermark is the lower of its inputs': at 1000 on the first input alone, nothing is
		// late yet.
		{"the lower watermark of the two inputs", -500, 500,
			[]joinStep{{'x', 1000, 0}, {'b', 600, 0}, {'a', 700, 0}, {'y', 800, 0}, {'a', 799, 0}},
			[]string{"a700 b600@700"}, 1},
		// lower -2000, upper -1000: b comes 1 to 2 s before a. a@5000 is kept until the watermark reaches
		// 5000 (its own time; ta+upper = 4000 is earlier), so b@4000, at watermark 4000, still joins it.
		{"a negative upper bound keeps the left side until its own time", -2000, -1000,
			[]joinStep{{'a', 5000, 0}, {'w', 4000, 0}, {'b', 4000, 0}, {'w', 5000, 0}, {'b', 4500, 0}},
			[]string{"a5000 b4000@5000"}, 1},
		// lower 1000, upper 2000: b comes 1 to 2 s after a. b@5000 is kept until the watermark reaches 5000
		// (tb-lower = 4000 is earlier), so a@4000, at watermark 4000, still joins it.
		{"a positive lower bound keeps the right side until its own time", 1000, 2000,
			[]joinStep{{'b', 5000, 0}, {'w', 4000, 0}, {'a', 4000, 0}, {'w', 5000, 0}, {'a', 3500, 0}},
			[]string{"a4000 b5000@5000"}, 1},
		// lower 0, upper 1000: a@1000 goes once the watermark reaches 2000, so b@2000, at watermark 2000,
		// finds nothing (Flink's cleanup time ta+upper); b@1999 was late already.
		{"cleaned at the last time a partner joins", 0, 1000,
			[]joinStep{{'a', 1000, 0}, {'b', 1500, 0}, {'w', 2000, 0}, {'b', 2000, 0}, {'b', 1999, 0}},
			[]string{"a1000 b1500@1500"}, 1},
	} {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(tc.name+"/"+backend, func(t *testing.T) {
				spec := &IntervalJoinSpec[int64, int64, int64, string]{
					Key1: func(int64) int64 { return 1 }, Key2: func(int64) int64 { return 1 }, KeyCodec: codec.Int64(),
					Lower: tc.lower, Upper: tc.upper, CodecA: codec.Int64(), CodecB: codec.Int64(),
					New: func() ProcessJoinFunction[int64, int64, string] {
						return joinFuncOf(func(a, b int64, jc JoinContext, out Collector[string]) error {
							out.Collect(fmt.Sprintf("a%d b%d", jc.LeftTimestamp(), jc.RightTimestamp()))
							return nil
						})
					},
				}
				h := newJoinHarness(t, backend, spec)
				feedJoin(h, tc.script)
				if n := metric(t, h, "late_records_dropped"); n != tc.dropped {
					t.Errorf("late_records_dropped = %d, want %d", n, tc.dropped)
				}
				if got := sorted(timedStrings(h.Output())); !slices.Equal(got, tc.want) {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
				h.Watermark1(math.MaxInt64)
				h.Watermark2(math.MaxInt64)
				if keys := StateKeys[int64](h); len(keys) != 0 {
					t.Errorf("keys %v hold state after the last watermark", keys)
				}
			})
		}
	}
}

// joinFuncOf makes a plain function a ProcessJoinFunction.
type joinFuncOf func(a, b int64, jc JoinContext, out Collector[string]) error

func (joinFuncOf) Open(RuntimeContext) error { return nil }
func (joinFuncOf) Close() error              { return nil }
func (f joinFuncOf) ProcessElement(a, b int64, jc JoinContext, out Collector[string]) error {
	return f(a, b, jc, out)
}

// TestIntervalJoinAllocations holds the per-record path of the heap backend to no allocation in steady
// state: a record that joins partners at timestamps that hold records already, and a late record that goes
// to its side output.
func TestIntervalJoinAllocations(t *testing.T) {
	spec := &IntervalJoinSpec[int64, int64, int64, int64]{
		Key1: func(int64) int64 { return 1 }, Key2: func(int64) int64 { return 1 }, KeyCodec: codec.Int64(),
		Lower: -10, Upper: 10, CodecA: codec.Int64(), CodecB: codec.Int64(), LeftLateTag: "late-a",
		New: func() ProcessJoinFunction[int64, int64, int64] { return sumJoin{} },
	}
	h := NewTwoInputHarness[Timed[int64], Timed[int64], Timed[int64]](t, spec, HarnessConfig{})
	for ts := int64(100); ts < 105; ts++ {
		h.Process2(Timed[int64]{Ts: ts, V: ts})
	}
	h.Watermark1(100)
	h.Watermark2(100)
	for _, x := range []struct {
		what string
		v    Timed[int64]
	}{
		{"a joining record", Timed[int64]{Ts: 102, V: 7}},
		{"a late record", Timed[int64]{Ts: 99, V: 7}},
	} {
		// The harness's own steps allocate; the operator's input is what a task calls.
		if n := testing.AllocsPerRun(1000, func() { h.in1.Collect(x.v) }); n != 0 {
			t.Errorf("%s: %v allocations per record", x.what, n)
		}
	}
	if n := len(h.TakeOutput()); n < 5000 {
		t.Fatalf("%d results, want one per joining record and partner", n)
	}
}

type sumJoin struct{}

func (sumJoin) Open(RuntimeContext) error { return nil }
func (sumJoin) Close() error              { return nil }
func (sumJoin) ProcessElement(a, b int64, _ JoinContext, out Collector[int64]) error {
	out.Collect(a + b)
	return nil
}

package operator

import (
	"bytes"
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
	t      *testing.T
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

// timedLog records timed records as "v @ts".
type timedLog[T any] struct{ got []string }

func (l *timedLog[T]) Collect(v Timed[T]) { l.got = append(l.got, fmt.Sprintf("%v @%d", v.V, v.Ts)) }

// joinOut is what an interval join emitted: its results, the late records of each side and the running
// counts its function emitted to a side output.
type joinOut struct {
	pairs        windowLog
	lateA, lateB timedLog[int64]
	counts       timedLog[string]
}

// joinRun is an interval join built for a test, fed by hand.
type joinRun struct {
	t   *testing.T
	ctx *Context
	b   Built
	out *joinOut
	wm  int64
}

func newJoinRun(t *testing.T, backend string, spec *IntervalJoinSpec[int64, int64, int64, string], out *joinOut, restore []byte, wm int64) *joinRun {
	t.Helper()
	ctx := windowTestContext(backend)
	ctx.side = []sideOutput{{tag: "late-a", out: Collector[Timed[int64]](&out.lateA)},
		{tag: "late-b", out: Collector[Timed[int64]](&out.lateB)}, {tag: "counts", out: Collector[Timed[string]](&out.counts)}}
	b, err := spec.Build(ctx, []any{Collector[Timed[string]](&out.pairs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	if restore != nil {
		if err := b.Restore(restore); err != nil {
			t.Fatal(err)
		}
		b.RestoreWatermark(wm)
	}
	return &joinRun{t: t, ctx: ctx, b: b, out: out, wm: wm}
}

func (r *joinRun) feed(steps []joinStep) {
	left, right := r.b.Input.(Collector[Timed[int64]]), r.b.Input2.(Collector[Timed[int64]])
	for _, s := range steps {
		switch s.side {
		case 'a':
			left.Collect(Timed[int64]{Ts: s.ts, V: s.id})
		case 'b':
			right.Collect(Timed[int64]{Ts: s.ts, V: s.id})
		default:
			if err := r.b.Watermark(s.ts); err != nil {
				r.t.Fatal(err)
			}
			r.wm = max(r.wm, s.ts)
		}
	}
}

func (r *joinRun) snapshot() []byte {
	w, err := r.b.Snapshot(1)
	if err != nil {
		r.t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := w(&buf); err != nil {
		r.t.Fatal(err)
	}
	return buf.Bytes()
}

func (r *joinRun) close() {
	if err := r.b.Close(); err != nil {
		r.t.Error(err)
	}
}

// metric returns the value of the operator's metric name.
func (r *joinRun) metric(name string) int64 {
	r.ctx.rt.Counters.Publish()
	for _, m := range r.ctx.rt.Counters.PublishedMetrics() {
		if m.Name == "window/"+name {
			return m.Value
		}
	}
	return 0
}

// joinReference computes what an interval join emits for a script, from Flink's rules alone, by a nested
// loop over the records: a record is late when its timestamp is below the watermark when it arrives; a
// record that is not late joins every earlier record of the other side with its key that is within the
// bounds and still kept. A record is kept until a watermark that advances after it arrived reaches its
// cleanup time: its time plus the last offset at which the other side joins it, or its own time if that is
// later (Flink's cleanup timer, which fires when the watermark advances to it).
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
	var as, bs []kept
	wm := int64(math.MinInt64)
	counts := map[int64]int{}
	pair := func(a, b joinStep) {
		out.pairs.got = append(out.pairs.got, fmt.Sprintf("a%d@%d b%d@%d @%d", a.id, a.ts, b.id, b.ts, max(a.ts, b.ts)))
		counts[a.id%joinKeys]++
	}
	for _, s := range steps {
		switch {
		case s.side == 'w':
			if s.ts > wm {
				wm = s.ts
				for _, k := range [][]kept{as, bs} {
					for i := range k {
						k[i].gone = k[i].gone || k[i].cleanup <= wm
					}
				}
			}
		case s.ts < wm && s.side == 'a':
			out.lateA.got = append(out.lateA.got, fmt.Sprintf("%d @%d", s.id, s.ts))
		case s.ts < wm:
			out.lateB.got = append(out.lateB.got, fmt.Sprintf("%d @%d", s.id, s.ts))
		case s.side == 'a':
			for _, b := range bs {
				if b.id%joinKeys == s.id%joinKeys && !b.gone && b.ts >= s.ts+lo && b.ts <= s.ts+hi {
					pair(s, b.joinStep)
				}
			}
			as = append(as, kept{joinStep: s, cleanup: max(s.ts+hi, s.ts)})
		default:
			for _, a := range as {
				if a.id%joinKeys == s.id%joinKeys && !a.gone && s.ts >= a.ts+lo && s.ts <= a.ts+hi {
					pair(a.joinStep, s)
				}
			}
			bs = append(bs, kept{joinStep: s, cleanup: max(s.ts-lo, s.ts)})
		}
	}
	for k, n := range counts {
		out.counts.got = append(out.counts.got, fmt.Sprintf("k%d=%d", k, n))
	}
	return out
}

// finalCounts keeps the last count per key of the function's side output (counts only grow).
func finalCounts(got []string) []string {
	last := map[string]string{}
	for _, g := range got {
		var k, n, ts int64
		if _, err := fmt.Sscanf(g, "k%d=%d @%d", &k, &n, &ts); err != nil {
			panic(err)
		}
		last[fmt.Sprint(k)] = fmt.Sprintf("k%d=%d", k, n)
	}
	return slices.Collect(maps.Values(last))
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// randomJoinScript returns a script of n steps: records of both sides within a spread of the watermark,
// a sixth of it before (some late), and watermarks that advance by up to half the spread now and then. A
// small spread puts records at the watermark and at the bounds often.
func randomJoinScript(rng *rand.Rand, n int, spread int64) []joinStep {
	var steps []joinStep
	wm := int64(1000)
	for i := range n {
		switch r := rng.IntN(10); {
		case r < 2:
			wm += rng.Int64N(spread / 2)
			steps = append(steps, joinStep{side: 'w', ts: wm})
		default:
			side := byte('a')
			if r >= 6 {
				side = 'b'
			}
			steps = append(steps, joinStep{side: side, ts: wm - spread/6 + rng.Int64N(spread), id: int64(i)})
		}
	}
	return steps
}

// TestIntervalJoinMatchesReference runs random scripts through the operator, with inclusive and exclusive
// bounds of every sign, on both backends, once straight and once with a snapshot and a restore into a new
// operator at a random step, and compares the pairs, their timestamps, each side's late records and the
// function's keyed state (its last count per key) with joinReference.
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
				for round, spread := range []int64{60, 60, 12, 12, 6} {
					steps := randomJoinScript(rng, 200, spread)
					want := joinReference(c, steps)
					if len(want.pairs.got) == 0 || len(want.lateA.got) == 0 || len(want.lateB.got) == 0 {
						t.Fatalf("round %d: the script tests too little: %d pairs, %d and %d late", round, len(want.pairs.got), len(want.lateA.got), len(want.lateB.got))
					}
					for _, cut := range []int{-1, rng.IntN(len(steps))} {
						var got joinOut
						r := newJoinRun(t, backend, joinSpec(c), &got, nil, math.MinInt64)
						if cut >= 0 {
							r.feed(steps[:cut])
							snap, wm := r.snapshot(), r.wm
							r.close()
							r = newJoinRun(t, backend, joinSpec(c), &got, snap, wm)
							r.feed(steps[cut:])
						} else {
							r.feed(steps)
						}
						if n := r.metric("pairs"); cut < 0 && n != int64(len(want.pairs.got)) {
							t.Errorf("round %d: metric pairs = %d, want %d", round, n, len(want.pairs.got))
						}
						if n := r.metric("late_records_dropped"); n != 0 {
							t.Errorf("round %d: %d late records dropped with late tags on both sides", round, n)
						}
						r.close()
						for _, x := range []struct {
							what      string
							got, want []string
						}{
							{"pairs", got.pairs.got, want.pairs.got},
							{"left late", got.lateA.got, want.lateA.got},
							{"right late", got.lateB.got, want.lateB.got},
							{"counts", finalCounts(got.counts.got), want.counts.got},
						} {
							if g, w := sorted(x.got), sorted(x.want); !slices.Equal(g, w) {
								t.Fatalf("round %d, cut at %d: %s:\ngot  %q\nwant %q", round, cut, x.what, g, w)
							}
						}
					}
				}
			})
		}
	}
}

// TestIntervalJoinLateness holds the interval join to Flink's rules, worked out by hand for each script: a
// record is late only when its timestamp is below the watermark (one at the watermark joins), a pair
// a at ta and b at tb joins when ta+lower <= tb <= ta+upper and carries max(ta, tb), and a side's record
// stays in state until the watermark reaches ta+upper (left) or tb-lower (right), but never goes before
// the watermark reaches its own timestamp. Without late tags, late records are dropped and counted. Both
// backends.
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
			[]string{"a1000 b1000 @1000", "a1000 b1200 @1200"}, 1},
		{"at the watermark, the right side first", -500, 500,
			[]joinStep{{'w', 1000, 0}, {'b', 1000, 0}, {'b', 999, 0}, {'a', 1200, 0}},
			[]string{"a1200 b1000 @1200"}, 1},
		// lower -2000, upper -1000: b comes 1 to 2 s before a. a@5000 is kept until the watermark reaches
		// 5000 (its own time; ta+upper = 4000 is earlier), so b@4000, at watermark 4000, still joins it.
		{"a negative upper bound keeps the left side until its own time", -2000, -1000,
			[]joinStep{{'a', 5000, 0}, {'w', 4000, 0}, {'b', 4000, 0}, {'w', 5000, 0}, {'b', 4500, 0}},
			[]string{"a5000 b4000 @5000"}, 1},
		// lower 1000, upper 2000: b comes 1 to 2 s after a. b@5000 is kept until the watermark reaches 5000
		// (tb-lower = 4000 is earlier), so a@4000, at watermark 4000, still joins it.
		{"a positive lower bound keeps the right side until its own time", 1000, 2000,
			[]joinStep{{'b', 5000, 0}, {'w', 4000, 0}, {'a', 4000, 0}, {'w', 5000, 0}, {'a', 3500, 0}},
			[]string{"a4000 b5000 @5000"}, 1},
		// lower 0, upper 1000: a@1000 goes once the watermark reaches 2000, so b@2000, at watermark 2000,
		// finds nothing (Flink's cleanup time ta+upper); b@1999 was late already.
		{"cleaned at the last time a partner joins", 0, 1000,
			[]joinStep{{'a', 1000, 0}, {'b', 1500, 0}, {'w', 2000, 0}, {'b', 2000, 0}, {'b', 1999, 0}},
			[]string{"a1000 b1500 @1500"}, 1},
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
				var out joinOut
				r := newJoinRun(t, backend, spec, &out, nil, math.MinInt64)
				r.feed(tc.script)
				if n := r.metric("late_records_dropped"); n != tc.dropped {
					t.Errorf("late_records_dropped = %d, want %d", n, tc.dropped)
				}
				r.close()
				if got := sorted(out.pairs.got); !slices.Equal(got, tc.want) {
					t.Fatalf("got %q, want %q", got, tc.want)
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

// nopCollector drops what it is given.
type nopCollector[T any] struct{}

func (nopCollector[T]) Collect(T)        {}
func (nopCollector[T]) CollectBatch([]T) {}

// TestIntervalJoinAllocations holds the per-record path of the heap backend to no allocation in steady
// state: a record that joins partners at timestamps that hold records already, and a late record that goes
// to its side output.
func TestIntervalJoinAllocations(t *testing.T) {
	spec := &IntervalJoinSpec[int64, int64, int64, int64]{
		Key1: func(int64) int64 { return 1 }, Key2: func(int64) int64 { return 1 }, KeyCodec: codec.Int64(),
		Lower: -10, Upper: 10, CodecA: codec.Int64(), CodecB: codec.Int64(), LeftLateTag: "late-a",
		New: func() ProcessJoinFunction[int64, int64, int64] { return sumJoin{} },
	}
	ctx := windowTestContext("memory")
	ctx.side = []sideOutput{{tag: "late-a", out: Collector[Timed[int64]](nopCollector[Timed[int64]]{})}}
	b, err := spec.Build(ctx, []any{Collector[Timed[int64]](nopCollector[Timed[int64]]{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	left, right := b.Input.(Collector[Timed[int64]]), b.Input2.(Collector[Timed[int64]])
	for ts := int64(100); ts < 105; ts++ {
		right.Collect(Timed[int64]{Ts: ts, V: ts})
	}
	if err := b.Watermark(100); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		what string
		in   Collector[Timed[int64]]
		v    Timed[int64]
	}{
		{"a joining record", left, Timed[int64]{Ts: 102, V: 7}},
		{"a late record", left, Timed[int64]{Ts: 99, V: 7}},
	} {
		if n := testing.AllocsPerRun(1000, func() { x.in.Collect(x.v) }); n != 0 {
			t.Errorf("%s: %v allocations per record", x.what, n)
		}
	}
}

type sumJoin struct{}

func (sumJoin) Open(RuntimeContext) error { return nil }
func (sumJoin) Close() error              { return nil }
func (sumJoin) ProcessElement(a, b int64, _ JoinContext, out Collector[int64]) error {
	out.Collect(a + b)
	return nil
}

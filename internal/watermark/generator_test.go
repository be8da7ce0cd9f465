package watermark

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestGenerator feeds timestamps and periodic emissions: each step is either an event (ts) or a periodic
// call with the watermark and whether it is emitted.
func TestGenerator(t *testing.T) {
	type step struct {
		event bool
		ts    int64
		want  Watermark
		emit  bool
	}
	ev := func(ts int64) step { return step{event: true, ts: ts} }
	tick := func(want Watermark, emit bool) step { return step{want: want, emit: emit} }
	for _, tc := range []struct {
		name  string
		g     *Generator
		steps []step
	}{
		{"nothing before the first record", BoundedOutOfOrderness(time.Second), []step{
			tick(MinWatermark, false), tick(MinWatermark, false)}},
		{"max timestamp minus bound minus 1 ms", BoundedOutOfOrderness(5 * time.Second), []step{
			ev(10_000), tick(4_999, true), tick(4_999, false),
			ev(8_000), ev(9_000), tick(4_999, false), // out of order, within the bound: no advance
			ev(12_000), ev(11_000), tick(6_999, true)}},
		{"monotonous: max timestamp minus 1 ms", Monotonous(), []step{
			ev(100), ev(100), tick(99, true), ev(101), tick(100, true), tick(100, false)}},
		{"bound truncated to whole milliseconds", BoundedOutOfOrderness(1500 * time.Microsecond), []step{
			ev(10), tick(8, true)}},
		{"negative timestamps", BoundedOutOfOrderness(10 * time.Millisecond), []step{
			ev(-100), tick(-111, true), ev(-50), tick(-61, true)}},
		{"timestamps at the bottom of int64 allow no watermark", BoundedOutOfOrderness(10 * time.Millisecond), []step{
			ev(math.MinInt64), tick(MinWatermark, false), ev(math.MinInt64 + 10), tick(MinWatermark, false),
			ev(math.MinInt64 + 12), tick(MinWatermark+1, true)}},
		{"the top of int64 stays below MaxWatermark", Monotonous(), []step{
			ev(math.MaxInt64), tick(MaxWatermark-1, true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, s := range tc.steps {
				if s.event {
					tc.g.OnEvent(s.ts)
					continue
				}
				w, emit := tc.g.OnPeriodic()
				if w != s.want || emit != s.emit {
					t.Fatalf("step %d: OnPeriodic() = %s, %t, want %s, %t", i, w, emit, s.want, s.emit)
				}
			}
		})
	}
}

// TestGeneratorRandom: whatever the order of timestamps, the emitted watermarks rise strictly, and each is
// the highest timestamp so far minus the bound minus 1 ms.
func TestGeneratorRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for range 50 {
		bound := int64(rng.IntN(100))
		g := BoundedOutOfOrderness(time.Duration(bound) * time.Millisecond)
		last, highest := MinWatermark, int64(math.MinInt64)
		for range 500 {
			if rng.IntN(4) > 0 {
				ts := rng.Int64N(10_000) - 5_000
				highest = max(highest, ts)
				g.OnEvent(ts)
				continue
			}
			w, emit := g.OnPeriodic()
			want := Watermark(highest - bound - 1)
			if highest == math.MinInt64 {
				want = MinWatermark
			}
			switch {
			case emit && w <= last:
				t.Fatalf("bound %d: emitted %s after %s", bound, w, last)
			case w != max(want, last):
				t.Fatalf("bound %d, highest %d: watermark %s, want %s", bound, highest, w, want)
			}
			last = w
		}
	}
}

// TestIdleDetector drives a detector with a timeout of 100 ms: each step is a record or a tick at a time.
func TestIdleDetector(t *testing.T) {
	type step struct {
		event  bool
		now    int64
		change bool // became active (event) or idle (tick)
	}
	ev := func(change bool) step { return step{event: true, change: change} }
	tick := func(now int64, change bool) step { return step{now: now, change: change} }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a source that never reads a record goes idle", []step{
			tick(1000, false), tick(1050, false), tick(1099, false), tick(1100, true), tick(1200, false)}},
		{"records keep it active", []step{
			tick(0, false), ev(false), tick(60, false), ev(false), tick(120, false), tick(180, false),
			tick(219, false), tick(220, true)}},
		{"a record after idleness makes it active at once", []step{
			tick(0, false), tick(100, true), ev(true), ev(false), tick(150, false), tick(249, false),
			tick(250, true)}},
		{"idle at least the timeout after the last record", []step{
			tick(0, false), tick(90, false), ev(false), tick(180, false), tick(270, false), tick(280, true)}},
		{"a clock that goes back counts as no time", []step{
			tick(500, false), tick(400, false), tick(599, false), tick(600, true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := IdleAfter(100 * time.Millisecond)
			for i, s := range tc.steps {
				var got bool
				if s.event {
					got = d.OnEvent()
				} else {
					got = d.Tick(s.now)
				}
				if got != s.change {
					t.Fatalf("step %d: got %t, want %t", i, got, s.change)
				}
			}
		})
	}
}

package watermark

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkOnWatermark measures a watermark on a gate of n channels. "round-robin": channels advance in
// turn by the same step, as periodic producers do (the table is scanned once a round). "worst": the
// channel holding the output always moves past all others, so every watermark scans the table.
func BenchmarkOnWatermark(b *testing.B) {
	for _, n := range []int{1, 8, 64, 512} {
		b.Run(fmt.Sprintf("round-robin/%d", n), func(b *testing.B) {
			v := NewValve(n)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				v.OnWatermark(i%n, Watermark(i/n+1))
			}
		})
		b.Run(fmt.Sprintf("worst/%d", n), func(b *testing.B) {
			v := NewValve(n)
			for ch := range n {
				v.OnWatermark(ch, Watermark(ch+1))
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				// The lowest channel is i%n, at i+1; it jumps to i+n+1, above every other.
				v.OnWatermark(i%n, Watermark(i+n+1))
			}
		})
	}
}

// BenchmarkGenerator measures the per-record call of a source's generator and detector.
func BenchmarkGenerator(b *testing.B) {
	g := BoundedOutOfOrderness(0)
	d := IdleAfter(time.Second)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		g.OnEvent(int64(i))
		d.OnEvent()
	}
}

// TestOnWatermarkDoesNotAllocate holds the per-watermark path to zero allocations.
func TestOnWatermarkDoesNotAllocate(t *testing.T) {
	v := NewValve(4)
	tv := NewTwoInputValve(2, 2)
	g := Monotonous()
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		i++
		v.OnWatermark(i%4, Watermark(i))
		tv.OnWatermark(i%2, (i/2)%2, Watermark(i))
		g.OnEvent(int64(i))
		g.OnPeriodic()
	}); a != 0 {
		t.Errorf("%v allocations per watermark, want 0", a)
	}
	// Statuses too, with the flush of the last channel going idle.
	if a := testing.AllocsPerRun(1000, func() {
		i++
		v.OnWatermark(i%4, Watermark(i))
		v.OnIdle(i % 4)
		tv.OnIdle(i%2, 0)
		tv.OnIdle(i%2, 1)
		if i%4 == 3 {
			for ch := range 4 {
				v.OnActive(ch)
			}
		}
		tv.OnActive(i%2, i%2)
	}); a != 0 {
		t.Errorf("%v allocations per status, want 0", a)
	}
}

package watermark

import (
	"fmt"
	"time"
)

// Generator makes a source's watermarks from the timestamps of its records: periodically, the highest
// timestamp seen minus the out-of-orderness bound minus one millisecond (Flink's rule for bounded
// out-of-orderness: a record with the highest timestamp's own value may still follow, so the watermark
// stays just below it). Create it with BoundedOutOfOrderness or Monotonous. A Generator is not safe for
// concurrent use.
type Generator struct {
	boundMillis int64
	maxSeen     int64
	seen        bool
	emitted     Watermark
}

// BoundedOutOfOrderness returns a generator for records that arrive at most bound late: once a record with
// timestamp t was read, none at or below t-bound-1 ms follow. The bound is truncated to whole milliseconds
// and must not be negative.
func BoundedOutOfOrderness(bound time.Duration) *Generator {
	if bound < 0 {
		panic(fmt.Sprintf("watermark: out-of-orderness bound %s, want at least 0", bound))
	}
	return &Generator{boundMillis: bound.Milliseconds(), emitted: MinWatermark}
}

// Monotonous returns a generator for records whose timestamps never decrease: bounded out-of-orderness
// with a bound of zero, so the watermark is the highest timestamp minus one millisecond.
func Monotonous() *Generator { return BoundedOutOfOrderness(0) }

// OnEvent records the timestamp of a record read by the source. It only compares and stores: it is on the
// per-record path.
func (g *Generator) OnEvent(timestampMillis int64) {
	if !g.seen || timestampMillis > g.maxSeen {
		g.maxSeen, g.seen = timestampMillis, true
	}
}

// OnPeriodic is called every watermark interval; it returns the watermark to emit and true if it is above
// the last one emitted, or false if the watermark has not advanced (no record, or none above the highest
// timestamp so far).
func (g *Generator) OnPeriodic() (Watermark, bool) {
	w := g.Current()
	if w <= g.emitted {
		return g.emitted, false
	}
	g.emitted = w
	return w, true
}

// Current returns the watermark the records so far allow, MinWatermark before the first record. It never
// goes back, and it is at most MaxWatermark-1: only the end of input emits MaxWatermark.
func (g *Generator) Current() Watermark {
	// maxSeen-bound-1 without overflowing below MinWatermark: a timestamp within bound+1 ms of the lowest
	// int64 allows no watermark.
	if !g.seen || g.maxSeen < int64(MinWatermark)+g.boundMillis+1 {
		return MinWatermark
	}
	return Watermark(g.maxSeen - g.boundMillis - 1)
}

// IdleDetector decides when a source (or a split of it) is idle: when no record was read during at least
// the timeout, measured on the times the caller passes to Tick. It reads no clock: OnEvent, on the
// per-record path, only sets a flag (reading the clock per record would cost more than the record), and
// Tick, called on the watermark interval, compares times. Inactivity is measured from the last tick that
// found a record read since the tick before it (or from the first tick), so idleness is declared at
// least the timeout and at most the timeout plus one tick interval after the last record. The caller
// should pass a time that stands still while the source is backpressured (as Flink does since FLIP-471),
// or a blocked source may be called idle. An IdleDetector is not safe for concurrent use.
type IdleDetector struct {
	timeoutMillis int64
	sawEvent      bool
	started       bool // the inactivity timer runs
	sinceMillis   int64
	idle          bool
}

// IdleAfter returns a detector that declares idleness after timeout without records; timeout is truncated
// to whole milliseconds and must be at least one.
func IdleAfter(timeout time.Duration) *IdleDetector {
	if timeout < time.Millisecond {
		panic(fmt.Sprintf("watermark: idle timeout %s, want at least 1ms", timeout))
	}
	return &IdleDetector{timeoutMillis: timeout.Milliseconds()}
}

// OnEvent records that the source read a record. It returns true if the source was idle: the caller must
// forward an active status before the record.
func (d *IdleDetector) OnEvent() (becameActive bool) {
	d.sawEvent = true
	if d.idle {
		d.idle = false
		return true
	}
	return false
}

// Tick checks for idleness at nowMillis (any monotone milliseconds; a time before the previous tick's
// counts as no time passing). It returns true when the source has just become idle: the caller must
// forward an idle status, and stops emitting watermarks until the next record.
func (d *IdleDetector) Tick(nowMillis int64) (becameIdle bool) {
	if d.sawEvent || !d.started {
		d.sawEvent, d.started, d.sinceMillis = false, true, nowMillis
		return false
	}
	if d.idle || nowMillis-d.sinceMillis < d.timeoutMillis {
		return false
	}
	d.idle = true
	return true
}

// Idle reports whether the source is idle.
func (d *IdleDetector) Idle() bool { return d.idle }

package task

import (
	"sync/atomic"
	"time"

	"github.com/runnel-dev/runnel/internal/network"
)

// Where a task's time goes (Flink's busyTimeMsPerSecond, backPressuredTimeMsPerSecond, idleTimeMsPerSecond)
//
// A running attempt is at every moment idle, backpressured or busy. Idle is its loop waiting for something
// to do: an input buffer, a source's next record, mail, a timer (between, loop.go). Backpressured is the
// attempt blocked on its output: no buffer of its output pool is free, because its readers are behind
// (network.BufferPool's Request). Busy is the rest: records, timers, checkpoints, its operators' own waits
// (a sink writing to a slow system is busy, as in Flink). The two waits are measured by WaitClocks read as
// each wait begins and ends; the record path reads no clock. The rates per second are computed from two
// readings by whoever reads them (the TaskManager, every time it sends the counters): see MsPerSecond.

// TimeSample is a reading of an attempt's wait clocks: the time it waited, idle and backpressured, in total
// at At (a network.Monotonic reading).
type TimeSample struct {
	At, Idle, Backpressured time.Duration
}

// timeClocks are the clocks of an attempt's time.
type timeClocks struct {
	idle, backpressured network.WaitClock
	// began is the reading as the attempt started running (nil before): the first reading rates are
	// computed from.
	began atomic.Pointer[TimeSample]
}

// startTimes marks the start of the attempt's run, on the task goroutine.
func (c *Counters) startTimes() {
	now := network.Monotonic()
	s := &TimeSample{At: now, Idle: c.times.idle.Waited(now), Backpressured: c.times.backpressured.Waited(now)}
	c.times.began.Store(s)
}

// Times returns a reading of the attempt's wait clocks now and the one as it started running; ok is false
// before it runs. Safe on any goroutine.
func (c *Counters) Times() (now, began TimeSample, ok bool) {
	b := c.times.began.Load()
	if b == nil {
		return TimeSample{}, TimeSample{}, false
	}
	at := network.Monotonic()
	return TimeSample{At: at, Idle: c.times.idle.Waited(at), Backpressured: c.times.backpressured.Waited(at)}, *b, true
}

// MsPerSecond returns how the attempt spent the time from reading a to the later reading b, in milliseconds
// per second, rounded: idle and backpressured as measured, each at most 1000, and busy the rest (at least
// 0). Readings less than a millisecond apart give all three 0: too short to tell.
func MsPerSecond(a, b TimeSample) (busy, backpressured, idle int64) {
	span := b.At - a.At
	if span < time.Millisecond {
		return 0, 0, 0
	}
	per := func(d time.Duration) int64 {
		d = min(max(d, 0), span) // a wait is never longer than the span: no overflow below
		return (int64(d)*1000 + int64(span)/2) / int64(span)
	}
	idle = per(b.Idle - a.Idle)
	backpressured = per(b.Backpressured - a.Backpressured)
	return max(1000-idle-backpressured, 0), backpressured, idle
}

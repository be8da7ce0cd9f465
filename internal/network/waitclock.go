package network

import (
	"runtime"
	"sync/atomic"
	"time"
)

// clockEpoch is the origin of Monotonic: readings are durations since it, so they keep the monotonic clock
// and fit an int64 of nanoseconds.
var clockEpoch = time.Now()

// Monotonic returns the monotonic clock: the time since the process's start, or near it. WaitClocks take
// their readings from it.
func Monotonic() time.Duration { return time.Since(clockEpoch) }

// WaitClock sums the time a goroutine spends waiting: a task's loop waiting for input (idle), a task waiting
// for an output buffer (backpressured). The waiting goroutine calls Start as it begins a wait and Stop as it
// ends it, one wait at a time, so the clock is read twice per wait and never on the way of a record that
// does not wait. Waited may be called on any goroutine: it counts the wait going on up to its reading, so
// that a task blocked for seconds shows as blocked while it is. The zero value is a clock at zero, not
// waiting.
type WaitClock struct {
	// seq is odd while Start or Stop changes the fields: a reader that saw it odd, or changed, reads again
	// (a sequence lock; the waiting goroutine, the only writer, never waits for a reader).
	seq atomic.Uint64
	// total is the sum of the ended waits (ns); since is 1 + the Monotonic reading at the start of the wait
	// going on, 0 when none is.
	total atomic.Int64
	since atomic.Int64
}

// Start marks the start of a wait at now (a Monotonic reading). Starting a clock that waits already is no
// change.
func (w *WaitClock) Start(now time.Duration) {
	if w.since.Load() != 0 {
		return
	}
	w.seq.Add(1)
	w.since.Store(int64(now) + 1)
	w.seq.Add(1)
}

// Stop marks the end of the wait going on at now. Stopping a clock that does not wait is no change.
func (w *WaitClock) Stop(now time.Duration) {
	s := w.since.Load()
	if s == 0 {
		return
	}
	w.seq.Add(1)
	w.total.Add(max(int64(now)-(s-1), 0))
	w.since.Store(0)
	w.seq.Add(1)
}

// Waited returns the time waited in total up to now (a Monotonic reading), the wait going on included.
func (w *WaitClock) Waited(now time.Duration) time.Duration {
	for {
		s1 := w.seq.Load()
		if s1&1 == 0 {
			total, since := w.total.Load(), w.since.Load()
			if w.seq.Load() == s1 {
				if since != 0 {
					total += max(int64(now)-(since-1), 0)
				}
				return time.Duration(total)
			}
		}
		runtime.Gosched() // the writer is between its two increments: let it finish
	}
}

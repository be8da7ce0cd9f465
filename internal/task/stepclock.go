package task

import (
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/internal/determinants"
)

// stepClock is the processing time a task with a determinant log gives its operators: the time read once
// at the start of each step (an input buffer, a timer call) and recorded in the log when it changed, so
// that a replaying attempt sets the very same times at the very same steps (docs/taskfailover.md §1).
// Within a step it does not move. Timers, tickers and sleeps are the underlying clock's.
type stepClock struct {
	clockwork.Clock
	ms       atomic.Int64 // the step's time, epoch ms; read by operators on the task goroutine and by tests
	recorded bool         // a time is in the log: the first step always records one
}

// Now returns the time of the current step.
func (c *stepClock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

// Since returns the time elapsed since t, as of the current step.
func (c *stepClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Until returns the duration until t, as of the current step.
func (c *stepClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// step begins a step: live, it reads the underlying clock and records the time if it changed since the
// last step; replaying, the log's Time entries set it (replayTime).
func (r *run) step() {
	c := r.stepped
	if c == nil || r.replay != nil {
		return
	}
	now := c.Clock.Now().UnixMilli()
	if now != c.ms.Load() || !c.recorded {
		c.ms.Store(now)
		c.recorded = true
		r.record(determinants.Entry{Kind: determinants.Time, Value: now})
	}
}

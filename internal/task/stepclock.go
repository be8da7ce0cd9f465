package task

import (
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
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

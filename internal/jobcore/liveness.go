package jobcore

import (
	"cmp"
	"slices"
	"time"
)

// Liveness is the JobManager's failure detector for its TaskManagers: a TaskManager silent for more than
// the timeout is lost. It is fed what the dispatcher hears, with the time it heard it (a time.Duration on
// the caller's monotonic clock, since any fixed origin), and says who is lost when ticked; it reads no clock
// and starts no timer, so the caller sets one at NextDeadline.
//
// Bound: one entry per TaskManager heard from and not yet reported lost or forgotten; the caller forgets a
// TaskManager whose session ended, so the table never outgrows the sessions.
type Liveness struct {
	timeout time.Duration
	// heard is when each TaskManager was last heard from.
	heard map[TaskManagerID]time.Duration
}

// NewLiveness returns a detector that declares a TaskManager lost once it was silent for more than
// timeout. A timeout of zero or less declares no one lost (the mini-cluster's TaskManagers cannot die
// alone), though it still tracks when each was heard.
func NewLiveness(timeout time.Duration) *Liveness {
	return &Liveness{timeout: max(timeout, 0), heard: map[TaskManagerID]time.Duration{}}
}

// Heard records a sign of life of tm at now: any message counts, not only heartbeats. The first Heard of a
// TaskManager starts watching it, so the caller calls it only while tm's session is live: a message read
// after the session was declared lost must not bring it back, or it would be reported lost twice. Time
// does not go back: a now older than the last one heard is ignored.
func (l *Liveness) Heard(tm TaskManagerID, now time.Duration) {
	if last, ok := l.heard[tm]; !ok || now > last {
		l.heard[tm] = now
	}
}

// Forget stops watching tm: its session ended, or it was declared lost some other way.
func (l *Liveness) Forget(tm TaskManagerID) {
	delete(l.heard, tm)
}

// LastHeard returns when tm was last heard from, and whether it is watched.
func (l *Liveness) LastHeard(tm TaskManagerID) (time.Duration, bool) {
	at, ok := l.heard[tm]
	return at, ok
}

// Tick returns the TaskManagers silent for more than the timeout at now, the longest silent first (ties by
// id), and forgets them: each loss is reported once.
func (l *Liveness) Tick(now time.Duration) []TaskManagerID {
	if l.timeout == 0 {
		return nil
	}
	var lost []TaskManagerID
	for tm, at := range l.heard {
		if now-at > l.timeout {
			lost = append(lost, tm)
		}
	}
	slices.SortFunc(lost, func(a, b TaskManagerID) int {
		return cmp.Or(cmp.Compare(l.heard[a], l.heard[b]), cmp.Compare(a, b))
	})
	for _, tm := range lost {
		delete(l.heard, tm)
	}
	return lost
}

// NextDeadline returns the earliest time at which Tick will report a loss if nothing is heard before it
// (one nanosecond past the timeout of the longest silent TaskManager), and false when there is none to
// report: no TaskManager is watched, or the timeout is zero.
func (l *Liveness) NextDeadline() (time.Duration, bool) {
	if l.timeout == 0 || len(l.heard) == 0 {
		return 0, false
	}
	earliest := time.Duration(0)
	first := true
	for _, at := range l.heard {
		if first || at < earliest {
			earliest, first = at, false
		}
	}
	return earliest + l.timeout + 1, true
}

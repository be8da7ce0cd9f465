package cluster

import (
	"time"

	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/task"
)

// timeWindow is the span over which the TaskManager computes where an attempt's time goes: the rates it
// sends with the counters are over the last second, as Flink's busyTimeMsPerSecond is, or since the attempt
// started running when that is less. Computed here, not on the JobManager, because both readings of a rate
// then come from one clock, and no message's delay falls into its span.
const timeWindow = time.Second

// timeReadings are the readings of one attempt's wait clocks, oldest first, from the newest one that is
// timeWindow old or older on. Taken every countersInterval, so a handful of them span the window; a full
// array drops its oldest, which only shortens the span when the sends come late.
type timeReadings struct {
	s [8]task.TimeSample
	n int
}

// rates returns the attempt's time per second from the reading a window ago (or began, the reading as it
// started running, at first) to now, and keeps now.
func (w *timeReadings) rates(now, began task.TimeSample) jobcore.TimeRates {
	if w.n == 0 {
		w.push(began)
	}
	k := 0
	for k+1 < w.n && now.At-w.s[k+1].At >= timeWindow {
		k++
	}
	w.drop(k)
	var r jobcore.TimeRates
	r.BusyMsPerSecond, r.BackpressuredMsPerSecond, r.IdleMsPerSecond = task.MsPerSecond(w.s[0], now)
	if w.n == len(w.s) {
		w.drop(1)
	}
	w.push(now)
	return r
}

func (w *timeReadings) push(s task.TimeSample) {
	w.s[w.n] = s
	w.n++
}

// drop forgets the k oldest readings.
func (w *timeReadings) drop(k int) {
	if k == 0 {
		return
	}
	copy(w.s[:], w.s[k:w.n])
	w.n -= k
}

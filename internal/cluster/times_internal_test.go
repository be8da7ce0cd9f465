package cluster

import (
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/task"
)

// TestTimeReadings sends an attempt's counters at given times and checks the rates over the last second
// (or since the attempt started running, at first) that each send carries.
func TestTimeReadings(t *testing.T) {
	ms := time.Millisecond
	// idleThenBlocked is an attempt idle for its first second, then backpressured.
	idleThenBlocked := func(at time.Duration) task.TimeSample {
		return task.TimeSample{At: at, Idle: min(at, time.Second), Backpressured: max(at-time.Second, 0)}
	}
	rates := func(busy, bp, idle int64) jobcore.TimeRates {
		return jobcore.TimeRates{BusyMsPerSecond: busy, BackpressuredMsPerSecond: bp, IdleMsPerSecond: idle}
	}
	type send struct {
		at   time.Duration
		want jobcore.TimeRates
	}
	for _, tc := range []struct {
		name  string
		began time.Duration
		sends []send
	}{
		{"every 200 ms: the last second", 0, []send{
			{200 * ms, rates(0, 0, 1000)}, // since it began
			{400 * ms, rates(0, 0, 1000)},
			{600 * ms, rates(0, 0, 1000)},
			{800 * ms, rates(0, 0, 1000)},
			{1000 * ms, rates(0, 0, 1000)}, // since it began, a second ago
			{1200 * ms, rates(0, 200, 800)},
			{1400 * ms, rates(0, 400, 600)},
			{1600 * ms, rates(0, 600, 400)},
			{1800 * ms, rates(0, 800, 200)},
			{2000 * ms, rates(0, 1000, 0)},
			{2200 * ms, rates(0, 1000, 0)},
		}},
		{"a late send: since the last reading", 0, []send{
			{200 * ms, rates(0, 0, 1000)},
			{400 * ms, rates(0, 0, 1000)},
			{1400 * ms, rates(0, 400, 600)}, // from 400 ms: the newest reading a second old
			{3400 * ms, rates(0, 1000, 0)},  // from 1400 ms
		}},
		{"every 100 ms: the span the readings hold", 0, []send{
			{100 * ms, rates(0, 0, 1000)}, {200 * ms, rates(0, 0, 1000)}, {300 * ms, rates(0, 0, 1000)},
			{400 * ms, rates(0, 0, 1000)}, {500 * ms, rates(0, 0, 1000)}, {600 * ms, rates(0, 0, 1000)},
			{700 * ms, rates(0, 0, 1000)}, {800 * ms, rates(0, 0, 1000)}, {900 * ms, rates(0, 0, 1000)},
			{1000 * ms, rates(0, 0, 1000)},
			// Eight readings, 100 ms apart, the oldest at 300 ms: 700 ms idle and 100 ms backpressured of 800.
			{1100 * ms, rates(0, 125, 875)},
		}},
		{"an attempt that began late", 900 * ms, []send{
			{1000 * ms, rates(0, 0, 1000)},
			{1100 * ms, rates(0, 500, 500)}, // 100 ms idle, 100 ms backpressured since it began
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w timeReadings
			began := idleThenBlocked(tc.began)
			for i, s := range tc.sends {
				if got := w.rates(idleThenBlocked(s.at), began); got != s.want {
					t.Fatalf("send %d at %v: %+v, want %+v", i, s.at, got, s.want)
				}
			}
		})
	}
}

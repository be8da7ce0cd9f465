package task

import (
	"testing"
	"time"
)

func TestMsPerSecond(t *testing.T) {
	ms := time.Millisecond
	at := func(at, idle, bp time.Duration) TimeSample { return TimeSample{At: at, Idle: idle, Backpressured: bp} }
	for _, tc := range []struct {
		name           string
		a, b           TimeSample
		busy, bp, idle int64
	}{
		{"all busy", at(0, 0, 0), at(time.Second, 0, 0), 1000, 0, 0},
		{"all idle", at(0, 0, 0), at(time.Second, time.Second, 0), 0, 0, 1000},
		{"all backpressured", at(0, 0, 0), at(time.Second, 0, time.Second), 0, 1000, 0},
		{"a mix, over half a second", at(10*time.Second, 3*time.Second, 2*time.Second),
			at(10*time.Second+500*ms, 3*time.Second+100*ms, 2*time.Second+300*ms), 200, 600, 200},
		{"rounded to the nearest ms", at(0, 0, 0), at(3*ms, ms, ms), 334, 333, 333},
		{"waits longer than the span are clamped", at(0, 0, 0), at(100*ms, 150*ms, 0), 0, 0, 1000},
		{"overlapping readings leave busy at 0", at(0, 0, 0), at(time.Second, 600*ms, 600*ms), 0, 600, 600},
		{"a clock that went back counts 0", at(0, 5*ms, 5*ms), at(time.Second, 0, 0), 1000, 0, 0},
		{"readings too close to tell", at(0, 0, 0), at(ms-1, 0, 0), 0, 0, 0},
		{"readings in the wrong order", at(time.Second, 0, 0), at(0, 0, 0), 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy, bp, idle := MsPerSecond(tc.a, tc.b)
			if busy != tc.busy || bp != tc.bp || idle != tc.idle {
				t.Fatalf("busy %d, backpressured %d, idle %d; want %d, %d, %d", busy, bp, idle, tc.busy, tc.bp, tc.idle)
			}
		})
	}
}

package connector_test

import (
	"math"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/connector"
)

func TestPacer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rate       float64
		base       uint64
		restartAt  uint64 // 0: no restart
		wantUnpace bool
	}{
		{name: "unpaced", rate: 0, wantUnpace: true},
		{name: "negative rate is unpaced", rate: -5, wantUnpace: true},
		{name: "paced from 0", rate: 200},
		{name: "paced from a subtask's first record", rate: 200, base: 3},
		{name: "restarted after a restore", rate: 200, base: 3, restartAt: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := connector.NewPacer(tc.rate, tc.base)
			defer p.Close()
			if tc.wantUnpace {
				if d := p.Due(); d != math.MaxUint64 {
					t.Fatalf("Due() = %d, want every record due", d)
				}
				if p.Available() != nil {
					t.Fatal("an unpaced pacer has an Available channel")
				}
				return
			}
			base := tc.base
			if tc.restartAt > 0 {
				p.Due() // start the clock, then restart it far ahead: no catching up to restartAt
				p.Restart(tc.restartAt)
				base = tc.restartAt
			}
			// The base record is due at once; within a few milliseconds at 200/s, no more than a couple more.
			if d := p.Due(); d < base+1 || d > base+3 {
				t.Fatalf("Due() = %d right after the start at %d, want %d (or a record or two more)", d, base, base+1)
			}
			next := p.Due() + 5 // 25 ms ahead at 200/s
			if p.Available() != nil {
				t.Fatal("Available is set before the first Wait")
			}
			start := time.Now()
			p.Wait(next)
			select {
			case <-p.Available():
			case <-time.After(10 * time.Second):
				t.Fatal("Available never became ready")
			}
			if d := p.Due(); d <= next {
				t.Fatalf("woken after %s with Due() = %d, record %d not due", time.Since(start), d, next)
			}
			// A record already due wakes at once.
			p.Wait(base)
			select {
			case <-p.Available():
			case <-time.After(10 * time.Second):
				t.Fatal("waiting for a due record never woke")
			}
		})
	}
}

package network

import (
	"sync"
	"testing"
	"time"
)

// TestWaitClock drives a clock through waits at given times and reads it between them.
func TestWaitClock(t *testing.T) {
	type step struct {
		op   string // "start", "stop" or "read"
		at   time.Duration
		want time.Duration // of a read
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"never waited", []step{{"read", 5 * ms, 0}}},
		{"one wait", []step{{"start", 10 * ms, 0}, {"stop", 30 * ms, 0}, {"read", 50 * ms, 20 * ms}}},
		{"the wait going on counts up to the reading", []step{{"start", 10 * ms, 0}, {"read", 15 * ms, 5 * ms},
			{"read", 25 * ms, 15 * ms}, {"stop", 30 * ms, 0}, {"read", 90 * ms, 20 * ms}}},
		{"waits add up", []step{{"start", 0, 0}, {"stop", 2 * ms, 0}, {"start", 10 * ms, 0}, {"stop", 13 * ms, 0},
			{"start", 20 * ms, 0}, {"read", 21 * ms, 6 * ms}}},
		{"a second start is no new wait", []step{{"start", 10 * ms, 0}, {"start", 20 * ms, 0}, {"stop", 30 * ms, 0},
			{"read", 30 * ms, 20 * ms}}},
		{"a stop without a wait is no change", []step{{"stop", 10 * ms, 0}, {"start", 20 * ms, 0}, {"stop", 21 * ms, 0},
			{"stop", 40 * ms, 0}, {"read", 50 * ms, ms}}},
		{"a wait that starts at 0 is a wait", []step{{"start", 0, 0}, {"read", 7 * ms, 7 * ms}}},
		{"a reading before the wait's start counts none of it", []step{{"start", 10 * ms, 0}, {"read", 5 * ms, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w WaitClock
			for i, s := range tc.steps {
				switch s.op {
				case "start":
					w.Start(s.at)
				case "stop":
					w.Stop(s.at)
				case "read":
					if got := w.Waited(s.at); got != s.want {
						t.Fatalf("step %d: waited %v at %v, want %v", i, got, s.at, s.want)
					}
				}
			}
		})
	}
}

// TestWaitClockConcurrentReader reads a clock while its goroutine waits and stops waiting, as the
// TaskManager reads a running task's: every reading must be one the clock held (the ended waits, plus the
// one going on), never a mix of two, and -race sees the reader and the writer side by side. (The window in
// which a reader without the sequence lock would mix two is a few nanoseconds wide: this test rarely hits
// it, the race detector checks the rest.)
func TestWaitClockConcurrentReader(t *testing.T) {
	var w WaitClock
	const waits = 20000
	µs := time.Microsecond
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := range waits {
			at := time.Duration(3*k) * µs // wait k lasts 1 µs from 3k µs
			w.Start(at)
			w.Stop(at + µs)
		}
	}()
	// Read at horizon, past every wait: after k waits the clock holds k µs; during wait k it holds
	// k µs + (horizon - 3k µs) = horizon - 2k µs. A reading that took the total of a stop with the start
	// of the wait it ended would be horizon - 2k µs + 1 µs: an odd number of µs short of the horizon.
	horizon := time.Duration(3*waits) * µs
	for range 20000 {
		got := w.Waited(horizon)
		if got > horizon/2 && (horizon-got)/µs%2 != 0 {
			t.Fatalf("waited %v by %v: a wait was counted twice", got, horizon)
		}
	}
	wg.Wait()
	if got := w.Waited(horizon); got != waits*µs {
		t.Fatalf("waited %v after %d waits of 1 µs", got, waits)
	}
}

// TestPoolMeasuresBlockedRequests takes the only buffer of a pool and requests another: the request blocks
// and the pool's clock counts the wait while it goes on, until the buffer comes back. Requests that find a
// buffer count nothing.
func TestPoolMeasuresBlockedRequests(t *testing.T) {
	var w WaitClock
	p := NewBufferPool("test", MinBufferSize, 1)
	p.MeasureWaits(&w)
	first, err := p.Request(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Waited(Monotonic()); got != 0 {
		t.Fatalf("a request that found a buffer waited %v", got)
	}
	got := make(chan *Buffer)
	go func() {
		b, err := p.Request(nil)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	// The wait shows while it goes on.
	for w.Waited(Monotonic()) < 5*time.Millisecond {
		time.Sleep(time.Millisecond)
	}
	first.Recycle()
	second := <-got
	end := Monotonic()
	waited := w.Waited(end)
	if waited < 5*time.Millisecond {
		t.Fatalf("the blocked request waited %v, want at least 5ms", waited)
	}
	if later := w.Waited(end + time.Hour); later != waited {
		t.Fatalf("the clock counts on after the wait ended: %v, then %v", waited, later)
	}
	second.Recycle()
	if b := p.TryRequest(); b == nil {
		t.Fatal("no buffer after both were recycled")
	} else {
		b.Recycle()
	}
	if later := w.Waited(end + time.Hour); later != waited {
		t.Fatalf("TryRequest counted a wait: %v, then %v", waited, later)
	}
}

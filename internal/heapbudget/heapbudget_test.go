package heapbudget

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name         string
		live, budget uint64
		base, want   int
	}{
		{"no budget keeps the base", 4 * mib, 0, 100, 100},
		{"small live heap waits for the budget", 8 * mib, 512 * mib, 100, 6300},
		{"the runtime's least goal scales with the percentage", 1 * mib, 512 * mib, 100, 12800},
		{"live heap at half the budget", 256 * mib, 512 * mib, 100, 100},
		{"live heap above the budget keeps the base", 1024 * mib, 512 * mib, 100, 100},
		{"never below a higher base", 200 * mib, 512 * mib, 300, 300},
		{"above a higher base", 100 * mib, 512 * mib, 300, 412},
		{"nothing live: the runtime's least goal at the budget", 0, 64 * mib, 100, 1600},
		{"bounded", 1 * mib, 1 << 50, 100, maxPercent},
		{"base 0 (collect always) still waits for the budget", 8 * mib, 16 * mib, 0, 100},
	}
	for _, c := range cases {
		if got := Percent(c.live, c.budget, c.base); got != c.want {
			t.Errorf("%s: Percent(%d, %d, %d) = %d, want %d", c.name, c.live, c.budget, c.base, got, c.want)
		}
	}
}

func TestBase(t *testing.T) {
	for _, c := range []struct {
		env  string
		want int
		on   bool
	}{{"", 100, true}, {"200", 200, true}, {" 50 ", 50, true}, {"off", 0, false}, {"OFF", 0, false}, {"x", 100, true}, {"-5", 100, true}} {
		t.Setenv("GOGC", c.env)
		if got, on := Base(); got != c.want || on != c.on {
			t.Errorf("GOGC=%q: Base() = %d, %v; want %d, %v", c.env, got, on, c.want, c.on)
		}
	}
}

// gogc reads the collector's percentage as the runtime has it.
func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// heapGoal reads the heap size at which the runtime will collect next.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// churn allocates n bytes of garbage in 64 KiB pieces, keeping nothing, and returns the collections
// that ran meanwhile.
func churn(n int) uint32 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var keep []byte
	for i := 0; i < n; i += 64 << 10 {
		keep = make([]byte, 64<<10)
		keep[0] = byte(i)
	}
	runtime.KeepAlive(keep)
	runtime.ReadMemStats(&after)
	return after.NumGC - before.NumGC
}

// TestPacer: with a budget of 64 MiB and a live heap of a few MiB, 512 MiB of garbage is collected a
// handful of times, against dozens at GOGC 100; the pacer sees every collection, and Stop puts GOGC 100
// back.
func TestPacer(t *testing.T) {
	t.Setenv("GOGC", "")
	runtime.GC()
	without := churn(512 << 20)
	// A collection while nothing allocates: the live heap it finds is the test's few MiB. (One that runs
	// while the program allocates counts what was allocated during marking as live, as the runtime's own
	// pacing does; the pacer's percentage is relative to that same figure.)
	runtime.GC()
	p := Start(64 << 20)
	if p.Budget() != 64<<20 {
		t.Fatalf("Budget() = %d", p.Budget())
	}
	if got := gogc(); got < 1000 {
		t.Fatalf("GOGC %d after Start with a few MiB live, want the budget's (>= 1000)", got)
	}
	if goal := heapGoal(); goal > 64<<20*11/10 || goal < 32<<20 {
		t.Fatalf("heap goal %d MiB after Start, want the budget (64 MiB)", goal>>20)
	}
	seen := p.seen()
	with := churn(512 << 20)
	t.Logf("512 MiB of garbage: %d collections at GOGC 100, %d with a 64 MiB budget (GOGC %d)", without, with, gogc())
	if with == 0 || with*4 > without {
		t.Fatalf("%d collections with the budget, %d without: want at least 4 times fewer", with, without)
	}
	// The finalizer runs on its own goroutine after a collection: wait for it.
	for deadline := time.Now().Add(10 * time.Second); p.seen() <= seen; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pacer saw no collection")
		}
	}
	p.Stop()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC %d after Stop, want 100", got)
	}
	runtime.GC()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC %d after a collection that followed Stop, want 100", got)
	}
}

// TestPacerOff: GOGC=off and a zero budget leave the collector alone.
func TestPacerOff(t *testing.T) {
	t.Setenv("GOGC", "off")
	if p := Start(64 << 20); p.Budget() != 0 || gogc() != 100 {
		t.Fatalf("GOGC=off: Budget() = %d, GOGC %d", p.Budget(), gogc())
	}
	t.Setenv("GOGC", "")
	if p := Start(0); p.Budget() != 0 || gogc() != 100 {
		t.Fatalf("no budget: Budget() = %d, GOGC %d", p.Budget(), gogc())
	}
}

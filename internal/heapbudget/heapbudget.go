// Package heapbudget owns the garbage collector's pacing in a process that runs tasks: a heap budget, the
// heap the collector may let grow to before it collects, however little of it is live.
//
// Go collects when the heap reaches (1 + GOGC/100) × the live heap. A stream processor's live heap is
// often a few megabytes (records in flight, small state) while it allocates hundreds of megabytes a
// second (batches, strings of records), so at GOGC 100 it collects dozens of times a second, and every
// collection turns on the write barriers of every pointer store the record path makes. A JVM gives its
// collector a heap of a quarter of the machine's memory by default, and Flink runs in it. With a budget,
// the collector waits for the heap to reach max(budget, (1 + GOGC/100) × live): the same collections as
// before once the live heap is large, far fewer while it is small, and never more than without it.
//
// The package sets the collector's percentage (debug.SetGCPercent) after each collection, from the live
// heap the runtime reports; it touches nothing else (not GOMEMLIMIT, which still applies on top).
package heapbudget

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
)

// Default is the budget of a process that runs tasks unless told otherwise: small beside a JVM's default
// heap, large beside the live heap of most jobs.
const Default = 256 << 20

// maxPercent bounds the percentage: beyond it the budget would have the collector wait for a heap more
// than a thousand times the live one, where a rounding of live bytes could swing it.
const maxPercent = 100_000

// runtimeMinHeap is the runtime's least heap goal at GOGC 100; it scales with GOGC (the goal is never
// below runtimeMinHeap × GOGC/100), so a percentage above budget/runtimeMinHeap × 100 would have the
// collector wait past the budget however little is live.
const runtimeMinHeap = 4 << 20

// Percent returns the GC percentage that has the collector wait until the heap reaches budget, or
// (1 + base/100) × live if that is more: never less than base. live 0 counts as 1 MiB.
func Percent(live, budget uint64, base int) int {
	if budget == 0 {
		return base
	}
	live = max(live, 1<<20)
	if budget <= live {
		return base
	}
	p := (float64(budget)/float64(live) - 1) * 100
	p = min(p, float64(budget)/runtimeMinHeap*100, maxPercent)
	return int(max(p, float64(base)))
}

// Base returns the GC percentage the process was started with (the GOGC environment variable, 100 when
// unset) and false when GOGC is "off": the user turned the collector's pacing off, and a budget must not
// turn it back on.
func Base() (int, bool) {
	v := strings.TrimSpace(os.Getenv("GOGC"))
	switch {
	case v == "":
		return 100, true
	case strings.EqualFold(v, "off"):
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 100, true // the runtime reads a malformed GOGC as 100 too
	}
	return n, true
}

// Pacer keeps the collector's percentage at Percent(live, budget, base) after every collection. Stop
// ends it and puts the base percentage back.
type Pacer struct {
	budget uint64 // 0 when the pacer does not pace
	base   int

	mu          sync.Mutex
	stopped     bool
	sample      []metrics.Sample
	collections int // see seen
	percent     int // the percentage set last
}

// liveMetric is the runtime's live heap after the last collection.
const liveMetric = "/gc/heap/live:bytes"

// Start paces the collector to budget bytes (0: do nothing) and returns the pacer; it does nothing either
// when GOGC is off. The pacing is driven by the runtime: a sentinel object whose finalizer runs after
// each collection sets the percentage and sets a finalizer on a new sentinel, until Stop.
func Start(budget uint64) *Pacer {
	base, on := Base()
	p := &Pacer{base: base, percent: base, sample: []metrics.Sample{{Name: liveMetric}}}
	if budget == 0 || !on {
		p.stopped = true
		return p
	}
	p.budget = budget
	p.adjust()
	p.arm()
	return p
}

// arm sets the finalizer that runs after the next collection.
func (p *Pacer) arm() {
	s := new(sentinel)
	runtime.SetFinalizer(s, func(*sentinel) {
		if p.adjust() {
			p.arm()
		}
	})
}

// sentinel is an object only the pacer's finalizer refers to: it is unreachable at once, so its
// finalizer runs after the next collection. It holds a pointer so that it is not a tiny object: the
// runtime packs those, without pointers and under 16 bytes, into shared blocks, and a finalizer set on
// one runs only once the whole block is unreachable, which may be never.
type sentinel struct {
	_ *Pacer
	_ int64
}

// adjust sets the percentage for the live heap now, and reports whether the pacer still runs.
func (p *Pacer) adjust() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	metrics.Read(p.sample)
	var live uint64
	if p.sample[0].Value.Kind() == metrics.KindUint64 {
		live = p.sample[0].Value.Uint64()
	}
	p.collections++
	if pc := Percent(live, p.budget, p.base); pc != p.percent {
		p.percent = pc
		debug.SetGCPercent(pc)
	}
	return true
}

// seen returns how many adjustments the pacer made (one at Start, then one per collection).
func (p *Pacer) seen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.collections
}

// Stop ends the pacing and puts the base percentage back; the pending finalizer finds the pacer stopped.
func (p *Pacer) Stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true
	if p.percent != p.base {
		debug.SetGCPercent(p.base)
		p.percent = p.base
	}
}

// Budget returns the budget the pacer keeps, in bytes: 0 when it does not pace (no budget, or GOGC off),
// or for a nil pacer.
func (p *Pacer) Budget() uint64 {
	if p == nil {
		return 0
	}
	return p.budget
}

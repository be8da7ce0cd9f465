package operator

import (
	"fmt"
	"math"
)

// Evictor removes records from a window when it fires, before or after the window function sees them
// (Flink's Evictor). A window with an evictor keeps its records (with their timestamps) even where its
// function is incremental, which then folds the records left when the window fires; the records left after
// EvictAfter are the window's contents from then on.
type Evictor[T any] interface {
	// EvictBefore returns the records the function is to see: a subsequence of elems (the window's records
	// in the order they came; elems may be reused for the result).
	EvictBefore(elems []Timed[T], w TimeWindow, ctx EvictorContext) []Timed[T]
	// EvictAfter returns the records the window keeps after the function ran.
	EvictAfter(elems []Timed[T], w TimeWindow, ctx EvictorContext) []Timed[T]
	String() string
}

// EvictorContext tells an evictor the clocks.
type EvictorContext interface {
	CurrentWatermark() int64
	CurrentProcessingTime() int64
}

// CountEvictor keeps the last n records of a window, before the function or after it.
func CountEvictor[T any](n int64, after bool) Evictor[T] {
	return evictor[T]{countEvictor[T]{n}, after}
}

// TimeEvictor keeps the records of a window whose timestamps are within size of the latest record's
// (later than its timestamp minus size), before the function or after it. On a stream without event time
// records have no timestamps, and it keeps them all.
func TimeEvictor[T any](size int64, after bool) Evictor[T] {
	return evictor[T]{timeEvictor[T]{size}, after}
}

// DeltaEvictor drops the records of a window whose delta to the window's last record reaches threshold,
// before the function or after it.
func DeltaEvictor[T any](threshold float64, delta func(a, b T) float64, after bool) Evictor[T] {
	return evictor[T]{deltaEvictor[T]{threshold, delta}, after}
}

// evict is one evicting rule, applied before or after the function as evictor says.
type evict[T any] interface {
	evict(elems []Timed[T]) []Timed[T]
	String() string
}

type evictor[T any] struct {
	rule  evict[T]
	after bool
}

func (e evictor[T]) EvictBefore(elems []Timed[T], _ TimeWindow, _ EvictorContext) []Timed[T] {
	if e.after {
		return elems
	}
	return e.rule.evict(elems)
}

func (e evictor[T]) EvictAfter(elems []Timed[T], _ TimeWindow, _ EvictorContext) []Timed[T] {
	if !e.after {
		return elems
	}
	return e.rule.evict(elems)
}

func (e evictor[T]) String() string {
	return fmt.Sprintf("%s, evicting %s the function", e.rule, map[bool]string{false: "before", true: "after"}[e.after])
}

type countEvictor[T any] struct{ n int64 }

func (c countEvictor[T]) evict(elems []Timed[T]) []Timed[T] {
	if int64(len(elems)) <= c.n {
		return elems
	}
	return elems[int64(len(elems))-c.n:]
}

func (c countEvictor[T]) String() string { return fmt.Sprintf("CountEvictor(%d)", c.n) }

type timeEvictor[T any] struct{ size int64 }

func (e timeEvictor[T]) evict(elems []Timed[T]) []Timed[T] {
	if len(elems) == 0 || elems[0].Ts == math.MinInt64 {
		return elems
	}
	latest := int64(math.MinInt64)
	for _, x := range elems {
		latest = max(latest, x.Ts)
	}
	cutoff := latest - e.size
	kept := elems[:0]
	for _, x := range elems {
		if x.Ts > cutoff {
			kept = append(kept, x)
		}
	}
	return kept
}

func (e timeEvictor[T]) String() string { return fmt.Sprintf("TimeEvictor(%d)", e.size) }

type deltaEvictor[T any] struct {
	threshold float64
	delta     func(a, b T) float64
}

func (e deltaEvictor[T]) evict(elems []Timed[T]) []Timed[T] {
	if len(elems) == 0 {
		return elems
	}
	last := elems[len(elems)-1].V
	kept := elems[:0]
	for _, x := range elems {
		if e.delta(x.V, last) < e.threshold {
			kept = append(kept, x)
		}
	}
	return kept
}

func (e deltaEvictor[T]) String() string { return fmt.Sprintf("DeltaEvictor(%g)", e.threshold) }

package runnel

import (
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/operator"
)

// Evictors (docs/eventtime.md §4.5): an evictor removes records from a window when it fires, before the
// window function sees them or after, as Flink's Evictor does. A window with an evictor keeps its records
// (with their timestamps) even where its function is incremental (WindowReduce, WindowAggregate), which
// then folds the records left when the window fires; after the function, the records left are what the
// window keeps for its later firings.

// Evictor removes records from a firing window: EvictBefore returns the records the function is to see,
// EvictAfter those the window keeps, each a subsequence of what it was given.
type Evictor[T any] = operator.Evictor[T]

// EvictorContext tells an evictor the clocks.
type EvictorContext = operator.EvictorContext

// TimestampedValue is a record of a window with its timestamp (math.MinInt64 on a stream without event
// time), as an evictor sees it.
type TimestampedValue[T any] = operator.Timed[T]

// CountEvictor keeps the last n records of a window: before the function, or after it if evictAfter.
func CountEvictor[T any](n int64, evictAfter bool) Evictor[T] {
	if n < 0 {
		return badEvictor[T]{fmt.Errorf("CountEvictor: the count must not be negative, got %d", n)}
	}
	return operator.CountEvictor[T](n, evictAfter)
}

// TimeEvictor keeps the records of a window whose timestamps are within size of the latest record's
// (above its timestamp minus size): before the function, or after it if evictAfter. On a stream without
// event time it keeps every record.
func TimeEvictor[T any](size time.Duration, evictAfter bool) Evictor[T] {
	ms, err := millis("TimeEvictor: the size", size, 0)
	if err != nil {
		return badEvictor[T]{err}
	}
	return operator.TimeEvictor[T](ms, evictAfter)
}

// DeltaEvictor drops the records of a window whose delta to the window's last record is threshold or
// more: before the function, or after it if evictAfter.
func DeltaEvictor[T any](threshold float64, delta func(a, b T) float64, evictAfter bool) Evictor[T] {
	if delta == nil {
		return badEvictor[T]{fmt.Errorf("DeltaEvictor: nil delta function")}
	}
	return operator.DeltaEvictor(threshold, delta, evictAfter)
}

// badEvictor is an evictor made with bad arguments: WindowedStream.Evictor reports its error.
type badEvictor[T any] struct{ err error }

func (b badEvictor[T]) EvictBefore(es []TimestampedValue[T], _ TimeWindow, _ EvictorContext) []TimestampedValue[T] {
	return es
}
func (b badEvictor[T]) EvictAfter(es []TimestampedValue[T], _ TimeWindow, _ EvictorContext) []TimestampedValue[T] {
	return es
}
func (b badEvictor[T]) String() string { return b.err.Error() }

// Evictor sets the evictor of the windows; they then keep their records (as WindowProcess's do).
func (w *WindowedStream[K, T]) Evictor(e Evictor[T]) *WindowedStream[K, T] {
	switch e := e.(type) {
	case nil:
		w.ks.s.env.addErr(fmt.Errorf("Evictor: nil evictor (at %s)", origin()))
	case badEvictor[T]:
		w.ks.s.env.addErr(fmt.Errorf("Evictor: %w (at %s)", e.err, origin()))
	}
	w.evictor = e
	return w
}

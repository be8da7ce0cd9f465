package runnel

import (
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/operator"
)

// Rich functions (docs/eventtime.md §8.1): Map, FlatMap, Filter and Process functions with a lifecycle,
// Open (with the runtime context: subtask index, parallelism, logger, ...) and Close, one instance per
// parallel subtask, made by the factory given.

// MapFunction is a map with a lifecycle.
type MapFunction[In, Out any] interface {
	Open(ctx RuntimeContext) error
	Map(v In) (Out, error)
	Close() error
}

// FlatMapFunction is a flat map with a lifecycle.
type FlatMapFunction[In, Out any] interface {
	Open(ctx RuntimeContext) error
	FlatMap(v In, out Collector[Out]) error
	Close() error
}

// FilterFunction is a filter with a lifecycle.
type FilterFunction[T any] interface {
	Open(ctx RuntimeContext) error
	Filter(v T) (bool, error)
	Close() error
}

// ProcessFunction processes a stream that is not keyed, record by record, with a lifecycle and a context
// (the record's timestamp, the clocks, side outputs through OutputTag.Emit); without keys it has no keyed
// state and no timers, as in Flink.
type ProcessFunction[In, Out any] = operator.ProcessFunction[In, Out]

// ProcessContext is the context of a ProcessFunction.
type ProcessContext = operator.ProcessContext

// RichBase gives a rich function no-op Open and Close; embed it.
type RichBase struct{}

// Open does nothing.
func (RichBase) Open(RuntimeContext) error { return nil }

// Close does nothing.
func (RichBase) Close() error { return nil }

// ProcessBase gives a ProcessFunction no-op Open, EndInput and Close; embed it.
type ProcessBase[Out any] struct{ RichBase }

// EndInput does nothing.
func (ProcessBase[Out]) EndInput(ProcessContext, Collector[Out]) error { return nil }

func rich[In, Out any](s *Stream[In], name string, make func() (operator.NodeSpec, func(RuntimeContext) error, func() error)) *Stream[Out] {
	n := s.env.addNode(graph.OperatorNode, name, &operator.RichSpec{New: make})
	connect(s, n)
	return newStreamOf[Out](s.env, n, s.timed)
}

// MapWith applies a MapFunction to every record; newFn makes one per parallel subtask.
func MapWith[In, Out any](s *Stream[In], newFn func() MapFunction[In, Out]) *Stream[Out] {
	if newFn == nil {
		nilFunc(s.env, "MapWith")
	}
	timed := s.timed
	return rich[In, Out](s, "map", func() (operator.NodeSpec, func(RuntimeContext) error, func() error) {
		f := newFn()
		if f == nil {
			return nil, nil, nil
		}
		if timed {
			return &operator.MapSpec[operator.Timed[In], operator.Timed[Out]]{Fn: operator.StampMap(f.Map)}, f.Open, f.Close
		}
		return &operator.MapSpec[In, Out]{Fn: f.Map}, f.Open, f.Close
	})
}

// FlatMapWith applies a FlatMapFunction to every record; newFn makes one per parallel subtask.
func FlatMapWith[In, Out any](s *Stream[In], newFn func() FlatMapFunction[In, Out]) *Stream[Out] {
	if newFn == nil {
		nilFunc(s.env, "FlatMapWith")
	}
	timed := s.timed
	return rich[In, Out](s, "flatmap", func() (operator.NodeSpec, func(RuntimeContext) error, func() error) {
		f := newFn()
		if f == nil {
			return nil, nil, nil
		}
		if timed {
			return &operator.TimedFlatMapSpec[In, Out]{Fn: f.FlatMap}, f.Open, f.Close
		}
		return &operator.FlatMapSpec[In, Out]{Fn: f.FlatMap}, f.Open, f.Close
	})
}

// FilterWith keeps the records a FilterFunction accepts; newFn makes one per parallel subtask.
func FilterWith[T any](s *Stream[T], newFn func() FilterFunction[T]) *Stream[T] {
	if newFn == nil {
		nilFunc(s.env, "FilterWith")
	}
	timed := s.timed
	return rich[T, T](s, "filter", func() (operator.NodeSpec, func(RuntimeContext) error, func() error) {
		f := newFn()
		if f == nil {
			return nil, nil, nil
		}
		if timed {
			return &operator.FilterSpec[operator.Timed[T]]{Fn: operator.StampFilter(f.Filter)}, f.Open, f.Close
		}
		return &operator.FilterSpec[T]{Fn: f.Filter}, f.Open, f.Close
	})
}

// ProcessWith runs a ProcessFunction on a stream that is not keyed; newFn makes one per parallel subtask.
func ProcessWith[In, Out any](s *Stream[In], newFn func() ProcessFunction[In, Out]) *Stream[Out] {
	if newFn == nil {
		nilFunc(s.env, "ProcessWith")
	}
	n := s.env.addNode(graph.OperatorNode, "process", &operator.ProcessSpec[In, Out]{New: newFn, Timed: s.timed})
	connect(s, n)
	return newStreamOf[Out](s.env, n, s.timed)
}

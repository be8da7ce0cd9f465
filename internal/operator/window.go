package operator

import (
	"errors"
	"fmt"
	"math"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// The window operators (docs/eventtime.md §4), after Flink's: an assigner (window_assigner.go) says which
// windows a record is in; the contents of each window are kept per key (window_contents.go), of sessions
// under the state windows of a merging window set (window_merging.go); a trigger says when a window fires
// (the default one built into windowOp, others through Trigger, window_trigger.go), an evictor what it
// fires with (window_evictor.go). Incremental sliding windows with the default trigger are kept in slices
// by an operator of their own (window_sliced.go), as Flink SQL's slicing operator.

// TimeWindow is a window of time [Start, End), in epoch milliseconds.
type TimeWindow struct {
	Start, End int64
}

// MaxTimestamp is the last millisecond in the window: End - 1. Window results carry it as their timestamp.
func (w TimeWindow) MaxTimestamp() int64 { return w.End - 1 }

// intersects says w and o overlap or touch (one ends where the other starts): session windows that do
// merge, as in Flink ([0,1000) and [1000,2000) make [0,2000)).
func (w TimeWindow) intersects(o TimeWindow) bool { return w.Start <= o.End && o.Start <= w.End }

func (w TimeWindow) cover(o TimeWindow) TimeWindow {
	return TimeWindow{Start: min(w.Start, o.Start), End: max(w.End, o.End)}
}

// namespace is window w as the namespace of its timers.
func (w TimeWindow) namespace() state.Namespace { return state.Namespace{A: w.Start, B: w.End} }

func windowOf(ns state.Namespace) TimeWindow { return TimeWindow{Start: ns.A, End: ns.B} }

// AggregateFunction folds the records of a window into an accumulator, incrementally.
type AggregateFunction[T, ACC, Out any] interface {
	// CreateAccumulator returns the accumulator of an empty window.
	CreateAccumulator() ACC
	// Add folds v into acc and returns the result.
	Add(v T, acc ACC) ACC
	// Result returns the window's result.
	Result(acc ACC) Out
	// Merge combines two accumulators as if their records had been added to one: of two session windows
	// that merge, or of the slices a sliding window is made of. It may change and return a, never b.
	Merge(a, b ACC) ACC
}

// WindowContext is the context of a process-window function: the key and the window being fired, and the
// window's states (WindowState: Flink's windowState()). The keyed states the function declares in Open are
// per key across windows (Flink's globalState()).
type WindowContext[K comparable] interface {
	KeyedContext[K]
	WindowStateScope
	// Window is the window being fired.
	Window() TimeWindow
	// CurrentWatermark is the operator's watermark.
	CurrentWatermark() int64
}

// ProcessWindowFunction gets the contents of a window when it fires: every record (a listing window) or
// the incremental aggregate's one result.
type ProcessWindowFunction[K comparable, T, Out any] interface {
	Open(ctx KeyedContext[K]) error
	Process(ctx WindowContext[K], elements []T, out Collector[Out]) error
	Close() error
}

// WindowClearer is a process-window function told when a window is done (Flink's
// ProcessWindowFunction.clear): at its cleanup time, after its last firing, before its window states go.
type WindowClearer[K comparable] interface {
	Clear(ctx WindowContext[K]) error
}

// Incremental is how a window keeps its contents as one accumulator: AggregateFunction's methods as
// functions (a reduce is an aggregate whose accumulator is the record).
type Incremental[T, ACC, V any] struct {
	Create func() ACC
	Add    func(v T, acc ACC) (ACC, error)
	Result func(acc ACC) V
	Merge  func(a, b ACC) (ACC, error)
	Codec  codec.Codec[ACC]
}

// WindowSpec runs a keyed window operator. T is the record, ACC the accumulator of an incremental window,
// V what a window hands its process function (the accumulator's result, or the records themselves for a
// listing window), Out what the operator emits.
type WindowSpec[K comparable, T, ACC, V, Out any] struct {
	Key      func(T) K
	KeyCodec codec.Codec[K]
	Assigner WindowAssigner
	// Lateness is how long after a window's end (in event time) records still update it and fire it
	// again; until then its state is kept.
	Lateness int64
	// Timed: the stream has event time; records are Timed[T] and results Timed[Out] at the window's
	// MaxTimestamp.
	Timed bool
	// Inc keeps the window incrementally; nil: the window lists its records (ElemCodec), and V is T.
	Inc       *Incremental[T, ACC, V]
	ElemCodec codec.Codec[T]
	// Trigger decides when windows fire; nil: the assigner's domain's default (EventTimeTrigger or
	// ProcessingTimeTrigger, built into the operator).
	Trigger Trigger[T]
	// Evictor, when set, removes records of a window when it fires; the window then keeps its records
	// (ElemCodec), also where Inc is set (which folds them when the window fires).
	Evictor Evictor[T]
	// NewProcess makes the process-window function per subtask.
	NewProcess func() ProcessWindowFunction[K, V, Out]
	// LateTag, when set, is the side output that late records go to instead of being dropped.
	LateTag string
	// unsliced keeps an accumulator per sliding window even where slices would do (tests compare the two).
	unsliced bool
}

// maxSlicesPerWindow bounds the slices a sliced window is made of: a window fires by reading each of its
// slices, so past this, a sliding window keeps its own accumulator.
const maxSlicesPerWindow = 64

// sliceWidth is the width of the slices that the windows of an incremental sliding window with the default
// trigger are made of, or 0 where each window keeps its own accumulator (docs/eventtime.md §4.4). The
// slices are the gcd of size and slide, aligned as the windows are, so every window is a whole number of
// them and every record is in one.
func (s *WindowSpec[K, T, ACC, V, Out]) sliceWidth() int64 {
	a, ok := s.Assigner.(SlidingWindows)
	if !ok || s.Inc == nil || s.Trigger != nil || s.Evictor != nil || s.unsliced || a.Slide <= 0 || a.Slide >= a.Size {
		return 0
	}
	g, b := a.Size, a.Slide
	for b != 0 {
		g, b = b, g%b
	}
	if a.Size/g > maxSlicesPerWindow {
		return 0
	}
	return g
}

// check refuses a spec whose parts do not fit together, naming the part.
func (s *WindowSpec[K, T, ACC, V, Out]) check(op string) error {
	if err := checkAssigner(s.Assigner); err != nil {
		return fmt.Errorf("operator %q: %w", op, err)
	}
	if s.Assigner.IsEventTime() && !s.Timed {
		return fmt.Errorf("operator %q: an event-time window needs a stream with event time (WithTimestamps)", op)
	}
	if err := CheckTrigger(s.Trigger, s.Assigner); err != nil {
		return fmt.Errorf("operator %q: %w", op, err)
	}
	return nil
}

func (s *WindowSpec[K, T, ACC, V, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	if err := s.check(ctx.operator); err != nil {
		return Built{}, err
	}
	b, err := newKeyedBackend(ctx, s.KeyCodec)
	if err != nil {
		return Built{}, err
	}
	built, err := s.build(ctx, downstream, b)
	if err != nil {
		b.Close()
		return Built{}, err
	}
	return built, nil
}

// windowOperator is the face of the two window operators (windowOp, slicedWindowOp) that Build wires.
type windowOperator[K comparable, T, V, Out any] interface {
	base() *windowBase[K, T, V, Out]
	process(v T, ts int64)
	// onWatermark advances the watermark and fires the event-time timers it completes.
	onWatermark(ms int64) error
	// clocked says the operator has processing-time timers, which nextDeadline and onProcessingTime drive.
	clocked() bool
	nextDeadline() int64
	onProcessingTime(now int64) error
	// restored settles what a restore brought (the session sets of older checkpoints).
	restored() error
}

// newWindowOperator makes the operator of spec s: sliced where its windows can be, else the window
// operator.
func newWindowOperator[K comparable, T, ACC, V, Out any](ctx *Context, s *WindowSpec[K, T, ACC, V, Out], b state.KeyedBackend[K]) (windowOperator[K, T, V, Out], error) {
	if slice := s.sliceWidth(); slice > 0 {
		return newSlicedWindowOp(ctx, s, b, slice)
	}
	return newWindowOp(ctx, s, b)
}

func (s *WindowSpec[K, T, ACC, V, Out]) build(ctx *Context, downstream []any, b state.KeyedBackend[K]) (Built, error) {
	op, err := newWindowOperator(ctx, s, b)
	if err != nil {
		return Built{}, fmt.Errorf("operator %q: %w", ctx.operator, err)
	}
	base := op.base()
	built := keyedBuilt(b)
	restore, restoreParts := built.Restore, built.RestoreParts
	built.Restore = func(data []byte) error {
		if err := restore(data); err != nil {
			return err
		}
		return op.restored()
	}
	built.RestoreParts = func(parts [][]byte) error {
		if err := restoreParts(parts); err != nil {
			return err
		}
		return op.restored()
	}
	if err := base.wireOutput(ctx, downstream, &built, s.Timed, op.process); err != nil {
		return Built{}, err
	}
	built.Open = func() error {
		defer b.SealDeclarations()
		return base.fn.Open(base.kc)
	}
	built.Close = func() error {
		if n := base.late.Value(); n > 0 {
			ctx.Logger().Info("window operator dropped late records", "late_records_dropped", n)
		}
		return errors.Join(base.fn.Close(), b.Close())
	}
	built.Watermark = func(ms int64) error {
		err := op.onWatermark(ms)
		base.flush()
		if err != nil {
			return err
		}
		return ctx.EmitWatermark(ms)
	}
	built.RestoreWatermark = func(floor int64) { base.watermark = max(base.watermark, floor) }
	if op.clocked() {
		built.NextDeadline = op.nextDeadline
		built.OnProcessingTime = func(now int64) error {
			err := op.onProcessingTime(now)
			base.flush()
			return err
		}
	}
	return built, nil
}

// fireEventTimers fires the timers of t due at or before ms, in time order, with f.
func fireEventTimers(t state.Timers, ms int64, f func(ts int64, ns state.Namespace) error) error {
	if next, ok := t.Next(); !ok || next > ms {
		return nil
	}
	return t.FireUpTo(ms, f)
}

// fireProcessingTimers fires the timers of t due at now, at most maxTimersPerStep of them, whole times at
// once.
func fireProcessingTimers(t state.Timers, now int64, f func(ts int64, ns state.Namespace) error) error {
	fired := 0
	for fired < maxTimersPerStep {
		next, ok := t.Next()
		if !ok || next > now {
			return nil
		}
		err := t.FireUpTo(next, func(ts int64, ns state.Namespace) error {
			fired++
			return f(ts, ns)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func nextTimer(t state.Timers) int64 {
	if next, ok := t.Next(); ok {
		return next
	}
	return math.MaxInt64
}

// PassWindow is the process-window function of a window without one: it emits what the window holds (the
// incremental result).
type PassWindow[K comparable, V any] struct{}

func (PassWindow[K, V]) Open(KeyedContext[K]) error { return nil }
func (PassWindow[K, V]) Close() error               { return nil }
func (PassWindow[K, V]) Process(_ WindowContext[K], vs []V, out Collector[V]) error {
	for _, v := range vs {
		out.Collect(v)
	}
	return nil
}

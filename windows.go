package runnel

import (
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/operator"
)

// Windows (docs/eventtime.md §4): a keyed stream is cut into windows of time by a WindowAssigner, and a
// window function turns each window's records into results when the window fires: by default in event time
// when the watermark passes the window's end, in processing time when the clock does; a Trigger
// (trigger.go) decides otherwise, an Evictor (evictor.go) removes records as a window fires. Windows are
// aligned to the
// epoch (plus an offset); a window [Start, End) holds the records with Start <= t < End, and its results
// carry the timestamp End-1. Window contents and timers are keyed state: checkpointed, restored and
// rescaled, and freed once a window is done.

// TimeWindow is a window of time [Start, End) in epoch milliseconds; MaxTimestamp() is End-1.
type TimeWindow = operator.TimeWindow

// AggregateFunction folds a window's records into an accumulator as they come (CreateAccumulator, Add),
// gives the window's result (Result), and combines two accumulators (Merge): when session windows merge, and
// when a sliding window fires from the slices it keeps its contents in (docs/eventtime.md §4.4).
type AggregateFunction[T, ACC, Out any] = operator.AggregateFunction[T, ACC, Out]

// ProcessWindowFunction gets a window's contents when it fires, with the window's bounds (ctx.Window()).
type ProcessWindowFunction[K comparable, T, Out any] = operator.ProcessWindowFunction[K, T, Out]

// WindowContext is the context of a ProcessWindowFunction.
type WindowContext[K comparable] = operator.WindowContext[K]

// ProcessWindowBase gives a ProcessWindowFunction no-op Open and Close; embed it.
type ProcessWindowBase[K comparable] struct{}

// Open does nothing.
func (ProcessWindowBase[K]) Open(KeyedContext[K]) error { return nil }

// Close does nothing.
func (ProcessWindowBase[K]) Close() error { return nil }

// WindowAssigner says which windows a record belongs to. Make one with TumblingEventTimeWindows,
// SlidingEventTimeWindows, EventTimeSessionWindows or their processing-time twins.
type WindowAssigner struct {
	a   operator.WindowAssigner
	err error
}

func (w WindowAssigner) String() string { return w.a.String() }

func millis(what string, d time.Duration, min time.Duration) (int64, error) {
	if d < min || d%time.Millisecond != 0 {
		return 0, fmt.Errorf("%s must be whole milliseconds, at least %s, got %s", what, min, d)
	}
	return d.Milliseconds(), nil
}

// windowKind is the shape of an assigner's windows, as the constructors below make them.
type windowKind uint8

const (
	tumbling windowKind = iota
	sliding
	session
)

func assigner(kind windowKind, eventTime bool, name string, size, slide, gap time.Duration, offset []time.Duration) WindowAssigner {
	var w WindowAssigner
	var errs [4]error
	var sizeMs, slideMs, gapMs, offsetMs int64
	switch kind {
	case tumbling:
		sizeMs, errs[0] = millis(name+": the size", size, time.Millisecond)
		slideMs = sizeMs
	case sliding:
		sizeMs, errs[0] = millis(name+": the size", size, time.Millisecond)
		slideMs, errs[1] = millis(name+": the slide", slide, time.Millisecond)
	case session:
		gapMs, errs[0] = millis(name+": the gap", gap, time.Millisecond)
	}
	if len(offset) > 1 {
		errs[2] = fmt.Errorf("%s: at most one offset, got %d", name, len(offset))
	} else if len(offset) == 1 {
		offsetMs, errs[3] = millis(name+": the offset", offset[0], 0)
		if errs[3] == nil && offsetMs >= slideMs {
			errs[3] = fmt.Errorf("%s: the offset %s must be below the slide", name, offset[0])
		}
	}
	for _, e := range errs {
		if e != nil && w.err == nil {
			w.err = e
		}
	}
	switch kind {
	case tumbling:
		w.a = operator.TumblingWindows{Size: sizeMs, Offset: offsetMs, EventTime: eventTime}
	case sliding:
		w.a = operator.SlidingWindows{Size: sizeMs, Slide: slideMs, Offset: offsetMs, EventTime: eventTime}
	default:
		w.a = operator.SessionWindows{Gap: gapMs, EventTime: eventTime}
	}
	return w
}

// TumblingEventTimeWindows cuts event time into windows of size, [k*size+offset, (k+1)*size+offset).
func TumblingEventTimeWindows(size time.Duration, offset ...time.Duration) WindowAssigner {
	return assigner(tumbling, true, "TumblingEventTimeWindows", size, 0, 0, offset)
}

// SlidingEventTimeWindows makes windows of size starting every slide: a record belongs to size/slide
// (rounded up) of them.
func SlidingEventTimeWindows(size, slide time.Duration, offset ...time.Duration) WindowAssigner {
	return assigner(sliding, true, "SlidingEventTimeWindows", size, slide, 0, offset)
}

// EventTimeSessionWindows groups a key's records into sessions: a record at t is the window [t, t+gap),
// and a key's windows that overlap or touch merge (as in Flink: with a gap of 1 s, records at 0 and 1000
// make one session [0, 2000)), so a session ends gap after its last record unless another comes by then.
func EventTimeSessionWindows(gap time.Duration) WindowAssigner {
	return assigner(session, true, "EventTimeSessionWindows", 0, 0, gap, nil)
}

// TumblingProcessingTimeWindows is TumblingEventTimeWindows on the clock at which records arrive.
func TumblingProcessingTimeWindows(size time.Duration, offset ...time.Duration) WindowAssigner {
	return assigner(tumbling, false, "TumblingProcessingTimeWindows", size, 0, 0, offset)
}

// SlidingProcessingTimeWindows is SlidingEventTimeWindows on the clock at which records arrive.
func SlidingProcessingTimeWindows(size, slide time.Duration, offset ...time.Duration) WindowAssigner {
	return assigner(sliding, false, "SlidingProcessingTimeWindows", size, slide, 0, offset)
}

// ProcessingTimeSessionWindows is EventTimeSessionWindows on the clock at which records arrive.
func ProcessingTimeSessionWindows(gap time.Duration) WindowAssigner {
	return assigner(session, false, "ProcessingTimeSessionWindows", 0, 0, gap, nil)
}

// WindowedStream is a keyed stream cut into windows; a window function (WindowReduce, WindowAggregate,
// WindowProcess, WindowAggregateProcess) makes it a stream again.
type WindowedStream[K comparable, T any] struct {
	ks       *KeyedStream[K, T]
	a        WindowAssigner
	lateness int64
	all      bool   // WindowAll: parallelism 1
	lateTag  string // SideOutputLateData
	trigger  Trigger[T]
	evictor  Evictor[T]
}

// Window cuts a keyed stream into windows.
func Window[K comparable, T any](ks *KeyedStream[K, T], a WindowAssigner) *WindowedStream[K, T] {
	return &WindowedStream[K, T]{ks: ks, a: a}
}

// WindowAll cuts a whole stream (not keyed) into windows; its window operator runs at parallelism 1, as
// in Flink.
func WindowAll[T any](s *Stream[T], a WindowAssigner) *WindowedStream[struct{}, T] {
	ks := KeyBy(s, func(T) struct{} { return struct{}{} }, codec.Codec[struct{}](emptyCodec{}))
	return &WindowedStream[struct{}, T]{ks: ks, a: a, all: true}
}

// emptyCodec encodes struct{}, WindowAll's key, as nothing.
type emptyCodec struct{}

func (emptyCodec) Append(dst []byte, _ struct{}) ([]byte, error) { return dst, nil }
func (emptyCodec) Decode(src []byte, _ *struct{}) error {
	if len(src) != 0 {
		return fmt.Errorf("%w: the empty key has %d bytes", codec.ErrMalformed, len(src))
	}
	return nil
}

// AllowedLateness keeps each event-time window for d after its end: a record that comes within d updates
// the window and fires it again; later ones are late (dropped and counted). Default 0.
func (w *WindowedStream[K, T]) AllowedLateness(d time.Duration) *WindowedStream[K, T] {
	ms, err := millis("AllowedLateness", d, 0)
	if err != nil {
		w.ks.s.env.addErr(fmt.Errorf("%w (at %s)", err, origin()))
	}
	if !w.a.a.IsEventTime() && d > 0 {
		w.ks.s.env.addErr(fmt.Errorf("AllowedLateness: %s have no lateness: records are never late on the clock they arrive by (at %s)", w.a, origin()))
	}
	w.lateness = ms
	return w
}

// SideOutputLateData sends the records that come too late for every window they belong to (past the
// allowed lateness) to the side output tag, instead of dropping them: SideOutput(windowed result, tag) is
// their stream.
func (w *WindowedStream[K, T]) SideOutputLateData(tag OutputTag[T]) *WindowedStream[K, T] {
	if tag.id == "" {
		w.ks.s.env.addErr(fmt.Errorf("SideOutputLateData: the tag has no id: make it with NewOutputTag (at %s)", origin()))
	}
	w.lateTag = tag.id
	return w
}

// windowNode adds the window operator to the job.
func windowNode[K comparable, T, ACC, V, Out any](w *WindowedStream[K, T], what string, spec *operator.WindowSpec[K, T, ACC, V, Out]) *Stream[Out] {
	env := w.ks.s.env
	if w.a.err != nil {
		env.addErr(fmt.Errorf("%s: %w (at %s)", what, w.a.err, origin()))
	}
	if w.a.a.IsEventTime() && !w.ks.s.timed {
		env.addErr(fmt.Errorf("%s: %s need a stream with event time: give it a WatermarkStrategy (WithTimestamps) (at %s)", what, w.a, origin()))
	}
	spec.Key, spec.KeyCodec, spec.Assigner, spec.Lateness, spec.Timed = w.ks.key, w.ks.kc, w.a.a, w.lateness, w.ks.s.timed
	spec.LateTag, spec.Evictor = w.lateTag, w.evictor
	if !operator.IsDefaultTrigger(w.trigger, w.a.a) {
		spec.Trigger = w.trigger
	}
	if w.evictor != nil && spec.ElemCodec == nil {
		spec.ElemCodec = accCodec[T](env, what)
	}
	if w.trigger != nil && w.a.err == nil {
		if err := operator.CheckTrigger(w.trigger, w.a.a); err != nil {
			env.addErr(fmt.Errorf("%s: %w (at %s)", what, err, origin()))
		}
	}
	name := "window"
	if w.all {
		name = "window-all"
	}
	n := env.addNode(graph.OperatorNode, name, spec)
	if w.all {
		n.Parallelism = 1
		if env.fixedParallelism == nil {
			env.fixedParallelism = map[int]string{}
		}
		env.fixedParallelism[n.ID] = "a WindowAll window sees the whole stream, so it runs at parallelism 1"
	}
	connect(w.ks.s, n)
	return newStreamOf[Out](env, n, w.ks.s.timed)
}

func accCodec[ACC any](env *Environment, what string) codec.Codec[ACC] {
	c, err := codec.For[ACC]()
	if err != nil {
		env.addErr(fmt.Errorf("%s: window contents are keyed state and need a codec: %w (at %s)", what, err, origin()))
	}
	return c
}

// WindowReduce combines each window's records with fn and emits one result per window. fn must be associative: a
// sliding window combines its records per slice, then the slices in time order (docs/eventtime.md §4.4).
func WindowReduce[K comparable, T any](w *WindowedStream[K, T], fn func(a, b T) (T, error)) *Stream[T] {
	if fn == nil {
		nilFunc(w.ks.s.env, "WindowReduce")
	}
	inc := &operator.Incremental[T, reduceAcc[T], T]{
		Create: func() reduceAcc[T] { return reduceAcc[T]{} },
		Add: func(v T, acc reduceAcc[T]) (reduceAcc[T], error) {
			if !acc.Set {
				return reduceAcc[T]{V: v, Set: true}, nil
			}
			r, err := fn(acc.V, v)
			return reduceAcc[T]{V: r, Set: true}, err
		},
		Result: func(acc reduceAcc[T]) T { return acc.V },
		Merge: func(a, b reduceAcc[T]) (reduceAcc[T], error) {
			if !a.Set {
				return b, nil
			}
			if !b.Set {
				return a, nil
			}
			r, err := fn(a.V, b.V)
			return reduceAcc[T]{V: r, Set: true}, err
		},
	}
	c := accCodec[T](w.ks.s.env, "WindowReduce")
	if c != nil {
		inc.Codec = reduceAccCodec[T]{c}
	}
	return windowNode(w, "WindowReduce", &operator.WindowSpec[K, T, reduceAcc[T], T, T]{Inc: inc,
		NewProcess: func() ProcessWindowFunction[K, T, T] { return operator.PassWindow[K, T]{} }})
}

// reduceAcc is the accumulator of WindowReduce: the running result, once there is one.
type reduceAcc[T any] struct {
	V   T
	Set bool
}

// reduceAccCodec stores a reduce accumulator as its value (an accumulator in state is always set).
type reduceAccCodec[T any] struct{ c codec.Codec[T] }

func (r reduceAccCodec[T]) Append(dst []byte, v reduceAcc[T]) ([]byte, error) {
	return r.c.Append(dst, v.V)
}
func (r reduceAccCodec[T]) Decode(src []byte, v *reduceAcc[T]) error {
	v.Set = true
	return r.c.Decode(src, &v.V)
}

// WindowAggregate folds each window's records with f as they come and emits f's result per window.
func WindowAggregate[K comparable, T, ACC, Out any](w *WindowedStream[K, T], f AggregateFunction[T, ACC, Out]) *Stream[Out] {
	return windowAggregate(w, "WindowAggregate", f, func() ProcessWindowFunction[K, Out, Out] { return operator.PassWindow[K, Out]{} })
}

// WindowAggregateProcess folds each window's records with f as they come, and hands f's result to a
// process-window function with the window's bounds when the window fires.
func WindowAggregateProcess[K comparable, T, ACC, V, Out any](w *WindowedStream[K, T], f AggregateFunction[T, ACC, V],
	newFn func() ProcessWindowFunction[K, V, Out]) *Stream[Out] {
	return windowAggregate(w, "WindowAggregateProcess", f, newFn)
}

// windowAggregate is WindowAggregate and WindowAggregateProcess; what names the one the user called.
func windowAggregate[K comparable, T, ACC, V, Out any](w *WindowedStream[K, T], what string, f AggregateFunction[T, ACC, V],
	newFn func() ProcessWindowFunction[K, V, Out]) *Stream[Out] {
	if f == nil || newFn == nil {
		nilFunc(w.ks.s.env, what)
		return newStreamOf[Out](w.ks.s.env, w.ks.s.env.addNode(graph.OperatorNode, "window", nil), w.ks.s.timed)
	}
	inc := &operator.Incremental[T, ACC, V]{
		Create: f.CreateAccumulator,
		Add:    func(v T, acc ACC) (ACC, error) { return f.Add(v, acc), nil },
		Result: f.Result,
		Merge:  func(a, b ACC) (ACC, error) { return f.Merge(a, b), nil },
		Codec:  accCodec[ACC](w.ks.s.env, what),
	}
	return windowNode(w, what, &operator.WindowSpec[K, T, ACC, V, Out]{Inc: inc, NewProcess: newFn})
}

// WindowProcess keeps every record of each window and hands them to a process-window function when the
// window fires.
func WindowProcess[K comparable, T, Out any](w *WindowedStream[K, T], newFn func() ProcessWindowFunction[K, T, Out]) *Stream[Out] {
	if newFn == nil {
		nilFunc(w.ks.s.env, "WindowProcess")
	}
	return windowProcess(w, "WindowProcess", accCodec[T](w.ks.s.env, "WindowProcess"), newFn)
}

// windowProcess adds a window operator that lists its records, with their codec; what names the API the
// user called (WindowProcess, WindowJoin, WindowCoGroup).
func windowProcess[K comparable, T, Out any](w *WindowedStream[K, T], what string, elems codec.Codec[T],
	newFn func() ProcessWindowFunction[K, T, Out]) *Stream[Out] {
	return windowNode(w, what, &operator.WindowSpec[K, T, struct{}, T, Out]{ElemCodec: elems, NewProcess: newFn})
}

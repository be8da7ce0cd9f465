package operator

import (
	"fmt"
	"math"

	"github.com/runnel-dev/runnel/internal/state"
)

// windowBase is what the window operators share: the key, the process-window function with its context
// and window states, the output, the assigner's timers, the watermark and the late records.
type windowBase[K comparable, T, V, Out any] struct {
	key      func(T) K
	kc       *keyedContext[K]
	wc       *windowContext[K] // a pointer: handing a value to the function would box it at every firing
	fn       ProcessWindowFunction[K, V, Out]
	clearer  WindowClearer[K]
	fnStates *windowStates // the function's window states
	out      Collector[Out]
	stamp    *stamper[Out] // the timed output, nil untimed
	flush    func()
	// timers are the timers of the assigner's domain: window ends (of the default trigger) and cleanup.
	timers    state.Timers
	eventTime bool
	lateness  int64
	// watermark is the operator's input watermark; late counts the records dropped as late (the metric
	// late_records_dropped), lateTag is the side output they go to instead, if set.
	watermark int64
	late      *Counter
	lateTag   string
	wins      []TimeWindow // scratch
}

// init sets up the base of a window operator of spec s on keyed backend b.
func (o *windowBase[K, T, V, Out]) init(ctx *Context, s windowSpec[K, T, V, Out], b state.KeyedBackend[K]) error {
	a := s.assigner()
	o.key, o.eventTime, o.lateness, o.lateTag, o.watermark = s.key(), a.IsEventTime(), s.lateness(), s.lateTag(), math.MinInt64
	o.kc = &keyedContext[K]{Context: ctx, b: b, timed: s.timed()}
	if o.fn = s.newProcess(); o.fn == nil {
		return fmt.Errorf("the window function factory returned nil")
	}
	o.clearer, _ = o.fn.(WindowClearer[K])
	var list []AnyWindowState
	if d, ok := o.fn.(WindowStateDeclarer); ok {
		if _, merging := a.(MergingWindowAssigner); merging {
			return fmt.Errorf("the window function keeps window states, which %s cannot have: windows that merge have no state of their own (as in Flink)", a)
		}
		list = d.WindowStates()
	}
	var err error
	if o.fnStates, err = declareWindowStates(b, "window function", "\x00window-state/", list, o.kc); err != nil {
		return err
	}
	o.wc = &windowContext[K]{keyedContext: o.kc, cur: new(TimeWindow), watermark: &o.watermark, states: o.fnStates}
	name := "\x00timers/processing"
	if o.eventTime {
		name = "\x00timers/event"
	}
	if o.timers, err = state.NewTimers[K](state.Engine(b), name); err != nil {
		return err
	}
	v, err := ctx.rt.Counters.Counter(ctx.operator, "late_records_dropped")
	if err != nil {
		return err
	}
	o.late = &Counter{v: v}
	return nil
}

// windowSpec is what the base reads of a WindowSpec, without its accumulator type.
type windowSpec[K comparable, T, V, Out any] interface {
	assigner() WindowAssigner
	key() func(T) K
	lateness() int64
	lateTag() string
	timed() bool
	newProcess() ProcessWindowFunction[K, V, Out]
}

func (s *WindowSpec[K, T, ACC, V, Out]) assigner() WindowAssigner { return s.Assigner }
func (s *WindowSpec[K, T, ACC, V, Out]) key() func(T) K           { return s.Key }
func (s *WindowSpec[K, T, ACC, V, Out]) lateness() int64          { return s.Lateness }
func (s *WindowSpec[K, T, ACC, V, Out]) lateTag() string          { return s.LateTag }
func (s *WindowSpec[K, T, ACC, V, Out]) timed() bool              { return s.Timed }
func (s *WindowSpec[K, T, ACC, V, Out]) newProcess() ProcessWindowFunction[K, V, Out] {
	return s.NewProcess()
}

// wireOutput makes the operator's output and input: records go to process, what the function emits to
// downstream (stamped with the window's MaxTimestamp on a stream with event time).
func (o *windowBase[K, T, V, Out]) wireOutput(ctx *Context, downstream []any, built *Built, timed bool, process func(v T, ts int64)) error {
	if timed {
		out, err := combine[Timed[Out]](ctx, downstream)
		if err != nil {
			return err
		}
		batch := &batcher[Timed[Out]]{next: out}
		o.stamp = &stamper[Out]{next: batch}
		o.out, o.flush = o.stamp, batch.flush
		built.Input = wrapIn[Timed[T]](ctx, &timedWindowInput[K, T, V, Out]{o: o, process: process})
		return nil
	}
	out, err := combine[Out](ctx, downstream)
	if err != nil {
		return err
	}
	batch := &batcher[Out]{next: out}
	o.out, o.flush = batch, batch.flush
	built.Input = wrapIn[T](ctx, &windowInput[K, T, V, Out]{o: o, process: process})
	return nil
}

// cleanupTime is when a window's state goes: its end plus the allowed lateness in event time, its end in
// processing time.
func (o *windowBase[K, T, V, Out]) cleanupTime(w TimeWindow) int64 {
	if o.eventTime && o.lateness > 0 {
		return w.MaxTimestamp() + o.lateness
	}
	return w.MaxTimestamp()
}

// isLate says a window is past its cleanup time: records for it are late.
func (o *windowBase[K, T, V, Out]) isLate(w TimeWindow) bool {
	return o.eventTime && o.cleanupTime(w) <= o.watermark
}

// fired says the watermark passed the end of event-time window w: it fired.
func (o *windowBase[K, T, V, Out]) fired(w TimeWindow) bool {
	return o.eventTime && w.MaxTimestamp() <= o.watermark
}

// registerWindow registers the timers of window w: at its end, and at its cleanup time if that is later.
func (o *windowBase[K, T, V, Out]) registerWindow(w TimeWindow) {
	o.timers.Register(w.MaxTimestamp(), w.namespace())
	o.registerCleanup(w)
}

// registerCleanup registers the cleanup timer of window w where it is not its end's.
func (o *windowBase[K, T, V, Out]) registerCleanup(w TimeWindow) {
	if c := o.cleanupTime(w); c != w.MaxTimestamp() {
		o.timers.Register(c, w.namespace())
	}
}

// dropLate sends a record that no window takes to the late side output, or counts it as dropped.
func (o *windowBase[K, T, V, Out]) dropLate(v T) {
	if o.lateTag != "" {
		EmitSide(o.kc, o.lateTag, v)
	} else {
		o.late.Inc()
	}
}

// emit hands vs, the contents of window w, to the process function.
func (o *windowBase[K, T, V, Out]) emit(w TimeWindow, vs []V) error {
	o.enterWindow(w)
	if err := o.fn.Process(o.wc, vs, o.out); err != nil {
		return fmt.Errorf("window [%d, %d): %w", w.Start, w.End, err)
	}
	return nil
}

// enterWindow makes w the window of the function's context, and its MaxTimestamp the time of what the
// function emits.
func (o *windowBase[K, T, V, Out]) enterWindow(w TimeWindow) {
	*o.wc.cur = w
	if o.stamp != nil {
		o.stamp.ts = w.MaxTimestamp()
		o.kc.ts = w.MaxTimestamp()
	}
}

// clearWindow tells the function that window w is done (WindowClearer) and drops its window states.
func (o *windowBase[K, T, V, Out]) clearWindow(w TimeWindow) error {
	if o.clearer != nil {
		o.enterWindow(w)
		if err := o.clearer.Clear(o.wc); err != nil {
			return fmt.Errorf("window [%d, %d): clear: %w", w.Start, w.End, err)
		}
	}
	o.fnStates.removeAll(w)
	return nil
}

// advance moves the watermark to ms and says whether it moved.
func (o *windowBase[K, T, V, Out]) advance(ms int64) bool {
	if ms <= o.watermark {
		return false
	}
	o.watermark = ms
	return true
}

// CurrentWatermark implements EvictorContext.
func (o *windowBase[K, T, V, Out]) CurrentWatermark() int64 { return o.watermark }

// CurrentProcessingTime implements EvictorContext.
func (o *windowBase[K, T, V, Out]) CurrentProcessingTime() int64 { return o.kc.CurrentProcessingTime() }

// windowContext is the WindowContext handed to process-window functions.
type windowContext[K comparable] struct {
	*keyedContext[K]
	cur       *TimeWindow
	watermark *int64
	states    *windowStates
}

func (c windowContext[K]) Window() TimeWindow                       { return *c.cur }
func (c windowContext[K]) CurrentWatermark() int64                  { return *c.watermark }
func (c windowContext[K]) windowScope() (*windowStates, TimeWindow) { return c.states, *c.cur }

// windowInput takes the records of a stream without event time (processing-time windows).
type windowInput[K comparable, T, V, Out any] struct {
	o       *windowBase[K, T, V, Out]
	process func(v T, ts int64)
}

func (in *windowInput[K, T, V, Out]) Collect(v T) {
	o := in.o
	prev := o.kc.enter()
	in.process(v, o.kc.CurrentProcessingTime())
	o.flush()
	o.kc.leave(prev)
}

func (in *windowInput[K, T, V, Out]) CollectBatch(vs []T) {
	o := in.o
	prev := o.kc.enter()
	now := o.kc.CurrentProcessingTime()
	for _, v := range vs {
		in.process(v, now)
	}
	o.flush()
	o.kc.leave(prev)
}

// timedWindowInput takes the records of a stream with event time.
type timedWindowInput[K comparable, T, V, Out any] struct {
	o       *windowBase[K, T, V, Out]
	process func(v T, ts int64)
}

func (in *timedWindowInput[K, T, V, Out]) Collect(v Timed[T]) {
	o := in.o
	prev := o.kc.enter()
	in.one(v)
	o.flush()
	o.kc.leave(prev)
}

func (in *timedWindowInput[K, T, V, Out]) CollectBatch(vs []Timed[T]) {
	o := in.o
	prev := o.kc.enter()
	for _, v := range vs {
		in.one(v)
	}
	o.flush()
	o.kc.leave(prev)
}

func (in *timedWindowInput[K, T, V, Out]) one(v Timed[T]) {
	o := in.o
	ts := v.Ts
	if !o.eventTime {
		ts = o.kc.CurrentProcessingTime()
	}
	o.kc.ts = v.Ts
	in.process(v.V, ts)
}

package operator

import (
	"fmt"
	"math"
	"time"

	"github.com/runnel-dev/runnel/internal/watermark"
)

// WatermarkGenerator makes watermarks from a stream's records; it is called on the task goroutine:
// OnEvent with every record and its timestamp (a punctuated generator emits here), OnPeriodicEmit every
// watermark interval (a periodic one emits here).
type WatermarkGenerator[T any] interface {
	OnEvent(v T, ts int64, out WatermarkOutput)
	OnPeriodicEmit(out WatermarkOutput)
}

// WatermarkOutput takes what a WatermarkGenerator emits.
type WatermarkOutput interface {
	// EmitWatermark promises that no record at or below ts follows; a value at or below one emitted before
	// is ignored, so the output is monotone. A watermark emitted from OnEvent goes out after the records of
	// the poll (or batch) that contains the record: a watermark may be late, never early.
	EmitWatermark(ts int64)
	// MarkIdle says the stream has no records for now: consumers do not wait for its watermark.
	MarkIdle()
	// MarkActive says records come again (any record does so too).
	MarkActive()
}

// WatermarkSpec is a WatermarkStrategy as the runtime takes it (docs/eventtime.md §1.3, §2.2).
type WatermarkSpec[T any] struct {
	// Assign returns the timestamp of v; recordTs is the timestamp it carried (math.MinInt64: none). nil
	// keeps the record's timestamp.
	Assign func(v T, recordTs int64) int64
	// Bound is the out-of-orderness of the built-in generator, used when NewGenerator is nil.
	Bound time.Duration
	// NewGenerator makes a custom generator per subtask; nil for the built-in one.
	NewGenerator func() WatermarkGenerator[T]
	// Idleness, when above zero, marks the stream idle after that long without records.
	Idleness time.Duration
	// Interval is the periodic emission interval; 0 turns periodic emission off (punctuated generators and
	// the end of input still emit).
	Interval time.Duration
}

// tsGen is one subtask's watermark generation for a source or a timestamps operator: it stamps records,
// feeds the generator and the idleness detector, and sends watermarks and statuses on through ctx, only
// ever upwards.
type tsGen[T any] struct {
	spec    *WatermarkSpec[T]
	ctx     *Context
	builtin *watermark.Generator
	custom  WatermarkGenerator[T]
	idle    *watermark.IdleDetector
	period  int64 // ms between periodic calls; 0: none
	next    int64 // the processing time of the next periodic call; math.MaxInt64: none
	// emitted is the last watermark sent; pending the highest one a custom generator emitted since, to go
	// out after the current poll or batch.
	emitted, pending int64
	// idleOut says the last status sent was idle; markIdle/markActive are a custom generator's requests.
	idleOut              bool
	markIdle, markActive bool
	ended                bool
}

func newTSGen[T any](ctx *Context, spec *WatermarkSpec[T]) (*tsGen[T], error) {
	g := &tsGen[T]{spec: spec, ctx: ctx, emitted: math.MinInt64, pending: math.MinInt64, next: math.MaxInt64}
	if spec.NewGenerator != nil {
		g.custom = spec.NewGenerator()
		if g.custom == nil {
			return nil, fmt.Errorf("operator %q: the watermark generator factory returned nil", ctx.operator)
		}
	} else {
		if spec.Bound < 0 {
			return nil, fmt.Errorf("operator %q: out-of-orderness bound %s is negative", ctx.operator, spec.Bound)
		}
		g.builtin = watermark.BoundedOutOfOrderness(spec.Bound)
	}
	if spec.Idleness > 0 {
		g.idle = watermark.IdleAfter(spec.Idleness)
	}
	switch {
	case spec.Interval > 0:
		g.period = max(spec.Interval.Milliseconds(), 1)
	case spec.Idleness > 0:
		g.period = max(spec.Idleness.Milliseconds(), 1)
	}
	return g, nil
}

// start arms the periodic calls.
func (g *tsGen[T]) start() {
	if g.period > 0 {
		g.next = g.ctx.CurrentProcessingTime() + g.period
	}
}

// stamp returns the record's timestamp and tells the generator and the idleness detector of it.
func (g *tsGen[T]) stamp(v T, recordTs int64) int64 {
	ts := recordTs
	if g.spec.Assign != nil {
		ts = g.spec.Assign(v, recordTs)
	}
	if g.idle != nil {
		g.idle.OnEvent()
	}
	if g.idleOut {
		// A record makes the stream active again. Idleness went out at a tick or after a poll or batch, so
		// no record precedes this one since: the status goes out before it, as it must.
		g.status(false)
	}
	if g.builtin != nil {
		g.builtin.OnEvent(ts)
	} else {
		g.custom.OnEvent(v, ts, g)
	}
	return ts
}

// EmitWatermark implements WatermarkOutput for a custom generator.
func (g *tsGen[T]) EmitWatermark(ts int64) { g.pending = max(g.pending, ts) }

// MarkIdle implements WatermarkOutput.
func (g *tsGen[T]) MarkIdle() { g.markIdle, g.markActive = true, false }

// MarkActive implements WatermarkOutput.
func (g *tsGen[T]) MarkActive() { g.markActive, g.markIdle = true, false }

// flush sends what a custom generator emitted during the poll or batch that just ended.
func (g *tsGen[T]) flush() {
	if g.markActive {
		g.markActive = false
		g.status(false)
	}
	if g.pending > g.emitted {
		g.emit(g.pending)
	}
	if g.markIdle {
		g.markIdle = false
		g.status(true)
	}
}

// periodic is the generator's periodic call at processing time now.
func (g *tsGen[T]) periodic(now int64) {
	g.next = now + g.period
	if g.ended {
		return
	}
	if g.builtin != nil {
		if w, ok := g.builtin.OnPeriodic(); ok && g.spec.Interval > 0 {
			g.pending = max(g.pending, int64(w))
		}
	} else if g.spec.Interval > 0 {
		g.custom.OnPeriodicEmit(g)
	}
	g.flush()
	if g.idle != nil && g.idle.Tick(now) {
		g.status(true)
	}
}

// end sends MaxWatermark: the input ended, so every window fires and every event timer runs.
func (g *tsGen[T]) end() {
	if g.ended {
		return
	}
	g.flush()
	g.ended = true
	if g.idleOut {
		g.status(false)
	}
	g.emit(math.MaxInt64)
}

func (g *tsGen[T]) emit(w int64) {
	if w <= g.emitted || g.ended && w != math.MaxInt64 {
		return
	}
	g.emitted = w
	g.ctx.counters().Watermark = w
	if err := g.ctx.EmitWatermark(w); err != nil {
		g.ctx.fail(err)
	}
}

func (g *tsGen[T]) status(idle bool) {
	if idle == g.idleOut {
		return
	}
	g.idleOut = idle
	if err := g.ctx.EmitWatermarkStatus(idle); err != nil {
		g.ctx.fail(err)
	}
}

// hooks sets the processing-time and restore hooks of the operator that owns g.
func (g *tsGen[T]) hooks(b *Built) {
	// Restored: never emit below what was emitted before the snapshot. The generator starts afresh and
	// rebuilds its maximum from the replayed records.
	b.RestoreWatermark = func(floor int64) { g.emitted = max(g.emitted, floor) }
	if g.period == 0 {
		return
	}
	b.NextDeadline = func() int64 { return g.next }
	b.OnProcessingTime = func(now int64) error { g.periodic(now); return nil }
}

// stampingCollector is the Collector[T] a timed source's reader emits to: it stamps each record and hands
// it on as Timed[T].
type stampingCollector[T any] struct {
	g    *tsGen[T]
	next *batcher[Timed[T]]
}

func (c *stampingCollector[T]) Collect(v T) {
	c.next.Collect(Timed[T]{Ts: c.g.stamp(v, math.MinInt64), V: v})
}

func (c *stampingCollector[T]) CollectBatch(vs []T) {
	for _, v := range vs {
		c.Collect(v)
	}
}

// TimedSourceSpec runs a Source whose stream has event time: the source assigns timestamps and makes
// watermarks itself, with no extra operator (WithTimestamps straight on FromSource).
type TimedSourceSpec[T any] struct {
	Source     Source[T]
	Watermarks *WatermarkSpec[T]
}

func (s *TimedSourceSpec[T]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Timed[T]](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	g, err := newTSGen(ctx, s.Watermarks)
	if err != nil {
		return Built{}, err
	}
	b := &batcher[Timed[T]]{next: &countingCollector[Timed[T]]{next: asBatch(wrapIn[Timed[T]](ctx, out)), c: ctx.counters()}}
	d := &sourceDriver[T]{ctx: ctx, out: &stampingCollector[T]{g: g, next: b},
		after: func(st InputStatus) {
			b.flush()
			g.flush()
			if st == EndOfInput {
				g.end()
			}
		}}
	built := sourceBuilt(ctx, s.Source, d)
	open := built.Open
	built.Open = func() error {
		g.start()
		return open()
	}
	g.hooks(&built)
	return built, nil
}

// TimestampsSpec assigns timestamps and makes watermarks on a stream that does not come straight from a
// source (Flink's assignTimestampsAndWatermarks): In is T, or Timed[T] on a stream that had event time
// already. It ignores the watermarks from upstream except MaxWatermark, the end of input, as Flink does.
type TimestampsSpec[In, T any] struct {
	// Unwrap returns the value and the timestamp it carries (math.MinInt64: none).
	Unwrap     func(In) (T, int64)
	Watermarks *WatermarkSpec[T]
}

func (s *TimestampsSpec[In, T]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Timed[T]](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	g, err := newTSGen(ctx, s.Watermarks)
	if err != nil {
		return Built{}, err
	}
	op := &timestampsOp[In, T]{unwrap: s.Unwrap, g: g, out: out, ctx: ctx}
	built := Built{
		Input: wrapIn[In](ctx, op),
		Open:  func() error { g.start(); return nil },
		// An input without event time ends without MaxWatermark: the end of input sends it.
		EndInput: func() error { g.end(); return nil },
		Watermark: func(ms int64) error {
			if ms == math.MaxInt64 {
				g.end()
			}
			return nil
		},
		// Statuses of upstream say nothing about the watermarks made here.
		WatermarkStatus: func(bool) error { return nil },
	}
	g.hooks(&built)
	return built, nil
}

type timestampsOp[In, T any] struct {
	unwrap func(In) (T, int64)
	g      *tsGen[T]
	out    BatchCollector[Timed[T]]
	ctx    *Context
	buf    []Timed[T]
}

func (o *timestampsOp[In, T]) Collect(v In) {
	prev := o.ctx.enter()
	x, ts := o.unwrap(v)
	o.out.Collect(Timed[T]{Ts: o.g.stamp(x, ts), V: x})
	o.g.flush()
	o.ctx.leave(prev)
}

func (o *timestampsOp[In, T]) CollectBatch(vs []In) {
	prev := o.ctx.enter()
	buf := o.buf[:0]
	for _, v := range vs {
		x, ts := o.unwrap(v)
		buf = append(buf, Timed[T]{Ts: o.g.stamp(x, ts), V: x})
	}
	o.buf = buf
	o.out.CollectBatch(buf)
	o.g.flush()
	o.ctx.leave(prev)
}

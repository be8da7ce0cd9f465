package operator

import (
	"errors"
	"fmt"
	"math"
)

// RichSpec runs a function with a lifecycle (Open with the runtime context, Close) through the plain
// operator of its kind: New makes the function of one subtask and the spec that runs it.
type RichSpec struct {
	New func() (spec NodeSpec, open func(RuntimeContext) error, close func() error)
}

func (s *RichSpec) Build(ctx *Context, downstream []any) (Built, error) {
	spec, open, close := s.New()
	if spec == nil {
		return Built{}, fmt.Errorf("operator %q: the function factory returned nil", ctx.operator)
	}
	b, err := spec.Build(ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	inner, innerClose := b.Open, b.Close
	b.Open = func() error {
		if inner != nil {
			if err := inner(); err != nil {
				return err
			}
		}
		return open(ctx)
	}
	b.Close = func() error {
		err := close()
		if innerClose != nil {
			err = errors.Join(err, innerClose())
		}
		return err
	}
	return b, nil
}

// ProcessContext is the context of a process function on a stream that is not keyed.
type ProcessContext interface {
	RuntimeContext
	// Timestamp returns the timestamp of the record being processed and true, or false on a stream without
	// event time.
	Timestamp() (int64, bool)
	// CurrentProcessingTime is the task's clock, in epoch ms.
	CurrentProcessingTime() int64
	// CurrentWatermark is the operator's input watermark (math.MinInt64 before the first).
	CurrentWatermark() int64
}

// ProcessFunction processes the records of a stream that is not keyed, one at a time, with a lifecycle.
// Without keys it has no keyed state and no timers (as in Flink).
type ProcessFunction[In, Out any] interface {
	Open(ctx RuntimeContext) error
	ProcessElement(ctx ProcessContext, v In, out Collector[Out]) error
	EndInput(ctx ProcessContext, out Collector[Out]) error
	Close() error
}

// ProcessSpec runs a ProcessFunction; Timed: the stream has event time (records Timed[In], results
// Timed[Out] at the input's timestamp).
type ProcessSpec[In, Out any] struct {
	New   func() ProcessFunction[In, Out]
	Timed bool
}

type processContext struct {
	*Context
	ts        int64
	timed     bool
	watermark int64
}

func (c *processContext) Timestamp() (int64, bool)  { return c.ts, c.timed }
func (c *processContext) CurrentWatermark() int64   { return c.watermark }
func (c *processContext) operatorContext() *Context { return c.Context }

// processBuilt is what a process function (one or two inputs) builds on: its context, which follows the
// operator's watermark, and its lifecycle.
func processBuilt(ctx *Context, timed bool, open func(RuntimeContext) error, close func() error) (*processContext, Built) {
	pc := &processContext{Context: ctx, timed: timed, watermark: math.MinInt64, ts: math.MinInt64}
	return pc, Built{
		Open:  func() error { return open(ctx) },
		Close: close,
		Watermark: func(ms int64) error {
			pc.watermark = max(pc.watermark, ms)
			return ctx.EmitWatermark(ms)
		},
		RestoreWatermark: func(floor int64) { pc.watermark = max(pc.watermark, floor) },
	}
}

func (s *ProcessSpec[In, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	fn := s.New()
	if fn == nil {
		return Built{}, fmt.Errorf("operator %q: the process function factory returned nil", ctx.operator)
	}
	pc, b := processBuilt(ctx, s.Timed, fn.Open, fn.Close)
	if s.Timed {
		out, err := combine[Timed[Out]](ctx, downstream)
		if err != nil {
			return Built{}, err
		}
		batch := &batcher[Timed[Out]]{next: out}
		st := &stamper[Out]{next: batch, ts: math.MinInt64}
		op := newFlatMapOp[Timed[In], Timed[Out]](func(v Timed[In], _ Collector[Timed[Out]]) error {
			pc.ts, st.ts = v.Ts, v.Ts
			return fn.ProcessElement(pc, v.V, st)
		}, out, ctx)
		st.next = op.out
		b.Input = wrapIn[Timed[In]](ctx, op)
		b.EndInput = func() error {
			err := fn.EndInput(pc, st)
			op.batch.flush()
			return err
		}
		return b, nil
	}
	out, err := combine[Out](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	op := newFlatMapOp[In, Out](func(v In, o Collector[Out]) error { return fn.ProcessElement(pc, v, o) }, out, ctx)
	b.Input = wrapIn[In](ctx, op)
	b.EndInput = func() error {
		err := fn.EndInput(pc, op.out)
		op.batch.flush()
		return err
	}
	return b, nil
}

// CoProcessFunction processes two streams that are not keyed, with a lifecycle: ProcessElement1 gets the
// first stream's records, ProcessElement2 the second's, in arrival order. Without keys it has no keyed
// state and no timers.
type CoProcessFunction[A, B, Out any] interface {
	Open(ctx RuntimeContext) error
	ProcessElement1(ctx ProcessContext, a A, out Collector[Out]) error
	ProcessElement2(ctx ProcessContext, b B, out Collector[Out]) error
	EndInput(ctx ProcessContext, out Collector[Out]) error
	Close() error
}

// CoProcessSpec runs a CoProcessFunction as the head of its chain, with two inputs; both have event time or
// neither (Timed).
type CoProcessSpec[A, B, Out any] struct {
	New   func() CoProcessFunction[A, B, Out]
	Timed bool
}

func (s *CoProcessSpec[A, B, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	fn := s.New()
	if fn == nil {
		return Built{}, fmt.Errorf("operator %q: the co-process function factory returned nil", ctx.operator)
	}
	pc, b := processBuilt(ctx, s.Timed, fn.Open, fn.Close)
	if s.Timed {
		out, err := combine[Timed[Out]](ctx, downstream)
		if err != nil {
			return Built{}, err
		}
		st1 := &stamper[Out]{ts: math.MinInt64}
		st2 := &stamper[Out]{ts: math.MinInt64}
		op1 := newFlatMapOp[Timed[A], Timed[Out]](func(v Timed[A], _ Collector[Timed[Out]]) error {
			pc.ts, st1.ts = v.Ts, v.Ts
			return fn.ProcessElement1(pc, v.V, st1)
		}, out, ctx)
		op2 := newFlatMapOp[Timed[B], Timed[Out]](func(v Timed[B], _ Collector[Timed[Out]]) error {
			pc.ts, st2.ts = v.Ts, v.Ts
			return fn.ProcessElement2(pc, v.V, st2)
		}, out, ctx)
		st1.next, st2.next = op1.out, op2.out
		b.Input, b.Input2 = wrapIn[Timed[A]](ctx, op1), wrapIn[Timed[B]](ctx, op2)
		b.EndInput = func() error {
			err := fn.EndInput(pc, st1)
			op1.batch.flush()
			return err
		}
		return b, nil
	}
	out, err := combine[Out](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	op1 := newFlatMapOp[A, Out](func(v A, o Collector[Out]) error { return fn.ProcessElement1(pc, v, o) }, out, ctx)
	op2 := newFlatMapOp[B, Out](func(v B, o Collector[Out]) error { return fn.ProcessElement2(pc, v, o) }, out, ctx)
	b.Input, b.Input2 = wrapIn[A](ctx, op1), wrapIn[B](ctx, op2)
	b.EndInput = func() error {
		err := fn.EndInput(pc, op1.out)
		op1.batch.flush()
		return err
	}
	return b, nil
}

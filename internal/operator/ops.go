package operator

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime/debug"

	"github.com/runnel-dev/runnel/internal/state"
	"github.com/runnel-dev/runnel/internal/task"
)

// NodeSpec builds one operator instance. It is the Payload of a graph.StreamNode.
type NodeSpec interface {
	// Build creates the operator of one subtask. downstream holds one Collector[Out] (typed as any) per
	// outgoing edge, chained or not.
	Build(ctx *Context, downstream []any) (Built, error)
}

// Built is an operator instance.
type Built struct {
	// Input is the operator's Collector[In] (typed as any); nil for sources. Input2 is the second input of
	// a two-input operator, a Collector of its second record type.
	Input  any
	Input2 any
	// Source drives a source operator; nil otherwise.
	Source SourceDriver
	// Lifecycle hooks; any may be nil.
	Open     func() error
	EndInput func() error
	Close    func() error
	// Snapshot captures the operator's state for a checkpoint (quickly; the writer runs later, elsewhere)
	// and Restore loads it; nil for stateless operators.
	Snapshot func(id int64) (func(w io.Writer) error, error)
	// SnapshotIncremental, if set, replaces Snapshot: it returns the capture's full writer and its delta
	// writer (task.StateWriter.Delta), for keyed state on the heap backend. Code that wraps Snapshot
	// (broadcast.go) must clear it, or the chain would write the unwrapped state.
	SnapshotIncremental func(id int64) (full func(w io.Writer) error, delta func(w io.Writer) (superseded int64, err error), err error)
	Restore             func(data []byte) error
	// RestoreParts loads state written by several subtasks of another parallelism, keeping what belongs to
	// this subtask; only keyed operators have it (nil: the state cannot be rescaled).
	RestoreParts func(parts [][]byte) error
	// CheckpointComplete hears that a checkpoint completed, CheckpointAborted that one was aborted; nil
	// when the operator does not care.
	CheckpointComplete func(id int64) error
	CheckpointAborted  func(id int64) error
	// Watermark handles the operator's input watermark, which follows every record before it; it must pass
	// a watermark on (Context.EmitWatermark) once what it completes was emitted. nil: forward it unchanged.
	// WatermarkStatus likewise for an input that went idle or is active again.
	Watermark       func(ms int64) error
	WatermarkStatus func(idle bool) error
	// NextDeadline returns the earliest processing time (epoch ms) at which the operator has work
	// (math.MaxInt64: none); the task then calls OnProcessingTime with the time, between records. Both nil
	// for an operator without processing-time work.
	NextDeadline     func() int64
	OnProcessingTime func(nowMillis int64) error
	// Clocked, when set, says after Open whether the operator has processing-time work at all (a keyed
	// operator sweeps expired state only if it declared state with a TTL); nil: it has if NextDeadline is set.
	Clocked func() bool
	// RestoreWatermark sets the operator's current watermark to the restored floor (no timer fires and
	// nothing is emitted); nil when it keeps none.
	RestoreWatermark func(floor int64)
}

// SourceDriver is the non-generic face of a source reader.
type SourceDriver interface {
	Poll() (InputStatus, error)
	Available() <-chan struct{}
	// CheckReplay says, after the reader's restore, why it cannot replay for task failover (nil: it can).
	CheckReplay() error
}

// Context implements RuntimeContext for one operator of one subtask.
type Context struct {
	rt       *task.Runtime
	operator string
	ref      task.OperatorRef // name and file:line of the API call that built the operator, for errors
	mark     int32            // the value of task.Runtime.Running that names this operator (see enter)
	backend  state.Backend
	logger   *slog.Logger
	injs     []*Injection // the failure injections of this operator and subtask, in the order given
	wmOut    []watermarkTarget
	// side holds the consumers of the operator's side outputs, by tag; a tag may have several (one
	// record goes to each), and one without a consumer is not here (what is emitted to it is dropped).
	side []sideOutput
	// lists are the operator's list states (liststate.go); restoredLists what a restore gave them, for
	// those declared after it.
	lists         []opList
	restoredLists map[string][][]byte
}

// sideOutput is one consumer of a side output: a Collector[T], or Collector[Timed[T]] on a stream with
// event time.
type sideOutput struct {
	tag string
	out any
}

// EmitSide sends v to the consumers of side output tag of the operator behind ctx, with the timestamp of
// the record being processed on a stream with event time. A tag no operator reads drops v, as in Flink; a
// consumer of another type is a bug of the tag's use and fails the task.
func EmitSide[T any](ctx RuntimeContext, tag string, v T) {
	c := contextOf(ctx)
	if c == nil {
		panic(fmt.Sprintf("side output %q: the context %T is not one the engine gave", tag, ctx))
	}
	for _, s := range c.side {
		if s.tag != tag {
			continue
		}
		switch out := s.out.(type) {
		case Collector[T]:
			out.Collect(v)
		case Collector[Timed[T]]:
			out.Collect(Timed[T]{Ts: timestampOf(ctx), V: v})
		case sideRecorder:
			out.record(v, timestampOf(ctx))
		default:
			c.failf("side output %q carries %T, not %T", tag, s.out, v)
		}
	}
}

// timestampOf is the timestamp of the record being processed behind ctx, math.MinInt64 where the context
// has none.
func timestampOf(ctx RuntimeContext) int64 {
	if t, ok := ctx.(interface{ Timestamp() (int64, bool) }); ok {
		ts, _ := t.Timestamp()
		return ts
	}
	return math.MinInt64
}

// contextOf finds the operator's Context behind a context handed to user code.
func contextOf(ctx RuntimeContext) *Context {
	switch c := ctx.(type) {
	case *Context:
		return c
	case interface{ operatorContext() *Context }:
		return c.operatorContext()
	}
	return nil
}

func (c *Context) operatorContext() *Context { return c }

// EmitWatermark passes watermark ms on to the operator's successors: chained operators and network outputs.
func (c *Context) EmitWatermark(ms int64) error {
	for _, t := range c.wmOut {
		if err := t.emitWatermark(ms); err != nil {
			return err
		}
	}
	return nil
}

// EmitWatermarkStatus passes a watermark status on to the operator's successors.
func (c *Context) EmitWatermarkStatus(idle bool) error {
	for _, t := range c.wmOut {
		if err := t.emitWatermarkStatus(idle); err != nil {
			return err
		}
	}
	return nil
}

// Metrics implements RuntimeContext.
func (c *Context) Metrics() MetricGroup { return metricGroup{c} }

type metricGroup struct{ c *Context }

func (g metricGroup) Counter(name string) *Counter {
	v, err := g.c.rt.Counters.Counter(g.c.operator, name)
	if err != nil {
		g.c.fail(err)
	}
	return &Counter{v: v}
}

func (g metricGroup) Gauge(name string, f func() int64) {
	if err := g.c.rt.Counters.Gauge(g.c.operator, name, f); err != nil {
		g.c.fail(err)
	}
}

// CurrentProcessingTime is the task's clock, in epoch milliseconds.
func (c *Context) CurrentProcessingTime() int64 { return c.rt.Clock.Now().UnixMilli() }

// NewContext makes the context of operator name within the subtask described by rt.
func NewContext(rt *task.Runtime, name string) *Context {
	return &Context{rt: rt, operator: name, ref: task.OperatorRef{Name: name}, logger: rt.Logger.With("operator", name)}
}

func (c *Context) JobName() string             { return c.rt.Info.JobName }
func (c *Context) OperatorName() string        { return c.operator }
func (c *Context) TaskName() string            { return c.rt.Info.Name() }
func (c *Context) SubtaskIndex() int           { return int(c.rt.Info.Attempt.Index) }
func (c *Context) Parallelism() int            { return c.rt.Info.Parallelism }
func (c *Context) MaxParallelism() int         { return c.rt.Info.MaxParallelism }
func (c *Context) Attempt() int                { return int(c.rt.Info.Attempt.Number) }
func (c *Context) Logger() *slog.Logger        { return c.logger }
func (c *Context) Done() <-chan struct{}       { return c.rt.Cancel }
func (c *Context) Checkpointing() bool         { return c.rt.Checkpointing }
func (c *Context) keyedBackend() state.Backend { return c.backend }
func (c *Context) counters() *task.Counters    { return c.rt.Counters }
func (c *Context) fail(err error)              { task.Abort(fmt.Errorf("operator %q: %w", c.operator, err)) }
func (c *Context) failf(f string, args ...any) { c.fail(fmt.Errorf(f, args...)) }
func (c *Context) runtime() *task.Runtime      { return c.rt }

// enter marks this operator as the one whose code runs (task.Runtime.Running) and returns the mark it
// replaces, which leave puts back. Every record path that calls user code (a function, a reader, a
// writer, a codec) is bracketed so: a panic skips the leave, and the task, which recovers it, names the
// operator that panicked. No defer on the record path: it would cost more than the call it guards.
func (c *Context) enter() int32 {
	prev := c.rt.Running
	c.rt.Running = c.mark
	return prev
}

// leave puts back the mark enter replaced.
func (c *Context) leave(prev int32) { c.rt.Running = prev }

// panicError describes panic value p of this operator's code; called while panicking, so that the stack is
// the panic's.
func (c *Context) panicError(p any) *task.PanicError {
	return &task.PanicError{Operator: c.ref.Name, Origin: c.ref.Origin, Value: p, Stack: string(debug.Stack())}
}

// guard runs f, a lifecycle call of the operator (build, open, end of input, snapshot, close, ...), and
// returns a panic in it as a *task.PanicError naming the operator; a *task.Failure unwinds on, as in
// the task. An error rather than a panic, so that the chain still closes its other operators.
func (c *Context) guard(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if fl, ok := p.(*task.Failure); ok {
				panic(fl)
			}
			err = c.panicError(p)
		}
	}()
	return f()
}

func (c *Context) withBackend(b state.Backend) { c.backend = b }

// combine turns the downstream outputs of a node into one collector.
func combine[T any](c *Context, downstream []any) (BatchCollector[T], error) {
	outs := make([]BatchCollector[T], len(downstream))
	for i, d := range downstream {
		o, ok := d.(Collector[T])
		if !ok {
			return nil, fmt.Errorf("operator %q: downstream %d accepts %T, not Collector[%T]", c.operator, i, d, *new(T))
		}
		outs[i] = asBatch(o)
	}
	switch len(outs) {
	case 0:
		return discard[T]{}, nil
	case 1:
		return outs[0], nil
	}
	return fanOut[T](outs), nil
}

type discard[T any] struct{}

func (discard[T]) Collect(T) {}

func (discard[T]) CollectBatch([]T) {}

type fanOut[T any] []BatchCollector[T]

func (f fanOut[T]) Collect(v T) {
	for _, o := range f {
		o.Collect(v)
	}
}

func (f fanOut[T]) CollectBatch(vs []T) {
	for _, o := range f {
		o.CollectBatch(vs)
	}
}

// MapSpec applies a function to each record.
type MapSpec[In, Out any] struct{ Fn func(In) (Out, error) }

func (s *MapSpec[In, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Out](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	return Built{Input: wrapIn[In](ctx, &mapOp[In, Out]{fn: s.Fn, out: out, ctx: ctx})}, nil
}

type mapOp[In, Out any] struct {
	fn  func(In) (Out, error)
	out BatchCollector[Out]
	ctx *Context
	buf []Out
}

func (o *mapOp[In, Out]) Collect(v In) {
	prev := o.ctx.enter()
	o.collect(v)
	o.ctx.leave(prev)
}

// collect is Collect between enter and leave.
func (o *mapOp[In, Out]) collect(v In) {
	r, err := o.fn(v)
	if err != nil {
		o.ctx.fail(err)
	}
	o.out.Collect(r)
}

func (o *mapOp[In, Out]) CollectBatch(vs []In) {
	prev := o.ctx.enter()
	o.collectBatch(vs)
	o.ctx.leave(prev)
}

// collectBatch is CollectBatch between enter and leave.
func (o *mapOp[In, Out]) collectBatch(vs []In) {
	buf := o.buf[:0]
	for _, v := range vs {
		r, err := o.fn(v)
		if err != nil {
			o.ctx.fail(err)
		}
		buf = append(buf, r)
	}
	o.buf = buf
	o.out.CollectBatch(buf)
}

// FilterSpec keeps the records a predicate accepts.
type FilterSpec[T any] struct{ Fn func(T) (bool, error) }

func (s *FilterSpec[T]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[T](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	return Built{Input: wrapIn[T](ctx, &filterOp[T]{fn: s.Fn, out: out, ctx: ctx})}, nil
}

type filterOp[T any] struct {
	fn  func(T) (bool, error)
	out BatchCollector[T]
	ctx *Context
	buf []T
}

func (o *filterOp[T]) CollectBatch(vs []T) {
	prev := o.ctx.enter()
	o.collectBatch(vs)
	o.ctx.leave(prev)
}

// collectBatch is CollectBatch between enter and leave.
func (o *filterOp[T]) collectBatch(vs []T) {
	buf := o.buf[:0]
	for _, v := range vs {
		keep, err := o.fn(v)
		if err != nil {
			o.ctx.fail(err)
		}
		if keep {
			buf = append(buf, v)
		}
	}
	o.buf = buf
	if len(buf) > 0 {
		o.out.CollectBatch(buf)
	}
}

func (o *filterOp[T]) Collect(v T) {
	prev := o.ctx.enter()
	o.collect(v)
	o.ctx.leave(prev)
}

// collect is Collect between enter and leave.
func (o *filterOp[T]) collect(v T) {
	keep, err := o.fn(v)
	if err != nil {
		o.ctx.fail(err)
	}
	if keep {
		o.out.Collect(v)
	}
}

// FlatMapSpec emits zero or more records per input record.
type FlatMapSpec[In, Out any] struct {
	Fn func(In, Collector[Out]) error
}

func (s *FlatMapSpec[In, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Out](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	return Built{Input: wrapIn[In](ctx, newFlatMapOp[In, Out](s.Fn, out, ctx))}, nil
}

type flatMapOp[In, Out any] struct {
	fn func(In, Collector[Out]) error
	// out gathers what the function emits and hands it downstream in batches (at most maxBatch, and at the
	// end of each call): downstream operators then take the batch path, one call per batch rather than one
	// per record. It is the Collector the function takes, converted once, not at every call.
	out   Collector[Out]
	batch *batcher[Out]
	ctx   *Context
}

func newFlatMapOp[In, Out any](fn func(In, Collector[Out]) error, downstream BatchCollector[Out], ctx *Context) *flatMapOp[In, Out] {
	b := &batcher[Out]{next: downstream}
	return &flatMapOp[In, Out]{fn: fn, out: b, batch: b, ctx: ctx}
}

func (o *flatMapOp[In, Out]) Collect(v In) {
	prev := o.ctx.enter()
	o.collect(v)
	o.ctx.leave(prev)
}

// collect is Collect between enter and leave.
func (o *flatMapOp[In, Out]) collect(v In) {
	if err := o.fn(v, o.out); err != nil {
		o.ctx.fail(err)
	}
	o.batch.flush()
}

func (o *flatMapOp[In, Out]) CollectBatch(vs []In) {
	prev := o.ctx.enter()
	o.collectBatch(vs)
	o.ctx.leave(prev)
}

// collectBatch is CollectBatch between enter and leave.
func (o *flatMapOp[In, Out]) collectBatch(vs []In) {
	for i := range vs {
		if err := o.fn(vs[i], o.out); err != nil {
			o.ctx.fail(err)
		}
	}
	o.batch.flush()
}

// Identity forwards records unchanged (the target of Union and explicit partitioning).
type Identity[T any] struct{}

func (s *Identity[T]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[T](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	return Built{Input: wrapIn[T](ctx, out)}, nil
}

// SourceSpec runs a Source.
type SourceSpec[T any] struct{ Source Source[T] }

func (s *SourceSpec[T]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[T](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	b := &batcher[T]{next: &countingCollector[T]{next: asBatch(wrapIn[T](ctx, out)), c: ctx.counters()}}
	d := &sourceDriver[T]{ctx: ctx, out: b, after: func(InputStatus) { b.flush() }}
	return sourceBuilt(ctx, s.Source, d), nil
}

// sourceBuilt returns the operator of source src driven by d: the reader's lifecycle and checkpoint hooks.
func sourceBuilt[T any](ctx *Context, src Source[T], d *sourceDriver[T]) Built {
	return Built{
		Source: d,
		Open: func() error {
			r, err := src.CreateReader(ctx)
			if err != nil {
				return fmt.Errorf("source %q: create reader: %w", ctx.operator, err)
			}
			d.reader = r
			return nil
		},
		Close: func() error {
			if d.reader == nil {
				return nil
			}
			return d.reader.Close()
		},
		Snapshot: func(id int64) (func(io.Writer) error, error) {
			cr, ok := d.reader.(CheckpointedReader)
			if !ok {
				return nil, nil
			}
			data, err := cr.SnapshotState(id)
			if err != nil {
				return nil, fmt.Errorf("source %q: snapshot position: %w", ctx.operator, err)
			}
			return func(w io.Writer) error { _, err := w.Write(data); return err }, nil
		},
		Restore: func(data []byte) error {
			cr, ok := d.reader.(CheckpointedReader)
			if !ok {
				return fmt.Errorf("source %q cannot rewind to a checkpointed position: its reader does not implement CheckpointedReader", ctx.operator)
			}
			if err := cr.RestoreState(data); err != nil {
				return fmt.Errorf("source %q: restore position: %w", ctx.operator, err)
			}
			return nil
		},
		CheckpointComplete: notifyComplete(ctx, "source", func() any { return d.reader }),
		CheckpointAborted:  notifyAborted(ctx, "source", func() any { return d.reader }),
	}
}

type sourceDriver[T any] struct {
	ctx    *Context
	reader SourceReader[T]
	// out is what the reader emits to; after hands on what it gathered once a poll returned.
	out   Collector[T]
	after func(InputStatus)
}

func (d *sourceDriver[T]) Poll() (InputStatus, error) {
	prev := d.ctx.enter()
	st, err := d.poll()
	d.ctx.leave(prev)
	return st, err
}

// poll is Poll between enter and leave.
func (d *sourceDriver[T]) poll() (InputStatus, error) {
	st, err := d.reader.PollNext(d.out)
	if err != nil {
		d.after(NothingAvailable)
		return st, fmt.Errorf("source %q: %w", d.ctx.operator, err)
	}
	d.after(st)
	return st, nil
}

func (d *sourceDriver[T]) Available() <-chan struct{} { return d.reader.Available() }

func (d *sourceDriver[T]) CheckReplay() error {
	if dr, ok := d.reader.(DeterministicReader); ok && dr.ReplaysDeterministically() {
		return nil
	}
	return fmt.Errorf("source %q cannot replay for task failover: its reader does not say that it emits the same records in the same order from a restored position (runnel.DeterministicReader)", d.ctx.operator)
}

type countingCollector[T any] struct {
	next BatchCollector[T]
	c    *task.Counters
}

func (o *countingCollector[T]) Collect(v T) {
	o.c.In++
	o.next.Collect(v)
}

func (o *countingCollector[T]) CollectBatch(vs []T) {
	o.c.In += uint64(len(vs))
	o.next.CollectBatch(vs)
}

// notifyComplete returns the CheckpointComplete hook of a reader or writer x that implements
// CheckpointListener (looked up when the checkpoint completes, since x is made at Open).
func notifyComplete(ctx *Context, what string, x func() any) func(int64) error {
	return func(id int64) error {
		if l, ok := x().(CheckpointListener); ok {
			if err := l.NotifyCheckpointComplete(id); err != nil {
				return fmt.Errorf("%s %q: checkpoint %d complete: %w", what, ctx.operator, id, err)
			}
		}
		return nil
	}
}

// notifyAborted returns the CheckpointAborted hook of a reader or writer x that implements
// CheckpointAbortListener (looked up when the abort comes, since x is made at Open).
func notifyAborted(ctx *Context, what string, x func() any) func(int64) error {
	return func(id int64) error {
		if l, ok := x().(CheckpointAbortListener); ok {
			if err := l.NotifyCheckpointAborted(id); err != nil {
				return fmt.Errorf("%s %q: checkpoint %d aborted: %w", what, ctx.operator, id, err)
			}
		}
		return nil
	}
}

// SinkSpec runs a Sink.
type SinkSpec[T any] struct{ Sink Sink[T] }

func (s *SinkSpec[T]) Build(ctx *Context, downstream []any) (Built, error) {
	if len(downstream) != 0 {
		return Built{}, fmt.Errorf("sink %q has %d downstream operators", ctx.operator, len(downstream))
	}
	op := &sinkOp[T]{ctx: ctx, c: ctx.counters()}
	return sinkBuilt(ctx, s.Sink, op, wrapIn[T](ctx, op)), nil
}

// TimedSinkSpec runs a Sink on a stream with event time: the writer gets the values, and their timestamps
// too if it is a TimestampedWriter.
type TimedSinkSpec[T any] struct{ Sink Sink[T] }

func (s *TimedSinkSpec[T]) Build(ctx *Context, downstream []any) (Built, error) {
	if len(downstream) != 0 {
		return Built{}, fmt.Errorf("sink %q has %d downstream operators", ctx.operator, len(downstream))
	}
	op := &timedSinkOp[T]{sinkOp: sinkOp[T]{ctx: ctx, c: ctx.counters()}}
	return sinkBuilt(ctx, s.Sink, &op.sinkOp, wrapIn[Timed[T]](ctx, op)), nil
}

// Settler returns the sink's Settler, or nil when it is none.
func (s *SinkSpec[T]) Settler() Settler { st, _ := s.Sink.(Settler); return st }

// Settler returns the sink's Settler, or nil when it is none.
func (s *TimedSinkSpec[T]) Settler() Settler { st, _ := s.Sink.(Settler); return st }

// SettlerSpec is a node payload that may run a Settler: the specs of sinks.
type SettlerSpec interface{ Settler() Settler }

// OwnState returns the state an operator's Snapshot wrote, from the operator's entry in a subtask's
// checkpoint state (which frames its list states, if any, before it). A chain of incremental pieces is
// keyed state, which no sink writer has: an error.
func OwnState(entry []byte) ([]byte, error) {
	if _, ok, err := task.SplitPieces(entry); ok || err != nil {
		return nil, errors.New("the entry holds incremental keyed state, not an operator's own state")
	}
	_, own, err := splitLists(entry)
	return own, err
}

// TimestampedWriter is a SinkWriter that wants the timestamps of a stream with event time.
type TimestampedWriter[T any] interface {
	WriteTimed(v T, ts int64) error
}

// sinkBuilt returns the operator of sink s whose records reach op through input (op itself, or a timed
// adapter in front of it).
func sinkBuilt[T any](ctx *Context, s Sink[T], op *sinkOp[T], input any) Built {
	return Built{
		Input: input,
		Open: func() error {
			w, err := s.CreateWriter(ctx)
			if err != nil {
				return fmt.Errorf("sink %q: create writer: %w", ctx.operator, err)
			}
			op.w = w
			op.bw, _ = w.(BatchWriter[T])
			op.tw, _ = w.(TimestampedWriter[T])
			return nil
		},
		EndInput: func() error {
			if err := op.w.Flush(); err != nil {
				return fmt.Errorf("sink %q: flush: %w", ctx.operator, err)
			}
			return nil
		},
		Close: func() error {
			if op.w == nil {
				return nil
			}
			return op.w.Close()
		},
		Snapshot: func(id int64) (func(io.Writer) error, error) {
			cw, ok := op.w.(CheckpointedWriter)
			if !ok {
				return nil, nil
			}
			data, err := cw.SnapshotState(id)
			if err != nil {
				return nil, fmt.Errorf("sink %q: snapshot: %w", ctx.operator, err)
			}
			return func(w io.Writer) error { _, err := w.Write(data); return err }, nil
		},
		Restore: func(data []byte) error {
			cw, ok := op.w.(CheckpointedWriter)
			if !ok {
				return fmt.Errorf("sink %q cannot restore its checkpointed state: its writer does not implement CheckpointedWriter", ctx.operator)
			}
			if err := cw.RestoreState(data); err != nil {
				return fmt.Errorf("sink %q: restore: %w", ctx.operator, err)
			}
			return nil
		},
		CheckpointComplete: notifyComplete(ctx, "sink", func() any { return op.w }),
		CheckpointAborted:  notifyAborted(ctx, "sink", func() any { return op.w }),
	}
}

// timedSinkOp takes the records of a stream with event time to a sink's writer.
type timedSinkOp[T any] struct {
	sinkOp[T]
	vals []T
}

func (o *timedSinkOp[T]) Collect(v Timed[T]) {
	prev := o.ctx.enter()
	if o.tw != nil {
		o.c.Out++
		if err := o.tw.WriteTimed(v.V, v.Ts); err != nil {
			o.ctx.fail(err)
		}
	} else {
		o.collect(v.V)
	}
	o.ctx.leave(prev)
}

func (o *timedSinkOp[T]) CollectBatch(vs []Timed[T]) {
	if o.tw != nil {
		for _, v := range vs {
			o.Collect(v)
		}
		return
	}
	if o.bw == nil {
		// A writer of single values needs no slice of them: no copy of each value into one.
		prev := o.ctx.enter()
		for i := range vs {
			o.collect(vs[i].V)
		}
		o.ctx.leave(prev)
		return
	}
	vals := o.vals[:0]
	for i := range vs {
		vals = append(vals, vs[i].V)
	}
	o.vals = vals
	o.sinkOp.CollectBatch(vals)
}

type sinkOp[T any] struct {
	ctx *Context
	w   SinkWriter[T]
	bw  BatchWriter[T] // w, when it takes batches
	tw  TimestampedWriter[T]
	c   *task.Counters
}

func (o *sinkOp[T]) Collect(v T) {
	prev := o.ctx.enter()
	o.collect(v)
	o.ctx.leave(prev)
}

// collect is Collect between enter and leave.
func (o *sinkOp[T]) collect(v T) {
	o.c.Out++
	if err := o.w.Write(v); err != nil {
		o.ctx.fail(err)
	}
}

func (o *sinkOp[T]) CollectBatch(vs []T) {
	prev := o.ctx.enter()
	o.collectBatch(vs)
	o.ctx.leave(prev)
}

// collectBatch is CollectBatch between enter and leave.
func (o *sinkOp[T]) collectBatch(vs []T) {
	if o.bw != nil {
		o.c.Out += uint64(len(vs))
		if err := o.bw.WriteBatch(vs); err != nil {
			o.ctx.fail(err)
		}
		return
	}
	w := o.w
	for _, v := range vs {
		o.c.Out++
		if err := w.Write(v); err != nil {
			o.ctx.fail(err)
		}
	}
}

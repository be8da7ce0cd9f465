package operator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/runnel-dev/runnel/codec"

	"github.com/runnel-dev/runnel/internal/state"
)

// KeyedProcessFunction processes the records of a keyed stream with access to keyed state.
type KeyedProcessFunction[K comparable, In, Out any] interface {
	// Open is called once before the first record; keyed state is declared here.
	Open(ctx KeyedContext[K]) error
	// ProcessElement handles one record; ctx.CurrentKey() is its key.
	ProcessElement(ctx KeyedContext[K], v In, out Collector[Out]) error
	// EndInput is called when a bounded input has ended; it may still emit.
	EndInput(ctx KeyedContext[K], out Collector[Out]) error
	// Close is called once at the end, also after failures.
	Close() error
}

type keyedContext[K comparable] struct {
	*Context
	b state.KeyedBackend[K]
	// ts is the timestamp of the record being processed, when the stream has event time (timed).
	ts    int64
	timed bool
	// timers is the operator's timer service (nil for operators without timers).
	timers TimerService
	// inBatch says a batch of records is in hand; now is the processing time read for it, when nowRead.
	inBatch, nowRead bool
	now              int64
}

// CurrentProcessingTime is the task's clock in epoch milliseconds, read once per batch of records
// handed to the operator (a network buffer's or a source poll's, at most a few hundred records of one
// instant), when first asked: where the clock costs a system call, a function that asks per record spent
// a tenth of its time there. Outside a batch (timers, the end of input) it is read at each call.
func (k *keyedContext[K]) CurrentProcessingTime() int64 {
	if !k.inBatch {
		return k.Context.CurrentProcessingTime()
	}
	if !k.nowRead {
		k.now, k.nowRead = k.Context.CurrentProcessingTime(), true
	}
	return k.now
}

// beginBatch and endBatch bracket the processing of a batch of records (see CurrentProcessingTime).
func (k *keyedContext[K]) beginBatch() { k.inBatch, k.nowRead = true, false }
func (k *keyedContext[K]) endBatch()   { k.inBatch = false }

// Timestamp returns the timestamp of the record being processed and true, or false on a stream without
// event time.
func (k *keyedContext[K]) Timestamp() (int64, bool) { return k.ts, k.timed }

func (k *keyedContext[K]) CurrentKey() K { return k.b.CurrentKey() }

func (k *keyedContext[K]) ForEachKey(f func(K) error) error { return k.b.ForEachKey(f) }

// KeyedProcessSpec runs a KeyedProcessFunction. New makes a fresh function per subtask, so that functions
// may keep per-instance fields.
type KeyedProcessSpec[K comparable, In, Out any] struct {
	Key      func(In) K
	KeyCodec codec.Codec[K]
	New      func() KeyedProcessFunction[K, In, Out]
}

func (s *KeyedProcessSpec[K, In, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Out](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	kc, fn, built, err := buildKeyedProcess(ctx, s.KeyCodec, s.New, false)
	if err != nil {
		return Built{}, err
	}
	batch := &batcher[Out]{next: out}
	op := &keyedProcessOp[K, In, Out]{key: s.Key, fn: fn, out: batch, batch: batch, kc: kc}
	built.Input = wrapIn[In](ctx, op)
	built.EndInput = func() error { return fn.EndInput(kc, out) }
	h, _ := fn.(TimerHandler[K, Out])
	err = withTimers[K, Out](&built, kc, fn, func(tc TimerContext[K], ts int64) error { return h.OnTimer(tc, ts, batch) }, batch.flush)
	if err != nil {
		kc.b.Close()
		return Built{}, err
	}
	withTTLSweep(&built, kc.b)
	return built, nil
}

// TimedKeyedProcessSpec is KeyedProcessSpec on a stream with event time: ctx.Timestamp() is the record's,
// and what the function emits takes it.
type TimedKeyedProcessSpec[K comparable, In, Out any] struct {
	Key      func(In) K
	KeyCodec codec.Codec[K]
	New      func() KeyedProcessFunction[K, In, Out]
}

func (s *TimedKeyedProcessSpec[K, In, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Timed[Out]](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	kc, fn, built, err := buildKeyedProcess(ctx, s.KeyCodec, s.New, true)
	if err != nil {
		return Built{}, err
	}
	batch := &batcher[Timed[Out]]{next: out}
	// What EndInput emits takes the timestamp of the last record: there is no record being processed.
	st := &stamper[Out]{next: batch, ts: math.MinInt64}
	op := &timedKeyedProcessOp[K, In, Out]{key: s.Key, fn: fn, out: st, batch: batch, kc: kc}
	built.Input = wrapIn[Timed[In]](ctx, op)
	built.EndInput = func() error {
		err := fn.EndInput(kc, st)
		batch.flush()
		return err
	}
	h, _ := fn.(TimerHandler[K, Out])
	err = withTimers[K, Out](&built, kc, fn, func(tc TimerContext[K], ts int64) error {
		// What OnTimer emits takes the timer's time, in both domains.
		kc.ts, st.ts = ts, ts
		return h.OnTimer(tc, ts, st)
	}, batch.flush)
	if err != nil {
		kc.b.Close()
		return Built{}, err
	}
	withTTLSweep(&built, kc.b)
	return built, nil
}

// buildKeyedProcess makes the keyed backend, the context and the function of a keyed process operator,
// and the operator's hooks but its input and EndInput.
func buildKeyedProcess[K comparable, In, Out any](ctx *Context, keyCodec codec.Codec[K], newFn func() KeyedProcessFunction[K, In, Out], timed bool) (*keyedContext[K], KeyedProcessFunction[K, In, Out], Built, error) {
	fn := newFn()
	if fn == nil {
		return nil, nil, Built{}, fmt.Errorf("operator %q: process function factory returned nil", ctx.operator)
	}
	kc, built, err := buildKeyed[K](ctx, keyCodec, fn, timed)
	return kc, fn, built, err
}

// keyedFunction is the lifecycle of the function of a keyed operator.
type keyedFunction[K comparable] interface {
	Open(ctx KeyedContext[K]) error
	Close() error
}

// buildKeyed makes the keyed backend and context of an operator whose function is fn, and its lifecycle
// and checkpoint hooks.
func buildKeyed[K comparable](ctx *Context, keyCodec codec.Codec[K], fn keyedFunction[K], timed bool) (*keyedContext[K], Built, error) {
	b, err := newKeyedBackend(ctx, keyCodec)
	if err != nil {
		return nil, Built{}, err
	}
	kc := &keyedContext[K]{Context: ctx, b: b, timed: timed}
	built := keyedBuilt(b)
	built.Open = func() error {
		// Keyed state is declared in Open only: a constructor called later, per record, fails with a
		// message that says so instead of "declared twice" at the second record.
		defer b.SealDeclarations()
		return fn.Open(kc)
	}
	built.Close = func() error { return errors.Join(fn.Close(), b.Close()) }
	return kc, built, nil
}

// newKeyedBackend makes the keyed state backend the job asked for, owning this subtask's key groups.
func newKeyedBackend[K comparable](ctx *Context, kc codec.Codec[K]) (state.KeyedBackend[K], error) {
	info := ctx.rt.Info
	start, end := state.KeyGroupRange(info.MaxParallelism, info.Parallelism, int(info.Attempt.Index))
	opts := state.Options[K]{KeyCodec: kc, MaxParallelism: info.MaxParallelism, KeyGroupStart: start, KeyGroupEnd: end,
		Owner: ctx.operator, Now: ctx.CurrentProcessingTime}
	var (
		b   state.KeyedBackend[K]
		err error
	)
	switch ctx.rt.StateBackend {
	case "", "memory":
		b, err = state.NewHeap(opts)
	case "pebble":
		b, err = state.NewPebble(opts)
	default:
		err = fmt.Errorf("unknown state backend %q", ctx.rt.StateBackend)
	}
	if err != nil {
		return nil, fmt.Errorf("operator %q: keyed state: %w", ctx.operator, err)
	}
	ctx.withBackend(b)
	return b, nil
}

// keyedBuilt returns the checkpoint hooks of a keyed operator.
func keyedBuilt[K comparable](b state.KeyedBackend[K]) Built {
	return Built{
		Snapshot: func(id int64) (func(io.Writer) error, error) { return b.Snapshot(id) },
		SnapshotIncremental: func(id int64) (full func(io.Writer) error, delta func(io.Writer) (int64, error), err error) {
			return state.SnapshotIncremental(b, id)
		},
		Restore: func(data []byte) error { return b.Restore([]io.Reader{bytes.NewReader(data)}) },
		RestoreParts: func(parts [][]byte) error {
			rs := make([]io.Reader, len(parts))
			for i, p := range parts {
				rs[i] = bytes.NewReader(p)
			}
			return b.Restore(rs)
		},
	}
}

type keyedProcessOp[K comparable, In, Out any] struct {
	key func(In) K
	fn  KeyedProcessFunction[K, In, Out]
	// out gathers what the function emits into batches for downstream, as for a flat map.
	out   Collector[Out]
	batch *batcher[Out]
	kc    *keyedContext[K]
}

func (o *keyedProcessOp[K, In, Out]) Collect(v In) {
	prev := o.kc.enter()
	o.collect(v)
	o.kc.leave(prev)
}

// collect is Collect between enter and leave.
func (o *keyedProcessOp[K, In, Out]) collect(v In) {
	o.process(v)
	o.batch.flush()
}

func (o *keyedProcessOp[K, In, Out]) CollectBatch(vs []In) {
	prev := o.kc.enter()
	o.kc.beginBatch()
	o.collectBatch(vs)
	o.kc.endBatch()
	o.kc.leave(prev)
}

// collectBatch is CollectBatch between enter and leave.
func (o *keyedProcessOp[K, In, Out]) collectBatch(vs []In) {
	for _, v := range vs {
		o.process(v)
	}
	o.batch.flush()
}

func (o *keyedProcessOp[K, In, Out]) process(v In) {
	o.kc.b.SetCurrentKey(o.key(v))
	if err := o.fn.ProcessElement(o.kc, v, o.out); err != nil {
		o.kc.fail(err)
	}
}

type timedKeyedProcessOp[K comparable, In, Out any] struct {
	key   func(In) K
	fn    KeyedProcessFunction[K, In, Out]
	out   *stamper[Out]
	batch *batcher[Timed[Out]]
	kc    *keyedContext[K]
}

func (o *timedKeyedProcessOp[K, In, Out]) Collect(v Timed[In]) {
	prev := o.kc.enter()
	o.process(v)
	o.batch.flush()
	o.kc.leave(prev)
}

func (o *timedKeyedProcessOp[K, In, Out]) CollectBatch(vs []Timed[In]) {
	prev := o.kc.enter()
	o.kc.beginBatch()
	for _, v := range vs {
		o.process(v)
	}
	o.kc.endBatch()
	o.batch.flush()
	o.kc.leave(prev)
}

func (o *timedKeyedProcessOp[K, In, Out]) process(v Timed[In]) {
	o.kc.b.SetCurrentKey(o.key(v.V))
	o.kc.ts, o.out.ts = v.Ts, v.Ts
	if err := o.fn.ProcessElement(o.kc, v.V, o.out); err != nil {
		o.kc.fail(err)
	}
}

// ReduceSpec combines the records of each key with a reduce function and emits the running result.
type ReduceSpec[K comparable, T any] struct {
	Key      func(T) K
	KeyCodec codec.Codec[K]
	// Codec serializes the accumulator for checkpoints (nil: codec.For[T]).
	Codec codec.Codec[T]
	Fn    func(acc, v T) (T, error)
}

func (s *ReduceSpec[K, T]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[T](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	b, err := newKeyedBackend(ctx, s.KeyCodec)
	if err != nil {
		return Built{}, err
	}
	acc, err := state.NewValue[T](b, "reduce", s.Codec)
	if err != nil {
		b.Close()
		return Built{}, fmt.Errorf("operator %q: %w", ctx.operator, err)
	}
	b.SealDeclarations()
	built := keyedBuilt(b)
	built.Input = wrapIn[T](ctx, &reduceOp[K, T]{key: s.Key, fn: s.Fn, out: out, r: state.NewReducer(b, acc), ctx: ctx})
	built.Close = b.Close
	return built, nil
}

type reduceOp[K comparable, T any] struct {
	key  func(T) K
	fn   func(acc, v T) (T, error)
	out  BatchCollector[T]
	r    state.Reducer[K, T]
	ctx  *Context
	buf  []T
	keys []K
}

func (o *reduceOp[K, T]) Collect(v T) {
	prev := o.ctx.enter()
	o.collect(v)
	o.ctx.leave(prev)
}

// collect is Collect between enter and leave.
func (o *reduceOp[K, T]) collect(v T) {
	o.out.Collect(o.reduce(v))
}

func (o *reduceOp[K, T]) CollectBatch(vs []T) {
	prev := o.ctx.enter()
	o.collectBatch(vs)
	o.ctx.leave(prev)
}

// collectBatch is CollectBatch between enter and leave.
func (o *reduceOp[K, T]) collectBatch(vs []T) {
	keys := o.keys[:0]
	for _, v := range vs {
		keys = append(keys, o.key(v))
	}
	o.keys = keys
	buf, err := o.r.ReduceAll(keys, vs, o.fn, o.buf[:0])
	o.buf = buf
	if err != nil {
		o.ctx.fail(err)
	}
	o.out.CollectBatch(buf)
}

// reduce folds v into its key's accumulator and returns the new accumulator.
func (o *reduceOp[K, T]) reduce(v T) T {
	v, err := o.r.Reduce(o.key(v), v, o.fn)
	if err != nil {
		o.ctx.fail(err)
	}
	return v
}

// ttlSweepEvery is how often a keyed operator with state that has a TTL sweeps it, and ttlSweepBudget how
// many slots (heap) or keys (pebble) one sweep examines: bounded work per mailbox step.
const (
	ttlSweepEvery  = 1000 // ms
	ttlSweepBudget = 1024
)

// withTTLSweep adds the incremental sweep of expired state to a keyed operator's processing-time work
// (docs/eventtime.md §5.1), beside its own (timers); an operator without TTL state is not clocked for it.
func withTTLSweep[K comparable](built *Built, b state.KeyedBackend[K]) {
	own, ownOn, ownClocked := built.NextDeadline, built.OnProcessingTime, built.Clocked
	next := int64(math.MinInt64) // the first sweep at once, then every ttlSweepEvery
	ttl := false                 // decided after Open, when the states are declared
	built.Clocked = func() bool {
		ttl = state.HasTTL(b)
		return ttl || (own != nil && (ownClocked == nil || ownClocked()))
	}
	built.NextDeadline = func() int64 {
		d := int64(math.MaxInt64)
		if own != nil {
			d = own()
		}
		if ttl {
			d = min(d, next)
		}
		return d
	}
	built.OnProcessingTime = func(now int64) error {
		if ttl && now >= next {
			more, err := b.Sweep(now, ttlSweepBudget)
			if err != nil {
				return err
			}
			// A pass not finished goes on at the next step; a finished one waits for the next period.
			next = now + ttlSweepEvery
			if more {
				next = now
			}
		}
		if own != nil && own() <= now {
			return ownOn(now)
		}
		return nil
	}
}

package operator

import (
	"fmt"

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
	b *state.Keyed[K]
}

func (k *keyedContext[K]) CurrentKey() K { return k.b.CurrentKey() }

func (k *keyedContext[K]) ForEachKey(f func(K) error) error { return k.b.ForEachKey(f) }

// KeyedProcessSpec runs a KeyedProcessFunction. New makes a fresh function per subtask, so that functions
// may keep per-instance fields.
type KeyedProcessSpec[K comparable, In, Out any] struct {
	Key func(In) K
	New func() KeyedProcessFunction[K, In, Out]
}

func (s *KeyedProcessSpec[K, In, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Out](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	b := state.NewKeyed[K]()
	ctx.withBackend(b)
	kc := &keyedContext[K]{Context: ctx, b: b}
	fn := s.New()
	if fn == nil {
		return Built{}, fmt.Errorf("operator %q: process function factory returned nil", ctx.operator)
	}
	op := &keyedProcessOp[K, In, Out]{key: s.Key, fn: fn, out: out, kc: kc}
	return Built{
		Input:    op,
		Open:     func() error { return fn.Open(kc) },
		EndInput: func() error { return fn.EndInput(kc, out) },
		Close:    fn.Close,
	}, nil
}

type keyedProcessOp[K comparable, In, Out any] struct {
	key func(In) K
	fn  KeyedProcessFunction[K, In, Out]
	out Collector[Out]
	kc  *keyedContext[K]
}

func (o *keyedProcessOp[K, In, Out]) Collect(v In) {
	o.kc.b.SetCurrentKey(o.key(v))
	if err := o.fn.ProcessElement(o.kc, v, o.out); err != nil {
		o.kc.fail(err)
	}
}

// ReduceSpec combines the records of each key with a reduce function and emits the running result.
type ReduceSpec[K comparable, T any] struct {
	Key func(T) K
	Fn  func(acc, v T) (T, error)
}

func (s *ReduceSpec[K, T]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[T](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	b := state.NewKeyed[K]()
	ctx.withBackend(b)
	acc, err := state.NewValue[T](b, "reduce")
	if err != nil {
		return Built{}, err
	}
	return Built{Input: &reduceOp[K, T]{key: s.Key, fn: s.Fn, out: out, b: b, acc: acc, ctx: ctx}}, nil
}

type reduceOp[K comparable, T any] struct {
	key func(T) K
	fn  func(acc, v T) (T, error)
	out Collector[T]
	b   *state.Keyed[K]
	acc state.ValueState[T]
	ctx *Context
}

func (o *reduceOp[K, T]) Collect(v T) {
	o.b.SetCurrentKey(o.key(v))
	if prev, ok := o.acc.Value(); ok {
		var err error
		if v, err = o.fn(prev, v); err != nil {
			o.ctx.fail(err)
		}
	}
	o.acc.Update(v)
	o.out.Collect(v)
}

package operator

import (
	"fmt"
	"math"

	"github.com/runnel-dev/runnel/codec"
)

// KeyedCoProcessFunction processes the records of two keyed streams with shared keyed state: records of
// either input with equal keys go to the same subtask and see the same state. Records of the two inputs
// interleave in the order they arrive.
type KeyedCoProcessFunction[K comparable, A, B, Out any] interface {
	// Open is called once before the first record; keyed state is declared here.
	Open(ctx KeyedContext[K]) error
	// ProcessElement1 handles a record of the first input; ctx.CurrentKey() is its key.
	ProcessElement1(ctx KeyedContext[K], a A, out Collector[Out]) error
	// ProcessElement2 handles a record of the second input.
	ProcessElement2(ctx KeyedContext[K], b B, out Collector[Out]) error
	// EndInput is called once both inputs have ended (bounded input); it may still emit.
	EndInput(ctx KeyedContext[K], out Collector[Out]) error
	// Close is called once at the end, also after failures.
	Close() error
}

// KeyedCoProcessSpec runs a KeyedCoProcessFunction: the head of its chain, with two inputs. Both inputs
// have event time or neither (Timed); an optional TimerHandler gets timers as for a keyed process function.
type KeyedCoProcessSpec[K comparable, A, B, Out any] struct {
	Key1     func(A) K
	Key2     func(B) K
	KeyCodec codec.Codec[K]
	New      func() KeyedCoProcessFunction[K, A, B, Out]
	Timed    bool
}

func (s *KeyedCoProcessSpec[K, A, B, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	fn := s.New()
	if fn == nil {
		return Built{}, fmt.Errorf("operator %q: co-process function factory returned nil", ctx.operator)
	}
	kc, built, err := buildKeyed[K](ctx, s.KeyCodec, fn, s.Timed)
	if err != nil {
		return Built{}, err
	}
	h, _ := fn.(TimerHandler[K, Out])
	if s.Timed {
		var out BatchCollector[Timed[Out]]
		out, err = combine[Timed[Out]](ctx, downstream)
		if err != nil {
			kc.b.Close()
			return Built{}, err
		}
		batch := &batcher[Timed[Out]]{next: out}
		st := &stamper[Out]{next: batch, ts: math.MinInt64}
		in1 := &timedCoInput[K, A, Out]{kc: kc, key: s.Key1, out: st, batch: batch, fn: fn.ProcessElement1}
		in2 := &timedCoInput[K, B, Out]{kc: kc, key: s.Key2, out: st, batch: batch, fn: fn.ProcessElement2}
		built.Input, built.Input2 = wrapIn[Timed[A]](ctx, in1), wrapIn[Timed[B]](ctx, in2)
		built.EndInput = func() error {
			err := fn.EndInput(kc, st)
			batch.flush()
			return err
		}
		err = withTimers[K, Out](&built, kc, fn, func(tc TimerContext[K], ts int64) error {
			kc.ts, st.ts = ts, ts
			return h.OnTimer(tc, ts, st)
		}, batch.flush)
	} else {
		var out BatchCollector[Out]
		out, err = combine[Out](ctx, downstream)
		if err != nil {
			kc.b.Close()
			return Built{}, err
		}
		batch := &batcher[Out]{next: out}
		in1 := &coInput[K, A, Out]{kc: kc, key: s.Key1, out: batch, batch: batch, fn: fn.ProcessElement1}
		in2 := &coInput[K, B, Out]{kc: kc, key: s.Key2, out: batch, batch: batch, fn: fn.ProcessElement2}
		built.Input, built.Input2 = wrapIn[A](ctx, in1), wrapIn[B](ctx, in2)
		built.EndInput = func() error { return fn.EndInput(kc, out) }
		err = withTimers[K, Out](&built, kc, fn, func(tc TimerContext[K], ts int64) error { return h.OnTimer(tc, ts, batch) }, batch.flush)
	}
	if err != nil {
		kc.b.Close()
		return Built{}, err
	}
	return built, nil
}

// coInput is one input of a keyed co-process operator on streams without event time.
type coInput[K comparable, T, Out any] struct {
	kc    *keyedContext[K]
	key   func(T) K
	out   Collector[Out]
	batch *batcher[Out]
	fn    func(ctx KeyedContext[K], v T, out Collector[Out]) error
}

func (in *coInput[K, T, Out]) Collect(v T) {
	prev := in.kc.enter()
	in.one(v)
	in.batch.flush()
	in.kc.leave(prev)
}

func (in *coInput[K, T, Out]) CollectBatch(vs []T) {
	prev := in.kc.enter()
	for _, v := range vs {
		in.one(v)
	}
	in.batch.flush()
	in.kc.leave(prev)
}

func (in *coInput[K, T, Out]) one(v T) {
	in.kc.b.SetCurrentKey(in.key(v))
	if err := in.fn(in.kc, v, in.out); err != nil {
		in.kc.fail(err)
	}
}

// timedCoInput is one input of a keyed co-process operator on streams with event time.
type timedCoInput[K comparable, T, Out any] struct {
	kc    *keyedContext[K]
	key   func(T) K
	out   *stamper[Out]
	batch *batcher[Timed[Out]]
	fn    func(ctx KeyedContext[K], v T, out Collector[Out]) error
}

func (in *timedCoInput[K, T, Out]) Collect(v Timed[T]) {
	prev := in.kc.enter()
	in.one(v)
	in.batch.flush()
	in.kc.leave(prev)
}

func (in *timedCoInput[K, T, Out]) CollectBatch(vs []Timed[T]) {
	prev := in.kc.enter()
	for _, v := range vs {
		in.one(v)
	}
	in.batch.flush()
	in.kc.leave(prev)
}

func (in *timedCoInput[K, T, Out]) one(v Timed[T]) {
	in.kc.b.SetCurrentKey(in.key(v.V))
	in.kc.ts, in.out.ts = v.Ts, v.Ts
	if err := in.fn(in.kc, v.V, in.out); err != nil {
		in.kc.fail(err)
	}
}

package runnel

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/operator"
)

// Two inputs (docs/eventtime.md §6): an operator that reads two streams, of two types, with one input
// gate: barriers align across both, and its watermark is the lower of its inputs' (an idle input does not
// hold the other back).

// KeyedCoProcessFunction processes two keyed streams with shared keyed state: ProcessElement1 gets the
// first stream's records, ProcessElement2 the second's; an OnTimer method (TimerHandler) gets timers.
type KeyedCoProcessFunction[K comparable, A, B, Out any] = operator.KeyedCoProcessFunction[K, A, B, Out]

// KeyedCoProcessBase gives a KeyedCoProcessFunction no-op Open, EndInput and Close; embed it.
type KeyedCoProcessBase[K comparable, Out any] struct{}

// Open does nothing.
func (KeyedCoProcessBase[K, Out]) Open(KeyedContext[K]) error { return nil }

// EndInput does nothing.
func (KeyedCoProcessBase[K, Out]) EndInput(KeyedContext[K], Collector[Out]) error { return nil }

// Close does nothing.
func (KeyedCoProcessBase[K, Out]) Close() error { return nil }

// KeyedConnectedStreams are two keyed streams with keys of one type, to be processed together.
type KeyedConnectedStreams[K comparable, A, B any] struct {
	a *KeyedStream[K, A]
	b *KeyedStream[K, B]
}

// ConnectKeyed connects two keyed streams: a record of either goes to the subtask of its key, where both
// share the key's state. Both streams must have event time, or neither.
func ConnectKeyed[K comparable, A, B any](a *KeyedStream[K, A], b *KeyedStream[K, B]) *KeyedConnectedStreams[K, A, B] {
	env := a.s.env
	switch {
	case b.s.env != env:
		env.addErr(fmt.Errorf("ConnectKeyed: the streams belong to different environments (at %s)", origin()))
	case a.s.timed != b.s.timed:
		env.addErr(fmt.Errorf("ConnectKeyed: one stream has event time and the other has none: give both a WatermarkStrategy (WithTimestamps) (at %s)", origin()))
	case a.kc != nil && b.kc != nil && reflect.TypeOf(a.kc) != reflect.TypeOf(b.kc):
		env.addErr(fmt.Errorf("ConnectKeyed: the key codecs differ (%T and %T): both sides must hash a key alike to meet in one subtask (at %s)", a.kc, b.kc, origin()))
	}
	return &KeyedConnectedStreams[K, A, B]{a: a, b: b}
}

// KeyedCoProcess runs a keyed co-process function on connected keyed streams; newFn makes one instance per
// parallel subtask.
func KeyedCoProcess[K comparable, A, B, Out any](c *KeyedConnectedStreams[K, A, B], newFn func() KeyedCoProcessFunction[K, A, B, Out]) *Stream[Out] {
	env := c.a.s.env
	if newFn == nil {
		nilFunc(env, "KeyedCoProcess")
	}
	n := env.addNode(graph.OperatorNode, "coprocess", &operator.KeyedCoProcessSpec[K, A, B, Out]{Key1: c.a.key, Key2: c.b.key,
		KeyCodec: c.a.kc, New: newFn, Timed: c.a.s.timed})
	n.Inputs = 2
	connectInput(c.a.s, n, 0)
	connectInput(c.b.s, n, 1)
	return newStreamOf[Out](env, n, c.a.s.timed)
}

// Either is a record of one of two streams: A when IsB is false, else B. WindowCoGroup and WindowJoin send
// both of their streams through one window operator as Eithers.
type Either[A, B any] struct {
	A   A
	B   B
	IsB bool
}

// eitherCodec encodes an Either as a tag byte and the encoding of the side it holds.
type eitherCodec[A, B any] struct {
	a codec.Codec[A]
	b codec.Codec[B]
}

func (c eitherCodec[A, B]) Append(dst []byte, v Either[A, B]) ([]byte, error) {
	if v.IsB {
		return c.b.Append(append(dst, 1), v.B)
	}
	return c.a.Append(append(dst, 0), v.A)
}

func (c eitherCodec[A, B]) Decode(src []byte, v *Either[A, B]) error {
	if len(src) == 0 {
		return fmt.Errorf("%w: an Either without its tag byte", codec.ErrMalformed)
	}
	switch src[0] {
	case 0:
		v.IsB = false
		return c.a.Decode(src[1:], &v.A)
	case 1:
		v.IsB = true
		return c.b.Decode(src[1:], &v.B)
	}
	return fmt.Errorf("%w: an Either with tag %d, want 0 or 1", codec.ErrMalformed, src[0])
}

// EitherCodec returns the codec of Either[A, B] made of a codec for each side.
func EitherCodec[A, B any](a Codec[A], b Codec[B]) Codec[Either[A, B]] {
	return eitherCodec[A, B]{a: a, b: b}
}

// eitherOf maps both keyed streams to Eithers of one keyed stream, for one window operator over both. what
// is the API the user called: its errors name it, and its helper operators are named after it.
func eitherOf[K comparable, A, B any](what string, a *KeyedStream[K, A], b *KeyedStream[K, B]) *KeyedStream[K, Either[A, B]] {
	env := a.s.env
	sameEnv := a.s.env == b.s.env
	if !sameEnv {
		env.addErr(fmt.Errorf("%s: the streams belong to different environments (at %s)", what, origin()))
	}
	if a.s.timed != b.s.timed {
		env.addErr(fmt.Errorf("%s: one stream has event time and the other has none: give both a WatermarkStrategy (WithTimestamps) (at %s)", what, origin()))
	}
	ca, errA := sideCodec(a.s)
	cb, errB := sideCodec(b.s)
	if errA != nil || errB != nil {
		env.addErr(fmt.Errorf("%s: both sides cross the network and need codecs: %v (at %s)", what, errors.Join(errA, errB), origin()))
	}
	ec := EitherCodec[A, B](ca, cb)
	name := strings.ToLower(what)
	both := Map(a.s, func(v A) (Either[A, B], error) { return Either[A, B]{A: v}, nil }).Name(env.uniqueName(name + "-left")).WithCodec(ec)
	if sameEnv {
		right := Map(b.s, func(v B) (Either[A, B], error) { return Either[A, B]{B: v, IsB: true}, nil }).Name(env.uniqueName(name + "-right")).WithCodec(ec)
		both = union(both, right)
	}
	ka, kb := a.key, b.key
	return KeyBy(both, func(e Either[A, B]) K {
		if e.IsB {
			return kb(e.B)
		}
		return ka(e.A)
	}, a.kc)
}

// sideCodec is the codec of a stream's records: the one given with WithCodec, or codec.For.
func sideCodec[T any](s *Stream[T]) (codec.Codec[T], error) {
	if len(s.inputs) > 0 && s.inputs[0].codec.c != nil {
		return s.inputs[0].codec.c, nil
	}
	return codec.For[T]()
}

// uniqueName returns base, or base-2, base-3, ... if a node has the name already.
func (e *Environment) uniqueName(base string) string {
	taken := map[string]bool{}
	for _, n := range e.nodes {
		taken[n.Name] = true
	}
	name := base
	for i := 2; taken[name]; i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	return name
}

// coGroup is the process-window function of WindowCoGroup: it splits a window's Eithers by side.
type coGroup[K comparable, A, B, Out any] struct {
	ProcessWindowBase[K]
	fn func(ctx WindowContext[K], as []A, bs []B, out Collector[Out]) error
	as []A
	bs []B
}

func (g *coGroup[K, A, B, Out]) Process(ctx WindowContext[K], es []Either[A, B], out Collector[Out]) error {
	g.as, g.bs = g.as[:0], g.bs[:0]
	for _, e := range es {
		if e.IsB {
			g.bs = append(g.bs, e.B)
		} else {
			g.as = append(g.as, e.A)
		}
	}
	return g.fn(ctx, g.as, g.bs, out)
}

// WindowCoGroup cuts both keyed streams into the same windows and hands fn, per key and window, the
// records of each (either list may be empty, not both).
func WindowCoGroup[K comparable, A, B, Out any](a *KeyedStream[K, A], b *KeyedStream[K, B], w WindowAssigner,
	fn func(ctx WindowContext[K], as []A, bs []B, out Collector[Out]) error) *Stream[Out] {
	if fn == nil {
		nilFunc(a.s.env, "WindowCoGroup")
	}
	return windowCoGroup("WindowCoGroup", a, b, w, fn)
}

// windowCoGroup is WindowCoGroup, and WindowJoin with fn its cross product; what names the one the user
// called.
func windowCoGroup[K comparable, A, B, Out any](what string, a *KeyedStream[K, A], b *KeyedStream[K, B], w WindowAssigner,
	fn func(ctx WindowContext[K], as []A, bs []B, out Collector[Out]) error) *Stream[Out] {
	ks := eitherOf(what, a, b)
	return windowProcess(Window(ks, w), what, accCodec[Either[A, B]](a.s.env, what), func() ProcessWindowFunction[K, Either[A, B], Out] {
		return &coGroup[K, A, B, Out]{fn: fn}
	})
}

// WindowJoin emits fn's result for every pair of records of the two keyed streams with one key in one
// window (an inner join per window).
func WindowJoin[K comparable, A, B, Out any](a *KeyedStream[K, A], b *KeyedStream[K, B], w WindowAssigner,
	fn func(a A, b B, out Collector[Out]) error) *Stream[Out] {
	if fn == nil {
		nilFunc(a.s.env, "WindowJoin")
	}
	return windowCoGroup("WindowJoin", a, b, w, func(_ WindowContext[K], as []A, bs []B, out Collector[Out]) error {
		for _, x := range as {
			for _, y := range bs {
				if err := fn(x, y, out); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// CoProcessFunction processes two streams that are not keyed: ProcessElement1 gets the first stream's
// records, ProcessElement2 the second's, in arrival order; no keyed state and no timers.
type CoProcessFunction[A, B, Out any] = operator.CoProcessFunction[A, B, Out]

// CoProcessBase gives a CoProcessFunction no-op Open, EndInput and Close; embed it.
type CoProcessBase[Out any] struct{ RichBase }

// EndInput does nothing.
func (CoProcessBase[Out]) EndInput(ProcessContext, Collector[Out]) error { return nil }

// ConnectedStreams are two streams, of two types, to be processed together.
type ConnectedStreams[A, B any] struct {
	a *Stream[A]
	b *Stream[B]
}

// Connect connects two streams; both must have event time, or neither.
func Connect[A, B any](a *Stream[A], b *Stream[B]) *ConnectedStreams[A, B] {
	switch {
	case a.env != b.env:
		a.env.addErr(fmt.Errorf("Connect: the streams belong to different environments (at %s)", origin()))
	case a.timed != b.timed:
		a.env.addErr(fmt.Errorf("Connect: one stream has event time and the other has none: give both a WatermarkStrategy (WithTimestamps) (at %s)", origin()))
	}
	return &ConnectedStreams[A, B]{a: a, b: b}
}

// CoProcess runs a co-process function on connected streams; newFn makes one per parallel subtask.
func CoProcess[A, B, Out any](c *ConnectedStreams[A, B], newFn func() CoProcessFunction[A, B, Out]) *Stream[Out] {
	env := c.a.env
	if newFn == nil {
		nilFunc(env, "CoProcess")
	}
	n := env.addNode(graph.OperatorNode, "coprocess", &operator.CoProcessSpec[A, B, Out]{New: newFn, Timed: c.a.timed})
	n.Inputs = 2
	connectInput(c.a, n, 0)
	connectInput(c.b, n, 1)
	return newStreamOf[Out](env, n, c.a.timed)
}

package operator

import (
	"errors"
	"fmt"
	"math"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// JoinContext tells an interval join's function the timestamps of the pair it joins.
type JoinContext interface {
	LeftTimestamp() int64
	RightTimestamp() int64
}

// IntervalJoinSpec joins two keyed streams with event time: a record a of the first at ta and b of the
// second at tb with one key are joined when ta+Lower <= tb <= ta+Upper; the result takes max(ta, tb).
// Each side keeps its records per key and timestamp (list map state) until the watermark reaches the last
// time a record of the other side could still join them, and not before the watermark reaches their own
// time (Flink's cleanup times). A record is late, and dropped, when its timestamp is below the watermark;
// one at the watermark is joined, as in Flink.
type IntervalJoinSpec[K comparable, A, B, Out any] struct {
	Key1         func(A) K
	Key2         func(B) K
	KeyCodec     codec.Codec[K]
	Lower, Upper int64
	CodecA       codec.Codec[A]
	CodecB       codec.Codec[B]
	Fn           func(a A, b B, ctx JoinContext, out Collector[Out]) error
}

func (s *IntervalJoinSpec[K, A, B, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Timed[Out]](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	b, err := newKeyedBackend(ctx, s.KeyCodec)
	if err != nil {
		return Built{}, err
	}
	fail := func(err error) (Built, error) {
		b.Close()
		return Built{}, fmt.Errorf("operator %q: %w", ctx.operator, err)
	}
	eb := state.Engine(b)
	j := &intervalJoin[K, A, B, Out]{spec: s, kc: &keyedContext[K]{Context: ctx, b: b, timed: true}, watermark: math.MinInt64}
	if j.left, err = state.NewListMap[int64, A](eb, "\x00join/left", codec.Int64(), s.CodecA); err != nil {
		return fail(err)
	}
	if j.right, err = state.NewListMap[int64, B](eb, "\x00join/right", codec.Int64(), s.CodecB); err != nil {
		return fail(err)
	}
	if j.timers, err = state.NewTimers[K](eb, "\x00timers/event"); err != nil {
		return fail(err)
	}
	b.SealDeclarations()
	j.batch = &batcher[Timed[Out]]{next: out}
	j.st = &stamper[Out]{next: j.batch}
	built := keyedBuilt(b)
	built.Input = wrapIn[Timed[A]](ctx, &joinLeft[K, A, B, Out]{j})
	built.Input2 = wrapIn[Timed[B]](ctx, &joinRight[K, A, B, Out]{j})
	built.Close = func() error { return errors.Join(b.Close()) }
	built.Watermark = func(ms int64) error {
		err := j.onWatermark(ms)
		j.batch.flush()
		if err != nil {
			return err
		}
		return ctx.EmitWatermark(ms)
	}
	built.RestoreWatermark = func(floor int64) { j.watermark = max(j.watermark, floor) }
	return built, nil
}

type intervalJoin[K comparable, A, B, Out any] struct {
	spec      *IntervalJoinSpec[K, A, B, Out]
	kc        *keyedContext[K]
	left      state.ListMapState[int64, A]
	right     state.ListMapState[int64, B]
	timers    state.Timers
	batch     *batcher[Timed[Out]]
	st        *stamper[Out]
	watermark int64
	jc        joinContext
}

type joinContext struct{ left, right int64 }

func (c *joinContext) LeftTimestamp() int64  { return c.left }
func (c *joinContext) RightTimestamp() int64 { return c.right }

// Namespaces of the cleanup timers: which side's records at the namespace's time go.
const (
	joinLeftSide  = 0
	joinRightSide = 1
)

func (j *intervalJoin[K, A, B, Out]) emit(a A, ta int64, b B, tb int64) {
	j.jc = joinContext{left: ta, right: tb}
	j.st.ts = max(ta, tb)
	if err := j.spec.Fn(a, b, &j.jc, j.st); err != nil {
		j.kc.fail(err)
	}
}

// isLate says a record at ts is late: below the watermark (Flink's rule; one at the watermark is not).
func (j *intervalJoin[K, A, B, Out]) isLate(ts int64) bool { return ts < j.watermark }

// cleanupTime is when a record at ts goes from its side's state, given the latest time, relative to ts, at
// which a record of the other side joins it: then, or at ts if that is earlier (as Flink's operator does).
func cleanupTime(ts, relUpper int64) int64 {
	if relUpper > 0 {
		return ts + relUpper
	}
	return ts
}

func (j *intervalJoin[K, A, B, Out]) addLeft(v Timed[A]) {
	if j.isLate(v.Ts) {
		return // its partners may have been cleaned up already
	}
	j.kc.b.SetCurrentKey(j.spec.Key1(v.V))
	lo, hi := v.Ts+j.spec.Lower, v.Ts+j.spec.Upper
	j.right.Range(func(tb int64, bs []B) bool {
		if tb >= lo && tb <= hi {
			for _, b := range bs {
				j.emit(v.V, v.Ts, b, tb)
			}
		}
		return true
	})
	j.left.Append(v.Ts, v.V)
	// No record of the other side below the watermark comes; none above hi joins it.
	j.timers.Register(cleanupTime(v.Ts, j.spec.Upper), state.Namespace{A: joinLeftSide, B: v.Ts})
}

func (j *intervalJoin[K, A, B, Out]) addRight(v Timed[B]) {
	if j.isLate(v.Ts) {
		return
	}
	j.kc.b.SetCurrentKey(j.spec.Key2(v.V))
	lo, hi := v.Ts-j.spec.Upper, v.Ts-j.spec.Lower
	j.left.Range(func(ta int64, as []A) bool {
		if ta >= lo && ta <= hi {
			for _, a := range as {
				j.emit(a, ta, v.V, v.Ts)
			}
		}
		return true
	})
	j.right.Append(v.Ts, v.V)
	j.timers.Register(cleanupTime(v.Ts, -j.spec.Lower), state.Namespace{A: joinRightSide, B: v.Ts})
}

func (j *intervalJoin[K, A, B, Out]) onWatermark(ms int64) error {
	if ms <= j.watermark {
		return nil
	}
	j.watermark = ms
	return j.timers.FireUpTo(ms, func(_ int64, ns state.Namespace) error {
		if ns.A == joinLeftSide {
			j.left.Remove(ns.B)
		} else {
			j.right.Remove(ns.B)
		}
		return nil
	})
}

type joinLeft[K comparable, A, B, Out any] struct{ j *intervalJoin[K, A, B, Out] }

func (in *joinLeft[K, A, B, Out]) Collect(v Timed[A]) {
	prev := in.j.kc.enter()
	in.j.addLeft(v)
	in.j.batch.flush()
	in.j.kc.leave(prev)
}

func (in *joinLeft[K, A, B, Out]) CollectBatch(vs []Timed[A]) {
	prev := in.j.kc.enter()
	for _, v := range vs {
		in.j.addLeft(v)
	}
	in.j.batch.flush()
	in.j.kc.leave(prev)
}

type joinRight[K comparable, A, B, Out any] struct{ j *intervalJoin[K, A, B, Out] }

func (in *joinRight[K, A, B, Out]) Collect(v Timed[B]) {
	prev := in.j.kc.enter()
	in.j.addRight(v)
	in.j.batch.flush()
	in.j.kc.leave(prev)
}

func (in *joinRight[K, A, B, Out]) CollectBatch(vs []Timed[B]) {
	prev := in.j.kc.enter()
	for _, v := range vs {
		in.j.addRight(v)
	}
	in.j.batch.flush()
	in.j.kc.leave(prev)
}

package operator

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// ProcessJoinFunction is the function of an interval join (Flink's ProcessJoinFunction): ProcessElement
// gets every pair the join finds, one instance per parallel subtask, with a lifecycle. Open may declare
// keyed state; ProcessElement then sees the state of the pair's key.
type ProcessJoinFunction[A, B, Out any] interface {
	Open(ctx RuntimeContext) error
	ProcessElement(a A, b B, ctx JoinContext, out Collector[Out]) error
	Close() error
}

// JoinContext is the context of an interval join's function: the timestamps of the pair it joins, and the
// runtime context, through which it emits to side outputs (at the result's timestamp).
type JoinContext interface {
	RuntimeContext
	// LeftTimestamp is the timestamp of the pair's record of the first stream.
	LeftTimestamp() int64
	// RightTimestamp is the timestamp of the pair's record of the second stream.
	RightTimestamp() int64
	// Timestamp is the result's timestamp, the later of the two, and true.
	Timestamp() (int64, bool)
}

// IntervalJoinSpec joins two keyed streams with event time (Flink's IntervalJoinOperator): a record a of
// the first at ta and b of the second at tb with one key are joined when ta+Lower <= tb <= ta+Upper (a
// bound marked exclusive excludes its equality); the result takes max(ta, tb). Each side keeps its records
// per key and timestamp (list map state) until the watermark reaches the last time a record of the other
// side could still join them, and not before the watermark reaches their own time (Flink's cleanup
// times). A record is late when its timestamp is below the watermark (one at the watermark is joined, as in
// Flink): it goes to its side's late tag, or is dropped and counted (late_records_dropped).
type IntervalJoinSpec[K comparable, A, B, Out any] struct {
	Key1     func(A) K
	Key2     func(B) K
	KeyCodec codec.Codec[K]
	// Lower and Upper bound tb-ta, in ms; LowerExclusive and UpperExclusive leave the bound itself out.
	Lower, Upper                   int64
	LowerExclusive, UpperExclusive bool
	CodecA                         codec.Codec[A]
	CodecB                         codec.Codec[B]
	// LeftLateTag and RightLateTag name the side outputs of each side's late records ("": dropped).
	LeftLateTag, RightLateTag string
	New                       func() ProcessJoinFunction[A, B, Out]
}

// Bounds returns the inclusive bounds of tb-ta that lower and upper, each inclusive or not, give: an
// exclusive bound moves by one ms inwards, as Flink's operator does (timestamps are whole ms). lo > hi
// says no pair joins.
func Bounds(lower, upper int64, lowerExclusive, upperExclusive bool) (lo, hi int64) {
	lo, hi = lower, upper
	if lowerExclusive {
		lo++
	}
	if upperExclusive {
		hi--
	}
	return lo, hi
}

func (s *IntervalJoinSpec[K, A, B, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	fn := s.New()
	if fn == nil {
		return Built{}, fmt.Errorf("operator %q: the join function factory returned nil", ctx.operator)
	}
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
	j := &intervalJoin[K, A, B, Out]{spec: s, fn: fn, kc: &keyedContext[K]{Context: ctx, b: b, timed: true}, watermark: math.MinInt64}
	j.lower, j.upper = Bounds(s.Lower, s.Upper, s.LowerExclusive, s.UpperExclusive)
	j.jc.Context = ctx
	j.rangeLeft, j.rangeRight = j.hitLeft, j.hitRight
	if j.left, err = state.NewListMap[int64, A](eb, "\x00join/left", codec.Int64(), s.CodecA); err != nil {
		return fail(err)
	}
	if j.right, err = state.NewListMap[int64, B](eb, "\x00join/right", codec.Int64(), s.CodecB); err != nil {
		return fail(err)
	}
	if j.timers, err = state.NewTimers[K](eb, "\x00timers/event"); err != nil {
		return fail(err)
	}
	late, err := ctx.rt.Counters.Counter(ctx.operator, "late_records_dropped")
	if err != nil {
		return fail(err)
	}
	j.late = &Counter{v: late}
	j.batch = &batcher[Timed[Out]]{next: out}
	j.st = &stamper[Out]{next: j.batch}
	built := keyedBuilt(b)
	built.Input = wrapIn[Timed[A]](ctx, &joinLeft[K, A, B, Out]{j})
	built.Input2 = wrapIn[Timed[B]](ctx, &joinRight[K, A, B, Out]{j})
	built.Open = func() error {
		// The function declares its keyed state in Open, after the join's own.
		defer b.SealDeclarations()
		return fn.Open(ctx)
	}
	built.Close = func() error {
		if n := j.late.Value(); n > 0 {
			ctx.Logger().Info("interval join dropped late records", "late_records_dropped", n)
		}
		return errors.Join(fn.Close(), b.Close())
	}
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

// joinHit is a timestamp of one side's state within the bounds of a record of the other side, with the
// records at it.
type joinHit[V any] struct {
	ts int64
	vs []V
}

type intervalJoin[K comparable, A, B, Out any] struct {
	spec *IntervalJoinSpec[K, A, B, Out]
	fn   ProcessJoinFunction[A, B, Out]
	kc   *keyedContext[K]
	// lower and upper are the inclusive bounds of tb-ta.
	lower, upper int64
	left         state.ListMapState[int64, A]
	right        state.ListMapState[int64, B]
	timers       state.Timers
	batch        *batcher[Timed[Out]]
	st           *stamper[Out]
	watermark    int64
	jc           joinContext
	late         *Counter
	// from and to bound the timestamps that the Range in progress collects into leftHits or rightHits;
	// rangeLeft and rangeRight are hitLeft and hitRight as func values made once, so that a Range does not
	// allocate a closure per record.
	from, to   int64
	leftHits   []joinHit[A]
	rightHits  []joinHit[B]
	rangeLeft  func(int64, []A) bool
	rangeRight func(int64, []B) bool
}

type joinContext struct {
	*Context
	left, right, result int64
}

func (c *joinContext) LeftTimestamp() int64     { return c.left }
func (c *joinContext) RightTimestamp() int64    { return c.right }
func (c *joinContext) Timestamp() (int64, bool) { return c.result, true }

// Namespaces of the cleanup timers: which side's records at the namespace's time go.
const (
	joinLeftSide  = 0
	joinRightSide = 1
)

func (j *intervalJoin[K, A, B, Out]) emit(a A, ta int64, b B, tb int64) {
	ts := max(ta, tb)
	j.jc.left, j.jc.right, j.jc.result = ta, tb, ts
	j.st.ts = ts
	if err := j.fn.ProcessElement(a, b, &j.jc, j.st); err != nil {
		j.kc.fail(err)
	}
}

// isLate says a record at ts is late: below the watermark (Flink's rule; one at the watermark is not).
// Its partners of the other side may have been cleaned up already.
func (j *intervalJoin[K, A, B, Out]) isLate(ts int64) bool { return ts < j.watermark }

// cleanupTime is when a record at ts goes from its side's state, given the latest time, relative to ts, at
// which a record of the other side joins it: then, or at ts if that is earlier (as Flink's operator does).
func cleanupTime(ts, relUpper int64) int64 {
	if relUpper > 0 {
		return ts + relUpper
	}
	return ts
}

// checkTimestamp fails the task on a record without a meaningful timestamp: its bounds would overflow.
func (j *intervalJoin[K, A, B, Out]) checkTimestamp(ts int64) {
	if ts == math.MinInt64 {
		j.kc.failf("a record with timestamp math.MinInt64: an interval join needs records with meaningful timestamps")
	}
}

// dropLate sends a late record to its side's late tag, at its own timestamp, or counts it as dropped.
func dropLate[K comparable, V any](kc *keyedContext[K], tag string, late *Counter, v Timed[V]) {
	if tag == "" {
		late.Inc()
		return
	}
	kc.ts = v.Ts
	EmitSide(kc, tag, v.V)
}

func (j *intervalJoin[K, A, B, Out]) hitLeft(ta int64, as []A) bool {
	if ta >= j.from && ta <= j.to {
		j.leftHits = append(j.leftHits, joinHit[A]{ts: ta, vs: as})
	}
	return true
}

func (j *intervalJoin[K, A, B, Out]) hitRight(tb int64, bs []B) bool {
	if tb >= j.from && tb <= j.to {
		j.rightHits = append(j.rightHits, joinHit[B]{ts: tb, vs: bs})
	}
	return true
}

// byTime orders hits by timestamp (one hit per timestamp): the pairs of one record come out in timestamp
// order, then in the order their side received them, the same on every run (a replay must emit what the
// first run did; a Go map's order is not).
func byTime[V any](x, y joinHit[V]) int { return cmp.Compare(x.ts, y.ts) }

func (j *intervalJoin[K, A, B, Out]) addLeft(v Timed[A]) {
	j.checkTimestamp(v.Ts)
	if j.isLate(v.Ts) {
		dropLate(j.kc, j.spec.LeftLateTag, j.late, v)
		return
	}
	j.kc.b.SetCurrentKey(j.spec.Key1(v.V))
	j.from, j.to = v.Ts+j.lower, v.Ts+j.upper
	j.right.Range(j.rangeRight)
	slices.SortFunc(j.rightHits, byTime[B])
	for _, h := range j.rightHits {
		for _, b := range h.vs {
			j.emit(v.V, v.Ts, b, h.ts)
		}
	}
	clear(j.rightHits)
	j.rightHits = j.rightHits[:0]
	j.left.Append(v.Ts, v.V)
	// No record of the other side below the watermark comes; none above ts+upper joins it.
	j.timers.Register(cleanupTime(v.Ts, j.upper), state.Namespace{A: joinLeftSide, B: v.Ts})
}

func (j *intervalJoin[K, A, B, Out]) addRight(v Timed[B]) {
	j.checkTimestamp(v.Ts)
	if j.isLate(v.Ts) {
		dropLate(j.kc, j.spec.RightLateTag, j.late, v)
		return
	}
	j.kc.b.SetCurrentKey(j.spec.Key2(v.V))
	j.from, j.to = v.Ts-j.upper, v.Ts-j.lower
	j.left.Range(j.rangeLeft)
	slices.SortFunc(j.leftHits, byTime[A])
	for _, h := range j.leftHits {
		for _, a := range h.vs {
			j.emit(a, h.ts, v.V, v.Ts)
		}
	}
	clear(j.leftHits)
	j.leftHits = j.leftHits[:0]
	j.right.Append(v.Ts, v.V)
	j.timers.Register(cleanupTime(v.Ts, -j.lower), state.Namespace{A: joinRightSide, B: v.Ts})
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

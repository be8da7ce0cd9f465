package runnel

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/operator"
)

// Interval joins (docs/eventtime.md §6.2), as Flink's KeyedStream.intervalJoin: a record a of the first
// keyed stream at ta joins b of the second at tb, with one key, when ta+lower <= tb <= ta+upper.

// ProcessJoinFunction is the function of an interval join, with a lifecycle: Open (with the runtime
// context; keyed state of the join's key is declared here), ProcessElement for every pair, Close. Embed
// RichBase for no-op Open and Close.
type ProcessJoinFunction[A, B, Out any] = operator.ProcessJoinFunction[A, B, Out]

// JoinContext tells an interval join's function the timestamps of the pair it joins (LeftTimestamp,
// RightTimestamp, and Timestamp, the result's: the later of the two); OutputTag.Emit with it sends to a
// side output at the result's timestamp.
type JoinContext = operator.JoinContext

// IntervalJoined is an interval join of two keyed streams waiting for its function (IntervalJoinProcess).
type IntervalJoined[K comparable, A, B any] struct {
	what                           string // the API the user called, for errors
	a                              *KeyedStream[K, A]
	b                              *KeyedStream[K, B]
	lower, upper                   int64
	lowerExclusive, upperExclusive bool
	leftLate, rightLate            string
}

// IntervalJoinBetween starts an interval join of a and b (both with event time and one key type): a of a
// at ta joins b of b at tb when ta+lower <= tb <= ta+upper; both bounds are inclusive unless
// LowerBoundExclusive or UpperBoundExclusive says otherwise, and whole milliseconds.
func IntervalJoinBetween[K comparable, A, B any](a *KeyedStream[K, A], b *KeyedStream[K, B], lower, upper time.Duration) *IntervalJoined[K, A, B] {
	return intervalJoined("IntervalJoinBetween", a, b, lower, upper)
}

func intervalJoined[K comparable, A, B any](what string, a *KeyedStream[K, A], b *KeyedStream[K, B], lower, upper time.Duration) *IntervalJoined[K, A, B] {
	env := a.s.env
	lo, errLo := millis(what+": the lower bound", lower, -1<<62)
	hi, errHi := millis(what+": the upper bound", upper, -1<<62)
	switch {
	case errLo != nil || errHi != nil:
		env.addErr(fmt.Errorf("%w (at %s)", errors.Join(errLo, errHi), origin()))
	case lo > hi:
		env.addErr(fmt.Errorf("%s: the lower bound %s is above the upper bound %s (at %s)", what, lower, upper, origin()))
	case b.s.env != env:
		env.addErr(fmt.Errorf("%s: the streams belong to different environments (at %s)", what, origin()))
	case !a.s.timed || !b.s.timed:
		env.addErr(fmt.Errorf("%s: both streams need event time: give them a WatermarkStrategy (WithTimestamps) (at %s)", what, origin()))
	case a.kc != nil && b.kc != nil && reflect.TypeOf(a.kc) != reflect.TypeOf(b.kc):
		env.addErr(fmt.Errorf("%s: the key codecs differ (%T and %T): both sides must hash a key alike to meet in one subtask (at %s)", what, a.kc, b.kc, origin()))
	}
	return &IntervalJoined[K, A, B]{what: what, a: a, b: b, lower: lo, upper: hi}
}

// LowerBoundExclusive leaves pairs with tb = ta+lower out.
func (j *IntervalJoined[K, A, B]) LowerBoundExclusive() *IntervalJoined[K, A, B] {
	j.lowerExclusive = true
	return j
}

// UpperBoundExclusive leaves pairs with tb = ta+upper out.
func (j *IntervalJoined[K, A, B]) UpperBoundExclusive() *IntervalJoined[K, A, B] {
	j.upperExclusive = true
	return j
}

// SideOutputLeftLateData sends the records of the first stream that arrive late (their timestamp below
// the join's watermark) to the side output tag, at their own timestamp, instead of dropping them:
// SideOutput(joined, tag) is their stream.
func (j *IntervalJoined[K, A, B]) SideOutputLeftLateData(tag OutputTag[A]) *IntervalJoined[K, A, B] {
	j.leftLate = j.lateTag("SideOutputLeftLateData", tag.id)
	return j
}

// SideOutputRightLateData is SideOutputLeftLateData for the records of the second stream.
func (j *IntervalJoined[K, A, B]) SideOutputRightLateData(tag OutputTag[B]) *IntervalJoined[K, A, B] {
	j.rightLate = j.lateTag("SideOutputRightLateData", tag.id)
	return j
}

func (j *IntervalJoined[K, A, B]) lateTag(what, id string) string {
	if id == "" {
		j.a.s.env.addErr(fmt.Errorf("%s: the tag has no id: make it with NewOutputTag (at %s)", what, origin()))
	}
	return id
}

// IntervalJoinProcess runs the join with a ProcessJoinFunction; newFn makes one per parallel subtask. The
// results take the later timestamp of the pair. Each side's records are kept until the watermark reaches
// the last time they could still be joined (and at least until it reaches their own time); a record whose
// timestamp is below the watermark when it arrives is late: it goes to its side's late side output, or is
// dropped and counted in the metric late_records_dropped. One at the watermark is joined (as in Flink).
func IntervalJoinProcess[K comparable, A, B, Out any](j *IntervalJoined[K, A, B], newFn func() ProcessJoinFunction[A, B, Out]) *Stream[Out] {
	a, b := j.a, j.b
	env := a.s.env
	if newFn == nil {
		nilFunc(env, j.what)
	}
	if lo, hi := operator.Bounds(j.lower, j.upper, j.lowerExclusive, j.upperExclusive); lo > hi && j.lower <= j.upper {
		env.addErr(fmt.Errorf("%s: the bounds [%d ms, %d ms] with an exclusive end admit no pair (at %s)", j.what, j.lower, j.upper, origin()))
	}
	ca, errA := sideCodec(a.s)
	cb, errB := sideCodec(b.s)
	if errA != nil || errB != nil {
		env.addErr(fmt.Errorf("%s: the records of both sides are kept in keyed state and need codecs: %w (at %s)", j.what, errors.Join(errA, errB), origin()))
	}
	n := env.addNode(graph.OperatorNode, "intervaljoin", &operator.IntervalJoinSpec[K, A, B, Out]{Key1: a.key, Key2: b.key,
		KeyCodec: a.kc, Lower: j.lower, Upper: j.upper, LowerExclusive: j.lowerExclusive, UpperExclusive: j.upperExclusive,
		CodecA: ca, CodecB: cb, LeftLateTag: j.leftLate, RightLateTag: j.rightLate, New: newFn})
	n.Inputs = 2
	connectInput(a.s, n, 0)
	connectInput(b.s, n, 1)
	if j.leftLate != "" {
		declareSideTag(env, j.what, n, j.leftLate, reflect.TypeFor[A]())
	}
	if j.rightLate != "" {
		declareSideTag(env, j.what, n, j.rightLate, reflect.TypeFor[B]())
	}
	return newStreamOf[Out](env, n, true)
}

// joinFunc is the ProcessJoinFunction of IntervalJoin: a plain function.
type joinFunc[A, B, Out any] struct {
	RichBase
	fn func(a A, b B, ctx JoinContext, out Collector[Out]) error
}

func (f joinFunc[A, B, Out]) ProcessElement(a A, b B, ctx JoinContext, out Collector[Out]) error {
	return f.fn(a, b, ctx, out)
}

// IntervalJoin joins two keyed streams with event time with a plain function: IntervalJoinBetween(a, b,
// lower, upper) with both bounds inclusive, late records dropped, run by IntervalJoinProcess.
func IntervalJoin[K comparable, A, B, Out any](a *KeyedStream[K, A], b *KeyedStream[K, B], lower, upper time.Duration,
	fn func(a A, b B, ctx JoinContext, out Collector[Out]) error) *Stream[Out] {
	j := intervalJoined("IntervalJoin", a, b, lower, upper)
	if fn == nil {
		return IntervalJoinProcess[K, A, B, Out](j, nil)
	}
	return IntervalJoinProcess(j, func() ProcessJoinFunction[A, B, Out] { return joinFunc[A, B, Out]{fn: fn} })
}

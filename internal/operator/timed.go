package operator

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/runnel-dev/runnel/codec"
)

// Timed is a record of a stream with event time: its value and its timestamp in epoch milliseconds. A
// stream without event time carries its values bare (docs/eventtime.md §1.1), so that jobs which do not use
// event time run the code and send the bytes they did before it existed.
type Timed[T any] struct {
	Ts int64
	V  T
}

// TimedCodec is the codec of an edge of a timed stream: 8 bytes of little-endian timestamp, then c's
// encoding of the value (which runs to the end of the record, as c's encoding always does).
func TimedCodec[T any](c codec.Codec[T]) codec.Codec[Timed[T]] {
	return &timedCodec[T]{c: c, name: "operator.Timed[" + reflect.TypeFor[T]().String() + "]",
		flat: codec.IsMemoryCopy(c) && unsafe.Sizeof(Timed[T]{}) == 8+unsafe.Sizeof(*new(T))}
}

type timedCodec[T any] struct {
	c    codec.Codec[T]
	name string
	// flat: Timed[T]'s memory is the encoding (the timestamp's 8 bytes, then the value's memory, which is
	// its encoding, with no padding between or after), so the edge's writer and reader copy it whole.
	flat bool
}

func (c *timedCodec[T]) Append(dst []byte, v Timed[T]) ([]byte, error) {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(v.Ts))
	return c.c.Append(dst, v.V)
}

func (c *timedCodec[T]) Decode(src []byte, v *Timed[T]) error {
	if len(src) < 8 {
		return &codec.Error{Codec: c.name, Problem: fmt.Sprintf("truncated: want at least 8 bytes of timestamp, have %d", len(src))}
	}
	v.Ts = int64(binary.LittleEndian.Uint64(src))
	if err := c.c.Decode(src[8:], &v.V); err != nil {
		return fmt.Errorf("%s: value: %w", c.name, err)
	}
	return nil
}

// isFlat reports whether records of c move in and out of network buffers as their memory: c is a memory
// copy itself, or the timed codec of one without padding.
func isFlat[T any](c codec.Codec[T]) bool {
	if codec.IsMemoryCopy(c) {
		return true
	}
	if f, ok := c.(interface{ flatTimed() bool }); ok {
		return f.flatTimed()
	}
	return false
}

func (c *timedCodec[T]) flatTimed() bool { return c.flat }

// StampMap is a map function over timed records: the output takes the input's timestamp, as in Flink.
func StampMap[In, Out any](fn func(In) (Out, error)) func(Timed[In]) (Timed[Out], error) {
	return func(t Timed[In]) (Timed[Out], error) {
		o, err := fn(t.V)
		return Timed[Out]{Ts: t.Ts, V: o}, err
	}
}

// StampFilter is a filter predicate over timed records.
func StampFilter[T any](fn func(T) (bool, error)) func(Timed[T]) (bool, error) {
	return func(t Timed[T]) (bool, error) { return fn(t.V) }
}

// StampReduce is a reduce function over timed records: the running result takes the timestamp of the record
// folded in last, as in Flink.
func StampReduce[T any](fn func(acc, v T) (T, error)) func(acc, v Timed[T]) (Timed[T], error) {
	return func(acc, v Timed[T]) (Timed[T], error) {
		r, err := fn(acc.V, v.V)
		return Timed[T]{Ts: v.Ts, V: r}, err
	}
}

// stamper is the Collector[T] a function of a timed operator emits to: each value goes on with the
// timestamp of the record (or timer) being processed. One per operator instance, so emitting allocates
// nothing.
type stamper[T any] struct {
	ts   int64
	next Collector[Timed[T]]
}

func (s *stamper[T]) Collect(v T) {
	if b, ok := s.next.(*batcher[Timed[T]]); ok {
		addTimed(b, s.ts, &v)
		return
	}
	s.next.Collect(Timed[T]{Ts: s.ts, V: v})
}

// timedColumns is implemented by the operators of a timed stream that take a batch as two columns, the
// timestamps and the values (ts[i] is vs[i]'s), to the same effect as CollectBatch of the Timed records: a
// timed source hands such an operator chained to it its own slice of values, uncopied. Like CollectBatch,
// CollectColumns neither modifies the slices nor keeps them.
type timedColumns[T any] interface {
	CollectColumns(ts []int64, vs []T)
}

// columnsOf returns c as a timedColumns: c itself, or a fan-out to several that all are; nil when some
// downstream takes only Timed[T] batches.
func columnsOf[T any](c Collector[Timed[T]]) timedColumns[T] {
	switch c := c.(type) {
	case timedColumns[T]:
		return c
	case fanOut[Timed[T]]:
		outs := make(columnsFanOut[T], len(c))
		for i, o := range c {
			tc, ok := o.(timedColumns[T])
			if !ok {
				return nil
			}
			outs[i] = tc
		}
		return outs
	}
	return nil
}

// columnsFanOut hands columns to each of several operators in turn, as fanOut does batches.
type columnsFanOut[T any] []timedColumns[T]

func (f columnsFanOut[T]) CollectColumns(ts []int64, vs []T) {
	for _, o := range f {
		o.CollectColumns(ts, vs)
	}
}

// TimedFlatMapSpec is FlatMapSpec over a timed stream: each output takes its input's timestamp.
type TimedFlatMapSpec[In, Out any] struct {
	Fn func(In, Collector[Out]) error
}

func (s *TimedFlatMapSpec[In, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Timed[Out]](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	b := &batcher[Timed[Out]]{next: out}
	op := &timedFlatMapOp[In, Out]{fn: s.Fn, st: &stamper[Out]{next: b}, batch: b, ctx: ctx}
	return Built{Input: wrapIn[Timed[In]](ctx, op)}, nil
}

// timedFlatMapOp is flatMapOp over a timed stream. It hands the function each record's value straight
// from the batch, not a copy of the timed record first: the values of a source's stream can be large.
type timedFlatMapOp[In, Out any] struct {
	fn    func(In, Collector[Out]) error
	st    *stamper[Out] // the function's collector: stamps with the timestamp of the record in hand
	batch *batcher[Timed[Out]]
	ctx   *Context
}

func (o *timedFlatMapOp[In, Out]) Collect(v Timed[In]) {
	prev := o.ctx.enter()
	o.one(&v)
	o.batch.flush()
	o.ctx.leave(prev)
}

func (o *timedFlatMapOp[In, Out]) CollectBatch(vs []Timed[In]) {
	prev := o.ctx.enter()
	for i := range vs {
		o.one(&vs[i])
	}
	o.batch.flush()
	o.ctx.leave(prev)
}

// CollectColumns implements timedColumns: the records of a timed source's batch, straight from the
// source's slice. Its loop body is one's, written out: through a shared helper q0 ran 1–2 % slower.
func (o *timedFlatMapOp[In, Out]) CollectColumns(ts []int64, vs []In) {
	prev := o.ctx.enter()
	vs = vs[:len(ts)]
	for i := range ts {
		o.st.ts = ts[i]
		if err := o.fn(vs[i], o.st); err != nil {
			o.ctx.fail(err)
		}
	}
	o.batch.flush()
	o.ctx.leave(prev)
}

func (o *timedFlatMapOp[In, Out]) one(t *Timed[In]) {
	o.st.ts = t.Ts
	if err := o.fn(t.V, o.st); err != nil {
		o.ctx.fail(err)
	}
}

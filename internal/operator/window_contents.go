package operator

import (
	"fmt"
	"math"
	"slices"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// windowContents is where a window operator keeps what its windows hold, per key and state window: one
// accumulator (incremental), the records (listing), or the records with their timestamps (evicting). A
// window fires through its contents, which hand the function what it is to see.
type windowContents[T, V any] interface {
	// add adds v, at ts, to state window sw, and says whether sw was empty (incremental contents only;
	// the others always say false, since finding out would cost a read).
	add(sw TimeWindow, v T, ts int64) (bool, error)
	// fire hands the contents of state window sw to emit as window w's; nothing when there are none.
	fire(w, sw TimeWindow) error
	// clear drops the contents of state window sw.
	clear(sw TimeWindow)
	// merge moves the contents of state window from into state window to.
	merge(to, from TimeWindow) error
	// each calls f with every state window of the current key that holds contents.
	each(f func(TimeWindow))
}

// emitFunc hands the function what window w holds.
type emitFunc[V any] func(w TimeWindow, vs []V) error

func windowCodec() (codec.Codec[TimeWindow], error) { return codec.Struct[TimeWindow]() }

// incrementalContents keep a window as one accumulator.
type incrementalContents[T, ACC, V any] struct {
	inc  *Incremental[T, ACC, V]
	acc  state.MapState[TimeWindow, ACC]
	emit emitFunc[V]
	vs   []V // scratch: the one result
}

func newIncrementalContents[T, ACC, V any](b state.Backend, inc *Incremental[T, ACC, V], emit emitFunc[V]) (*incrementalContents[T, ACC, V], error) {
	wc, err := windowCodec()
	if err != nil {
		return nil, err
	}
	acc, err := state.NewMap[TimeWindow, ACC](b, "\x00window/acc", wc, inc.Codec)
	if err != nil {
		return nil, err
	}
	return &incrementalContents[T, ACC, V]{inc: inc, acc: acc, emit: emit}, nil
}

func (c *incrementalContents[T, ACC, V]) add(sw TimeWindow, v T, _ int64) (bool, error) {
	a, ok := c.acc.Get(sw)
	if !ok {
		a = c.inc.Create()
	}
	a, err := c.inc.Add(v, a)
	if err != nil {
		return false, err
	}
	c.acc.Put(sw, a)
	return !ok, nil
}

func (c *incrementalContents[T, ACC, V]) fire(w, sw TimeWindow) error {
	a, ok := c.acc.Get(sw)
	if !ok {
		return nil
	}
	c.vs = append(c.vs[:0], c.inc.Result(a))
	return c.emit(w, c.vs)
}

func (c *incrementalContents[T, ACC, V]) clear(sw TimeWindow) { c.acc.Remove(sw) }

func (c *incrementalContents[T, ACC, V]) merge(to, from TimeWindow) error {
	b, okB := c.acc.Get(from)
	if !okB {
		return nil
	}
	if a, okA := c.acc.Get(to); okA {
		var err error
		if b, err = c.inc.Merge(a, b); err != nil {
			return err
		}
	}
	c.acc.Put(to, b)
	c.acc.Remove(from)
	return nil
}

func (c *incrementalContents[T, ACC, V]) each(f func(TimeWindow)) {
	c.acc.Range(func(w TimeWindow, _ ACC) bool { f(w); return true })
}

// listingContents keep a window's records; the function sees them all (V is T).
type listingContents[T, V any] struct {
	elems state.ListMapState[TimeWindow, T]
	emit  emitFunc[V]
}

func newListingContents[T, V any](b state.Backend, c codec.Codec[T], emit emitFunc[V]) (*listingContents[T, V], error) {
	if _, ok := any([]T(nil)).([]V); !ok {
		return nil, fmt.Errorf("a listing window hands its function its records: V (%T) must be T (%T)", *new(V), *new(T))
	}
	wc, err := windowCodec()
	if err != nil {
		return nil, err
	}
	elems, err := state.NewListMap[TimeWindow, T](b, "\x00window/elems", wc, c)
	if err != nil {
		return nil, err
	}
	return &listingContents[T, V]{elems: elems, emit: emit}, nil
}

func (c *listingContents[T, V]) add(sw TimeWindow, v T, _ int64) (bool, error) {
	c.elems.Append(sw, v)
	return false, nil
}

func (c *listingContents[T, V]) fire(w, sw TimeWindow) error {
	es := c.elems.Get(sw)
	if len(es) == 0 {
		return nil
	}
	return c.emit(w, any(es).([]V))
}

func (c *listingContents[T, V]) clear(sw TimeWindow) { c.elems.Remove(sw) }

func (c *listingContents[T, V]) merge(to, from TimeWindow) error {
	for _, e := range slices.Clone(c.elems.Get(from)) {
		c.elems.Append(to, e)
	}
	c.elems.Remove(from)
	return nil
}

func (c *listingContents[T, V]) each(f func(TimeWindow)) {
	c.elems.Range(func(w TimeWindow, _ []T) bool { f(w); return true })
}

// evictingContents keep a window's records with their timestamps, for its evictor (Flink's
// EvictingWindowOperator): when the window fires, the evictor removes records before the function sees
// them, the function sees the rest (folded by inc, if the window is incremental), and the evictor removes
// records after it; what is left is the window's from then on.
type evictingContents[T, ACC, V any] struct {
	elems   state.ListMapState[TimeWindow, Timed[T]]
	evictor Evictor[T]
	inc     *Incremental[T, ACC, V] // nil: the function sees the records (V is T)
	ctx     EvictorContext
	// ts is the timestamp of the record being added, nil on a stream without event time (whose records
	// have none).
	ts   *int64
	emit emitFunc[V]
	buf  []Timed[T] // scratch
	vals []T        // scratch
	vs   []V        // scratch
}

// evictingState is the state name of evicting contents: its entries are timed records, which a listing
// window's are not.
const evictingState = "\x00window/evicting"

func newEvictingContents[T, ACC, V any](b state.Backend, c codec.Codec[T], ev Evictor[T], inc *Incremental[T, ACC, V],
	ctx EvictorContext, ts *int64, emit emitFunc[V]) (*evictingContents[T, ACC, V], error) {
	if inc == nil {
		if _, ok := any([]T(nil)).([]V); !ok {
			return nil, fmt.Errorf("a listing window hands its function its records: V (%T) must be T (%T)", *new(V), *new(T))
		}
	}
	if c == nil {
		return nil, fmt.Errorf("a window with an evictor keeps its records: it needs their codec")
	}
	wc, err := windowCodec()
	if err != nil {
		return nil, err
	}
	elems, err := state.NewListMap[TimeWindow, Timed[T]](b, evictingState, wc, TimedCodec(c))
	if err != nil {
		return nil, err
	}
	return &evictingContents[T, ACC, V]{elems: elems, evictor: ev, inc: inc, ctx: ctx, ts: ts, emit: emit}, nil
}

func (c *evictingContents[T, ACC, V]) add(sw TimeWindow, v T, _ int64) (bool, error) {
	ts := int64(math.MinInt64) // no timestamp
	if c.ts != nil {
		ts = *c.ts
	}
	c.elems.Append(sw, Timed[T]{Ts: ts, V: v})
	return false, nil
}

func (c *evictingContents[T, ACC, V]) fire(w, sw TimeWindow) error {
	es := c.elems.Get(sw)
	if len(es) == 0 {
		return nil
	}
	n := len(es)
	c.buf = append(c.buf[:0], es...)
	kept := c.evictor.EvictBefore(c.buf, w, c.ctx)
	vals := c.vals[:0]
	for _, x := range kept {
		vals = append(vals, x.V)
	}
	c.vals = vals
	var vs []V
	if c.inc != nil {
		acc := c.inc.Create()
		for _, v := range vals {
			var err error
			if acc, err = c.inc.Add(v, acc); err != nil {
				return err
			}
		}
		c.vs = append(c.vs[:0], c.inc.Result(acc))
		vs = c.vs
	} else {
		vs = any(vals).([]V)
	}
	// The function runs even where the evictor left nothing, as in Flink.
	if err := c.emit(w, vs); err != nil {
		return err
	}
	kept = c.evictor.EvictAfter(kept, w, c.ctx)
	if len(kept) == n {
		return nil // nothing was evicted: the contents stay as they are
	}
	c.elems.Remove(sw)
	for _, x := range kept {
		c.elems.Append(sw, x)
	}
	return nil
}

func (c *evictingContents[T, ACC, V]) clear(sw TimeWindow) { c.elems.Remove(sw) }

func (c *evictingContents[T, ACC, V]) merge(to, from TimeWindow) error {
	for _, e := range slices.Clone(c.elems.Get(from)) {
		c.elems.Append(to, e)
	}
	c.elems.Remove(from)
	return nil
}

func (c *evictingContents[T, ACC, V]) each(f func(TimeWindow)) {
	c.elems.Range(func(w TimeWindow, _ []Timed[T]) bool { f(w); return true })
}

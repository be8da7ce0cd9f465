package operator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/runnel-dev/runnel/codec"
)

// ReadOnlyBroadcastState is the view of the broadcast state that the keyed side of a broadcast process
// function gets: it may read, never write (the copies on every subtask must stay equal).
type ReadOnlyBroadcastState[MK comparable, MV any] interface {
	Get(k MK) (MV, bool)
	Len() int
	// Range calls f for each entry until it returns false, in the order of the keys' encodings (their
	// codec's bytes, compared as bytes.Compare): the same order on every call, on every subtask and in a
	// replay. For string keys of the built-in codec that is string order; the built-in integer codecs are
	// little-endian, so for integer keys it is not numeric order. Range allocates nothing and costs a map
	// lookup per entry: the state keeps its keys sorted as they are put and removed (a new key or a removal
	// costs a binary search and moving the keys after it). Keys put or removed during a Range (from
	// ProcessBroadcastElement) do not change what it visits, beyond skipping a key removed before its turn;
	// the first such change copies the key list once.
	Range(f func(k MK, v MV) bool)
}

// BroadcastState is the broadcast side's writable view. Every subtask gets every broadcast record, so a
// function that updates it alike from each keeps the copies equal.
type BroadcastState[MK comparable, MV any] interface {
	ReadOnlyBroadcastState[MK, MV]
	Put(k MK, v MV)
	Remove(k MK)
}

// BroadcastContext is the context of ProcessBroadcastElement.
type BroadcastContext[K comparable, MK comparable, MV any] interface {
	RuntimeContext
	// State is the subtask's copy of the broadcast state.
	State() BroadcastState[MK, MV]
	// ForEachKey makes each key that has keyed state current in turn and calls f: the keyed state objects
	// declared in Open then read and write that key's state.
	ForEachKey(f func(key K) error) error
}

// KeyedBroadcastContext is the context of ProcessElement: the keyed context and a read-only view of the
// broadcast state.
type KeyedBroadcastContext[K comparable, MK comparable, MV any] interface {
	KeyedContext[K]
	State() ReadOnlyBroadcastState[MK, MV]
}

// KeyedBroadcastProcessFunction processes a keyed stream with a broadcast stream beside it (rules, say):
// ProcessBroadcastElement updates the broadcast state on every subtask, ProcessElement reads it for each
// keyed record.
type KeyedBroadcastProcessFunction[K comparable, T, R any, MK comparable, MV any, Out any] interface {
	Open(ctx KeyedContext[K]) error
	ProcessElement(ctx KeyedBroadcastContext[K, MK, MV], v T, out Collector[Out]) error
	ProcessBroadcastElement(ctx BroadcastContext[K, MK, MV], r R, out Collector[Out]) error
	Close() error
}

// BroadcastSpec runs a KeyedBroadcastProcessFunction: input 0 the keyed stream, input 1 the broadcast
// stream. Timed: the keyed stream has event time (the results too, at the timestamp of the record being
// processed); the broadcast stream may have it or not (RulesTimed), and counts for the watermark only if
// it has.
type BroadcastSpec[K comparable, T, R any, MK comparable, MV any, Out any] struct {
	Key        func(T) K
	KeyCodec   codec.Codec[K]
	MapKey     codec.Codec[MK]
	MapValue   codec.Codec[MV]
	New        func() KeyedBroadcastProcessFunction[K, T, R, MK, MV, Out]
	Timed      bool
	RulesTimed bool
}

// broadcastMagic starts the entry of a broadcast operator: its broadcast state, then its keyed state.
var broadcastMagic = []byte("RNBCAST1")

func (s *BroadcastSpec[K, T, R, MK, MV, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	fn := s.New()
	if fn == nil {
		return Built{}, fmt.Errorf("operator %q: the broadcast process function factory returned nil", ctx.operator)
	}
	kc, built, err := buildKeyed[K](ctx, s.KeyCodec, fn, s.Timed)
	if err != nil {
		return Built{}, err
	}
	bs := &broadcastState[MK, MV]{m: map[MK]MV{}, kc: s.MapKey, fail: ctx.fail}
	op := &broadcastOp[K, T, R, MK, MV, Out]{spec: s, fn: fn, kc: kc, bs: bs, watermark: math.MinInt64}
	op.kctx = keyedBroadcastCtx[K, MK, MV]{keyedContext: kc, bs: bs}
	op.bctx = broadcastCtx[K, MK, MV]{Context: ctx, kc: kc, bs: bs}
	if s.Timed {
		out, err := combine[Timed[Out]](ctx, downstream)
		if err != nil {
			kc.b.Close()
			return Built{}, err
		}
		batch := &batcher[Timed[Out]]{next: out}
		op.stamp = &stamper[Out]{next: batch, ts: math.MinInt64}
		op.out, op.flush = op.stamp, batch.flush
		built.Input = wrapIn[Timed[T]](ctx, collectFunc[Timed[T]](func(v Timed[T]) { op.element(v.V, v.Ts) }, op))
	} else {
		out, err := combine[Out](ctx, downstream)
		if err != nil {
			kc.b.Close()
			return Built{}, err
		}
		batch := &batcher[Out]{next: out}
		op.out, op.flush = batch, batch.flush
		built.Input = wrapIn[T](ctx, collectFunc[T](func(v T) { op.element(v, math.MinInt64) }, op))
	}
	if s.RulesTimed {
		built.Input2 = wrapIn[Timed[R]](ctx, collectFunc[Timed[R]](func(r Timed[R]) { op.rule(r.V, r.Ts) }, op))
	} else {
		built.Input2 = wrapIn[R](ctx, collectFunc[R](func(r R) { op.rule(r, math.MinInt64) }, op))
	}
	keyedSnapshot, keyedRestore, keyedParts := built.Snapshot, built.Restore, built.RestoreParts
	// The broadcast state frames the keyed snapshot: this operator writes its whole state at every
	// checkpoint, also when checkpoints are incremental.
	built.SnapshotIncremental = nil
	built.Snapshot = func(id int64) (func(io.Writer) error, error) {
		bsBytes, err := bs.encode(s.MapValue)
		if err != nil {
			return nil, fmt.Errorf("operator %q: broadcast state: %w", ctx.operator, err)
		}
		w, err := keyedSnapshot(id)
		if err != nil {
			return nil, err
		}
		return func(out io.Writer) error {
			head := append(append([]byte(nil), broadcastMagic...), binary.AppendUvarint(nil, uint64(len(bsBytes)))...)
			if _, err := out.Write(head); err != nil {
				return err
			}
			if _, err := out.Write(bsBytes); err != nil {
				return err
			}
			return w(out)
		}, nil
	}
	split := func(data []byte) ([]byte, []byte, error) {
		if !bytes.HasPrefix(data, broadcastMagic) {
			return nil, nil, fmt.Errorf("operator %q: the state is not a broadcast operator's", ctx.operator)
		}
		rest := data[len(broadcastMagic):]
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return nil, nil, fmt.Errorf("operator %q: broadcast state: bad length", ctx.operator)
		}
		return rest[k : k+int(n)], rest[k+int(n):], nil
	}
	built.Restore = func(data []byte) error {
		b, keyed, err := split(data)
		if err != nil {
			return err
		}
		if err := bs.decode(b, s.MapKey, s.MapValue); err != nil {
			return fmt.Errorf("operator %q: broadcast state: %w", ctx.operator, err)
		}
		return keyedRestore(keyed)
	}
	built.RestoreParts = func(parts [][]byte) error {
		keyed := make([][]byte, len(parts))
		for i, p := range parts {
			b, k, err := split(p)
			if err != nil {
				return err
			}
			// The copies are equal: any old subtask's will do; the first one read is taken.
			if i == 0 {
				if err := bs.decode(b, s.MapKey, s.MapValue); err != nil {
					return fmt.Errorf("operator %q: broadcast state: %w", ctx.operator, err)
				}
			}
			keyed[i] = k
		}
		return keyedParts(keyed)
	}
	built.Watermark = func(ms int64) error {
		op.watermark = max(op.watermark, ms)
		return ctx.EmitWatermark(ms)
	}
	built.RestoreWatermark = func(floor int64) { op.watermark = max(op.watermark, floor) }
	withTTLSweep(&built, kc.b)
	return built, nil
}

type broadcastOp[K comparable, T, R any, MK comparable, MV any, Out any] struct {
	spec      *BroadcastSpec[K, T, R, MK, MV, Out]
	fn        KeyedBroadcastProcessFunction[K, T, R, MK, MV, Out]
	kc        *keyedContext[K]
	bs        *broadcastState[MK, MV]
	kctx      keyedBroadcastCtx[K, MK, MV]
	bctx      broadcastCtx[K, MK, MV]
	out       Collector[Out]
	stamp     *stamper[Out]
	flush     func()
	watermark int64
}

func (o *broadcastOp[K, T, R, MK, MV, Out]) element(v T, ts int64) {
	o.kc.b.SetCurrentKey(o.spec.Key(v))
	o.kc.ts = ts
	if o.stamp != nil {
		o.stamp.ts = ts
	}
	if err := o.fn.ProcessElement(o.kctx, v, o.out); err != nil {
		o.kc.fail(err)
	}
}

func (o *broadcastOp[K, T, R, MK, MV, Out]) rule(r R, ts int64) {
	if o.stamp != nil {
		// A rule has no timestamp on a broadcast stream without event time: what it emits takes the
		// operator's watermark.
		if ts == math.MinInt64 {
			ts = o.watermark
		}
		o.stamp.ts = ts
	}
	if err := o.fn.ProcessBroadcastElement(o.bctx, r, o.out); err != nil {
		o.kc.fail(err)
	}
}

// collectFunc adapts a per-record function of a broadcast operator to a BatchCollector that brackets it
// for panics and flushes the operator's output after each call.
func collectFunc[V any](f func(V), o bracket) BatchCollector[V] {
	return &funcCollector[V]{f: f, o: o}
}

// bracket is what funcCollector needs of its operator.
type bracket interface {
	begin() int32
	end(prev int32)
}

type funcCollector[V any] struct {
	f func(V)
	o bracket
}

func (c *funcCollector[V]) Collect(v V) {
	prev := c.o.begin()
	c.f(v)
	c.o.end(prev)
}

func (c *funcCollector[V]) CollectBatch(vs []V) {
	prev := c.o.begin()
	for _, v := range vs {
		c.f(v)
	}
	c.o.end(prev)
}

func (o *broadcastOp[K, T, R, MK, MV, Out]) begin() int32 { return o.kc.enter() }

func (o *broadcastOp[K, T, R, MK, MV, Out]) end(prev int32) {
	o.flush()
	o.kc.leave(prev)
}

type keyedBroadcastCtx[K comparable, MK comparable, MV any] struct {
	*keyedContext[K]
	bs *broadcastState[MK, MV]
}

func (c keyedBroadcastCtx[K, MK, MV]) State() ReadOnlyBroadcastState[MK, MV] {
	return readOnly[MK, MV]{c.bs}
}

type broadcastCtx[K comparable, MK comparable, MV any] struct {
	*Context
	kc *keyedContext[K]
	bs *broadcastState[MK, MV]
}

func (c broadcastCtx[K, MK, MV]) State() BroadcastState[MK, MV] { return c.bs }
func (c broadcastCtx[K, MK, MV]) ForEachKey(f func(K) error) error {
	return c.kc.b.ForEachKey(f)
}
func (c broadcastCtx[K, MK, MV]) Timestamp() (int64, bool) { return c.kc.ts, c.kc.timed }

// readOnly hides the writing methods of the broadcast state (a type assertion cannot get them back).
type readOnly[MK comparable, MV any] struct{ s *broadcastState[MK, MV] }

func (r readOnly[MK, MV]) Get(k MK) (MV, bool)           { return r.s.Get(k) }
func (r readOnly[MK, MV]) Len() int                      { return r.s.Len() }
func (r readOnly[MK, MV]) Range(f func(k MK, v MV) bool) { r.s.Range(f) }

// broadcastState is a subtask's copy of the broadcast state: a map in memory, bounded by what the function
// puts in it, and its keys sorted by their encodings, the order of Range and of the snapshot.
type broadcastState[MK comparable, MV any] struct {
	m     map[MK]MV
	order []orderedKey[MK] // every key of m once, sorted by enc
	kc    codec.Codec[MK]
	fail  func(error)
	enc   []byte // scratch: the encoding of a key being removed
	// ranging says a Range iterates order: a change to the key list copies it first, so that the Range
	// goes on over the keys it began with. gen counts those copies.
	ranging bool
	gen     uint64
}

// orderedKey is a key of the broadcast state with its encoding.
type orderedKey[MK any] struct {
	enc []byte
	k   MK
}

func (s *broadcastState[MK, MV]) Get(k MK) (MV, bool) { v, ok := s.m[k]; return v, ok }
func (s *broadcastState[MK, MV]) Len() int            { return len(s.m) }

// Put sets k's value; a new key is encoded once and takes its place in the key order.
func (s *broadcastState[MK, MV]) Put(k MK, v MV) {
	if _, ok := s.m[k]; ok {
		s.m[k] = v
		return
	}
	enc, err := s.kc.Append(nil, k)
	if err != nil {
		s.fail(fmt.Errorf("broadcast state: encode key %v: %w", k, err))
		return
	}
	i, _ := s.search(enc)
	s.writable()
	s.order = slices.Insert(s.order, i, orderedKey[MK]{enc: enc, k: k})
	s.m[k] = v
}

// Remove deletes k and its place in the key order.
func (s *broadcastState[MK, MV]) Remove(k MK) {
	if _, ok := s.m[k]; !ok {
		return
	}
	delete(s.m, k)
	i := -1
	if enc, err := s.kc.Append(s.enc[:0], k); err == nil {
		s.enc = enc
		for j, _ := s.search(enc); j < len(s.order) && bytes.Equal(s.order[j].enc, enc); j++ {
			if s.order[j].k == k {
				i = j
				break
			}
		}
	}
	if i < 0 { // an encoding that is not the key's own (a codec that is not deterministic): look it up
		i = slices.IndexFunc(s.order, func(e orderedKey[MK]) bool { return e.k == k })
	}
	s.writable()
	s.order = slices.Delete(s.order, i, i+1)
}

// search returns the first position in the key order whose encoding is not below enc.
func (s *broadcastState[MK, MV]) search(enc []byte) (int, bool) {
	return slices.BinarySearchFunc(s.order, enc, func(e orderedKey[MK], t []byte) int { return bytes.Compare(e.enc, t) })
}

// writable copies the key list before a change while a Range iterates it.
func (s *broadcastState[MK, MV]) writable() {
	if s.ranging {
		s.order = slices.Clone(s.order)
		s.ranging = false
		s.gen++
	}
}

func (s *broadcastState[MK, MV]) Range(f func(k MK, v MV) bool) {
	order, gen, was := s.order, s.gen, s.ranging
	s.ranging = true
	for _, e := range order {
		v, ok := s.m[e.k]
		if !ok {
			continue // removed during this Range
		}
		if !f(e.k, v) {
			break
		}
	}
	if s.gen == gen {
		s.ranging = was
	}
}

// encode writes the entries in the key order, so that equal copies write equal bytes.
func (s *broadcastState[MK, MV]) encode(vc codec.Codec[MV]) ([]byte, error) {
	out := binary.AppendUvarint(nil, uint64(len(s.order)))
	var vb []byte
	for _, e := range s.order {
		var err error
		if vb, err = vc.Append(vb[:0], s.m[e.k]); err != nil {
			return nil, err
		}
		out = binary.AppendUvarint(out, uint64(len(e.enc)))
		out = append(out, e.enc...)
		out = binary.AppendUvarint(out, uint64(len(vb)))
		out = append(out, vb...)
	}
	return out, nil
}

func (s *broadcastState[MK, MV]) decode(b []byte, kc codec.Codec[MK], vc codec.Codec[MV]) error {
	next := func() ([]byte, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, errors.New("truncated entry")
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, nil
	}
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(b)) {
		return errors.New("bad entry count")
	}
	b = b[k:]
	m := make(map[MK]MV, count)
	order := make([]orderedKey[MK], 0, count)
	for range count {
		kb, err := next()
		if err != nil {
			return err
		}
		vb, err := next()
		if err != nil {
			return err
		}
		var key MK
		var val MV
		if err := kc.Decode(kb, &key); err != nil {
			return err
		}
		if err := vc.Decode(vb, &val); err != nil {
			return err
		}
		if _, dup := m[key]; !dup {
			order = append(order, orderedKey[MK]{enc: bytes.Clone(kb), k: key})
		}
		m[key] = val
	}
	if len(b) != 0 {
		return fmt.Errorf("%d bytes after the last entry", len(b))
	}
	// Snapshots are written in key order; sorting keeps the order right whatever wrote one.
	byEnc := func(x, y orderedKey[MK]) int { return bytes.Compare(x.enc, y.enc) }
	if !slices.IsSortedFunc(order, byEnc) {
		slices.SortStableFunc(order, byEnc)
	}
	s.m, s.order, s.ranging = m, order, false
	return nil
}

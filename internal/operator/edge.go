package operator

import (
	"fmt"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/task"
)

// Edge is the non-generic face of EdgeSpec: it is the Payload of a graph.StreamEdge.
type Edge interface {
	// NewWriter makes the Collector[T] (typed as any) that serializes records into the partition p of
	// producer subtask `producer` over edge e.
	NewWriter(ctx *Context, p *network.ResultPartition, e *graph.JobEdge, producer int) (any, error)
	// NewReader makes a function that decodes one record and hands it to target, a Collector[T].
	NewReader(target any) (func(rec []byte) error, error)
}

// EdgeSpec carries the type-specific parts of an edge: the codec, and for hash edges the key hash.
type EdgeSpec[T any] struct {
	Codec codec.Codec[T]
	// Hash returns the hash of the record's key; scratch is reusable space for encoding the key, returned
	// (possibly grown) for the next call. Required for hash edges.
	Hash func(v T, scratch []byte) (uint64, []byte)
}

// NewWriter implements Edge.
func (s *EdgeSpec[T]) NewWriter(ctx *Context, p *network.ResultPartition, e *graph.JobEdge, producer int) (any, error) {
	if s.Codec == nil {
		return nil, fmt.Errorf("edge %s -> %s has no codec", e.Source.Name, e.Target.Name)
	}
	w := &writer[T]{
		ctx: ctx, codec: s.Codec, part: p, pattern: e.Pattern, n: p.NumSubpartitions(),
		flushEach: ctx.runtime().FlushEveryRecord, c: ctx.counters(),
		maxP: e.Target.MaxParallelism, downP: e.Target.Parallelism, hash: s.Hash,
	}
	w.rr = producer % w.n
	if e.Pattern == graph.Hash {
		if s.Hash == nil {
			return nil, fmt.Errorf("hash edge %s -> %s has no key hash", e.Source.Name, e.Target.Name)
		}
		if w.n != w.downP {
			return nil, fmt.Errorf("hash edge %s -> %s: %d subpartitions for %d consumers", e.Source.Name, e.Target.Name, w.n, w.downP)
		}
	}
	return w, nil
}

// NewReader implements Edge.
func (s *EdgeSpec[T]) NewReader(target any) (func([]byte) error, error) {
	t, ok := target.(Collector[T])
	if !ok {
		return nil, fmt.Errorf("edge reader: target %T does not accept %T", target, *new(T))
	}
	r := &reader[T]{codec: s.Codec, target: t}
	return r.process, nil
}

type writer[T any] struct {
	ctx       *Context
	codec     codec.Codec[T]
	part      *network.ResultPartition
	pattern   graph.Pattern
	n, rr     int
	maxP      int
	downP     int
	hash      func(T, []byte) (uint64, []byte)
	scratch   []byte
	keyBuf    []byte
	flushEach bool
	c         *task.Counters
}

func (w *writer[T]) Collect(v T) {
	buf, err := w.codec.Append(w.scratch[:0], v)
	if err != nil {
		w.ctx.failf("serialize record for %s: %w", w.part.ID(), err)
	}
	w.scratch = buf
	switch w.pattern {
	case graph.Broadcast:
		for i := 0; i < w.n; i++ {
			w.emit(i, buf)
		}
		return
	case graph.Hash:
		var h uint64
		h, w.keyBuf = w.hash(v, w.keyBuf[:0])
		w.emit(graph.OperatorIndexOf(graph.KeyGroupOf(h, w.maxP), w.maxP, w.downP), buf)
	case graph.Forward:
		w.emit(0, buf)
	default: // rebalance, rescale: round-robin over this producer's subpartitions
		ch := w.rr
		if w.rr++; w.rr == w.n {
			w.rr = 0
		}
		w.emit(ch, buf)
	}
}

func (w *writer[T]) emit(ch int, buf []byte) {
	if err := w.part.EmitRecord(ch, buf); err != nil {
		task.Abort(err)
	}
	w.c.Out++
	if w.flushEach {
		w.part.Flush(ch)
	}
}

type reader[T any] struct {
	codec  codec.Codec[T]
	target Collector[T]
	v      T
}

func (r *reader[T]) process(rec []byte) error {
	if err := r.codec.Decode(rec, &r.v); err != nil {
		return fmt.Errorf("decode record: %w", err)
	}
	r.target.Collect(r.v)
	return nil
}

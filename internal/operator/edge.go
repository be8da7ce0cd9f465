package operator

import (
	"fmt"
	"unsafe"

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
	// NewReader makes a reader that decodes records and hands them to target, a Collector[T].
	NewReader(target any) (Reader, error)
	// IsTimed reports whether the edge carries a stream with event time: its records are Timed values and
	// its channels carry watermarks.
	IsTimed() bool
}

// EdgeSpec carries the type-specific parts of an edge: the codec, and for hash edges the key hash.
type EdgeSpec[T any] struct {
	Codec codec.Codec[T]
	// Hash returns the hash of the record's key; scratch is reusable space for encoding the key, returned
	// (possibly grown) for the next call. Required for hash edges.
	Hash func(v *T, scratch []byte) (uint64, []byte)
	// Timed marks the edge of a stream with event time (T is then a Timed value).
	Timed bool
}

// IsTimed implements Edge.
func (s *EdgeSpec[T]) IsTimed() bool { return s.Timed }

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
	if isFlat(s.Codec) {
		w.flat = int(unsafe.Sizeof(*new(T)))
	}
	w.rr = producer % w.n
	if e.Pattern == graph.Hash {
		// Key group -> subpartition, computed once: the per-record path then costs one mask or modulo.
		w.route = make([]int32, w.maxP)
		for kg := range w.route {
			w.route[kg] = int32(graph.OperatorIndexOf(kg, w.maxP, w.downP))
		}
		if w.maxP&(w.maxP-1) == 0 {
			w.mask = uint64(w.maxP - 1)
		}
		if s.Hash == nil {
			return nil, fmt.Errorf("hash edge %s -> %s has no key hash", e.Source.Name, e.Target.Name)
		}
		if w.n != w.downP {
			return nil, fmt.Errorf("hash edge %s -> %s: %d subpartitions for %d consumers", e.Source.Name, e.Target.Name, w.n, w.downP)
		}
	}
	return w, nil
}

// CollectBatch implements BatchCollector. Each record is read in place: a record is copied into the
// buffer (or passed to the codec and the key's function), not first onto the stack per call.
func (w *writer[T]) CollectBatch(vs []T) {
	for i := range vs {
		w.collect(&vs[i])
	}
}

// Reader decodes the records of one network input.
type Reader interface {
	// ProcessBuffer decodes every record dec yields from its current buffer and hands it on; it returns
	// the number of records processed.
	ProcessBuffer(dec *network.RecordDecoder) (int, error)
}

// NewReader implements Edge.
func (s *EdgeSpec[T]) NewReader(target any) (Reader, error) {
	t, ok := target.(Collector[T])
	if !ok {
		return nil, fmt.Errorf("edge reader: target %T does not accept %T", target, *new(T))
	}
	r := &reader[T]{codec: s.Codec, target: asBatch(t), batch: make([]T, maxBatch)}
	if isFlat(s.Codec) {
		r.flat = int(unsafe.Sizeof(*new(T)))
	}
	return r, nil
}

type writer[T any] struct {
	ctx       *Context
	codec     codec.Codec[T]
	part      *network.ResultPartition
	pattern   graph.Pattern
	n, rr     int
	maxP      int
	downP     int
	hash      func(*T, []byte) (uint64, []byte)
	route     []int32 // key group -> subpartition
	mask      uint64  // maxP-1 when maxP is a power of two, else 0
	scratch   []byte
	keyBuf    []byte
	maxLen    int // the longest encoded record so far
	flat      int // the size of T when the codec's encoding is T's memory (codec.IsMemoryCopy), else 0
	flushEach bool
	c         *task.Counters
	one       T // the record Collect hands on
}

// Collect implements Collector. The record goes through a field of the writer, not its own address: a
// pointer to the parameter, passed on to the key's hash function, would move every record to the heap.
func (w *writer[T]) Collect(v T) {
	w.one = v
	w.collect(&w.one)
}

func (w *writer[T]) collect(v *T) {
	var ch int
	switch w.pattern {
	case graph.Broadcast:
		buf := w.encode(v)
		for i := 0; i < w.n; i++ {
			w.emitEncoded(i, buf)
		}
		return
	case graph.Hash:
		var h uint64
		h, w.keyBuf = w.hash(v, w.keyBuf[:0])
		var kg uint64
		if w.mask != 0 {
			kg = h & w.mask // equal to graph.KeyGroupOf for a power-of-two max parallelism
		} else {
			kg = uint64(graph.KeyGroupOf(h, w.maxP))
		}
		ch = int(w.route[kg])
	case graph.Forward:
	default: // rebalance, rescale: round-robin over this producer's subpartitions
		ch = w.rr
		if w.rr++; w.rr == w.n {
			w.rr = 0
		}
	}
	if w.flat > 0 {
		// The record is the value's memory: one typed store into the buffer.
		if dst := w.part.RecordTarget(ch, w.flat); dst != nil {
			n := len(dst)
			dst = dst[:n+w.flat]
			*(*T)(unsafe.Pointer(&dst[n])) = *v
			if w.part.CommitRecord(ch, dst) {
				w.counted(ch)
				return
			}
		}
	}
	// Encode straight into the channel's buffer when it surely has room for a record as long as the
	// longest so far; the copy through scratch is for the first record, buffer ends and longer records.
	if dst := w.part.RecordTarget(ch, w.maxLen); dst != nil && w.maxLen > 0 {
		out, err := w.codec.Append(dst, *v)
		if err != nil {
			w.ctx.failf("serialize record for %s: %w", w.part.ID(), err)
		}
		if w.part.CommitRecord(ch, out) {
			w.counted(ch)
			return
		}
		// The record outgrew the buffer (the encoder then moved it to new memory) or the size limit.
		rec := out[len(dst):]
		w.maxLen = len(rec)
		w.scratch = append(w.scratch[:0], rec...)
		w.emitEncoded(ch, w.scratch)
		return
	}
	w.emitEncoded(ch, w.encode(v))
}

// encode serializes v into the writer's scratch space.
func (w *writer[T]) encode(v *T) []byte {
	buf, err := w.codec.Append(w.scratch[:0], *v)
	if err != nil {
		w.ctx.failf("serialize record for %s: %w", w.part.ID(), err)
	}
	w.scratch = buf
	w.maxLen = max(w.maxLen, len(buf))
	return buf
}

// emitWatermark sends an advanced watermark to every consumer subtask, whatever the edge's pattern.
func (w *writer[T]) emitWatermark(ms int64) error { return w.part.BroadcastWatermark(ms) }

// emitWatermarkStatus tells every consumer subtask that this producer went idle or is active again.
func (w *writer[T]) emitWatermarkStatus(idle bool) error {
	return w.part.BroadcastWatermarkStatus(idle)
}

func (w *writer[T]) emitEncoded(ch int, buf []byte) {
	if err := w.part.EmitRecord(ch, buf); err != nil {
		task.Abort(err)
	}
	w.counted(ch)
}

func (w *writer[T]) counted(ch int) {
	w.c.Out++
	if w.flushEach {
		w.part.Flush(ch)
	}
}

type reader[T any] struct {
	codec  codec.Codec[T]
	target BatchCollector[T]
	batch  []T // maxBatch records, decoded into in place
	flat   int // the size of T when the codec's encoding is T's memory (codec.IsMemoryCopy), else 0
}

// ProcessBuffer decodes the buffer's records in batches and hands each batch on; the records decoded before
// an error are handed on first. It stops after a batch when the decoder is paused, leaving the rest of the
// buffer in it.
func (r *reader[T]) ProcessBuffer(dec *network.RecordDecoder) (int, error) {
	n := 0
	for {
		b := r.batch
		k := 0
		var err error
		for k < len(b) {
			rec, e := dec.Next()
			if e != nil {
				err = e
				break
			}
			if rec == nil {
				break
			}
			if r.flat > 0 && len(rec) == r.flat {
				b[k] = *(*T)(unsafe.Pointer(&rec[0]))
			} else if e := r.codec.Decode(rec, &b[k]); e != nil {
				err = fmt.Errorf("decode record %d: %w", dec.NextSeq()-1, e)
				break
			}
			k++
		}
		if k > 0 {
			r.target.CollectBatch(b[:k])
			n += k
		}
		if err != nil || k < len(b) || dec.Paused() {
			return n, err
		}
	}
}

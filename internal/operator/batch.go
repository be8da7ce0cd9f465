package operator

// BatchCollector is a Collector that also takes a run of records in one call. Every operator of a chain
// implements it, so that a batch (the records of one network buffer, or of one source poll) crosses each
// operator boundary with one interface call instead of one per record; the user's functions still see one
// record at a time. CollectBatch(vs) must have the effect of Collect on each element in order, and must
// neither modify vs nor keep it after returning.
type BatchCollector[T any] interface {
	Collector[T]
	CollectBatch(vs []T)
}

// maxBatch bounds the batches the chain hands on: large enough to amortize the calls, small enough that a
// batch of each operator stays in the L1 cache.
const maxBatch = 256

// asBatch returns c as a BatchCollector, wrapping a collector that only takes single records.
func asBatch[T any](c Collector[T]) BatchCollector[T] {
	if b, ok := c.(BatchCollector[T]); ok {
		return b
	}
	return collectEach[T]{c}
}

type collectEach[T any] struct{ Collector[T] }

func (c collectEach[T]) CollectBatch(vs []T) {
	for _, v := range vs {
		c.Collect(v)
	}
}

// batcher gathers the records a source reader, a flat map or a process function emits one by one into
// batches for the chain (at most maxBatch; its owner flushes the rest when its call returns).
type batcher[T any] struct {
	buf  []T
	next BatchCollector[T]
}

func (b *batcher[T]) Collect(v T) {
	b.buf = append(b.buf, v)
	if len(b.buf) == maxBatch {
		b.flush()
	}
}

// addTimed gathers Timed{ts, *v} into b like Collect, writing the record once, in place: not built on the
// stack and passed by value first, which for a large record costs more than the rest of its way.
func addTimed[T any](b *batcher[Timed[T]], ts int64, v *T) {
	n := len(b.buf)
	if n < cap(b.buf) {
		b.buf = b.buf[:n+1]
	} else {
		b.buf = append(b.buf, Timed[T]{})
	}
	e := &b.buf[n]
	e.Ts, e.V = ts, *v
	if n+1 == maxBatch {
		b.flush()
	}
}

// CollectBatch hands vs on after what was gathered before it.
func (b *batcher[T]) CollectBatch(vs []T) {
	b.flush()
	b.next.CollectBatch(vs)
}

// flush hands on what was gathered; the source driver calls it when a poll returns.
func (b *batcher[T]) flush() {
	if len(b.buf) > 0 {
		b.next.CollectBatch(b.buf)
		b.buf = b.buf[:0]
	}
}

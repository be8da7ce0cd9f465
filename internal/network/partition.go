package network

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/runnel-dev/runnel/internal/ident"
)

// DefaultMaxRecordSize is the default limit on one serialized record.
const DefaultMaxRecordSize = 16 << 20

// PartitionOptions configure a result partition.
type PartitionOptions struct {
	// Subpartitions is the number of consumer subtasks fed by this partition.
	Subpartitions int
	// Reconnectable partitions (PIPELINED_APPROXIMATE) accept a newer consumer attempt after the previous
	// reader went away, and drop data while no reader is attached instead of blocking the producer.
	Reconnectable bool
	// MaxRecordSize bounds one serialized record in bytes; 0 means DefaultMaxRecordSize.
	MaxRecordSize int
	// Blocking partitions (BLOCKING, Flink's batch exchange) write every sealed buffer to a spill file per
	// subpartition and recycle it at once, so the producer never waits for a consumer. They become
	// consumable when the producer has finished; each subpartition can then be read from the start any
	// number of times, by successive consumer attempts (a newer attempt replaces the view of an older one).
	// They are not released when consumed, only by their owner, which deletes the spill files. Flush is a
	// no-op for them: nothing can be read before Finish. Mutually exclusive with Reconnectable.
	Blocking bool
	// SpillDir is the directory of a blocking partition's spill files; "" means os.TempDir().
	SpillDir string
	// Log, for a reconnectable partition, keeps an in-flight log per subpartition (exactly-once local
	// recovery, docs/taskfailover.md §2) in memory lent by this budget: a copy of every buffer since the
	// barrier of the last checkpoint the producer was told completed (TruncateLog). A reader then loses
	// nothing when it goes away: while none is attached the log keeps what comes, and a newer attempt of
	// the consumer reads again from the barrier of the checkpoint it restored (CreateViewFrom).
	Log *LogBudget
	// LogFrom names the checkpoint a logged partition's producer restored (0: none): the log starts at its
	// barrier, so that a consumer restored from it reads from the start of this partition.
	LogFrom int64
}

// ResultPartition is the output of one producer attempt for one intermediate result. The writing methods
// (EmitRecord, BroadcastEvent, Flush, Finish, Close) belong to the producer's goroutine and must not be called
// concurrently; views are read from other goroutines.
type ResultPartition struct {
	id   ident.PartitionID
	opts PartitionOptions
	// bufSize is the size of the partition's buffers, header included: fixed for its life, so that a reader
	// checks it without touching pool, which a takeover replaces.
	bufSize int
	pool    *BufferPool
	cancel  <-chan struct{}
	subs    []*Subpartition

	// producer-owned
	current []*Buffer
	nextSeq []uint64
	// streamSeq and streamTail say, per subpartition, where the stream its buffers handed on so far ends:
	// streamSeq is the first record that no handed-on buffer starts, streamTail the bytes of the record
	// before it that are still to come (0: that record is complete). A takeover continues the stream there.
	streamSeq  []uint64
	streamTail []int
	// streamEnded marks a subpartition whose stream ends with its end of partition: a new attempt after a
	// takeover regenerates all of it, and its own end of partition is not sent again.
	streamEnded []bool
	// After a takeover, the records a new attempt regenerates that the stream holds already are discarded
	// (docs/taskfailover.md §5): records before skipUntil, except that of a record cut at the stream's end
	// (skipTail > 0) the part still to come is written. regenerating counts the subpartitions still doing
	// so (the per-record path tests it once); discarded counts what each dropped.
	skipUntil    []uint64
	skipTail     []int
	skipEnded    []bool // the stream taken over ends with its end of partition (streamEnded)
	regenerating int
	discarded    []uint64

	unconsumed atomic.Int32
	// unfinishedSpills counts the subpartitions of a blocking partition whose end-of-partition is not on
	// disk yet; the partition is consumable at zero.
	unfinishedSpills atomic.Int32
	onConsumed       func(*ResultPartition)
	releaseMu        sync.Mutex
	released         bool
	// flushRequested is set when a reader reconnects to a reconnectable subpartition; the producer takes
	// it between batches (TakeFlushRequest) and flushes.
	flushRequested atomic.Bool
	// failed is closed when a subpartition failed because its consumer is gone (View.Fail); failure,
	// written before, says why. From then on the producer's writes return failure: they are checked once
	// per buffer, never per record.
	failed   chan struct{}
	failure  error
	failOnce sync.Once
}

// fail makes the producer's writes return err from now on; the first failure stays.
func (p *ResultPartition) fail(err error) {
	p.failOnce.Do(func() {
		p.failure = err
		close(p.failed)
	})
}

// Err returns why the partition failed (a *ConsumerGoneError), or nil.
func (p *ResultPartition) Err() error {
	select {
	case <-p.failed:
		return p.failure
	default:
		return nil
	}
}

// TakeFlushRequest reports, once, whether a reader reconnected since the last call, in which case the
// producer should flush its partly filled buffers now. Producer goroutine only; one atomic load.
func (p *ResultPartition) TakeFlushRequest() bool {
	return p.flushRequested.Load() && p.flushRequested.Swap(false)
}

// NewResultPartition makes a partition that takes its buffers from pool; blocking buffer requests abort when
// cancel is closed.
func NewResultPartition(id ident.PartitionID, opts PartitionOptions, pool *BufferPool, cancel <-chan struct{}) (*ResultPartition, error) {
	if opts.Subpartitions < 1 {
		return nil, fmt.Errorf("result partition %s: needs at least one subpartition, got %d", id, opts.Subpartitions)
	}
	if opts.MaxRecordSize == 0 {
		opts.MaxRecordSize = DefaultMaxRecordSize
	}
	if opts.MaxRecordSize < 0 {
		return nil, fmt.Errorf("result partition %s: negative max record size %d", id, opts.MaxRecordSize)
	}
	if opts.Log != nil && !opts.Reconnectable {
		return nil, fmt.Errorf("result partition %s: PartitionOptions.Log needs Reconnectable (an in-flight log serves newer attempts of the consumer)", id)
	}
	if opts.Blocking {
		if opts.Reconnectable {
			return nil, fmt.Errorf("result partition %s: PartitionOptions.Blocking and Reconnectable are mutually exclusive (a blocking partition is read after its producer finished, a reconnectable one while it runs); set at most one", id)
		}
		if opts.SpillDir == "" {
			opts.SpillDir = os.TempDir()
		}
		fi, err := os.Stat(opts.SpillDir)
		if err != nil {
			return nil, fmt.Errorf("result partition %s: PartitionOptions.SpillDir: %w", id, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("result partition %s: PartitionOptions.SpillDir %s is not a directory", id, opts.SpillDir)
		}
	}
	p := &ResultPartition{
		id: id, opts: opts, pool: pool, cancel: cancel, bufSize: DefaultBufferSize,
		subs:      make([]*Subpartition, opts.Subpartitions),
		current:   make([]*Buffer, opts.Subpartitions),
		nextSeq:   make([]uint64, opts.Subpartitions),
		streamSeq: make([]uint64, opts.Subpartitions), streamTail: make([]int, opts.Subpartitions),
		streamEnded: make([]bool, opts.Subpartitions),
		failed:      make(chan struct{}),
	}
	if pool != nil {
		p.bufSize = pool.Size()
	}
	for i := range p.subs {
		p.subs[i] = &Subpartition{partition: p, index: i}
		if opts.Log != nil {
			p.subs[i].log = newInflightLog(opts.Log, &p.subs[i].mu)
			p.subs[i].log.marks[0].checkpoint = opts.LogFrom
		}
		if opts.Blocking {
			p.subs[i].spill = &spillWriter{}
		}
	}
	p.unconsumed.Store(int32(opts.Subpartitions))
	if opts.Blocking {
		p.unfinishedSpills.Store(int32(opts.Subpartitions))
	}
	return p, nil
}

// ID returns the partition's identity.
func (p *ResultPartition) ID() ident.PartitionID { return p.id }

// NumSubpartitions returns the number of subpartitions.
func (p *ResultPartition) NumSubpartitions() int { return len(p.subs) }

// Subpartition returns subpartition i.
func (p *ResultPartition) Subpartition(i int) *Subpartition { return p.subs[i] }

// Reconnectable reports whether consumers may reconnect (PIPELINED_APPROXIMATE).
func (p *ResultPartition) Reconnectable() bool { return p.opts.Reconnectable }

// Blocking reports whether the partition is spilled to disk and read after its producer finished (BLOCKING).
func (p *ResultPartition) Blocking() bool { return p.opts.Blocking }

// Consumable reports whether a consumer can attach now: always for in-memory partitions; for a blocking one,
// once its producer has written every subpartition's end-of-partition to disk.
func (p *ResultPartition) Consumable() bool {
	return !p.opts.Blocking || p.unfinishedSpills.Load() == 0
}

// bufferSize returns the size of the partition's buffers, header included.
func (p *ResultPartition) bufferSize() int { return p.bufSize }

// RecordsWritten returns the number of records emitted into the partition (all subpartitions). Producer
// goroutine only: the per-record path keeps no shared counters.
func (p *ResultPartition) RecordsWritten() uint64 {
	var n uint64
	for _, s := range p.nextSeq {
		n += s
	}
	return n
}

// NextSequence returns the sequence number the next record on subpartition i will get. Producer goroutine
// only.
func (p *ResultPartition) NextSequence(i int) uint64 { return p.nextSeq[i] }

// Takeover hands the partition to a new attempt of its producer under task failover (docs/taskfailover.md
// §1, §5): the new attempt restored checkpoint id and regenerates, record for record, what came after its
// barrier. The stream every subpartition has handed on stays as it is, in the in-flight log and in the
// queue of a reader that has not read it yet: readers, and consumers that replay from the log, see the
// failed attempt's very buffers. The next record numbers go back to those at the barrier; what the failed
// attempt had not sealed is dropped; and the new attempt's records that the stream holds already are
// discarded here, except the part still to come of a record the stream's last buffer cut, which is written
// as its continuation (Regenerating, Discarded). Its consumers see one stream that goes on, and drop
// nothing. The new attempt writes into pool, and its writes abort when cancel closes.
//
// Call it from the new attempt before it writes, once the failed attempt's goroutine has ended. It fails,
// changing nothing, when a subpartition has no log, no complete log back to the barrier of id, or an end of
// partition a reader already took.
func (p *ResultPartition) Takeover(pool *BufferPool, cancel <-chan struct{}, id int64) error {
	if p.opts.Log == nil {
		return fmt.Errorf("result partition %s: takeover needs an in-flight log (PartitionOptions.Log)", p.id)
	}
	if err := p.checkTakeoverPool(pool); err != nil {
		return err
	}
	marks := make([]logMark, len(p.subs))
	for i, s := range p.subs {
		s.mu.Lock()
		m, _, ok := s.log.markOf(id)
		released, consumed := s.released, s.consumed
		s.mu.Unlock()
		switch {
		case released:
			return fmt.Errorf("result partition %s: takeover: subpartition %d: %w", p.id, i, ErrPartitionReleased)
		case !ok:
			return fmt.Errorf("result partition %s: takeover from checkpoint %d: subpartition %d: %w (no complete log from its barrier)", p.id, id, i, ErrLogIncomplete)
		case consumed:
			return fmt.Errorf("result partition %s: takeover from checkpoint %d: subpartition %d's end of partition was read already", p.id, id, i)
		}
		marks[i] = m
	}
	if p.skipUntil == nil {
		p.skipUntil, p.skipTail, p.discarded = make([]uint64, len(p.subs)), make([]int, len(p.subs)), make([]uint64, len(p.subs))
		p.skipEnded = make([]bool, len(p.subs))
	}
	p.regenerating = 0
	for i := range p.subs {
		if b := p.current[i]; b != nil {
			p.current[i] = nil
			b.Recycle()
		}
		p.nextSeq[i] = marks[i].seq
		p.skipUntil[i], p.skipTail[i], p.discarded[i] = p.streamSeq[i], p.streamTail[i], 0
		p.skipEnded[i] = p.streamEnded[i]
		if p.nextSeq[i] < p.skipUntil[i] {
			p.regenerating++
		}
	}
	p.pool, p.cancel = pool, cancel
	p.flushRequested.Store(false)
	return nil
}

// checkTakeoverPool refuses a new attempt's pool of other buffers than the partition's: its readers
// checked their buffers against the partition's size when they connected.
func (p *ResultPartition) checkTakeoverPool(pool *BufferPool) error {
	if pool == nil || pool.Size() != p.bufSize {
		size := 0
		if pool != nil {
			size = pool.Size()
		}
		return fmt.Errorf("result partition %s: takeover with buffers of %d bytes, the partition's are %d bytes", p.id, size, p.bufSize)
	}
	return nil
}

// SetNextSequence makes the next record of subpartition sub carry sequence number seq: a restored producer
// under task failover numbers its output on from the position its checkpoint recorded, so that its
// regenerated records carry the numbers they had. Producer goroutine only, before anything is written to sub.
func (p *ResultPartition) SetNextSequence(sub int, seq uint64) error {
	if sub < 0 || sub >= len(p.subs) {
		return fmt.Errorf("result partition %s: no subpartition %d", p.id, sub)
	}
	if p.current[sub] != nil || p.nextSeq[sub] != 0 {
		return fmt.Errorf("result partition %s: subpartition %d was written to already (next record %d)", p.id, sub, p.nextSeq[sub])
	}
	p.nextSeq[sub] = seq
	return nil
}

// CreateViewFrom is CreateView for a partition with an in-flight log (PartitionOptions.Log): the reader reads
// the log from the barrier of checkpoint from (0: from the partition's start), then what comes live. When
// the log no longer reaches back that far (truncated past it, or incomplete after its budget ran out) it
// fails with an error wrapping ErrLogIncomplete. Without a log, from is ignored.
func (p *ResultPartition) CreateViewFrom(i int, owner ident.Attempt, credit int, listener func(), from int64) (*View, error) {
	if i < 0 || i >= len(p.subs) {
		return nil, fmt.Errorf("result partition %s has %d subpartitions, %s asked for %d: %w", p.id, len(p.subs), owner, i, ErrInvalidRequest)
	}
	return p.subs[i].createView(owner, credit, listener, from)
}

// TruncateLog tells the partition's in-flight logs that checkpoint id completed: what came before its
// barrier is dropped (no consumer restores an older checkpoint). No-op without a log.
func (p *ResultPartition) TruncateLog(id int64) {
	for _, s := range p.subs {
		s.truncateLog(id)
	}
}

// LogBytes returns the bytes the partition's in-flight logs hold.
func (p *ResultPartition) LogBytes() int64 {
	var n int64
	for _, s := range p.subs {
		n += s.logBytes()
	}
	return n
}

// CreateView attaches a reader for subpartition i owned by the consumer attempt owner with initial credit.
// listener is called (from any goroutine, without locks held) whenever data may have become available.
// For a blocking partition whose producer has not finished it returns an error wrapping ErrPartitionNotReady
// (which wraps ErrPartitionNotFound, so callers that wait for a producer to be deployed wait for this too).
func (p *ResultPartition) CreateView(i int, owner ident.Attempt, credit int, listener func()) (*View, error) {
	if i < 0 || i >= len(p.subs) {
		return nil, fmt.Errorf("result partition %s has %d subpartitions, %s asked for %d: %w", p.id, len(p.subs), owner, i, ErrInvalidRequest)
	}
	return p.subs[i].createView(owner, credit, listener, 0)
}

// EmitRecord appends one serialized record to subpartition sub, splitting it over as many buffers as it
// needs. It blocks while the pool has no free buffer (backpressure) and fails when the task is cancelled.
func (p *ResultPartition) EmitRecord(sub int, rec []byte) error {
	n := len(rec)
	if n > p.opts.MaxRecordSize {
		return fmt.Errorf("partition %s: record of %d bytes exceeds the maximum record size of %d bytes: %w", p.id, n, p.opts.MaxRecordSize, ErrRecordTooLarge)
	}
	if p.regenerating > 0 && p.nextSeq[sub] < p.skipUntil[sub] {
		return p.regenerate(sub, rec)
	}
	seq := p.nextSeq[sub]
	p.nextSeq[sub] = seq + 1
	b := p.current[sub]
	if b == nil || b.freeBytes() == 0 {
		var err error
		if b, err = p.nextBuffer(sub, b, seq, 0, 0); err != nil {
			return err
		}
	}
	b.Starts++
	// Fast path: the whole record fits.
	if lengthPrefixSize+n <= b.freeBytes() {
		b.data = binary.LittleEndian.AppendUint32(b.data, uint32(n))
		b.data = append(b.data, rec...)
		return nil
	}
	var prefix [lengthPrefixSize]byte
	binary.LittleEndian.PutUint32(prefix[:], uint32(n))
	remaining := lengthPrefixSize + n
	var err error
	if b, remaining, err = p.spill(sub, b, prefix[:], remaining); err != nil {
		return err
	}
	_, _, err = p.spill(sub, b, rec, remaining)
	return err
}

// RecordTarget lets a producer encode a record straight into the current buffer of subpartition sub,
// saving EmitRecord's copy: when that buffer has room for a length prefix and need more bytes it returns
// its bytes extended by the prefix, for the caller to append the record to and hand to CommitRecord; else
// nil, and the caller uses EmitRecord. Producer goroutine only.
func (p *ResultPartition) RecordTarget(sub, need int) []byte {
	b := p.current[sub]
	if b == nil || lengthPrefixSize+need > b.freeBytes() || p.regenerating > 0 {
		return nil
	}
	return b.data[:len(b.data)+lengthPrefixSize]
}

// CommitRecord completes a record encoded into the bytes RecordTarget returned; data is those bytes as
// extended by the encoder. It returns false, committing nothing, when the encoder outgrew the buffer or
// the record is over the maximum record size; the record is then data[start:], start being the length of
// RecordTarget's result, for EmitRecord (which also reports the size error).
func (p *ResultPartition) CommitRecord(sub int, data []byte) bool {
	b := p.current[sub]
	start := len(b.data)
	n := len(data) - start - lengthPrefixSize
	if n < 0 || n > p.opts.MaxRecordSize || cap(data) != cap(b.data) || &data[0] != &b.data[0] {
		return false
	}
	binary.LittleEndian.PutUint32(data[start:], uint32(n))
	b.data = data
	b.Starts++
	p.nextSeq[sub]++
	return true
}

// spill writes piece into the current buffer of sub and as many further buffers as needed; remaining is the
// number of bytes of the record, piece included, still to be written.
func (p *ResultPartition) spill(sub int, b *Buffer, piece []byte, remaining int) (*Buffer, int, error) {
	for len(piece) > 0 {
		if b.freeBytes() == 0 {
			var err error
			cont := remaining
			if max := b.Cap() - HeaderSize; cont > max {
				cont = max
			}
			if b, err = p.nextBuffer(sub, b, p.nextSeq[sub], uint32(cont), remaining); err != nil {
				return nil, 0, err
			}
		}
		k := copy(b.data[len(b.data):cap(b.data)], piece)
		b.data = b.data[:len(b.data)+k]
		piece = piece[k:]
		remaining -= k
	}
	return b, remaining, nil
}

// nextBuffer seals and enqueues full (if any) and requests a fresh buffer for sub, whose first record to
// start is firstSeq; cont bytes at its start continue a record of which tail bytes are still to come.
func (p *ResultPartition) nextBuffer(sub int, full *Buffer, firstSeq uint64, cont uint32, tail int) (*Buffer, error) {
	if full != nil {
		p.current[sub] = nil
		full.Seal()
		p.streamSeq[sub], p.streamTail[sub] = firstSeq, tail
		if err := p.enqueue(sub, full, false); err != nil {
			return nil, err
		}
	}
	b, err := p.requestBuffer()
	if err != nil {
		return nil, err
	}
	b.reset(KindData, firstSeq)
	b.Continuation = cont
	p.current[sub] = b
	return b, nil
}

// requestBuffer takes a buffer from the pool, waiting while there is none (backpressure), unless the task is
// cancelled or the partition failed (then, or if it had failed before, it returns the failure).
func (p *ResultPartition) requestBuffer() (*Buffer, error) {
	if err := p.Err(); err != nil {
		return nil, err
	}
	b, err := p.pool.request(p.cancel, p.failed)
	if err != nil {
		return nil, fmt.Errorf("partition %s: %w", p.id, err)
	}
	if b == nil {
		return nil, p.Err()
	}
	return b, nil
}

// Flush hands the partly filled buffer of sub, if any, to its reader. It does nothing for a blocking
// partition, which nobody reads before Finish: its buffers are written to disk when full.
func (p *ResultPartition) Flush(sub int) {
	if p.opts.Blocking {
		return
	}
	_ = p.flush(sub)
}

// flush seals and enqueues the partly filled buffer of sub, if any.
func (p *ResultPartition) flush(sub int) error {
	b := p.current[sub]
	if b == nil || len(b.data) == HeaderSize {
		return nil
	}
	p.current[sub] = nil
	b.Seal()
	p.streamSeq[sub], p.streamTail[sub] = p.nextSeq[sub], 0 // flushed between records
	return p.enqueue(sub, b, false)
}

// FlushAll flushes every subpartition.
func (p *ResultPartition) FlushAll() {
	for i := range p.current {
		p.Flush(i)
	}
}

// BroadcastEvent flushes all subpartitions and appends e to each of them, in order with the records before.
func (p *ResultPartition) BroadcastEvent(e Event) error {
	for i := range p.subs {
		if err := p.AddEvent(i, e); err != nil {
			return err
		}
	}
	return nil
}

// BroadcastWatermark sends watermark ms (epoch milliseconds) to every subpartition, whatever the edge's
// pattern: every consumer subtask's valve waits for every producer. Like every event it flushes the partly
// filled buffers first, so it follows the records emitted before it on every channel, and it takes one
// buffer of the pool per subpartition. The caller sends only watermarks that advanced (docs/eventtime.md
// §2.1); this package neither checks nor coalesces them.
func (p *ResultPartition) BroadcastWatermark(ms int64) error {
	return p.BroadcastEvent(WatermarkEvent(ms))
}

// BroadcastWatermarkStatus tells every subpartition that the producer went idle (idle) or is active again,
// in order with its records and watermarks, as BroadcastWatermark does.
func (p *ResultPartition) BroadcastWatermarkStatus(idle bool) error {
	return p.BroadcastEvent(WatermarkStatusEvent(idle))
}

// AddEvent flushes subpartition sub and appends e to it.
func (p *ResultPartition) AddEvent(sub int, e Event) error {
	if p.regenerating > 0 && p.nextSeq[sub] < p.skipUntil[sub] {
		return p.regeneratedEvent(sub, e)
	}
	if p.skipEnded != nil && p.skipEnded[sub] {
		if e.Type == EventEndOfPartition {
			return nil // the failed attempt's is in the stream, after every record this one regenerated
		}
		return fmt.Errorf("partition %s: subpartition %d: %s after the end of its stream: %w", p.id, sub, e.Type, ErrRegeneratedOther)
	}
	if err := p.flush(sub); err != nil {
		return err
	}
	b, err := p.requestBuffer()
	if err != nil {
		return fmt.Errorf("send %s: %w", e.Type, err)
	}
	b.reset(KindEvent, p.nextSeq[sub])
	if b.freeBytes() < eventSize {
		b.Recycle()
		return fmt.Errorf("partition %s: buffer of %d bytes cannot hold a %d-byte event", p.id, b.Cap(), eventSize)
	}
	b.data = e.append(b.data)
	b.Seal()
	p.streamEnded[sub] = e.Type == EventEndOfPartition
	return p.enqueue(sub, b, e.Type == EventEndOfPartition)
}

// Finish flushes everything and ends every subpartition with an end-of-partition event. A blocking
// partition is consumable once Finish returned without error.
func (p *ResultPartition) Finish() error {
	return p.BroadcastEvent(Event{Type: EventEndOfPartition})
}

// Close recycles the producer's partly filled buffers; it is called by the producer when it stops writing
// for good (after Finish, or on failure or cancellation). A blocking partition closes the spill files of
// unfinished subpartitions; the files stay until the partition is released.
func (p *ResultPartition) Close() {
	for i, b := range p.current {
		if b != nil {
			p.current[i] = nil
			b.Recycle()
		}
	}
	if p.opts.Blocking {
		for _, s := range p.subs {
			s.closeSpill()
		}
	}
}

// OnConsumed registers f to run once every subpartition has delivered its end-of-partition to a reader.
func (p *ResultPartition) OnConsumed(f func(*ResultPartition)) { p.onConsumed = f }

func (p *ResultPartition) subpartitionConsumed() {
	if p.unconsumed.Add(-1) == 0 && p.onConsumed != nil {
		p.onConsumed(p)
	}
}

// Release frees all queued data and fails all views; a blocking partition's spill files are deleted. It is
// idempotent.
func (p *ResultPartition) Release() {
	p.releaseMu.Lock()
	if p.released {
		p.releaseMu.Unlock()
		return
	}
	p.released = true
	p.releaseMu.Unlock()
	for _, s := range p.subs {
		s.release()
	}
}

// Stats sums the counters of all subpartitions.
func (p *ResultPartition) Stats() SubpartitionStats {
	var t SubpartitionStats
	for _, s := range p.subs {
		st := s.Stats()
		t.BuffersAdded += st.BuffersAdded
		t.BuffersDropped += st.BuffersDropped
		t.RecordsDropped += st.RecordsDropped
		t.ViewsCreated += st.ViewsCreated
		t.BytesSpilled += st.BytesSpilled
	}
	return t
}

// regenerate handles a record a new attempt regenerates after a takeover that the stream of sub holds
// already (before skipUntil): it is dropped, except the record cut at the stream's end, whose part still to
// come is written as the continuation the stream's readers wait for. The record must be as long as the one
// the stream began: a replay that regenerates other records is not one (the readers would get a record
// made of two), and the write fails.
func (p *ResultPartition) regenerate(sub int, rec []byte) error {
	seq := p.nextSeq[sub]
	p.nextSeq[sub] = seq + 1
	last := seq+1 == p.skipUntil[sub]
	if last {
		p.regenerating--
	}
	tail := p.skipTail[sub]
	if !last || tail == 0 {
		p.discarded[sub]++
		return nil
	}
	n := len(rec)
	total := lengthPrefixSize + n
	if tail > total {
		return fmt.Errorf("partition %s: subpartition %d: the regenerated record %d is %d bytes, but %d of the one its readers have the start of are still to come: %w",
			p.id, sub, seq, total, tail, ErrRegeneratedOther)
	}
	var prefix [lengthPrefixSize]byte
	binary.LittleEndian.PutUint32(prefix[:], uint32(n))
	written := total - tail
	b, err := p.nextBuffer(sub, p.current[sub], seq+1, 0, 0)
	if err != nil {
		return err
	}
	b.Continuation = uint32(min(tail, b.Cap()-HeaderSize))
	remaining := tail
	if written < lengthPrefixSize {
		if b, remaining, err = p.spill(sub, b, prefix[written:], remaining); err != nil {
			return err
		}
		written = lengthPrefixSize
	}
	_, _, err = p.spill(sub, b, rec[written-lengthPrefixSize:], remaining)
	return err
}

// regeneratedEvent handles an event a new attempt sends after a takeover while sub still regenerates what
// its stream holds: watermarks, statuses and cancel markers are dropped (the stream has the failed
// attempt's, and the attempt sends its own once past them); a barrier or an end of partition there would
// stand after records its producer's state has not produced yet, so the attempt must not send one.
func (p *ResultPartition) regeneratedEvent(sub int, e Event) error {
	switch e.Type {
	case EventBarrier, EventEndOfPartition:
		return fmt.Errorf("partition %s: subpartition %d: %s while its new producer attempt regenerates records %d to %d, which the stream has: %w",
			p.id, sub, e.Type, p.nextSeq[sub], p.skipUntil[sub]-1, ErrRegeneratedOther)
	}
	return nil
}

// Regenerating reports whether, after a takeover, a subpartition still regenerates records its stream
// holds: the producer takes no checkpoint until it is past them. Producer goroutine only.
func (p *ResultPartition) Regenerating() bool { return p.regenerating > 0 }

// Discarded returns how many regenerated records subpartition sub dropped since the last takeover, which
// its consumer had had.
func (p *ResultPartition) Discarded(sub int) uint64 {
	if p.discarded == nil {
		return 0
	}
	return p.discarded[sub]
}

package network

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/runnel-dev/runnel/internal/ident"
)

// SubpartitionStats counts what a subpartition did with its buffers. Dropped figures are non-zero only for
// reconnectable partitions whose consumer went away.
type SubpartitionStats struct {
	BuffersAdded   uint64
	BuffersDropped uint64
	// RecordsDropped counts records that started in dropped buffers.
	RecordsDropped uint64
	// ViewsCreated counts readers that attached over the subpartition's life.
	ViewsCreated uint64
	// BytesSpilled counts the bytes a blocking subpartition wrote to its spill file.
	BytesSpilled uint64
}

// Subpartition is the part of a result partition destined for one consumer subtask: a queue of sealed
// buffers (or, for a blocking partition, a spill file) and at most one live View.
//
// Lock order: under Subpartition.mu only its in-flight log's budget locks are taken (LogBudget.mu and
// logsMu; inflight.go), and a blocking view's reader takes it under its own (blocking.go); availability
// listeners are called after it is released. docs/cluster.md §1.6 has the whole order.
type Subpartition struct {
	partition *ResultPartition
	index     int

	mu    sync.Mutex
	queue bufferQueue
	// priority counts the barriers of unaligned checkpoints at the head of the queue: they overtook the
	// buffers behind them (overtake.go), and a later one goes after them, ahead of the rest.
	priority int
	view     *View
	lastView ident.Attempt // owner of the most recent view, for fencing
	hadView  bool
	finished bool // end-of-partition enqueued (blocking: written and the spill file closed)
	// eopQueued says the end-of-partition event is in the queue; a reconnectable subpartition whose
	// end-of-partition was dropped, or read by a reader that went away, gives the next reader a new one.
	eopQueued bool
	consumed  bool // a view polled end-of-partition
	released  bool
	// failure is set when a pipelined subpartition's reader is gone for good (View.Fail): nobody can read
	// what is written to it anymore, so writing to it is an error.
	failure error
	stats   SubpartitionStats
	spill   *spillWriter // blocking partitions only

	// Approximate recovery (reconnectable subpartitions only, docs/eventtime.md §2.7). lastWatermark and
	// lastStatus are the last watermark and watermark status events the producer gave the subpartition,
	// whether queued or dropped (Type 0: none yet); addedSeq is the channel sequence number of the next
	// record after everything given to it. A newer reader gets copies of both events before anything
	// else, stamped with addedSeq: without them a reader that attaches while its producer is idle, or
	// while its watermark stands still, would wait for a watermark sent before it came. Two events and a
	// counter, whatever the stream: the memory is fixed.
	lastWatermark, lastStatus Event
	addedSeq                  uint64

	// log is the in-flight log (PartitionOptions.Log), or nil. Every buffer given to the subpartition goes
	// into it; it is queued only for a reader that reads live (not one still reading the log).
	log *inflightLog
}

// Index returns the subpartition's index in its partition.
func (s *Subpartition) Index() int { return s.index }

// Stats returns a copy of the subpartition's counters.
func (s *Subpartition) Stats() SubpartitionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// add enqueues a sealed buffer, or drops it when a reconnectable subpartition's reader is gone. It fails
// (recycling b) when the subpartition failed because its pipelined reader is gone.
func (s *Subpartition) add(b *Buffer, isEnd bool) error {
	var notify func()
	s.mu.Lock()
	switch {
	case s.released || s.consumed:
		s.mu.Unlock()
		b.Recycle()
		return nil
	case s.failure != nil:
		err := s.failure
		s.mu.Unlock()
		b.Recycle()
		return err
	}
	if s.partition.opts.Reconnectable {
		s.noteLocked(b)
	}
	if s.log != nil {
		s.log.add(b, barrierOf(b))
		b.logAt = s.log.end() - 1
		if s.view == nil && s.hadView {
			// The reader went: the log holds b, nothing is lost, and the producer never waits on a reader
			// that is gone. A reader reads what came after its creation from the queue, so backpressure
			// holds as for any other subpartition. Before the first reader, b is queued as well (below),
			// as any subpartition queues for a reader that has not come yet: the log may not keep it (past
			// its budget it drops what it holds), and the first reader reads the queue.
			s.stats.BuffersAdded++
			if isEnd {
				s.finished = true
			}
			s.mu.Unlock()
			b.Recycle()
			return nil
		}
	}
	if s.view == nil && s.hadView && s.partition.opts.Reconnectable {
		// The consumer went away; never block the producer on it. Whole buffers are dropped and counted.
		s.stats.BuffersDropped++
		if b.Kind == KindData {
			s.stats.RecordsDropped += uint64(b.Starts)
		}
		if isEnd {
			s.finished = true
		}
		s.mu.Unlock()
		b.Recycle()
		return nil
	}
	s.stats.BuffersAdded++
	s.queue.push(b)
	if isEnd {
		s.finished = true
		s.eopQueued = true
	}
	if v := s.view; v != nil && v.credit > 0 && s.queue.len() == 1 {
		notify = v.listener
	}
	s.mu.Unlock()
	if notify != nil {
		notify()
	}
	return nil
}

// barrierOf returns the checkpoint id of a barrier event buffer, else 0. One byte is looked at for any
// other buffer.
func barrierOf(b *Buffer) int64 {
	if b.Kind != KindEvent {
		return 0
	}
	p := b.Payload()
	if len(p) == 0 || EventType(p[0]) != EventBarrier {
		return 0
	}
	e, err := DecodeEvent(p)
	if err != nil {
		panic(fmt.Sprintf("own barrier buffer does not decode: %v", err))
	}
	return e.CheckpointID
}

// truncateLog drops the log before the barrier of checkpoint id, which completed.
func (s *Subpartition) truncateLog(id int64) {
	s.mu.Lock()
	if s.log != nil {
		s.log.truncate(id)
	}
	s.mu.Unlock()
}

// logBytes returns the bytes the log holds.
func (s *Subpartition) logBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return 0
	}
	return s.log.bytes
}

// noteLocked records, for a reconnectable subpartition, what a newer reader must be re-sent (see
// lastWatermark): it costs a comparison per buffer, never anything per record.
func (s *Subpartition) noteLocked(b *Buffer) {
	if b.Kind == KindData {
		// FirstSeq is the first record starting in b (or the next to start, if none does), so the next
		// record after b is Starts further on.
		s.addedSeq = b.FirstSeq + uint64(b.Starts)
		return
	}
	s.addedSeq = b.FirstSeq
	p := b.Payload()
	if len(p) == 0 || !isWatermarkType(EventType(p[0])) {
		return
	}
	e, err := DecodeEvent(p)
	if err != nil {
		// AddEvent wrote these bytes from a valid Event a moment ago; nothing else adds event buffers.
		panic(fmt.Sprintf("subpartition %s/%d: own event buffer does not decode: %v", s.partition.id, s.index, err))
	}
	if e.Type == EventWatermark {
		s.lastWatermark = e
	} else {
		s.lastStatus = e
	}
}

// createView attaches a reader. For reconnectable and blocking partitions a newer attempt of the consumer
// replaces the current view (which is released first); an older attempt is rejected. A view of a blocking
// subpartition reads its spill file from the start.
func (s *Subpartition) createView(owner ident.Attempt, credit int, listener func(), from int64) (*View, error) {
	if credit < 0 {
		return nil, fmt.Errorf("subpartition %s/%d: negative initial credit %d", s.partition.id, s.index, credit)
	}
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return nil, fmt.Errorf("subpartition %s/%d: %w", s.partition.id, s.index, ErrPartitionReleased)
	}
	blocking := s.spill != nil
	if blocking && !s.partition.Consumable() {
		s.mu.Unlock()
		return nil, fmt.Errorf("subpartition %s/%d requested by %s: %w", s.partition.id, s.index, owner, ErrPartitionNotReady)
	}
	var replaced *View
	if s.hadView {
		if !s.partition.opts.Reconnectable && !blocking {
			s.mu.Unlock()
			return nil, fmt.Errorf("subpartition %s/%d requested by %s, already read by %s: %w",
				s.partition.id, s.index, owner, s.lastView, ErrAlreadyConsumed)
		}
		if owner.Subtask != s.lastView.Subtask || owner.Number <= s.lastView.Number {
			s.mu.Unlock()
			return nil, fmt.Errorf("subpartition %s/%d requested by %s, last reader %s: %w",
				s.partition.id, s.index, owner, s.lastView, ErrStaleAttempt)
		}
	}
	// Every reader of a logged subpartition starts in the log: at the barrier of the checkpoint its
	// consumer restored, or at the start. The log holds the watermarks, statuses and end of partition too,
	// so nothing needs re-sending.
	//
	// The first reader is the exception when it asks for the log's start (the checkpoint the producer
	// restored): the queue holds everything since (see add), also what the log could not keep. Nothing was
	// truncated before it came: a checkpoint whose barrier went through here completes only once its
	// consumer has read the barrier.
	var replay *inflightReader
	if s.log != nil && (s.hadView || from != s.partition.opts.LogFrom) {
		rd, err := s.log.readerAt(from)
		if err != nil && s.finished {
			// Its producer finished before checkpoint from's barrier could go through: the consumer that
			// took checkpoint from had read this channel to its end before it could, and drops what its
			// state holds of the records after the newest barrier before (its restored position).
			if ended, ok := s.log.readerEnded(from); ok {
				rd, err = ended, nil
			}
		}
		if err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("subpartition %s/%d requested by %s from checkpoint %d: %w: %w", s.partition.id, s.index, owner, from, ErrLogIncomplete, err)
		}
		replay = rd
		if !s.hadView {
			// A first reader from a later barrier reads the log; the queue holds a copy of what it reads.
			for b := s.queue.pop(); b != nil; b = s.queue.pop() {
				s.priority = 0
				b.Recycle()
			}
			s.eopQueued = false
		}
	}
	if s.hadView {
		if old := s.view; old != nil {
			s.releaseViewLocked(old)
			replaced = old
		}
	}
	if replay != nil {
		// The log is replayed up to here; what comes later is queued for the view.
		replay.until = s.log.end()
	}
	v := &View{sub: s, owner: owner, credit: credit, listener: listener, replay: replay}
	if blocking {
		v.spill = s.newSpillReaderLocked(v, credit)
	}
	if s.log != nil {
		s.eopQueued = s.finished
	}
	if s.hadView && s.partition.opts.Reconnectable && s.log == nil {
		// A newer attempt: the queue is empty (releasing the previous view dropped it, and buffers added
		// since were dropped), so what is pushed now comes first. The watermark goes before the status:
		// a valve records a watermark on an idle channel too, so the reader ends in the state the
		// producer is in either way, and an idle status last tells it at once not to wait.
		for _, e := range [...]Event{s.lastWatermark, s.lastStatus} {
			if e.Type != 0 {
				s.queue.push(eventBuffer(e, s.addedSeq))
			}
		}
	}
	if s.partition.opts.Reconnectable && s.finished && !s.eopQueued && s.log == nil {
		// The producer has finished but this reader would never learn it: its end-of-partition went to a
		// reader that is gone, or was dropped while none was attached.
		s.queue.push(endOfPartitionBuffer(s.partition.nextSeq[s.index]))
		s.eopQueued = true
		s.consumed = false
	}
	s.view = v
	s.lastView = owner
	if s.hadView && s.partition.opts.Reconnectable {
		// A reader came back: ask the producer to hand over its partly filled buffers now rather than at
		// its next buffer timeout, so that the restarted path gets data again as soon as it can.
		s.partition.flushRequested.Store(true)
	}
	s.hadView = true
	s.stats.ViewsCreated++
	notify := credit > 0 && (s.queue.len() > 0 || blocking || v.replay != nil)
	s.mu.Unlock()
	if replaced != nil {
		if replaced.spill != nil {
			replaced.spill.close()
		}
		// Wake the replaced reader so it sees ErrViewReleased instead of waiting forever.
		replaced.listener()
	}
	if notify {
		listener()
	}
	return v, nil
}

// releaseViewLocked detaches v. Queued buffers of a reconnectable subpartition are dropped (the reader that
// would have consumed them is gone); a pipelined subpartition keeps them, but nobody can read them anymore.
func (s *Subpartition) releaseViewLocked(v *View) {
	if v.released {
		return
	}
	v.released = true
	if s.view == v {
		s.view = nil
	}
	if s.partition.opts.Reconnectable {
		s.eopQueued = false
		for b := s.queue.pop(); b != nil; b = s.queue.pop() {
			s.priority = 0
			// A logged subpartition's buffers are in its log too, where a restarted reader reads them
			// again: not dropped.
			if s.log == nil {
				s.stats.BuffersDropped++
				if b.Kind == KindData {
					s.stats.RecordsDropped += uint64(b.Starts)
				}
			}
			b.Recycle()
		}
	}
}

// endOfPartitionBuffer makes an end-of-partition event buffer outside any pool (recycling it is a no-op).
func endOfPartitionBuffer(nextSeq uint64) *Buffer {
	return eventBuffer(Event{Type: EventEndOfPartition}, nextSeq)
}

// eventBuffer makes a sealed buffer of event e outside any pool (recycling it is a no-op), so that what a
// subpartition re-sends to a new reader never waits for, or takes, a buffer of the producer's pool.
func eventBuffer(e Event, nextSeq uint64) *Buffer {
	b := &Buffer{data: make([]byte, HeaderSize, HeaderSize+eventSize)}
	b.reset(KindEvent, nextSeq)
	b.data = e.append(b.data)
	b.Seal()
	return b
}

// release frees everything the subpartition holds; views report ErrPartitionReleased afterwards.
func (s *Subpartition) release() {
	var notify func()
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return
	}
	s.released = true
	for b := s.queue.pop(); b != nil; b = s.queue.pop() {
		s.priority = 0
		b.Recycle()
	}
	if s.log != nil {
		// Its chunks go back to the budget, its spill file is removed. A file that cannot be removed is
		// left for the TaskManager's temporary directory to take with it.
		_ = s.log.close()
	}
	if s.spill != nil {
		s.removeSpillLocked()
	}
	v := s.view
	if v != nil {
		notify = v.listener // wake the reader so it sees the release
	}
	s.mu.Unlock()
	if v != nil && v.spill != nil {
		v.spill.close()
	}
	if notify != nil {
		notify()
	}
}

// View is a consumer attempt's reader of one subpartition. Polling needs credit: one credit per buffer,
// granted by the consumer as it frees buffers. Credits belong to the view and start fresh with a new view.
type View struct {
	sub      *Subpartition
	owner    ident.Attempt
	listener func()
	spill    *spillReader // views of blocking subpartitions only
	// replay reads the in-flight log from the view's barrier to where the log ended when the view was made
	// (guarded by sub.mu); then nil, and the view reads the queue, which holds what came since.
	replay *inflightReader
	// guarded by sub.mu
	credit   int
	released bool
	drained  bool // blocking: end-of-partition was read
	starved  bool // blocking: a Poll with credit found the view's pool empty
	// onPriority, if set, is called (without locks held) when an unaligned checkpoint's barrier goes to
	// the head of the queue (overtake.go).
	onPriority func()
}

// Owner returns the consumer attempt that holds the view.
func (v *View) Owner() ident.Attempt { return v.owner }

// Poll returns the next buffer if one is queued and the view has credit, or nil. It returns an error once
// the view or its partition was released.
func (v *View) Poll() (*Buffer, error) {
	if v.spill != nil {
		return v.pollSpill()
	}
	s := v.sub
	s.mu.Lock()
	if v.released {
		s.mu.Unlock()
		return nil, fmt.Errorf("subpartition %s/%d, reader %s: %w", s.partition.id, s.index, v.owner, ErrViewReleased)
	}
	if s.released {
		s.mu.Unlock()
		return nil, fmt.Errorf("subpartition %s/%d: %w", s.partition.id, s.index, ErrPartitionReleased)
	}
	if v.replay != nil && v.replay.at >= v.replay.until {
		v.replay = nil // replayed: the queue holds what came since
	}
	if v.replay != nil {
		if v.credit == 0 {
			s.mu.Unlock()
			return nil, nil
		}
		h, data, ok, err := v.replay.next()
		if err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("subpartition %s/%d, reader %s: %w: %w", s.partition.id, s.index, v.owner, ErrLogIncomplete, err)
		}
		if ok {
			// A copy outside any pool: the log may drop its bytes once a later checkpoint completes,
			// while this buffer may still be on its way.
			b := &Buffer{Header: h, data: bytes.Clone(data)}
			v.credit--
			consumedNow := false
			if s.finished && h.Kind == KindEvent && v.replay.at == s.log.end() && s.queue.len() == 0 {
				s.consumed = true
				consumedNow = true
			}
			s.mu.Unlock()
			if consumedNow {
				s.partition.subpartitionConsumed()
			}
			return b, nil
		}
		v.replay = nil // caught up: from now on add queues for this view
	}
	if v.credit == 0 || s.queue.len() == 0 {
		s.mu.Unlock()
		return nil, nil
	}
	b := s.queue.pop()
	if s.priority > 0 {
		s.priority--
	}
	v.credit--
	consumedNow := false
	if s.finished && s.queue.len() == 0 && b.Kind == KindEvent {
		s.eopQueued = false
		s.consumed = true
		consumedNow = true
	}
	s.mu.Unlock()
	if consumedNow {
		s.partition.subpartitionConsumed()
	}
	return b, nil
}

// HasData reports whether a Poll would return a buffer now.
func (v *View) HasData() bool {
	s := v.sub
	s.mu.Lock()
	defer s.mu.Unlock()
	return !v.released && !s.released && v.credit > 0 && v.hasMoreLocked() && (v.spill == nil || v.spill.pool.Available() > 0)
}

// hasMoreLocked reports whether the view has buffers left to read, credit aside.
func (v *View) hasMoreLocked() bool {
	if v.spill != nil {
		return !v.drained
	}
	if v.replay != nil && v.replay.at < v.replay.until {
		return true
	}
	return v.sub.queue.len() > 0
}

// AddCredit grants n more buffers to the reader.
func (v *View) AddCredit(n int) {
	s := v.sub
	var notify func()
	s.mu.Lock()
	if v.released {
		s.mu.Unlock()
		return
	}
	before := v.credit
	v.credit += n
	if (before == 0 || v.starved) && v.credit > 0 && v.hasMoreLocked() {
		v.starved = false
		notify = v.listener
	}
	s.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// Release detaches the reader. It is distinct from releasing the partition: the producer keeps running and,
// for a reconnectable partition, a newer attempt of the consumer may attach again.
//
// Release is the consumer's own word that it stops (its task ends, or it closed its connection): the job
// master hears of that consumer's end from the consumer itself and cancels or restarts what depends on it,
// so the producer of a pipelined partition is left alone (its queued buffers stay until then). A reader
// that is gone without a word is detached with Fail instead.
func (v *View) Release() {
	s := v.sub
	s.mu.Lock()
	s.releaseViewLocked(v)
	s.mu.Unlock()
	if v.spill != nil {
		v.spill.close()
	}
}

// Fail detaches a reader whose consumer is gone without releasing it (it stopped reading while its connection
// stayed open); cause, a *ConsumerGoneError, names the consumer and says why.
//
// For a reconnectable partition it is Release: the producer drops and counts that subpartition's data until
// a newer consumer attempt attaches. A pipelined subpartition cannot get another reader (ErrAlreadyConsumed)
// and nothing tells the job master that this one is gone, so the producer would wait for buffers forever:
// the subpartition fails instead. Its queued buffers go back to the pool, and from now on every write of
// the producer to the partition returns cause, at once if it is waiting for a buffer, which fails the
// producer task through its normal failure path. A subpartition whose end-of-partition was already read,
// and a blocking one (its producer has finished), are only released.
func (v *View) Fail(cause error) {
	s := v.sub
	s.mu.Lock()
	fail := !v.released && !s.released && !s.consumed && v.spill == nil && !s.partition.opts.Reconnectable
	s.releaseViewLocked(v)
	if fail {
		s.failure = cause
		for b := s.queue.pop(); b != nil; b = s.queue.pop() {
			s.priority = 0
			b.Recycle()
		}
	}
	s.mu.Unlock()
	if v.spill != nil {
		v.spill.close()
	}
	if fail {
		s.partition.fail(cause)
	}
}

// bufferQueue is a FIFO ring of buffers that grows as needed (its length is bounded by the buffer pool).
type bufferQueue struct {
	items      []*Buffer
	head, size int
}

func (q *bufferQueue) len() int { return q.size }

func (q *bufferQueue) push(b *Buffer) {
	if q.size == len(q.items) {
		n := len(q.items) * 2
		if n == 0 {
			n = 4
		}
		items := make([]*Buffer, n)
		for i := 0; i < q.size; i++ {
			items[i] = q.items[(q.head+i)%len(q.items)]
		}
		q.items, q.head = items, 0
	}
	q.items[(q.head+q.size)%len(q.items)] = b
	q.size++
}

// at returns the i-th buffer from the head.
func (q *bufferQueue) at(i int) *Buffer { return q.items[(q.head+i)%len(q.items)] }

// insert puts b before the i-th buffer from the head (at the end when i is the length).
func (q *bufferQueue) insert(i int, b *Buffer) {
	q.push(b)
	for k := q.size - 1; k > i; k-- {
		q.items[(q.head+k)%len(q.items)] = q.items[(q.head+k-1)%len(q.items)]
	}
	q.items[(q.head+i)%len(q.items)] = b
}

func (q *bufferQueue) pop() *Buffer {
	if q.size == 0 {
		return nil
	}
	b := q.items[q.head]
	q.items[q.head] = nil
	q.head = (q.head + 1) % len(q.items)
	q.size--
	return b
}

package network

import (
	"bytes"
	"fmt"
)

// Unaligned checkpoints (Flink's FLIP-76)
//
// An unaligned checkpoint's barrier does not queue behind the buffers a subpartition holds for its reader:
// OvertakeWithBarrier puts it at the head of the queue, ahead of every sealed buffer the reader has not
// taken yet, and returns copies of those buffers, which the producer stores in its checkpoint as the
// subpartition's output channel state. The barrier reaches the consumer after the buffers it has taken
// already (and, over TCP, those already on their way: they took credit), so how long it takes does not
// depend on how much is queued. The overtaken buffers still go to the reader, after the barrier: for the
// consumer they come after its checkpoint, for the producer before. A restore of the checkpoint puts them
// back first (RestoreOutput).
//
// The in-flight log (task failover) keeps the order in which buffers were given to the subpartition, so
// the barrier's entry stands after the buffers it overtook. Its mark remembers where it jumped to
// (logMark.jumpTo): a consumer restored from the checkpoint reads the log from there, which is where its
// own stream of buffers after the barrier begins, and a reader that passes that place is handed the barrier
// there and not at its entry, so that a replay sees the buffers in the order the consumer took them.

// OutputChannelState is what one subpartition's queue held when an unaligned checkpoint's barrier
// overtook it.
type OutputChannelState struct {
	// NextSeq is the sequence number of the next record the producer writes to the subpartition: where
	// a producer restored from the checkpoint goes on numbering.
	NextSeq uint64
	// Buffers are the overtaken buffers, sealed (header and payload), oldest first. Barriers and cancel
	// markers of earlier checkpoints are left out: a restore has no use for them.
	Buffers [][]byte
}

// OvertakeWithBarrier flushes every subpartition and puts barrier e (an EventBarrier) at the head of each
// one's queue, ahead of the buffers its reader has not taken; it returns, per subpartition, copies of the
// buffers the barrier overtook. The barrier goes to the end instead, overtaking nothing, where its place at
// the head is not the reader's next buffer: a subpartition whose reader replays the in-flight log or is gone,
// and a blocking partition. Producer goroutine only. The barrier takes no buffer of the pool, so it never
// waits for one.
func (p *ResultPartition) OvertakeWithBarrier(e Event) ([]OutputChannelState, error) {
	out := make([]OutputChannelState, len(p.subs))
	for i, s := range p.subs {
		if p.opts.Blocking || p.regenerating > 0 || (p.skipEnded != nil && p.skipEnded[i]) {
			if err := p.AddEvent(i, e); err != nil {
				return nil, err
			}
			out[i].NextSeq = p.nextSeq[i]
			continue
		}
		if err := p.flush(i); err != nil {
			return nil, err
		}
		bufs, err := s.overtake(e, p.nextSeq[i])
		if err != nil {
			return nil, err
		}
		out[i] = OutputChannelState{NextSeq: p.nextSeq[i], Buffers: bufs}
	}
	return out, nil
}

// overtake puts barrier e at the head of the queue (after the barriers already there) and returns copies of
// the buffers it overtook; nextSeq is the producer's next record. Where it cannot overtake it adds e at the
// end, as add does.
func (s *Subpartition) overtake(e Event, nextSeq uint64) ([][]byte, error) {
	s.mu.Lock()
	canJump := !s.released && !s.consumed && s.failure == nil &&
		((s.view != nil && s.view.replay == nil && s.view.spill == nil) || !s.hadView)
	if !canJump {
		s.mu.Unlock()
		return nil, s.add(eventBuffer(e, nextSeq), false)
	}
	waiting := s.queue.len() - s.priority
	var copies [][]byte
	first := nextSeq
	for i := range waiting {
		b := s.queue.at(s.priority + i)
		if i == 0 {
			first = b.FirstSeq
		}
		if b.Kind == KindEvent && isCheckpointEvent(b) {
			continue
		}
		copies = append(copies, bytes.Clone(b.Bytes()))
	}
	// The consumer's next record after the barrier is the first one it overtook.
	b := eventBuffer(e, first)
	if s.log != nil {
		// The first buffer it overtakes is where it jumps to in the log; the barriers already at the
		// head stand later in the log than the buffers they overtook, so the queue's length says nothing.
		jumpTo := s.log.end()
		if waiting > 0 {
			jumpTo = s.queue.at(s.priority).logAt
		}
		s.log.addJumping(b, e.CheckpointID, nextSeq, jumpTo)
	}
	s.stats.BuffersAdded++
	s.queue.insert(s.priority, b)
	s.priority++
	var notify, priority func()
	if v := s.view; v != nil {
		if v.credit > 0 {
			notify = v.listener
		}
		priority = v.onPriority
	}
	s.mu.Unlock()
	if priority != nil {
		priority()
	}
	if notify != nil {
		notify()
	}
	return copies, nil
}

// SetPriorityListener makes the channel call f (from the producer's goroutine, without locks held) when an
// unaligned checkpoint's barrier goes to the head of its subpartition's queue, ahead of buffers it has
// not read: a task that is busy with a buffer hears of it between two batches of records.
func (c *LocalInputChannel) SetPriorityListener(f func()) {
	s := c.view.sub
	s.mu.Lock()
	c.view.onPriority = f
	s.mu.Unlock()
}

// PriorityWaiting reports whether the channel's next buffer is an unaligned checkpoint's barrier that
// overtook the buffers behind it.
func (c *LocalInputChannel) PriorityWaiting() bool {
	s := c.view.sub
	s.mu.Lock()
	defer s.mu.Unlock()
	return !c.ended && c.view.replay == nil && s.priority > 0 && c.view.credit > 0
}

// isCheckpointEvent reports whether event buffer b is a barrier or a cancel marker.
func isCheckpointEvent(b *Buffer) bool {
	p := b.Payload()
	return len(p) > 0 && (EventType(p[0]) == EventBarrier || EventType(p[0]) == EventCancelCheckpoint)
}

// RestoreOutput gives subpartition sub, before anything else is written to it, the buffers an unaligned
// checkpoint stored as its output channel state, and numbers the producer's records on from st.NextSeq: a
// producer restored from the checkpoint hands its consumers what its queue held, then what it writes anew,
// with the sequence numbers the consumers' restored positions and channel state continue. The buffers are
// copied out of any pool (the state may be larger than the pool) and go into the in-flight log as well.
// Producer goroutine only, before the first write.
func (p *ResultPartition) RestoreOutput(sub int, st OutputChannelState) error {
	if err := p.SetNextSequence(sub, st.NextSeq); err != nil {
		return err
	}
	for k, raw := range st.Buffers {
		h, err := DecodeHeader(raw)
		if err != nil {
			return fmt.Errorf("partition %s: subpartition %d: restored output buffer %d: %w", p.id, sub, k, err)
		}
		b := &Buffer{Header: h, data: raw}
		if err := p.enqueue(sub, b, false); err != nil {
			return err
		}
	}
	p.streamSeq[sub], p.streamTail[sub] = st.NextSeq, 0
	return nil
}

// NewEventBuffer makes a sealed buffer of event e, outside any pool, whose next record is nextSeq: a
// restored consumer hands itself a barrier its input channel state recorded the place of.
func NewEventBuffer(e Event, nextSeq uint64) *Buffer { return eventBuffer(e, nextSeq) }

// NewBufferFrom wraps sealed buffer bytes (header and payload, as Bytes returns them) outside any pool,
// checking the header: a restored consumer hands itself what its input channel state holds.
func NewBufferFrom(raw []byte) (*Buffer, error) {
	h, err := DecodeHeader(raw)
	if err != nil {
		return nil, err
	}
	return &Buffer{Header: h, data: raw}, nil
}

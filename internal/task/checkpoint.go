package task

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
)

// StateWriter serializes the state one operator captured for a checkpoint. Write runs off the task
// goroutine.
type StateWriter struct {
	Operator string
	Write    func(w io.Writer) error
	// Delta, if not nil, writes the same capture as a delta of the operator's previous write, which the
	// restore applies on top of the entries it builds on (incremental checkpoints), and returns how many
	// bytes of the entries it builds on it supersedes. The task calls it only when the previous write of
	// the chain was stored and none happened since, and calls either Write or Delta, once.
	Delta func(w io.Writer) (superseded int64, err error)
}

// StateStore is where tasks write and read their checkpointed state.
type StateStore interface {
	WriteBlob(ctx context.Context, id int64, from ident.Attempt, name string, blob *checkpoint.Blob) (checkpoint.BlobRef, error)
	ReadState(ctx context.Context, id int64, ref checkpoint.BlobRef) ([]byte, error)
}

// CheckpointSetup lets a task take part in checkpoints.
type CheckpointSetup struct {
	Store StateStore
	// Mode says whether the task aligns barriers.
	Mode barrier.Mode
	// FinalCheckpoint makes the task, once its input ended, wait for a checkpoint it takes part in to
	// complete before it finishes (see finish.go). Set it when checkpoints are triggered periodically: with
	// none, the task would wait for ever.
	FinalCheckpoint bool
	// Ack reports a completed snapshot; Decline a snapshot the task could not take. Both may be called from
	// any goroutine and must not block for long.
	// Ack also says what the task measured of its part (AckStats).
	Ack     func(id int64, from ident.Attempt, h checkpoint.StateHandle, st AckStats)
	Decline func(id int64, from ident.Attempt, err error)
	// AlignedTimeout, if positive, makes the unaligned checkpoints start aligned: a task switches one to
	// unaligned once its alignment took longer (Flink's aligned checkpoint timeout).
	AlignedTimeout time.Duration
	// Incremental makes checkpoints incremental when Store is a SharedStateStore: each state blob is
	// shared, holds the deltas of the operators that write them (StateWriter.Delta) and the whole state
	// of the others, and the handle lists the blobs of the chain it builds on before it.
	Incremental bool
}

// AckStats is what a task measured of its part in a checkpoint.
type AckStats struct {
	// Alignment is how long the task's input was held aligning the checkpoint's barriers (0 for a source
	// or a task of one input channel), or, unaligned, how long it stored its input channel state.
	Alignment time.Duration
	// ChannelStateBytes is the size of the channel state an unaligned checkpoint stored.
	ChannelStateBytes int64
}

// bytesEntry is the writer of a task's own entry whose bytes are ready.
func bytesEntry(name string, b []byte) StateWriter {
	return StateWriter{Operator: name, Write: func(w io.Writer) error { _, err := w.Write(b); return err }}
}

// SharedStateStore is a StateStore that keeps the shared blobs of incremental checkpoints
// (checkpoint.Storage).
type SharedStateStore interface {
	StateStore
	WriteSharedBlob(ctx context.Context, id int64, from ident.Attempt, name string, blob *checkpoint.Blob) (checkpoint.BlobRef, error)
}

// performCheckpoint snapshots the chain and the task's own entries on the task goroutine, forwards the
// barrier, and hands the state to the checkpointer, which writes it off the task goroutine. An unaligned
// checkpoint (flags) is written at once only when no input channel is left to store (a source, or a task
// whose channels all delivered the barrier or ended); otherwise the aligner's Complete writes it.
func (r *run) performCheckpoint(id, ts int64, flags uint32) {
	if r.cp.setup == nil {
		return
	}
	if flags&FlagUnaligned != 0 {
		if r.snapshotUnaligned(id, ts, flags, false) {
			r.completeUnaligned(id)
		}
		return
	}
	writers, ok := r.snapshotChain(id)
	if !ok {
		return
	}
	if flags&FlagAlignedTimeout != 0 {
		// Every task of a checkpoint that may turn unaligned writes the entry, empty here: a restore
		// then knows that its producers number on from where it stood.
		u := &pendingUnaligned{id: id}
		for _, p := range r.outputs {
			subs := make([]network.OutputChannelState, p.NumSubpartitions())
			for i := range subs {
				subs[i].NextSeq = p.NextSequence(i)
			}
			u.outputs = append(u.outputs, subs)
		}
		u.inputs, u.after = make([][][]byte, len(r.in.channels)), make([]bool, len(r.in.channels))
		entry := r.encodeInflight(u)
		writers = append(writers, bytesEntry(inflightName, entry))
	}
	ev := network.Event{Type: network.EventBarrier, CheckpointID: id, TimestampMillis: ts, Flags: flags}
	for _, p := range r.outputs {
		if err := p.BroadcastEvent(ev); err != nil {
			Abort(fmt.Errorf("forward barrier of checkpoint %d: %w", id, err))
		}
	}
	r.cp.write(id, writers, AckStats{Alignment: r.align.took(id)})
}

// snapshotChain captures the chain's state and the task's own entries for checkpoint id, marking the
// determinant log there; it declines the checkpoint and reports false when the chain cannot.
func (r *run) snapshotChain(id int64) ([]StateWriter, bool) {
	r.steps.mark(id)
	writers, err := r.chain.Snapshot(id)
	if err != nil {
		r.cp.decline(id, fmt.Errorf("snapshot: %w", err))
		return nil, false
	}
	r.lastSnapshot = id
	if w := r.snapshotTaken(id); w != nil {
		writers = append(writers, *w)
	}
	if w := r.watermarkFloor(); w != nil {
		writers = append(writers, *w)
	}
	if w := r.valveState(); w != nil {
		writers = append(writers, *w)
	}
	if len(r.in.channels) > 0 {
		pos := encodePositions(r.in.channels, r.in.positions())
		writers = append(writers, bytesEntry(channelPositionsName, pos))
	}
	return writers, true
}

// alignment times the barriers of the checkpoint the input aligns: from the first barrier to the one that
// completes the alignment. It reads the clock once per barrier, never per record, and while a checkpoint
// that may turn unaligned aligns, once per buffer.
type alignment struct {
	id    int64
	first time.Time
	// more says a barrier of id came after the first.
	more bool
	// timeout, if positive, is the aligned checkpoint timeout of checkpoint id, which is still aligning.
	timeout time.Duration
}

// barrier notes a barrier of checkpoint id, with flags, on an input channel; timeout is the task's aligned
// checkpoint timeout.
func (a *alignment) barrier(id int64, flags uint32, timeout time.Duration) {
	if id != a.id {
		*a = alignment{id: id, first: time.Now()}
		if flags&FlagAlignedTimeout != 0 {
			a.timeout = timeout
		}
		return
	}
	a.more = true
}

// checkAlignmentTimeout switches the checkpoint being aligned to unaligned once its alignment took longer
// than the aligned checkpoint timeout.
func (r *run) checkAlignmentTimeout() {
	a := &r.align
	if a.timeout <= 0 || r.aligner == nil || time.Since(a.first) < a.timeout {
		return
	}
	a.timeout = 0
	r.apply(r.aligner.OnAlignmentTimeout(a.id))
}

// took is how long the alignment of checkpoint id took, as it is snapshotted: 0 when its first barrier
// completed it (one channel, or a source triggered directly).
func (a *alignment) took(id int64) time.Duration {
	if a.id != id || !a.more {
		return 0
	}
	return time.Since(a.first)
}

// apply carries out what the barrier aligner decided, in the order the aligner documents.
func (r *run) apply(a barrier.Action) {
	for _, ab := range a.Aborts {
		r.dropUnaligned(ab.ID)
		ev := network.Event{Type: network.EventCancelCheckpoint, CheckpointID: ab.ID}
		for _, p := range r.outputs {
			if err := p.BroadcastEvent(ev); err != nil {
				Abort(fmt.Errorf("forward abort of checkpoint %d: %w", ab.ID, err))
			}
		}
	}
	if s := a.Snapshot; s != nil {
		if s.ID == r.align.id {
			r.align.timeout = 0
		}
		switch {
		case s.Unaligned:
			r.snapshotUnaligned(s.ID, s.TimestampMillis, s.Flags, true)
		case s.Flags&FlagAlignedTimeout != 0 && r.cp.setup != nil && r.cp.setup.AlignedTimeout > 0 &&
			time.Since(time.UnixMilli(s.TimestampMillis)) > r.cp.setup.AlignedTimeout:
			// Aligned, but older than the timeout: its barrier overtakes the output queues.
			r.performCheckpoint(s.ID, s.TimestampMillis, s.Flags|FlagUnaligned)
		default:
			r.performCheckpoint(s.ID, s.TimestampMillis, s.Flags)
		}
	}
	if a.Complete != nil {
		r.completeUnaligned(a.Complete.ID)
	}
	if a.UnblockAll {
		r.gate.UnblockAll()
	}
	for _, ch := range a.Block {
		r.gate.Block(ch)
	}
}

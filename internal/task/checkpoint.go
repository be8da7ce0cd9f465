package task

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
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
	Ack     func(id int64, from ident.Attempt, h checkpoint.StateHandle)
	Decline func(id int64, from ident.Attempt, err error)
	// Incremental makes checkpoints incremental when Store is a SharedStateStore: each state blob is
	// shared, holds the deltas of the operators that write them (StateWriter.Delta) and the whole state
	// of the others, and the handle lists the blobs of the chain it builds on before it.
	Incremental bool
}

// SharedStateStore is a StateStore that keeps the shared blobs of incremental checkpoints
// (checkpoint.Storage).
type SharedStateStore interface {
	StateStore
	WriteSharedBlob(ctx context.Context, id int64, from ident.Attempt, name string, blob *checkpoint.Blob) (checkpoint.BlobRef, error)
}

// incremental is the chain of a task's incremental checkpoints. Its writes run one after another, in
// checkpoint order (each waits for prev), so that a delta always builds on the write before it, and only
// if that one was stored.
type incremental struct {
	// prev is closed when the last write started so far has finished (nil before the first).
	prev chan struct{}
	// chain lists the blobs the next delta builds on, oldest (a full one) first; nil after a failed
	// write, so that the next one is full. total is their size, dead how much of it later blobs
	// supersede (what the deltas report, and the entries of operators that write no deltas, which each
	// blob holds whole); whole is that part of the last blob. The chain starts again with a full blob once
	// dead bytes are as many as live ones (a restore reads at most about twice the state), or after
	// maxChain blobs.
	chain              []checkpoint.BlobRef
	total, dead, whole int64
	// superseded and written gather, while a blob is encoded, what its deltas supersede and the size of
	// its entries of operators that write no deltas.
	superseded, written int64
}

// maxChain bounds the blobs a restore of an incremental checkpoint reads per subtask.
const maxChain = 64

// deltasName is the task's own entry in an incremental blob that lists the operators whose entries are
// deltas (StateWriter.Delta) of the blobs before it in the handle: a count, then per operator its uid,
// each with a uvarint length.
const deltasName = "\x00deltas"

// stateBlobName is the name of the one blob that holds all operator states of a subtask.
const stateBlobName = "state"

// channelStateName is the entry of the task's own state in the blob written by earlier versions: how many
// records it had consumed on each input channel, by channel index. The NUL keeps it apart from operator
// names. It is still read (see restorePositions); channelPositionsName replaced it.
const channelStateName = "\x00channels"

// channelPositionsName is the entry of the task's own state in the blob: for each input channel, which
// producer attempt and subpartition it read and how many records of that attempt's sequence it had
// consumed. Sequence numbers count one producer attempt's records, so a position means something only for
// the attempt it was read from: a restored channel whose producer is now another attempt (restarted since)
// or another subtask (the job was rescaled) starts at 0 of the current producer's sequence.
const channelPositionsName = "\x00channel-positions"

// performCheckpoint snapshots the chain, forwards the barrier and hands the writing of the state to a
// goroutine the run owns.
func (r *run) performCheckpoint(id, ts int64, flags uint32) {
	cs := r.t.cfg.Checkpoints
	if cs == nil {
		return
	}
	me := r.t.cfg.Info.Attempt
	r.steps.mark(id)
	writers, err := r.chain.Snapshot(id)
	if err != nil {
		cs.Decline(id, me, fmt.Errorf("snapshot: %w", err))
		return
	}
	r.lastSnapshot = id
	if w := r.snapshotTaken(id); w != nil {
		writers = append(writers, *w)
	}
	if w := r.watermarkFloor(); w != nil {
		writers = append(writers, *w)
	}
	if len(r.decoders) > 0 {
		seqs := make([]uint64, len(r.decoders))
		for i, d := range r.decoders {
			// The first record not had: past a gap the attempt counted (or a restore of this checkpoint
			// would count it again), and past the records a rejoining decoder still drops.
			// A channel joined on an event (its gap counted there) before its first data buffer stands at
			// the gap's end, though its decoder may still wait to drop what its restored state holds.
			switch {
			case d.Synced():
				seqs[i] = d.Resume()
			case r.joined[i]:
				seqs[i] = max(r.joinedAt[i], d.Resume())
			case d.Rejoining():
				seqs[i] = d.Resume()
			default:
				seqs[i] = r.restored[i]
			}
		}
		pos := encodePositions(r.channels, seqs)
		writers = append(writers, StateWriter{Operator: channelPositionsName, Write: func(w io.Writer) error { _, err := w.Write(pos); return err }})
	}
	ev := network.Event{Type: network.EventBarrier, CheckpointID: id, TimestampMillis: ts, Flags: flags}
	for _, p := range r.outputs {
		if err := p.BroadcastEvent(ev); err != nil {
			Abort(fmt.Errorf("forward barrier of checkpoint %d: %w", id, err))
		}
	}
	operators := operatorsOf(writers)
	shared, _ := cs.Store.(SharedStateStore)
	incr := cs.Incremental && shared != nil
	var prev, done chan struct{}
	if incr {
		prev, done = r.incr.prev, make(chan struct{})
		r.incr.prev = done
	}
	r.async.Add(1)
	go func() {
		defer r.async.Done()
		if incr {
			defer close(done)
			if prev != nil {
				select {
				case <-prev:
				case <-r.asyncCtx.Done():
					return
				}
			}
		}
		if slots := r.t.env.SnapshotWriters; slots != nil {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-r.asyncCtx.Done():
				return
			}
		}
		// The blob's memory comes from the task's pool, which takes it back once the blob is stored and
		// the state writers that keep their bytes in it (Blob.Hold) let go of it, at their next full
		// write: a large state is then written without allocating its memory anew (and collecting it)
		// every time.
		blob := r.snapMemory.Blob()
		defer blob.Done()
		ws, deltas := writers, 0
		if incr {
			ws, deltas = r.incr.plan(writers)
		}
		if err := encodeStates(blob, ws); err != nil {
			if incr {
				r.incr.chain = nil
			}
			cs.Decline(id, me, fmt.Errorf("serialize state of checkpoint %d: %w", id, err))
			return
		}
		var (
			ref checkpoint.BlobRef
			err error
		)
		if incr {
			ref, err = shared.WriteSharedBlob(r.asyncCtx, id, me, stateBlobName, blob)
		} else {
			ref, err = cs.Store.WriteBlob(r.asyncCtx, id, me, stateBlobName, blob)
		}
		if err != nil {
			if incr {
				r.incr.chain = nil
			}
			if r.asyncCtx.Err() != nil {
				// The task is failing or being cancelled: the job master aborts the checkpoint when it
				// learns that; a decline now would count as a failed checkpoint.
				return
			}
			cs.Decline(id, me, fmt.Errorf("write state of checkpoint %d: %w", id, err))
			return
		}
		blobs := []checkpoint.BlobRef{ref}
		if incr {
			blobs = r.incr.stored(ref, deltas > 0)
		}
		cs.Ack(id, me, checkpoint.StateHandle{Attempt: me, Blobs: blobs, Operators: operators})
	}()
}

// plan returns the writers of the next incremental blob: the deltas of the operators that write them
// when the chain may grow, the whole state otherwise, and the task's entry naming the deltas; and how
// many deltas there are. The writers count what stored needs.
func (c *incremental) plan(writers []StateWriter) ([]StateWriter, int) {
	c.superseded, c.written = 0, 0
	full := c.chain == nil || len(c.chain) >= maxChain || 2*c.dead >= c.total
	out := make([]StateWriter, 0, len(writers)+1)
	var names []string
	for _, w := range writers {
		switch {
		case w.Delta != nil && !full:
			names = append(names, w.Operator)
			delta := w.Delta
			w.Write = func(out io.Writer) error {
				n, err := delta(out)
				c.superseded += n
				return err
			}
		case w.Delta == nil:
			write := w.Write
			w.Write = func(out io.Writer) error {
				b, _ := out.(*checkpoint.Blob)
				if b == nil {
					return write(out)
				}
				at := b.Len()
				err := write(out)
				c.written += int64(b.Len() - at)
				return err
			}
		}
		out = append(out, w)
	}
	if len(names) == 0 {
		return out, 0
	}
	entry := appendList(nil, names)
	out = append(out, StateWriter{Operator: deltasName, Write: func(w io.Writer) error { _, err := w.Write(entry); return err }})
	return out, len(names)
}

// stored records a blob written with delta entries or without, and returns the chain the handle lists.
func (c *incremental) stored(ref checkpoint.BlobRef, delta bool) []checkpoint.BlobRef {
	if !delta {
		c.chain, c.total, c.dead = nil, 0, 0
	} else {
		c.dead += c.whole + c.superseded
	}
	c.total += ref.Size
	c.whole = c.written
	c.chain = append(slices.Clip(c.chain), ref)
	return slices.Clone(c.chain)
}

// decodeDeltas reads the entry plan writes.
func decodeDeltas(b []byte) (map[string]bool, error) {
	names, err := splitList(b, errors.New("malformed list of delta entries"))
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[string(n)] = true
	}
	return out, nil
}

// appendList appends items as a count and each item with its length (uvarints): the form of the deltas
// entry and of JoinPieces.
func appendList[T ~string | ~[]byte](b []byte, items []T) []byte {
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = binary.AppendUvarint(b, uint64(len(it)))
		b = append(b, it...)
	}
	return b
}

// splitList reads what appendList wrote, the whole of b; the items alias b. Anything else is bad.
func splitList(b []byte, bad error) ([][]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, bad
	}
	b = b[k:]
	out := make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, bad
		}
		out = append(out, b[k:k+int(l)])
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return nil, bad
	}
	return out, nil
}

// JoinPieces frames the entries one operator has in the blobs of an incremental chain, from the last
// whole one on, as the operator's state: the restore hands the operator all of them (SplitPieces).
func JoinPieces(pieces [][]byte) []byte {
	n := len(piecesMagic) + binary.MaxVarintLen64
	for _, p := range pieces {
		n += binary.MaxVarintLen64 + len(p)
	}
	return appendList(append(make([]byte, 0, n), piecesMagic...), pieces)
}

// piecesMagic starts what JoinPieces makes. Only operators that write deltas get it, and their own state
// never starts so (keyed state starts with its snapshot magic or operator list state's).
const piecesMagic = "\x00RNPIECES"

// SplitPieces returns the pieces JoinPieces framed, and false if b is not so framed (a single state).
func SplitPieces(b []byte) ([][]byte, bool, error) {
	if !strings.HasPrefix(string(b[:min(len(b), len(piecesMagic))]), piecesMagic) {
		return nil, false, nil
	}
	out, err := splitList(b[len(piecesMagic):], errors.New("malformed chain of incremental state"))
	return out, true, err
}

// operatorsOf lists, sorted, the operator uids that have an entry among writers (the task's own entries,
// whose names begin with a NUL, are not operators): what the checkpoint metadata records, so that a restore
// knows which operators' state it must place.
func operatorsOf(writers []StateWriter) []string {
	var ops []string
	for _, w := range writers {
		if !strings.HasPrefix(w.Operator, "\x00") {
			ops = append(ops, w.Operator)
		}
	}
	slices.Sort(ops)
	return ops
}

// encodeStates frames the operators' states into one blob: count, then per operator its name and its
// bytes, each with a uvarint length. An operator's bytes are written in place after a length of
// binary.MaxVarintLen64 bytes, filled in afterwards as a padded uvarint (binary.Uvarint reads it like any
// other), so that a large state is not copied once more.
func encodeStates(w *checkpoint.Blob, writers []StateWriter) error {
	var lb [binary.MaxVarintLen64]byte
	w.Write(lb[:binary.PutUvarint(lb[:], uint64(len(writers)))])
	for _, sw := range writers {
		w.Write(lb[:binary.PutUvarint(lb[:], uint64(len(sw.Operator)))])
		w.WriteString(sw.Operator)
		at := w.Len()
		var pad [binary.MaxVarintLen64]byte
		w.Write(pad[:])
		if err := sw.Write(w); err != nil {
			return fmt.Errorf("operator %q: %w", sw.Operator, err)
		}
		putPaddedUvarint(w.Payload()[at:at+binary.MaxVarintLen64], uint64(w.Len()-at-binary.MaxVarintLen64))
	}
	return nil
}

// putPaddedUvarint writes v into all of b (binary.MaxVarintLen64 bytes) as a uvarint with continuation
// bytes to spare.
func putPaddedUvarint(b []byte, v uint64) {
	last := len(b) - 1
	for i := range last {
		b[i] = byte(v) | 0x80
		v >>= 7
	}
	b[last] = byte(v)
}

// decodeStates is the inverse of encodeStates.
func decodeStates(b []byte) (map[string][]byte, error) {
	errBad := errors.New("malformed subtask state blob")
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errBad
	}
	b = b[k:]
	out := make(map[string][]byte, n)
	for i := uint64(0); i < n; i++ {
		var parts [2][]byte
		for j := range parts {
			l, k := binary.Uvarint(b)
			if k <= 0 || l > uint64(len(b)-k) {
				return nil, errBad
			}
			parts[j] = b[k : k+int(l)]
			b = b[k+int(l):]
		}
		out[string(parts[0])] = parts[1]
	}
	if len(b) != 0 {
		return nil, errBad
	}
	return out, nil
}

// restore loads the state of the restore spec into the chain; it reports whether the subtask had already
// finished at that checkpoint.
func (r *run) restore() (finished bool, err error) {
	spec := r.t.cfg.Restore
	if spec == nil {
		return false, nil
	}
	if spec.Handle.Finished {
		return true, nil
	}
	read := spec.Read
	if read == nil {
		cs := r.t.cfg.Checkpoints
		if cs == nil || cs.Store == nil {
			return false, errors.New("restore: no state store configured")
		}
		read = func(ctx context.Context, ref checkpoint.BlobRef) ([]byte, error) {
			return cs.Store.ReadState(ctx, spec.CheckpointID, ref)
		}
	}
	if len(spec.Reads) > 0 {
		return r.restoreRemapped(spec, read)
	}
	if spec.RescaledFrom > 0 {
		return false, r.restoreRescaled(spec, read)
	}
	states := map[string][]byte{}
	var floors floorOf
	if len(spec.Handle.Blobs) > 0 {
		m, err := r.readHandle(spec, read, spec.Handle.Blobs)
		if err != nil {
			return false, err
		}
		for k, v := range m {
			if k == inputEndedName {
				r.fin.restoredEnded = true // the input had ended: see finish.go
				continue
			}
			if k == watermarkName {
				if err := floors.add(v); err != nil {
					return false, fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
				}
				continue
			}
			states[k] = v
		}
	}
	if err := r.restorePositions(spec, states); err != nil {
		return false, err
	}
	if err := r.chain.Restore(states); err != nil {
		return false, fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
	}
	if err := r.restoreFloor(floors); err != nil {
		return false, fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
	}
	return false, nil
}

// readStates reads one state blob of spec and decodes its entries.
func (r *run) readStates(spec *deploy.RestoreSpec, read func(context.Context, checkpoint.BlobRef) ([]byte, error), ref checkpoint.BlobRef) (map[string][]byte, error) {
	data, err := read(r.asyncCtx, ref)
	if err != nil {
		return nil, fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
	}
	m, err := decodeStates(data)
	if err != nil {
		return nil, fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
	}
	return m, nil
}

// readHandle reads the blobs of one handle and returns the entries they hold together. A handle lists
// one blob, or, in an incremental checkpoint, a chain: a blob of whole entries, then blobs whose
// deltasName entry names the operators whose entries there are deltas. An entry that is not a delta
// replaces the same entry of earlier blobs; an operator's deltas are framed (JoinPieces) together with
// its entries before them back to its last whole one, in order, for the operator to apply.
func (r *run) readHandle(spec *deploy.RestoreSpec, read func(context.Context, checkpoint.BlobRef) ([]byte, error), blobs []checkpoint.BlobRef) (map[string][]byte, error) {
	if len(blobs) == 1 {
		return r.readStates(spec, read, blobs[0])
	}
	states := map[string][]byte{}
	chains := map[string][][]byte{}
	for _, ref := range blobs {
		m, err := r.readStates(spec, read, ref)
		if err != nil {
			return nil, err
		}
		var deltas map[string]bool
		if d, ok := m[deltasName]; ok {
			if deltas, err = decodeDeltas(d); err != nil {
				return nil, fmt.Errorf("restore from checkpoint %d: %s: %w", spec.CheckpointID, ref.Key, err)
			}
			delete(m, deltasName)
		}
		for k, v := range m {
			if deltas[k] {
				if _, ok := states[k]; !ok && len(chains[k]) == 0 {
					return nil, fmt.Errorf("restore from checkpoint %d: %s holds a delta of operator %q, which no blob before it holds",
						spec.CheckpointID, ref.Key, k)
				}
				if len(chains[k]) == 0 {
					chains[k] = [][]byte{states[k]}
				}
				chains[k] = append(chains[k], v)
				continue
			}
			states[k] = v
			delete(chains, k)
		}
	}
	for k, c := range chains {
		states[k] = JoinPieces(c)
	}
	return states, nil
}

// restoreRescaled restores a subtask whose vertex had another parallelism in the checkpoint: every
// operator's state is gathered from the overlapping old subtasks and handed to the chain as parts. The
// input channels' consumed positions belong to the old channels and are dropped.
func (r *run) restoreRescaled(spec *deploy.RestoreSpec, read func(context.Context, checkpoint.BlobRef) ([]byte, error)) error {
	me := r.t.cfg.Info
	parts := map[string][][]byte{}
	var floors floorOf
	for _, h := range spec.Parts {
		if h.Finished {
			return fmt.Errorf("restore from checkpoint %d: cannot rescale %s from parallelism %d to %d: subtask %d had finished",
				spec.CheckpointID, me.Name(), spec.RescaledFrom, me.Parallelism, h.Attempt.Index)
		}
		if len(h.Blobs) > 0 {
			m, err := r.readHandle(spec, read, h.Blobs)
			if err != nil {
				return err
			}
			if _, ok := m[inputEndedName]; ok {
				return fmt.Errorf("restore from checkpoint %d: cannot rescale %s from parallelism %d to %d: subtask %d: %w",
					spec.CheckpointID, me.Name(), spec.RescaledFrom, me.Parallelism, h.Attempt.Index, errRescaleEnded)
			}
			for k, v := range m {
				switch k {
				case channelStateName, channelPositionsName:
				case watermarkName:
					if err := floors.add(v); err != nil {
						return fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
					}
				default:
					parts[k] = append(parts[k], v)
				}
			}
		}
	}
	if err := r.chain.RestoreRescaled(parts); err != nil {
		return fmt.Errorf("restore from checkpoint %d, rescaling from parallelism %d to %d: %w",
			spec.CheckpointID, spec.RescaledFrom, me.Parallelism, err)
	}
	// Every old subtask whose key groups this one took over had reached its floor: the lowest holds for all.
	if err := r.restoreFloor(floors); err != nil {
		return fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
	}
	return nil
}

// restoreRemapped restores a subtask of a job whose operators sit in other vertices than in the checkpoint
// (spec.Reads): each read hands the named operators their entries, whole when their old vertex had this
// parallelism, as parts to filter by key group otherwise. Channel positions belong to other channels and
// are dropped; the lowest watermark floor holds; the subtask had finished, or its input had ended, only if
// that holds for every read (a mix cannot be restored: part of the new chain would have input left, part
// none).
func (r *run) restoreRemapped(spec *deploy.RestoreSpec, read func(context.Context, checkpoint.BlobRef) ([]byte, error)) (bool, error) {
	me := r.t.cfg.Info
	fail := func(format string, args ...any) (bool, error) {
		return false, fmt.Errorf("restore from checkpoint %d: %s: %w", spec.CheckpointID, me.Name(), fmt.Errorf(format, args...))
	}
	whole := map[string][]byte{}
	parts := map[string][][]byte{}
	var floors floorOf
	finished, ended := 0, 0
	for _, sr := range spec.Reads {
		if sr.Handle.Finished {
			finished++
			continue
		}
		found := 0
		hadEnded := false
		if len(sr.Handle.Blobs) > 0 {
			m, err := r.readHandle(spec, read, sr.Handle.Blobs)
			if err != nil {
				return false, err
			}
			for k, v := range m {
				switch {
				case k == inputEndedName:
					hadEnded = true
				case k == watermarkName:
					if err := floors.add(v); err != nil {
						return fail("%w", err)
					}
				case slices.Contains(sr.Operators, k):
					found++
					if sr.RescaledFrom > 0 {
						parts[k] = append(parts[k], v)
					} else {
						whole[k] = v
					}
				}
			}
		}
		if found != len(sr.Operators) {
			return fail("the state of %s holds %d of the %d operators %v its metadata lists", sr.Handle.Attempt, found, len(sr.Operators), sr.Operators)
		}
		if hadEnded {
			if sr.RescaledFrom > 0 {
				return fail("cannot rescale operators %v from parallelism %d to %d: subtask %d: %w",
					sr.Operators, sr.RescaledFrom, me.Parallelism, sr.Handle.Attempt.Index, errRescaleEnded)
			}
			ended++
		}
	}
	switch n := len(spec.Reads); {
	case finished == n:
		return true, nil
	case finished > 0:
		return fail("%d of the %d old subtasks whose state it takes had finished, the others not: a job whose operators are chained otherwise cannot be restored from a checkpoint taken while part of it had finished", finished, n)
	case ended == n:
		r.fin.restoredEnded = true
	case ended > 0:
		return fail("the input had ended in %d of the %d old subtasks whose state it takes, not in the others: a job whose operators are chained otherwise cannot be restored from a checkpoint taken while part of its input had ended", ended, n)
	}
	if len(whole) > 0 {
		if err := r.chain.Restore(whole); err != nil {
			return fail("%w", err)
		}
	}
	if len(parts) > 0 {
		if err := r.chain.RestoreRescaled(parts); err != nil {
			return fail("rescaling: %w", err)
		}
	}
	if err := r.restoreFloor(floors); err != nil {
		return fail("%w", err)
	}
	return false, nil
}

// apply carries out what the barrier aligner decided, in the order the aligner documents.
func (r *run) apply(a barrier.Action) {
	for _, ab := range a.Aborts {
		ev := network.Event{Type: network.EventCancelCheckpoint, CheckpointID: ab.ID}
		for _, p := range r.outputs {
			if err := p.BroadcastEvent(ev); err != nil {
				Abort(fmt.Errorf("forward abort of checkpoint %d: %w", ab.ID, err))
			}
		}
	}
	if a.Snapshot != nil {
		r.performCheckpoint(a.Snapshot.ID, a.Snapshot.TimestampMillis, a.Snapshot.Flags)
	}
	if a.UnblockAll {
		r.gate.UnblockAll()
	}
	for _, ch := range a.Block {
		r.gate.Block(ch)
	}
}

// restorePositions sets the consumed position of every input channel from the task's own state in the
// restored blob (and removes that state from the operators' map). A channel starts at 0 of its producer's
// sequence unless the checkpoint was taken in this run of the job (spec.SameRun) and recorded this very
// producer attempt and subpartition: after a savepoint, a restart of the producer or a rescaling, the
// recorded positions count records of a sequence that no longer exists. The legacy entry, which did not
// name the producers, is used only within one run and when the channels still line up one to one.
func (r *run) restorePositions(spec *deploy.RestoreSpec, states map[string][]byte) error {
	legacy, hasLegacy := states[channelStateName]
	pos, has := states[channelPositionsName]
	delete(states, channelStateName)
	delete(states, channelPositionsName)
	if !spec.SameRun {
		return nil
	}
	if has {
		recorded, err := decodePositions(pos)
		if err != nil {
			return fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
		}
		for i, c := range r.channels {
			if seq, ok := recorded[channelOf(c)]; ok {
				r.restored[i] = seq
				// The state holds every record before seq; a channel served from its producer's log
				// starts at the checkpoint's barrier, which may lie before it (the checkpoint was taken
				// while the task still dropped what a restarted producer regenerated).
				r.decoders[i].SkipTo(seq)
			}
		}
		return nil
	}
	if hasLegacy {
		n, k := binary.Uvarint(legacy)
		if k <= 0 || n != uint64(len(r.restored)) {
			return nil // the channels changed: start them fresh
		}
		legacy = legacy[k:]
		for i := range r.restored {
			v, k := binary.Uvarint(legacy)
			if k <= 0 {
				return fmt.Errorf("restore from checkpoint %d: malformed channel positions", spec.CheckpointID)
			}
			r.restored[i], legacy = v, legacy[k:]
		}
	}
	return nil
}

// channelID names what a channel reads: one subpartition of one producer attempt's partition.
type channelID struct {
	partition    ident.PartitionID
	subpartition int
}

func channelOf(c deploy.ChannelSpec) channelID {
	return channelID{partition: c.Partition, subpartition: c.Subpartition}
}

// encodePositions writes, for each channel, its producer attempt, subpartition and consumed position:
// count, then per channel result, vertex, index, attempt, subpartition, position (uvarints).
func encodePositions(channels []deploy.ChannelSpec, seqs []uint64) []byte {
	b := make([]byte, 0, 1+len(channels)*8)
	b = binary.AppendUvarint(b, uint64(len(channels)))
	for i, c := range channels {
		p := c.Partition
		for _, v := range []uint64{uint64(p.Result), uint64(p.Producer.Vertex), uint64(p.Producer.Index),
			uint64(p.Producer.Number), uint64(c.Subpartition), seqs[i]} {
			b = binary.AppendUvarint(b, v)
		}
	}
	return b
}

// maxPositionChannels bounds the channels a positions entry may name, before anything is allocated for
// them: far above any real task's inputs (parallelism is limited to 32768 per vertex).
const maxPositionChannels = 1 << 20

// decodePositions reads what encodePositions wrote.
func decodePositions(b []byte) (map[channelID]uint64, error) {
	bad := errors.New("malformed channel positions")
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxPositionChannels {
		return nil, bad
	}
	b = b[k:]
	out := make(map[channelID]uint64, n)
	var f [6]uint64
	for range n {
		for j := range f {
			v, k := binary.Uvarint(b)
			if k <= 0 {
				return nil, bad
			}
			f[j], b = v, b[k:]
		}
		if f[0] > math.MaxInt32 || f[1] > math.MaxInt32 || f[2] > math.MaxInt32 || f[3] > math.MaxInt32 || f[4] > math.MaxInt32 {
			return nil, bad
		}
		id := channelID{partition: ident.PartitionID{Result: ident.ResultID(f[0]),
			Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: ident.VertexID(f[1]), Index: int32(f[2])}, Number: int32(f[3])}},
			subpartition: int(f[4])}
		out[id] = f[5]
	}
	if len(b) != 0 {
		return nil, bad
	}
	return out, nil
}

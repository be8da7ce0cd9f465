package task

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/watermark"
)

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
	var valves []watermark.ValveSnapshot
	var inflight []byte
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
			if k == valveName {
				// Within the run the gate's channels are the same, from the same producers; a new run's
				// may be others (another graph with as many channels), so it starts at the floor alone.
				if spec.SameRun {
					if valves, err = decodeValves(v); err != nil {
						return false, fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
					}
				}
				continue
			}
			if k == inflightName {
				inflight = v
				continue
			}
			states[k] = v
		}
	}
	if err := r.restorePositions(spec, states, inflight != nil); err != nil {
		return false, err
	}
	if inflight != nil {
		if err := r.restoreInflight(spec.CheckpointID, inflight); err != nil {
			return false, err
		}
	}
	if err := r.chain.Restore(states); err != nil {
		return false, fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
	}
	if err := r.restoreFloor(floors, valves); err != nil {
		return false, fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
	}
	return false, nil
}

// refuseInflight refuses to redistribute the channel state of an unaligned checkpoint: the records in
// flight would have to be sent again to other subtasks. A checkpoint whose channel state is empty is as
// good as an aligned one.
func refuseInflight(id int64, name string, index int32, entry []byte) error {
	st, err := decodeInflight(entry)
	if err != nil {
		return fmt.Errorf("restore from checkpoint %d: %w", id, err)
	}
	if st.empty() {
		return nil
	}
	return fmt.Errorf("restore from checkpoint %d: %s: %w (subtask %d holds records in flight)", id, name, ErrRescaleUnaligned, index)
}

// ErrRescaleUnaligned refuses a restore at another parallelism, or with operators chained otherwise, of an
// unaligned checkpoint that holds records in flight.
var ErrRescaleUnaligned = errors.New("an unaligned checkpoint's records in flight cannot be redistributed: restore it at the parallelism and chaining it was taken with, or take a savepoint (savepoints are aligned) and rescale from that")

// BlobReader reads one state blob of a checkpoint.
type BlobReader func(context.Context, checkpoint.BlobRef) ([]byte, error)

// readStates reads one state blob of checkpoint id and decodes its entries.
func readStates(ctx context.Context, id int64, read BlobReader, ref checkpoint.BlobRef) (map[string][]byte, error) {
	data, err := read(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("restore from checkpoint %d: %w", id, err)
	}
	m, err := decodeStates(data)
	if err != nil {
		return nil, fmt.Errorf("restore from checkpoint %d: %w", id, err)
	}
	return m, nil
}

// readHandle is ReadEntries for the restore of spec.
func (r *run) readHandle(spec *deploy.RestoreSpec, read BlobReader, blobs []checkpoint.BlobRef) (map[string][]byte, error) {
	return ReadEntries(r.cp.ctx, spec.CheckpointID, read, blobs)
}

// ReadEntries reads the blobs of one subtask's handle in checkpoint id and returns the entries they hold
// together, by operator uid (and the task's own entries). A handle lists one blob, or, in an incremental
// checkpoint, a chain: a blob of whole entries, then blobs whose deltasName entry names the operators
// whose entries there are deltas. An entry that is not a delta replaces the same entry of earlier blobs;
// an operator's deltas are framed (JoinPieces) together with its entries before them back to its last
// whole one, in order, for the operator to apply.
func ReadEntries(ctx context.Context, id int64, read BlobReader, blobs []checkpoint.BlobRef) (map[string][]byte, error) {
	if len(blobs) == 1 {
		return readStates(ctx, id, read, blobs[0])
	}
	states := map[string][]byte{}
	chains := map[string][][]byte{}
	for _, ref := range blobs {
		m, err := readStates(ctx, id, read, ref)
		if err != nil {
			return nil, err
		}
		var deltas map[string]bool
		if d, ok := m[deltasName]; ok {
			if deltas, err = decodeDeltas(d); err != nil {
				return nil, fmt.Errorf("restore from checkpoint %d: %s: %w", id, ref.Key, err)
			}
			delete(m, deltasName)
		}
		for k, v := range m {
			if deltas[k] {
				if _, ok := states[k]; !ok && len(chains[k]) == 0 {
					return nil, fmt.Errorf("restore from checkpoint %d: %s holds a delta of operator %q, which no blob before it holds",
						id, ref.Key, k)
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
func (r *run) restoreRescaled(spec *deploy.RestoreSpec, read BlobReader) error {
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
				case channelStateName, channelPositionsName, valveName:
				case inflightName:
					if err := refuseInflight(spec.CheckpointID, me.Name(), h.Attempt.Index, v); err != nil {
						return err
					}
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
	if err := r.restoreFloor(floors, nil); err != nil {
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
func (r *run) restoreRemapped(spec *deploy.RestoreSpec, read BlobReader) (bool, error) {
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
				case k == inflightName:
					if err := refuseInflight(spec.CheckpointID, me.Name(), sr.Handle.Attempt.Index, v); err != nil {
						return false, err
					}
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
	if err := r.restoreFloor(floors, nil); err != nil {
		return fail("%w", err)
	}
	return false, nil
}

// restorePositions sets the consumed position of every input channel from the task's own state in the
// restored blob (and removes that state from the operators' map). A channel starts at 0 of its producer's
// sequence unless the checkpoint was taken in this run of the job (spec.SameRun) and recorded this very
// producer attempt and subpartition: after a savepoint, a restart of the producer or a rescaling, the
// recorded positions count records of a sequence that no longer exists. The legacy entry, which did not
// name the producers, is used only within one run and when the channels still line up one to one.
//
// In an unaligned checkpoint (unaligned) every producer numbers on from where the checkpoint stood, in a
// new attempt too, so a channel takes its position whatever the producer's attempt.
func (r *run) restorePositions(spec *deploy.RestoreSpec, states map[string][]byte, unaligned bool) error {
	legacy, hasLegacy := states[channelStateName]
	pos, has := states[channelPositionsName]
	delete(states, channelStateName)
	delete(states, channelPositionsName)
	if !spec.SameRun && !unaligned {
		return nil
	}
	if has {
		recorded, err := decodePositions(pos)
		if err != nil {
			return fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
		}
		if unaligned {
			r.in.restorePositionsOf(recorded, r.keyOf)
			return nil
		}
		r.in.restorePositions(recorded)
		return nil
	}
	if !spec.SameRun {
		return nil
	}
	if hasLegacy {
		if err := r.in.restoreLegacyPositions(legacy); err != nil {
			return fmt.Errorf("restore from checkpoint %d: %w", spec.CheckpointID, err)
		}
	}
	return nil
}

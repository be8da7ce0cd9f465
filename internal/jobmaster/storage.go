package jobmaster

import (
	"context"
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
)

// storageWorker runs the core's storage ops one at a time, in the order asked, so that a Retain never
// deletes what a verification is reading and commits land in id order. Each op runs under its deadline
// (see opDeadline), on a context that the job's ctx does not cancel: a savepoint or the last checkpoint
// must still be written while the job is being stopped. Every op is answered with the storage's own error,
// so that the core can tell a damaged checkpoint from a store it cannot reach (errors.Is). After the job
// ended the answers are dropped, but what was queued (the last Retain, a Discard) still runs.
//
// Once NextID is answered the worker removes what earlier runs left of their aborted checkpoints
// (removePartial) before it takes the next op.
func (d *Driver) storageWorker() {
	defer d.workers.Done()
	for op := range d.storageQ {
		ctx, cancel := context.WithDeadline(context.Background(), d.opDeadline(op))
		done := d.runStorageOp(ctx, op)
		cancel()
		d.post(done)
		if _, ok := op.Request.(jobcore.NextID); ok && done.Err == nil {
			d.removePartial()
		}
	}
}

// removePartial deletes, as the job starts, the partial checkpoint directories (no _metadata) older than
// the newest committed checkpoint in its storage (checkpoint.Storage.RemovePartial): what the aborted
// checkpoints of earlier runs left behind, late blobs and the empty directories of cancelled writes among
// them. It runs right after the answer to NextID: every checkpoint this job writes gets an id above every
// directory present, so nothing it deletes is the job's own, and the job's commits wait behind it in the
// worker. Committed checkpoints (the one being restored among them) and anything newer than the newest
// one stay. A failure is logged, not fatal.
func (d *Driver) removePartial() {
	st := d.cfg.Storage
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StorageTimeout)
	defer cancel()
	deleted, err := st.RemovePartial(ctx)
	if len(deleted) > 0 {
		d.log.Info("checkpoint storage: removed partial checkpoints older than the newest committed one",
			"location", st.Location(), "ids", deleted)
	}
	if err != nil {
		d.log.Warn("checkpoint storage: could not remove partial checkpoints", "location", st.Location(), "err", err)
	}
}

// sweepAborted deletes, once the job ended, what is left of the checkpoints it triggered and did not
// commit (checkpoint.Storage.RemovePartialBetween over the ids of its triggers). An aborted checkpoint's
// Discard runs as soon as it is aborted, but a task that had not heard of the abort yet may write its blob
// afterwards, and a write cancelled by a failover may leave its directory behind; once every task has
// stopped nothing writes any more. Tasks of a TaskManager that was lost may still be writing: what they
// leave is removed when a job next starts on the storage, if it is older than the newest committed
// checkpoint then. A failure is logged, not fatal.
func (d *Driver) sweepAborted() {
	st := d.cfg.Storage
	if st == nil || d.triggeredTo == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.StorageTimeout)
	defer cancel()
	deleted, err := st.RemovePartialBetween(ctx, d.triggeredFrom, d.triggeredTo)
	if len(deleted) > 0 {
		d.log.Debug("checkpoint storage: removed what was left of aborted checkpoints", "location", st.Location(), "ids", deleted)
	}
	if err != nil {
		d.log.Warn("checkpoint storage: could not remove what was left of aborted checkpoints", "location", st.Location(), "err", err)
	}
}

// opDeadline is when op must be answered: a savepoint's write by the savepoint's deadline, which the core
// gives with the op (the stop's cancellations wait for the write's answer); every other op within
// Config.StorageTimeout of its start.
func (d *Driver) opDeadline(op jobcore.StorageOp) time.Time {
	if _, ok := op.Request.(jobcore.WriteSavepoint); ok && op.Deadline > 0 {
		return d.started.Add(op.Deadline)
	}
	return time.Now().Add(d.cfg.StorageTimeout)
}

func (d *Driver) runStorageOp(ctx context.Context, op jobcore.StorageOp) jobcore.StorageDone {
	st := d.cfg.Storage
	done := jobcore.StorageDone{Op: op.ID}
	switch r := op.Request.(type) {
	case jobcore.NextID:
		done.NextID, done.Err = st.NextID(ctx)
	case jobcore.CommitMetadata:
		done.Err = st.CommitMetadata(ctx, r.Checkpoint)
		if hook := d.cfg.Committed; done.Err == nil && hook != nil {
			if err := hook(ctx, r.Checkpoint.ID); err != nil {
				done.Err = fmt.Errorf("checkpoint %d: %w", r.Checkpoint.ID, err)
			}
		}
	case jobcore.VerifyLatest:
		only := make(map[ident.Subtask]bool, len(r.Subtasks))
		for _, s := range r.Subtasks {
			only[s] = true
		}
		done.Checkpoint, done.Skipped, done.Err = st.LatestFor(ctx, func(s ident.Subtask) bool { return only[s] })
	case jobcore.WriteSavepoint:
		done.Err = st.WriteSavepoint(ctx, r.Dir, r.Checkpoint)
	case jobcore.Retain:
		_, done.Err = st.Retain(ctx, r.N)
	case jobcore.Discard:
		done.Err = st.Discard(ctx, r.CheckpointID)
	default:
		done.Err = fmt.Errorf("job master: a storage op of no known kind %T", op.Request)
	}
	return done
}

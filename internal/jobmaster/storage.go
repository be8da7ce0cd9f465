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
func (d *Driver) storageWorker() {
	defer d.workers.Done()
	for op := range d.storageQ {
		ctx, cancel := context.WithDeadline(context.Background(), d.opDeadline(op))
		done := d.runStorageOp(ctx, op)
		cancel()
		d.post(done)
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

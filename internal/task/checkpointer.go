package task

import (
	"context"
	"fmt"
	"sync"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/ident"
)

// checkpointer writes a task's snapshots (the second half of Flink's SubtaskCheckpointCoordinator): the
// task goroutine captures the chain's state and forwards the barrier (performCheckpoint), and hands the
// writers to write, which serializes them into a blob of the task's pool and stores it on a goroutine of
// its own, then acknowledges the checkpoint or declines it. With incremental checkpoints the writes run
// one after another, in checkpoint order, each a delta of the one before when it may be.
//
// The goroutines stop when cancel is called (the task failed or was cancelled: what they write would be
// aborted anyway) and wait returns once every one ended; a task that finishes waits for them before it
// ends, so that it still acknowledges the checkpoints it took.
type checkpointer struct {
	setup *CheckpointSetup // nil: the task takes no part in checkpoints
	me    ident.Attempt
	// slots, if not nil, bounds the writers of the TaskManager's tasks that run at once (Env.SnapshotWriters).
	slots  chan struct{}
	memory *checkpoint.BlobPool // memory of the state blobs, for later ones
	incr   incremental          // the chain of incremental checkpoints (incremental.go)
	// ctx is the writers' context, cancelled by cancel; it also bounds the reads of a restore.
	ctx    context.Context
	cancel context.CancelFunc
	writes sync.WaitGroup
}

func newCheckpointer(setup *CheckpointSetup, me ident.Attempt, slots chan struct{}) *checkpointer {
	c := &checkpointer{setup: setup, me: me, slots: slots, memory: checkpoint.NewBlobPool()}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// decline tells the job master that the task could not take checkpoint id.
func (c *checkpointer) decline(id int64, err error) { c.setup.Decline(id, c.me, err) }

// wait returns once every write started has ended.
func (c *checkpointer) wait() { c.writes.Wait() }

// write serializes and stores the state writers captured for checkpoint id on a goroutine of its own, and
// acknowledges the checkpoint with the handle of what it stored and what the task measured (st), or declines
// it.
func (c *checkpointer) write(id int64, writers []StateWriter, st AckStats) {
	cs, me := c.setup, c.me
	operators := operatorsOf(writers)
	shared, _ := cs.Store.(SharedStateStore)
	incr := cs.Incremental && shared != nil
	var prev, done chan struct{}
	if incr {
		prev, done = c.incr.prev, make(chan struct{})
		c.incr.prev = done
	}
	c.writes.Add(1)
	go func() {
		defer c.writes.Done()
		if incr {
			defer close(done)
			if prev != nil {
				select {
				case <-prev:
				case <-c.ctx.Done():
					return
				}
			}
		}
		if slots := c.slots; slots != nil {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-c.ctx.Done():
				return
			}
		}
		// The blob's memory comes from the task's pool, which takes it back once the blob is stored and
		// the state writers that keep their bytes in it (Blob.Hold) let go of it, at their next full
		// write: a large state is then written without allocating its memory anew (and collecting it)
		// every time.
		blob := c.memory.Blob()
		defer blob.Done()
		ws, deltas := writers, 0
		if incr {
			ws, deltas = c.incr.plan(writers)
		}
		if err := encodeStates(blob, ws); err != nil {
			if incr {
				c.incr.chain = nil
			}
			cs.Decline(id, me, fmt.Errorf("serialize state of checkpoint %d: %w", id, err))
			return
		}
		var (
			ref checkpoint.BlobRef
			err error
		)
		if incr {
			ref, err = shared.WriteSharedBlob(c.ctx, id, me, stateBlobName, blob)
		} else {
			ref, err = cs.Store.WriteBlob(c.ctx, id, me, stateBlobName, blob)
		}
		if err != nil {
			if incr {
				c.incr.chain = nil
			}
			if c.ctx.Err() != nil {
				// The task is failing or being cancelled: the job master aborts the checkpoint when it
				// learns that; a decline now would count as a failed checkpoint.
				return
			}
			cs.Decline(id, me, fmt.Errorf("write state of checkpoint %d: %w", id, err))
			return
		}
		blobs := []checkpoint.BlobRef{ref}
		if incr {
			blobs = c.incr.stored(ref, deltas > 0)
		}
		cs.Ack(id, me, checkpoint.StateHandle{Attempt: me, Blobs: blobs, Operators: operators}, st)
	}()
}

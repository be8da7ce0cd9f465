package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
)

// savepointState follows the savepoint taken when the job is stopped.
type savepointState struct {
	id       int64
	deadline time.Time
	written  string
	err      error
}

// ackMsg carries a task's answer to a checkpoint.
type ackMsg struct {
	id     int64
	from   ident.Attempt
	handle checkpoint.StateHandle
	err    error // a decline
}

// startSavepoint triggers the savepoint of a stopping job; the job is cancelled once it is written (or
// failed). It returns false when there is nothing to wait for.
func (jm *JobMaster) startSavepoint() bool {
	if jm.cfg.SavepointOnStop == "" || jm.coord == nil || jm.savepoint != nil {
		return false
	}
	r, err := jm.coord.TriggerNow(jm.now())
	sp := &savepointState{deadline: time.Now().Add(time.Minute)}
	switch {
	case err != nil:
		sp.err = fmt.Errorf("savepoint: %w", err)
	case len(r.Triggers) == 0:
		sp.err = errors.New("savepoint: no checkpoint was triggered")
	default:
		sp.id = r.Triggers[0].ID
	}
	jm.mu.Lock()
	jm.savepoint = sp
	jm.mu.Unlock()
	if sp.err != nil {
		return false
	}
	jm.process(r)
	return true
}

// setSavepoint changes the savepoint state under the lock that Snapshot reads it with.
func (jm *JobMaster) setSavepoint(f func(*savepointState)) {
	jm.mu.Lock()
	f(jm.savepoint)
	jm.mu.Unlock()
}

func (jm *JobMaster) startCoordinator(ctx context.Context) error {
	var tasks []checkpoint.Task
	for _, v := range jm.cfg.Job.Vertices {
		for i := 0; i < v.Parallelism; i++ {
			var up []ident.Subtask
			for _, e := range v.Inputs {
				for _, p := range graph.ProducersOf(e, i) {
					up = append(up, ident.Subtask{Vertex: e.Source.ID, Index: int32(p)})
				}
			}
			tasks = append(tasks, checkpoint.Task{Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: v.ID, Index: int32(i)}},
				Name: v.Name, Source: v.IsSource(), Upstream: up})
		}
	}
	sctx, cancel := context.WithTimeout(ctx, jm.cfg.StorageTimeout)
	next, err := jm.cfg.Storage.NextID(sctx)
	cancel()
	if err != nil {
		return fmt.Errorf("checkpoint storage: %w", err)
	}
	jm.firstCheckpointID = next
	c, err := checkpoint.NewCoordinator(*jm.cfg.Checkpoint, tasks, next)
	if err != nil {
		return err
	}
	jm.coord = c
	counts := c.Counts()
	jm.mu.Lock()
	jm.counts = &counts
	jm.mu.Unlock()
	return nil
}

// process carries out what the checkpoint coordinator asked for, in the order it documents.
func (jm *JobMaster) process(r checkpoint.Ready) {
	for !r.Empty() {
		next := checkpoint.Ready{}
		for _, cp := range r.Persist {
			ctx, cancel := jm.storageCtx()
			err := jm.cfg.Storage.CommitMetadata(ctx, cp)
			cancel()
			if err != nil {
				jm.log.Warn("persist checkpoint", "id", cp.ID, "err", err)
			}
			next = next.Merge(jm.coord.Persisted(jm.now(), cp.ID, err))
		}
		for _, cp := range r.Completed {
			jm.log.Debug("checkpoint completed", "id", cp.ID)
			if sp := jm.savepoint; sp != nil && sp.id == cp.ID {
				ctx, cancel := jm.storageCtx()
				err := jm.cfg.Storage.WriteSavepoint(ctx, jm.cfg.SavepointOnStop, cp)
				cancel()
				jm.setSavepoint(func(sp *savepointState) {
					if err != nil {
						sp.err = fmt.Errorf("write savepoint %d to %s: %w", cp.ID, jm.cfg.SavepointOnStop, err)
					} else {
						sp.written = jm.cfg.SavepointOnStop
					}
				})
				jm.log.Info("savepoint", "id", cp.ID, "dir", jm.cfg.SavepointOnStop, "err", err)
				jm.cancelJob()
			}
			ctx, cancel := jm.storageCtx()
			if _, err := jm.cfg.Storage.Retain(ctx, jm.cfg.Checkpoint.Retained); err != nil {
				jm.log.Warn("retain checkpoints", "err", err)
			}
			cancel()
			jm.pruneLedger(cp.ID)
		}
		for _, ab := range r.Aborted {
			jm.log.Debug("checkpoint aborted", "id", ab.ID, "reason", ab.Reason, "err", ab.Err)
			if sp := jm.savepoint; sp != nil && sp.id == ab.ID && sp.err == nil {
				jm.setSavepoint(func(sp *savepointState) {
					sp.err = fmt.Errorf("savepoint %d aborted: %s: %v", ab.ID, ab.Reason, ab.Err)
				})
				jm.cancelJob()
			}
			ctx, cancel := jm.storageCtx()
			if err := jm.cfg.Storage.Discard(ctx, ab.ID); err != nil {
				jm.log.Debug("discard aborted checkpoint", "id", ab.ID, "err", err)
			}
			cancel()
		}
		for _, n := range r.Notifications {
			ex := jm.current(n.To)
			if ex == nil {
				continue
			}
			switch n.Kind {
			case checkpoint.NotifyAbort:
				ex.tm.AbortCheckpoint(n.To, n.CheckpointID)
			case checkpoint.NotifyComplete:
				ex.tm.NotifyCheckpointComplete(n.To, n.CheckpointID)
			}
		}
		for _, t := range r.Triggers {
			jm.lastTriggered = max(jm.lastTriggered, t.ID)
			var flags uint32
			if t.Mode == checkpoint.AtLeastOnce {
				flags = BarrierFlagAtLeastOnce
			}
			for _, target := range t.Targets {
				ex := jm.current(target)
				if ex == nil || !ex.tm.TriggerCheckpoint(target, t.ID, t.TimestampMillis, flags) {
					next = next.Merge(jm.coord.Decline(jm.now(), t.ID, target, checkpoint.ErrTaskNotReady))
				}
			}
		}
		if r.FailJob != nil {
			// Too many checkpoints failed in a row: a failure of the job as a whole, which the restart
			// strategy answers like any other (Flink's global failover), not the end of the job.
			jm.onGlobalFailure(r.FailJob)
		}
		r = next
	}
	counts := jm.coord.Counts()
	jm.mu.Lock()
	jm.counts = &counts
	jm.mu.Unlock()
}

// current returns the execution of attempt a if a is its current attempt.
func (jm *JobMaster) current(a ident.Attempt) *execution {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	ex := jm.execs[a.Subtask]
	if ex == nil || ex.attempt != a {
		return nil
	}
	return ex
}

// onInputEnded tells the coordinator that attempt a's input ended: it waits for a checkpoint covering its
// end, and once every input ended the final checkpoint is triggered at once (by what process carries out).
func (jm *JobMaster) onInputEnded(a ident.Attempt) {
	if jm.coord == nil {
		return
	}
	jm.process(jm.coord.TaskInputEnded(jm.now(), a))
}

func (jm *JobMaster) onAck(a ackMsg) {
	if jm.coord == nil {
		return
	}
	if a.err != nil {
		jm.process(jm.coord.Decline(jm.now(), a.id, a.from, a.err))
		return
	}
	jm.process(jm.coord.Ack(jm.now(), a.id, a.from, a.handle))
}

func (jm *JobMaster) sendAck(m ackMsg) {
	select {
	case jm.acks <- m:
	case <-jm.done:
	}
}

// pruneLedger forgets the loss ledger's entries that no restore can roll back once checkpoint id
// completed: a restore picks one of the retained checkpoints, so attempts whose state the oldest retained
// one holds are final.
func (jm *JobMaster) pruneLedger(id int64) {
	jm.retainedIDs = append(jm.retainedIDs, id)
	if n := max(jm.cfg.Checkpoint.Retained, 1); len(jm.retainedIDs) > n {
		jm.retainedIDs = append(jm.retainedIDs[:0], jm.retainedIDs[len(jm.retainedIDs)-n:]...)
	}
	var floor int64
	if len(jm.retainedIDs) == max(jm.cfg.Checkpoint.Retained, 1) {
		floor = jm.retainedIDs[0]
	}
	jm.mu.Lock()
	defer jm.mu.Unlock()
	jm.ledger.Prune(floor)
	jm.trimFailovers()
}

// trimFailovers settles the failover events and bounds their list (jobcore.History.Trim), except while a
// restart plan holds events whose attempts are not deployed yet. Called with the lock held.
func (jm *JobMaster) trimFailovers() {
	if jm.plan != nil {
		return
	}
	jm.history.Trim(func(s ident.Subtask) (jobcore.CurrentAttempt, bool) {
		ex := jm.execs[s]
		if ex == nil {
			return jobcore.CurrentAttempt{}, false
		}
		return jobcore.CurrentAttempt{Attempt: ex.attempt, CreatedBy: ex.createdBy, Terminal: ex.state.Terminal()}, true
	}, &jm.ledger)
}

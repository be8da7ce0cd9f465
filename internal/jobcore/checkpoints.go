package jobcore

import (
	"errors"
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// Bounds of the storage ops. At most maxStorageOps are out at the driver at once; further ones wait in
// the core's queue, in order. The queue holds maxQueuedStorageOps before the oldest Discard in it is
// dropped (deleting an aborted checkpoint's data is best effort; Retain deletes it later anyway). Other
// ops are not dropped: commits are bounded by the coordinator's MaxConcurrent, verifications by one per
// restart plan, and the rest by the checkpoints that complete.
const (
	maxStorageOps       = 32
	maxQueuedStorageOps = 32
)

// errStopping declines a checkpoint triggered while a stop's savepoint is pending (see stopping).
var errStopping = fmt.Errorf("%w: a stop with a savepoint is in progress, and its savepoint is the last checkpoint", checkpoint.ErrTaskNotReady)

// savepointState follows the savepoint of a stop: triggered as checkpoint id, then written to dir, by
// deadline; written or err says how it ended.
type savepointState struct {
	id       int64
	dir      string
	deadline time.Duration
	// writing is set while the WriteSavepoint op is out: its deadline is the savepoint's, so the answer,
	// not the clock, ends the wait (the stop's cancellations must not overtake the write).
	writing bool
	written string
	err     error
}

func (sp *savepointState) pending() bool { return sp.written == "" && sp.err == nil }

// ms is the coordinator's clock: milliseconds since the job started.
func (c *Core) ms() int64 { return c.now.Milliseconds() }

// restorePoint is what subtasks deployed now restore: the newest completed checkpoint known to be valid
// (a verification that passed over damaged ones fell back to an older one), or the savepoint the job
// started from, or nil.
func (c *Core) restorePoint() *checkpoint.CompletedCheckpoint {
	if c.coord != nil && c.coord.LatestCompleted() != nil {
		return c.coord.LatestCompleted()
	}
	return c.initial
}

// allRunning reports whether every subtask is running or finished. Checkpoints are triggered only then: a
// subtask still connecting its inputs (a restarted consumer of an approximate partition, in particular)
// would miss the barriers its producers send meanwhile, and every other task would wait for it in alignment.
func (c *Core) allRunning() bool {
	for _, ex := range c.execs {
		if ex.state != deploy.Running && ex.state != deploy.Finished {
			return false
		}
	}
	return true
}

// ticking reports whether the coordinator is to be ticked: while the job runs, every subtask runs, no
// restart is in progress (the subtasks a plan is cancelling still run, but would only abort what a
// trigger started), and no stop's savepoint is pending (see stopping).
func (c *Core) ticking() bool {
	return c.coord != nil && c.status == StatusRunning && c.plan == nil && c.allRunning() && !c.stopping()
}

// stopping reports whether a stop's savepoint is pending. Its checkpoint is the job's last: periodic
// checkpoints are not triggered meanwhile (Flink's stop-with-savepoint does the same), since the tasks are
// cancelled once it is written, and a later checkpoint's work (a transactional sink's prepared transaction)
// would be cut short by the cancellation. The coordinator is not ticked, so checkpoints in flight do not
// time out either: the savepoint's own deadline bounds the stop. A checkpoint in flight when the stop
// came ends as any other: it completes, or the savepoint's completion subsumes (aborts) it, and the
// savepoint's completion, which covers everything before it, reaches the tasks before their cancellation.
func (c *Core) stopping() bool {
	return c.savepoint != nil && c.savepoint.pending()
}

// tickCoordinator lets the coordinator time out and trigger checkpoints, when ticking.
func (c *Core) tickCoordinator() {
	if c.ticking() {
		c.carryOut(c.coord.Tick(c.ms()))
	}
}

// storage asks for a storage op and returns its id. Past maxStorageOps out, it waits in the queue.
func (c *Core) storage(r StorageRequest, deadline time.Duration) uint64 {
	c.opSeq++
	op := StorageOp{ID: c.opSeq, Request: r, Deadline: deadline}
	if len(c.ops) < maxStorageOps && len(c.queued) == 0 {
		c.ops[op.ID] = r
		c.ready.Storage = append(c.ready.Storage, op)
		return op.ID
	}
	if len(c.queued) >= maxQueuedStorageOps {
		for i, q := range c.queued {
			if d, ok := q.Request.(Discard); ok {
				c.log(LogWarn, "storage queue full; not deleting an aborted checkpoint", "id", d.CheckpointID)
				c.queued = append(c.queued[:i], c.queued[i+1:]...)
				break
			}
		}
	}
	c.queued = append(c.queued, op)
	return op.ID
}

// flushStorage sends queued ops while fewer than maxStorageOps are out.
func (c *Core) flushStorage() {
	for len(c.queued) > 0 && len(c.ops) < maxStorageOps {
		op := c.queued[0]
		c.queued = c.queued[1:]
		c.ops[op.ID] = op.Request
		c.ready.Storage = append(c.ready.Storage, op)
	}
}

func (c *Core) onStorageDone(e StorageDone) {
	req, ok := c.ops[e.Op]
	if !ok {
		c.log(LogDebug, "ignoring an unknown storage result", "op", e.Op)
		return
	}
	delete(c.ops, e.Op)
	c.flushStorage()
	switch r := req.(type) {
	case NextID:
		c.onNextID(e)
	case CommitMetadata:
		if e.Err != nil {
			c.log(LogWarn, "persist checkpoint", "id", r.Checkpoint.ID, "err", e.Err)
		}
		if c.coord != nil {
			c.carryOut(c.coord.Persisted(c.ms(), r.Checkpoint.ID, e.Err))
		}
		if c.cancelHeld && !c.committing() {
			c.sendCancels() // after the completion's notifications (cancelAll)
		}
		c.checkDone() // a job whose subtasks all stopped waited for this commit to end
	case VerifyLatest:
		c.onVerified(e)
	case WriteSavepoint:
		c.onSavepointWritten(r, e.Err)
	case Retain:
		if e.Err != nil {
			c.log(LogWarn, "retain checkpoints", "err", e.Err)
		}
	case Discard:
		if e.Err != nil {
			// Not fatal: the next retention, or the sweep at the end of the job, deletes what is left.
			c.log(LogWarn, "could not delete the data of an aborted checkpoint", "id", r.CheckpointID, "err", e.Err)
		}
	}
}

// onNextID creates the coordinator, with ids above both the storage's and the savepoint's, and deploys
// what waited for it.
func (c *Core) onNextID(e StorageDone) {
	if c.status != StatusRunning {
		return
	}
	if e.Err != nil {
		c.fail(fmt.Errorf("checkpoint storage: %w", e.Err))
		return
	}
	// Above every id a task heard of too: a lost leader's tasks (Adopt) may have taken part in some.
	next := max(e.NextID, 1, c.lastTriggered+1)
	if c.initial != nil {
		next = max(next, c.initial.ID+1)
	}
	coord, err := checkpoint.NewCoordinator(*c.cfg.Checkpoint, c.checkpointTasks(), next)
	if err != nil {
		c.fail(fmt.Errorf("checkpoint coordinator: %w", err))
		return
	}
	coord.Restored(c.initial)
	c.coord, c.firstCheckpointID = coord, next
	if a := c.cfg.Adopt; a != nil {
		if a.CompletedThisRun && a.Completed != nil {
			c.firstCheckpointID = a.Completed.ID // the run taken over took it: its channel positions hold
		}
		for _, s := range c.subtasks {
			if ex := c.execs[s]; ex.state == deploy.Finished {
				c.carryOut(coord.TaskFinished(c.ms(), ex.attempt))
			}
		}
	}
	c.ready.Changed = true
	c.deployScheduled()
}

// checkpointTasks lists every subtask for the coordinator, with the subtasks that feed it.
func (c *Core) checkpointTasks() []checkpoint.Task {
	var tasks []checkpoint.Task
	for _, s := range c.subtasks {
		v := c.cfg.Job.Vertex(s.Vertex)
		var up []ident.Subtask
		for _, e := range v.Inputs {
			for _, p := range graph.ProducersOf(e, int(s.Index)) {
				up = append(up, ident.Subtask{Vertex: e.Source.ID, Index: int32(p)})
			}
		}
		tasks = append(tasks, checkpoint.Task{Attempt: c.execs[s].attempt, Name: v.Name, Operators: v.UIDs(), Source: v.IsSource(), Upstream: up})
	}
	return tasks
}

// carryOut turns what the coordinator asked for into ops and messages, in the order checkpoint.Ready
// documents. Decisions it can take at once (a trigger that cannot be delivered is declined as not ready)
// feed the coordinator again, until nothing is left.
func (c *Core) carryOut(r checkpoint.Ready) {
	for !r.Empty() {
		var next checkpoint.Ready
		// A savepoint aborted here cancels the job once this round's notifications went out: the
		// cancellations must follow the aborts of the checkpoints the tasks took part in.
		cancel := false
		for _, cp := range r.Persist {
			c.storage(CommitMetadata{Checkpoint: cp}, 0)
		}
		for _, cp := range r.Completed {
			c.log(LogDebug, "checkpoint completed", "id", cp.ID)
			if sp := c.savepoint; sp != nil && sp.id == cp.ID && sp.pending() {
				// The stop's cancellations wait for this write's answer (onSavepointWritten).
				sp.writing = true
				c.storage(WriteSavepoint{Dir: sp.dir, Checkpoint: cp}, sp.deadline)
			}
			c.storage(Retain{N: c.cfg.Checkpoint.Retained}, 0)
			c.pruneLedger(cp.ID)
		}
		for _, ab := range r.Aborted {
			c.log(LogDebug, "checkpoint aborted", "id", ab.ID, "reason", ab.Reason, "err", ab.Err)
			if sp := c.savepoint; sp != nil && sp.id == ab.ID && sp.pending() {
				sp.err = fmt.Errorf("savepoint %d aborted: %s: %w", ab.ID, ab.Reason, ab.Err)
				cancel = true
			}
			c.storage(Discard{CheckpointID: ab.ID}, 0)
		}
		live := !c.status.Terminal() // an ended job's tasks are gone: nothing to tell them
		for _, n := range r.Notifications {
			ex := c.current(n.To)
			if !live || ex == nil || ex.tm == 0 {
				continue
			}
			switch n.Kind {
			case checkpoint.NotifyAbort:
				c.send(ex.tm, AbortCheckpoint{Attempt: n.To, ID: n.CheckpointID})
			case checkpoint.NotifyComplete:
				c.send(ex.tm, NotifyCheckpointComplete{Attempt: n.To, ID: n.CheckpointID})
			}
		}
		if cancel {
			c.cancelJob()
		}
		for _, t := range r.Triggers {
			c.lastTriggered = max(c.lastTriggered, t.ID)
			if c.stopping() && t.ID != c.savepoint.id {
				// An event (not a tick) triggered the final checkpoint while the stop's savepoint is
				// pending: no task hears of it, and the savepoint stays the last checkpoint.
				for _, target := range t.Targets {
					next = next.Merge(c.coord.Decline(c.ms(), t.ID, target, errStopping))
				}
				continue
			}
			for _, target := range t.Targets {
				ex := c.current(target)
				if !live || ex == nil || ex.tm == 0 || c.tms[ex.tm].lost {
					next = next.Merge(c.coord.Decline(c.ms(), t.ID, target, checkpoint.ErrTaskNotReady))
					continue
				}
				c.send(ex.tm, TriggerCheckpoint{Attempt: target, ID: t.ID, TimestampMillis: t.TimestampMillis, Mode: t.Mode})
			}
		}
		if r.FailJob != nil {
			// Too many checkpoints failed in a row: a failure of the job as a whole, which the restart
			// strategy answers like any other (Flink's global failover), not the end of the job.
			c.startFailover(nil, nil, "", r.FailJob, append([]ident.Subtask(nil), c.subtasks...), "full")
		}
		c.ready.Changed = true
		r = next
	}
}

func (c *Core) onDecline(e CheckpointDecline) {
	if c.coord == nil {
		return
	}
	reason := e.Err
	if reason == nil {
		reason = errors.New("no reason given")
	}
	if e.NotReady && !errors.Is(reason, checkpoint.ErrTaskNotReady) {
		// Not a failure of the checkpoint: it is aborted, and does not count towards the tolerable ones.
		reason = fmt.Errorf("%w: %w", checkpoint.ErrTaskNotReady, reason)
	}
	c.carryOut(c.coord.Decline(c.ms(), e.ID, e.Attempt, reason))
}

func (c *Core) onTick() {
	if c.plan == nil {
		c.history.Trim(c.currentAttempt, &c.ledger)
	}
	if sp := c.savepoint; sp != nil && sp.pending() && !sp.writing && c.now >= sp.deadline {
		sp.err = fmt.Errorf("savepoint %d did not complete in time", sp.id)
		c.cancelJob()
	}
	c.tickCoordinator()
}

// onStop triggers the savepoint of a stopping job; the job is cancelled once it is written or failed. With
// nothing to write (no directory, no checkpointing, the job not running) it cancels at once. A second Stop
// while the savepoint is taken changes nothing: the savepoint's deadline bounds the wait, and Cancel does
// not wait.
func (c *Core) onStop(e Stop) {
	dir := e.Dir
	if dir == "" {
		dir = c.cfg.SavepointOnStop
	}
	if sp := c.savepoint; sp != nil && sp.pending() && c.status == StatusRunning {
		return
	}
	if dir == "" || c.coord == nil || c.status != StatusRunning {
		c.cancelJob()
		return
	}
	sp := &savepointState{dir: dir, deadline: c.now + c.cfg.SavepointTimeout}
	c.savepoint = sp
	c.ready.Changed = true
	r, err := c.coord.TriggerSavepoint(c.ms())
	switch {
	case err != nil:
		sp.err = fmt.Errorf("savepoint: %w", err)
	case len(r.Triggers) == 0:
		sp.err = errors.New("savepoint: no checkpoint was triggered")
	default:
		sp.id = r.Triggers[0].ID
	}
	if sp.err != nil {
		c.cancelJob()
		return
	}
	c.log(LogInfo, "savepoint triggered", "id", sp.id, "dir", dir)
	c.carryOut(r)
}

func (c *Core) onSavepointWritten(r WriteSavepoint, err error) {
	sp := c.savepoint
	if sp == nil || sp.id != r.Checkpoint.ID || !sp.pending() {
		return
	}
	sp.writing = false
	if err != nil {
		sp.err = fmt.Errorf("write savepoint %d to %s: %w", r.Checkpoint.ID, r.Dir, err)
	} else {
		sp.written = r.Dir
	}
	c.ready.Changed = true
	c.log(LogInfo, "savepoint", "id", r.Checkpoint.ID, "dir", r.Dir, "err", err)
	c.cancelJob()
}

// needsVerification reports whether a restart must ask the storage which checkpoint to restore: when a
// checkpoint of this run completed. Before that the restore point is the savepoint the job started from,
// which is not in this storage and was verified when it was read, or nothing.
func (c *Core) needsVerification() bool {
	if c.coord == nil {
		return false
	}
	latest := c.coord.LatestCompleted()
	return latest != nil && latest.ID >= c.firstCheckpointID
}

// invalidateVerification makes the plan's verification stale: the plan widened, or a TaskManager was
// lost, so the state to verify or the slots to deploy to changed. Its answer is ignored when it comes.
func (c *Core) invalidateVerification() {
	if c.plan != nil {
		c.plan.verify, c.plan.verified = 0, nil
	}
}

// onVerified takes the answer to the plan's VerifyLatest: damaged newer checkpoints are passed over with a
// WARN and the coordinator falls back to the one found, so that this restart and later ones restore it.
// When every retained checkpoint is damaged nothing valid can be restored and no restart can succeed: the
// job fails. When the storage cannot be read at all (unreachable, a deadline), the last completed
// checkpoint as recorded is restored, and the restart strategy decides again if reading its state fails.
func (c *Core) onVerified(e StorageDone) {
	p := c.plan
	if p == nil || p.verify != e.Op {
		c.log(LogDebug, "ignoring a stale verification", "op", e.Op)
		return
	}
	p.verify = 0
	for _, sk := range e.Skipped {
		if !errors.Is(sk.Err, checkpoint.ErrIncomplete) && !errors.Is(sk.Err, checkpoint.ErrNotFound) {
			c.log(LogWarn, "checkpoint is damaged; restoring an older one", "checkpoint", sk.ID, "err", sk.Err)
		}
	}
	latest := c.coord.LatestCompleted()
	err := e.Err
	if err == nil && e.Checkpoint == nil {
		err = errors.New("the storage named no checkpoint")
	}
	switch {
	case err == nil:
		if e.Checkpoint.ID != latest.ID {
			c.coord.FallBackTo(e.Checkpoint)
		}
		p.verified = &restoreChoice{cp: e.Checkpoint}
	case errors.Is(err, checkpoint.ErrCorrupt), errors.Is(err, checkpoint.ErrUnsupportedVersion):
		c.fail(fmt.Errorf("restart: no valid checkpoint to restore: %w", err))
	default:
		c.log(LogWarn, "no valid checkpoint found in storage; restoring the last completed one as recorded",
			"checkpoint", latest.ID, "err", err)
		p.verified = &restoreChoice{cp: latest}
	}
}

// pruneLedger forgets the loss ledger's entries that no restore can roll back once checkpoint id
// completed: a restore picks one of the retained checkpoints, so attempts whose state the oldest retained
// one holds are final. It also trims the failover history, unless a restart plan holds events whose
// attempts are not deployed yet.
func (c *Core) pruneLedger(id int64) {
	n := max(c.cfg.Checkpoint.Retained, 1)
	c.retainedIDs = append(c.retainedIDs, id)
	if len(c.retainedIDs) > n {
		c.retainedIDs = append(c.retainedIDs[:0], c.retainedIDs[len(c.retainedIDs)-n:]...)
	}
	var floor int64
	if len(c.retainedIDs) == n {
		floor = c.retainedIDs[0]
	}
	c.ledger.Prune(floor)
	if c.plan == nil {
		c.history.Trim(c.currentAttempt, &c.ledger)
	}
}

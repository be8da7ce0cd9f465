package jobmaster

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/task"
)

// restartPlan is a failover in progress: the subtasks being cancelled, to be redeployed as new attempts.
type restartPlan struct {
	subtasks  map[ident.Subtask]bool
	notBefore time.Time
	events    []*jobcore.Failover
}

// onFailure asks the restart strategy whether to restart and the failover strategy what to restart, and
// starts cancelling those subtasks; maybeRestart redeploys them once they stopped and the backoff passed.
func (jm *JobMaster) onFailure(s ident.Subtask, cause error) {
	jm.startFailover(&s, cause, jm.failover.TasksToRestart(s), jm.cfg.Failover.String())
}

// onGlobalFailure restarts the whole job from its latest checkpoint, through the restart strategy like
// any other failure: the answer to a failure that belongs to no subtask (checkpoints failing past the
// tolerable number, as in Flink).
func (jm *JobMaster) onGlobalFailure(cause error) {
	jm.startFailover(nil, cause, jm.cfg.Job.Subtasks(), "full")
}

// startFailover records a failover event of failed (nil: the job as a whole) and adds set to the restart
// plan. A failure that arrives while an earlier failover is still stopping its subtasks joins that plan:
// all of them are redeployed together, from one checkpoint.
func (jm *JobMaster) startFailover(failed *ident.Subtask, cause error, set []ident.Subtask, strategy string) {
	now := time.Now()
	what := "job"
	if failed != nil {
		what = "subtask " + jm.name(*failed)
	}
	err := fmt.Errorf("%s failed: %w", what, cause)
	jm.mu.Lock()
	running := jm.status == StatusRunning
	jm.mu.Unlock()
	if !running {
		return // failing or cancelling already: nothing restarts
	}
	jm.restart.NotifyFailure(jm.now(), cause)
	if !jm.restart.CanRestart() {
		jm.fail(fmt.Errorf("%w (restart strategy %s gives up)", err, jm.cfg.Restart))
		return
	}
	ev := jobcore.NewFailover(failed, cause, strategy, set, now)
	jm.markLossBaseline(ev)
	jm.log.Warn("failure, restarting", "failed", what, "err", cause, "strategy", ev.Strategy,
		"restart", len(set), "backoff_ms", jm.restart.BackoffMillis())
	if jm.plan == nil {
		jm.plan = &restartPlan{subtasks: make(map[ident.Subtask]bool)}
	}
	for _, r := range set {
		jm.plan.subtasks[r] = true
	}
	jm.plan.events = append(jm.plan.events, ev)
	if nb := now.Add(time.Duration(jm.restart.BackoffMillis()) * time.Millisecond); nb.After(jm.plan.notBefore) {
		jm.plan.notBefore = nb
	}
	jm.mu.Lock()
	jm.history.Add(ev)
	var cancel []*execution
	for r := range jm.plan.subtasks {
		if ex := jm.execs[r]; !ex.state.Terminal() && ex.state != task.Created {
			cancel = append(cancel, ex)
		}
	}
	jm.mu.Unlock()
	for _, ex := range cancel {
		ex.tm.Cancel(ex.attempt)
	}
}

// maybeRestart redeploys the subtasks of the restart plan once all of them stopped and the backoff passed.
// It returns how long to wait when only the backoff holds it back.
func (jm *JobMaster) maybeRestart() (time.Duration, bool) {
	p := jm.plan
	if p == nil {
		return 0, false
	}
	jm.mu.Lock()
	if jm.status != StatusRunning {
		jm.mu.Unlock()
		jm.plan = nil
		return 0, false
	}
	for s := range p.subtasks {
		// Subtasks never deployed (a region waiting for its blocking inputs) have nothing to stop.
		if st := jm.execs[s].state; !st.Terminal() && st != task.Created {
			jm.mu.Unlock()
			return 0, false
		}
	}
	jm.mu.Unlock()
	if wait := time.Until(p.notBefore); wait > 0 {
		return wait, true
	}
	jm.plan = nil
	subtasks := make([]ident.Subtask, 0, len(p.subtasks))
	for s := range p.subtasks {
		subtasks = append(subtasks, s)
	}
	sort.Slice(subtasks, func(i, j int) bool {
		if subtasks[i].Vertex != subtasks[j].Vertex {
			return subtasks[i].Vertex < subtasks[j].Vertex
		}
		return subtasks[i].Index < subtasks[j].Index
	})
	// The checkpoint verified here is the one the restarted subtasks restore and the one the report names.
	restore := jm.restorePoint()
	if jm.coord != nil && jm.coord.LatestCompleted() != nil {
		var err error
		if restore, err = jm.verifiedLatest(p.subtasks); err != nil {
			jm.fail(fmt.Errorf("restart: %w", err))
			return 0, false
		}
	}
	var attempts, releaseAttempts []ident.Attempt
	var release []*execution
	jm.mu.Lock()
	for _, s := range subtasks {
		ex := jm.execs[s]
		if ex.state == task.Created {
			continue // never ran: its first attempt is still to come
		}
		if ex.state == task.Finished {
			// A finished producer keeps its partitions until now: its new attempt produces them again.
			release = append(release, ex)
			releaseAttempts = append(releaseAttempts, ex.attempt)
		}
		// The new attempt restores restore: what earlier attempts counted as lost and this restore rolls
		// back is counted again by this failover (see lossLedger).
		var restoreID *int64
		if restore != nil {
			id := restore.ID
			restoreID = &id
		}
		jm.ledger.RollBack(s, restoreID)
		ex.attempt.Number++
		ex.state = task.Created
		ex.in, ex.out = 0, 0
		ex.createdBy = p.firstRestarting(s)
		attempts = append(attempts, ex.attempt)
	}
	for _, ev := range p.events {
		if restore != nil {
			id := restore.ID
			ev.CheckpointRestored = &id
		}
		for _, s := range subtasks {
			ev.Await(s)
		}
	}
	jm.mu.Unlock()
	for i, ex := range release {
		ex.tm.ReleasePartitions(releaseAttempts[i])
	}
	if jm.coord != nil {
		r, err := jm.coord.TasksRestarted(jm.now(), attempts, errors.New("failover"))
		if err != nil {
			jm.fail(fmt.Errorf("restart: %w", err))
			return 0, false
		}
		jm.process(r)
	}
	jm.deployRegions(jm.sched.OnRegionsRestarted(jm.topo.RegionsOf(subtasks)), restore)
	return 0, false
}

// firstRestarting returns the earliest failover of the plan that restarts s: the failure that caused its
// restart, which its new attempt's loss belongs to. Later failovers merged into the plan restart s too, but
// cost nothing more on its channels.
func (p *restartPlan) firstRestarting(s ident.Subtask) *jobcore.Failover {
	for _, ev := range p.events {
		if slices.Contains(ev.Restarted, s) {
			return ev
		}
	}
	return nil
}

// verifiedLatest returns the checkpoint to restore the restarted subtasks from after a failure: the newest
// one in storage whose metadata and whose state of those subtasks verify (the state of subtasks that keep
// running is not read: with approximate recovery a failover reads what it restores, not the whole job's
// state). Damaged newer ones are logged at WARN and passed over, and the coordinator falls back to the one
// found, so that later failovers and deployments start from it too. When every retained checkpoint is
// damaged there is nothing valid to restore and no restart can succeed: that is an error, which fails the
// job. When the storage cannot be read (unreachable, say), the last completed checkpoint as recorded is
// restored: the restart strategy decides again if reading its state fails too.
func (jm *JobMaster) verifiedLatest(restarted map[ident.Subtask]bool) (*checkpoint.CompletedCheckpoint, error) {
	latest := jm.coord.LatestCompleted()
	if latest.ID < jm.firstCheckpointID {
		// No checkpoint of this run completed yet: the restore point is the savepoint the job started from,
		// which is not in this storage (and was verified when it was loaded).
		return latest, nil
	}
	ctx, cancel := jm.storageCtx()
	cp, skipped, err := jm.cfg.Storage.LatestFor(ctx, func(s ident.Subtask) bool { return restarted[s] })
	cancel()
	for _, sk := range skipped {
		if !errors.Is(sk.Err, checkpoint.ErrIncomplete) {
			jm.log.Warn("checkpoint is damaged; restoring an older one", "checkpoint", sk.ID, "err", sk.Err)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, checkpoint.ErrCorrupt), errors.Is(err, checkpoint.ErrUnsupportedVersion):
		return nil, fmt.Errorf("no valid checkpoint to restore: %w", err)
	default:
		jm.log.Warn("no valid checkpoint found in storage; restoring the last completed one as recorded", "checkpoint", latest.ID, "err", err)
		return latest, nil
	}
	if cp.ID != latest.ID {
		// The newer ones are damaged: from now on this one is the restore point, for deployments of this
		// failover and any later one until a newer checkpoint completes.
		jm.coord.FallBackTo(cp)
	}
	return cp, nil
}

// markLossBaseline records, for every channel from a producer that keeps running to a subtask that
// restarts, the producer's counters now; what it drops from here on is this failover's loss. It also notes
// the restarted tails, whose first output ends the outage.
func (jm *JobMaster) markLossBaseline(ev *jobcore.Failover) {
	restarted := make(map[ident.Subtask]bool, len(ev.Restarted))
	for _, r := range ev.Restarted {
		restarted[r] = true
	}
	// Only reads of the executions, on the goroutine that alone writes them, and writes to ev, which nobody
	// else sees yet: no lock, so that the TaskManagers are called without it.
	for _, r := range ev.Restarted {
		tail := true
		for _, d := range jm.cfg.Job.Downstream(r) {
			if restarted[d] {
				tail = false
			}
		}
		if tail {
			ev.MarkTail(r)
		}
		v := jm.cfg.Job.Vertex(r.Vertex)
		for _, e := range v.Inputs {
			for _, p := range graph.ProducersOf(e, int(r.Index)) {
				prod := ident.Subtask{Vertex: e.Source.ID, Index: int32(p)}
				if restarted[prod] {
					continue
				}
				pex := jm.execs[prod]
				key := jobcore.Channel{Partition: ident.PartitionID{Result: e.Result, Producer: pex.attempt}, Subpartition: graph.SubpartitionIndex(e, p, int(r.Index))}
				if st, ok := pex.tm.SubpartitionStats(key.Partition, key.Subpartition); ok {
					ev.SetBaseline(key, r, jobcore.SubpartitionCounters{RecordsDropped: st.RecordsDropped, BuffersDropped: st.BuffersDropped})
				}
			}
		}
	}
}

// onObservation adds what a restarted attempt saw to the failover that deployed it. A failover merged into
// a plan that was still stopping subtasks restarts them too, but their new attempts belong to the first
// one. An attempt reports its joins before its end (one goroutine, one ordered channel), so none is lost to
// the job master ignoring updates of replaced attempts; the ledger remembers the joins so that a later
// failover that rolls the attempt back takes them out again (see lossLedger).
func (jm *JobMaster) onObservation(a ident.Attempt, o *task.Observation) {
	// The executions are read without the lock (this goroutine alone writes them); the failover's figures,
	// which Snapshot reads, are written under it; the TaskManager is asked with no lock held.
	ex := jm.execs[a.Subtask]
	if ex == nil || ex.attempt != a || ex.createdBy == nil {
		return
	}
	ev := ex.createdBy
	switch o.Kind {
	case task.ChannelJoined:
		key := jobcore.Channel{Partition: o.Channel.Partition, Subpartition: o.Channel.Subpartition}
		cl := jobcore.ChannelLoss{Producer: o.Channel.Partition.Producer.Subtask, Consumer: a.Subtask,
			RecordsLost: o.Lost, PartialRecordsSkipped: o.PartialSkipped}
		if base, ok := ev.TakeBaseline(key); ok { // each channel is counted once
			if pex := jm.execs[o.Channel.Partition.Producer.Subtask]; pex != nil && pex.attempt == o.Channel.Partition.Producer {
				if st, ok := pex.tm.SubpartitionStats(key.Partition, key.Subpartition); ok {
					cl.RecordsDropped = st.RecordsDropped - base.RecordsDropped
					cl.BuffersDropped = st.BuffersDropped - base.BuffersDropped
				}
			}
		}
		jm.mu.Lock()
		ev.Add(cl)
		jm.ledger.Join(a, ex.skipUpTo, ev, cl)
		jm.mu.Unlock()
	case task.FirstOutput:
		jm.mu.Lock()
		ev.FirstOutput(a.Subtask, o.At)
		jm.mu.Unlock()
	}
}

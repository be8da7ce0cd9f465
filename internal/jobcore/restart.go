package jobcore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

// startFailover records a failover event and adds set to the restart plan: failed is the subtask that
// failed (the lowest of failedSubtasks when a TaskManager's loss failed several; nil: the job as a whole).
// A failure that arrives while an earlier failover is still stopping its subtasks joins that plan: all of
// them are redeployed together. The restart strategy hears of the failure once, whatever its size.
func (c *Core) startFailover(failed *ident.Subtask, failedSubtasks []ident.Subtask, tmName string, cause error, set []ident.Subtask, strategy string) {
	c.startFailoverOf(failed, failedSubtasks, tmName, cause, set, strategy, false)
}

// startFailoverOf is startFailover; sameIncident marks a failure that is part of an incident the restart
// strategy counted already (the loss of a TaskManager and the broken connections of its consumers): it is
// not counted again, so one lost machine neither uses up several restart attempts nor backs off as if it
// were repeated failures.
func (c *Core) startFailoverOf(failed *ident.Subtask, failedSubtasks []ident.Subtask, tmName string, cause error, set []ident.Subtask, strategy string, sameIncident bool) {
	if c.status != StatusRunning {
		return // failing or cancelling already: nothing restarts
	}
	what := "job"
	switch {
	case tmName != "":
		what = "TaskManager " + tmName
	case failed != nil:
		what = "subtask " + c.name(*failed)
	}
	if !sameIncident {
		c.restart.NotifyFailure(c.now.Milliseconds(), cause)
	}
	if !c.restart.CanRestart() {
		c.fail(fmt.Errorf("%s failed: %w (restart strategy %s gives up)", what, cause, c.cfg.Restart))
		return
	}
	ev := NewFailover(failed, cause, strategy, set, c.wall(c.now))
	ev.FailedSubtasks, ev.TaskManager = failedSubtasks, tmName
	if failed != nil {
		if ex := c.execs[*failed]; ex != nil && ex.tm != 0 {
			ev.FailedOn = c.tms[ex.tm].name
		}
	}
	backoff := time.Duration(c.backoffMillis(failed, failedSubtasks, cause, sameIncident)) * time.Millisecond
	c.log(LogWarn, "failure, restarting", "failed", what, "err", cause, "strategy", strategy,
		"restart", len(set), "backoff_ms", backoff.Milliseconds())
	c.markLossBaseline(ev)
	if c.plan == nil {
		c.plan = &restartPlan{subtasks: make(map[ident.Subtask]bool), suspects: make(map[TaskManagerID]bool)}
	}
	c.invalidateVerification() // the plan widens: a verification in flight checked too little
	var cancel []*execution
	for _, r := range set {
		if c.plan.subtasks[r] {
			continue // being cancelled for an earlier failover of the plan already
		}
		c.plan.subtasks[r] = true
		if ex := c.execs[r]; !ex.state.Terminal() && ex.state != deploy.Created {
			cancel = append(cancel, ex)
		}
	}
	c.plan.events = append(c.plan.events, ev)
	c.plan.notBefore = max(c.plan.notBefore, c.now+backoff)
	c.history.Add(ev)
	c.ready.Changed = true
	for _, ex := range cancel {
		c.send(ex.tm, CancelTask{Attempt: ex.attempt})
	}
}

// backoffMillis returns how long the restart of a failure waits. Under full and region failover it is the
// job's restart strategy's backoff: every failure restarts much of the job, and repeated ones are one
// problem. Under task and approximate failover a failure restarts a part of the job around one subtask, and
// the failures of different subtasks are independent: each failed subtask's own strategy (backoffs) hears
// of its failures alone and says how long its restart waits, the longest of them for a failure of several
// (a TaskManager lost). A failure of the job as a whole (failed nil) waits the job's backoff.
func (c *Core) backoffMillis(failed *ident.Subtask, failedSubtasks []ident.Subtask, cause error, sameIncident bool) int64 {
	local := c.cfg.Failover == scheduler.TaskFailover || c.cfg.Failover == scheduler.ApproximateFailover
	if !local || failed == nil {
		return c.restart.BackoffMillis()
	}
	subtasks := failedSubtasks
	if len(subtasks) == 0 {
		subtasks = []ident.Subtask{*failed}
	}
	var backoff int64
	for _, s := range subtasks {
		st := c.backoffs[s]
		if st == nil {
			// The same configuration as the job's, which was validated; jitter seeded per subtask, so
			// that a run replays exactly.
			var err error
			st, err = scheduler.NewRestartStrategy(c.cfg.Restart, rand.New(rand.NewPCG(c.cfg.Seed, 2+uint64(s.Vertex)<<32|uint64(s.Index))))
			if err != nil {
				return c.restart.BackoffMillis()
			}
			if c.backoffs == nil {
				c.backoffs = make(map[ident.Subtask]scheduler.RestartStrategy)
			}
			c.backoffs[s] = st
		}
		if !sameIncident {
			st.NotifyFailure(c.now.Milliseconds(), cause)
		}
		backoff = max(backoff, st.BackoffMillis())
	}
	return backoff
}

// markLossBaseline asks, for every channel from a producer that keeps running to a subtask that restarts,
// the producer's counters now (one sample per TaskManager): what it drops from then on is this failover's
// loss. It also notes the restarted tails, whose first output ends the outage.
func (c *Core) markLossBaseline(ev *Failover) {
	restarted := make(map[ident.Subtask]bool, len(ev.Restarted))
	for _, r := range ev.Restarted {
		restarted[r] = true
	}
	var order []TaskManagerID
	byTM := make(map[TaskManagerID]*pendingSample)
	for _, r := range ev.Restarted {
		tail := true
		for _, d := range c.cfg.Job.Downstream(r) {
			if restarted[d] {
				tail = false
			}
		}
		if tail {
			ev.MarkTail(r)
		}
		for _, e := range c.cfg.Job.Vertex(r.Vertex).Inputs {
			for _, p := range graph.ProducersOf(e, int(r.Index)) {
				prod := ident.Subtask{Vertex: e.Source.ID, Index: int32(p)}
				pex := c.execs[prod]
				if restarted[prod] || pex.tm == 0 || c.tms[pex.tm].lost {
					continue
				}
				ch := Channel{Partition: pex.partition(e.Result), Subpartition: graph.SubpartitionIndex(e, p, int(r.Index))}
				ps := byTM[pex.tm]
				if ps == nil {
					ps = &pendingSample{to: pex.tm, ev: ev, consumers: make(map[Channel]ident.Subtask)}
					byTM[pex.tm] = ps
					order = append(order, pex.tm)
				}
				ps.channels = append(ps.channels, ch)
				ps.consumers[ch] = r
			}
		}
	}
	for _, tm := range order {
		ps := byTM[tm]
		c.token++
		c.samples[c.token] = ps
		c.send(tm, SampleSubpartitions{Token: c.token, Channels: ps.channels})
	}
}

// maybeRestart redeploys the subtasks of the restart plan once all of them stopped, the backoff passed, no
// suspect TaskManager is unknown, and every one of them has a usable slot.
func (c *Core) maybeRestart() {
	p := c.plan
	if p == nil {
		return
	}
	if c.status != StatusRunning {
		c.plan = nil
		return
	}
	subtasks := make([]ident.Subtask, 0, len(p.subtasks))
	for _, s := range c.subtasks {
		if p.subtasks[s] {
			subtasks = append(subtasks, s)
		}
	}
	for _, s := range subtasks {
		// Subtasks never deployed (a region waiting for its blocking inputs) have nothing to stop.
		if st := c.execs[s].state; !st.Terminal() && st != deploy.Created {
			return
		}
	}
	if c.now < p.notBefore {
		return
	}
	if len(p.suspects) > 0 {
		var names []string
		for id := range p.suspects {
			names = append(names, c.tms[id].name)
		}
		slices.Sort(names)
		c.setWaiting("restart waits for: suspect " + strings.Join(names, ", suspect "))
		return
	}
	if w := c.slotsMissing(subtasks, "restart"); w != "" {
		c.startSlotWait()
		c.setWaiting(w)
		return
	}
	// The checkpoint verified here is the one the restarted subtasks restore and the one the report names.
	restore := c.restorePoint()
	if c.needsVerification() {
		if p.verified == nil {
			if p.verify == 0 {
				p.verify = c.storage(VerifyLatest{Subtasks: subtasks}, 0)
			}
			return
		}
		restore = p.verified.cp
	}
	var restoreID *int64
	if restore != nil {
		id := restore.ID
		restoreID = &id
	}
	c.plan = nil
	c.waitingSlots = false
	c.setWaiting("")
	var attempts []ident.Attempt
	for _, s := range subtasks {
		ex := c.execs[s]
		if ex.state == deploy.Created {
			continue // never ran: its first attempt is still to come
		}
		if ex.state == deploy.Finished {
			// A finished producer keeps its partitions until now: its new attempt produces them again.
			c.send(ex.tm, ReleasePartitions{Attempt: ex.attempt})
		}
		// The new attempt restores restore: what earlier attempts counted as lost and this restore rolls
		// back is counted again by this failover (see LossLedger).
		c.ledger.RollBack(s, restoreID)
		c.rollBackPendingJoins(s, restoreID)
		ex.attempt.Number++
		// Under task failover the new attempt takes over its predecessor's partitions (their ids stay);
		// otherwise it makes its own.
		if ex.taskRestart = c.cfg.Failover == scheduler.TaskFailover && !p.fallback; !ex.taskRestart {
			ex.owner = ex.attempt.Number
		}
		ex.replaying = ex.taskRestart
		if !ex.taskRestart {
			ex.replayRetried = false
		}
		ex.state = deploy.Created
		ex.in, ex.out = 0, 0
		ex.watermark, ex.hasWatermark, ex.metrics = 0, false, nil
		ex.times = TimeRates{}
		ex.tm = 0
		ex.createdBy = p.firstRestarting(s)
		ex.restore = &restoreChoice{cp: restore}
		attempts = append(attempts, ex.attempt)
	}
	for _, ev := range p.events {
		if restoreID != nil {
			id := *restoreID
			ev.CheckpointRestored = &id
		}
		for _, s := range subtasks {
			ev.Await(s)
		}
	}
	c.ready.Changed = true
	if c.coord != nil {
		r, err := c.coord.TasksRestarted(c.ms(), attempts, errors.New("failover"))
		if err != nil {
			c.fail(fmt.Errorf("restart: %w", err))
			return
		}
		c.carryOut(r)
	}
	c.release(c.sched.OnRegionsRestarted(c.topo.RegionsOf(subtasks)))
}

// firstRestarting returns the earliest failover of the plan that restarts s: the failure that caused its
// restart, which its new attempt's loss belongs to. Later failovers merged into the plan restart s too, but
// cost nothing more on its channels.
func (p *restartPlan) firstRestarting(s ident.Subtask) *Failover {
	for _, ev := range p.events {
		if slices.Contains(ev.Restarted, s) {
			return ev
		}
	}
	return nil
}

// slotsMissing returns the sentence saying what the subtasks' deployment (what: "restart", "deployment")
// waits for, or "" when every logical slot they need is bound to a TaskManager that has the job set up.
func (c *Core) slotsMissing(subtasks []ident.Subtask, what string) string {
	missing := map[int]bool{}
	var setup []string
	for _, s := range subtasks {
		i := c.execs[s].slot
		if c.slots[i] == nil {
			missing[i] = true
		} else if _, ok := c.usable(i); !ok && !slices.Contains(setup, c.slots[i].Name) {
			setup = append(setup, c.slots[i].Name)
		}
	}
	if len(missing) == 0 {
		if len(setup) == 0 {
			return ""
		}
		slices.Sort(setup)
		return fmt.Sprintf("%s waits for the job's setup on %s", what, strings.Join(setup, ", "))
	}
	var why []string
	for i := range missing {
		if r := c.slotLost[i]; r != "" && !slices.Contains(why, r) {
			why = append(why, r)
		}
	}
	slices.Sort(why)
	plural := "s"
	if len(missing) == 1 {
		plural = ""
	}
	w := fmt.Sprintf("%s waits for %d slot%s", what, len(missing), plural)
	if len(why) > 0 {
		w += ": " + strings.Join(why, "; ")
	}
	return w
}

func (c *Core) setWaiting(w string) {
	if w != c.waiting {
		c.waiting = w
		c.ready.Changed = true
	}
}

// checkSlotWait fails the job when it has waited for slots longer than SlotWaitTimeout.
func (c *Core) checkSlotWait() {
	if !c.waitingSlots || c.status != StatusRunning || c.now < c.slotWaitSince+c.cfg.SlotWaitTimeout {
		return
	}
	w := c.waiting
	if w == "" {
		w = c.slotsMissing(c.subtasks, "deployment")
	}
	c.fail(fmt.Errorf("%s, for %v: add TaskManagers or slots", w, c.cfg.SlotWaitTimeout))
}

// onTaskManagerLost fails, in one failover event, every attempt the TaskManager ran (nothing will report
// them) and every finished one whose blocking partition it held while a consumer still needs it; unbinds its
// slots and asks for as many; answers the samples sent to it as missing.
func (c *Core) onTaskManagerLost(e TaskManagerLost) {
	tm := c.tms[e.TaskManager]
	if tm == nil || tm.lost {
		return
	}
	tm.lost, tm.lostReason = true, e.Reason
	c.ready.Changed = true
	c.invalidateVerification() // its slots may be the plan's: a verification in flight is for a plan that changes
	if e.Leaving {
		c.log(LogWarn, "TaskManager leaving", "taskmanager", tm.name, "reason", e.Reason)
	} else {
		c.log(LogWarn, "TaskManager lost", "taskmanager", tm.name, "reason", e.Reason)
	}
	tokens := make([]uint64, 0)
	for t, p := range c.samples {
		if p.to == e.TaskManager {
			tokens = append(tokens, t)
		}
	}
	slices.Sort(tokens)
	for _, t := range tokens {
		p := c.samples[t]
		delete(c.samples, t)
		c.resolveSample(p, SubpartitionsSampled{Token: t, Missing: true})
	}
	unbound := 0
	for i, g := range c.slots {
		if g != nil && g.TaskManager == e.TaskManager {
			c.slots[i] = nil
			c.slotLost[i] = fmt.Sprintf("TaskManager %s lost (%s)", tm.name, e.Reason)
			if e.Leaving {
				c.slotLost[i] = fmt.Sprintf("TaskManager %s left (%s)", tm.name, e.Reason)
			}
			unbound++
		}
	}
	// A TaskManager a consumer's failure made a suspect: that failure was the first sign of this loss.
	suspected := c.plan != nil && c.plan.suspects[e.TaskManager]
	if c.plan != nil {
		delete(c.plan.suspects, e.TaskManager)
	}
	var failed, planned []ident.Subtask
	for _, s := range c.subtasks {
		ex := c.execs[s]
		if ex.tm != e.TaskManager {
			continue
		}
		if c.restarting(s) {
			planned = append(planned, s)
		}
		switch {
		case ex.state == deploy.Created || (ex.state.Terminal() && !c.blockingNeeded(ex)):
			continue
		case c.status != StatusRunning:
			ex.state = deploy.Canceled // being cancelled with the job: it ended with its TaskManager
			continue
		}
		ex.state = deploy.Failed
		if c.coord != nil {
			c.carryOut(c.coord.TaskFailed(c.ms(), ex.attempt, errors.New(e.what(tm.name))))
		}
		if c.plan == nil || !c.plan.subtasks[s] {
			failed = append(failed, s)
		}
	}
	if c.status == StatusRunning && unbound > 0 {
		c.ready.Slots = append(c.ready.Slots, SlotChange{Request: unbound})
	}
	if len(failed) > 0 {
		var set []ident.Subtask
		strategy, fs := c.cfg.Failover.String(), c.failover
		if c.fallback != nil {
			// The TaskManager's in-flight logs and determinant logs are gone with it.
			strategy, fs = "region", c.fallback
		}
		for _, f := range failed {
			for _, r := range fs.TasksToRestart(f) {
				if !slices.Contains(set, r) {
					set = append(set, r)
				}
			}
		}
		if c.fallback != nil {
			set = c.widenForFallback(set, fs)
		}
		slices.SortFunc(set, compareSubtasks)
		cause := errors.New(e.what(tm.name))
		c.startFailoverOf(&failed[0], failed, tm.name, cause, set, strategy, suspected)
		if c.fallback != nil && c.plan != nil {
			c.plan.fallback = true
			gone := " was lost"
			if e.Leaving {
				gone = " left"
			}
			c.plan.events[len(c.plan.events)-1].Fallback = "TaskManager " + tm.name + gone + ", and its in-flight and determinant logs with it"
		}
	} else if len(planned) > 0 && c.status == StatusRunning {
		// A failover in progress restarts this TaskManager's subtasks already: the failures that started it
		// (a consumer's connection to it closing, say) were the first signs of this loss. The event says so.
		ev := c.plan.events[len(c.plan.events)-1]
		if ev.TaskManager == "" {
			ev.TaskManager = tm.name
			c.ready.Changed = true
		}
	}
	c.checkDone()
}

// blockingNeeded reports whether a finished attempt's blocking partition is still to be read: a consumer
// has not finished.
func (c *Core) blockingNeeded(ex *execution) bool {
	if ex.state != deploy.Finished {
		return false
	}
	for _, e := range c.cfg.Job.Vertex(ex.attempt.Vertex).Outputs {
		if e.PartitionType != graph.Blocking {
			continue
		}
		for _, k := range graph.ConsumersOf(e, int(ex.attempt.Index)) {
			if c.execs[ident.Subtask{Vertex: e.Target.ID, Index: int32(k)}].state != deploy.Finished {
				return true
			}
		}
	}
	return false
}

func (c *Core) onTaskManagerAlive(e TaskManagerAlive) {
	if c.plan != nil {
		delete(c.plan.suspects, e.TaskManager)
	}
	if c.waiting != "" && strings.HasPrefix(c.waiting, "restart waits for: suspect") {
		c.setWaiting("")
	}
}

func compareSubtasks(a, b ident.Subtask) int {
	if a.Vertex != b.Vertex {
		return int(a.Vertex) - int(b.Vertex)
	}
	return int(a.Index) - int(b.Index)
}

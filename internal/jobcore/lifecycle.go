package jobcore

import (
	"fmt"
	"math"
	"slices"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

func (c *Core) onTaskUpdate(u TaskUpdate) {
	ex := c.current(u.Attempt)
	if ex == nil || ex.state.Terminal() {
		c.log(LogDebug, "ignoring update from a replaced attempt", "attempt", u.Attempt, "state", u.State)
		return
	}
	ex.state = u.State
	c.ready.Changed = true
	if f := u.Failure; f != nil && f.Injected && !c.restarting(u.Attempt.Subtask) && !slices.Contains(c.fired, f.Injection) {
		// Fired once for the job, wherever the next attempts run: later deployments carry it. One that
		// failed an attempt a failover was stopping already caused no failover of its own: it stays out, so
		// that it fires again in the next attempt and every spec makes its failover.
		c.fired = append(c.fired, f.Injection)
		slices.Sort(c.fired)
	}
	if u.State.Terminal() {
		// The final counts come with the update: the TaskManager forgets an attempt once it ended.
		ex.in, ex.out = u.RecordsIn, u.RecordsOut
		ex.setWatermark(u.Watermark)
		if u.Metrics != nil {
			ex.metrics = u.Metrics
		}
	}
	switch u.State {
	case deploy.Running:
		if ex.replaying && c.cfg.Job.Vertex(u.Attempt.Vertex).IsSource() {
			ex.replaying, ex.replayRetried = false, false // a source replays no input: it rewound and took its partitions over
		}
		for _, ev := range c.history.Events() {
			ev.Running(u.Attempt.Subtask, c.wall(c.now))
		}
		// The last subtask to run again lets a due checkpoint be triggered at once, in this step.
		c.tickCoordinator()
	case deploy.Finished:
		if c.coord != nil {
			c.carryOut(c.coord.TaskFinished(c.ms(), u.Attempt))
		}
		if c.status == StatusRunning {
			for _, e := range c.cfg.Job.Vertex(u.Attempt.Vertex).Outputs {
				if e.PartitionType == graph.Blocking {
					c.release(c.sched.OnResultFinished(e.Result, u.Attempt.Subtask))
				}
			}
		}
	case deploy.Failed:
		if c.coord != nil {
			c.carryOut(c.coord.TaskFailed(c.ms(), u.Attempt, u.Failure.Err()))
		}
		c.onFailed(ex, u.Failure)
	}
	takenOver := c.cfg.Failover == scheduler.TaskFailover && c.status == StatusRunning &&
		!(c.plan != nil && c.plan.fallback && c.plan.subtasks[u.Attempt.Subtask])
	if (u.State == deploy.Failed || u.State == deploy.Canceled) && !takenOver {
		// Released only now, after the failover cancelled its consumers: they must not wait on its data,
		// and must not report its disappearance as failures of their own. Under task failover the next
		// attempt takes them over instead, its consumers reading on.
		c.send(ex.tm, ReleasePartitions{Attempt: ex.partitionOwner()})
	}
	if u.State.Terminal() {
		// Also after a failure: a second failing subtask may be the last one to stop.
		c.checkDone()
	}
}

// onFailed answers a failed attempt: a refused deployment fails the job (it would be refused again); a
// failure naming an unreachable peer makes that peer a suspect; any other starts a failover, unless the
// attempt was being cancelled for one already.
func (c *Core) onFailed(ex *execution, f *Failure) {
	if c.status != StatusRunning {
		return
	}
	s := ex.attempt.Subtask
	cause := f.Err()
	if cause == nil {
		cause = fmt.Errorf("failed without a reason")
	}
	if f != nil && f.Kind == FailureDeploy {
		c.fail(fmt.Errorf("deploy %s: %w", c.name(s), cause))
		return
	}
	if c.restarting(s) {
		return
	}
	// A failure that names a peer already lost or suspected is another sign of that TaskManager's loss.
	sameIncident := false
	if f != nil && f.PeerDataAddress != "" {
		for id, tm := range c.tms {
			if tm.dataAddress == f.PeerDataAddress && (tm.lost || (c.plan != nil && c.plan.suspects[id])) {
				sameIncident = true
			}
		}
	}
	set, strategy := c.failover.TasksToRestart(s), c.cfg.Failover.String()
	if why, fs := c.taskFailoverFallback(s, f, cause); why != "" {
		set, strategy = c.widenForFallback(fs.TasksToRestart(s), fs), "region"
		c.log(LogWarn, "task failover falls back to region failover", "failed", c.name(s), "why", why)
		defer func() {
			if c.plan != nil {
				c.plan.fallback = true
				c.plan.events[len(c.plan.events)-1].Fallback = why
			}
		}()
	}
	if ex.replaying && strategy == c.cfg.Failover.String() {
		ex.replayRetried = true
	}
	c.startFailoverOf(&s, nil, "", cause, set, strategy, sameIncident)
	if f != nil && f.PeerDataAddress != "" && c.plan != nil {
		for id, tm := range c.tms {
			if tm.dataAddress == f.PeerDataAddress && !tm.lost && !c.plan.suspects[id] {
				c.plan.suspects[id] = true
				c.send(id, Probe{})
			}
		}
	}
}

// taskFailoverFallback says why subtask s's failure f (of cause) cannot be recovered by task failover, and
// by which strategy it is then (why "" when it can, or the job is not under task failover):
//   - s itself failed while a task failover restarted it and it still replayed: its producers' in-flight
//     logs could not give it its input again, its own partitions could not be taken over, its replay
//     diverged, its determinant log was dropped, or it is a source that cannot replay. Another replay from
//     the same logs would fail the same way, again and again until the restart strategy gave up. Which of
//     them it was is f.Replay, which the TaskManager told from the error's types (the text is only for
//     people: a wrapped message may contain any words). When a log was incomplete, the producers restart
//     too (fallbackUpstream). A failure of the replay's own (an exception in a user function, an
//     injected failure) has no type: the logs are as they were, and it fails over by task once more
//     (replayRetried); a second one before a replay is done falls back, since an untyped failure may be
//     one that repeats (a connection lost during the replay).
//   - a restart in progress falls back already.
//
// Its producers and consumers restarting or replaying too is no reason: a takeover leaves the stream its
// readers have as it is (network.ResultPartition.Takeover), so a consumer replays the very buffers it
// recorded whatever its producers do meanwhile, and a producer's new attempt writes on after what its
// consumers have, whatever they do.
func (c *Core) taskFailoverFallback(s ident.Subtask, f *Failure, cause error) (string, scheduler.FailoverStrategy) {
	if c.fallback == nil {
		return "", nil
	}
	if c.plan != nil && c.plan.fallback {
		return "a failover in progress restarts by region already", c.fallback
	}
	if c.execs[s].replaying {
		var replay ReplayFailure
		if f != nil {
			replay = f.Replay
		}
		switch replay {
		case ReplayLogIncomplete:
			// What was missing (a barrier the log no longer holds, or what it dropped past its budget) is
			// in the cause, from the log itself.
			return "an in-flight log its replay needs was incomplete, so its producers restart too: " + cause.Error(), c.fallbackUpstream
		case ReplayDiverged:
			return "its replay diverged from the failed attempt: " + cause.Error(), c.fallback
		case ReplaySourceCannotReplay:
			return "it is a source that cannot replay: " + cause.Error(), c.fallback
		case ReplayDeterminantsBroken:
			return "its determinant log does not reach back to the restored checkpoint (dropped past its bound, or without its mark), so there is nothing to replay: " + cause.Error(), c.fallback
		}
		if !c.execs[s].replayRetried {
			// A failure of the replay's own (an exception in a user function, an injected failure) that no
			// log caused: the logs are as they were, and another replay from the same checkpoint can hold.
			return "", nil
		}
		return fmt.Sprintf("it failed twice while restarting under task failover, before its replay was done: %v", cause), c.fallback
	}
	return "", nil
}

// widenForFallback returns set, a fallback's restart, with the region failover restart (by fs) of every
// subtask a restart in progress holds. A fallback makes every subtask of the plan restart by region (new
// partitions, no replay), also one a task failover had put in it alone: its consumers must then restart
// with it, or they would read its old partition, which no attempt writes any more, for ever.
func (c *Core) widenForFallback(set []ident.Subtask, fs scheduler.FailoverStrategy) []ident.Subtask {
	if c.plan == nil || c.plan.fallback {
		return set // none, or its subtasks' regions are in it already
	}
	for _, p := range c.subtasks {
		if !c.plan.subtasks[p] {
			continue
		}
		for _, r := range fs.TasksToRestart(p) {
			if !slices.Contains(set, r) {
				set = append(set, r)
			}
		}
	}
	slices.SortFunc(set, compareSubtasks)
	return set
}

func (c *Core) onCounters(e Counters) {
	for _, n := range e.Counts {
		if ex := c.current(n.Attempt); ex != nil && !ex.state.Terminal() {
			ex.in, ex.out = n.In, n.Out
			ex.setWatermark(n.Watermark)
			ex.times, ex.logBytes = n.Times, n.InflightLogBytes
			if n.Metrics != nil {
				ex.metrics = n.Metrics
			}
		}
	}
}

// setWatermark records a reported watermark; math.MinInt64 (none) leaves what was known.
func (ex *execution) setWatermark(w int64) {
	if w != math.MinInt64 {
		ex.watermark, ex.hasWatermark = w, true
	}
}

// fail moves the job to FAILING and cancels every subtask that is still running.
func (c *Core) fail(err error) {
	if c.status != StatusRunning {
		return
	}
	c.status = StatusFailing
	c.err = err
	c.ready.Changed = true
	c.log(LogError, "job failing", "err", err)
	c.stopCheckpoints()
	c.cancelAll()
	c.checkDone()
}

// stopCheckpoints ends checkpointing as the job fails or is cancelled, before any cancellation is sent:
// the checkpoints still collecting acknowledgements can never complete, and are aborted now, so that their
// aborts reach the tasks still running ahead of their cancellations (on the same session, in order) and a
// transactional sink can abort what it prepared for them as it closes. Each checkpoint is aborted or
// completed once, by the coordinator, so no abort can follow a completion of the same id or precede one.
// A checkpoint whose commit is out may complete: see cancelAll.
func (c *Core) stopCheckpoints() {
	if c.coord != nil {
		c.carryOut(c.coord.Stop(c.ms()))
	}
}

// cancelJob cancels the job in any state: before Start it ends at once; while running, what runs is
// cancelled; while failing or cancelling already, nothing more is to do.
func (c *Core) cancelJob() {
	switch c.status {
	case StatusCreated:
		c.status = StatusRunning // so that checkDone ends it, every subtask being cancelled below
		fallthrough
	case StatusRunning:
		c.status = StatusCanceling
		c.ready.Changed = true
		c.log(LogInfo, "job canceling")
		c.stopCheckpoints()
		c.cancelAll()
		c.checkDone()
	}
}

// cancelAll cancels every subtask that has not stopped. One that was never deployed (a consumer waiting
// for its blocking inputs, a restart waiting out its backoff or for a slot) has no task to hear the
// cancellation and send an update: it is CANCELED here, or the job would wait for it forever.
//
// While a checkpoint's commit is out, the cancellations wait for its answer (bounded by the storage's
// deadline; cancelHeld): a commit that succeeds completes the checkpoint, which a restore would take, and
// its completion must reach the tasks before their cancellations, so that a transactional sink commits
// what it prepared for it rather than leaving it open.
func (c *Core) cancelAll() {
	c.plan = nil
	c.waitingSlots, c.waiting = false, ""
	clear(c.scheduled)
	for _, s := range c.subtasks {
		if ex := c.execs[s]; ex.state == deploy.Created {
			ex.state = deploy.Canceled
		}
	}
	if c.committing() {
		if !c.cancelHeld {
			c.cancelHeld = true
			c.log(LogInfo, "cancellations wait for a checkpoint's commit, so that its completion reaches the tasks first")
		}
		return
	}
	c.sendCancels()
}

// sendCancels sends a cancellation to every deployed subtask that has not stopped.
func (c *Core) sendCancels() {
	c.cancelHeld = false
	for _, s := range c.subtasks {
		if ex := c.execs[s]; ex.state != deploy.Created && !ex.state.Terminal() {
			c.send(ex.tm, CancelTask{Attempt: ex.attempt})
		}
	}
}

// checkDone ends the job when every subtask is in a terminal state: FINISHED when all finished and no
// restart is pending, FAILED or CANCELED when the job was failing or cancelling; and when no checkpoint's
// commit is out (its answer calls checkDone again).
func (c *Core) checkDone() {
	for _, ex := range c.execs {
		if !ex.state.Terminal() {
			return
		}
		if c.status == StatusRunning && ex.state != deploy.Finished {
			return // stopped for a restart
		}
	}
	var end Status
	switch c.status {
	case StatusRunning:
		if c.plan != nil {
			return
		}
		end = StatusFinished
	case StatusFailing:
		end = StatusFailed
	case StatusCanceling:
		end = StatusCanceled
	default:
		return
	}
	if c.coord != nil {
		// Checkpoints still collecting acknowledgements are given up and their data discarded. One being
		// committed is waited for: once its commit answers, it is complete (a restore would take it) and
		// the job's result must say so.
		c.carryOut(c.coord.Stop(c.ms()))
		if c.committing() {
			return
		}
	}
	c.status = end
	c.ended = c.wall(c.now)
	c.ready.Changed = true
	c.waitingSlots, c.waiting = false, ""
	c.log(LogInfo, "job ended", "status", c.status, "wall", c.now)
}

// committing reports whether a checkpoint's commit is out or queued (bounded by the storage's timeout,
// which answers it with an error).
func (c *Core) committing() bool {
	for _, r := range c.ops {
		if _, ok := r.(CommitMetadata); ok {
			return true
		}
	}
	for _, op := range c.queued {
		if _, ok := op.Request.(CommitMetadata); ok {
			return true
		}
	}
	return false
}

// onObservation adds what a restarted attempt saw to the failover that deployed it. A channel it joined
// is measured against its producer's counters: a second sample, whose answer completes the loss.
func (c *Core) onObservation(o Observation) {
	ex := c.current(o.Attempt)
	if ex != nil && o.Kind == deploy.ReplayDone {
		ex.replaying, ex.replayRetried = false, false
		return
	}
	if o.Kind == deploy.DuplicatesDropped {
		// Reported by the restarted producer, of one of its subpartitions: the failover is the one that
		// restarted it.
		prod := o.Channel.Partition.Producer.Subtask
		consumer := c.consumerOf(prod, o.Channel)
		if pex := c.execs[prod]; pex != nil && pex.createdBy != nil {
			pex.createdBy.AddReplay(ChannelReplay{Producer: prod, Consumer: consumer, DuplicatesDropped: o.Records})
		}
		return
	}
	if ex != nil && o.Kind == deploy.InputEnded {
		// The attempt waits for a checkpoint covering its end; once every input ended, the final
		// checkpoint is triggered at once.
		if c.coord != nil {
			c.carryOut(c.coord.TaskInputEnded(c.ms(), o.Attempt))
		}
		return
	}
	if ex == nil || ex.createdBy == nil {
		return
	}
	ev := ex.createdBy
	switch o.Kind {
	case deploy.ChannelReplayed:
		ev.AddReplay(ChannelReplay{Producer: o.Channel.Partition.Producer.Subtask, Consumer: o.Attempt.Subtask, RecordsReplayed: o.Records})
	case deploy.ChannelJoined:
		cl := ChannelLoss{Producer: o.Channel.Partition.Producer.Subtask, Consumer: o.Attempt.Subtask,
			RecordsLost: o.Lost, PartialRecordsSkipped: o.PartialSkipped}
		// Checkpoints up to skipUpTo hold none of the attempt's state; those it took before it joined this
		// channel record the channel before the gap. A restore of any of them counts the gap again.
		join := &pendingJoin{attempt: o.Attempt, skipUpTo: max(ex.skipUpTo, o.SnapshotBefore), loss: cl}
		pex := c.current(o.Channel.Partition.Producer)
		if !c.hasBaseline(ev, o.Channel) || pex == nil || pex.tm == 0 || c.tms[pex.tm].lost {
			ev.TakeBaseline(o.Channel)
			c.joined(ev, join) // no baseline or no producer to ask: the dropped counts are unknown, 0
			return
		}
		// The baseline's sample, if still unanswered, went to the same TaskManager earlier: it is answered
		// first, so the baseline is there when this one answers.
		c.token++
		c.samples[c.token] = &pendingSample{to: pex.tm, ev: ev, join: join, channels: []Channel{o.Channel}}
		c.send(pex.tm, SampleSubpartitions{Token: c.token, Channels: []Channel{o.Channel}})
	case deploy.FirstOutput:
		ev.FirstOutput(o.Attempt.Subtask, c.wall(o.At))
	}
}

// joined counts a channel's loss in its failover and in the ledger.
func (c *Core) joined(ev *Failover, j *pendingJoin) {
	ev.Add(j.loss)
	c.ledger.Join(j.attempt, j.skipUpTo, ev, j.loss)
	c.ready.Changed = true
}

// rollBackPendingJoins is RollBack for the joins of subtask s still waiting for their producer's counters:
// an answer that comes after s restarted from restoredFrom must not count a gap that restore rolled back.
func (c *Core) rollBackPendingJoins(s ident.Subtask, restoredFrom *int64) {
	for _, p := range c.samples {
		if j := p.join; j != nil && j.attempt.Subtask == s && rolledBack(restoredFrom, j.skipUpTo) {
			j.rolledBack = true
		}
	}
}

func (c *Core) onSampled(e SubpartitionsSampled) {
	p := c.samples[e.Token]
	if p == nil {
		c.log(LogDebug, "ignoring an unknown sample", "token", e.Token)
		return
	}
	delete(c.samples, e.Token)
	c.resolveSample(p, e)
}

// resolveSample completes a baseline or a join with the sample's answer (Missing: the counters are unknown,
// so a baseline is not taken and a join's dropped counts are 0).
func (c *Core) resolveSample(p *pendingSample, e SubpartitionsSampled) {
	got := make(map[Channel]SubpartitionCounters, len(e.Samples))
	if !e.Missing {
		for _, s := range e.Samples {
			got[s.Channel] = s.Counters
		}
	}
	if j := p.join; j != nil {
		base, ok := p.ev.TakeBaseline(p.channels[0]) // each channel is counted once
		if j.rolledBack {
			return
		}
		if now, got := got[p.channels[0]]; ok && got {
			j.loss.RecordsDropped = now.RecordsDropped - base.RecordsDropped
			j.loss.BuffersDropped = now.BuffersDropped - base.BuffersDropped
		}
		c.joined(p.ev, j)
		return
	}
	for _, ch := range p.channels {
		if n, ok := got[ch]; ok {
			p.ev.SetBaseline(ch, p.consumers[ch], n)
		}
	}
}

// hasBaseline reports whether failover ev has, or is waiting for, the baseline of channel ch.
func (c *Core) hasBaseline(ev *Failover, ch Channel) bool {
	if _, ok := ev.baseline[ch]; ok {
		return true
	}
	for _, p := range c.samples {
		if p.ev == ev && p.join == nil && slices.Contains(p.channels, ch) {
			return true
		}
	}
	return false
}

// consumerOf returns the consumer subtask that reads subpartition ch.Subpartition of producer prod's
// partition of ch's result (prod itself when the graph has no such channel).
func (c *Core) consumerOf(prod ident.Subtask, ch Channel) ident.Subtask {
	for _, e := range c.cfg.Job.Vertex(prod.Vertex).Outputs {
		if e.Result != ch.Partition.Result {
			continue
		}
		if cs := graph.ConsumersOf(e, int(prod.Index)); ch.Subpartition >= 0 && ch.Subpartition < len(cs) {
			return ident.Subtask{Vertex: e.Target.ID, Index: int32(cs[ch.Subpartition])}
		}
	}
	return prod
}

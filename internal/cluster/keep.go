package cluster

import (
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// Task continuity (docs/cluster.md §7): with TaskManagerConfig.KeepTasks, a TaskManager whose session with
// its JobManager ends for any reason but its own shutdown keeps its tasks running instead of cancelling
// them. Its jobs are then kept: what their tasks say to the JobManager is held back, and the next
// registration reports each kept job (protocol.KeptJob) to the JobManager it registers with, which adopts
// the job (the TaskManager sends what it held since the report and carries on) or drops it (the
// TaskManager cancels its tasks and releases it).
//
// What is held: state changes and observations only, since the last report (a report supersedes what was
// held before it). Checkpoint acknowledgements and declines are dropped (the next leader aborts every
// checkpoint in flight), and so are counters (sent afresh every countersInterval).

// maxHeld bounds the messages held back for one kept job. A job's tasks change state a few times per
// attempt and no attempt is deployed while the job is kept, so the bound is not reached in practice;
// past it the TaskManager gives the job up (cancels its tasks), since it could no longer tell the next
// leader all that happened to them.
const maxHeld = protocol.SendQueue

// keptJob is a job kept running without a JobManager, not yet adopted by one.
type keptJob struct {
	held     []any
	overflow bool
}

// jobState is what a TaskManager knows of one job's checkpoints and of the current attempts of its
// subtasks that run here: what a report of the job as kept says. Guarded by the TaskManager's outMu.
type jobState struct {
	// checkpoint is the highest checkpoint id heard of for the job.
	checkpoint int64
	// attempts holds the newest attempt of each subtask deployed here: bounded by the job's subtasks.
	attempts map[ident.Subtask]*jobcore.KeptTask
}

// deployed records an attempt deployed here as its subtask's current one.
func (st *jobState) deployed(dep jobcore.Deployment) {
	a := dep.Info.Attempt
	if cur := st.attempts[a.Subtask]; cur != nil && cur.Attempt.Number > a.Number {
		return
	}
	if st.attempts == nil {
		st.attempts = make(map[ident.Subtask]*jobcore.KeptTask)
	}
	st.attempts[a.Subtask] = &jobcore.KeptTask{Attempt: a, PartitionAttempt: dep.PartitionAttempt, State: deploy.Deploying,
		Replaying: dep.Replay}
	st.checkpoint = max(st.checkpoint, dep.SkipCheckpointsUpTo)
}

// note records what a message of the job's tasks says of their state or of checkpoints.
func (st *jobState) note(body any) {
	switch m := body.(type) {
	case jobcore.TaskUpdate:
		if cur := st.attempts[m.Attempt.Subtask]; cur != nil && cur.Attempt == m.Attempt {
			cur.State = m.State
			if m.Failure != nil {
				cur.Failure = m.Failure.Message
			}
		}
	case jobcore.Observation:
		if cur := st.attempts[m.Attempt.Subtask]; cur != nil && cur.Attempt == m.Attempt && m.Kind == deploy.ReplayDone {
			cur.Replaying = false
		}
	case jobcore.CheckpointAck:
		st.checkpoint = max(st.checkpoint, m.ID)
	case jobcore.CheckpointDecline:
		st.checkpoint = max(st.checkpoint, m.ID)
	}
}

// report lists the current attempts in subtask order.
func (st *jobState) report() []protocol.KeptTask {
	out := make([]protocol.KeptTask, 0, len(st.attempts))
	for _, t := range st.attempts {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b protocol.KeptTask) int {
		if a.Attempt.Vertex != b.Attempt.Vertex {
			return int(a.Attempt.Vertex) - int(b.Attempt.Vertex)
		}
		return int(a.Attempt.Index) - int(b.Attempt.Index)
	})
	return out
}

// heard records a checkpoint id the JobManager sent for job j.
func (tm *TaskManager) heard(j *tmJob, id int64) {
	tm.outMu.Lock()
	j.state.checkpoint = max(j.state.checkpoint, id)
	tm.outMu.Unlock()
}

// emit sends a message of job j's tasks to the JobManager through the current session, holds it back
// while the job is kept, or drops it between sessions (a job that is not kept then has no tasks left).
func (tm *TaskManager) emit(j *tmJob, body any) {
	tm.outMu.Lock()
	defer tm.outMu.Unlock()
	j.state.note(body)
	if k := tm.kept[j.id]; k != nil {
		switch body.(type) {
		case jobcore.TaskUpdate, jobcore.Observation:
			if len(k.held) < maxHeld {
				k.held = append(k.held, body)
			} else if !k.overflow {
				k.overflow = true
				tm.log.Warn("too many messages held back for a kept job: giving its tasks up", "job", j.setup.Name, "held", maxHeld)
				tm.wg.Go(func() { tm.dropKept(j.id, "too many messages held back") }) // not under outMu
			}
		}
		return
	}
	if tm.out == nil {
		return
	}
	if err := tm.out.Send(protocol.Envelope{Job: j.id, Body: body}); err != nil {
		tm.log.Debug("message not sent: the session ended", "message", fmt.Sprintf("%T", body), "err", err)
	}
}

// keepJobs keeps every job set up here running without a JobManager: called when a session ends and the
// tasks stay.
func (tm *TaskManager) keepJobs() (n int) {
	tm.mu.Lock()
	ids := make([]protocol.JobID, 0, len(tm.jobs))
	for id := range tm.jobs {
		ids = append(ids, id)
	}
	tm.mu.Unlock()
	tm.outMu.Lock()
	defer tm.outMu.Unlock()
	tm.out = nil
	for _, id := range ids {
		if tm.kept[id] == nil {
			tm.kept[id] = &keptJob{}
		}
	}
	return len(tm.kept)
}

// Kept returns how many jobs the TaskManager keeps running without a JobManager, not yet adopted.
func (tm *TaskManager) Kept() int {
	tm.outMu.Lock()
	defer tm.outMu.Unlock()
	return len(tm.kept)
}

// keptReport makes the report of every kept job for a registration and forgets what was held back for
// them: the report says it all. Jobs whose held messages overflowed are left out (they are being given up).
func (tm *TaskManager) keptReport() []protocol.KeptJob {
	tm.outMu.Lock()
	defer tm.outMu.Unlock()
	var out []protocol.KeptJob
	for id, k := range tm.kept {
		j := tm.job(id)
		if j == nil || k.overflow {
			continue
		}
		k.held = nil
		kj := protocol.KeptJob{Job: id, Setup: j.setup, Checkpoint: j.state.checkpoint, Tasks: j.state.report()}
		if sp := j.build.Savepoint; sp != nil {
			kj.Restored = sp.Checkpoint.ID
		}
		out = append(out, kj)
	}
	slices.SortFunc(out, func(a, b protocol.KeptJob) int { return slices.Compare(a.Job[:], b.Job[:]) })
	return out
}

// attach makes s the session the tasks' messages go through.
func (tm *TaskManager) attach(s protocol.Session) {
	tm.outMu.Lock()
	tm.out = s
	tm.outMu.Unlock()
}

// detach ends the tasks' use of session s (if it is still theirs).
func (tm *TaskManager) detach(s protocol.Session) {
	tm.outMu.Lock()
	if tm.out == s {
		tm.out = nil
	}
	tm.outMu.Unlock()
}

// adopt carries on with a kept job under the current session: what was held back since the report goes
// first, in order.
func (tm *TaskManager) adopt(id protocol.JobID) {
	tm.outMu.Lock()
	defer tm.outMu.Unlock()
	k := tm.kept[id]
	if k == nil {
		return
	}
	delete(tm.kept, id)
	if k.overflow {
		return // being given up: its tasks' cancellations reach the leader as failures
	}
	tm.log.Info("the JobManager took over a job this TaskManager kept running", "job", id, "held", len(k.held))
	for _, body := range k.held {
		if tm.out == nil {
			return
		}
		if err := tm.out.Send(protocol.Envelope{Job: id, Body: body}); err != nil {
			return
		}
	}
}

// dropKept gives a kept job up: the job is forgotten at once (a SetupJob of the same run that follows,
// from a leader that restarts its tasks here, sets it up afresh), its tasks are cancelled, and once they
// ended the job is released, on a goroutine the TaskManager owns.
func (tm *TaskManager) dropKept(id protocol.JobID, reason string) {
	tm.outMu.Lock()
	delete(tm.kept, id)
	tm.outMu.Unlock()
	tm.mu.Lock()
	j := tm.jobs[id]
	delete(tm.jobs, id)
	var running []<-chan struct{}
	for k, t := range tm.tasks {
		if k.job == id {
			t.Cancel()
			running = append(running, t.Done())
		}
	}
	tm.mu.Unlock()
	if j == nil {
		return
	}
	tm.log.Warn("giving up the tasks of a job kept running without a JobManager", "job", id, "tasks", len(running), "reason", reason)
	tm.wg.Go(func() {
		for _, done := range running {
			<-done
		}
		tm.release(j)
	})
}

// DropKept gives up every kept job (the grace period without a JobManager that took them over ran out):
// it cancels their tasks, waits for them and releases the jobs.
func (tm *TaskManager) DropKept(reason string) {
	tm.outMu.Lock()
	ids := make([]protocol.JobID, 0, len(tm.kept))
	for id := range tm.kept {
		ids = append(ids, id)
	}
	tm.outMu.Unlock()
	for _, id := range ids {
		tm.dropKept(id, reason)
	}
}

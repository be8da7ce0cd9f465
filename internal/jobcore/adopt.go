package jobcore

import (
	"errors"
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// Task continuity (docs/cluster.md §7): when the leader is lost, its TaskManagers keep the job's tasks
// running and report them to the next leader (KeptTask, per TaskManager a KeptReport). Reconcile decides
// whether the reports describe the whole job, running; if they do, the next leader's core starts from
// them (Config.Adopt) instead of deploying: it deploys nothing, aborts the checkpoints the lost leader
// left in flight, tells every task of the newest completed checkpoint again (a completion the lost leader
// recorded but did not send), and continues the checkpoint ids above every one a task heard of.

// KeptTask is the current attempt of one subtask as a TaskManager that kept it running reports it.
type KeptTask struct {
	Attempt ident.Attempt
	// PartitionAttempt is the attempt number in the ids of the subtask's partitions (task failover).
	PartitionAttempt int32
	State            deploy.State
	// Failure is why a FAILED attempt failed.
	Failure string
	// Replaying says the attempt, deployed by a task failover, has not replayed its log to the end.
	Replaying bool
}

// KeptReport is what one TaskManager reports of a job it kept running.
type KeptReport struct {
	TaskManager       TaskManagerID
	Name, DataAddress string
	// Secret is the job's partition credential secret as the TaskManager has it: every report must agree.
	Secret []byte
	// Checkpoint is the highest checkpoint id the TaskManager heard of for the job.
	Checkpoint int64
	Tasks      []KeptTask
}

// AdoptedTask is a subtask's running attempt a core takes over, and where it runs.
type AdoptedTask struct {
	KeptTask
	TaskManager TaskManagerID
}

// Adoption is a job whose tasks run already, for a core to take over (Config.Adopt).
type Adoption struct {
	// Tasks holds the current attempt of every subtask of the job.
	Tasks map[ident.Subtask]AdoptedTask
	// Placement is the TaskManager each logical slot's subtasks run on; Slots binds each logical slot to a
	// slot of that TaskManager (the caller takes them from its pool).
	Placement []TaskManagerID
	Slots     []Slot
	// Checkpoint is the highest checkpoint id any task heard of: the core's ids continue above it, and
	// those above Completed are aborted.
	Checkpoint int64
	// Completed is the job's newest completed checkpoint (nil: none), which later restarts restore;
	// CompletedThisRun says the run being taken over took it (its channel positions are this run's).
	Completed        *checkpoint.CompletedCheckpoint
	CompletedThisRun bool
}

// maxAbortedOnAdoption bounds the checkpoints an adoption aborts: those a lost leader can have left in
// flight (checkpoint.MaxConcurrentLimit); older ones ended long ago.
const maxAbortedOnAdoption = checkpoint.MaxConcurrentLimit

// Reconcile decides whether the reports of the TaskManagers that kept a job running describe all of it:
// every subtask reported once, by one TaskManager, deployed and not failed, cancelled or replaying its log,
// and the subtasks of each logical slot on one TaskManager, with one secret. It returns the adoption
// (without Slots and Completed, which are the caller's) or why the job cannot be taken over.
func Reconcile(jg *graph.JobGraph, noSlotSharing bool, reports []KeptReport) (*Adoption, error) {
	if len(reports) == 0 {
		return nil, fmt.Errorf("no TaskManager reported the job's tasks")
	}
	a := &Adoption{Tasks: map[ident.Subtask]AdoptedTask{}}
	owner := map[ident.Subtask]string{}
	for _, r := range reports {
		if string(r.Secret) != string(reports[0].Secret) {
			return nil, fmt.Errorf("TaskManagers %s and %s hold different secrets for the job", reports[0].Name, r.Name)
		}
		a.Checkpoint = max(a.Checkpoint, r.Checkpoint)
		for _, t := range r.Tasks {
			s := t.Attempt.Subtask
			v := jg.Vertex(s.Vertex)
			if v == nil || int(s.Index) >= v.Parallelism || s.Index < 0 {
				return nil, fmt.Errorf("TaskManager %s reports %s, which the job does not have", r.Name, t.Attempt)
			}
			if prev, dup := owner[s]; dup {
				return nil, fmt.Errorf("both %s and %s report subtask %s[%d]", prev, r.Name, v.Name, s.Index)
			}
			owner[s] = r.Name
			switch t.State {
			case deploy.Deploying, deploy.Initializing, deploy.Running, deploy.Finished:
			default:
				why := ""
				if t.Failure != "" {
					why = ": " + t.Failure
				}
				return nil, fmt.Errorf("subtask %s[%d] was %s when the leader was lost%s", v.Name, s.Index, t.State, why)
			}
			if t.Replaying {
				return nil, fmt.Errorf("subtask %s[%d] was replaying its log after a task failover when the leader was lost", v.Name, s.Index)
			}
			a.Tasks[s] = AdoptedTask{KeptTask: t, TaskManager: r.TaskManager}
		}
	}
	subtasks := jg.Subtasks()
	var missing []string
	for _, s := range subtasks {
		if _, ok := a.Tasks[s]; !ok {
			missing = append(missing, fmt.Sprintf("%s[%d]", jg.Vertex(s.Vertex).Name, s.Index))
		}
	}
	if len(missing) > 0 {
		if len(missing) > 4 {
			missing = append(missing[:4], fmt.Sprintf("and %d more", len(missing)-4))
		}
		return nil, fmt.Errorf("no TaskManager reported subtasks %v (a TaskManager lost too, or one that gave its tasks up)", missing)
	}
	names := map[TaskManagerID]string{}
	for _, r := range reports {
		names[r.TaskManager] = r.Name
	}
	for _, s := range subtasks {
		i := logicalSlot(jg, noSlotSharing, s)
		for len(a.Placement) <= i {
			a.Placement = append(a.Placement, 0)
		}
		tm := a.Tasks[s].TaskManager
		switch a.Placement[i] {
		case 0:
			a.Placement[i] = tm
		case tm:
		default:
			return nil, fmt.Errorf("the subtasks of slot %d run on two TaskManagers, %s and %s", i, names[a.Placement[i]], names[tm])
		}
	}
	return a, nil
}

// logicalSlot is the placement rule: with slot sharing subtask i of every vertex shares logical slot i;
// without, the subtasks take one logical slot each, in vertex order.
func logicalSlot(jg *graph.JobGraph, noSlotSharing bool, s ident.Subtask) int {
	if !noSlotSharing {
		return int(s.Index)
	}
	k := int(s.Index)
	for _, v := range jg.Vertices {
		if v.ID == s.Vertex {
			break
		}
		k += v.Parallelism
	}
	return k
}

// adopt takes the running attempts of cfg.Adopt over at New: the executions, the slots and the
// TaskManagers the job runs on.
func (c *Core) adopt(a *Adoption) error {
	if len(a.Slots) != c.slotCount || len(a.Placement) != c.slotCount {
		return fmt.Errorf("job core: an adoption of %d slots (placed on %d) for a job of %d", len(a.Slots), len(a.Placement), c.slotCount)
	}
	for i := range a.Slots {
		g := a.Slots[i]
		if g.TaskManager != a.Placement[i] {
			return fmt.Errorf("job core: adopted slot %d is on TaskManager %d, its subtasks on %d", i, g.TaskManager, a.Placement[i])
		}
		c.slots[i] = &g
		if c.tms[g.TaskManager] == nil {
			c.tms[g.TaskManager] = &taskManager{name: g.Name, dataAddress: g.DataAddress, setupSent: true, setUp: true}
		}
	}
	for _, s := range c.subtasks {
		t, ok := a.Tasks[s]
		if !ok {
			return fmt.Errorf("job core: the adoption lacks subtask %s", c.name(s))
		}
		ex := c.execs[s]
		ex.attempt, ex.owner, ex.state, ex.tm = t.Attempt, t.PartitionAttempt, t.State, t.TaskManager
	}
	c.initial = a.Completed
	c.lastTriggered = a.Checkpoint
	return nil
}

// startAdopted starts a core that took running tasks over: nothing is deployed; the tasks hear of the
// newest completed checkpoint again, and of the abort of every later one the lost leader may have left in
// flight, whose data is discarded.
func (c *Core) startAdopted() {
	a := c.cfg.Adopt
	completed := int64(0)
	if a.Completed != nil {
		completed = a.Completed.ID
	}
	c.log(LogInfo, "job taken over: its tasks kept running", "subtasks", len(c.execs), "taskmanagers", len(c.tms),
		"completed", completed, "heard", a.Checkpoint)
	c.sched.Start() // every region runs already
	from := max(completed, a.Checkpoint-maxAbortedOnAdoption) + 1
	if c.cfg.Checkpoint != nil {
		// What the lost leader stored of them goes, its metadata first: one it committed but did not
		// record as completed is aborted here, so no later restore may take it for completed.
		for id := from; id <= a.Checkpoint; id++ {
			c.storage(Discard{CheckpointID: id}, 0)
		}
	}
	live := slices.DeleteFunc(slices.Clone(c.subtasks), func(s ident.Subtask) bool { return c.execs[s].state.Terminal() })
	for _, s := range live {
		ex := c.execs[s]
		if completed > 0 {
			c.send(ex.tm, NotifyCheckpointComplete{Attempt: ex.attempt, ID: completed})
		}
		for id := from; id <= a.Checkpoint; id++ {
			c.send(ex.tm, AbortCheckpoint{Attempt: ex.attempt, ID: id})
		}
	}
	c.checkDone()
}

// errLeaderLost is the cause of the failover that begins a run restarting a job whose leader was lost.
var errLeaderLost = errors.New("the JobManager that led the job was lost")

// recordResume begins the run's failovers with its restart after the loss of the leader: the job as a
// whole, every subtask, from the restore point, recovered once every subtask runs.
func (c *Core) recordResume(r *Resumed) {
	ev := NewFailover(nil, errLeaderLost, "full", slices.Clone(c.subtasks), r.At)
	ev.Fallback = r.Reason
	if cp := c.initial; cp != nil {
		id := cp.ID
		ev.CheckpointRestored = &id
	}
	for _, s := range c.subtasks {
		ev.Await(s)
	}
	c.history.Add(ev)
}

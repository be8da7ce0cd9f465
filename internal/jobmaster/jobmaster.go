// Package jobmaster runs one job: it places subtasks in TaskManager slots, builds their deployment
// descriptors, deploys them, follows their state changes, and ends the job as FINISHED when every subtask
// finished, FAILED when a subtask failed (after cancelling the rest), or CANCELED when asked to stop.
//
// Placement follows Flink's slot sharing: subtask i of every vertex goes to slot i, and slots are spread over
// the TaskManagers round-robin, so forward edges stay local and shuffles cross TaskManagers.
//
// The job master owns one goroutine, the one that calls Run. It talks to TaskManagers only through the
// TaskManager interface, so the in-process mini-cluster and a remote TaskManager look the same to it. It must
// not import the public runnel package or the cluster wiring.
package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/scheduler"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/task"
)

// TaskManager is the job master's view of a TaskManager.
type TaskManager interface {
	// Name identifies the TaskManager in reports ("tm-1").
	Name() string
	// DataAddress is where its partitions are served over TCP.
	DataAddress() string
	// Slots is the number of task slots.
	Slots() int
	// Submit deploys a task; updates about it arrive through report.
	Submit(cfg task.Config, report func(task.Update)) error
	// Cancel asks a task attempt to stop.
	Cancel(a ident.Attempt)
	// Counters returns the published record counters of a running or finished attempt.
	Counters(a ident.Attempt) (in, out uint64, ok bool)
	// TriggerCheckpoint asks a source attempt to take checkpoint id; false if it cannot take the request.
	TriggerCheckpoint(a ident.Attempt, id, timestampMillis int64, flags uint32) bool
	// AbortCheckpoint tells an attempt that checkpoint id was given up.
	AbortCheckpoint(a ident.Attempt, id int64)
	// ReleasePartitions releases the result partitions an attempt produced.
	ReleasePartitions(a ident.Attempt)
	// SubpartitionStats returns the counters of one subpartition of a partition it holds.
	SubpartitionStats(p ident.PartitionID, sub int) (network.SubpartitionStats, bool)
}

// BarrierFlagAtLeastOnce marks the barriers of an at-least-once checkpoint.
const BarrierFlagAtLeastOnce uint32 = 1

// Status is the state of a job.
type Status string

// Job statuses, as they appear in reports.
const (
	StatusCreated   Status = "CREATED"
	StatusRunning   Status = "RUNNING"
	StatusFinished  Status = "FINISHED"
	StatusCanceled  Status = "CANCELED"
	StatusFailed    Status = "FAILED"
	statusFailing   Status = "FAILING"
	statusCanceling Status = "CANCELING"
)

// Config configures a job master.
type Config struct {
	Job          *graph.JobGraph
	TaskManagers []TaskManager
	// ChainFor builds the operator chain factory of a vertex.
	ChainFor          func(v *graph.JobVertex) task.ChainFactory
	BufferTimeout     time.Duration
	MaxRecordSize     int
	CreditsPerChannel int
	Logger            *slog.Logger
	// Failover picks the subtasks to restart after a failure; Restart decides whether and when.
	Failover scheduler.FailoverMode
	Restart  scheduler.RestartConfig
	// Checkpoint turns on periodic checkpoints stored in Storage; nil means off.
	Checkpoint *checkpoint.Config
	Storage    *checkpoint.Storage
	// StateBackend names where keyed state lives: "memory" or "pebble".
	StateBackend string
	// Scheduling is eager (deploy everything at once) or pipelined-region (deploy a region once its
	// blocking inputs are consumable).
	Scheduling scheduler.SchedulingMode
	// NoSlotSharing gives every subtask a slot of its own, spread over the TaskManagers in vertex order,
	// instead of Flink's slot sharing (subtask i of every vertex in slot i).
	NoSlotSharing bool
	// Savepoint, when set, is the state the job starts from.
	Savepoint *checkpoint.Savepoint
	// SavepointOnStop, when set, is the directory where a savepoint is written when the job is cancelled
	// (ctx done), before its tasks are cancelled.
	SavepointOnStop string
}

// Failover is one failover event: which subtask failed, what was restarted, from which checkpoint.
type Failover struct {
	Failed             ident.Subtask
	Cause              error
	Strategy           string
	Restarted          []ident.Subtask
	CheckpointRestored *int64
	FailedAt           time.Time
	// RecoveredAt is when every restarted subtask was running again (zero until then).
	RecoveredAt time.Time
	// OutputAt is when the last of the restarted tail subtasks (those with no restarted consumer) emitted
	// its first record again: the end of the outage of the affected path.
	OutputAt time.Time
	// RecordsLost counts the records that affect no state: on each channel from a producer that kept
	// running to a restarted consumer, those after the consumer's restored position and before the first
	// record it received. RecordsDropped and BuffersDropped are the producers' view of the same loss (whole
	// buffers dropped while no consumer was attached); PartialRecordsSkipped counts records whose start was
	// dropped and whose rest the new consumer skipped.
	RecordsLost, RecordsDropped, BuffersDropped, PartialRecordsSkipped uint64
	// Channels breaks the loss down by channel (only channels that lost something).
	Channels []ChannelLoss

	awaiting map[ident.Subtask]bool
	tails    map[ident.Subtask]bool
	baseline map[channelKey]network.SubpartitionStats
}

// ChannelLoss is the loss of one channel in one failover: from a producer subtask to a restarted consumer.
type ChannelLoss struct {
	Producer, Consumer                                                 ident.Subtask
	RecordsLost, RecordsDropped, BuffersDropped, PartialRecordsSkipped uint64
}

// channelKey names one subpartition of one partition.
type channelKey struct {
	p   ident.PartitionID
	sub int
}

// SubtaskStatus describes one subtask in a snapshot.
type SubtaskStatus struct {
	Index       int
	Attempt     int
	TaskManager string
	State       task.State
	RecordsIn   uint64
	RecordsOut  uint64
}

// VertexStatus describes one vertex in a snapshot.
type VertexStatus struct {
	Vertex     *graph.JobVertex
	Subtasks   []SubtaskStatus
	RecordsIn  uint64
	RecordsOut uint64
}

// Snapshot is the observable state of the job at one moment.
type Snapshot struct {
	Status   Status
	Err      error
	Vertices []VertexStatus
	Started  time.Time
	Ended    time.Time
	// Checkpoints counts checkpoints (nil when checkpointing is off).
	Checkpoints *checkpoint.Counts
	Failovers   []Failover
	// Savepoint is the directory of the savepoint written on stop; SavepointErr says why none was.
	Savepoint    string
	SavepointErr error
}

type execution struct {
	attempt ident.Attempt
	tm      TaskManager
	state   task.State
	in, out uint64
}

// JobMaster runs one job.
type JobMaster struct {
	cfg     Config
	log     *slog.Logger
	updates chan task.Update
	acks    chan ackMsg
	done    chan struct{}

	// owned by the Run goroutine
	coord    *checkpoint.Coordinator
	topo     *scheduler.Topology
	sched    scheduler.SchedulingStrategy
	initial  *checkpoint.CompletedCheckpoint
	failover scheduler.FailoverStrategy
	restart  scheduler.RestartStrategy
	plan     *restartPlan
	ctx      context.Context
	// lastTriggered is the highest checkpoint id triggered so far: a restarted attempt ignores barriers up
	// to it, which only its predecessor could have completed.
	lastTriggered int64

	mu        sync.Mutex
	status    Status
	err       error
	execs     map[ident.Subtask]*execution
	started   time.Time
	ended     time.Time
	failovers []*Failover
	counts    *checkpoint.Counts
	savepoint *savepointState
}

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

// restartPlan is a failover in progress: the subtasks being cancelled, to be redeployed as new attempts.
type restartPlan struct {
	subtasks  map[ident.Subtask]bool
	notBefore time.Time
	events    []*Failover
}

// New makes a job master; Run starts the job.
func New(cfg Config) (*JobMaster, error) {
	if cfg.Job == nil || len(cfg.Job.Vertices) == 0 {
		return nil, errors.New("job master: empty job graph")
	}
	if len(cfg.TaskManagers) == 0 {
		return nil, errors.New("job master: no TaskManagers")
	}
	slots := 0
	for _, tm := range cfg.TaskManagers {
		slots += tm.Slots()
	}
	need := 0
	for _, v := range cfg.Job.Vertices {
		if cfg.NoSlotSharing {
			need += v.Parallelism
		} else if v.Parallelism > need {
			need = v.Parallelism
		}
	}
	if need > slots {
		what := "its highest parallelism"
		if cfg.NoSlotSharing {
			what = "one per subtask, without slot sharing"
		}
		return nil, fmt.Errorf("job %q needs %d slots (%s), the cluster has %d: add TaskManagers or slots, or lower parallelism", cfg.Job.Name, need, what, slots)
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	jm := &JobMaster{cfg: cfg, log: lg.With("job", cfg.Job.Name), updates: make(chan task.Update, 256),
		acks: make(chan ackMsg, 256), done: make(chan struct{}),
		status: StatusCreated, execs: make(map[ident.Subtask]*execution)}
	if cfg.Failover == 0 {
		cfg.Failover = scheduler.RegionFailover
	}
	jm.topo = scheduler.ComputeRegions(cfg.Job)
	fs, err := scheduler.NewFailoverStrategy(cfg.Failover, jm.topo, nil)
	if err != nil {
		return nil, fmt.Errorf("job master: %w", err)
	}
	jm.failover = fs
	if cfg.Scheduling == 0 {
		cfg.Scheduling = scheduler.PipelinedRegionScheduling
	}
	if jm.sched, err = scheduler.NewSchedulingStrategy(cfg.Scheduling, jm.topo); err != nil {
		return nil, fmt.Errorf("job master: %w", err)
	}
	if cfg.Restart.Kind == 0 {
		cfg.Restart = scheduler.DefaultRestartConfig(scheduler.NoRestart)
	}
	rs, err := scheduler.NewRestartStrategy(cfg.Restart, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1)))
	if err != nil {
		return nil, fmt.Errorf("job master: %w", err)
	}
	jm.restart = rs
	if cfg.Checkpoint != nil && cfg.Storage == nil {
		return nil, errors.New("job master: checkpointing needs a storage")
	}
	jm.cfg = cfg
	return jm, nil
}

// placeSubtask returns the TaskManager of subtask s: with slot sharing that of slot s.Index; without, the
// subtasks fill the TaskManagers round-robin in vertex order.
func (jm *JobMaster) placeSubtask(s ident.Subtask) TaskManager {
	if !jm.cfg.NoSlotSharing {
		return jm.placement(int(s.Index))
	}
	k := int(s.Index)
	for _, v := range jm.cfg.Job.Vertices {
		if v.ID == s.Vertex {
			break
		}
		k += v.Parallelism
	}
	return jm.placement(k)
}

// placement returns the TaskManager of slot i.
func (jm *JobMaster) placement(i int) TaskManager {
	return jm.cfg.TaskManagers[i%len(jm.cfg.TaskManagers)]
}

// Run deploys the job and blocks until it reaches a terminal status. Cancelling ctx cancels the job.
func (jm *JobMaster) Run(ctx context.Context) Snapshot {
	defer close(jm.done)
	jm.ctx = ctx
	jm.mu.Lock()
	jm.started = time.Now()
	jm.status = StatusRunning
	for _, s := range jm.cfg.Job.Subtasks() {
		jm.execs[s] = &execution{attempt: ident.Attempt{Subtask: s}, tm: jm.placeSubtask(s), state: task.Created}
	}
	jm.mu.Unlock()
	jm.log.Info("job started", "vertices", len(jm.cfg.Job.Vertices), "subtasks", len(jm.execs))
	var tick <-chan time.Time
	if cc := jm.cfg.Checkpoint; cc != nil {
		if err := jm.startCoordinator(ctx); err != nil {
			jm.fail(err)
		} else {
			period := time.Duration(cc.IntervalMillis) * time.Millisecond / 4
			period = min(max(period, 5*time.Millisecond), 50*time.Millisecond)
			t := time.NewTicker(period)
			defer t.Stop()
			tick = t.C
		}
	}
	if sp := jm.cfg.Savepoint; sp != nil {
		jm.initial = sp.Checkpoint
		if jm.coord != nil {
			jm.coord.Restored(jm.initial)
		}
	}
	// Deploy the regions the scheduling strategy allows; consumers wait for their producers' partitions.
	jm.deployRegions(jm.sched.Start())
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	var restartTimer *time.Timer
	var restartC <-chan time.Time
	done := ctx.Done()
	for !jm.terminal() {
		select {
		case u := <-jm.updates:
			jm.onUpdate(u)
		case a := <-jm.acks:
			jm.onAck(a)
		case <-tick:
			if jm.coord != nil && jm.allRunning() {
				jm.process(jm.coord.Tick(jm.now()))
			}
			if sp := jm.savepoint; sp != nil && sp.written == "" && sp.err == nil && time.Now().After(sp.deadline) {
				jm.setSavepoint(func(sp *savepointState) { sp.err = fmt.Errorf("savepoint %d did not complete in time", sp.id) })
				jm.cancelJob()
			}
		case <-done:
			done = nil
			if !jm.startSavepoint() {
				jm.cancelJob()
			}
		case <-poll.C:
			jm.refreshCounters()
		case <-restartC:
			restartC = nil
		}
		if d, ok := jm.maybeRestart(); ok && restartC == nil {
			if restartTimer != nil {
				restartTimer.Stop()
			}
			restartTimer = time.NewTimer(d)
			restartC = restartTimer.C
		}
	}
	if restartTimer != nil {
		restartTimer.Stop()
	}
	if jm.coord != nil {
		jm.process(jm.coord.Stop(jm.now()))
	}
	jm.refreshCounters()
	return jm.Snapshot()
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

// ctxNoCancel is the context for storage work that must finish even though the job's context is done.
func (jm *JobMaster) ctxNoCancel() context.Context { return context.WithoutCancel(jm.ctx) }

// deployRegions deploys every not yet deployed subtask of the regions, restoring state from the latest
// completed checkpoint (or the savepoint the job started from).
func (jm *JobMaster) deployRegions(regions []scheduler.RegionID) {
	restore := jm.initial
	if jm.coord != nil && jm.coord.LatestCompleted() != nil {
		restore = jm.coord.LatestCompleted()
	}
	for _, r := range regions {
		for _, s := range jm.topo.Members(r) {
			jm.mu.Lock()
			ex := jm.execs[s]
			fresh := ex.state == task.Created
			first := ex.attempt.Number == 0
			jm.mu.Unlock()
			if !fresh {
				continue
			}
			from := restore
			if first && jm.coord == nil {
				from = jm.initial
			}
			if err := jm.deploy(s, from); err != nil {
				jm.fail(fmt.Errorf("deploy %s: %w", jm.name(s), err))
				return
			}
		}
	}
}

// allRunning reports whether every subtask is running or finished. Checkpoints are triggered only then: a
// subtask still connecting its inputs (a restarted consumer of an approximate partition, in particular)
// would miss the barriers its producers send meanwhile, and every other task would wait for it in alignment.
func (jm *JobMaster) allRunning() bool {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, ex := range jm.execs {
		if ex.state != task.Running && ex.state != task.Finished {
			return false
		}
	}
	return true
}

// now is the job master's clock for the pure state machines: milliseconds since the job started.
func (jm *JobMaster) now() int64 { return time.Since(jm.started).Milliseconds() }

func (jm *JobMaster) startCoordinator(ctx context.Context) error {
	var tasks []checkpoint.Task
	for _, v := range jm.cfg.Job.Vertices {
		for i := 0; i < v.Parallelism; i++ {
			tasks = append(tasks, checkpoint.Task{Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: v.ID, Index: int32(i)}},
				Name: v.Name, Source: v.IsSource()})
		}
	}
	next, err := jm.cfg.Storage.NextID(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint storage: %w", err)
	}
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
			err := jm.cfg.Storage.CommitMetadata(jm.ctxNoCancel(), cp)
			if err != nil {
				jm.log.Warn("persist checkpoint", "id", cp.ID, "err", err)
			}
			next = merge(next, jm.coord.Persisted(jm.now(), cp.ID, err))
		}
		for _, cp := range r.Completed {
			jm.log.Debug("checkpoint completed", "id", cp.ID)
			if sp := jm.savepoint; sp != nil && sp.id == cp.ID {
				err := jm.cfg.Storage.WriteSavepoint(jm.ctxNoCancel(), jm.cfg.SavepointOnStop, cp)
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
			if _, err := jm.cfg.Storage.Retain(jm.ctxNoCancel(), jm.cfg.Checkpoint.Retained); err != nil {
				jm.log.Warn("retain checkpoints", "err", err)
			}
		}
		for _, ab := range r.Aborted {
			jm.log.Debug("checkpoint aborted", "id", ab.ID, "reason", ab.Reason, "err", ab.Err)
			if sp := jm.savepoint; sp != nil && sp.id == ab.ID && sp.err == nil {
				jm.setSavepoint(func(sp *savepointState) {
					sp.err = fmt.Errorf("savepoint %d aborted: %s: %v", ab.ID, ab.Reason, ab.Err)
				})
				jm.cancelJob()
			}
			_ = jm.cfg.Storage.Discard(jm.ctxNoCancel(), ab.ID)
		}
		for _, n := range r.Notifications {
			if n.Kind == checkpoint.NotifyAbort {
				if ex := jm.current(n.To); ex != nil {
					ex.tm.AbortCheckpoint(n.To, n.CheckpointID)
				}
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
					next = merge(next, jm.coord.Decline(jm.now(), t.ID, target, checkpoint.ErrTaskNotReady))
				}
			}
		}
		if r.FailJob != nil {
			jm.fail(r.FailJob)
		}
		r = next
	}
	counts := jm.coord.Counts()
	jm.mu.Lock()
	jm.counts = &counts
	jm.mu.Unlock()
}

func merge(a, b checkpoint.Ready) checkpoint.Ready {
	a.Persist = append(a.Persist, b.Persist...)
	a.Completed = append(a.Completed, b.Completed...)
	a.Aborted = append(a.Aborted, b.Aborted...)
	a.Notifications = append(a.Notifications, b.Notifications...)
	a.Triggers = append(a.Triggers, b.Triggers...)
	a.Ignored = append(a.Ignored, b.Ignored...)
	if a.FailJob == nil {
		a.FailJob = b.FailJob
	}
	return a
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

func (jm *JobMaster) name(s ident.Subtask) string {
	v := jm.cfg.Job.Vertex(s.Vertex)
	return fmt.Sprintf("%s[%d]", v.Name, s.Index)
}

func (jm *JobMaster) report(u task.Update) {
	// Updates must never be lost while the job runs; the job master drains them continuously.
	select {
	case jm.updates <- u:
	case <-jm.done:
	}
}

func (jm *JobMaster) sendAck(m ackMsg) {
	select {
	case jm.acks <- m:
	case <-jm.done:
	}
}

// deploy builds the descriptor of the current attempt of s and submits it; restore is the checkpoint its
// state comes from, if any.
func (jm *JobMaster) deploy(s ident.Subtask, restore *checkpoint.CompletedCheckpoint) error {
	jm.mu.Lock()
	ex := jm.execs[s]
	ex.state = task.Deploying
	jm.mu.Unlock()
	cfg, err := jm.descriptor(ex)
	if err == nil && jm.cfg.Checkpoint != nil {
		mode := jm.cfg.Checkpoint.Mode
		cfg.Checkpoints = &task.CheckpointSetup{
			Store:       jm.cfg.Storage,
			AtLeastOnce: mode == checkpoint.AtLeastOnce,
			Ack: func(id int64, from ident.Attempt, h checkpoint.StateHandle) {
				jm.sendAck(ackMsg{id: id, from: from, handle: h})
			},
			Decline: func(id int64, from ident.Attempt, err error) {
				jm.sendAck(ackMsg{id: id, from: from, err: err})
			},
		}
	}
	if err == nil && restore != nil {
		if h, ok := restore.State(s); ok {
			cfg.Restore = &task.RestoreSpec{CheckpointID: restore.ID, Handle: h}
			if sp := jm.cfg.Savepoint; sp != nil && sp.Checkpoint.ID == restore.ID {
				cfg.Restore.Read = sp.ReadState
			}
		}
	}
	if err == nil {
		err = ex.tm.Submit(cfg, jm.report)
	}
	if err != nil {
		jm.mu.Lock()
		ex.state = task.Failed
		jm.mu.Unlock()
	}
	return err
}

func (jm *JobMaster) descriptor(ex *execution) (task.Config, error) {
	v := jm.cfg.Job.Vertex(ex.attempt.Vertex)
	idx := int(ex.attempt.Index)
	cfg := task.Config{
		Info: task.Info{JobName: jm.cfg.Job.Name, VertexName: v.Name, Attempt: ex.attempt,
			Parallelism: v.Parallelism, MaxParallelism: v.MaxParallelism, TaskManager: ex.tm.Name()},
		Chain:               jm.cfg.ChainFor(v),
		SkipCheckpointsUpTo: jm.lastTriggered,
		BufferTimeout:       jm.cfg.BufferTimeout,
		MaxRecordSize:       jm.cfg.MaxRecordSize,
		CreditsPerChannel:   jm.cfg.CreditsPerChannel,
		StateBackend:        jm.cfg.StateBackend,
	}
	for _, e := range v.Outputs {
		cfg.Outputs = append(cfg.Outputs, task.OutputSpec{
			Result: e.Result, Subpartitions: len(graph.ConsumersOf(e, idx)), Reconnectable: e.PartitionType.Reconnectable(),
			Blocking: e.PartitionType == graph.Blocking,
		})
	}
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, e := range v.Inputs {
		var in task.InputSpec
		for _, p := range graph.ProducersOf(e, idx) {
			prod := jm.execs[ident.Subtask{Vertex: e.Source.ID, Index: int32(p)}]
			sub := graph.SubpartitionIndex(e, p, idx)
			if sub < 0 {
				return cfg, fmt.Errorf("edge %s -> %s: producer %d does not feed consumer %d", e.Source.Name, v.Name, p, idx)
			}
			in.Channels = append(in.Channels, task.ChannelSpec{
				Partition:    ident.PartitionID{Result: e.Result, Producer: prod.attempt},
				Subpartition: sub,
				Local:        prod.tm == ex.tm,
				Address:      prod.tm.DataAddress(),
			})
		}
		cfg.Inputs = append(cfg.Inputs, in)
	}
	return cfg, nil
}

func (jm *JobMaster) onUpdate(u task.Update) {
	jm.mu.Lock()
	ex := jm.execs[u.Attempt.Subtask]
	if ex == nil || ex.attempt != u.Attempt {
		jm.mu.Unlock()
		jm.log.Debug("ignoring update from a replaced attempt", "attempt", u.Attempt, "state", u.State)
		return
	}
	if o := u.Observation; o != nil {
		jm.mu.Unlock()
		jm.onObservation(u.Attempt, o)
		return
	}
	ex.state = u.State
	if u.State.Terminal() {
		if in, out, ok := ex.tm.Counters(ex.attempt); ok {
			ex.in, ex.out = in, out
		}
	}
	status := jm.status
	jm.mu.Unlock()
	switch u.State {
	case task.Running:
		jm.onRunning(u.Attempt.Subtask)
	case task.Finished:
		if jm.coord != nil {
			jm.process(jm.coord.TaskFinished(jm.now(), u.Attempt))
		}
		if status == StatusRunning {
			for _, e := range jm.cfg.Job.Vertex(u.Attempt.Vertex).Outputs {
				if e.PartitionType == graph.Blocking {
					jm.deployRegions(jm.sched.OnResultFinished(e.Result, u.Attempt.Subtask))
				}
			}
		}
	case task.Failed:
		if jm.coord != nil {
			jm.process(jm.coord.TaskFailed(jm.now(), u.Attempt, u.Err))
		}
		restarting := jm.plan != nil && jm.plan.subtasks[u.Attempt.Subtask]
		if status == StatusRunning && !restarting {
			jm.onFailure(u.Attempt.Subtask, u.Err)
		}
	}
	if u.State == task.Failed || u.State == task.Canceled {
		// Released only now, after the failover cancelled its consumers: they must not wait on its data,
		// and must not report its disappearance as failures of their own.
		ex.tm.ReleasePartitions(u.Attempt)
	}
	if u.State.Terminal() {
		// Also after a failure: a second failing subtask may be the last one to stop.
		jm.checkDone()
	}
}

// onFailure asks the restart strategy whether to restart and the failover strategy what to restart, and
// starts cancelling those subtasks; maybeRestart redeploys them once they stopped and the backoff passed.
func (jm *JobMaster) onFailure(s ident.Subtask, cause error) {
	now := time.Now()
	err := fmt.Errorf("subtask %s failed: %w", jm.name(s), cause)
	jm.restart.NotifyFailure(jm.now(), cause)
	if !jm.restart.CanRestart() {
		jm.fail(fmt.Errorf("%w (restart strategy %s gives up)", err, jm.cfg.Restart))
		return
	}
	set := jm.failover.TasksToRestart(s)
	ev := &Failover{Failed: s, Cause: cause, Strategy: jm.cfg.Failover.String(), Restarted: set, FailedAt: now,
		awaiting: make(map[ident.Subtask]bool), tails: make(map[ident.Subtask]bool), baseline: make(map[channelKey]network.SubpartitionStats)}
	jm.markLossBaseline(ev)
	jm.log.Warn("subtask failed, restarting", "subtask", jm.name(s), "err", cause, "strategy", ev.Strategy,
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
	jm.failovers = append(jm.failovers, ev)
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
	restore := jm.initial
	if jm.coord != nil && jm.coord.LatestCompleted() != nil {
		restore = jm.verifiedLatest(p.subtasks)
	}
	var attempts []ident.Attempt
	jm.mu.Lock()
	for _, s := range subtasks {
		ex := jm.execs[s]
		if ex.state == task.Created {
			continue // never ran: its first attempt is still to come
		}
		if ex.state == task.Finished {
			// A finished producer keeps its partitions until now: its new attempt produces them again.
			ex.tm.ReleasePartitions(ex.attempt)
		}
		ex.attempt.Number++
		ex.state = task.Created
		ex.in, ex.out = 0, 0
		attempts = append(attempts, ex.attempt)
	}
	for _, ev := range p.events {
		if restore != nil {
			id := restore.ID
			ev.CheckpointRestored = &id
		}
		for _, s := range subtasks {
			ev.awaiting[s] = true
		}
	}
	jm.mu.Unlock()
	if jm.coord != nil {
		r, err := jm.coord.TasksRestarted(jm.now(), attempts, errors.New("failover"))
		if err != nil {
			jm.fail(fmt.Errorf("restart: %w", err))
			return 0, false
		}
		jm.process(r)
	}
	jm.deployRegions(jm.sched.OnRegionsRestarted(jm.topo.RegionsOf(subtasks)))
	return 0, false
}

// verifiedLatest returns the checkpoint to restore the restarted subtasks from after a failure: the newest
// one in storage whose metadata and whose state of those subtasks verify (the state of subtasks that keep
// running is not read: with approximate recovery a failover reads what it restores, not the whole job's
// state). Corrupt or truncated newer ones are logged and passed over, and the coordinator is told, so that
// later failovers start from the same one.
func (jm *JobMaster) verifiedLatest(restarted map[ident.Subtask]bool) *checkpoint.CompletedCheckpoint {
	latest := jm.coord.LatestCompleted()
	cp, skipped, err := jm.cfg.Storage.LatestFor(jm.ctxNoCancel(), func(s ident.Subtask) bool { return restarted[s] })
	for _, sk := range skipped {
		if !errors.Is(sk.Err, checkpoint.ErrIncomplete) {
			jm.log.Error("checkpoint is damaged; restoring an older one", "checkpoint", sk.ID, "err", sk.Err)
		}
	}
	if err != nil {
		jm.log.Error("no valid checkpoint in storage; restoring the last completed one as recorded", "err", err)
		return latest
	}
	if cp.ID != latest.ID {
		jm.coord.Restored(cp)
	}
	return cp
}

// markLossBaseline records, for every channel from a producer that keeps running to a subtask that
// restarts, the producer's counters now; what it drops from here on is this failover's loss. It also notes
// the restarted tails, whose first output ends the outage.
func (jm *JobMaster) markLossBaseline(ev *Failover) {
	restarted := make(map[ident.Subtask]bool, len(ev.Restarted))
	for _, r := range ev.Restarted {
		restarted[r] = true
	}
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, r := range ev.Restarted {
		tail := true
		for _, d := range jm.cfg.Job.Downstream(r) {
			if restarted[d] {
				tail = false
			}
		}
		if tail {
			ev.tails[r] = true
		}
		v := jm.cfg.Job.Vertex(r.Vertex)
		for _, e := range v.Inputs {
			for _, p := range graph.ProducersOf(e, int(r.Index)) {
				prod := ident.Subtask{Vertex: e.Source.ID, Index: int32(p)}
				if restarted[prod] {
					continue
				}
				pex := jm.execs[prod]
				key := channelKey{p: ident.PartitionID{Result: e.Result, Producer: pex.attempt}, sub: graph.SubpartitionIndex(e, p, int(r.Index))}
				if st, ok := pex.tm.SubpartitionStats(key.p, key.sub); ok {
					ev.baseline[key] = st
				}
			}
		}
	}
}

// onObservation adds what a restarted attempt saw to the failover that restarted it.
func (jm *JobMaster) onObservation(a ident.Attempt, o *task.Observation) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	var ev *Failover
	for i := len(jm.failovers) - 1; i >= 0; i-- {
		for _, r := range jm.failovers[i].Restarted {
			if r == a.Subtask {
				ev = jm.failovers[i]
				break
			}
		}
		if ev != nil {
			break
		}
	}
	if ev == nil || a.Number == 0 {
		return
	}
	switch o.Kind {
	case task.ChannelJoined:
		cl := ChannelLoss{Producer: o.Channel.Partition.Producer.Subtask, Consumer: a.Subtask,
			RecordsLost: o.Lost, PartialRecordsSkipped: o.PartialSkipped}
		key := channelKey{p: o.Channel.Partition, sub: o.Channel.Subpartition}
		if base, ok := ev.baseline[key]; ok {
			delete(ev.baseline, key) // count each channel once
			if ex := jm.execs[o.Channel.Partition.Producer.Subtask]; ex != nil {
				if st, ok := ex.tm.SubpartitionStats(key.p, key.sub); ok {
					cl.RecordsDropped = st.RecordsDropped - base.RecordsDropped
					cl.BuffersDropped = st.BuffersDropped - base.BuffersDropped
				}
			}
		}
		ev.RecordsLost += cl.RecordsLost
		ev.PartialRecordsSkipped += cl.PartialRecordsSkipped
		ev.RecordsDropped += cl.RecordsDropped
		ev.BuffersDropped += cl.BuffersDropped
		if cl.RecordsLost+cl.RecordsDropped+cl.BuffersDropped+cl.PartialRecordsSkipped > 0 {
			ev.Channels = append(ev.Channels, cl)
		}
	case task.FirstOutput:
		if ev.tails[a.Subtask] {
			delete(ev.tails, a.Subtask)
			if o.At.After(ev.OutputAt) {
				ev.OutputAt = o.At
			}
		}
	}
}

// onRunning completes failover events whose restarted subtasks all run again.
func (jm *JobMaster) onRunning(s ident.Subtask) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, ev := range jm.failovers {
		if ev.awaiting[s] {
			delete(ev.awaiting, s)
			if len(ev.awaiting) == 0 && ev.RecoveredAt.IsZero() {
				ev.RecoveredAt = time.Now()
			}
		}
	}
}

// fail moves the job to FAILING and cancels every subtask that is still running. Restart strategies
// plug in here.
func (jm *JobMaster) fail(err error) {
	jm.mu.Lock()
	if jm.status != StatusRunning {
		jm.mu.Unlock()
		return
	}
	jm.status = statusFailing
	jm.err = err
	jm.mu.Unlock()
	jm.log.Error("job failing", "err", err)
	jm.cancelAll()
	jm.checkDone()
}

func (jm *JobMaster) cancelJob() {
	jm.mu.Lock()
	if jm.status != StatusRunning {
		jm.mu.Unlock()
		return
	}
	jm.status = statusCanceling
	jm.mu.Unlock()
	jm.log.Info("job canceling")
	jm.cancelAll()
	jm.checkDone()
}

func (jm *JobMaster) cancelAll() {
	jm.mu.Lock()
	var live []*execution
	for _, ex := range jm.execs {
		if !ex.state.Terminal() {
			live = append(live, ex)
		}
	}
	jm.mu.Unlock()
	for _, ex := range live {
		ex.tm.Cancel(ex.attempt)
	}
}

// checkDone ends the job when every subtask is in a terminal state: FINISHED when all finished and no
// restart is pending, FAILED or CANCELED when the job was failing or cancelling.
func (jm *JobMaster) checkDone() {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, ex := range jm.execs {
		if !ex.state.Terminal() {
			return
		}
		if jm.status == StatusRunning && ex.state != task.Finished {
			return // stopped for a restart
		}
	}
	switch jm.status {
	case StatusRunning:
		if jm.plan != nil {
			return
		}
		jm.status = StatusFinished
	case statusFailing:
		jm.status = StatusFailed
	case statusCanceling:
		jm.status = StatusCanceled
	default:
		return
	}
	jm.ended = time.Now()
	jm.log.Info("job ended", "status", jm.status, "wall", jm.ended.Sub(jm.started).Round(time.Millisecond))
}

func (jm *JobMaster) terminal() bool {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	return jm.status == StatusFinished || jm.status == StatusFailed || jm.status == StatusCanceled
}

func (jm *JobMaster) refreshCounters() {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, ex := range jm.execs {
		if in, out, ok := ex.tm.Counters(ex.attempt); ok {
			ex.in, ex.out = in, out
		}
	}
}

// Snapshot returns the job's current observable state. Safe from any goroutine.
func (jm *JobMaster) Snapshot() Snapshot {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	snap := Snapshot{Status: jm.status, Err: jm.err, Started: jm.started, Ended: jm.ended}
	if jm.counts != nil {
		c := *jm.counts
		snap.Checkpoints = &c
	}
	if sp := jm.savepoint; sp != nil {
		snap.Savepoint, snap.SavepointErr = sp.written, sp.err
	}
	for _, f := range jm.failovers {
		c := *f
		c.awaiting, c.tails, c.baseline = nil, nil, nil
		c.Channels = append([]ChannelLoss(nil), f.Channels...)
		c.Restarted = append([]ident.Subtask(nil), f.Restarted...)
		snap.Failovers = append(snap.Failovers, c)
	}
	switch snap.Status {
	case statusFailing, statusCanceling:
		snap.Status = StatusRunning
	}
	for _, v := range jm.cfg.Job.Vertices {
		vs := VertexStatus{Vertex: v}
		for i := 0; i < v.Parallelism; i++ {
			ex := jm.execs[ident.Subtask{Vertex: v.ID, Index: int32(i)}]
			st := SubtaskStatus{Index: i, TaskManager: jm.placeSubtask(ident.Subtask{Vertex: v.ID, Index: int32(i)}).Name(), State: task.Created}
			if ex != nil {
				in, out := ex.in, ex.out
				st = SubtaskStatus{Index: i, Attempt: int(ex.attempt.Number), TaskManager: ex.tm.Name(), State: ex.state, RecordsIn: in, RecordsOut: out}
			}
			vs.RecordsIn += st.RecordsIn
			vs.RecordsOut += st.RecordsOut
			vs.Subtasks = append(vs.Subtasks, st)
		}
		snap.Vertices = append(snap.Vertices, vs)
	}
	return snap
}

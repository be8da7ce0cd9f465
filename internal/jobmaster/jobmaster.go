// Package jobmaster runs one job: it places subtasks in TaskManager slots, builds their deployment
// descriptors, deploys them region by region as the scheduling strategy allows, follows their state changes,
// coordinates checkpoints and savepoints, and recovers from failures: the restart strategy decides whether
// and when, the failover strategy which subtasks, and the restarted subtasks are redeployed as new attempts
// from the newest valid checkpoint. For approximate local recovery it also keeps the ledger of what each
// failover lost, from the observations of the restarted tasks and the counters of their producers.
//
// The job ends FINISHED when every subtask finished and no restart is pending; FAILED when it cannot recover
// (for example when the restart strategy gives up, or a deployment fails), after cancelling what still runs;
// CANCELED when its context is cancelled, after the savepoint on stop if one was asked for.
//
// Placement follows Flink's slot sharing: subtask i of every vertex goes to slot i, and slots are spread over
// the TaskManagers round-robin, so forward edges stay local and shuffles cross TaskManagers.
//
// The job master starts no goroutine: its state belongs to the goroutine that calls Run, whose event loop
// drives the pure decision makers (checkpoint.Coordinator and the scheduler's strategies) and carries out
// what they return. Tasks reach it through two bounded channels (updates and checkpoint acknowledgements),
// whose senders wait rather than drop; a mutex guards what Snapshot reads from other goroutines. It talks to
// TaskManagers only through the TaskManager interface, so the in-process mini-cluster and a remote
// TaskManager look the same to it. It must not import the public runnel package or the cluster wiring.
package jobmaster

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/scheduler"
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
	// Counters returns the published record counters of a running attempt; one that ended brings its final
	// counters in its terminal update.
	Counters(a ident.Attempt) (in, out uint64, ok bool)
	// TriggerCheckpoint asks an attempt to take checkpoint id (a source, or once tasks finished, a task whose
	// upstream all finished); false if it cannot take the request.
	TriggerCheckpoint(a ident.Attempt, id, timestampMillis int64, flags uint32) bool
	// AbortCheckpoint tells an attempt that checkpoint id was given up.
	AbortCheckpoint(a ident.Attempt, id int64)
	// NotifyCheckpointComplete tells an attempt that checkpoint id is complete and persisted.
	NotifyCheckpointComplete(a ident.Attempt, id int64)
	// SetupJob tells the TaskManager the job's id and the secret its partition credentials are made with,
	// before anything of the job is deployed there: its data server serves a partition of the job only to a
	// consumer that presents the credential the job master issued (network.PartitionCredential).
	SetupJob(job [network.JobIDSize]byte, secret []byte)
	// ReleasePartitions releases the result partitions an attempt produced.
	ReleasePartitions(a ident.Attempt)
	// SubpartitionStats returns the counters of one subpartition of a partition it holds.
	SubpartitionStats(p ident.PartitionID, sub int) (network.SubpartitionStats, bool)
}

// BarrierFlagAtLeastOnce marks the barriers of an at-least-once checkpoint.
const BarrierFlagAtLeastOnce uint32 = 1

// Status and Snapshot are jobcore's, where the decisions about them move (docs/cluster.md §7); the names
// stay here for the callers of Run until the driver replaces this loop.
type (
	Status   = jobcore.Status
	Snapshot = jobcore.Snapshot
)

// Job statuses, as jobcore defines them.
const (
	StatusCreated  = jobcore.StatusCreated
	StatusRunning  = jobcore.StatusRunning
	StatusFinished = jobcore.StatusFinished
	StatusCanceled = jobcore.StatusCanceled
	StatusFailed   = jobcore.StatusFailed
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
	// StorageTimeout bounds every call the job master makes to the checkpoint storage (commit a checkpoint's
	// metadata, write a savepoint, retain, discard, find the newest valid checkpoint): a store that stops
	// answering fails the call (a failed checkpoint, a warning) instead of stopping the job master's loop.
	// Default DefaultStorageTimeout.
	StorageTimeout time.Duration
}

// DefaultStorageTimeout is the default bound of one checkpoint storage call of the job master.
const DefaultStorageTimeout = time.Minute

type execution struct {
	attempt ident.Attempt
	tm      TaskManager
	state   task.State
	in, out uint64
	// restoredFrom is the checkpoint the attempt restored (nil: none); skipUpTo the highest checkpoint id
	// triggered before it was deployed, so every checkpoint above it holds this attempt's state.
	restoredFrom *int64
	skipUpTo     int64
	// createdBy is the failover that deployed this attempt (nil for a first attempt): what the attempt
	// observes as it rejoins its inputs is that failover's loss.
	createdBy *jobcore.Failover
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
	// jobID and secret identify this run of the job on the data plane: every remote channel's partition
	// request carries a credential made from them for its consumer attempt (see descriptor).
	jobID  [network.JobIDSize]byte
	secret []byte
	// firstCheckpointID is the id of this run's first checkpoint: lower ones come from earlier runs.
	firstCheckpointID int64
	// ledger holds what restarted attempts reported lost on their channels, for later failovers of the
	// same consumers (see lossLedger).
	ledger jobcore.LossLedger
	// retainedIDs are the ids of the last Retained checkpoints completed in this run, oldest first.
	retainedIDs []int64

	// mu guards what Snapshot reads from other goroutines. Run's goroutine is the only writer of these
	// fields: it reads them without the lock, takes the lock only to write, and never calls a TaskManager
	// or the storage while holding it.
	mu        sync.Mutex
	status    Status
	err       error
	execs     map[ident.Subtask]*execution
	started   time.Time
	ended     time.Time
	history   jobcore.History
	counts    *checkpoint.Counts
	savepoint *savepointState
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
	// The secret never leaves the process but to the TaskManagers (SetupJob); the job id is not secret.
	jm.secret = make([]byte, 32)
	if _, err := cryptorand.Read(jm.secret); err != nil {
		return nil, fmt.Errorf("job master: partition credential secret: %w", err)
	}
	if _, err := cryptorand.Read(jm.jobID[:]); err != nil {
		return nil, fmt.Errorf("job master: job id: %w", err)
	}
	if cfg.StorageTimeout <= 0 {
		cfg.StorageTimeout = DefaultStorageTimeout
	}
	if cfg.Checkpoint != nil && cfg.Storage == nil {
		return nil, errors.New("job master: checkpointing needs a storage")
	}
	jm.cfg = cfg
	return jm, nil
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
		jm.firstCheckpointID = max(jm.firstCheckpointID, jm.initial.ID+1)
	}
	for _, tm := range jm.cfg.TaskManagers {
		tm.SetupJob(jm.jobID, jm.secret)
	}
	// Deploy the regions the scheduling strategy allows; consumers wait for their producers' partitions.
	jm.deployRegions(jm.sched.Start(), jm.restorePoint())
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
			jm.mu.Lock()
			jm.trimFailovers() // also when no checkpoint completes to do it
			jm.mu.Unlock()
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

// storageCtx is the context of one storage call: not cancelled with the job's context (a savepoint or the
// last checkpoint must still be written when the job is being stopped), but bounded by StorageTimeout.
func (jm *JobMaster) storageCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(jm.ctx), jm.cfg.StorageTimeout)
}

// now is the job master's clock for the pure state machines: milliseconds since the job started.
func (jm *JobMaster) now() int64 { return time.Since(jm.started).Milliseconds() }

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
		if o.Kind == task.InputEnded {
			jm.onInputEnded(u.Attempt)
			return
		}
		jm.onObservation(u.Attempt, o)
		return
	}
	ex.state = u.State
	if u.State.Terminal() {
		// The final counts come with the update: the TaskManager forgets an attempt once it ended.
		ex.in, ex.out = u.RecordsIn, u.RecordsOut
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
					jm.deployRegions(jm.sched.OnResultFinished(e.Result, u.Attempt.Subtask), jm.restorePoint())
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

// onRunning completes failover events whose restarted subtasks all run again.
func (jm *JobMaster) onRunning(s ident.Subtask) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	now := time.Now()
	for _, ev := range jm.history.Events() {
		ev.Running(s, now)
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
	jm.status = jobcore.StatusFailing
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
	jm.status = jobcore.StatusCanceling
	jm.mu.Unlock()
	jm.log.Info("job canceling")
	jm.cancelAll()
	jm.checkDone()
}

// cancelAll cancels every subtask that has not stopped. One that was never deployed (a consumer waiting
// for its blocking inputs, a restart waiting out its backoff) has no task to hear the cancellation and send
// an update: it is CANCELED here, or the job would wait for it forever.
func (jm *JobMaster) cancelAll() {
	jm.mu.Lock()
	var live []*execution
	for _, ex := range jm.execs {
		switch {
		case ex.state == task.Created:
			ex.state = task.Canceled
		case !ex.state.Terminal():
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
	case jobcore.StatusFailing:
		jm.status = StatusFailed
	case jobcore.StatusCanceling:
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

// refreshCounters reads the record counters of the current attempts. Run's goroutine alone writes the
// executions, so it reads them without the lock, asks the TaskManagers with no lock held, and takes the lock
// only to store what they said.
func (jm *JobMaster) refreshCounters() {
	for _, ex := range jm.execs {
		if in, out, ok := ex.tm.Counters(ex.attempt); ok {
			jm.mu.Lock()
			ex.in, ex.out = in, out
			jm.mu.Unlock()
		}
	}
}

// JobID returns the id of this run of the job on the data plane.
func (jm *JobMaster) JobID() [network.JobIDSize]byte { return jm.jobID }

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
	for _, f := range jm.history.Events() {
		snap.Failovers = append(snap.Failovers, f.Report())
	}
	snap.FailoverTotals = jm.history.Totals()
	switch snap.Status {
	case jobcore.StatusFailing, jobcore.StatusCanceling:
		snap.Status = StatusRunning
	}
	for _, v := range jm.cfg.Job.Vertices {
		vs := jobcore.VertexStatus{Vertex: v}
		for i := 0; i < v.Parallelism; i++ {
			ex := jm.execs[ident.Subtask{Vertex: v.ID, Index: int32(i)}]
			st := jobcore.SubtaskStatus{Index: i, TaskManager: jm.placeSubtask(ident.Subtask{Vertex: v.ID, Index: int32(i)}).Name(), State: task.Created}
			if ex != nil {
				in, out := ex.in, ex.out
				st = jobcore.SubtaskStatus{Index: i, Attempt: int(ex.attempt.Number), TaskManager: ex.tm.Name(), State: ex.state, RecordsIn: in, RecordsOut: out}
			}
			vs.RecordsIn += st.RecordsIn
			vs.RecordsOut += st.RecordsOut
			vs.Subtasks = append(vs.Subtasks, st)
		}
		snap.Vertices = append(snap.Vertices, vs)
	}
	return snap
}

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
	"sync"
	"time"

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
}

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

	mu      sync.Mutex
	status  Status
	err     error
	execs   map[ident.Subtask]*execution
	started time.Time
	ended   time.Time
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
		if v.Parallelism > need {
			need = v.Parallelism
		}
	}
	if need > slots {
		return nil, fmt.Errorf("job %q needs %d slots (its highest parallelism), the cluster has %d: add TaskManagers or slots, or lower parallelism", cfg.Job.Name, need, slots)
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	return &JobMaster{cfg: cfg, log: lg.With("job", cfg.Job.Name), updates: make(chan task.Update, 256),
		status: StatusCreated, execs: make(map[ident.Subtask]*execution)}, nil
}

// placement returns the TaskManager of slot i.
func (jm *JobMaster) placement(i int) TaskManager {
	return jm.cfg.TaskManagers[i%len(jm.cfg.TaskManagers)]
}

// Run deploys the job and blocks until it reaches a terminal status. Cancelling ctx cancels the job.
func (jm *JobMaster) Run(ctx context.Context) Snapshot {
	jm.mu.Lock()
	jm.started = time.Now()
	jm.status = StatusRunning
	for _, s := range jm.cfg.Job.Subtasks() {
		jm.execs[s] = &execution{attempt: ident.Attempt{Subtask: s}, tm: jm.placement(int(s.Index)), state: task.Created}
	}
	jm.mu.Unlock()
	jm.log.Info("job started", "vertices", len(jm.cfg.Job.Vertices), "subtasks", len(jm.execs))
	// Eager scheduling: deploy every subtask at once; consumers wait for their producers' partitions.
	for _, v := range jm.cfg.Job.Vertices {
		for i := 0; i < v.Parallelism; i++ {
			s := ident.Subtask{Vertex: v.ID, Index: int32(i)}
			if err := jm.deploy(s); err != nil {
				jm.fail(fmt.Errorf("deploy %s: %w", jm.name(s), err))
			}
		}
	}
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	done := ctx.Done()
	for !jm.terminal() {
		select {
		case u := <-jm.updates:
			jm.onUpdate(u)
		case <-done:
			done = nil
			jm.cancelJob()
		case <-poll.C:
			jm.refreshCounters()
		}
	}
	jm.refreshCounters()
	return jm.Snapshot()
}

func (jm *JobMaster) name(s ident.Subtask) string {
	v := jm.cfg.Job.Vertex(s.Vertex)
	return fmt.Sprintf("%s[%d]", v.Name, s.Index)
}

func (jm *JobMaster) report(u task.Update) {
	// Updates must never be lost; the buffer is generous, and the job master drains it continuously.
	jm.updates <- u
}

// deploy builds the descriptor of the current attempt of s and submits it.
func (jm *JobMaster) deploy(s ident.Subtask) error {
	jm.mu.Lock()
	ex := jm.execs[s]
	ex.state = task.Deploying
	jm.mu.Unlock()
	cfg, err := jm.descriptor(ex)
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
		Chain:             jm.cfg.ChainFor(v),
		BufferTimeout:     jm.cfg.BufferTimeout,
		MaxRecordSize:     jm.cfg.MaxRecordSize,
		CreditsPerChannel: jm.cfg.CreditsPerChannel,
	}
	for _, e := range v.Outputs {
		cfg.Outputs = append(cfg.Outputs, task.OutputSpec{
			Result: e.Result, Subpartitions: len(graph.ConsumersOf(e, idx)), Reconnectable: e.PartitionType.Reconnectable(),
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
	ex.state = u.State
	if u.State.Terminal() {
		if in, out, ok := ex.tm.Counters(ex.attempt); ok {
			ex.in, ex.out = in, out
		}
	}
	jm.mu.Unlock()
	if u.State == task.Failed {
		jm.fail(fmt.Errorf("subtask %s failed: %w", jm.name(u.Attempt.Subtask), u.Err))
	}
	if u.State.Terminal() {
		// Also after a failure: a second failing subtask may be the last one to stop.
		jm.checkDone()
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

// checkDone ends the job when every subtask is in a terminal state.
func (jm *JobMaster) checkDone() {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, ex := range jm.execs {
		if !ex.state.Terminal() {
			return
		}
	}
	switch jm.status {
	case StatusRunning:
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
	switch snap.Status {
	case statusFailing, statusCanceling:
		snap.Status = StatusRunning
	}
	for _, v := range jm.cfg.Job.Vertices {
		vs := VertexStatus{Vertex: v}
		for i := 0; i < v.Parallelism; i++ {
			ex := jm.execs[ident.Subtask{Vertex: v.ID, Index: int32(i)}]
			st := SubtaskStatus{Index: i, TaskManager: jm.placement(i).Name(), State: task.Created}
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

// Package jobmaster is the JobManager's runtime around the pure job-master core (internal/jobcore): the
// Dispatcher holds the sessions of the TaskManagers, their slots and their liveness, and routes their
// messages; a Driver runs one job on a Core, feeding it the events that reach the job (task updates,
// observations, checkpoint acknowledgements, storage results, the clock) and carrying out what its Ready
// asks, in the order Ready documents.
//
// Goroutines of a Driver, and who owns them (all of them end before Run returns):
//
//   - Run's goroutine, the loop: it alone touches the Core. It selects over the inbox, the slot grants, one
//     timer set to the core's NextDeadline, a 200 ms tick, ctx, and snapshot requests.
//   - one storage worker per job: it runs the core's StorageOps one at a time, in order, each under its
//     deadline, and answers each with a StorageDone through the inbox.
//
// Messages to TaskManagers go through their sessions (protocol.Session), whose Send only queues: nothing
// the loop does waits for a TaskManager. The inbox is bounded and its senders (session readers, the storage
// worker) wait rather than drop: an update lost would leave the job waiting for it. No mutex guards core
// state: Snapshot asks the loop for a copy.
//
// It must not import the public runnel package or the TaskManager's side (internal/cluster): TaskManagers
// are reached only through sessions, so the in-process mini-cluster and remote TaskManagers look the same.
package jobmaster

import (
	"cmp"
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

// Status and Snapshot are jobcore's, where the decisions about them live.
type (
	Status   = jobcore.Status
	Snapshot = jobcore.Snapshot
	// Resumed is jobcore's: why a run restarts a job whose leader was lost.
	Resumed = jobcore.Resumed
)

// Job statuses, as jobcore defines them.
const (
	StatusCreated  = jobcore.StatusCreated
	StatusRunning  = jobcore.StatusRunning
	StatusFinished = jobcore.StatusFinished
	StatusCanceled = jobcore.StatusCanceled
	StatusFailed   = jobcore.StatusFailed
)

// Config configures a job's driver.
type Config struct {
	Job *graph.JobGraph
	// JobID is the id of this run of the job (zero: a random one).
	JobID protocol.JobID
	// Committed, when set, is called after a checkpoint's metadata is committed to storage and before the
	// checkpoint counts as completed (before any task hears of it): high availability records it there.
	// Its error fails the checkpoint, as a failed commit does.
	Committed func(ctx context.Context, id int64) error
	// Dispatcher holds the TaskManagers the job runs on.
	Dispatcher *Dispatcher
	// Setup describes the job to its TaskManagers (name, arguments, graph fingerprint, storage and
	// savepoint locations); the driver adds the secret and the start.
	Setup protocol.SetupJob
	// RequireSlots makes NewDriver refuse a job that needs more slots than the dispatcher's TaskManagers
	// have (the mini-cluster, whose TaskManagers are all there); without it the job waits for slots.
	RequireSlots    bool
	SlotWaitTimeout time.Duration
	// CollectAccumulators makes Run, once the job ended, wait (at most AccumulatorWait) for the last
	// accumulator values of every TaskManager that ran the job (TaskManagers in other processes, whose sinks
	// write into their own builds of the job).
	CollectAccumulators bool
	BufferTimeout       time.Duration
	MaxRecordSize       int
	CreditsPerChannel   int
	Logger              *slog.Logger
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
	// Adopt, when set, is a job whose tasks a lost leader's TaskManagers kept running: the driver takes
	// them over (jobcore.Config.Adopt) under JobID, the run's id, with the run's secret and start.
	Adopt *Adoption
	// Resumed, when set, says the run restarts a job whose leader was lost (jobcore.Config.Resumed).
	Resumed *Resumed
	// StorageTimeout bounds every storage op but a savepoint's write (commit a checkpoint's metadata,
	// retain, discard, find the newest valid checkpoint, the next id): a store that stops answering fails
	// the op (a failed checkpoint, a warning) instead of holding the job up. A savepoint's write is bounded
	// by the savepoint's own deadline, which the core gives with the op. Default DefaultStorageTimeout.
	StorageTimeout time.Duration
}

// Adoption is a job to take over: the core's adoption (its Slots taken from the dispatcher with Adopt),
// and what the TaskManagers that kept the tasks know the run by.
type Adoption struct {
	Core   *jobcore.Adoption
	Secret []byte
	// Start is the run's start, which the tasks date their observations from.
	Start time.Time
}

// DefaultStorageTimeout is the default bound of one checkpoint storage op.
const DefaultStorageTimeout = time.Minute

// tickInterval is how often the loop ticks the core when nothing else happens: it settles and trims the
// failover history.
const tickInterval = 200 * time.Millisecond

// inboxSize bounds the events waiting for the loop; senders wait when it is full.
const inboxSize = 1024

// Driver runs one job on a jobcore.Core.
type Driver struct {
	cfg  Config
	log  *slog.Logger
	disp *Dispatcher
	core *jobcore.Core
	// jobID and secret identify this run of the job: every message about it carries the id, and every
	// remote channel's partition request carries a credential made from both for its consumer attempt.
	jobID  protocol.JobID
	secret []byte

	inbox     chan jobcore.Event
	snapshots chan chan Snapshot
	// ended is closed when the loop stops: senders to the inbox give up, and Snapshot returns final.
	ended chan struct{}
	final Snapshot
	// running is set when Run starts the loop; before, Snapshot returns initial, the state at NewDriver.
	running atomic.Bool
	initial Snapshot

	// grants holds the slots the dispatcher granted and the loop has not taken yet. The dispatcher may
	// grant from within the loop's own slot request, so it must never wait for the loop: the list is bounded
	// by the slots the job asked for. wake has one token: grants changed.
	grantsMu sync.Mutex
	grants   []jobcore.SlotsGranted
	wake     chan struct{}

	accMu sync.Mutex
	// accumulators holds the newest accumulator values each TaskManager sent, by TaskManager; finals the
	// TaskManagers that sent their last ones (the answer to ReleaseJob). accWake has one token: they changed.
	accumulators map[jobcore.TaskManagerID]map[string][]byte
	finals       map[jobcore.TaskManagerID]bool
	accWake      chan struct{}

	// Owned by the loop.
	started  time.Time
	storageQ chan jobcore.StorageOp
	// setUp holds the TaskManagers that were sent the job's setup: they are sent ReleaseJob at the end.
	setUp   map[jobcore.TaskManagerID]bool
	workers sync.WaitGroup
	// triggeredFrom and triggeredTo are the lowest and highest checkpoint ids sent to a task (0: none):
	// what the sweep at the end of the job covers.
	triggeredFrom, triggeredTo int64
}

// SlotsNeeded returns how many slots a job needs: its highest parallelism with slot sharing, one per
// subtask without.
func SlotsNeeded(jg *graph.JobGraph, noSlotSharing bool) int {
	need := 0
	for _, v := range jg.Vertices {
		if noSlotSharing {
			need += v.Parallelism
		} else if v.Parallelism > need {
			need = v.Parallelism
		}
	}
	return need
}

// NewDriver checks cfg and makes the driver of its job; Run runs it.
func NewDriver(cfg Config) (*Driver, error) {
	if cfg.Job == nil || len(cfg.Job.Vertices) == 0 {
		return nil, errors.New("job master: empty job graph")
	}
	if cfg.Dispatcher == nil {
		return nil, errors.New("job master: no dispatcher")
	}
	if cfg.RequireSlots {
		slots := 0
		for _, tm := range cfg.Dispatcher.TaskManagers() {
			slots += tm.Slots
		}
		if need := SlotsNeeded(cfg.Job, cfg.NoSlotSharing); need > slots {
			what := "its highest parallelism"
			if cfg.NoSlotSharing {
				what = "one per subtask, without slot sharing"
			}
			return nil, fmt.Errorf("job %q needs %d slots (%s), the cluster has %d: add TaskManagers or slots, or lower parallelism", cfg.Job.Name, need, what, slots)
		}
	}
	if cfg.Checkpoint != nil && cfg.Storage == nil {
		return nil, errors.New("job master: checkpointing needs a storage")
	}
	if cfg.StorageTimeout <= 0 {
		cfg.StorageTimeout = DefaultStorageTimeout
	}
	lg := cmp.Or(cfg.Logger, slog.Default())
	cc := jobcore.Config{Job: cfg.Job, BufferTimeout: cfg.BufferTimeout, MaxRecordSize: cfg.MaxRecordSize,
		CreditsPerChannel: cfg.CreditsPerChannel, StateBackend: cfg.StateBackend, Failover: cfg.Failover,
		Restart: cfg.Restart, Scheduling: cfg.Scheduling, NoSlotSharing: cfg.NoSlotSharing,
		Checkpoint: cfg.Checkpoint, SavepointOnStop: cfg.SavepointOnStop, SlotWaitTimeout: cfg.SlotWaitTimeout, Resumed: cfg.Resumed,
		// The restart jitter differs from run to run; the core's scripts seed it to replay exactly.
		Seed: uint64(time.Now().UnixNano())}
	if sp := cfg.Savepoint; sp != nil {
		cc.Savepoint = sp.Checkpoint
	}
	if a := cfg.Adopt; a != nil {
		if cfg.JobID == (protocol.JobID{}) || len(a.Secret) == 0 {
			return nil, errors.New("job master: taking a job over needs its run's id and secret")
		}
		cc.Adopt = a.Core
	}
	core, err := jobcore.New(cc)
	if err != nil {
		return nil, fmt.Errorf("job master: %w", err)
	}
	d := &Driver{cfg: cfg, log: lg.With("job", cfg.Job.Name), disp: cfg.Dispatcher, core: core,
		inbox: make(chan jobcore.Event, inboxSize), snapshots: make(chan chan Snapshot), ended: make(chan struct{}),
		wake: make(chan struct{}, 1), accumulators: map[jobcore.TaskManagerID]map[string][]byte{},
		finals: map[jobcore.TaskManagerID]bool{}, accWake: make(chan struct{}, 1),
		setUp: map[jobcore.TaskManagerID]bool{}}
	d.initial = core.Snapshot() // no goroutine has the core yet
	// The secret never leaves the process but to the job's TaskManagers (SetupJob); the job id is not secret.
	d.secret = make([]byte, 32)
	if _, err := cryptorand.Read(d.secret); err != nil {
		return nil, fmt.Errorf("job master: partition credential secret: %w", err)
	}
	if a := cfg.Adopt; a != nil {
		d.secret = a.Secret
		for _, s := range a.Core.Slots {
			d.setUp[s.TaskManager] = true // released at the end as any
		}
	}
	if d.jobID = cfg.JobID; d.jobID == (protocol.JobID{}) {
		if _, err := cryptorand.Read(d.jobID[:]); err != nil {
			return nil, fmt.Errorf("job master: job id: %w", err)
		}
	}
	return d, nil
}

// JobID returns the id of this run of the job.
func (d *Driver) JobID() protocol.JobID { return d.jobID }

// Snapshot returns the job's current observable state, as a copy the loop makes. Safe from any goroutine;
// once the job ended it is the final state.
func (d *Driver) Snapshot() Snapshot {
	if !d.running.Load() {
		return d.initial
	}
	reply := make(chan Snapshot, 1)
	select {
	case d.snapshots <- reply:
		return <-reply
	case <-d.ended:
		return d.final
	}
}

// Accumulators returns the newest accumulator values of each TaskManager that sent some.
func (d *Driver) Accumulators() map[jobcore.TaskManagerID]map[string][]byte {
	d.accMu.Lock()
	defer d.accMu.Unlock()
	out := make(map[jobcore.TaskManagerID]map[string][]byte, len(d.accumulators))
	for tm, vs := range d.accumulators {
		out[tm] = vs
	}
	return out
}

func (d *Driver) accumulated(tm jobcore.TaskManagerID, a protocol.Accumulators) {
	d.accMu.Lock()
	if d.finals[tm] && !a.Final {
		// A periodic value the TaskManager encoded before its final one (another goroutine sends it)
		// must not replace the final one.
		d.accMu.Unlock()
		return
	}
	if len(a.Values) > 0 {
		d.accumulators[tm] = a.Values
	}
	if a.Final {
		d.finals[tm] = true
	}
	d.accMu.Unlock()
	select {
	case d.accWake <- struct{}{}:
	default:
	}
}

// AccumulatorWait bounds the wait for the TaskManagers' last accumulator values at the end of a job.
const AccumulatorWait = 5 * time.Second

// awaitFinals waits until every TaskManager in tms that is still connected sent its last accumulators.
func (d *Driver) awaitFinals(tms map[jobcore.TaskManagerID]bool) {
	deadline := time.NewTimer(AccumulatorWait)
	defer deadline.Stop()
	for {
		d.accMu.Lock()
		missing := 0
		var gone []jobcore.TaskManagerID
		for tm := range tms {
			switch {
			case d.finals[tm]:
			case d.disp.connected(tm):
				missing++
			default:
				gone = append(gone, tm)
			}
		}
		d.accMu.Unlock()
		if missing == 0 {
			if len(gone) > 0 {
				// Their last values sent stand for their final ones: what their sinks took in since is
				// not in the job's accumulators.
				d.log.Warn("job master: TaskManagers lost before they sent their last accumulator values", "job", d.cfg.Job.Name, "taskmanagers", gone)
			}
			return
		}
		select {
		case <-d.accWake:
		case <-deadline.C:
			d.log.Warn("job master: some TaskManagers did not send their last accumulator values", "missing", missing, "waited", AccumulatorWait)
			return
		case <-time.After(100 * time.Millisecond): // a TaskManager lost meanwhile answers never
		}
	}
}

// post puts an event into the inbox, waiting while it is full; after the job ended the event is of no use
// and is dropped.
func (d *Driver) post(ev jobcore.Event) {
	select {
	case d.inbox <- ev:
	case <-d.ended:
	}
}

// Stop stops the job with a savepoint written to dir ("": the configured SavepointOnStop), then cancels it.
func (d *Driver) Stop(dir string) { d.post(jobcore.Stop{Dir: dir}) }

// grant takes slots the dispatcher granted; it never waits.
func (d *Driver) grant(g jobcore.SlotsGranted) {
	d.grantsMu.Lock()
	d.grants = append(d.grants, g)
	d.grantsMu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run runs the job and blocks until it reaches a terminal status and every goroutine of the driver ended.
// Cancelling ctx stops the job: with the savepoint on stop if one was configured, else at once.
func (d *Driver) Run(ctx context.Context) Snapshot {
	d.started = time.Now()
	if err := d.disp.addJob(d); err != nil {
		d.core.Step(0, jobcore.Start{Wall: d.started}) //nolint:errcheck // the job fails below at once
		d.final = d.core.Snapshot()
		d.final.Status, d.final.Err = StatusFailed, fmt.Errorf("job master: %w", err)
		close(d.ended)
		return d.final
	}
	defer d.disp.removeJob(d)
	if a := d.cfg.Adopt; a != nil {
		// Routed to this driver from now on: what the TaskManagers held back for the job comes next.
		for tm := range d.setUp {
			d.disp.send(tm, d.jobID, protocol.AdoptJob{})
		}
		if c := a.Core.Checkpoint; c > 0 {
			d.triggeredTo = c // the sweep at the end removes what the lost leader's checkpoints left
			if cp := a.Core.Completed; cp != nil {
				d.triggeredFrom = cp.ID + 1
			} else {
				d.triggeredFrom = 1
			}
		}
	}
	d.running.Store(true)
	d.storageQ = make(chan jobcore.StorageOp, 64) // the core keeps at most 32 out: the loop never waits here
	d.workers.Add(1)
	go d.storageWorker()
	d.step(jobcore.Start{Wall: d.started})
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	done := ctx.Done()
	for !d.core.Status().Terminal() {
		if at, ok := d.core.NextDeadline(); ok {
			timer.Reset(max(at-d.now(), 0))
		} else {
			timer.Stop()
		}
		select {
		case ev := <-d.inbox:
			d.step(ev)
		case <-d.wake:
			d.grantsMu.Lock()
			gs := d.grants
			d.grants = nil
			d.grantsMu.Unlock()
			for _, g := range gs {
				d.step(g)
			}
		case <-timer.C:
			d.step(jobcore.Tick{})
		case <-tick.C:
			d.step(jobcore.Tick{}) // settles and trims the failover history when nothing else does
		case <-done:
			done = nil
			d.step(jobcore.Stop{})
		case reply := <-d.snapshots:
			reply <- d.core.Snapshot()
		}
	}
	d.final = d.core.Snapshot()
	close(d.ended)
	for tm := range d.setUp {
		d.disp.send(tm, d.jobID, protocol.ReleaseJob{})
	}
	if d.cfg.CollectAccumulators {
		d.awaitFinals(d.setUp)
	}
	// What the last Ready asked (the last retain) is still carried out; then the worker ends, and what the
	// aborted checkpoints left is removed: every task has stopped writing.
	close(d.storageQ)
	d.workers.Wait()
	d.sweepAborted()
	return d.final
}

// now is the core's clock: the time since the job started.
func (d *Driver) now() time.Duration { return time.Since(d.started) }

// step feeds one event to the core and carries out what it asks.
func (d *Driver) step(ev jobcore.Event) {
	if su, ok := ev.(jobcore.JobSetUp); ok && su.Err != nil {
		// Its slots must not come back to this job; the core fails or re-plans with the others.
		d.disp.exclude(d.jobID, su.TaskManager)
	}
	if err := d.core.Step(d.now(), ev); err != nil {
		// A bug of the driver, not a failure of the job: say so loudly and go on.
		d.log.Error("job master: event refused", "event", fmt.Sprintf("%T", ev), "err", err)
		return
	}
	if !d.core.HasReady() {
		return
	}
	rd := d.core.Ready()
	for _, op := range rd.Storage {
		d.storageQ <- op
	}
	for _, m := range rd.Messages {
		d.message(m)
	}
	for _, l := range rd.Logs {
		d.log.Log(context.Background(), slog.Level(l.Level), l.Message, l.Attrs...)
	}
	d.core.Advance()
	// After Advance: a grant the pool makes at once comes back through grants, not as a nested Step.
	for _, sc := range rd.Slots {
		d.disp.slots(d.jobID, sc)
	}
}

// message sends one message to its TaskManager, in the form that crosses a process: the job's setup with
// its secret, deployments with a credential on every remote channel for their consumer attempt only.
func (d *Driver) message(m jobcore.Message) {
	var body any = m.Body
	switch b := m.Body.(type) {
	case jobcore.SetupJob:
		su := d.cfg.Setup
		su.Name = d.cfg.Job.Name
		su.Secret = d.secret
		su.Start = d.started.UnixNano()
		if a := d.cfg.Adopt; a != nil {
			su.Start = a.Start.UnixNano()
		}
		body = su
		d.setUp[m.To] = true
	case jobcore.Deploy:
		body = jobcore.Deploy{Deployment: d.withCredentials(b.Deployment)}
	case jobcore.TriggerCheckpoint:
		if d.triggeredFrom == 0 || b.ID < d.triggeredFrom {
			d.triggeredFrom = b.ID
		}
		d.triggeredTo = max(d.triggeredTo, b.ID)
	}
	d.disp.send(m.To, d.jobID, body)
}

// withCredentials copies a deployment's inputs with the job id and a partition credential on every remote
// channel, made for this consumer attempt.
func (d *Driver) withCredentials(dep jobcore.Deployment) jobcore.Deployment {
	ins := make([]deploy.InputSpec, len(dep.Inputs))
	for i, in := range dep.Inputs {
		out := deploy.InputSpec{Channels: make([]deploy.ChannelSpec, len(in.Channels))}
		copy(out.Channels, in.Channels)
		for c := range out.Channels {
			spec := &out.Channels[c]
			if !spec.Local {
				spec.Job = d.jobID // protocol.JobID is the wire's job id
				spec.Credential = network.PartitionCredential(d.secret, [network.JobIDSize]byte(d.jobID), spec.Partition, spec.Subpartition, dep.Info.Attempt)
			}
		}
		ins[i] = out
	}
	dep.Inputs = ins
	return dep
}

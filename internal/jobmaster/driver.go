// Package jobmaster runs one job on the pure job-master core (internal/jobcore): the Driver feeds the core
// the events that reach the job (task updates, observations, checkpoint acknowledgements, storage results,
// the clock) and carries out what its Ready asks, in the order Ready documents.
//
// Goroutines, and who owns them (all of them end before Run returns):
//
//   - Run's goroutine, the loop: it alone touches the Core. It selects over the inbox, one timer set to the
//     core's NextDeadline, a 200 ms poll of the record counters, ctx, and snapshot requests.
//   - one storage worker per job: it runs the core's StorageOps one at a time, in order, each under its
//     deadline, and answers each with a StorageDone through the inbox.
//   - one sender per TaskManager: it carries out the messages for that TaskManager in order, by calling
//     the TaskManager's methods, and puts their answers (a refused trigger, a subpartition sample, the
//     counters) into the inbox. A TaskManager call that blocks stalls its own sender only, never the loop.
//
// The inbox is bounded and its senders wait rather than drop: an update lost would leave the job waiting for
// it. Nothing the loop does waits for a sender or the storage worker: their queues are not bounded by the
// driver but by the core (at most 32 storage ops out; messages by what the job's subtasks need). No mutex
// guards core state: Snapshot asks the loop for a copy. The only locks are inside the senders' queues.
//
// It must not import the public runnel package or the cluster wiring: TaskManagers are reached through the
// TaskManager interface, so the in-process mini-cluster and a remote TaskManager look the same to it.
package jobmaster

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/scheduler"
	"github.com/runnel-dev/runnel/internal/task"
)

// TaskManager is the driver's view of a TaskManager.
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

// Status and Snapshot are jobcore's, where the decisions about them live.
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

// Config configures a job's driver.
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
	// StorageTimeout bounds every storage op but a savepoint's write (commit a checkpoint's metadata,
	// retain, discard, find the newest valid checkpoint, the next id): a store that stops answering fails
	// the op (a failed checkpoint, a warning) instead of holding the job up. A savepoint's write is bounded
	// by the savepoint's own deadline, which the core gives with the op. Default DefaultStorageTimeout.
	StorageTimeout time.Duration
}

// DefaultStorageTimeout is the default bound of one checkpoint storage op.
const DefaultStorageTimeout = time.Minute

// countersInterval is how often the record counters of running attempts are asked for.
const countersInterval = 200 * time.Millisecond

// inboxSize bounds the events waiting for the loop; senders wait when it is full.
const inboxSize = 1024

// Driver runs one job on a jobcore.Core.
type Driver struct {
	cfg  Config
	log  *slog.Logger
	core *jobcore.Core
	// jobID and secret identify this run of the job on the data plane: every remote channel's partition
	// request carries a credential made from them for its consumer attempt (see taskConfig).
	jobID  [network.JobIDSize]byte
	secret []byte

	inbox     chan jobcore.Event
	snapshots chan chan Snapshot
	// ended is closed when the loop stops: senders to the inbox give up, and Snapshot returns final.
	ended chan struct{}
	final Snapshot
	// running is set when Run starts the loop; before, Snapshot returns initial, the state at NewDriver.
	running atomic.Bool
	initial Snapshot

	// Owned by the loop.
	started  time.Time
	senders  []*sender // by TaskManagerID-1
	storageQ chan jobcore.StorageOp
	// deployed holds, per TaskManager, the attempts deployed there that have not ended: whose counters
	// the poll asks for.
	deployed  []map[ident.Attempt]bool
	slotGrant int
	// pending are answers the loop gives itself (slot grants), stepped after the Ready that asked.
	pending []jobcore.Event
	workers sync.WaitGroup
}

// NewDriver checks cfg and makes the driver of its job; Run runs it.
func NewDriver(cfg Config) (*Driver, error) {
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
	if cfg.Checkpoint != nil && cfg.Storage == nil {
		return nil, errors.New("job master: checkpointing needs a storage")
	}
	if cfg.StorageTimeout <= 0 {
		cfg.StorageTimeout = DefaultStorageTimeout
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	cc := jobcore.Config{Job: cfg.Job, BufferTimeout: cfg.BufferTimeout, MaxRecordSize: cfg.MaxRecordSize,
		CreditsPerChannel: cfg.CreditsPerChannel, StateBackend: cfg.StateBackend, Failover: cfg.Failover,
		Restart: cfg.Restart, Scheduling: cfg.Scheduling, NoSlotSharing: cfg.NoSlotSharing,
		Checkpoint: cfg.Checkpoint, SavepointOnStop: cfg.SavepointOnStop,
		// The restart jitter differs from run to run, as it did before the core took the decisions.
		Seed: uint64(time.Now().UnixNano())}
	if sp := cfg.Savepoint; sp != nil {
		cc.Savepoint = sp.Checkpoint
	}
	core, err := jobcore.New(cc)
	if err != nil {
		return nil, fmt.Errorf("job master: %w", err)
	}
	d := &Driver{cfg: cfg, log: lg.With("job", cfg.Job.Name), core: core, inbox: make(chan jobcore.Event, inboxSize),
		snapshots: make(chan chan Snapshot), ended: make(chan struct{})}
	d.initial = core.Snapshot() // no goroutine has the core yet
	// The secret never leaves the process but to the TaskManagers (SetupJob); the job id is not secret.
	d.secret = make([]byte, 32)
	if _, err := cryptorand.Read(d.secret); err != nil {
		return nil, fmt.Errorf("job master: partition credential secret: %w", err)
	}
	if _, err := cryptorand.Read(d.jobID[:]); err != nil {
		return nil, fmt.Errorf("job master: job id: %w", err)
	}
	return d, nil
}

// JobID returns the id of this run of the job on the data plane.
func (d *Driver) JobID() [network.JobIDSize]byte { return d.jobID }

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

// post puts an event into the inbox, waiting while it is full; after the job ended the event is of no use
// and is dropped.
func (d *Driver) post(ev jobcore.Event) {
	select {
	case d.inbox <- ev:
	case <-d.ended:
	}
}

// Run runs the job and blocks until it reaches a terminal status and every goroutine of the driver ended.
// Cancelling ctx stops the job: with the savepoint on stop if one was configured, else at once.
func (d *Driver) Run(ctx context.Context) Snapshot {
	d.started = time.Now()
	d.running.Store(true)
	d.storageQ = make(chan jobcore.StorageOp, 64) // the core keeps at most 32 out: the loop never waits here
	d.workers.Add(1)
	go d.storageWorker()
	for i, tm := range d.cfg.TaskManagers {
		s := newSender(d, jobcore.TaskManagerID(i+1), tm)
		d.senders = append(d.senders, s)
		d.deployed = append(d.deployed, make(map[ident.Attempt]bool))
		d.workers.Add(1)
		go s.run()
	}
	d.step(jobcore.Start{Wall: d.started})
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	poll := time.NewTicker(countersInterval)
	defer poll.Stop()
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
		case <-timer.C:
			d.step(jobcore.Tick{})
		case <-poll.C:
			d.pollCounters()
			d.step(jobcore.Tick{}) // also settles and trims the failover history when nothing else does
		case <-done:
			done = nil
			d.step(jobcore.Stop{})
		case reply := <-d.snapshots:
			reply <- d.core.Snapshot()
		}
	}
	d.final = d.core.Snapshot()
	close(d.ended)
	// What the last Ready asked (releases, the last retain) is still carried out; then the workers end.
	close(d.storageQ)
	for _, s := range d.senders {
		s.close()
	}
	d.workers.Wait()
	return d.final
}

// now is the core's clock: the time since the job started.
func (d *Driver) now() time.Duration { return time.Since(d.started) }

// step feeds one event to the core and carries out what it asks, then the answers the loop gave itself.
func (d *Driver) step(ev jobcore.Event) {
	d.stepOne(ev)
	for len(d.pending) > 0 {
		ev := d.pending[0]
		d.pending = d.pending[1:]
		d.stepOne(ev)
	}
}

func (d *Driver) stepOne(ev jobcore.Event) {
	if u, ok := ev.(jobcore.TaskUpdate); ok && u.State.Terminal() {
		d.forget(u.Attempt)
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
	for _, sc := range rd.Slots {
		d.slots(sc)
	}
	for _, l := range rd.Logs {
		d.log.Log(context.Background(), slog.Level(l.Level), l.Message, l.Attrs...)
	}
	d.core.Advance()
}

// slots is the mini-cluster's slot pool: its TaskManagers never leave, so a request is granted at once,
// slot i of the job on TaskManager i mod n (today's placement, which keeps reports' TaskManager names).
// Released slots need no bookkeeping: nothing else asks this pool.
func (d *Driver) slots(sc jobcore.SlotChange) {
	if sc.Request == 0 {
		return
	}
	var g jobcore.SlotsGranted
	for range sc.Request {
		i := d.slotGrant % len(d.cfg.TaskManagers)
		tm := d.cfg.TaskManagers[i]
		g.Slots = append(g.Slots, jobcore.Slot{TaskManager: jobcore.TaskManagerID(i + 1), Name: tm.Name(),
			DataAddress: tm.DataAddress(), Number: d.slotGrant / len(d.cfg.TaskManagers)})
		d.slotGrant++
	}
	// After Advance, not a nested Step: the core takes no event between Ready and Advance.
	d.pending = append(d.pending, g)
}

// message hands one message to its TaskManager's sender, after the bookkeeping the loop keeps itself.
func (d *Driver) message(m jobcore.Message) {
	i := int(m.To) - 1
	if i < 0 || i >= len(d.senders) {
		d.log.Error("job master: message to an unknown TaskManager", "to", m.To)
		return
	}
	if dep, ok := m.Body.(jobcore.Deploy); ok {
		d.deployed[i][dep.Deployment.Info.Attempt] = true
	}
	d.senders[i].enqueue(m.Body)
}

// pollCounters asks every TaskManager for the counters of the attempts deployed there.
func (d *Driver) pollCounters() {
	for i, s := range d.senders {
		if len(d.deployed[i]) == 0 {
			continue
		}
		as := make([]ident.Attempt, 0, len(d.deployed[i]))
		for a := range d.deployed[i] {
			as = append(as, a)
		}
		s.enqueue(pollCounters{attempts: as})
	}
}

// forget drops an attempt that ended from the counters' poll.
func (d *Driver) forget(a ident.Attempt) {
	for _, m := range d.deployed {
		delete(m, a)
	}
}

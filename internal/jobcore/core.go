package jobcore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

// Config configures a Core: the job and how it runs, without the parts that belong to a process (the
// TaskManagers, the operator chains, the storage and the logger stay with the driver).
type Config struct {
	Job               *graph.JobGraph
	BufferTimeout     time.Duration
	MaxRecordSize     int
	CreditsPerChannel int
	// StateBackend names where keyed state lives: "memory" or "pebble".
	StateBackend string
	// Failover picks the subtasks to restart after a failure; Restart decides whether and when.
	Failover scheduler.FailoverMode
	Restart  scheduler.RestartConfig
	// Scheduling is eager or pipelined-region (the default).
	Scheduling scheduler.SchedulingMode
	// NoSlotSharing gives every subtask a logical slot of its own, in vertex order, instead of slot sharing
	// (subtask i of every vertex in logical slot i).
	NoSlotSharing bool
	// Checkpoint turns checkpointing on (nil: off). The core then asks the storage for the first id
	// before it deploys anything.
	Checkpoint *checkpoint.Config
	// Savepoint, when set, is the state the job starts from, found at SavepointLocation (for reports): a
	// checkpoint of another run, verified when it was read.
	Savepoint         *checkpoint.CompletedCheckpoint
	SavepointLocation string
	// SavepointOnStop is where a Stop without a directory of its own writes its savepoint ("": a Stop
	// without a directory cancels at once).
	SavepointOnStop string
	// SavepointTimeout bounds a stop's savepoint, from the Stop to its write (default
	// DefaultSavepointTimeout); past it the job is cancelled without one.
	SavepointTimeout time.Duration
	// Seed seeds the restart strategy's jitter, so that a run replays exactly.
	Seed uint64
	// SlotWaitTimeout bounds how long a deployment or restart waits for slots before the job fails
	// (default DefaultSlotWaitTimeout).
	SlotWaitTimeout time.Duration
	// Adopt, when set, is a job whose tasks run already (a lost leader's, adopt.go): the core takes them
	// over instead of deploying them. Savepoint is then unused: Adopt.Completed is the restore point.
	Adopt *Adoption
	// Resumed, when set, says this run restarts a job a lost leader ran, whose tasks the next leader could
	// not take over: the run's failovers begin with that restart, saying why.
	Resumed *Resumed
}

// Resumed is why a run restarts a job after its leader was lost: At, when the new leader restarted it;
// Reason, why the tasks the TaskManagers kept could not be taken over ("": task continuity is off).
type Resumed struct {
	At     time.Time
	Reason string
}

// DefaultSlotWaitTimeout is how long a job waits for slots by default.
const DefaultSlotWaitTimeout = 5 * time.Minute

// DefaultSavepointTimeout is how long a stop waits for its savepoint by default.
const DefaultSavepointTimeout = time.Minute

// execution is the current attempt of one subtask.
type execution struct {
	attempt ident.Attempt
	state   deploy.State
	in, out uint64
	// watermark is the attempt's last reported watermark; hasWatermark says there is one.
	watermark    int64
	hasWatermark bool
	metrics      []deploy.Metric
	// times is the attempt's last reported TimeRates, logBytes its in-flight logs' bytes.
	times    TimeRates
	logBytes int64
	// slot is the subtask's logical slot; tm the TaskManager the attempt was deployed to (0: not deployed).
	slot int
	tm   TaskManagerID
	// skipUpTo is the highest checkpoint id triggered before the attempt was deployed: it ignores their
	// barriers, which only its predecessor could have completed.
	skipUpTo int64
	// restoredFrom is the checkpoint the deployed attempt restores (nil: none); restore, set by a restart
	// until the attempt is deployed, is the one its failover verified and reports.
	restoredFrom *checkpoint.CompletedCheckpoint
	restore      *restoreChoice
	// createdBy is the failover that deployed this attempt (nil for a first attempt): what the attempt
	// observes as it rejoins its inputs is that failover's loss.
	createdBy *Failover
	// owner is the attempt number in the ids of the subtask's partitions: the attempt's own, except after a
	// task failover, whose new attempt takes over its predecessor's partitions (docs/taskfailover.md);
	// taskRestart marks such an attempt until it is deployed.
	owner       int32
	taskRestart bool
	// replaying marks an attempt deployed by a task failover until it reports ReplayDone (a source, which
	// replays no input and reports none, until it runs).
	replaying bool
	// replayRetried marks a subtask whose replay failed once for a reason of its own (no log was at fault)
	// and that a task failover restarted again: a second such failure before a replay is done falls back.
	replayRetried bool
}

// partitionOwner is the attempt the ids of the subtask's partitions name.
func (ex *execution) partitionOwner() ident.Attempt {
	return ident.Attempt{Subtask: ex.attempt.Subtask, Number: ex.owner}
}

// partition returns the id of the subtask's partition of result r, as its consumers read it.
func (ex *execution) partition(r ident.ResultID) ident.PartitionID {
	return ident.PartitionID{Result: r, Producer: ex.partitionOwner()}
}

// taskManager is what the core knows of a TaskManager that granted it slots.
type taskManager struct {
	name, dataAddress string
	setupSent, setUp  bool
	lost              bool
	lostReason        string
}

// restarting reports whether subtask s is in the failover in progress: being cancelled, to be redeployed.
func (c *Core) restarting(s ident.Subtask) bool { return c.plan != nil && c.plan.subtasks[s] }

// restartPlan is a failover in progress: the subtasks being cancelled, to be redeployed as new attempts.
type restartPlan struct {
	subtasks  map[ident.Subtask]bool
	notBefore time.Duration
	events    []*Failover
	// suspects are TaskManagers a failure named as an unreachable peer: the plan waits until each is
	// known alive or lost, so that no restart lands on a dead TaskManager.
	suspects map[TaskManagerID]bool
	// verify is the VerifyLatest op in flight for the plan (0: none); verified its answer. A failure or a
	// TaskManager loss while it is out widens the plan and clears both: the answer is then stale.
	verify   uint64
	verified *restoreChoice
	// fallback says the plan restarts by region (task failover could not be had): its attempts make new
	// partitions and start new determinant logs.
	fallback bool
}

// restoreChoice is the checkpoint a restart restores (cp nil: none).
type restoreChoice struct {
	cp *checkpoint.CompletedCheckpoint
}

// pendingSample is a SampleSubpartitions sent and not yet answered: the baseline of a failover, or the
// second sample of a channel a restarted attempt joined.
type pendingSample struct {
	to TaskManagerID
	ev *Failover
	// consumers maps each sampled channel to its restarted consumer (a baseline).
	consumers map[Channel]ident.Subtask
	// join, when set, is the loss of the channel waiting for the sample.
	join     *pendingJoin
	channels []Channel
}

// pendingJoin is a channel's loss waiting for its producer's counters.
type pendingJoin struct {
	attempt  ident.Attempt
	skipUpTo int64
	loss     ChannelLoss
	// rolledBack: the attempt restarted, from a checkpoint without this gap, before the answer came. The
	// loss is then not counted: the restarting failover counts it afresh (see LossLedger).
	rolledBack bool
}

// Core is the job master of one job as a state machine. Step feeds it events; Ready returns what it asks
// for; Advance says that was carried out. Only one goroutine may use a Core.
type Core struct {
	// fired holds the indexes of the failure injections that fired (sorted): bounded by the job's
	// injections, each recorded once.
	fired    []int
	cfg      Config
	topo     *scheduler.Topology
	sched    scheduler.SchedulingStrategy
	failover scheduler.FailoverStrategy
	// fallback is region failover, for a job under task failover: what restarts when the logs a task
	// failover needs are gone (docs/taskfailover.md §7).
	fallback scheduler.FailoverStrategy
	// fallbackUpstream is region failover that takes no partition for available: what restarts when an
	// in-flight log a restarted subtask reads is incomplete. Its producers restart too (a consumer
	// restarted alone would read the same incomplete log again), and theirs, up to the sources.
	fallbackUpstream scheduler.FailoverStrategy
	restart          scheduler.RestartStrategy
	// backoffs, under task and approximate failover, times the restarts of each failed subtask by its own
	// failures (a strategy of the job's restart configuration that hears only of them), so that
	// independent failures of different subtasks restart at once and a subtask that keeps failing backs
	// off. Whether to restart at all stays restart's decision, which counts every failure of the job.
	// Bounded by the job's subtasks: one entry each, made at its first failure.
	backoffs map[ident.Subtask]scheduler.RestartStrategy

	now       time.Duration
	started   time.Time
	ended     time.Time
	status    Status
	err       error
	execs     map[ident.Subtask]*execution
	subtasks  []ident.Subtask // in vertex, then index order
	slotCount int
	// slots binds logical slot i to a granted slot (nil: unbound); slotLost says why an unbound slot lost
	// its binding, for the waiting sentence.
	slots    []*Slot
	slotLost []string
	tms      map[TaskManagerID]*taskManager
	// scheduled are subtasks the scheduling strategy released that wait for their slot (or a producer's).
	scheduled map[ident.Subtask]bool
	// slotWaitSince is when the job began to wait for slots (0 with waiting false).
	slotWaitSince time.Duration
	waitingSlots  bool
	waiting       string

	plan    *restartPlan
	history History
	ledger  LossLedger
	samples map[uint64]*pendingSample
	token   uint64

	// Checkpointing. coord is created when NextID answers; firstCheckpointID is this run's first id (lower
	// ones are earlier runs'); lastTriggered the highest id triggered; initial the savepoint the job
	// started from; retainedIDs the last Retained checkpoints completed in this run, oldest first.
	coord             *checkpoint.Coordinator
	firstCheckpointID int64
	lastTriggered     int64
	initial           *checkpoint.CompletedCheckpoint
	retainedIDs       []int64
	savepoint         *savepointState
	// cancelHeld says the job is failing or cancelling and its cancellations wait for a checkpoint's
	// commit to answer (cancelAll).
	cancelHeld bool
	// ops are the storage ops sent and not yet answered; queued those held back past maxStorageOps.
	ops    map[uint64]StorageRequest
	queued []StorageOp
	opSeq  uint64

	ready      Ready
	readyTaken bool
}

// New validates cfg and makes the core of its job; Step(Start) starts it.
func New(cfg Config) (*Core, error) {
	if cfg.Job == nil || len(cfg.Job.Vertices) == 0 {
		return nil, errors.New("job core: empty job graph")
	}
	if cfg.Checkpoint != nil {
		if err := cfg.Checkpoint.Validate(); err != nil {
			return nil, fmt.Errorf("job core: %w", err)
		}
	}
	if cfg.SavepointTimeout <= 0 {
		cfg.SavepointTimeout = DefaultSavepointTimeout
	}
	if cfg.Failover == 0 {
		cfg.Failover = scheduler.RegionFailover
	}
	if cfg.Scheduling == 0 {
		cfg.Scheduling = scheduler.PipelinedRegionScheduling
	}
	if cfg.Restart.Kind == 0 {
		cfg.Restart = scheduler.DefaultRestartConfig(scheduler.NoRestart)
	}
	if cfg.SlotWaitTimeout <= 0 {
		cfg.SlotWaitTimeout = DefaultSlotWaitTimeout
	}
	c := &Core{cfg: cfg, status: StatusCreated, execs: make(map[ident.Subtask]*execution),
		tms: make(map[TaskManagerID]*taskManager), scheduled: make(map[ident.Subtask]bool),
		samples: make(map[uint64]*pendingSample), ops: make(map[uint64]StorageRequest), initial: cfg.Savepoint}
	c.topo = scheduler.ComputeRegions(cfg.Job)
	var err error
	if c.failover, err = scheduler.NewFailoverStrategy(cfg.Failover, c.topo, c.partitionAvailable); err != nil {
		return nil, fmt.Errorf("job core: %w", err)
	}
	if cfg.Failover == scheduler.TaskFailover {
		if c.fallback, err = scheduler.NewFailoverStrategy(scheduler.RegionFailover, c.topo, c.partitionAvailable); err != nil {
			return nil, fmt.Errorf("job core: %w", err)
		}
		none := func(ident.ResultID, ident.Subtask) bool { return false }
		if c.fallbackUpstream, err = scheduler.NewFailoverStrategy(scheduler.RegionFailover, c.topo, none); err != nil {
			return nil, fmt.Errorf("job core: %w", err)
		}
	}
	if c.sched, err = scheduler.NewSchedulingStrategy(cfg.Scheduling, c.topo); err != nil {
		return nil, fmt.Errorf("job core: %w", err)
	}
	if c.restart, err = scheduler.NewRestartStrategy(cfg.Restart, rand.New(rand.NewPCG(cfg.Seed, 1))); err != nil {
		return nil, fmt.Errorf("job core: %w", err)
	}
	c.subtasks = cfg.Job.Subtasks()
	for _, s := range c.subtasks {
		slot := c.logicalSlot(s)
		c.slotCount = max(c.slotCount, slot+1)
		c.execs[s] = &execution{attempt: ident.Attempt{Subtask: s}, state: deploy.Created, slot: slot}
	}
	c.slots = make([]*Slot, c.slotCount)
	c.slotLost = make([]string, c.slotCount)
	if cfg.Adopt != nil {
		if err := c.adopt(cfg.Adopt); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// logicalSlot is subtask s's logical slot (see the package function).
func (c *Core) logicalSlot(s ident.Subtask) int {
	return logicalSlot(c.cfg.Job, c.cfg.NoSlotSharing, s)
}

// Step feeds one event that happened at now (time since the job started; it never goes back). It returns
// an error only for an event the core cannot take (a driver bug), never for a failure of the job.
func (c *Core) Step(now time.Duration, ev Event) error {
	if c.readyTaken {
		return errors.New("job core: Step between Ready and Advance")
	}
	if now < c.now {
		return fmt.Errorf("job core: time went back from %v to %v: %w", c.now, now, errMalformed)
	}
	c.now = now
	if _, ok := ev.(Start); !ok && c.status == StatusCreated {
		if _, cancel := ev.(Cancel); !cancel {
			return fmt.Errorf("job core: %T before Start: %w", ev, errMalformed)
		}
	}
	switch e := ev.(type) {
	case Start:
		return c.onStart(e)
	case SlotsGranted:
		c.onSlotsGranted(e)
	case JobSetUp:
		c.onJobSetUp(e)
	case TaskManagerLost:
		c.onTaskManagerLost(e)
	case TaskManagerAlive:
		c.onTaskManagerAlive(e)
	case TaskUpdate:
		c.onTaskUpdate(e)
	case Observation:
		c.onObservation(e)
	case Counters:
		c.onCounters(e)
	case SubpartitionsSampled:
		c.onSampled(e)
	case CheckpointAck:
		if c.coord != nil {
			c.carryOut(c.coord.AckWith(c.ms(), e.ID, e.Attempt, e.Handle, checkpoint.AckStats{AlignmentNanos: int64(e.Alignment), ChannelStateBytes: e.ChannelStateBytes}))
		}
	case CheckpointDecline:
		c.onDecline(e)
	case StorageDone:
		c.onStorageDone(e)
	case Tick:
		c.onTick()
	case Cancel:
		c.cancelJob()
	case Stop:
		c.onStop(e)
	default:
		return fmt.Errorf("job core: unknown event %T: %w", ev, errMalformed)
	}
	c.maybeRestart()
	c.checkSlotWait()
	return nil
}

// HasReady reports whether the core asks for anything.
func (c *Core) HasReady() bool { return !c.ready.empty() }

// Ready returns everything asked since the last Advance, in order. The caller carries it out and then
// calls Advance, with no Step in between.
func (c *Core) Ready() Ready {
	c.readyTaken = true
	return c.ready
}

// Advance says the caller carried out the last Ready.
func (c *Core) Advance() {
	c.readyTaken = false
	c.ready = Ready{}
}

// NextDeadline returns the earliest time at which a Tick may do something: a checkpoint's trigger or
// timeout (while every subtask runs), the end of a restart's backoff, of the wait for slots or of a
// savepoint's time. False: no deadline.
func (c *Core) NextDeadline() (time.Duration, bool) {
	var d time.Duration
	ok := false
	take := func(t time.Duration) {
		if !ok || t < d {
			d, ok = t, true
		}
	}
	if c.status.Terminal() {
		return 0, false
	}
	if c.plan != nil && c.plan.notBefore > c.now {
		take(c.plan.notBefore)
	}
	if c.waitingSlots {
		take(c.slotWaitSince + c.cfg.SlotWaitTimeout)
	}
	if c.ticking() {
		if ms, due := c.coord.NextDeadline(); due {
			take(time.Duration(ms) * time.Millisecond)
		}
	}
	if sp := c.savepoint; sp != nil && sp.pending() && !sp.writing {
		take(sp.deadline)
	}
	return d, ok
}

// Status returns the job's status (FAILING and CANCELING included, unlike the Snapshot's).
func (c *Core) Status() Status { return c.status }

func (c *Core) wall(d time.Duration) time.Time { return c.started.Add(d) }

func (c *Core) log(level LogLevel, msg string, attrs ...any) {
	c.ready.Logs = append(c.ready.Logs, LogEntry{Level: level, Message: msg, Attrs: attrs})
}

func (c *Core) send(to TaskManagerID, body MessageBody) {
	if tm := c.tms[to]; tm == nil || tm.lost {
		return // nothing reaches a lost TaskManager, and nothing is needed: its tasks are gone
	}
	c.ready.Messages = append(c.ready.Messages, Message{To: to, Body: body})
}

func (c *Core) name(s ident.Subtask) string {
	v := c.cfg.Job.Vertex(s.Vertex)
	return fmt.Sprintf("%s[%d]", v.Name, s.Index)
}

func (c *Core) current(a ident.Attempt) *execution {
	ex := c.execs[a.Subtask]
	if ex == nil || ex.attempt != a {
		return nil
	}
	return ex
}

// currentAttempt answers History.Trim.
func (c *Core) currentAttempt(s ident.Subtask) (CurrentAttempt, bool) {
	ex := c.execs[s]
	if ex == nil {
		return CurrentAttempt{}, false
	}
	return CurrentAttempt{Attempt: ex.attempt, CreatedBy: ex.createdBy, Terminal: ex.state.Terminal()}, true
}

// partitionAvailable tells the failover strategies whether a producer's partition can be read again: not
// when it was on a TaskManager that is lost.
func (c *Core) partitionAvailable(_ ident.ResultID, producer ident.Subtask) bool {
	ex := c.execs[producer]
	if ex == nil || ex.tm == 0 {
		return true
	}
	return !c.tms[ex.tm].lost
}

func (c *Core) onStart(e Start) error {
	if c.status != StatusCreated {
		return fmt.Errorf("job core: Start in status %s: %w", c.status, errMalformed)
	}
	c.started = e.Wall
	c.status = StatusRunning
	c.ready.Changed = true
	if c.cfg.Adopt != nil {
		if c.cfg.Checkpoint != nil {
			c.storage(NextID{}, 0)
		}
		c.startAdopted()
		return nil
	}
	c.log(LogInfo, "job started", "vertices", len(c.cfg.Job.Vertices), "subtasks", len(c.execs))
	if r := c.cfg.Resumed; r != nil {
		c.recordResume(r)
	}
	c.ready.Slots = append(c.ready.Slots, SlotChange{Request: c.slotCount})
	if c.cfg.Checkpoint != nil {
		// Checkpoint ids continue above what the storage holds: nothing is deployed or triggered before
		// the answer, which creates the coordinator.
		c.storage(NextID{}, 0)
	}
	c.startSlotWait()
	for _, r := range c.sched.Start() {
		for _, s := range c.topo.Members(r) {
			c.scheduled[s] = true
		}
	}
	c.deployScheduled()
	return nil
}

func (c *Core) startSlotWait() {
	if !c.waitingSlots {
		c.waitingSlots, c.slotWaitSince = true, c.now
	}
}

// onSlotsGranted binds the unbound logical slots, in order, to the granted slots, and sets the job up on
// TaskManagers new to it. Slots beyond what is unbound go back.
func (c *Core) onSlotsGranted(e SlotsGranted) {
	var extra []Slot
	for _, g := range e.Slots {
		i := slices.Index(c.slots, nil)
		tm := c.tms[g.TaskManager]
		if i < 0 || c.status != StatusRunning || (tm != nil && tm.lost) {
			extra = append(extra, g)
			continue
		}
		g := g
		c.slots[i] = &g
		if tm == nil {
			tm = &taskManager{name: g.Name, dataAddress: g.DataAddress}
			c.tms[g.TaskManager] = tm
		}
		if !tm.setupSent {
			tm.setupSent = true
			c.send(g.TaskManager, SetupJob{})
		}
	}
	if len(extra) > 0 {
		c.ready.Slots = append(c.ready.Slots, SlotChange{Release: extra})
	}
	c.deployScheduled()
}

func (c *Core) onJobSetUp(e JobSetUp) {
	tm := c.tms[e.TaskManager]
	if tm == nil || tm.lost {
		return
	}
	if e.Err != nil {
		// Job setup fails the same way on a new attempt (a build that differs, storage not shared): the
		// job cannot run there, and fails, saying why (the driver keeps that TaskManager's slots from
		// the job).
		c.fail(fmt.Errorf("TaskManager %s cannot run the job: %w", tm.name, e.Err))
		return
	}
	tm.setUp = true
	c.deployScheduled()
}

// usable reports whether logical slot i is bound to a TaskManager that has the job set up.
func (c *Core) usable(i int) (TaskManagerID, bool) {
	g := c.slots[i]
	if g == nil {
		return 0, false
	}
	tm := c.tms[g.TaskManager]
	return g.TaskManager, tm != nil && tm.setUp && !tm.lost
}

// deployable reports whether s can be deployed now: its slot is usable and every producer it reads from
// has a bound slot, so that the descriptor can say where each partition is.
func (c *Core) deployable(s ident.Subtask) bool {
	if _, ok := c.usable(c.execs[s].slot); !ok {
		return false
	}
	for _, e := range c.cfg.Job.Vertex(s.Vertex).Inputs {
		for _, p := range graph.ProducersOf(e, int(s.Index)) {
			if c.slots[c.execs[ident.Subtask{Vertex: e.Source.ID, Index: int32(p)}].slot] == nil {
				return false
			}
		}
	}
	return true
}

// deployScheduled deploys the released subtasks that can be, in subtask order, once nothing waits for a
// slot: the first deployment waits for every slot, so that the job's first attempts start together.
func (c *Core) deployScheduled() {
	if c.status != StatusRunning || len(c.scheduled) == 0 {
		return
	}
	if c.plan != nil {
		return // a restart redeploys these with its own, together
	}
	for i := range c.slots {
		if _, ok := c.usable(i); !ok {
			c.startSlotWait()
			c.setWaiting(c.slotsMissing(c.subtasks, "deployment"))
			return
		}
	}
	c.waitingSlots = false
	c.setWaiting("")
	if c.cfg.Checkpoint != nil && c.coord == nil {
		return // NextID has not answered yet
	}
	for _, s := range c.subtasks {
		if c.scheduled[s] && c.deployable(s) {
			delete(c.scheduled, s)
			if ex := c.execs[s]; ex.state == deploy.Created {
				c.deploy(ex)
			}
		}
	}
}

// release marks every not yet deployed subtask of regions for deployment and deploys what can be.
func (c *Core) release(regions []scheduler.RegionID) {
	for _, r := range regions {
		for _, s := range c.topo.Members(r) {
			if c.execs[s].state == deploy.Created {
				c.scheduled[s] = true
			}
		}
	}
	c.deployScheduled()
}

// deploy sends the descriptor of the current attempt of ex to its slot's TaskManager. It restores the
// checkpoint its restart verified, or, for a first attempt, the restore point.
func (c *Core) deploy(ex *execution) {
	to, _ := c.usable(ex.slot)
	ex.tm = to
	ex.state = deploy.Deploying
	ex.skipUpTo = c.lastTriggered
	ex.restoredFrom = c.restorePoint()
	if ex.restore != nil {
		ex.restoredFrom, ex.restore = ex.restore.cp, nil
	}
	c.ready.Changed = true
	c.send(to, Deploy{Deployment: c.descriptor(ex)})
}

// descriptor builds the deployment of ex's attempt: outputs by edge, inputs by channel with where each
// producer's partition is served (local when it shares the TaskManager).
func (c *Core) descriptor(ex *execution) Deployment {
	v := c.cfg.Job.Vertex(ex.attempt.Vertex)
	idx := int(ex.attempt.Index)
	d := Deployment{
		Info: deploy.Info{JobName: c.cfg.Job.Name, VertexName: v.Name, Attempt: ex.attempt, Parallelism: v.Parallelism,
			MaxParallelism: v.MaxParallelism, TaskManager: c.tms[ex.tm].name},
		BufferTimeout: c.cfg.BufferTimeout, MaxRecordSize: c.cfg.MaxRecordSize, CreditsPerChannel: c.cfg.CreditsPerChannel,
		StateBackend: c.cfg.StateBackend, SkipCheckpointsUpTo: ex.skipUpTo, FiredInjections: slices.Clone(c.fired),
	}
	if cc := c.cfg.Checkpoint; cc != nil {
		d.Checkpoints = &CheckpointSettings{Mode: cc.Mode, FinalCheckpoint: cc.IntervalMillis > 0, AlignedTimeoutMillis: cc.AlignedTimeoutMillis}
	}
	if c.cfg.Failover == scheduler.TaskFailover {
		// Every task keeps a determinant log, its outputs in-flight logs; a task-failover restart replays
		// the log and takes over its predecessor's partitions.
		d.Determinants = true
		d.PartitionAttempt = ex.owner
		d.Replay, d.TakeOver = ex.taskRestart, ex.taskRestart
	}
	if cp := ex.restoredFrom; cp != nil {
		if d.Restore = RestoreSpecOf(v, ex.attempt.Subtask, cp); d.Restore != nil {
			// Channel positions belong to producer attempts of this run only.
			d.Restore.SameRun = c.coord != nil && cp.ID >= c.firstCheckpointID
		}
	}
	for _, e := range v.Outputs {
		d.Outputs = append(d.Outputs, deploy.OutputSpec{Result: e.Result, Subpartitions: len(graph.ConsumersOf(e, idx)),
			Reconnectable: e.PartitionType.Reconnectable(), Blocking: e.PartitionType == graph.Blocking,
			Logged: c.cfg.Failover == scheduler.TaskFailover && e.PartitionType.Reconnectable()})
	}
	for _, e := range v.Inputs {
		var in deploy.InputSpec
		for _, p := range graph.ProducersOf(e, idx) {
			prod := c.execs[ident.Subtask{Vertex: e.Source.ID, Index: int32(p)}]
			g := c.slots[prod.slot]
			in.Channels = append(in.Channels, deploy.ChannelSpec{
				Partition:    prod.partition(e.Result),
				Subpartition: graph.SubpartitionIndex(e, p, idx),
				Local:        g.TaskManager == ex.tm,
				Address:      g.DataAddress,
			})
		}
		d.Inputs = append(d.Inputs, in)
	}
	return d
}

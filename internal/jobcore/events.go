package jobcore

import (
	"errors"
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

// Event is what the driver feeds the core with Step: one of the types below.
type Event interface{ isEvent() }

// TaskManagerID names one registration of a TaskManager: a TaskManager that registers again is a new id.
type TaskManagerID uint64

// Start starts the job. Wall is the wall-clock time of the start, used only to date reports: the core
// computes every other time as Wall plus the Duration of the event.
type Start struct{ Wall time.Time }

// Slot is one physical slot granted to the job.
type Slot struct {
	TaskManager TaskManagerID
	// Name ("tm-1") and DataAddress (where its partitions are served) of the TaskManager.
	Name, DataAddress string
	Number            int
}

// SlotsGranted gives the job slots it asked for with a SlotChange request, in the order to bind them.
type SlotsGranted struct{ Slots []Slot }

// JobSetUp answers a SetupJob message: Err says why the TaskManager cannot run the job.
type JobSetUp struct {
	TaskManager TaskManagerID
	Err         error
}

// TaskManagerLost says a TaskManager will not be heard from again: its tasks are gone.
type TaskManagerLost struct {
	TaskManager TaskManagerID
	// Reason is for people: "control stream closed", "no heartbeat for 1.5s", "shutting down".
	Reason string
	// Leaving says the TaskManager told it leaves (protocol.Leaving: it shuts down) rather than being
	// found gone. The decisions are a loss's; the words say it left: "TaskManager tm-2 is leaving
	// (shutting down)".
	Leaving bool
}

// what is the loss in words: "TaskManager tm-2 lost: REASON", or "TaskManager tm-2 is leaving (REASON)".
func (e TaskManagerLost) what(name string) string {
	if e.Leaving {
		return fmt.Sprintf("TaskManager %s is leaving (%s)", name, e.Reason)
	}
	return fmt.Sprintf("TaskManager %s lost: %s", name, e.Reason)
}

// TaskManagerAlive answers a Probe: the TaskManager is there.
type TaskManagerAlive struct{ TaskManager TaskManagerID }

// FailureKind says where a task failure arose.
type FailureKind uint8

// Failure kinds.
const (
	// FailureTask: the task itself failed while running.
	FailureTask FailureKind = iota
	// FailureDeploy: the TaskManager refused the deployment (shut down, duplicate attempt, job not set up).
	FailureDeploy
)

// ReplayFailure says why a replay under task failover (docs/taskfailover.md §7) could not hold. The
// TaskManager sets it on the Failure it builds from a task's error, with errors.Is against the errors of
// the network, task and determinants packages (a Failure that crossed a process boundary keeps only its
// text, which no decision should read); the job master decides by it whether the failed subtask's
// producers restart with it.
type ReplayFailure uint8

// Replay failures.
const (
	// ReplayFine: the failure says nothing about a replay (a user function's exception, a lost peer).
	ReplayFine ReplayFailure = iota
	// ReplayLogIncomplete: an in-flight log the replay read, or a partition it took over, no longer held
	// what it needed (network.ErrLogIncomplete). Its producers must restart too.
	ReplayLogIncomplete
	// ReplayDiverged: the replay did not take the steps the failed attempt took (deploy.ErrReplayDiverged).
	ReplayDiverged
	// ReplaySourceCannotReplay: the attempt's source does not say it replays deterministically
	// (deploy.ErrCannotReplay).
	ReplaySourceCannotReplay
	// ReplayDeterminantsBroken: the subtask's determinant log does not reach back to the restored
	// checkpoint: it went past its bound and was dropped (determinants.ErrBroken), or it has no mark of that
	// checkpoint (determinants.ErrNoMark).
	ReplayDeterminantsBroken
	// MaxReplayFailure is the last value: one above it is not a ReplayFailure.
	MaxReplayFailure = ReplayDeterminantsBroken
)

// String names the value as the job master's scripts and logs spell it.
func (r ReplayFailure) String() string {
	switch r {
	case ReplayFine:
		return "none"
	case ReplayLogIncomplete:
		return "log-incomplete"
	case ReplayDiverged:
		return "diverged"
	case ReplaySourceCannotReplay:
		return "source-cannot-replay"
	case ReplayDeterminantsBroken:
		return "determinants-broken"
	}
	return fmt.Sprintf("ReplayFailure(%d)", uint8(r))
}

// Failure is a task failure as data, as it crosses a process boundary.
type Failure struct {
	Message string
	Kind    FailureKind
	// NonRecoverable: no restart can fix it (scheduler.ErrNonRecoverable on the side it arose).
	NonRecoverable bool
	// PeerDataAddress names the data address of a TaskManager the task lost its connection to ("" none).
	PeerDataAddress string
	// Injected says a failure injection failed the attempt on purpose; Injection is its index in the job's
	// list of injections (the same in every process), which then fires nowhere again.
	Injected  bool
	Injection int
	// Replay says why the attempt's replay under task failover could not hold, as the TaskManager told it
	// from the task's error (ReplayFine: the failure says nothing about the replay). The job master
	// decides a fallback by it, never by the failure's text.
	Replay ReplayFailure
	// Cause is the error itself while the failure has not left the process it arose in (nil once it
	// crossed one): a failover then reports it with its type, so callers can still errors.As it.
	Cause error
	// Stack is the stack of the goroutine whose panic failed the attempt ("" for an error it returned),
	// at most MaxFailureStack bytes.
	Stack string
}

// MaxFailureStack bounds the stack a Failure carries across a session: past it the stack is cut.
const MaxFailureStack = 16 << 10

// failureError is a Failure as an error: its text, and scheduler.ErrNonRecoverable when it is one.
type failureError struct{ f Failure }

func (e failureError) Error() string { return e.f.Message }

// PanicStack is the stack of the panic that failed the attempt ("" none), as an error that crossed a
// session still says.
func (e failureError) PanicStack() string { return e.f.Stack }

func (e failureError) Is(target error) bool {
	return e.f.NonRecoverable && target == scheduler.ErrNonRecoverable
}

// Err returns the failure as an error (nil for a nil failure).
func (f *Failure) Err() error {
	if f == nil {
		return nil
	}
	if f.Cause != nil {
		return f.Cause
	}
	return failureError{*f}
}

// TaskUpdate reports a state change of a task attempt. RecordsIn and RecordsOut are its final counts,
// with a terminal State.
type TaskUpdate struct {
	Attempt               ident.Attempt
	State                 deploy.State
	Failure               *Failure
	RecordsIn, RecordsOut uint64
	// Watermark is the attempt's last watermark (epoch ms; math.MinInt64: none), with a terminal State.
	Watermark int64
	// Metrics are the attempt's last operator metrics, with a terminal State.
	Metrics []deploy.Metric
}

// Observation is a fact a running attempt reports (deploy.Observation), At being the time it happened as a
// Duration since the job started.
type Observation struct {
	Attempt        ident.Attempt
	Kind           deploy.ObservationKind
	Channel        Channel
	Lost           uint64
	PartialSkipped uint64
	// Records is the count of a ChannelReplayed or a DuplicatesDropped.
	Records uint64
	// SnapshotBefore, of a ChannelJoined, is the newest checkpoint whose snapshot the attempt took before
	// it joined the channel (0: none): those checkpoints do not hold the gap it reports.
	SnapshotBefore int64
	At             time.Duration
}

// AttemptCounters are the record counters of one running attempt.
type AttemptCounters struct {
	Attempt ident.Attempt
	In, Out uint64
	// Watermark is the attempt's current watermark (epoch ms; math.MinInt64: none).
	Watermark int64
	// Metrics are the attempt's operator metrics (at most deploy.MaxMetricsPerTask).
	Metrics []deploy.Metric
	// Times is how the attempt spent the last second (zero until it runs).
	Times TimeRates
	// InflightLogBytes is what the in-flight logs of its outputs hold (task failover).
	InflightLogBytes int64
}

// TimeRates is how a subtask spends its time, in milliseconds per second over the last second, measured by
// its TaskManager (as Flink's busyTimeMsPerSecond, backPressuredTimeMsPerSecond and idleTimeMsPerSecond):
// idle waiting for input, backpressured waiting for an output buffer, busy the rest. The three add up to
// 1000, give or take rounding.
type TimeRates struct {
	BusyMsPerSecond, BackpressuredMsPerSecond, IdleMsPerSecond int64
}

// Counters carries the record counters of the attempts running on one TaskManager.
type Counters struct{ Counts []AttemptCounters }

// ChannelCounters are one channel's counters in a SubpartitionsSampled.
type ChannelCounters struct {
	Channel  Channel
	Counters SubpartitionCounters
}

// SubpartitionsSampled answers a SampleSubpartitions message. Missing says the TaskManager does not hold
// the partitions (the producer was replaced, or the TaskManager lost): their counters count as unknown.
type SubpartitionsSampled struct {
	Token   uint64
	Samples []ChannelCounters
	Missing bool
}

// CheckpointAck says an attempt took its snapshot for checkpoint ID, described by Handle. Alignment is how
// long the attempt's input was held aligning the checkpoint's barriers (checkpoint.AckStats).
type CheckpointAck struct {
	ID        int64
	Attempt   ident.Attempt
	Handle    checkpoint.StateHandle
	Alignment time.Duration
	// ChannelStateBytes is the size of the records in flight an unaligned checkpoint stored for it.
	ChannelStateBytes int64
}

// CheckpointDecline says an attempt could not take part in checkpoint ID. NotReady marks a decline that is
// no failure of the checkpoint: the attempt could not take it yet, or the TaskManager could not deliver
// the trigger (the attempt is gone, its mailbox is full).
type CheckpointDecline struct {
	ID       int64
	Attempt  ident.Attempt
	Err      error
	NotReady bool
}

// StorageDone answers the StorageOp with id Op. Err is its failure (a deadline passed is one); the other
// fields are the results of the kinds that have one.
type StorageDone struct {
	Op  uint64
	Err error
	// NextID answers NextID.
	NextID int64
	// Checkpoint and Skipped answer VerifyLatest: the checkpoint found, and the newer ones passed over.
	Checkpoint *checkpoint.CompletedCheckpoint
	Skipped    []checkpoint.SkippedCheckpoint
}

// Tick tells the core that time passed: a checkpoint, a restart's backoff, a savepoint's or a slot wait's
// deadline may be due.
type Tick struct{}

// Cancel cancels the job.
type Cancel struct{}

// Stop stops the job with a savepoint written to Dir ("": Config.SavepointOnStop) and then cancels it;
// without a directory, or without checkpointing, it cancels at once.
type Stop struct{ Dir string }

func (Start) isEvent()                {}
func (SlotsGranted) isEvent()         {}
func (JobSetUp) isEvent()             {}
func (TaskManagerLost) isEvent()      {}
func (TaskManagerAlive) isEvent()     {}
func (TaskUpdate) isEvent()           {}
func (Observation) isEvent()          {}
func (Counters) isEvent()             {}
func (SubpartitionsSampled) isEvent() {}
func (CheckpointAck) isEvent()        {}
func (CheckpointDecline) isEvent()    {}
func (StorageDone) isEvent()          {}
func (Tick) isEvent()                 {}
func (Cancel) isEvent()               {}
func (Stop) isEvent()                 {}

// errMalformed marks an event the core cannot take: a bug of the driver, not a failure of the job.
var errMalformed = errors.New("malformed event")

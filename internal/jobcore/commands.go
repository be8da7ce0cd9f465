package jobcore

import (
	"time"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
)

// Ready is what the core asks the driver to do, in the order asked since the last Advance. The driver
// carries it out so: storage ops are queued, in order, on the job's one storage worker, each answered by
// one StorageDone (a deadline passed is an error result); messages are enqueued per TaskManager in order
// (each TaskManager gets its own in that order, or its session is lost; across TaskManagers nothing is
// ordered and nothing relies on an order); slot changes go to the slot pool; then the logs are written.
//
// The core never puts into one Ready a command that depends on the result of another command of the same
// Ready: it waits for the event that answers the first. So a checkpoint's CommitMetadata succeeds before
// any NotifyCheckpointComplete of it and before it becomes the restore point; a VerifyLatest answers before
// any Deploy of the attempts it restores; a WriteSavepoint answers before the CancelTask messages of the
// stop that asked for it; a CommitMetadata out when the job fails or is cancelled answers before the job's
// CancelTask messages (which follow the checkpoint's NotifyCheckpointComplete or AbortCheckpoint); NextID answers before the first Deploy and TriggerCheckpoint; JobSetUp comes
// before the first Deploy to a TaskManager; a sample's answer comes before the loss it measures is counted.
type Ready struct {
	Storage  []StorageOp
	Messages []Message
	Slots    []SlotChange
	Logs     []LogEntry
	// Changed says the status, the failovers or the executions changed (for progress, REST, metrics).
	Changed bool
}

// empty reports whether there is nothing to do.
func (r *Ready) empty() bool {
	return len(r.Storage) == 0 && len(r.Messages) == 0 && len(r.Slots) == 0 && len(r.Logs) == 0 && !r.Changed
}

// Message is one message to one TaskManager.
type Message struct {
	To   TaskManagerID
	Body MessageBody
}

// MessageBody is one of the message types below.
type MessageBody interface{ isMessage() }

// SetupJob makes the job known to a TaskManager before anything of it is deployed there.
type SetupJob struct{}

// Deploy deploys one task attempt.
type Deploy struct{ Deployment Deployment }

// CancelTask asks an attempt to stop.
type CancelTask struct{ Attempt ident.Attempt }

// ReleasePartitions releases the result partitions an attempt produced.
type ReleasePartitions struct{ Attempt ident.Attempt }

// SampleSubpartitions asks for the counters of channels whose producer the TaskManager holds; the answer
// is a SubpartitionsSampled with the same token.
type SampleSubpartitions struct {
	Token    uint64
	Channels []Channel
}

// Probe asks whether a TaskManager is alive; TaskManagerAlive or TaskManagerLost answers it.
type Probe struct{}

// TriggerCheckpoint asks an attempt to start checkpoint ID: a source, or a task whose upstream subtasks
// all finished. A TaskManager that cannot deliver it (the attempt is gone, its mailbox is full) answers
// with a CheckpointDecline with NotReady set.
type TriggerCheckpoint struct {
	Attempt         ident.Attempt
	ID              int64
	TimestampMillis int64
	// Mode is carried by the barriers (at-least-once barriers are not aligned).
	Mode barrier.Mode
}

// AbortCheckpoint tells an attempt that checkpoint ID was given up and can never complete: it drops its
// alignment and snapshot, and its operators hear of it (task.Task.AbortCheckpoint). The core sends it to
// the attempts that took part in the checkpoint and still run, never for a checkpoint that completed, and
// when the job fails or is cancelled, ahead of their CancelTask.
type AbortCheckpoint struct {
	Attempt ident.Attempt
	ID      int64
}

// NotifyCheckpointComplete tells an attempt that checkpoint ID is committed: sinks may commit what they
// staged for it, and a task whose input ended may finish.
type NotifyCheckpointComplete struct {
	Attempt ident.Attempt
	ID      int64
}

func (SetupJob) isMessage()                 {}
func (Deploy) isMessage()                   {}
func (CancelTask) isMessage()               {}
func (ReleasePartitions) isMessage()        {}
func (SampleSubpartitions) isMessage()      {}
func (Probe) isMessage()                    {}
func (TriggerCheckpoint) isMessage()        {}
func (AbortCheckpoint) isMessage()          {}
func (NotifyCheckpointComplete) isMessage() {}

// StorageOp is one call of the job's checkpoint storage. The driver runs the ops of a job one at a time,
// in order, each under a deadline, and answers each with a StorageDone naming its ID.
type StorageOp struct {
	ID      uint64
	Request StorageRequest
	// Deadline, when not zero, is the time since the job's start by which the op must be answered (the
	// savepoint's deadline for its write); zero leaves the deadline to the driver's default for the kind.
	Deadline time.Duration
}

// StorageRequest is one of the storage requests below.
type StorageRequest interface{ isStorageRequest() }

// NextID asks for the id the job's first checkpoint takes: one above every checkpoint directory in the
// storage (checkpoint.Storage.NextID). The answer carries it in StorageDone.NextID.
type NextID struct{}

// CommitMetadata commits a checkpoint every subtask acknowledged (checkpoint.Storage.CommitMetadata).
type CommitMetadata struct {
	Checkpoint *checkpoint.CompletedCheckpoint
}

// VerifyLatest asks for the newest checkpoint whose metadata and whose state of Subtasks verify
// (checkpoint.Storage.LatestFor): what a restart of those subtasks restores. The answer carries it, with
// the checkpoints passed over, in StorageDone.Checkpoint and StorageDone.Skipped.
type VerifyLatest struct{ Subtasks []ident.Subtask }

// WriteSavepoint copies a completed checkpoint to the directory Dir (checkpoint.Storage.WriteSavepoint).
type WriteSavepoint struct {
	Dir        string
	Checkpoint *checkpoint.CompletedCheckpoint
}

// Retain keeps the newest N committed checkpoints and deletes older ones (checkpoint.Storage.Retain).
type Retain struct{ N int }

// Discard deletes the data of an aborted checkpoint (checkpoint.Storage.Discard); best effort.
type Discard struct{ CheckpointID int64 }

func (NextID) isStorageRequest()         {}
func (CommitMetadata) isStorageRequest() {}
func (VerifyLatest) isStorageRequest()   {}
func (WriteSavepoint) isStorageRequest() {}
func (Retain) isStorageRequest()         {}
func (Discard) isStorageRequest()        {}

// Deployment is a task deployment descriptor as data: what task.Config holds but the parts the
// TaskManager fills in from its own build of the job (the operator chain, the checkpoint storage and the
// acknowledgement callbacks).
type Deployment struct {
	Info                deploy.Info
	Outputs             []deploy.OutputSpec
	Inputs              []deploy.InputSpec
	BufferTimeout       time.Duration
	MaxRecordSize       int
	CreditsPerChannel   int
	StateBackend        string
	SkipCheckpointsUpTo int64
	// Checkpoints is nil when checkpointing is off.
	Checkpoints *CheckpointSettings
	// FiredInjections are the indexes of the job's failure injections that fired already (in any process):
	// before it builds the chain, the TaskManager marks those of the attempt's subtask fired and the others
	// of that subtask not fired, so each fires once per job, and one that fired in an attempt a failover was
	// stopping already fires again.
	FiredInjections []int
	// Restore is the state the attempt starts from (nil: none). Its Read is left nil: for a restore from
	// the savepoint the job started from (Restore.CheckpointID is that of Config.Savepoint), the driver
	// reads through the savepoint it opened.
	Restore *deploy.RestoreSpec
	// Task failover (docs/taskfailover.md): Determinants asks the TaskManager for the subtask's determinant
	// log (kept across its attempts); Replay and TakeOver mark an attempt that a task failover restarted,
	// which replays the log and takes over the partitions of attempt PartitionAttempt (task.Config).
	Determinants     bool
	Replay, TakeOver bool
	PartitionAttempt int32
}

// CheckpointSettings are the checkpoint settings a task needs (task.CheckpointSetup without the storage
// and the acknowledgement callbacks, which the TaskManager supplies).
type CheckpointSettings struct {
	// Mode says whether the task aligns barriers.
	Mode barrier.Mode
	// AlignedTimeoutMillis, with Mode Unaligned, makes checkpoints start aligned and a task switch to
	// unaligned once its alignment took longer.
	AlignedTimeoutMillis int64
	// FinalCheckpoint makes a task whose input ended wait for a checkpoint covering its end before it
	// finishes: set with periodic checkpoints, since without them none would come.
	FinalCheckpoint bool
}

// SlotChange asks the slot pool for Request more slots, or gives Release back.
type SlotChange struct {
	Request int
	Release []Slot
}

// LogLevel is the level of a log entry, as slog's levels.
type LogLevel int

// Log levels, with slog.Level's values.
const (
	LogDebug LogLevel = -4
	LogInfo  LogLevel = 0
	LogWarn  LogLevel = 4
	LogError LogLevel = 8
)

func (l LogLevel) String() string {
	switch l {
	case LogDebug:
		return "DEBUG"
	case LogInfo:
		return "INFO"
	case LogWarn:
		return "WARN"
	}
	return "ERROR"
}

// LogEntry is a log line the driver writes: Attrs alternate keys and values, as slog's.
type LogEntry struct {
	Level   LogLevel
	Message string
	Attrs   []any
}

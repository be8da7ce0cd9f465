package jobcore

import (
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/task"
)

// Ready is what the core asks the driver to do, in the order asked since the last Advance. The driver
// carries it out so: messages are enqueued per TaskManager in order (each TaskManager gets its own in that
// order, or its session is lost; across TaskManagers nothing is ordered and nothing relies on an order),
// slot changes go to the slot pool, then the logs are written. The core never puts into one Ready a
// command that depends on the result of another command of the same Ready: it waits for the event that
// answers the first (JobSetUp before the first Deploy to a TaskManager, a sample's answer before the loss
// it measures is counted).
type Ready struct {
	Messages []Message
	Slots    []SlotChange
	Logs     []LogEntry
	// Changed says the status, the failovers or the executions changed (for progress, REST, metrics).
	Changed bool
}

// empty reports whether there is nothing to do.
func (r *Ready) empty() bool {
	return len(r.Messages) == 0 && len(r.Slots) == 0 && len(r.Logs) == 0 && !r.Changed
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

func (SetupJob) isMessage()            {}
func (Deploy) isMessage()              {}
func (CancelTask) isMessage()          {}
func (ReleasePartitions) isMessage()   {}
func (SampleSubpartitions) isMessage() {}
func (Probe) isMessage()               {}

// Deployment is a task deployment descriptor as data: what task.Config holds but the parts the
// TaskManager fills in from its own build of the job (the operator chain, the checkpoint storage and the
// acknowledgement callbacks).
type Deployment struct {
	Info                task.Info
	Outputs             []task.OutputSpec
	Inputs              []task.InputSpec
	BufferTimeout       time.Duration
	MaxRecordSize       int
	CreditsPerChannel   int
	StateBackend        string
	SkipCheckpointsUpTo int64
	// Restore is the state the attempt starts from (nil: none; always nil until checkpoints are in the core).
	Restore *task.RestoreSpec
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

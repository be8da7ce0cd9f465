package jobcore

import (
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
)

// Status is the state of a job.
type Status string

// Job statuses, as they appear in reports. A job goes CREATED → RUNNING → FINISHED, or from RUNNING through
// FAILING to FAILED or through CANCELING to CANCELED.
const (
	StatusCreated  Status = "CREATED"
	StatusRunning  Status = "RUNNING"
	StatusFinished Status = "FINISHED"
	StatusCanceled Status = "CANCELED"
	StatusFailed   Status = "FAILED"
	// StatusFailing and StatusCanceling are the job master's own: its tasks are being cancelled after a
	// failure it cannot recover from, or on request. A Snapshot shows them as RUNNING, since reports know
	// only the other five.
	StatusFailing   Status = "FAILING"
	StatusCanceling Status = "CANCELING"
)

// Terminal reports whether the job has ended.
func (s Status) Terminal() bool {
	return s == StatusFinished || s == StatusFailed || s == StatusCanceled
}

// SubtaskStatus describes one subtask in a snapshot.
type SubtaskStatus struct {
	Index       int
	Attempt     int
	TaskManager string
	State       deploy.State
	RecordsIn   uint64
	RecordsOut  uint64
	// Watermark is the subtask's last reported watermark (epoch ms), when HasWatermark.
	Watermark    int64
	HasWatermark bool
	// Metrics are the subtask's operator metrics, as last reported ("operator/name").
	Metrics []deploy.Metric
	// Times is how the subtask spent the last second, as last reported while it runs; zero while it does
	// not run (before its attempt's first report, and once it finished, failed or was cancelled).
	Times TimeRates
	// InflightLogBytes is what the in-flight logs of its outputs hold as last reported while it runs
	// (task failover; zero otherwise).
	InflightLogBytes int64
}

// Finished reports whether the subtask had finished (its input ended and it was done).
func (s SubtaskStatus) Finished() bool { return s.State == deploy.Finished }

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
	// Checkpoints counts checkpoints (nil when checkpointing is off); CheckpointsInProgress is how many
	// are triggered and not yet completed or aborted.
	Checkpoints           *checkpoint.Counts
	CheckpointsInProgress int
	// CheckpointHistory is the statistics of the newest checkpoints, oldest first (at most
	// checkpoint.MaxStatsHistory); their times are milliseconds since Started.
	CheckpointHistory []checkpoint.CheckpointStats
	Failovers         []Failover
	// FailoverTotals sums every failover, including those no longer listed (see MaxFailoverHistory).
	FailoverTotals FailoverTotals
	// Savepoint is the directory of the savepoint written on stop; SavepointErr says why none was.
	Savepoint    string
	SavepointErr error
	// Waiting, when not empty, says what a restart waits for (a slot, a TaskManager's liveness).
	Waiting string
	// FiredInjections are the indexes of the failure injections that fired, each in a failover of its own.
	FiredInjections []int
	// RestorePoint is what a restart would restore now: the newest completed checkpoint known to be
	// valid, or the savepoint the job started from, or nil. Read only.
	RestorePoint *checkpoint.CompletedCheckpoint
}

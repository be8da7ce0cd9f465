package report

import (
	"cmp"
	"time"
)

// The documents of a job's REST resources below /v1/jobs/{id} (docs/cluster.md §6.2), made from its
// result: a JobManager and a run's mini-cluster serve the same ones.

// CheckpointsDocument is GET /v1/jobs/{id}/checkpoints.
type CheckpointsDocument struct {
	// Checkpoints counts the job's checkpoints (absent when checkpointing is off).
	Checkpoints *CheckpointCounts `json:"checkpoints"`
	// History is the statistics of the newest checkpoints, oldest first.
	History []CheckpointStats `json:"history"`
	// Restored is the id of the checkpoint the job's state last came from: by its newest failover that
	// restored one, or at its start (absent: none).
	Restored *int64 `json:"restored,omitempty"`
}

// FailoversDocument is GET /v1/jobs/{id}/failovers.
type FailoversDocument struct {
	Failovers      []FailoverResult `json:"failovers"`
	FailoverTotals FailoverTotals   `json:"failover_totals"`
}

// ThroughputDocument is GET /v1/jobs/{id}/throughput: the samples of the last minutes, oldest first.
type ThroughputDocument struct {
	IntervalMillis int64              `json:"interval_ms"`
	Samples        []ThroughputSample `json:"samples"`
}

// ExceptionsDocument is GET /v1/jobs/{id}/exceptions.
type ExceptionsDocument struct {
	Exceptions []Exception `json:"exceptions"`
}

// Exception is a failure of a job: a task's (the subtask, "VERTEX[i]", and the TaskManager it ran on), a
// TaskManager's loss, or the job's own (Subtask "job").
type Exception struct {
	At          time.Time `json:"at"`
	Subtask     string    `json:"subtask"`
	TaskManager string    `json:"taskmanager,omitempty"`
	Error       string    `json:"error"`
	// Stack is the stack of the panic behind the failure ("" for an error a task returned).
	Stack string `json:"stack,omitempty"`
}

// CheckpointsDocument is r's checkpoints document.
func (r *JobResult) CheckpointsDocument() CheckpointsDocument {
	d := CheckpointsDocument{Checkpoints: r.Checkpoints, History: r.CheckpointHistory}
	if d.History == nil {
		d.History = []CheckpointStats{}
	}
	for i := len(r.Failovers) - 1; i >= 0 && d.Restored == nil; i-- {
		d.Restored = r.Failovers[i].CheckpointRestored
	}
	if d.Restored == nil && r.RestoredFrom != nil {
		id := r.RestoredFrom.CheckpointID
		d.Restored = &id
	}
	return d
}

// FailoversDocument is r's failovers document.
func (r *JobResult) FailoversDocument() FailoversDocument {
	return FailoversDocument{Failovers: r.Failovers, FailoverTotals: r.FailoverTotals}
}

// ExceptionsDocument is r's exceptions, newest first: the job's error once it failed, then the failure
// of each failover the result lists, ended at when (the job's end, or now while it runs).
func (r *JobResult) ExceptionsDocument(ended time.Time) ExceptionsDocument {
	out := make([]Exception, 0, len(r.Failovers)+1)
	if r.Status == "FAILED" && r.Error != "" {
		out = append(out, Exception{At: ended, Subtask: "job", Error: r.Error, Stack: r.ErrorStack})
	}
	for i := len(r.Failovers) - 1; i >= 0; i-- {
		f := r.Failovers[i]
		if f.Cause == "" {
			continue
		}
		out = append(out, Exception{At: f.FailedAt, Subtask: f.Failed, TaskManager: cmp.Or(f.TaskManager, f.FailedOn), Error: f.Cause, Stack: f.Stack})
	}
	return ExceptionsDocument{Exceptions: out}
}

// Document is the throughput document of t's samples.
func (t *Throughput) Document() ThroughputDocument {
	return ThroughputDocument{IntervalMillis: ThroughputInterval.Milliseconds(), Samples: t.Samples()}
}

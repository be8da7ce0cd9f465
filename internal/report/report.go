// Package report owns the result of a job run: JobResult and its parts, whose JSON form is the `--report`
// contract of the runnel command and the body of the REST API's job resources (fields are only ever added,
// never renamed), and its making from a job master's snapshot. It runs nothing and reads no clock but the
// wall time of a job that has not ended.
package report

import (
	"errors"
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
)

// JobResult describes a job run; its JSON form is the `--report` contract of the runnel command (fields are
// only ever added, never renamed).
type JobResult struct {
	Job    string `json:"job"`
	Status string `json:"status"`
	Error  string `json:"error"`
	// ErrorStack is the stack of the panic that failed the job ("" when none did).
	ErrorStack string         `json:"error_stack,omitempty"`
	WallMillis int64          `json:"wall_ms"`
	Vertices   []VertexResult `json:"vertices"`
	// Checkpoints is present when checkpointing is on.
	Checkpoints *CheckpointCounts `json:"checkpoints,omitempty"`
	// CheckpointHistory is the statistics of the newest checkpoints (the last 64), oldest first.
	CheckpointHistory []CheckpointStats `json:"checkpoint_history,omitempty"`
	// Failovers lists the failover events, oldest first: the last 1000 of them (FailoverTotals counts all).
	Failovers []FailoverResult `json:"failovers"`
	// FailoverTotals sums every failover of the run, those the list omits included.
	FailoverTotals FailoverTotals `json:"failover_totals"`
	// Savepoint is the directory of the savepoint written when the job was stopped.
	Savepoint string `json:"savepoint,omitempty"`
	// RestoredFrom says which savepoint or retained checkpoint the job started from.
	RestoredFrom *RestoreResult `json:"restored_from,omitempty"`
	// Resumed says that this run resumed the job after the JobManager that ran it was lost (high
	// availability): the new leader restarted it from RestoredFrom.
	Resumed *ResumeResult `json:"resumed,omitempty"`
	// Waiting, while the job waits for something to restart (slots, a TaskManager), says what.
	Waiting string `json:"waiting,omitempty"`
	// UnfiredInjections lists, once the job ended, the failure injections (WithFailureInjection) that never
	// fired: the job ended before they were due (a record count its subtask never saw, a checkpoint that
	// never completed). Each is also logged at WARN.
	UnfiredInjections []string `json:"unfired_injections,omitempty"`
}

// RestoreResult describes the state a job started from: the location, the checkpoint's id, and the newer
// checkpoints that were passed over because they were corrupt, truncated or incomplete.
type RestoreResult struct {
	Location     string   `json:"location"`
	CheckpointID int64    `json:"checkpoint_id"`
	Skipped      []string `json:"skipped"`
	// Finished says that the job had already finished in that checkpoint: every subtask had finished, or
	// its input had ended, when it was taken (the final checkpoint of a bounded job is such a one). As
	// Flink finishes the operators a checkpoint records as finished when it restores it, this run reads and
	// emits nothing: its tasks take the final checkpoint they owe and finish at once.
	Finished bool `json:"finished"`
}

// ResumeResult is a change of the JobManager that leads a job: the previous leader (its address and term,
// as it recorded the job) was lost, and the leader of term Epoch resumed the job at At. TasksKept says it
// took over the tasks the TaskManagers kept running (no task restarted); otherwise the job restarted from
// its latest checkpoint, and Fallback says why the tasks could not be taken over ("" when task continuity
// is off).
type ResumeResult struct {
	At             time.Time `json:"at"`
	PreviousLeader string    `json:"previous_leader"`
	PreviousEpoch  int64     `json:"previous_epoch"`
	Leader         string    `json:"leader"`
	Epoch          int64     `json:"epoch"`
	TasksKept      bool      `json:"tasks_kept"`
	Fallback       string    `json:"fallback,omitempty"`
}

// CheckpointCounts counts the checkpoints of a job run.
type CheckpointCounts struct {
	Completed       int64 `json:"completed"`
	Failed          int64 `json:"failed"`
	Aborted         int64 `json:"aborted"`
	LastCompletedID int64 `json:"last_completed_id"`
	// InProgress is how many checkpoints are triggered and not yet completed or aborted (0 once the job
	// ended).
	InProgress int64 `json:"in_progress"`
}

// CheckpointStats are the statistics of one checkpoint. Status is "IN_PROGRESS", "COMPLETED", "FAILED"
// (a failure: it expired, was declined, or could not be persisted) or "ABORTED" (a failover, a newer
// checkpoint or a stop ended it), with Reason. DurationMillis runs from the trigger until it completed or
// ended (until now while in progress). Acknowledged of Expected subtasks took their snapshots.
// StateBytes is the state it refers to (every blob and inline state); NewBytes what the newest completed
// checkpoint before it did not refer to (all of it for a full checkpoint, what changed for an incremental
// one). ChannelStateBytes is the part of StateBytes that holds records in flight (unaligned checkpoints).
// AlignmentMillis is the longest any subtask held its input aligning the checkpoint's barriers (for an
// unaligned checkpoint: the longest a subtask stored its input channel state, first barrier to last).
type CheckpointStats struct {
	ID                int64     `json:"id"`
	Status            string    `json:"status"`
	TriggerTime       time.Time `json:"trigger_time"`
	DurationMillis    int64     `json:"duration_ms"`
	Acknowledged      int       `json:"acknowledged"`
	Expected          int       `json:"expected"`
	StateBytes        int64     `json:"state_bytes"`
	NewBytes          int64     `json:"new_bytes"`
	ChannelStateBytes int64     `json:"channel_state_bytes"`
	AlignmentMillis   int64     `json:"alignment_ms"`
	Reason            string    `json:"reason,omitempty"`
}

// FailoverResult is one failover: the subtask that failed ("VERTEX[i]", or "job" for a failure of the job as a
// whole, such as too many failed checkpoints in a row, which restarts every subtask), the strategy, the subtasks
// restarted, the checkpoint their state came from (nil: none, they started empty), and the time from the
// failure until every restarted subtask was running again.
type FailoverResult struct {
	Failed string `json:"failed"`
	// FailedSubtasks lists every subtask that failed in this event when there were several: those of a
	// lost TaskManager.
	FailedSubtasks []string `json:"failed_subtasks,omitempty"`
	// TaskManager names the TaskManager whose loss caused the failover ("" for a task's own failure).
	TaskManager string `json:"taskmanager,omitempty"`
	// FailedOn names the TaskManager the failed subtask ran on.
	FailedOn string `json:"failed_on,omitempty"`
	Cause    string `json:"cause"`
	// Stack is the stack of the panic that failed the subtask ("" for an error it returned).
	Stack string `json:"stack,omitempty"`
	// FailedAt is when the job master learned of the failure; the durations below are measured from it.
	FailedAt time.Time `json:"failed_at"`
	Strategy string    `json:"strategy"`
	// Fallback, under task failover, says why this failover restarted by region instead.
	Fallback           string   `json:"fallback,omitempty"`
	Restarted          []string `json:"restarted"`
	CheckpointRestored *int64   `json:"checkpoint_restored"`
	RecoveryMillis     int64    `json:"recovery_ms"`
	// OutageMillis runs from the failure until the restarted tail subtasks emitted output again. Both
	// durations are rounded up to whole milliseconds.
	OutageMillis int64 `json:"outage_ms"`
	// RecordsLost is the whole loss of the failover (records after the restored consumers' positions that
	// they never received); the others are its parts as the producers saw them.
	RecordsLost           uint64 `json:"records_lost"`
	RecordsDropped        uint64 `json:"records_dropped"`
	BuffersDropped        uint64 `json:"buffers_dropped"`
	PartialRecordsSkipped uint64 `json:"partial_records_skipped"`
	// Channels breaks the loss down by channel, for the channels that lost anything.
	Channels []ChannelLossResult `json:"channels,omitempty"`
	// RecordsReplayed counts, under task failover, the records the restarted subtask read again from its
	// producers' in-flight logs; DuplicatesDropped those its consumers dropped because it regenerated them
	// (they had had them before it failed). Replay breaks both down by channel.
	RecordsReplayed   uint64                `json:"records_replayed"`
	DuplicatesDropped uint64                `json:"duplicates_dropped"`
	Replay            []ChannelReplayResult `json:"replay,omitempty"`
}

// ChannelReplayResult is what task failover did on one channel in one failover: on a channel into the
// restarted subtask, the records it replayed; on one out of it, the duplicates its consumer dropped.
type ChannelReplayResult struct {
	From              string `json:"from"`
	To                string `json:"to"`
	RecordsReplayed   uint64 `json:"records_replayed"`
	DuplicatesDropped uint64 `json:"duplicates_dropped"`
}

// ChannelLossResult is the loss of one channel in one failover, from a producer subtask ("VERTEX[i]") that
// kept running (or was restarted) to a restarted consumer.
type ChannelLossResult struct {
	From                  string `json:"from"`
	To                    string `json:"to"`
	RecordsLost           uint64 `json:"records_lost"`
	RecordsDropped        uint64 `json:"records_dropped"`
	BuffersDropped        uint64 `json:"buffers_dropped"`
	PartialRecordsSkipped uint64 `json:"partial_records_skipped"`
}

// FailoverTotals sums every failover of a run. Failovers counts them; Omitted those no longer listed in
// JobResult.Failovers, which keeps the last 1000 so that a long job's memory stays flat. Edges breaks the
// loss down by edge of the job graph (tasks, by name), over all failovers.
type FailoverTotals struct {
	Failovers             int    `json:"failovers"`
	Omitted               int    `json:"omitted"`
	RecordsLost           uint64 `json:"records_lost"`
	RecordsDropped        uint64 `json:"records_dropped"`
	BuffersDropped        uint64 `json:"buffers_dropped"`
	PartialRecordsSkipped uint64 `json:"partial_records_skipped"`
	// RecordsReplayed and DuplicatesDropped sum those of the task failovers.
	RecordsReplayed   uint64           `json:"records_replayed"`
	DuplicatesDropped uint64           `json:"duplicates_dropped"`
	Edges             []EdgeLossResult `json:"edges"`
}

// EdgeLossResult is the loss on the channels from one task to another, over all failovers.
type EdgeLossResult struct {
	From                  string `json:"from"`
	To                    string `json:"to"`
	RecordsLost           uint64 `json:"records_lost"`
	RecordsDropped        uint64 `json:"records_dropped"`
	BuffersDropped        uint64 `json:"buffers_dropped"`
	PartialRecordsSkipped uint64 `json:"partial_records_skipped"`
}

// VertexResult describes one task (a chain of operators) of the job.
type VertexResult struct {
	Name        string          `json:"name"`
	Operators   []string        `json:"operators"`
	Parallelism int             `json:"parallelism"`
	Inputs      []InputResult   `json:"inputs"`
	RecordsIn   uint64          `json:"records_in"`
	RecordsOut  uint64          `json:"records_out"`
	Subtasks    []SubtaskResult `json:"subtasks"`

	// BusyMsPerSecond, BackpressuredMsPerSecond and IdleMsPerSecond are each the highest of its running
	// subtasks' (SubtaskResult), as Flink's web UI shows a vertex: the subtask most behind or most held up
	// is the one that matters. 0 when none runs.
	BusyMsPerSecond          int64 `json:"busy_ms_per_s"`
	BackpressuredMsPerSecond int64 `json:"backpressured_ms_per_s"`
	IdleMsPerSecond          int64 `json:"idle_ms_per_s"`
}

// InputResult describes one input edge of a vertex.
type InputResult struct {
	From    string `json:"from"`
	Pattern string `json:"pattern"`
}

// SubtaskResult describes one parallel instance of a vertex.
type SubtaskResult struct {
	Index       int    `json:"index"`
	Attempt     int    `json:"attempt"`
	TaskManager string `json:"taskmanager"`
	State       string `json:"state"`
	RecordsIn   uint64 `json:"records_in"`
	RecordsOut  uint64 `json:"records_out"`
	// Watermark is the subtask's current event-time watermark (epoch ms): its input watermark, or for a
	// source what it emitted last; absent while it has none (a job without event time, or before the
	// first). MaxWatermark once its input ended.
	Watermark *int64 `json:"watermark,omitempty"`
	// Metrics are the operator metrics of the subtask's current attempt, by "operator/name": the counters
	// and gauges its functions registered (RuntimeContext.Metrics) and the engine's own, such as a
	// window's late_records_dropped.
	Metrics map[string]int64 `json:"metrics,omitempty"`
	// BusyMsPerSecond, BackpressuredMsPerSecond and IdleMsPerSecond are how the running subtask spent the
	// last second, in milliseconds per second, as its TaskManager measured them (Flink's
	// busyTimeMsPerSecond, backPressuredTimeMsPerSecond and idleTimeMsPerSecond): idle waiting for input
	// (or a source for its next record), backpressured blocked on a full output (its readers are behind),
	// busy the rest, its functions' own waits included. They add up to 1000, give or take rounding. All
	// three are 0 while the subtask does not run: before its attempt runs, and once it finished, failed or
	// was cancelled.
	BusyMsPerSecond          int64 `json:"busy_ms_per_s"`
	BackpressuredMsPerSecond int64 `json:"backpressured_ms_per_s"`
	IdleMsPerSecond          int64 `json:"idle_ms_per_s"`
	// InflightLogBytes is what the in-flight logs of the running subtask's outputs hold (task failover:
	// what its consumers could replay); 0 without logs or while it does not run.
	InflightLogBytes int64 `json:"inflight_log_bytes"`
}

// Vertex returns the vertex that contains the named operator, or nil.
func (r *JobResult) Vertex(operatorName string) *VertexResult {
	for i := range r.Vertices {
		for _, op := range r.Vertices[i].Operators {
			if op == operatorName {
				return &r.Vertices[i]
			}
		}
	}
	return nil
}

// Of is the result of job name in the job master's snapshot s: while it runs (WallMillis up to now) or
// once it ended.
func Of(name string, s jobcore.Snapshot) *JobResult {
	r := &JobResult{Job: name, Status: string(s.Status), Failovers: []FailoverResult{}, Savepoint: s.Savepoint, Waiting: s.Waiting}
	if c := s.Checkpoints; c != nil {
		r.Checkpoints = &CheckpointCounts{Completed: c.Completed, Failed: c.Failed, Aborted: c.Aborted, LastCompletedID: c.LastCompletedID,
			InProgress: int64(s.CheckpointsInProgress)}
	}
	for _, st := range s.CheckpointHistory {
		cs := CheckpointStats{ID: st.ID, Status: st.Status.String(), TriggerTime: s.Started.Add(time.Duration(st.TriggerMillis) * time.Millisecond),
			Acknowledged: st.Acknowledged, Expected: st.Expected, StateBytes: st.StateBytes, NewBytes: st.NewBytes, ChannelStateBytes: st.ChannelStateBytes,
			AlignmentMillis: CeilMillis(time.Duration(st.MaxAlignmentNanos)), Reason: st.Reason}
		if st.EndMillis > 0 {
			cs.DurationMillis = st.EndMillis - st.TriggerMillis
		} else {
			cs.DurationMillis = max(time.Since(cs.TriggerTime).Milliseconds(), 0)
		}
		r.CheckpointHistory = append(r.CheckpointHistory, cs)
	}
	subtaskName := func(st ident.Subtask) string {
		for _, vs := range s.Vertices {
			if vs.Vertex.ID == st.Vertex {
				return fmt.Sprintf("%s[%d]", vs.Vertex.Name, st.Index)
			}
		}
		return st.String()
	}
	t := s.FailoverTotals
	r.FailoverTotals = FailoverTotals{Failovers: t.Failovers, Omitted: t.Omitted, RecordsLost: t.RecordsLost,
		RecordsDropped: t.RecordsDropped, BuffersDropped: t.BuffersDropped, PartialRecordsSkipped: t.PartialRecordsSkipped,
		RecordsReplayed: t.RecordsReplayed, DuplicatesDropped: t.DuplicatesDropped, Edges: []EdgeLossResult{}}
	vertexName := func(id ident.VertexID) string {
		for _, vs := range s.Vertices {
			if vs.Vertex.ID == id {
				return vs.Vertex.Name
			}
		}
		return fmt.Sprintf("v%d", id)
	}
	for _, e := range t.Edges {
		r.FailoverTotals.Edges = append(r.FailoverTotals.Edges, EdgeLossResult{From: vertexName(e.Producer), To: vertexName(e.Consumer),
			RecordsLost: e.RecordsLost, RecordsDropped: e.RecordsDropped, BuffersDropped: e.BuffersDropped,
			PartialRecordsSkipped: e.PartialRecordsSkipped})
	}
	for _, f := range s.Failovers {
		fr := FailoverResult{Failed: subtaskName(f.Failed), Strategy: f.Strategy, Fallback: f.Fallback, CheckpointRestored: f.CheckpointRestored, Restarted: []string{}, FailedAt: f.FailedAt}
		if f.Global {
			fr.Failed = "job"
		}
		fr.TaskManager, fr.FailedOn = f.TaskManager, f.FailedOn
		for _, st := range f.FailedSubtasks {
			fr.FailedSubtasks = append(fr.FailedSubtasks, subtaskName(st))
		}
		if f.Cause != nil {
			fr.Cause, fr.Stack = f.Cause.Error(), PanicStack(f.Cause)
		}
		for _, st := range f.Restarted {
			fr.Restarted = append(fr.Restarted, subtaskName(st))
		}
		if !f.RecoveredAt.IsZero() {
			fr.RecoveryMillis = CeilMillis(f.RecoveredAt.Sub(f.FailedAt))
		}
		if !f.OutputAt.IsZero() {
			fr.OutageMillis = CeilMillis(f.OutputAt.Sub(f.FailedAt))
		}
		fr.RecordsLost, fr.RecordsDropped, fr.BuffersDropped, fr.PartialRecordsSkipped = f.RecordsLost, f.RecordsDropped, f.BuffersDropped, f.PartialRecordsSkipped
		for _, c := range f.Channels {
			fr.Channels = append(fr.Channels, ChannelLossResult{From: subtaskName(c.Producer), To: subtaskName(c.Consumer),
				RecordsLost: c.RecordsLost, RecordsDropped: c.RecordsDropped, BuffersDropped: c.BuffersDropped,
				PartialRecordsSkipped: c.PartialRecordsSkipped})
		}
		fr.RecordsReplayed, fr.DuplicatesDropped = f.RecordsReplayed, f.DuplicatesDropped
		for _, c := range f.Replay {
			fr.Replay = append(fr.Replay, ChannelReplayResult{From: subtaskName(c.Producer), To: subtaskName(c.Consumer),
				RecordsReplayed: c.RecordsReplayed, DuplicatesDropped: c.DuplicatesDropped})
		}
		r.Failovers = append(r.Failovers, fr)
	}
	if s.Err != nil {
		r.Error, r.ErrorStack = s.Err.Error(), PanicStack(s.Err)
	}
	end := s.Ended
	if end.IsZero() {
		end = time.Now()
	}
	if !s.Started.IsZero() {
		r.WallMillis = end.Sub(s.Started).Milliseconds()
	}
	for _, vs := range s.Vertices {
		v := vs.Vertex
		vr := VertexResult{Name: v.Name, Parallelism: v.Parallelism, RecordsIn: vs.RecordsIn, RecordsOut: vs.RecordsOut,
			Inputs: []InputResult{}}
		for _, n := range v.Nodes {
			vr.Operators = append(vr.Operators, n.Name)
		}
		for _, in := range v.Inputs {
			vr.Inputs = append(vr.Inputs, InputResult{From: in.Source.Name, Pattern: in.Pattern.String()})
		}
		for _, st := range vs.Subtasks {
			sr := SubtaskResult{Index: st.Index, Attempt: st.Attempt, TaskManager: st.TaskManager,
				State: st.State.String(), RecordsIn: st.RecordsIn, RecordsOut: st.RecordsOut,
				BusyMsPerSecond: st.Times.BusyMsPerSecond, BackpressuredMsPerSecond: st.Times.BackpressuredMsPerSecond,
				IdleMsPerSecond: st.Times.IdleMsPerSecond, InflightLogBytes: st.InflightLogBytes}
			vr.BusyMsPerSecond = max(vr.BusyMsPerSecond, sr.BusyMsPerSecond)
			vr.BackpressuredMsPerSecond = max(vr.BackpressuredMsPerSecond, sr.BackpressuredMsPerSecond)
			vr.IdleMsPerSecond = max(vr.IdleMsPerSecond, sr.IdleMsPerSecond)
			if st.HasWatermark {
				w := st.Watermark
				sr.Watermark = &w
			}
			if len(st.Metrics) > 0 {
				sr.Metrics = make(map[string]int64, len(st.Metrics))
				for _, m := range st.Metrics {
					sr.Metrics[m.Name] = m.Value
				}
			}
			vr.Subtasks = append(vr.Subtasks, sr)
		}
		r.Vertices = append(r.Vertices, vr)
	}
	return r
}

// PanicStack is the stack of the panic err comes from, as the task that panicked took it (in its process or
// after the failure crossed a session), or "" when err comes from no panic.
func PanicStack(err error) string {
	var p interface{ PanicStack() string }
	if errors.As(err, &p) {
		return p.PanicStack()
	}
	return ""
}

// CeilMillis rounds d up to whole milliseconds, and a negative d to 0: a recovery that took 0.3 ms is
// reported as 1 ms, not as 0, which would read as "not measured", and a figure is never lower than what
// happened. The reports' durations and the benchmarks' figures are rounded so.
func CeilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

package runnel

import "github.com/runnel-dev/runnel/internal/report"

// JobResult describes a job run; its JSON form is the `--report` contract of the runnel command (fields are
// only ever added, never renamed).
type JobResult = report.JobResult

// RestoreResult describes the state a job started from: the location, the checkpoint's id, and the newer
// checkpoints that were passed over because they were corrupt, truncated or incomplete.
type RestoreResult = report.RestoreResult

// CheckpointCounts counts the checkpoints of a job run.
type CheckpointCounts = report.CheckpointCounts

// FailoverResult is one failover: the subtask that failed ("VERTEX[i]", or "job" for a failure of the job as a
// whole, such as too many failed checkpoints in a row, which restarts every subtask), the strategy, the subtasks
// restarted, the checkpoint their state came from (nil: none, they started empty), and the time from the
// failure until every restarted subtask was running again.
type FailoverResult = report.FailoverResult

// ChannelReplayResult is what task failover did on one channel in one failover: on a channel into the
// restarted subtask, the records it replayed; on one out of it, the duplicates its consumer dropped.
type ChannelReplayResult = report.ChannelReplayResult

// ChannelLossResult is the loss of one channel in one failover, from a producer subtask ("VERTEX[i]") that
// kept running (or was restarted) to a restarted consumer.
type ChannelLossResult = report.ChannelLossResult

// FailoverTotals sums every failover of a run. Failovers counts them; Omitted those no longer listed in
// JobResult.Failovers, which keeps the last 1000 so that a long job's memory stays flat. Edges breaks the
// loss down by edge of the job graph (tasks, by name), over all failovers.
type FailoverTotals = report.FailoverTotals

// EdgeLossResult is the loss on the channels from one task to another, over all failovers.
type EdgeLossResult = report.EdgeLossResult

// VertexResult describes one task (a chain of operators) of the job.
type VertexResult = report.VertexResult

// InputResult describes one input edge of a vertex.
type InputResult = report.InputResult

// SubtaskResult describes one parallel instance of a vertex.
type SubtaskResult = report.SubtaskResult

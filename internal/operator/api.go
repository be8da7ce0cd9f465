// Package operator is the typed half of the runtime: the operator implementations behind the public API
// (map, filter, flat map, keyed reduce and process, sources, sinks), the record writers that serialize and
// partition records into result partitions, the readers that decode them, and the assembly of a JobVertex's
// operators into a task.Chain.
//
// It is generic code: records travel between chained operators as typed values through Collector calls,
// with no serialization and no boxing; only edges that cross a task boundary serialize, with the edge's
// codec. The public runnel package aliases the user-facing interfaces defined here. This package must not
// import the public runnel package, the scheduler, the job master or the cluster.
package operator

import (
	"context"
	"log/slog"

	"github.com/runnel-dev/runnel/internal/state"
	"github.com/runnel-dev/runnel/internal/task"
)

// Collector receives the records an operator emits.
type Collector[T any] interface {
	Collect(v T)
}

// RuntimeContext tells a function about the parallel instance it runs in.
type RuntimeContext interface {
	// JobName is the name the job was submitted under.
	JobName() string
	// OperatorName is the name of the operator.
	OperatorName() string
	// TaskName names the task (the chain) and the subtask, e.g. "tokenize -> count [1/2] #0".
	TaskName() string
	// SubtaskIndex is the index of this parallel instance, from 0.
	SubtaskIndex() int
	// Parallelism is the number of parallel instances of the operator.
	Parallelism() int
	// MaxParallelism is the number of key groups.
	MaxParallelism() int
	// Attempt counts restarts of this subtask, from 0.
	Attempt() int
	// Logger logs with the task's attributes.
	Logger() *slog.Logger
	// Done is closed when the task is being cancelled; blocking calls in sources and sinks must watch it.
	Done() <-chan struct{}
	// Checkpointing reports whether the job takes periodic checkpoints. With them, a sink that commits what
	// a checkpoint covers when it completes gets a last checkpoint after its end of input; without, it must
	// commit at its end of input (Flush) itself.
	Checkpointing() bool
	// Metrics registers the operator's metrics, which appear per subtask in the JobResult and in /metrics
	// (runnel_operator_metric). Register them in Open.
	Metrics() MetricGroup
}

// MetricGroup registers an operator's metrics; a task holds at most deploy.MaxMetricsPerTask, and a name
// may be registered once per operator.
type MetricGroup interface {
	// Counter returns a counter to add to from the function (on the task goroutine, without atomics).
	Counter(name string) *Counter
	// Gauge registers f, called on the task goroutine when the metrics are published (every 200 ms).
	Gauge(name string, f func() int64)
}

// Counter is a metric that counts up.
type Counter struct{ v *int64 }

// Inc adds one.
func (c *Counter) Inc() { *c.v++ }

// Add adds n.
func (c *Counter) Add(n int64) { *c.v += n }

// Value returns the count.
func (c *Counter) Value() int64 { return *c.v }

// KeyedContext is the context of a keyed function: the key of the current record and access to all keys.
type KeyedContext[K comparable] interface {
	RuntimeContext
	// CurrentKey returns the key of the record being processed.
	CurrentKey() K
	// ForEachKey makes each key that has state current in turn and calls f (for example at end of input).
	ForEachKey(f func(key K) error) error
	// Timestamp returns the event-time timestamp (epoch ms) of the record being processed (in OnTimer: the
	// timer's time) and true, or false when the stream has no event time.
	Timestamp() (int64, bool)
	// TimerService gives the clocks and the current key's timers.
	TimerService() TimerService
}

// InputStatus is what a source reader says about its input after a poll.
type InputStatus = task.SourceStatus

// The input statuses a source reader returns.
const (
	MoreAvailable    = task.MoreAvailable
	NothingAvailable = task.NothingAvailable
	EndOfInput       = task.EndOfInput
)

// Source creates the readers of a source, one per parallel subtask.
type Source[T any] interface {
	CreateReader(ctx RuntimeContext) (SourceReader[T], error)
}

// SourceReader produces the records of one source subtask. Its methods are called from the task goroutine.
type SourceReader[T any] interface {
	// PollNext emits a batch of records (a few hundred to a few thousand is right; the task handles control
	// messages between polls) and says whether more are available now, later, or never. The records it
	// emits are handed on in batches, at the latest when it returns; out is also a BatchCollector, for a
	// reader that has its records in a slice already.
	PollNext(out Collector[T]) (InputStatus, error)
	// Available returns a channel that is ready when a reader that said NothingAvailable has more. It is
	// only consulted after NothingAvailable.
	Available() <-chan struct{}
	// Close releases the reader's resources.
	Close() error
}

// CheckpointedReader is a SourceReader whose position can be checkpointed, so that a restarted source
// rewinds to where the restored checkpoint was taken (exactly-once with a replayable source).
type CheckpointedReader interface {
	// SnapshotState returns the reader's position after the last record it emitted.
	SnapshotState(checkpointID int64) ([]byte, error)
	// RestoreState rewinds a new reader to a position from SnapshotState, before its first poll.
	RestoreState(state []byte) error
}

// DeterministicReader is a SourceReader that can say whether, rewound to its position (RestoreState, or
// its start), it emits the same records in the same order again however its polls are cut: what task
// failover needs of a source (docs/taskfailover.md §7). Asked once, after the restore of a subtask restarted
// by task failover; a reader that does not implement it, or answers false, makes that failover fall back
// to region failover. A reader that merges several inputs in the order they arrive (a Kafka source with
// several partitions) must answer false.
type DeterministicReader interface {
	ReplaysDeterministically() bool
}

// CheckpointedWriter is a SinkWriter with state that is checkpointed and restored with the job's (for
// example what it has written but not yet committed, or what it has seen).
type CheckpointedWriter interface {
	SnapshotState(checkpointID int64) ([]byte, error)
	RestoreState(state []byte) error
}

// CheckpointListener is a SourceReader or SinkWriter that wants to hear when a checkpoint is complete and
// persisted, on the task goroutine (Flink's notifyCheckpointComplete): a sink that staged what it wrote
// for a checkpoint (a transaction, a part file) commits it here, a source may acknowledge what it read.
// Notifications can be missed (a failover in between); a later one covers every earlier checkpoint, so
// commit everything staged up to id. An error fails the task.
type CheckpointListener interface {
	NotifyCheckpointComplete(checkpointID int64) error
}

// CheckpointAbortListener is a SourceReader or SinkWriter that wants to hear, on the task goroutine, that a
// checkpoint it may have taken part in was aborted (Flink's notifyCheckpointAborted): the checkpoint can
// never complete, and no restore will take it. The job master decides each checkpoint once, so a listener
// never hears both the abort and the completion of one id; it may hear of an id it never snapshotted
// (the abort came before the barrier), and it may miss an abort (a failover in between, or too many
// aborts at once for the task's mailbox), so what it staged must not depend on hearing one.
//
// A running task goes on after an abort, and its next checkpoint covers what it wrote before the aborted
// one's barrier too: a two-phase-commit sink must then keep what it staged for the aborted checkpoint
// (the next completion commits it), and may let it go only once no checkpoint that covers it can
// complete, for example when it closes having heard the abort of every later checkpoint it took. A task
// that is cancelled (or fails) tells its operators of the aborts that reached it before, ahead of Close.
// An error fails a running task; a task that is ending logs it.
type CheckpointAbortListener interface {
	NotifyCheckpointAborted(checkpointID int64) error
}

// Settler is a Sink whose writers stage what they write until a checkpoint completes (a two-phase commit:
// a transaction, a pending file) and that can settle a subtask's staged output with no writer running.
//
// A running writer hears every checkpoint's fate (CheckpointListener, CheckpointAbortListener), and a
// restored one settles what its predecessors staged (RestoreState). A writer that failed, or whose
// TaskManager was lost, hears nothing more, and when the job then ends (failed for good, or cancelled
// before a restart restored the subtask) no restore follows: what it staged for checkpoints it never heard
// of stays staged. So when a job ends failed or cancelled, the engine settles every sink subtask that had
// not finished, once its tasks have stopped: Settle must leave outside the job what a restore from the
// checkpoint the job would have restarted from leaves — commit what that checkpoint covers, undo
// everything else the subtask staged. It runs in the process that ran the job (the JobManager of a
// cluster), possibly for a subtask that closed cleanly, so it must be idempotent; its error is logged.
type Settler interface {
	Settle(ctx context.Context, s Settlement) error
}

// Settlement is the sink subtask Settler.Settle settles.
type Settlement struct {
	// Subtask and Parallelism are the subtask's index and its sink's parallelism.
	Subtask, Parallelism int
	// CheckpointID is the checkpoint the job would have restored (0: none, and nothing staged can be
	// committed), and State the subtask's writer state in it, as CheckpointedWriter.SnapshotState returned
	// it (nil when the checkpoint holds none for the subtask).
	CheckpointID int64
	State        []byte
	// Logger logs with the job's and the sink's attributes.
	Logger *slog.Logger
}

// Sink creates the writers of a sink, one per parallel subtask.
type Sink[T any] interface {
	CreateWriter(ctx RuntimeContext) (SinkWriter[T], error)
}

// SinkWriter writes the records of one sink subtask. Its methods are called from the task goroutine.
//
// A checkpoint covers every record written before its barrier: after a failure the job restarts from it
// and does not write those records again. So a writer that holds records in memory (a batch, a buffered
// file) must hand them on in SnapshotState (CheckpointedWriter), which runs before the barrier goes on;
// records it still holds when a checkpoint completes are lost if the job fails after it. Flush is not
// called at checkpoints.
type SinkWriter[T any] interface {
	// Write writes one record.
	Write(v T) error
	// Flush makes everything written so far durable or visible; it is called once, at end of input.
	Flush() error
	// Close releases the writer's resources; it is always called, also after failures.
	Close() error
}

// BatchWriter is a SinkWriter that also writes a run of records in one call; the engine then hands it the
// records of a network buffer (or of a chained operator's batch) at once. WriteBatch must have the effect
// of Write on each record in order, and must not keep vs after returning.
type BatchWriter[T any] interface {
	SinkWriter[T]
	WriteBatch(vs []T) error
}

// KeyedBackend returns the keyed state backend behind a keyed context, for state constructors; nil when the
// context is not keyed.
func KeyedBackend(ctx RuntimeContext) state.Backend {
	if k, ok := ctx.(interface{ keyedBackend() state.Backend }); ok {
		return k.keyedBackend()
	}
	return nil
}

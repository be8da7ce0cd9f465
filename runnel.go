// Package runnel is the public API of Runnel, a distributed stream-processing engine: build a dataflow of
// typed streams on an Environment and Execute it, in one process or on a cluster of a JobManager and
// TaskManager processes (Register, Main).
//
//	env := runnel.NewEnvironment(runnel.WithParallelism(2))
//	lines := runnel.FromSource(env, connector.Collection([]string{"a b", "b c"})).Name("lines")
//	words := runnel.FlatMap(lines, splitWords).Name("tokenize")
//	counts := runnel.Reduce(runnel.KeyBy(words, wordOf), addCounts).Name("count")
//	counts.SinkTo(connector.Print[WordCount]()).Name("print")
//	result, err := env.Execute(ctx, "wordcount")
//
// The API follows the shape of Flink's DataStream API (the README has a table of what it covers):
//
//   - sources and sinks (FromSource, SinkTo), Map, Filter, FlatMap and their rich forms (MapWith, ...),
//     the partitionings, Union;
//   - keyed streams (KeyBy) with keyed value, list and map state (optionally with a TTL), Reduce, and
//     keyed process functions with event- and processing-time timers (Process, OnTimer);
//   - event time: WithTimestamps with a WatermarkStrategy (BoundedOutOfOrderness, MonotonousTimestamps or
//     CustomWatermarks, WithIdleness); watermarks are made per split and subtask and travel in-band;
//   - windows: tumbling, sliding and session windows in event or processing time (Window, WindowAll),
//     with WindowReduce, WindowAggregate, WindowProcess and WindowAggregateProcess, allowed lateness and
//     a side output for late records;
//   - two inputs: CoProcess, KeyedCoProcess, interval joins (IntervalJoinBetween and IntervalJoinProcess
//     with a ProcessJoinFunction, exclusive bounds and late side outputs per side, or IntervalJoin),
//     WindowJoin, WindowCoGroup and broadcast state (ConnectBroadcast, ProcessBroadcast); side outputs
//     (OutputTag, SideOutput);
//   - operator state, checkpoints and savepoints (exactly once or at least once), restart and failover
//     strategies, and rescaling from a savepoint.
//
// Go methods cannot take type parameters, so the transformations that change the record type (Map,
// FlatMap, KeyBy, Reduce, Process, the windows and joins) are functions, and those that keep it (Filter,
// Name, SetParallelism, the partitionings) are methods.
//
// Mistakes in building a job (a nil function, a bad parallelism, a window in event time on a stream
// without it, a stream of a type without a codec that must cross the network) are collected as the job
// is built and returned by Execute, naming the API function called and the file and line of the call.
package runnel

import (
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/operator"
)

// Collector receives the records a function emits.
type Collector[T any] = operator.Collector[T]

// BatchCollector is a Collector that also takes a run of records in one call. The collectors the engine
// passes to source readers and functions are BatchCollectors; CollectBatch(vs) has the effect of Collect on
// each record in order and does not keep vs.
type BatchCollector[T any] = operator.BatchCollector[T]

// RuntimeContext tells a function about the parallel instance it runs in.
type RuntimeContext = operator.RuntimeContext

// KeyedContext is the context of a keyed function.
type KeyedContext[K comparable] = operator.KeyedContext[K]

// KeyedProcessFunction processes the records of a keyed stream with keyed state. Embed
// KeyedProcessBase to get no-op Open, EndInput and Close.
type KeyedProcessFunction[K comparable, In, Out any] = operator.KeyedProcessFunction[K, In, Out]

// Source creates the readers of a source, one per parallel subtask.
type Source[T any] = operator.Source[T]

// SourceReader produces the records of one source subtask.
type SourceReader[T any] = operator.SourceReader[T]

// CheckpointedReader is a SourceReader whose position can be checkpointed (see operator.CheckpointedReader).
type CheckpointedReader = operator.CheckpointedReader

// DeterministicReader is a SourceReader that says whether it replays the same records in the same order
// from a restored position, which task failover needs of a failed source (see
// operator.DeterministicReader); without it a source's failure under task failover restarts by region.
type DeterministicReader = operator.DeterministicReader

// CheckpointListener is a SourceReader or SinkWriter told when a checkpoint is complete (see
// operator.CheckpointListener).
type CheckpointListener = operator.CheckpointListener

// CheckpointAbortListener is a SourceReader or SinkWriter told when a checkpoint is aborted (see
// operator.CheckpointAbortListener).
type CheckpointAbortListener = operator.CheckpointAbortListener

// CheckpointedWriter is a SinkWriter whose state is checkpointed (see operator.CheckpointedWriter).
type CheckpointedWriter = operator.CheckpointedWriter

// Sink creates the writers of a sink, one per parallel subtask.
type Sink[T any] = operator.Sink[T]

// Settler is a Sink that settles, after a job ended failed or cancelled, what a subtask of it staged for
// checkpoints it never heard the fate of (see operator.Settler).
type Settler = operator.Settler

// Settlement is the sink subtask a Settler settles (see operator.Settlement).
type Settlement = operator.Settlement

// SinkWriter writes the records of one sink subtask.
type SinkWriter[T any] = operator.SinkWriter[T]

// BatchWriter is a SinkWriter that also writes a run of records in one call (see operator.BatchWriter).
type BatchWriter[T any] = operator.BatchWriter[T]

// InputStatus is what a SourceReader says after a poll.
type InputStatus = operator.InputStatus

// Input statuses returned by SourceReader.PollNext.
const (
	MoreAvailable    = operator.MoreAvailable
	NothingAvailable = operator.NothingAvailable
	EndOfInput       = operator.EndOfInput
)

// Codec encodes and decodes records of type T for the network; see package codec.
type Codec[T any] = codec.Codec[T]

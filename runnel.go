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
//   - two inputs: CoProcess, KeyedCoProcess, IntervalJoin, WindowJoin, WindowCoGroup and broadcast state
//     (ConnectBroadcast, ProcessBroadcast); side outputs (OutputTag, SideOutput);
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
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"time"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/network"
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

// CheckpointedWriter is a SinkWriter whose state is checkpointed (see operator.CheckpointedWriter).
type CheckpointedWriter = operator.CheckpointedWriter

// Sink creates the writers of a sink, one per parallel subtask.
type Sink[T any] = operator.Sink[T]

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

// Config holds the settings of an Environment. Use the With... options to change them.
type Config struct {
	Parallelism        int
	MaxParallelism     int
	BufferTimeout      time.Duration
	BufferSize         int
	MaxRecordSize      int
	Chaining           bool
	TaskManagers       int
	SlotsPerTM         int
	NetworkMemoryBytes int64
	// InflightLogMemory is each TaskManager's memory for task failover's in-flight logs
	// (WithInflightLogMemory; 0: 1 GiB).
	InflightLogMemory int64
	// InflightLogDisk is each TaskManager's disk for the in-flight logs past their memory
	// (WithInflightLogDisk; 0: 4 GiB; NoInflightLogDisk: no spilling).
	InflightLogDisk   int64
	Logger            *slog.Logger
	ProgressInterval  time.Duration
	Progress          func(*JobResult)
	Checkpoint        CheckpointConfig
	Failover          string
	RestartStrategy   string
	StateBackend      string
	FailureInjections []string
	SavepointOnStop   string
	RestoreFrom       string
	// AllowNonRestoredState lets a restore drop state of operators the job no longer has
	// (WithAllowNonRestoredState).
	AllowNonRestoredState bool
	// IncrementalCheckpoints makes checkpoints incremental (WithIncrementalCheckpoints).
	IncrementalCheckpoints bool
	ExchangeMode           string
	Scheduling             string
	NoSlotSharing          bool
	// MetricsAddr, if set, is where Execute serves the job's Prometheus metrics (/metrics); MetricsListener
	// is the same on a listener the caller opened.
	MetricsAddr     string
	MetricsListener net.Listener
	// WatermarkInterval is how often periodic watermarks are emitted (WithWatermarkInterval; default
	// DefaultWatermarkInterval, 0: off).
	WatermarkInterval    time.Duration
	watermarkIntervalSet bool
	// Clock is the processing time of the job's tasks when it runs in this process (WithClock); nil: the
	// wall clock.
	Clock Clock
}

// Defaults of an Environment.
const (
	DefaultParallelism    = 1
	DefaultMaxParallelism = 128
	DefaultBufferTimeout  = 100 * time.Millisecond
)

// Limits of an Environment's settings; a value past one is refused when the job is submitted.
const (
	// MaxParallelismLimit is the largest max parallelism (number of key groups), as in Flink.
	MaxParallelismLimit = 1 << 15
	// MaxTaskManagers is the most TaskManagers an in-process cluster starts. Each holds a listening
	// socket, a spill directory and its goroutines, and binding thousands of sockets to ephemeral ports
	// costs the kernel more per socket the more are bound, so that startup grows faster than linearly:
	// past this many a cluster in one process helps no test or demo, it only starts slowly.
	MaxTaskManagers = 1024
)

// Option changes a Config.
type Option func(*Config)

// WithParallelism sets the default parallelism of operators.
func WithParallelism(n int) Option { return func(c *Config) { c.Parallelism = n } }

// WithMaxParallelism sets the number of key groups, the upper bound of any keyed operator's parallelism.
func WithMaxParallelism(n int) Option { return func(c *Config) { c.MaxParallelism = n } }

// WithBufferTimeout sets how long a partly filled network buffer may wait before it is sent: > 0 an
// interval, 0 after every record (lowest latency), < 0 only when full (highest throughput).
func WithBufferTimeout(d time.Duration) Option { return func(c *Config) { c.BufferTimeout = d } }

// WithBufferSize sets the size of network buffers in bytes (default 32 KiB).
func WithBufferSize(n int) Option { return func(c *Config) { c.BufferSize = n } }

// WithMaxRecordSize bounds one serialized record in bytes (default 16 MiB).
func WithMaxRecordSize(n int) Option { return func(c *Config) { c.MaxRecordSize = n } }

// WithChaining turns operator chaining on (the default) or off.
func WithChaining(on bool) Option { return func(c *Config) { c.Chaining = on } }

// WithTaskManagers sets the number of TaskManagers of the in-process cluster (default 1).
func WithTaskManagers(n int) Option { return func(c *Config) { c.TaskManagers = n } }

// WithSlotsPerTaskManager sets the slots of each TaskManager (default: just enough for the job).
func WithSlotsPerTaskManager(n int) Option { return func(c *Config) { c.SlotsPerTM = n } }

// WithSlotSharing turns Flink-style slot sharing on (the default: subtask i of every operator shares slot
// i, so forward edges stay on one TaskManager) or off (every subtask gets its own slot, spread over the
// TaskManagers, so consecutive operators talk over TCP).
func WithSlotSharing(on bool) Option { return func(c *Config) { c.NoSlotSharing = !on } }

// WithNetworkMemory sets each TaskManager's network buffer budget in bytes (default 128 MiB).
func WithNetworkMemory(bytes int64) Option { return func(c *Config) { c.NetworkMemoryBytes = bytes } }

// WithInflightLogMemory sets each TaskManager's memory for the in-flight logs of task failover (default
// 1 GiB, taken as the logs grow); past it the logs spill to disk, up to 4 GiB, and past that a log is
// incomplete and a failure it would have served falls back to region failover. A log holds what its
// producer sent since the last completed checkpoint: size it to a checkpoint interval of the job's output.
func WithInflightLogMemory(bytes int64) Option {
	return func(c *Config) { c.InflightLogMemory = bytes }
}

// WithInflightLogDisk sets each TaskManager's disk for the in-flight logs of task failover past their
// memory (default 4 GiB, in the TaskManager's spill directory), at least 1 MiB; NoInflightLogDisk turns
// spilling off. A log that finds neither memory nor disk room drops what it holds: a failure that would
// have needed it falls back to region failover, which says so.
func WithInflightLogDisk(bytes int64) Option {
	return func(c *Config) { c.InflightLogDisk = bytes }
}

// NoInflightLogDisk, given to WithInflightLogDisk, keeps the in-flight logs in memory only.
const NoInflightLogDisk = -1

// WithLogger sets the logger of the runtime (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *Config) { c.Logger = l } }

// WithProgress calls f with a snapshot of the running job every interval (from a goroutine Execute owns).
func WithProgress(interval time.Duration, f func(*JobResult)) Option {
	return func(c *Config) { c.ProgressInterval, c.Progress = interval, f }
}

func (c *Config) validate() error {
	var errs []error
	if c.Parallelism < 1 {
		errs = append(errs, fmt.Errorf("WithParallelism: parallelism must be at least 1, got %d", c.Parallelism))
	}
	if c.MaxParallelism < 1 || c.MaxParallelism > MaxParallelismLimit {
		errs = append(errs, fmt.Errorf("WithMaxParallelism: must be between 1 and %d, got %d", MaxParallelismLimit, c.MaxParallelism))
	}
	if c.BufferSize < network.MinBufferSize {
		errs = append(errs, fmt.Errorf("WithBufferSize: buffers must be at least %d bytes, got %d", network.MinBufferSize, c.BufferSize))
	}
	if c.MaxRecordSize < 1 {
		errs = append(errs, fmt.Errorf("WithMaxRecordSize: must be at least 1 byte, got %d", c.MaxRecordSize))
	}
	if c.TaskManagers < 1 || c.TaskManagers > MaxTaskManagers {
		errs = append(errs, fmt.Errorf("WithTaskManagers: between 1 and %d TaskManagers (MaxTaskManagers), got %d", MaxTaskManagers, c.TaskManagers))
	}
	if c.SlotsPerTM < 0 {
		errs = append(errs, fmt.Errorf("WithSlotsPerTaskManager: must not be negative, got %d", c.SlotsPerTM))
	}
	if c.InflightLogMemory != 0 && c.InflightLogMemory < 1<<20 {
		errs = append(errs, fmt.Errorf("WithInflightLogMemory: %d bytes is below the 1 MiB chunk in-flight logs take memory in", c.InflightLogMemory))
	}
	if c.InflightLogDisk != 0 && c.InflightLogDisk != NoInflightLogDisk && c.InflightLogDisk < 1<<20 {
		errs = append(errs, fmt.Errorf("WithInflightLogDisk: %d bytes is below the 1 MiB chunk in-flight logs spill in (NoInflightLogDisk turns spilling off)", c.InflightLogDisk))
	}
	if c.NetworkMemoryBytes < int64(c.BufferSize) {
		errs = append(errs, fmt.Errorf("WithNetworkMemory: %d bytes do not hold one buffer of %d bytes", c.NetworkMemoryBytes, c.BufferSize))
	}
	if c.WatermarkInterval < 0 || c.WatermarkInterval%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("WithWatermarkInterval: must be whole milliseconds, at least 0, got %s", c.WatermarkInterval))
	}
	if c.Progress != nil && c.ProgressInterval <= 0 {
		errs = append(errs, fmt.Errorf("WithProgress: interval must be positive, got %s", c.ProgressInterval))
	}
	return errors.Join(errs...)
}

// Environment collects the operators of one job and runs it.
type Environment struct {
	cfg       Config
	nodes     []*graph.StreamNode
	edges     []*graph.StreamEdge
	errs      []error
	names     map[string]int
	resolvers []edgeResolver
	executed  bool
	accs      map[string]Accumulator // RegisterAccumulator's table, at most MaxAccumulators
	// fixedParallelism names the nodes whose parallelism cannot be set, and why.
	fixedParallelism map[int]string
	// sideTags is the type of each side output tag used on a node.
	sideTags map[int]map[string]reflect.Type
	// chainsFrom, when set (tests, through export_test.go), is another build of the same job whose
	// operators Execute runs in every task, as TaskManagers of a cluster run their own builds.
	chainsFrom *prepared
}

// NewEnvironment makes an environment with the given options.
func NewEnvironment(opts ...Option) *Environment {
	cfg := Config{
		Parallelism: DefaultParallelism, MaxParallelism: DefaultMaxParallelism, BufferTimeout: DefaultBufferTimeout,
		BufferSize: network.DefaultBufferSize, MaxRecordSize: network.DefaultMaxRecordSize, Chaining: true,
		TaskManagers: 1, NetworkMemoryBytes: 128 << 20,
	}
	for _, o := range opts {
		o(&cfg)
	}
	return &Environment{cfg: cfg, names: make(map[string]int)}
}

// Config returns the environment's settings.
func (e *Environment) Config() Config { return e.cfg }

// Err returns the mistakes recorded while building the job so far (Execute returns them too).
func (e *Environment) Err() error { return errors.Join(e.errs...) }

func (e *Environment) addErr(err error) { e.errs = append(e.errs, err) }

// origin returns "file:line" of the user's call that led to it: the first caller outside Runnel's own
// files of this package, however many of the API's functions lie between (WindowJoin builds a window
// operator through several). Every build error and every operator's "created at" comes from here.
func origin() string {
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		if f.File != "" && f.File != "<autogenerated>" && !isAPIFile(f.File) {
			return fmt.Sprintf("%s:%d", shortFile(f.File), f.Line)
		}
		if !more {
			return ""
		}
	}
}

// addNode creates a stream node with a default name derived from kind ("map", "map-2", ...).
func (e *Environment) addNode(kind graph.NodeKind, defaultName string, spec any) *graph.StreamNode {
	e.names[defaultName]++
	name := defaultName
	if n := e.names[defaultName]; n > 1 {
		name = fmt.Sprintf("%s-%d", defaultName, n)
	}
	n := &graph.StreamNode{
		ID: len(e.nodes), Name: name, Kind: kind, Parallelism: e.cfg.Parallelism,
		MaxParallelism: e.cfg.MaxParallelism, Payload: spec, Origin: origin(),
	}
	e.nodes = append(e.nodes, n)
	return n
}

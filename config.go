package runnel

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/runnel-dev/runnel/internal/network"
)

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
	// UIAddr, if set, is where Execute serves the job's web dashboard and REST API (WithUI); UIListener is
	// the same on a listener the caller opened (WithUIListener).
	UIAddr     string
	UIListener net.Listener
	// WatermarkInterval is how often periodic watermarks are emitted (WithWatermarkInterval; default
	// DefaultWatermarkInterval, 0: off).
	WatermarkInterval    time.Duration
	watermarkIntervalSet bool
	// Clock is the processing time of the job's tasks when it runs in this process (WithClock); nil: the
	// wall clock.
	Clock Clock
	// NetworkBuffersPerChannel is the length of the network queues (WithNetworkBuffersPerChannel; 0: the
	// default).
	NetworkBuffersPerChannel int
	networkBuffersSet        bool
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
	if err := c.validateNetworkBuffers(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// WithMetrics serves the job's metrics in the Prometheus text format at http://addr/metrics while Execute
// runs (for example "127.0.0.1:9249" or ":9249").
func WithMetrics(addr string) Option { return func(c *Config) { c.MetricsAddr = addr } }

// WithMetricsListener is WithMetrics on a listener the caller opened; Execute serves on it while the job
// runs and closes it when it returns.
func WithMetricsListener(ln net.Listener) Option { return func(c *Config) { c.MetricsListener = ln } }

// WithUI serves the job's web dashboard at http://addr/ while Execute runs (for example "127.0.0.1:8081"),
// with the JobManager's REST API (/v1/...) and the job's metrics (/metrics) beside it: the job graph, its
// throughput and backpressure, failovers, checkpoints and TaskManagers, as a JobManager serves them on
// its REST address.
func WithUI(addr string) Option { return func(c *Config) { c.UIAddr = addr } }

// WithUIListener is WithUI on a listener the caller opened; Execute serves on it while the job runs and
// closes it when it returns.
func WithUIListener(ln net.Listener) Option { return func(c *Config) { c.UIListener = ln } }

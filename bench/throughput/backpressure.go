package throughput

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// BackpressureConfig configures RunBackpressure: the pipeline
//
//	generator (SourceFactor x SinkRate records/s per subtask) -> map (value+1) -> keyBy(key)
//	  -> reduce (sum) -> sink paced to SinkRate records/s per subtask
//
// at parallelism 2 on one TaskManager, checkpointed every Interval. The sink is the bottleneck: it takes a
// fifth of what the sources offer, so the network queues of the keyBy stay full and an aligned
// checkpoint's barrier waits behind them.
type BackpressureConfig struct {
	// SinkRate is the records per second each sink subtask takes (default 20,000); the sources offer
	// SourceFactor times as many (default 5).
	SinkRate     float64
	SourceFactor float64
	Keys         int64 // distinct keys (default 1024)
	Parallelism  int   // default 2
	// Interval is the checkpoint interval (default 1 s).
	Interval time.Duration
	// Warmup is how many checkpoints each run takes before those it measures; 1 (the command's default)
	// passes over the first, which is triggered while the queues are still filling.
	Warmup int
	// Checkpoints is how many checkpoints a run measures: it ends once it completed Warmup+Checkpoints of
	// them, or after MaxDuration, whichever comes first (default 5).
	Checkpoints int
	// MaxDuration bounds a run (default 20 s).
	MaxDuration time.Duration
	// Runs is the number of rounds; each round runs the job aligned and unaligned, in alternating order
	// from one round to the next (default 2).
	Runs int
	// BuffersPerChannel are the network queue lengths to run at (runnel.WithNetworkBuffersPerChannel), each
	// with Runs rounds (default: the default length only).
	BuffersPerChannel []int
	// BufferSize is the size of a network buffer in bytes (runnel.WithBufferSize; 0: the default, 32 KiB).
	BufferSize int
	// Modes lists "aligned" and "unaligned", the checkpoints to run (default both).
	Modes []string
	// AlignedCheckpointTimeout is the unaligned runs' runnel.CheckpointConfig.AlignedCheckpointTimeout:
	// their checkpoints start aligned and switch to unaligned after it (0: unaligned from the start).
	AlignedCheckpointTimeout time.Duration
	// Logger is the engine's logger (default: warnings and errors to stderr).
	Logger *slog.Logger
}

// defaultBufferSize is the engine's default network buffer size, which RunBackpressure reports.
const defaultBufferSize = 32 << 10

// The checkpoint modes of RunBackpressure.
const (
	Aligned   = "aligned"
	Unaligned = "unaligned"
)

// BackpressureResult holds the figures of RunBackpressure at one network queue length; with several
// lengths, Queues holds one result per length and the other fields are those of the first.
type BackpressureResult struct {
	// AlignedMillis and UnalignedMillis are the medians of the measured checkpoints' durations (from the
	// trigger until the last subtask acknowledged), over every run; Ranges their minimum and maximum, and
	// Ratio aligned over unaligned.
	AlignedMillis        float64  `json:"aligned_checkpoint_ms"`
	UnalignedMillis      float64  `json:"unaligned_checkpoint_ms"`
	Ratio                float64  `json:"ratio"`
	AlignedRangeMillis   [2]int64 `json:"aligned_checkpoint_ms_range"`
	UnalignedRangeMillis [2]int64 `json:"unaligned_checkpoint_ms_range"`
	// AlignedCheckpoints and UnalignedCheckpoints count the measured checkpoints; the Incomplete ones
	// were still in progress when a run reached MaxDuration before it completed its checkpoints.
	AlignedCheckpoints   int `json:"aligned_checkpoints"`
	UnalignedCheckpoints int `json:"unaligned_checkpoints"`
	AlignedIncomplete    int `json:"aligned_incomplete"`
	UnalignedIncomplete  int `json:"unaligned_incomplete"`
	// StateBytes are the medians of the measured checkpoints' sizes: every byte of state each refers to,
	// channel state included.
	AlignedStateBytes   int64 `json:"aligned_state_bytes"`
	UnalignedStateBytes int64 `json:"unaligned_state_bytes"`
	// ChannelStateBytes are the medians of the part of those sizes that holds records in flight.
	AlignedChannelStateBytes   int64 `json:"aligned_channel_state_bytes"`
	UnalignedChannelStateBytes int64 `json:"unaligned_channel_state_bytes"`
	// AlignmentMillis are the medians of the longest alignment of a subtask in each checkpoint.
	AlignedAlignmentMillis   float64 `json:"aligned_alignment_ms"`
	UnalignedAlignmentMillis float64 `json:"unaligned_alignment_ms"`
	// SinkRPS are the medians over the runs of the records per second the sinks took, all subtasks
	// together, from the first record to the end of the run.
	AlignedSinkRPS   float64 `json:"aligned_sink_rps"`
	UnalignedSinkRPS float64 `json:"unaligned_sink_rps"`

	BuffersPerChannel int     `json:"buffers_per_channel"`
	BufferSize        int     `json:"buffer_size"`
	SinkRate          float64 `json:"sink_rate"`
	SourceRate        float64 `json:"source_rate"`
	Parallelism       int     `json:"parallelism"`
	IntervalMillis    int64   `json:"checkpoint_interval_ms"`

	Runs   []BackpressureRun     `json:"runs"`
	Queues []*BackpressureResult `json:"queues,omitempty"`
}

// BackpressureRun is one run of RunBackpressure.
type BackpressureRun struct {
	Mode              string `json:"mode"`
	BuffersPerChannel int    `json:"buffers_per_channel"`
	// DurationsMillis and StateBytes are those of the measured checkpoints that completed, in order.
	DurationsMillis []int64 `json:"checkpoint_ms"`
	StateBytes      []int64 `json:"state_bytes"`
	// ChannelStateBytes is the part of each of StateBytes that holds records in flight.
	ChannelStateBytes []int64 `json:"channel_state_bytes"`
	AlignmentMillis   []int64 `json:"alignment_ms"`
	// Incomplete counts the checkpoints still in progress when the run reached MaxDuration before it
	// completed its checkpoints.
	Incomplete int     `json:"incomplete"`
	Failed     int     `json:"failed"`
	SinkRPS    float64 `json:"sink_rps"`
	WallMillis int64   `json:"wall_ms"`
}

func (cfg *BackpressureConfig) defaults() error {
	if cfg.SinkRate == 0 {
		cfg.SinkRate = 20_000
	}
	if cfg.SourceFactor == 0 {
		cfg.SourceFactor = 5
	}
	if cfg.Keys == 0 {
		cfg.Keys = 1024
	}
	if cfg.Parallelism == 0 {
		cfg.Parallelism = 2
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Checkpoints == 0 {
		cfg.Checkpoints = 5
	}
	if cfg.MaxDuration == 0 {
		cfg.MaxDuration = 20 * time.Second
	}
	if cfg.Runs == 0 {
		cfg.Runs = 2
	}
	if len(cfg.BuffersPerChannel) == 0 {
		cfg.BuffersPerChannel = []int{runnel.DefaultNetworkBuffersPerChannel}
	}
	if cfg.BufferSize == 0 {
		cfg.BufferSize = defaultBufferSize
	}
	if len(cfg.Modes) == 0 {
		cfg.Modes = []string{Aligned, Unaligned}
	}
	var errs []error
	if cfg.SinkRate < 0 || cfg.SourceFactor < 1 {
		errs = append(errs, fmt.Errorf("throughput: the sink rate must be positive and the source factor at least 1, got %v and %v", cfg.SinkRate, cfg.SourceFactor))
	}
	if cfg.Keys < 1 || cfg.Parallelism < 1 || cfg.Runs < 1 || cfg.Warmup < 0 || cfg.Checkpoints < 1 {
		errs = append(errs, fmt.Errorf("throughput: keys, parallelism, runs and checkpoints must be at least 1 and warm-up at least 0, got %d, %d, %d, %d, %d",
			cfg.Keys, cfg.Parallelism, cfg.Runs, cfg.Checkpoints, cfg.Warmup))
	}
	if cfg.AlignedCheckpointTimeout < 0 {
		errs = append(errs, fmt.Errorf("throughput: aligned checkpoint timeout must not be negative, got %s", cfg.AlignedCheckpointTimeout))
	}
	if cfg.Interval < 0 || cfg.MaxDuration < 0 {
		errs = append(errs, fmt.Errorf("throughput: interval and duration must be positive, got %s and %s", cfg.Interval, cfg.MaxDuration))
	}
	for _, m := range cfg.Modes {
		if m != Aligned && m != Unaligned {
			errs = append(errs, fmt.Errorf("throughput: checkpoint mode %q: use %q or %q", m, Aligned, Unaligned))
		}
	}
	return errors.Join(errs...)
}

// RunBackpressure runs the backpressured pipeline with aligned and with unaligned checkpoints, alternating,
// at each network queue length, and reports the checkpoints' durations and sizes and the sinks'
// throughput, from the job's own checkpoint statistics (JobResult.CheckpointHistory).
func RunBackpressure(ctx context.Context, cfg BackpressureConfig) (*BackpressureResult, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	var all []*BackpressureResult
	for _, buffers := range cfg.BuffersPerChannel {
		res := &BackpressureResult{BuffersPerChannel: buffers, BufferSize: cfg.BufferSize, SinkRate: cfg.SinkRate, SourceRate: cfg.SinkRate * cfg.SourceFactor,
			Parallelism: cfg.Parallelism, IntervalMillis: cfg.Interval.Milliseconds(), Runs: []BackpressureRun{}}
		for round := 0; round < cfg.Runs; round++ {
			modes := slices.Clone(cfg.Modes)
			if round%2 == 1 {
				slices.Reverse(modes)
			}
			for _, mode := range modes {
				run, err := runBackpressured(ctx, cfg, mode, buffers)
				if err != nil {
					return nil, err
				}
				res.Runs = append(res.Runs, *run)
			}
		}
		res.summarize()
		all = append(all, res)
	}
	first := *all[0]
	if len(all) > 1 {
		first.Queues = all
	}
	return &first, nil
}

// summarize computes the medians and ranges of r's runs.
func (r *BackpressureResult) summarize() {
	for _, mode := range []string{Aligned, Unaligned} {
		var durations, sizes, channel, alignments []int64
		var rps []float64
		incomplete := 0
		for _, run := range r.Runs {
			if run.Mode != mode {
				continue
			}
			durations = append(durations, run.DurationsMillis...)
			sizes = append(sizes, run.StateBytes...)
			channel = append(channel, run.ChannelStateBytes...)
			alignments = append(alignments, run.AlignmentMillis...)
			rps = append(rps, run.SinkRPS)
			incomplete += run.Incomplete
		}
		if len(rps) == 0 {
			continue
		}
		var rng [2]int64
		if len(durations) > 0 {
			rng = [2]int64{slices.Min(durations), slices.Max(durations)}
		}
		if mode == Aligned {
			r.AlignedMillis, r.AlignedRangeMillis, r.AlignedCheckpoints, r.AlignedIncomplete = medianOf(durations), rng, len(durations), incomplete
			r.AlignedStateBytes, r.AlignedAlignmentMillis, r.AlignedSinkRPS = int64(medianOf(sizes)), medianOf(alignments), medianOf(rps)
			r.AlignedChannelStateBytes = int64(medianOf(channel))
		} else {
			r.UnalignedMillis, r.UnalignedRangeMillis, r.UnalignedCheckpoints, r.UnalignedIncomplete = medianOf(durations), rng, len(durations), incomplete
			r.UnalignedStateBytes, r.UnalignedAlignmentMillis, r.UnalignedSinkRPS = int64(medianOf(sizes)), medianOf(alignments), medianOf(rps)
			r.UnalignedChannelStateBytes = int64(medianOf(channel))
		}
	}
	if r.UnalignedMillis > 0 {
		r.Ratio = r.AlignedMillis / r.UnalignedMillis
	}
}

// medianOf is the median of xs (the mean of the middle two of an even count), 0 for none.
func medianOf[T int64 | float64](xs []T) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return float64(s[n/2])
	}
	return (float64(s[n/2-1]) + float64(s[n/2])) / 2
}

// runBackpressured runs the job once with mode checkpoints and buffers per channel, until it completed
// the checkpoints it needs or MaxDuration passed, and cancels it.
// backpressuredJob builds generator -> map -> keyBy -> sum -> sink on env, the sources offering
// cfg.SourceFactor times what the sink takes.
func backpressuredJob(env *runnel.Environment, cfg BackpressureConfig, sink runnel.Sink[Record]) {
	p, keys := cfg.Parallelism, uint64(cfg.Keys)
	src := runnel.FromSource(env, connector.Generator(func(s int, seq uint64) Record {
		return Record{Key: int64((seq*uint64(p) + uint64(s)) % keys), Value: int64(seq)}
	}, connector.GeneratorOptions{RatePerSubtask: cfg.SinkRate * cfg.SourceFactor})).Name("generator")
	mapped := runnel.Map(src, func(r Record) (Record, error) { r.Value++; return r, nil }).
		Name("map").WithCodec(codec.MustStruct[Record]())
	sums := runnel.Reduce(runnel.KeyBy(mapped, func(r Record) int64 { return r.Key }),
		func(acc, r Record) (Record, error) { acc.Value += r.Value; return acc, nil }).Name("sum")
	sums.SinkTo(sink).Name("sink")
}

func runBackpressured(ctx context.Context, cfg BackpressureConfig, mode string, buffers int) (*BackpressureRun, error) {
	p := cfg.Parallelism
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()
	want := int64(cfg.Warmup + cfg.Checkpoints)
	var alignedTimeout time.Duration
	if mode == Unaligned {
		alignedTimeout = cfg.AlignedCheckpointTimeout
	}
	// The progress snapshots end the run once it completed enough checkpoints; the job's final result
	// carries the statistics.
	progress := func(r *runnel.JobResult) {
		if r.Checkpoints != nil && r.Checkpoints.Completed >= want {
			cancel()
		}
	}
	opts := []runnel.Option{runnel.WithParallelism(p), runnel.WithTaskManagers(1), runnel.WithLogger(logger),
		runnel.WithBufferTimeout(100 * time.Millisecond), runnel.WithNetworkBuffersPerChannel(buffers),
		runnel.WithProgress(100*time.Millisecond, progress),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: cfg.Interval, Unaligned: mode == Unaligned,
			AlignedCheckpointTimeout: alignedTimeout,
			// A checkpoint of the aligned runs takes as long as the queues take to drain; it must not
			// expire, which would fail the job.
			Timeout: max(10*time.Minute, 2*cfg.MaxDuration)})}
	opts = append(opts, runnel.WithBufferSize(cfg.BufferSize))
	env := runnel.NewEnvironment(opts...)
	sink := &pacedSink{rate: cfg.SinkRate}
	backpressuredJob(env, cfg, sink)
	res, err := env.Execute(ctx, "backpressure-"+mode)
	end := time.Now()
	if err != nil {
		return nil, fmt.Errorf("throughput: %s checkpoints, %d buffers per channel: %w", mode, buffers, err)
	}
	if res.Status != "CANCELED" {
		return nil, fmt.Errorf("throughput: %s checkpoints: the unbounded job ended %s", mode, res.Status)
	}
	run := &BackpressureRun{Mode: mode, BuffersPerChannel: buffers, WallMillis: res.WallMillis,
		DurationsMillis: []int64{}, StateBytes: []int64{}, ChannelStateBytes: []int64{}, AlignmentMillis: []int64{}}
	if first := sink.first.Load(); first != 0 {
		if d := end.Sub(time.Unix(0, first)); d > 0 {
			run.SinkRPS = float64(sink.records.Load()) / d.Seconds()
		}
	}
	// A run that completed its checkpoints ends with the next in progress: that one is not measured. One
	// that ran out of time ends with a checkpoint that took longer than the run allowed.
	timedOut := res.Checkpoints == nil || res.Checkpoints.Completed < want
	for _, st := range res.CheckpointHistory {
		if st.ID <= int64(cfg.Warmup) {
			continue
		}
		switch st.Status {
		case "COMPLETED":
			run.DurationsMillis = append(run.DurationsMillis, st.DurationMillis)
			run.StateBytes = append(run.StateBytes, st.StateBytes)
			run.ChannelStateBytes = append(run.ChannelStateBytes, st.ChannelStateBytes)
			run.AlignmentMillis = append(run.AlignmentMillis, st.AlignmentMillis)
		case "FAILED":
			run.Failed++
		default:
			// In progress when the run was cancelled, or aborted by the cancellation.
			if timedOut {
				run.Incomplete++
			}
		}
	}
	if run.Failed > 0 {
		return nil, fmt.Errorf("throughput: %s checkpoints: %d checkpoints failed", mode, run.Failed)
	}
	return run, nil
}

// pacedSink takes rate records per second per subtask, sleeping whenever it is ahead of that pace: the
// bottleneck of the backpressured pipeline, as a sink whose writes to an external system are slow.
type pacedSink struct {
	rate    float64
	records atomic.Int64
	first   atomic.Int64 // unix nanoseconds of the first record any subtask took
	// parallelism, when set, tells the first attempts' writers from those of restarted subtasks (the
	// writers created after the first parallelism); restarted and restartedFirst are the latter's
	// records and the unix nanoseconds of their first.
	parallelism    int
	writers        atomic.Int64
	restarted      atomic.Int64
	restartedFirst atomic.Int64
}

func (s *pacedSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[Record], error) {
	n := s.writers.Add(1)
	return &pacedWriter{s: s, perRecord: time.Duration(float64(time.Second) / s.rate),
		restarted: s.parallelism > 0 && n > int64(s.parallelism)}, nil
}

// pacedCheck is how many records a paced writer takes between looks at the clock; at the default rate,
// 3 ms of them, well above the granularity of a sleep.
const pacedCheck = 64

type pacedWriter struct {
	s         *pacedSink
	perRecord time.Duration
	start     time.Time
	n         int64
	restarted bool
}

func (w *pacedWriter) Write(Record) error {
	if w.n == 0 {
		w.start = time.Now()
		w.s.first.CompareAndSwap(0, w.start.UnixNano())
		if w.restarted {
			w.s.restartedFirst.CompareAndSwap(0, w.start.UnixNano())
		}
	}
	w.n++
	if w.n%pacedCheck == 0 {
		w.s.records.Add(pacedCheck)
		if w.restarted {
			w.s.restarted.Add(pacedCheck)
		}
		if ahead := time.Duration(w.n)*w.perRecord - time.Since(w.start); ahead > 0 {
			time.Sleep(ahead)
		}
	}
	return nil
}

func (w *pacedWriter) Flush() error { return nil }

func (w *pacedWriter) Close() error { return nil }

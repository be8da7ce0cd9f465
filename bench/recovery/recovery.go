// Package recovery is Runnel's recovery benchmark: it runs one unbounded keyed job with each failover
// strategy ("full", "region", "approximate"), makes one middle subtask fail once, and measures inside the
// process how long the affected path was out, how the upstream's throughput held up during the recovery,
// how many records were lost, and how many subtasks were restarted.
//
//	generator -> map (identity) -> keyBy(key) -> check (keyed sequence checker) -> sink
//
// # The job
//
// Parallelism 4, one TaskManager (so every channel is local, as in the Flink harness's MiniCluster, which
// has no network either), chaining off so that the map is a task of its own, checkpoints every 200 ms
// (CheckpointConfig.ApproximateLocalRecovery for the approximate run), restart strategy fixed-delay with
// zero delay, network buffers flushed every 5 ms. The failure is the engine's failure injection
// "map[1]@FAIL_AFTER": map subtask 1 fails at its first record after the job ran for FAIL_AFTER.
//
// Source subtask s of P owns the keys s, s+P, s+2P, ... below the key count K (a multiple of P), m = K/P
// of them; its i-th record is {Key: s + (i%m)·P, Seq: i/m}, so every key's seq counts 0, 1, 2, ... The
// sources are rate-limited (Config.Rate over all of them), so the machine is not saturated and the
// upstream's throughput means something; a restored source rewinds to its checkpointed position and goes
// on at the same rate. Source s forwards to map s, so the path of a record, key % P, names the source and
// the map subtask it went through; the failure hits path 1.
//
// The check operator keeps per key, in keyed state (checkpointed and restored with the rest), the highest
// seq seen, the seqs skipped (lost) and the records at or below the highest seq (duplicated). It emits
// every record with its key's counters; the sink keeps the latest counters per key (of the newest attempt
// of the check subtask), which add up to the checker's loss. Under exactly-once recovery (full, region) the
// checker sees no loss; with approximate recovery its loss must equal the sum of the failovers'
// records_lost.
//
// # The after-state scenario
//
// Config.Scenario ScenarioAfterState (CLI --scenario after-state) moves the failing map behind the keyed
// state: generator -> keyBy(key) -> check -> map (identity) -> sink, check, map and sink joined by forward
// edges, so path p is check[p] -> map[p] -> sink[p]. Approximate recovery then restarts map[1] and sink[1]
// only, and check[1], whose state may be large (Config.Keys, Config.StateBytes of payload per key,
// Config.StateBackend), keeps running; full and region failover restore all of it. The checker is upstream
// of the failure here, so the sinks check instead: each keeps, per key and in checkpointed state, the
// checker's Seen count of the last record it got, and counts the records missing between two it got.
//
// # Figures
//
//   - outage_ms, recovery_ms, records_lost, records_dropped, buffers_dropped, partial_records_skipped,
//     records_replayed, duplicates_dropped (task failover),
//     restarted_subtasks (the length of "restarted"): the engine's failover report.
//   - sink_gap_ms: the outage as the sinks saw it. The sinks time every record's arrival per path, over all
//     sink subtasks and attempts; sink_gap_ms is the silence of the affected path (the time between two
//     consecutive records of path 1 at any sink) that spans the failure: the longest such silence that
//     ends after the failure and begins no later than max(20 ms, 4 buffer timeouts) after it. This is
//     what the Flink harness calls outage_ms. failure_to_recovery_ms is the part of it after the failure.
//     A silence also holds whatever stalled the path before the failure (with a large state, a
//     checkpoint), so the targets use sinks_failure_to_output_ms instead: from the failure until every
//     restarted sink subtask wrote its first record, the engine's outage_ms as the sinks see it.
//   - unaffected_paths_max_stall_ms: the longest silence of the other paths during that gap;
//     baseline_max_stall_ms: the longest silence of any path before the failure (after 500 ms of
//     warm-up), the noise floor (about the buffer timeout).
//   - upstream_throughput_ratio: the records emitted by all sources per second during
//     [failure, failure + max(outage, 200 ms)], divided by their rate in the second before the failure
//     (outage being the longer of outage_ms and failure_to_recovery_ms). The sources count what they
//     emit; a goroutine samples the counters every millisecond. Replayed records count as emitted.
//     upstream_throughput_ratio_1s is the same over the first second after the failure.
//   - The failure's time is the engine's (the failover's failed_at, when the job master learned of it), so
//     that a failure delayed by a stall of map[1] is timed where it happened.
//   - series (Result.Series): records per second over the run, in buckets of Config.SeriesBucket (5 ms)
//     with a boundary at the failure: emitted by the sources, received by the sinks, and received by the
//     sinks on the affected path. Each sink subtask counts its records per path on counters of its own;
//     the sampler reads them with the sources' into a timeline fixed at the start of the run, of
//     2·Duration/1 ms + 1024 samples of 32 bytes (417 KB for the default 6 s). Plot draws the series of
//     every strategy as an SVG image.
//   - BENCH_DEBUG=1 prints the sources' timeline and the sinks' silences around the failure to stderr.
//
// Time is measured in the process, with the monotonic clock, and nothing is allocated per record.
package recovery

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// Defaults of a run.
const (
	DefaultDuration           = 6 * time.Second
	DefaultFailAfter          = 2 * time.Second
	DefaultRate               = 200_000 // records/s over all sources: 50,000 per source subtask at parallelism 4
	DefaultParallelism        = 4
	DefaultKeys               = 1024
	DefaultCheckpointInterval = 200 * time.Millisecond
	DefaultBufferTimeout      = 5 * time.Millisecond
	DefaultTaskManagers       = 1
	DefaultSeriesBucket       = 5 * time.Millisecond // the width of Result.Series' buckets
)

// Scenarios: where the failing map sits in the job.
const (
	// ScenarioBeforeShuffle is generator -> map -> keyBy -> check -> sink: the failing map feeds every check
	// subtask, so approximate recovery restarts all of them (and their sinks), state included.
	ScenarioBeforeShuffle = "before-shuffle"
	// ScenarioAfterState is generator -> keyBy -> check -> map -> sink: the failing map is downstream of the
	// keyed state, so approximate recovery restarts map[1] and sink[1] and the state keeps running, while full
	// and region failover restore all of it.
	ScenarioAfterState = "after-state"
)

// Scenarios lists the scenarios.
var Scenarios = []string{ScenarioBeforeShuffle, ScenarioAfterState}

// FailedSubtask is the map subtask that fails, and so the affected path.
const FailedSubtask = 1

// Strategies are the failover strategies the benchmark knows, in the order it runs them by default.
var Strategies = []string{"full", "region", "approximate", "task"}

const (
	sampleInterval = time.Millisecond
	minSilence     = time.Millisecond
	warmUp         = 500 * time.Millisecond
	minWindow      = 200 * time.Millisecond
)

// Config configures a benchmark. Zero fields take the defaults, except Rate (0: unbounded sources).
type Config struct {
	// Failovers are the strategies to run, in order (default Strategies).
	Failovers []string
	// Duration of each run, from the start of the job.
	Duration time.Duration
	// FailAfter is when map[1] fails, after the start of the job.
	FailAfter time.Duration
	// Rate is the records per second over all source subtasks; 0 runs them as fast as possible (under
	// backpressure, and then the upstream ratio says little).
	Rate float64
	// Parallelism of every operator (at least 2: subtask 1 fails).
	Parallelism int
	// Keys is the number of distinct keys, a multiple of Parallelism.
	Keys int
	// CheckpointInterval is the checkpoint interval.
	CheckpointInterval time.Duration
	// Unaligned and AlignedCheckpointTimeout are runnel.CheckpointConfig's: unaligned checkpoints,
	// starting aligned for that long (0: unaligned from the start).
	Unaligned                bool
	AlignedCheckpointTimeout time.Duration
	// BufferTimeout is the network buffer timeout; it is the resolution of the sink-side timings.
	BufferTimeout time.Duration
	// TaskManagers of the in-process cluster.
	TaskManagers int
	// Scenario is ScenarioBeforeShuffle (default) or ScenarioAfterState.
	Scenario string
	// StateBytes adds a payload of this many bytes to every key's state in the check operator, to make the
	// keyed state as large as a job's with real per-key data (0: the counters only, 32 bytes).
	StateBytes int
	// StateBackend is the keyed state backend, "memory" (default) or "pebble".
	StateBackend string
	// SeriesBucket is the width of the buckets of Result.Series (default DefaultSeriesBucket; at least the
	// millisecond at which the counters are sampled, a multiple of it).
	SeriesBucket time.Duration
	// Logger is the engine's logger (default: warnings and errors to stderr).
	Logger *slog.Logger
}

func (c *Config) defaults() error {
	if len(c.Failovers) == 0 {
		c.Failovers = Strategies
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.FailAfter == 0 {
		c.FailAfter = DefaultFailAfter
	}
	if c.Parallelism == 0 {
		c.Parallelism = DefaultParallelism
	}
	if c.Keys == 0 {
		c.Keys = DefaultKeys
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	if c.BufferTimeout == 0 {
		c.BufferTimeout = DefaultBufferTimeout
	}
	if c.TaskManagers == 0 {
		c.TaskManagers = DefaultTaskManagers
	}
	if c.Scenario == "" {
		c.Scenario = ScenarioBeforeShuffle
	}
	if c.StateBackend == "" {
		c.StateBackend = "memory"
	}
	if c.SeriesBucket == 0 {
		c.SeriesBucket = DefaultSeriesBucket
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	var errs []error
	for _, f := range c.Failovers {
		if !slices.Contains(Strategies, f) {
			errs = append(errs, fmt.Errorf("unknown failover strategy %q: use %s", f, strings.Join(Strategies, ", ")))
		}
	}
	if c.Parallelism < 2 {
		errs = append(errs, fmt.Errorf("parallelism must be at least 2 (map subtask %d fails), got %d", FailedSubtask, c.Parallelism))
	}
	if c.Keys < c.Parallelism || c.Keys%c.Parallelism != 0 {
		errs = append(errs, fmt.Errorf("keys must be a positive multiple of the parallelism %d, got %d", c.Parallelism, c.Keys))
	}
	if c.Rate < 0 {
		errs = append(errs, fmt.Errorf("rate must not be negative, got %v", c.Rate))
	}
	if !slices.Contains(Scenarios, c.Scenario) {
		errs = append(errs, fmt.Errorf("unknown scenario %q: use %s", c.Scenario, strings.Join(Scenarios, " or ")))
	}
	if c.StateBytes < 0 {
		errs = append(errs, fmt.Errorf("state bytes must not be negative, got %d", c.StateBytes))
	}
	if c.AlignedCheckpointTimeout < 0 || (c.AlignedCheckpointTimeout > 0 && !c.Unaligned) {
		errs = append(errs, fmt.Errorf("aligned checkpoint timeout %s: must not be negative, and needs unaligned checkpoints", c.AlignedCheckpointTimeout))
	}
	if c.Duration < 0 || c.FailAfter < 0 || c.CheckpointInterval < 0 || c.TaskManagers < 0 {
		errs = append(errs, errors.New("durations and counts must not be negative"))
	}
	if c.SeriesBucket < sampleInterval || c.SeriesBucket%sampleInterval != 0 {
		errs = append(errs, fmt.Errorf("series bucket must be a positive multiple of the %s sample interval, got %s", sampleInterval, c.SeriesBucket))
	}
	if c.FailAfter >= c.Duration {
		errs = append(errs, fmt.Errorf("fail-after %s must be shorter than the duration %s", c.FailAfter, c.Duration))
	}
	return errors.Join(errs...)
}

// Result holds the figures of one run. Field names follow the Flink harness (bench/flink) where the figure
// is the same; times are milliseconds.
type Result struct {
	Engine               string `json:"engine"`
	Job                  string `json:"job"`
	Scenario             string `json:"scenario"`
	StateBytesPerKey     int    `json:"state_bytes_per_key"`
	StateBackend         string `json:"state_backend"`
	Failover             string `json:"failover"`
	Parallelism          int    `json:"parallelism"`
	Keys                 int    `json:"keys"`
	SourceRateRPS        int64  `json:"source_rate_rps"`
	CheckpointIntervalMS int64  `json:"checkpoint_interval_ms"`
	// UnalignedCheckpoints and AlignedCheckpointTimeoutMS are the run's Config.Unaligned and
	// Config.AlignedCheckpointTimeout.
	UnalignedCheckpoints       bool    `json:"unaligned_checkpoints"`
	AlignedCheckpointTimeoutMS int64   `json:"aligned_checkpoint_timeout_ms"`
	BufferTimeoutMS            int64   `json:"buffer_timeout_ms"`
	FailAfterMS                int64   `json:"fail_after_ms"`
	DurationMS                 int64   `json:"duration_ms"`
	TaskManagers               int     `json:"task_managers"`
	JobStatus                  string  `json:"job_status"`
	Failovers                  int     `json:"failovers"`
	Failed                     string  `json:"failed"`
	OutageMS                   int64   `json:"outage_ms"`
	RecoveryMS                 int64   `json:"recovery_ms"`
	SinkGapMS                  float64 `json:"sink_gap_ms"`
	OutageRecovered            bool    `json:"outage_recovered"`
	FailureToRecoveryMS        float64 `json:"failure_to_recovery_ms"`
	// SinksFailureToOutputMS runs from the failure until every restarted sink subtask wrote a record again
	// (the engine's outage_ms as the sinks see it; 0 when none wrote one).
	SinksFailureToOutputMS float64 `json:"sinks_failure_to_output_ms"`
	UnaffectedMaxStallMS   float64 `json:"unaffected_paths_max_stall_ms"`
	BaselineMaxStallMS     float64 `json:"baseline_max_stall_ms"`
	SourceRPSBefore        int64   `json:"source_rps_before"`
	SourceRPSDuring        int64   `json:"source_rps_during_recovery"`
	UpstreamRatio          float64 `json:"upstream_throughput_ratio"`
	UpstreamRatio1s        float64 `json:"upstream_throughput_ratio_1s"`
	RecordsLost            uint64  `json:"records_lost"`
	RecordsDropped         uint64  `json:"records_dropped"`
	BuffersDropped         uint64  `json:"buffers_dropped"`
	PartialRecordsSkipped  uint64  `json:"partial_records_skipped"`
	// RecordsReplayed and DuplicatesDropped are task failover's (FailoverResult).
	RecordsReplayed    uint64 `json:"records_replayed"`
	DuplicatesDropped  uint64 `json:"duplicates_dropped"`
	CheckerRecordsLost int64  `json:"checker_records_lost"`
	RecordsDuplicated  int64  `json:"records_duplicated"`
	KeysChecked        int    `json:"keys_checked"`
	// RecordsChecked is the number of records in the checker's state at the end (restored ones included,
	// records processed by an attempt whose state was rolled back not).
	RecordsChecked    int64    `json:"records_checked"`
	RestartedSubtasks int      `json:"restarted_subtasks"`
	Restarted         []string `json:"restarted"`
	// SubtasksWithNewAttempt counts the subtasks whose attempt number is above 0 at the end: the restarts
	// as the attempt numbers tell them, to compare with RestartedSubtasks.
	SubtasksWithNewAttempt int      `json:"subtasks_with_new_attempt"`
	Subtasks               int      `json:"subtasks"`
	CheckpointRestored     *int64   `json:"checkpoint_restored"`
	CheckpointsCompleted   int64    `json:"checkpoints_completed"`
	RunMS                  float64  `json:"run_ms"`
	SilencesDropped        int64    `json:"silences_dropped,omitempty"`
	LoadAvg1m              *float64 `json:"load_avg_1m,omitempty"`
	Cores                  int      `json:"cores"`
	// Series is the throughput over the run, with time relative to the failure (nil when no source
	// emitted).
	Series *Series `json:"series,omitempty"`
}

// Series is a run's throughput over time: records per second in consecutive buckets of BucketMS, the first
// starting StartMS after the failure (negative: before it), so that a bucket boundary falls on the
// failure. It covers the run from the sources' first record to the last sample of the counters, in at most
// 2·Duration/1 ms + 1024 buckets (the bound of the sampler's timeline).
type Series struct {
	BucketMS int64   `json:"bucket_ms"`
	StartMS  float64 `json:"start_ms"`
	// SourcesRPS are the records all sources emitted (replays after a rewind included).
	SourcesRPS []int64 `json:"sources_rps"`
	// SinksRPS are the records all sinks received, over all their attempts.
	SinksRPS []int64 `json:"sinks_rps"`
	// SinksAffectedRPS are the records of the affected path (through map[1]) the sinks received.
	SinksAffectedRPS []int64 `json:"sinks_affected_path_rps"`
}

// Run runs the job once per strategy of cfg.Failovers, one after the other.
func Run(ctx context.Context, cfg Config) ([]*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, fmt.Errorf("recovery bench: %w", configError{err})
	}
	var out []*Result
	for _, f := range cfg.Failovers {
		r, err := runOne(ctx, cfg, f)
		if err != nil {
			return out, fmt.Errorf("recovery bench, failover %s: %w", f, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Record is a generated record: the Seq-th record of key Key.
type Record struct {
	Key, Seq int64
}

// Checked is what the check operator emits for every record: the record and its key's counters.
type Checked struct {
	Key, Seq   int64
	Lost       int64 // seqs skipped so far
	Duplicated int64 // records at or below the highest seq so far
	Seen       int64 // records of the key in the checker's state
	Attempt    int64 // attempt of the check subtask
	Path       int64 // the map subtask the record goes through
}

// KeyState is the check operator's keyed state. Payload stands for a key's real data (a profile, a
// window's contents): written once per key and carried, it makes the state as large as Config.StateBytes
// says.
type KeyState struct {
	Last, Lost, Duplicated, Seen int64
	Payload                      []byte
}

// probes are the instruments of one run, shared by every subtask and attempt.
type probes struct {
	p        int
	emitted  []counter // per source subtask
	arrivals *silences

	mu     sync.Mutex
	latest []Checked // per key, the newest counters the sinks got
	seen   []bool

	// sinkLost is, per sink subtask, the records its newest attempt found missing (ScenarioAfterState).
	sinkLost []counter
	// restartedOutput is, per sink subtask, when its newest restarted attempt wrote its first record (ns
	// since the epoch; 0 before that).
	restartedOutput []counter
	// received counts, per sink subtask and path, the records the sinks got (all attempts):
	// received[subtask*p+path]. One counter per pair, so that no two sink subtasks add to the same one.
	received []counter
}

func newProbes(epoch time.Time, p, keys, silencesCapacity int) *probes {
	return &probes{p: p, emitted: make([]counter, p),
		arrivals: newSilences(epoch, p, minSilence, silencesCapacity),
		latest:   make([]Checked, keys), seen: make([]bool, keys), sinkLost: make([]counter, p),
		restartedOutput: make([]counter, p), received: make([]counter, p*p)}
}

func runOne(ctx context.Context, cfg Config, strategy string) (*Result, error) {
	p, keys := cfg.Parallelism, cfg.Keys
	epoch := time.Now()
	// Silences of one path do not overlap and last at least minSilence, so this many cannot overflow
	// (with some slack for the end of the run, which comes a little after Duration).
	capacity := p*int(cfg.Duration/minSilence)*11/10 + 1024
	pr := newProbes(epoch, p, keys, capacity)

	cc := runnel.CheckpointConfig{Interval: cfg.CheckpointInterval, Unaligned: cfg.Unaligned, AlignedCheckpointTimeout: cfg.AlignedCheckpointTimeout}
	opts := []runnel.Option{
		runnel.WithParallelism(p), runnel.WithTaskManagers(cfg.TaskManagers), runnel.WithChaining(false),
		runnel.WithBufferTimeout(cfg.BufferTimeout), runnel.WithLogger(cfg.Logger),
		runnel.WithRestartStrategy("fixed-delay:attempts=10,delay=0s"),
		runnel.WithFailureInjection(fmt.Sprintf("map[%d]@%s", FailedSubtask, cfg.FailAfter)),
		runnel.WithStateBackend(cfg.StateBackend),
	}
	if strategy == "approximate" {
		cc.ApproximateLocalRecovery = true
	} else {
		opts = append(opts, runnel.WithFailover(strategy))
	}
	opts = append(opts, runnel.WithCheckpointing(cc))
	env := runnel.NewEnvironment(opts...)
	build(env, pr, cfg)

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	smp := startSampler(epoch, pr.emitted, pr.received, p, sampleInterval, samplesCapacity(cfg.Duration))
	start := int64(time.Since(epoch))
	res, err := env.Execute(runCtx, "recovery-"+strategy)
	end := int64(time.Since(epoch))
	samples := smp.finish()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return analyse(cfg, strategy, pr, res, samples, epoch, start, end)
}

// build adds the job of the scenario to env.
func build(env *runnel.Environment, pr *probes, cfg Config) {
	p, m := cfg.Parallelism, cfg.Keys/cfg.Parallelism
	rc, cc := codec.MustStruct[Record](), codec.MustStruct[Checked]()
	gen := func(s int, i uint64) Record {
		pr.emitted[s].Add(1)
		return Record{Key: int64(s) + int64(i%uint64(m))*int64(p), Seq: int64(i / uint64(m))}
	}
	src := runnel.FromSource(env, connector.Generator(gen, connector.GeneratorOptions{RatePerSubtask: cfg.Rate / float64(p)})).Name("generator").WithCodec(rc)
	newCheck := func(byKey bool) func() runnel.KeyedProcessFunction[int64, Record, Checked] {
		return func() runnel.KeyedProcessFunction[int64, Record, Checked] {
			return &check{pathByKey: byKey, p: int64(p), payload: cfg.StateBytes}
		}
	}
	if cfg.Scenario == ScenarioAfterState {
		checked := runnel.Process(runnel.KeyBy(src, func(r Record) int64 { return r.Key }), newCheck(false)).Name("check").WithCodec(cc)
		mapped := runnel.Map(checked.Forward(), func(c Checked) (Checked, error) { return c, nil }).Name("map").WithCodec(cc)
		mapped.Forward().SinkTo(&timingSink{pr: pr, gaps: true}).Name("sink")
		return
	}
	mapped := runnel.Map(src.Forward(), func(r Record) (Record, error) { return r, nil }).Name("map").WithCodec(rc)
	checked := runnel.Process(runnel.KeyBy(mapped, func(r Record) int64 { return r.Key }), newCheck(true)).Name("check").WithCodec(cc)
	checked.SinkTo(&timingSink{pr: pr}).Name("sink")
}

// check is the keyed sequence checker.
type check struct {
	runnel.KeyedProcessBase[int64, Checked]
	state     runnel.ValueState[KeyState]
	attempt   int64
	pathByKey bool  // the path is key % p (the generator and map the key went through), else this subtask
	p         int64 // parallelism
	subtask   int64
	payload   int // bytes of payload per key
}

func (c *check) Open(ctx runnel.KeyedContext[int64]) error {
	c.attempt = int64(ctx.Attempt())
	c.subtask = int64(ctx.SubtaskIndex())
	var err error
	c.state, err = runnel.NewValueState(ctx, "seq", codec.MustStruct[KeyState]())
	return err
}

func (c *check) ProcessElement(_ runnel.KeyedContext[int64], r Record, out runnel.Collector[Checked]) error {
	s, ok := c.state.Value()
	if !ok {
		s = KeyState{Last: -1}
		if c.payload > 0 {
			s.Payload = make([]byte, c.payload)
			for i := range s.Payload {
				s.Payload[i] = byte(r.Key) + byte(i)
			}
		}
	}
	s.Seen++
	switch {
	case r.Seq == s.Last+1:
		s.Last = r.Seq
	case r.Seq > s.Last+1:
		s.Lost += r.Seq - s.Last - 1
		s.Last = r.Seq
	default:
		s.Duplicated++
	}
	c.state.Update(s)
	path := c.subtask
	if c.pathByKey {
		path = r.Key % c.p
	}
	out.Collect(Checked{Key: r.Key, Seq: r.Seq, Lost: s.Lost, Duplicated: s.Duplicated, Seen: s.Seen, Attempt: c.attempt, Path: path})
	return nil
}

// newer reports whether a replaces b as a key's latest counters: a later attempt of the check subtask, or
// the same attempt with at least as many records in its state.
func newer(a, b Checked) bool {
	if a.Attempt != b.Attempt {
		return a.Attempt > b.Attempt
	}
	return a.Seen >= b.Seen
}

// timingSink times the arrival of every record per path and keeps the latest counters per key. With gaps
// (ScenarioAfterState, where the checker is upstream of the failure) it is also a checker: it keeps per key
// the checker's Seen count of the last record it got, in checkpointed state, and counts the records
// missing between two it got (exact for every key that gets a record after the failure).
type timingSink struct {
	pr   *probes
	gaps bool
}

func (s *timingSink) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[Checked], error) {
	k := len(s.pr.latest)
	p, i := s.pr.p, ctx.SubtaskIndex()
	w := &timingWriter{pr: s.pr, latest: make([]Checked, k), seen: make([]bool, k), isDirty: make([]bool, k),
		received: s.pr.received[i*p : (i+1)*p]}
	if ctx.Attempt() > 0 {
		w.firstOutput = &s.pr.restartedOutput[ctx.SubtaskIndex()]
		w.firstOutput.Store(0)
	}
	if !s.gaps {
		return w, nil
	}
	g := &gapWriter{timingWriter: w, lastSeen: make(map[int64]int64), lost: &s.pr.sinkLost[ctx.SubtaskIndex()]}
	g.lost.Store(0)
	return g, nil
}

// gapWriter is the timing writer of ScenarioAfterState.
type gapWriter struct {
	*timingWriter
	lastSeen map[int64]int64 // key -> Seen of its last record
	gapLost  int64
	lost     *counter // published: gapLost of the newest attempt
}

func (g *gapWriter) Write(c Checked) error {
	if last, ok := g.lastSeen[c.Key]; ok && c.Seen > last+1 {
		g.gapLost += c.Seen - last - 1
		g.lost.Store(g.gapLost)
	}
	g.lastSeen[c.Key] = c.Seen
	return g.timingWriter.Write(c)
}

// SnapshotState implements runnel.CheckpointedWriter: the records found missing, then key/seen pairs.
func (g *gapWriter) SnapshotState(int64) ([]byte, error) {
	b := binary.AppendVarint(nil, g.gapLost)
	for k, v := range g.lastSeen {
		b = binary.AppendVarint(b, k)
		b = binary.AppendVarint(b, v)
	}
	return b, nil
}

// RestoreState implements runnel.CheckpointedWriter.
func (g *gapWriter) RestoreState(b []byte) error {
	lost, n := binary.Varint(b)
	if n <= 0 {
		return errors.New("sink: bad state")
	}
	b = b[n:]
	for len(b) > 0 {
		k, n1 := binary.Varint(b)
		if n1 <= 0 {
			return errors.New("sink: bad state")
		}
		v, n2 := binary.Varint(b[n1:])
		if n2 <= 0 {
			return errors.New("sink: bad state")
		}
		g.lastSeen[k] = v
		b = b[n1+n2:]
	}
	g.gapLost = lost
	g.lost.Store(lost)
	return nil
}

// publishEvery is how many records a sink writer takes between two publications of its counters.
const publishEvery = 8192

type timingWriter struct {
	pr     *probes
	latest []Checked
	seen   []bool
	n      int
	// dirty lists the keys updated since the last publication (marked in isDirty), so that publishing
	// costs what changed, not the number of keys: with many keys a full scan under the probes' lock
	// stalled every sink.
	dirty   []int64
	isDirty []bool
	// firstOutput, for a writer of a restarted sink attempt until it wrote its first record, is where it
	// notes when it did.
	firstOutput *counter
	received    []counter // per path, this sink subtask's records
}

func (w *timingWriter) Write(c Checked) error {
	w.pr.arrivals.observe(int(c.Path))
	w.received[c.Path].Add(1)
	if w.firstOutput != nil {
		w.firstOutput.Store(int64(time.Since(w.pr.arrivals.epoch)))
		w.firstOutput = nil
	}
	if k := c.Key; k >= 0 && k < int64(len(w.latest)) && (!w.seen[k] || newer(c, w.latest[k])) {
		w.latest[k], w.seen[k] = c, true
		if !w.isDirty[k] {
			w.isDirty[k] = true
			w.dirty = append(w.dirty, k)
		}
	}
	if w.n++; w.n >= publishEvery {
		w.publish()
	}
	return nil
}

func (w *timingWriter) publish() {
	w.n = 0
	w.pr.mu.Lock()
	defer w.pr.mu.Unlock()
	for _, k := range w.dirty {
		w.isDirty[k] = false
		if c := w.latest[k]; !w.pr.seen[k] || newer(c, w.pr.latest[k]) {
			w.pr.latest[k], w.pr.seen[k] = c, true
		}
	}
	w.dirty = w.dirty[:0]
}

func (w *timingWriter) Flush() error { w.publish(); return nil }
func (w *timingWriter) Close() error { w.publish(); return nil }

// analyse turns the probes and the job result into the figures.
func analyse(cfg Config, strategy string, pr *probes, res *runnel.JobResult, samples []sample, epoch time.Time, start, end int64) (*Result, error) {
	r := &Result{
		Engine: "runnel", Job: "recovery", Failover: strategy, Parallelism: cfg.Parallelism, Keys: cfg.Keys,
		Scenario: cfg.Scenario, StateBytesPerKey: cfg.StateBytes, StateBackend: cfg.StateBackend,
		SourceRateRPS: int64(cfg.Rate), CheckpointIntervalMS: cfg.CheckpointInterval.Milliseconds(),
		UnalignedCheckpoints: cfg.Unaligned, AlignedCheckpointTimeoutMS: cfg.AlignedCheckpointTimeout.Milliseconds(),
		BufferTimeoutMS: cfg.BufferTimeout.Milliseconds(), FailAfterMS: cfg.FailAfter.Milliseconds(),
		DurationMS: cfg.Duration.Milliseconds(), TaskManagers: cfg.TaskManagers, JobStatus: res.Status,
		Failovers: len(res.Failovers), Restarted: []string{}, LoadAvg1m: loadAvg(), Cores: runtime.NumCPU(),
	}
	if res.Checkpoints != nil {
		r.CheckpointsCompleted = res.Checkpoints.Completed
	}
	for _, v := range res.Vertices {
		for _, st := range v.Subtasks {
			r.Subtasks++
			if st.Attempt > 0 {
				r.SubtasksWithNewAttempt++
			}
		}
	}
	if len(res.Failovers) == 0 {
		return nil, fmt.Errorf("no failover happened (job %s after %s): the injected failure map[%d]@%s did not fire",
			res.Status, time.Duration(end-start).Round(time.Millisecond), FailedSubtask, cfg.FailAfter)
	}
	f := res.Failovers[0]
	r.Failed, r.OutageMS, r.RecoveryMS, r.CheckpointRestored = f.Failed, f.OutageMillis, f.RecoveryMillis, f.CheckpointRestored
	for _, f := range res.Failovers {
		r.RecordsLost += f.RecordsLost
		r.RecordsDropped += f.RecordsDropped
		r.BuffersDropped += f.BuffersDropped
		r.PartialRecordsSkipped += f.PartialRecordsSkipped
		r.RecordsReplayed += f.RecordsReplayed
		r.DuplicatesDropped += f.DuplicatesDropped
		r.RestartedSubtasks += len(f.Restarted)
		r.Restarted = append(r.Restarted, f.Restarted...)
	}

	pr.mu.Lock()
	for k, c := range pr.latest {
		if pr.seen[k] {
			r.KeysChecked++
			r.CheckerRecordsLost += c.Lost
			r.RecordsDuplicated += c.Duplicated
			r.RecordsChecked += c.Seen
		}
	}
	pr.mu.Unlock()
	for i := range pr.sinkLost {
		r.CheckerRecordsLost += pr.sinkLost[i].Load()
	}

	arrivals := pr.arrivals.finish(end)
	r.SilencesDropped = pr.arrivals.dropped.Load()
	first := firstEmission(samples)
	if first >= 0 {
		r.RunMS = ms(end - first)
	}

	// The failure: the engine reports when it learned of it. Without that, it is the arming of the
	// injection, FailAfter after Execute set its timer (after starting the cluster, before deploying the
	// sources): the failure fires at map[1]'s next record, about a millisecond later unless map[1] stalls.
	failAt := start + int64(cfg.FailAfter)
	if !f.FailedAt.IsZero() {
		// The engine's own time of the failure: when map[1] is stalled as the injection is armed (a
		// checkpoint of a large state, say), the failure comes later than FailAfter.
		failAt = int64(f.FailedAt.Sub(epoch))
	}

	// The affected path's outage at the sinks: its longest silence that ends after the failure and starts
	// at most a few buffer timeouts after it (records already in flight may still arrive).
	outageEnd := failAt
	slack := max(4*int64(cfg.BufferTimeout), int64(20*time.Millisecond))
	if s, ok := longest(arrivals, func(s silence) bool {
		return s.path == FailedSubtask && s.to > failAt && s.from <= failAt+slack
	}); ok {
		r.SinkGapMS, r.OutageRecovered, r.FailureToRecoveryMS = ms(s.length()), !s.open, ms(s.to-failAt)
		outageEnd = s.to
	}
	var lastFirst int64
	for i := range pr.restartedOutput {
		lastFirst = max(lastFirst, pr.restartedOutput[i].Load())
	}
	if lastFirst > failAt {
		r.SinksFailureToOutputMS = ms(lastFirst - failAt)
	}
	if s, ok := longest(arrivals, func(s silence) bool {
		return s.path != FailedSubtask && s.to > failAt && s.from < outageEnd
	}); ok {
		r.UnaffectedMaxStallMS = ms(s.length())
	}
	if first >= 0 {
		if s, ok := longest(arrivals, func(s silence) bool { return s.from >= first+int64(warmUp) && s.to <= failAt }); ok {
			r.BaselineMaxStallMS = ms(s.length())
		}
	}
	if os.Getenv("BENCH_DEBUG") != "" {
		debugTimeline(os.Stderr, strategy, samples, arrivals, start, failAt, outageEnd)
	}

	r.Series = series(samples, first, failAt, cfg.SeriesBucket, samplesCapacity(cfg.Duration))

	// Upstream throughput: the second before the failure against the outage window after it.
	if first >= 0 && len(samples) > 0 {
		lastSample := samples[len(samples)-1].t
		from := max(failAt-int64(time.Second), first)
		atFail := emittedAt(samples, failAt)
		if failAt > from {
			before := (atFail - emittedAt(samples, from)) / secs(failAt-from)
			window := max(int64(r.OutageMS)*int64(time.Millisecond), outageEnd-failAt, int64(minWindow))
			to := min(failAt+window, lastSample)
			r.SourceRPSBefore = int64(before)
			if to > failAt && before > 0 {
				during := (emittedAt(samples, to) - atFail) / secs(to-failAt)
				r.SourceRPSDuring = int64(during)
				r.UpstreamRatio = round3(during / before)
			}
			if failAt+int64(time.Second) <= lastSample && before > 0 {
				r.UpstreamRatio1s = round3((emittedAt(samples, failAt+int64(time.Second)) - atFail) / before)
			}
		}
	}
	return r, nil
}

// longest returns the longest silence that satisfies ok.
func longest(ss []silence, ok func(silence) bool) (silence, bool) {
	var best silence
	found := false
	for _, s := range ss {
		if ok(s) && (!found || s.length() > best.length()) {
			best, found = s, true
		}
	}
	return best, found
}

// samplesCapacity is the sampler's timeline for a run of d: room for twice its length.
func samplesCapacity(d time.Duration) int { return int(d/sampleInterval)*2 + 1024 }

// series buckets the sampled counters around the failure at failAt (ns since the epoch), from the first
// emission to the last sample, in at most maxBuckets buckets.
func series(samples []sample, first, failAt int64, bucket time.Duration, maxBuckets int) *Series {
	if first < 0 || len(samples) == 0 || bucket <= 0 {
		return nil
	}
	b := int64(bucket)
	last := samples[len(samples)-1].t
	// The first boundary at or after the first emission, a whole number of buckets from the failure.
	from := failAt - (failAt-first)/b*b
	if first > failAt {
		from = failAt + (first-failAt+b-1)/b*b
	}
	n := int((last - from) / b)
	n = min(n, maxBuckets)
	if n <= 0 {
		return nil
	}
	s := &Series{BucketMS: bucket.Milliseconds(), StartMS: ms(from - failAt),
		SourcesRPS: make([]int64, n), SinksRPS: make([]int64, n), SinksAffectedRPS: make([]int64, n)}
	rate := func(of func(sample) int64, i int) int64 {
		t := from + int64(i)*b
		return int64(math.Round((countAt(samples, t+b, of) - countAt(samples, t, of)) / secs(b)))
	}
	for i := range n {
		s.SourcesRPS[i] = rate(func(x sample) int64 { return x.n }, i)
		s.SinksRPS[i] = rate(func(x sample) int64 { return x.sunk }, i)
		s.SinksAffectedRPS[i] = rate(func(x sample) int64 { return x.sunkPath }, i)
	}
	return s
}

func ms(ns int64) float64      { return float64(ns/10_000) / 100 }
func secs(ns int64) float64    { return float64(ns) / 1e9 }
func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// loadAvg returns the 1-minute load average, or nil where there is none to read.
func loadAvg() *float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return nil
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return nil
	}
	return &v
}

// debugTimeline prints, with BENCH_DEBUG set, the sources' emitted counts and the sinks' silences of at
// least 3 ms around the failure (times in ms since the job started).
func debugTimeline(w io.Writer, strategy string, samples []sample, arrivals []silence, start, failAt, outageEnd int64) {
	rel := func(t int64) float64 { return ms(t - start) }
	fmt.Fprintf(w, "[%s] sources started at %.2f ms, failure at %.2f ms, affected path silent at the sinks until %.2f ms\n",
		strategy, rel(firstEmission(samples)), rel(failAt), rel(outageEnd))
	from, to := failAt-int64(50*time.Millisecond), outageEnd+int64(100*time.Millisecond)
	for _, s := range samples {
		if s.t >= from && s.t <= to {
			fmt.Fprintf(w, "[%s]   t=%8.2f emitted=%d\n", strategy, rel(s.t), s.n)
		}
	}
	for _, s := range arrivals {
		if s.length() >= int64(3*time.Millisecond) && s.to >= from && s.from <= to {
			fmt.Fprintf(w, "[%s]   sink path %d silent %8.2f .. %8.2f (%.2f ms)\n", strategy, s.path, rel(s.from), rel(s.to), ms(s.length()))
		}
	}
}

// ErrConfig is what the errors of Run caused by a mistake in its Config (found before anything runs) match
// with errors.Is; a command reports them as usage errors.
var ErrConfig = errors.New("invalid recovery bench configuration")

type configError struct{ err error }

func (e configError) Error() string        { return e.err.Error() }
func (e configError) Unwrap() error        { return e.err }
func (e configError) Is(target error) bool { return target == ErrConfig }

// Package throughput is Runnel's standard throughput benchmark: the pipeline
//
//	generator -> map (value+1) -> keyBy(key) -> reduce (sum) -> discard sink
//
// at parallelism 2 with one network shuffle (the keyBy) over local channels, run by the engine and by a
// hand-written Go baseline doing the same work in the same process (goroutines and channels carrying
// batches of records), and their throughputs compared.
//
// Subtask s of P emits seq = 0, 1, 2, ... as records {Key: (seq*P+s) % keys, Value: seq}.
package throughput

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// Record is the benchmark's record.
type Record struct {
	Key, Value int64
}

// Config configures a run.
type Config struct {
	Records     uint64 // records in total
	Keys        int64  // distinct keys
	Parallelism int    // generator and reducer instances (default 2)
	// Verify captures the final per-key sums of both runs and compares their checksums. It replaces the
	// engine's discard sink by a capturing one, so it is for tests, not for measuring.
	Verify bool
	// Logger is the engine's logger (default: warnings and errors to stderr).
	Logger *slog.Logger
	// Runs is the number of engine and baseline runs, alternated so that both see the same machine
	// weather; the medians are reported (default 3).
	Runs int
	// CheckpointInterval turns on checkpoints in the engine run (0: off).
	CheckpointInterval time.Duration
	// Unaligned and AlignedCheckpointTimeout are the checkpoints' runnel.CheckpointConfig fields.
	Unaligned                bool
	AlignedCheckpointTimeout time.Duration
	// Failover is the engine run's failover strategy ("": the default, region).
	Failover string
	// InflightLogMemory is the TaskManager's memory for task failover's in-flight logs (0: the default).
	InflightLogMemory int64
	// options are added to the engine run's options.
	options []runnel.Option
}

// CheckpointResult compares the engine with and without checkpoints.
type CheckpointResult struct {
	EngineRPS       float64 `json:"engine_rps"`
	CheckpointedRPS float64 `json:"checkpointed_rps"`
	Ratio           float64 `json:"ratio"`
	IntervalMillis  int64   `json:"checkpoint_interval_ms"`
	Checkpoints     int64   `json:"checkpoints_completed"`
	// Unaligned says the checkpoints were unaligned (Config.Unaligned).
	Unaligned bool `json:"unaligned_checkpoints"`
}

// overheadConfig gives an overhead comparison its defaults (parallelism 2, 3 runs of each side) and checks
// its checkpoint interval.
func overheadConfig(cfg Config, interval time.Duration) (Config, error) {
	if cfg.Parallelism == 0 {
		cfg.Parallelism = 2
	}
	if cfg.Runs <= 0 {
		cfg.Runs = 3
	}
	if interval <= 0 {
		return cfg, fmt.Errorf("throughput: checkpoint interval must be positive, got %s", interval)
	}
	return cfg, nil
}

// RunCheckpointOverhead runs the standard pipeline without and with checkpoints every interval,
// alternating, and compares the medians.
func RunCheckpointOverhead(ctx context.Context, cfg Config, interval time.Duration) (*CheckpointResult, error) {
	cfg, err := overheadConfig(cfg, interval)
	if err != nil {
		return nil, err
	}
	res := &CheckpointResult{IntervalMillis: interval.Milliseconds(), Unaligned: cfg.Unaligned}
	var plain, checked []time.Duration
	for i := 0; i < cfg.Runs; i++ {
		c := cfg
		c.CheckpointInterval = 0
		t, _, _, err := runEngine(ctx, c)
		if err != nil {
			return nil, err
		}
		plain = append(plain, t)
		c.CheckpointInterval = interval
		t, _, _, err = runEngine(ctx, c)
		if err != nil {
			return nil, err
		}
		checked = append(checked, t)
	}
	res.EngineRPS = float64(cfg.Records) / median(plain).Seconds()
	res.CheckpointedRPS = float64(cfg.Records) / median(checked).Seconds()
	res.Ratio = res.CheckpointedRPS / res.EngineRPS
	res.Checkpoints = lastCheckpoints.Load()
	return res, nil
}

// FailoverResult compares the checkpointed pipeline under a failover strategy with the same pipeline under
// region failover, at the same checkpoint interval: what the strategy costs while nothing fails (task
// failover's in-flight logs and determinants, docs/taskfailover.md).
type FailoverResult struct {
	Failover       string  `json:"failover"`
	RegionRPS      float64 `json:"region_rps"`
	StrategyRPS    float64 `json:"strategy_rps"`
	Ratio          float64 `json:"ratio"`
	IntervalMillis int64   `json:"checkpoint_interval_ms"`
	// Unaligned says the checkpoints were unaligned (Config.Unaligned).
	Unaligned bool `json:"unaligned_checkpoints"`
}

// RunFailoverOverhead runs the checkpointed standard pipeline under region failover and under strategy,
// alternating, and compares the medians.
func RunFailoverOverhead(ctx context.Context, cfg Config, interval time.Duration, strategy string) (*FailoverResult, error) {
	cfg, err := overheadConfig(cfg, interval)
	if err != nil {
		return nil, err
	}
	var region, other []time.Duration
	for i := 0; i < cfg.Runs; i++ {
		c := cfg
		c.CheckpointInterval = interval
		c.Failover = "region"
		t, _, _, err := runEngine(ctx, c)
		if err != nil {
			return nil, err
		}
		region = append(region, t)
		c.Failover = strategy
		if t, _, _, err = runEngine(ctx, c); err != nil {
			return nil, err
		}
		other = append(other, t)
	}
	res := &FailoverResult{Failover: strategy, IntervalMillis: interval.Milliseconds(), Unaligned: cfg.Unaligned,
		RegionRPS: float64(cfg.Records) / median(region).Seconds(), StrategyRPS: float64(cfg.Records) / median(other).Seconds()}
	res.Ratio = res.StrategyRPS / res.RegionRPS
	return res, nil
}

// lastCheckpoints is the number of checkpoints the last checkpointed engine run completed.
var lastCheckpoints atomic.Int64

// Result holds the figures of a run.
type Result struct {
	EngineRPS       float64 `json:"engine_rps"`
	BaselineRPS     float64 `json:"baseline_rps"`
	Ratio           float64 `json:"ratio"`
	AllocsPerRecord float64 `json:"allocs_per_record"`

	EngineTime       time.Duration `json:"-"`
	BaselineTime     time.Duration `json:"-"`
	EngineChecksum   uint64        `json:"-"` // with Verify
	BaselineChecksum uint64        `json:"-"`
}

// Run runs the engine and then the baseline.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Parallelism == 0 {
		cfg.Parallelism = 2
	}
	if cfg.Records == 0 {
		return nil, errors.New("throughput: --records must be at least 1")
	}
	if cfg.Keys < 1 {
		return nil, fmt.Errorf("throughput: --keys must be at least 1, got %d", cfg.Keys)
	}
	if cfg.Parallelism < 1 {
		return nil, fmt.Errorf("throughput: parallelism must be at least 1, got %d", cfg.Parallelism)
	}
	if cfg.Runs <= 0 {
		cfg.Runs = 3
	}
	res := &Result{}
	var engine, baseline []time.Duration
	for i := 0; i < cfg.Runs; i++ {
		et, esum, allocs, err := runEngine(ctx, cfg)
		if err != nil {
			return nil, err
		}
		bt, bsum := runBaseline(cfg)
		engine, baseline = append(engine, et), append(baseline, bt)
		res.EngineChecksum, res.BaselineChecksum = esum, bsum
		res.AllocsPerRecord = max(res.AllocsPerRecord, allocs)
	}
	res.EngineTime, res.BaselineTime = median(engine), median(baseline)
	res.EngineRPS = float64(cfg.Records) / res.EngineTime.Seconds()
	res.BaselineRPS = float64(cfg.Records) / res.BaselineTime.Seconds()
	res.Ratio = res.EngineRPS / res.BaselineRPS
	return res, nil
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// Checksum combines per-key sums into one order-independent number.
func Checksum(sums map[int64]int64) uint64 {
	var c uint64
	for k, v := range sums {
		c += mix(uint64(k)*0x9e3779b97f4a7c15 ^ uint64(v))
	}
	return c
}

func mix(x uint64) uint64 {
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func runEngine(ctx context.Context, cfg Config) (time.Duration, uint64, float64, error) {
	p := cfg.Parallelism
	keys := cfg.Keys
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	opts := []runnel.Option{runnel.WithParallelism(p), runnel.WithTaskManagers(1),
		runnel.WithBufferTimeout(100 * time.Millisecond), runnel.WithLogger(logger)}
	if cfg.CheckpointInterval > 0 {
		opts = append(opts, runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: cfg.CheckpointInterval,
			Unaligned: cfg.Unaligned, AlignedCheckpointTimeout: cfg.AlignedCheckpointTimeout}))
	}
	if cfg.Failover != "" {
		opts = append(opts, runnel.WithFailover(cfg.Failover))
	}
	if cfg.InflightLogMemory > 0 {
		opts = append(opts, runnel.WithInflightLogMemory(cfg.InflightLogMemory))
	}
	env := runnel.NewEnvironment(append(opts, cfg.options...)...)
	src := runnel.FromSource(env, connector.Generator(func(s int, seq uint64) Record {
		return Record{Key: int64((seq*uint64(p) + uint64(s)) % uint64(keys)), Value: int64(seq)}
	}, connector.GeneratorOptions{TotalRecords: cfg.Records})).Name("generator")
	mapped := runnel.Map(src, func(r Record) (Record, error) { r.Value++; return r, nil }).
		Name("map").WithCodec(codec.MustStruct[Record]())
	sums := runnel.Reduce(runnel.KeyBy(mapped, func(r Record) int64 { return r.Key }),
		func(acc, r Record) (Record, error) { acc.Value += r.Value; return acc, nil }).Name("sum")
	var capture *latestSink
	if cfg.Verify {
		capture = &latestSink{sums: map[int64]int64{}}
		sums.SinkTo(capture).Name("sink")
	} else {
		sums.SinkTo(connector.Discard[Record]()).Name("sink")
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	res, err := env.Execute(ctx, "throughput")
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if err != nil {
		return 0, 0, 0, err
	}
	if res.Status != "FINISHED" {
		return 0, 0, 0, fmt.Errorf("throughput: engine job ended %s", res.Status)
	}
	if res.Checkpoints != nil {
		lastCheckpoints.Store(res.Checkpoints.Completed)
	}
	allocs := float64(after.Mallocs-before.Mallocs) / float64(cfg.Records)
	var sum uint64
	if capture != nil {
		sum = Checksum(capture.sums)
	}
	return elapsed, sum, allocs, nil
}

// latestSink keeps the latest reduce output per key: the final sums once the job finished.
type latestSink struct {
	mu   sync.Mutex
	sums map[int64]int64
}

func (s *latestSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[Record], error) {
	return &latestWriter{s: s, sums: map[int64]int64{}}, nil
}

type latestWriter struct {
	s    *latestSink
	sums map[int64]int64
}

func (w *latestWriter) Write(r Record) error { w.sums[r.Key] = r.Value; return nil }

func (w *latestWriter) Flush() error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	for k, v := range w.sums {
		w.s.sums[k] = v
	}
	return nil
}

func (w *latestWriter) Close() error { return nil }

const batchSize = 1024

// runBaseline does the engine's work by hand: P producers generate and map records and route each to the
// consumer that owns its key, in batches over channels; consumers keep running sums per key and hand the
// running sum of every record to a discarding sink. Batches are recycled through a free list.
func runBaseline(cfg Config) (time.Duration, uint64) {
	p := cfg.Parallelism
	keys := uint64(cfg.Keys)
	free := make(chan []Record, 8*p*p)
	getBatch := func() []Record {
		select {
		case b := <-free:
			return b[:0]
		default:
			return make([]Record, 0, batchSize)
		}
	}
	putBatch := func(b []Record) {
		select {
		case free <- b:
		default:
		}
	}
	inbox := make([]chan []Record, p)
	for i := range inbox {
		inbox[i] = make(chan []Record, 4*p)
	}
	results := make([]map[int64]int64, p)
	var sink int64
	start := time.Now()
	var consumers, producers sync.WaitGroup
	for c := 0; c < p; c++ {
		consumers.Add(1)
		go func(c int) {
			defer consumers.Done()
			sums := make(map[int64]int64)
			var last int64
			for b := range inbox[c] {
				for _, r := range b {
					s := sums[r.Key] + r.Value
					sums[r.Key] = s
					last ^= s // the "sink": use the running sum so the work is not optimised away
				}
				putBatch(b)
			}
			results[c] = sums
			if last == 42 {
				sink++
			}
		}(c)
	}
	for s := 0; s < p; s++ {
		n := cfg.Records / uint64(p)
		if uint64(s) < cfg.Records%uint64(p) {
			n++
		}
		producers.Add(1)
		go func(s int, n uint64) {
			defer producers.Done()
			out := make([][]Record, p)
			for i := range out {
				out[i] = getBatch()
			}
			for seq := uint64(0); seq < n; seq++ {
				r := Record{Key: int64((seq*uint64(p) + uint64(s)) % keys), Value: int64(seq)}
				r.Value++
				c := int(route(uint64(r.Key)) % uint64(p))
				out[c] = append(out[c], r)
				if len(out[c]) == batchSize {
					inbox[c] <- out[c]
					out[c] = getBatch()
				}
			}
			for c, b := range out {
				if len(b) > 0 {
					inbox[c] <- b
				}
			}
		}(s, n)
	}
	producers.Wait()
	for _, ch := range inbox {
		close(ch)
	}
	consumers.Wait()
	elapsed := time.Since(start)
	all := map[int64]int64{}
	for _, m := range results {
		for k, v := range m {
			all[k] = v
		}
	}
	_ = sink
	return elapsed, Checksum(all)
}

// route hashes a key to spread consecutive keys over consumers.
func route(k uint64) uint64 { return mix(k * 0x9e3779b97f4a7c15) }

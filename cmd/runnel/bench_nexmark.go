package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/nexmark"
	"github.com/runnel-dev/runnel/internal/heapbudget"
)

// nexmarkBenchConfig configures `runnel bench nexmark`.
type nexmarkBenchConfig struct {
	query  string
	events uint64
	runs   int
	// warmup runs of warmupEvents go first and are discarded, as the Flink harness's are.
	warmup             int
	warmupEvents       uint64
	checkpointInterval time.Duration
	incremental        bool
	unaligned          unalignedFlags
	outOfOrderness     time.Duration
	// failover is the failover strategy ("": the default, region); under task failover every output is
	// logged (docs/taskfailover.md), which is what a run with it measures.
	failover string
	// The memory run: a fixed rate for a duration, RSS every rssEvery.
	rate     int64
	duration time.Duration
	rssEvery time.Duration
	// cpuProfile, when set, is the file a CPU profile of the runs goes to.
	cpuProfile string
	// memProfile, when set, is the file an allocation profile of the runs goes to (written at the end).
	memProfile string
	// limit measures the generator alone (no query, no engine): the most events/s any query can reach.
	limit bool
}

// nexmarkRun is one measured run over a bounded generated stream.
type nexmarkRun struct {
	Events      uint64        `json:"events"`
	Results     int64         `json:"results"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	EventsPerS  float64       `json:"events_per_s"`
	Checkpoints int64         `json:"checkpoints"`
}

// nexmarkBenchResult is what `runnel bench nexmark --json` prints for a throughput measurement.
type nexmarkBenchResult struct {
	Query              string        `json:"query"`
	Parallelism        int           `json:"parallelism"`
	CheckpointInterval time.Duration `json:"checkpoint_interval_ns"`
	Failover           string        `json:"failover,omitempty"`
	Unaligned          bool          `json:"unaligned_checkpoints,omitempty"`
	// Limit: the runs measured the generator alone (--limit; Query is "limit").
	Limit bool         `json:"limit,omitempty"`
	Runs  []nexmarkRun `json:"runs"`
	// EventsPerS is the median of the runs'; Min and Max their range.
	EventsPerS    float64    `json:"events_per_s"`
	EventsPerSMin float64    `json:"events_per_s_min"`
	EventsPerSMax float64    `json:"events_per_s_max"`
	WarmupRuns    int        `json:"warmup_runs"`
	Setup         benchSetup `json:"setup"`
}

// benchSetup is what a reader of a figure needs to judge it, printed with it.
type benchSetup struct {
	GoVersion    string `json:"go_version"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	GOGC         string `json:"gogc"`
	GOMEMLIMIT   string `json:"gomemlimit"`
	HeapBudget   string `json:"heap_budget"`
	StateBackend string `json:"state_backend"`
}

// benchPacer paces the collector of a bench process (--heap-budget); nil before the command runs.
var benchPacer *heapbudget.Pacer

// currentSetup reads the process's setup. The benchmark's jobs keep state in the default backend.
func currentSetup() benchSetup {
	budget := "none"
	if b := benchPacer.Budget(); b > 0 {
		budget = fmt.Sprintf("%d MiB", b>>20)
	}
	return benchSetup{GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		GOGC: cmp.Or(os.Getenv("GOGC"), "100"), GOMEMLIMIT: cmp.Or(os.Getenv("GOMEMLIMIT"), "off"), HeapBudget: budget,
		StateBackend: "memory"}
}

// String is the setup in one line.
func (s benchSetup) String() string {
	return fmt.Sprintf("%s, GOMAXPROCS %d, GOGC %s, GOMEMLIMIT %s, heap budget %s, %s state", s.GoVersion, s.GOMAXPROCS,
		s.GOGC, s.GOMEMLIMIT, s.HeapBudget, s.StateBackend)
}

// rssSample is one reading of the memory run.
type rssSample struct {
	At     time.Duration `json:"at_ns"`
	RSS    int64         `json:"rss_bytes"`
	Events int64         `json:"events"` // generated so far (over all subtasks)
}

// nexmarkBenchParallelism is the parallelism of every operator of the benchmark (the issue's).
const nexmarkBenchParallelism = 2

func newNexmarkBenchCmd() *cobra.Command {
	var cfg nexmarkBenchConfig
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "nexmark",
		Short: "a Nexmark query over the generated stream at parallelism 2: events per second (or, with --rate and --duration, RSS over time)",
		Long: `Runs one Nexmark query (runnel run nexmark's) at parallelism 2 over the built-in generator, unthrottled,
into a sink that counts and discards. events/s = events / (the last record at the sink - the first poll of
a source); the median of --runs runs is reported.

With --limit no query runs: two goroutines, one per source subtask, run the source's readers over their
shares of the same events into a collector that only counts them. events/s = events / the time until both
are done: the cost of producing the events, the most any query can reach.

With --rate R --duration D the stream is unbounded at R events/s for D, and the process's RSS (VmRSS of
/proc/self/status) is printed every --rss-every: memory should stay flat.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.validate(); err != nil {
				return usageError(err)
			}
			out := cmd.OutOrStdout()
			stopProfile, err := startCPUProfile(cfg.cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			if cfg.memProfile != "" {
				f, err := os.Create(cfg.memProfile)
				if err != nil {
					return usageError(fmt.Errorf("invalid --memprofile: %w", err))
				}
				defer f.Close()
				// Deferred before the runs start, so that it is written after them.
				defer func() {
					if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "--memprofile: %v\n", err)
					}
				}()
			}
			if cfg.duration > 0 {
				return runNexmarkRSS(cmd.Context(), cfg, out, asJSON)
			}
			res, err := benchNexmark(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(out).Encode(res)
			}
			if cfg.limit {
				fmt.Fprintf(out, "nexmark limit (the generator alone): %d events, parallelism %d", cfg.events, nexmarkBenchParallelism)
				if cfg.warmup > 0 {
					fmt.Fprintf(out, ", after %d warm-up run(s) of %d events", cfg.warmup, cmp.Or(cfg.warmupEvents, cfg.events))
				}
				fmt.Fprintln(out)
				for i, r := range res.Runs {
					fmt.Fprintf(out, "run %d              %12.0f events/s  (%v)\n", i+1, r.EventsPerS, r.Elapsed.Round(time.Millisecond))
				}
				fmt.Fprintf(out, "median             %12.0f events/s  [%.0f–%.0f]\n", res.EventsPerS, res.EventsPerSMin, res.EventsPerSMax)
				fmt.Fprintf(out, "setup              %s\n", res.Setup)
				return nil
			}
			fmt.Fprintf(out, "nexmark %s: %d events, parallelism %d", cfg.query, cfg.events, nexmarkBenchParallelism)
			if cfg.warmup > 0 {
				fmt.Fprintf(out, ", after %d warm-up run(s) of %d events", cfg.warmup, cmp.Or(cfg.warmupEvents, cfg.events))
			}
			if cfg.checkpointInterval > 0 {
				fmt.Fprintf(out, ", checkpoints every %s", cfg.checkpointInterval)
				if cfg.incremental {
					fmt.Fprint(out, " (incremental)")
				}
				if cfg.unaligned.unaligned {
					fmt.Fprint(out, " (unaligned)")
				}
			}
			if cfg.failover != "" {
				fmt.Fprintf(out, ", %s failover", cfg.failover)
			}
			fmt.Fprintln(out)
			for i, r := range res.Runs {
				fmt.Fprintf(out, "run %d              %12.0f events/s  (%v, %d results, %d checkpoints)\n", i+1, r.EventsPerS,
					r.Elapsed.Round(time.Millisecond), r.Results, r.Checkpoints)
			}
			fmt.Fprintf(out, "median             %12.0f events/s  [%.0f–%.0f]\n", res.EventsPerS, res.EventsPerSMin, res.EventsPerSMax)
			fmt.Fprintf(out, "setup              %s\n", res.Setup)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.query, "query", "", "the query: "+strings.Join(nexmark.Queries, ", "))
	fl.Uint64Var(&cfg.events, "events", 20_000_000, "events per run")
	fl.IntVar(&cfg.runs, "runs", 3, "runs; the median is reported")
	fl.IntVar(&cfg.warmup, "warmup", 0, "discarded runs before the measured ones")
	fl.Uint64Var(&cfg.warmupEvents, "warmup-events", 0, "events per warm-up run (0: --events)")
	fl.DurationVar(&cfg.checkpointInterval, "checkpoint-interval", 0, "take checkpoints this often (0: none)")
	fl.BoolVar(&cfg.incremental, "incremental-checkpoints", false, "with --checkpoint-interval: incremental checkpoints (runnel.WithIncrementalCheckpoints)")
	cfg.unaligned.register(fl, "with --checkpoint-interval")
	fl.DurationVar(&cfg.outOfOrderness, "out-of-orderness", nexmark.DefaultOutOfOrderness, "the watermark bound")
	fl.StringVar(&cfg.failover, "failover", "", "the failover strategy the job runs under: full, region (the default), approximate or task (every output logged for exactly-once local recovery)")
	fl.Int64Var(&cfg.rate, "rate", 0, "with --duration: events per second")
	fl.DurationVar(&cfg.duration, "duration", 0, "run unbounded at --rate for this long and report RSS (0: the throughput measurement)")
	fl.DurationVar(&cfg.rssEvery, "rss-every", time.Minute, "with --duration: how often to report RSS")
	fl.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the runs to this file")
	fl.StringVar(&cfg.memProfile, "memprofile", "", "write an allocation profile of the runs to this file")
	fl.BoolVar(&cfg.limit, "limit", false, "measure the generator alone at parallelism 2, with no query and no engine (no --query)")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object (the memory run: one per sample, then a summary)")
	return cmd
}

func (c nexmarkBenchConfig) validate() error {
	var errs []error
	if c.limit {
		// The limit is the same for every query; the settings of a job do not apply to it.
		if c.query != "" || c.checkpointInterval != 0 || c.failover != "" || c.unaligned.unaligned || c.duration != 0 || c.rate != 0 {
			errs = append(errs, errors.New("--limit measures the generator alone: it takes only --events, --runs, the warm-up, --json and the profiles"))
		}
		if c.warmup < 0 {
			errs = append(errs, fmt.Errorf("invalid --warmup %d: must not be negative", c.warmup))
		}
		if c.events < 1 {
			errs = append(errs, fmt.Errorf("invalid --events %d: must be at least 1", c.events))
		}
		if c.runs < 1 {
			errs = append(errs, fmt.Errorf("invalid --runs %d: must be at least 1", c.runs))
		}
		return errors.Join(errs...)
	}
	if !slices.Contains(nexmark.Queries, c.query) {
		errs = append(errs, fmt.Errorf("invalid --query %q: use one of %s", c.query, strings.Join(nexmark.Queries, ", ")))
	}
	if c.checkpointInterval < 0 {
		errs = append(errs, fmt.Errorf("invalid --checkpoint-interval %s: must not be negative", c.checkpointInterval))
	}
	if err := c.unaligned.validate(c.checkpointInterval > 0, "--checkpoint-interval"); err != nil {
		errs = append(errs, err)
	}
	switch c.failover {
	case "", "full", "region", "approximate", "task":
	default:
		errs = append(errs, fmt.Errorf("invalid --failover %q: use full, region, approximate or task", c.failover))
	}
	if c.outOfOrderness < 0 || c.outOfOrderness%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("invalid --out-of-orderness %s: whole milliseconds, at least 0", c.outOfOrderness))
	}
	switch {
	case c.duration < 0:
		errs = append(errs, fmt.Errorf("invalid --duration %s: must not be negative", c.duration))
	case c.duration > 0 && c.rate <= 0:
		errs = append(errs, errors.New("--duration runs at a fixed rate: set --rate to a positive events/s"))
	case c.duration > 0 && c.rssEvery <= 0:
		errs = append(errs, fmt.Errorf("invalid --rss-every %s: must be positive", c.rssEvery))
	case c.duration == 0 && c.rate != 0:
		errs = append(errs, errors.New("--rate is for the memory run: set --duration too (the throughput run is unthrottled)"))
	case c.duration == 0 && c.events < 1:
		errs = append(errs, fmt.Errorf("invalid --events %d: must be at least 1", c.events))
	case c.duration == 0 && c.runs < 1:
		errs = append(errs, fmt.Errorf("invalid --runs %d: must be at least 1", c.runs))
	case c.warmup < 0:
		errs = append(errs, fmt.Errorf("invalid --warmup %d: must not be negative", c.warmup))
	}
	return errors.Join(errs...)
}

// benchNexmark runs the throughput measurement.
func benchNexmark(ctx context.Context, cfg nexmarkBenchConfig) (nexmarkBenchResult, error) {
	res := nexmarkBenchResult{Query: cfg.query, Parallelism: nexmarkBenchParallelism, CheckpointInterval: cfg.checkpointInterval, Failover: cfg.failover,
		Unaligned: cfg.unaligned.unaligned, WarmupRuns: cfg.warmup, Setup: currentSetup()}
	once := benchNexmarkOnce
	if cfg.limit {
		res.Query, res.Limit = "limit", true
		once = benchNexmarkLimitOnce
	}
	warm := cfg
	warm.events = cmp.Or(cfg.warmupEvents, cfg.events)
	for range cfg.warmup {
		if _, err := once(ctx, warm); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	for range cfg.runs {
		r, err := once(ctx, cfg)
		if err != nil {
			return res, err
		}
		res.Runs = append(res.Runs, r)
	}
	eps := make([]float64, len(res.Runs))
	for i, r := range res.Runs {
		eps[i] = r.EventsPerS
	}
	slices.Sort(eps)
	res.EventsPerS, res.EventsPerSMin, res.EventsPerSMax = eps[len(eps)/2], eps[0], eps[len(eps)-1]
	return res, nil
}

// nexmarkBenchJob builds the query over the generated stream of gen into a counting sink. probe records
// the first poll of a source.
func nexmarkBenchJob(cfg nexmarkBenchConfig, gen nexmark.GeneratorConfig, probe *pollProbe) (*runnel.Environment, *nexmark.Counter, error) {
	opts := []runnel.Option{runnel.WithParallelism(nexmarkBenchParallelism), runnel.WithLogger(slog.New(slog.DiscardHandler))}
	if cfg.checkpointInterval > 0 {
		cc := runnel.CheckpointConfig{Interval: cfg.checkpointInterval}
		cfg.unaligned.apply(&cc)
		opts = append(opts, runnel.WithCheckpointing(cc))
		if cfg.incremental {
			opts = append(opts, runnel.WithIncrementalCheckpoints())
		}
	}
	if cfg.failover != "" {
		opts = append(opts, runnel.WithFailover(cfg.failover))
	}
	env := runnel.NewEnvironment(opts...)
	events := nexmark.Events(env, &probedSource{src: nexmark.Source(gen), probe: probe}, 0, cfg.outOfOrderness)
	q, err := nexmark.Build(cfg.query, events)
	if err != nil {
		return nil, nil, err
	}
	c := &nexmark.Counter{}
	q.ToCounter(c)
	return env, c, env.Err()
}

func benchNexmarkOnce(ctx context.Context, cfg nexmarkBenchConfig) (nexmarkRun, error) {
	probe := &pollProbe{}
	env, c, err := nexmarkBenchJob(cfg, nexmark.GeneratorConfig{Events: cfg.events}, probe)
	if err != nil {
		return nexmarkRun{}, err
	}
	res, err := env.Execute(ctx, "nexmark-bench-"+cfg.query)
	end := time.Now()
	if err != nil {
		return nexmarkRun{}, fmt.Errorf("nexmark %s: %w", cfg.query, err)
	}
	if res.Status != "FINISHED" {
		return nexmarkRun{}, fmt.Errorf("nexmark %s: job %s: %s", cfg.query, res.Status, res.Error)
	}
	if last := c.Last(); !last.IsZero() {
		end = last // a query whose last result comes before the job's end is measured to that result
	}
	r := nexmarkRun{Events: cfg.events, Results: c.Count(), Elapsed: end.Sub(probe.first())}
	if res.Checkpoints != nil {
		r.Checkpoints = res.Checkpoints.Completed
	}
	r.EventsPerS = float64(cfg.events) / r.Elapsed.Seconds()
	return r, nil
}

// benchNexmarkLimitOnce generates cfg.events events as the job's sources do, with no engine: one goroutine
// per source subtask polls the source's reader of that subtask (the same code, the same events, the same
// batches) into a collector that counts the events and sums a word of each, so that every event is made
// and read.
func benchNexmarkLimitOnce(ctx context.Context, cfg nexmarkBenchConfig) (nexmarkRun, error) {
	src := nexmark.Source(nexmark.GeneratorConfig{Events: cfg.events})
	var readers [nexmarkBenchParallelism]runnel.SourceReader[nexmark.Event]
	for i := range readers {
		r, err := src.CreateReader(limitContext{subtask: i})
		if err != nil {
			return nexmarkRun{}, fmt.Errorf("nexmark limit: subtask %d: %w", i, err)
		}
		defer r.Close()
		readers[i] = r
	}
	var sinks [nexmarkBenchParallelism]*limitSink
	var errs [nexmarkBenchParallelism]error
	var wg sync.WaitGroup
	start := time.Now()
	for i, r := range readers {
		sinks[i] = &limitSink{}
		wg.Go(func() { errs[i] = drainReader(ctx, r, sinks[i]) })
	}
	wg.Wait()
	r := nexmarkRun{Events: cfg.events, Elapsed: time.Since(start)}
	if err := errors.Join(errs[:]...); err != nil {
		return nexmarkRun{}, fmt.Errorf("nexmark limit: %w", err)
	}
	var n, sum uint64
	for _, s := range sinks {
		n, sum = n+s.n, sum+s.sum
	}
	if n != cfg.events || sum == 0 {
		return nexmarkRun{}, fmt.Errorf("nexmark limit: the readers made %d events (checksum %d), want %d", n, sum, cfg.events)
	}
	r.EventsPerS = float64(cfg.events) / r.Elapsed.Seconds()
	return r, nil
}

// drainReader polls r into out until its input ends.
func drainReader(ctx context.Context, r runnel.SourceReader[nexmark.Event], out *limitSink) error {
	for {
		st, err := r.PollNext(out)
		if err != nil {
			return err
		}
		switch st {
		case runnel.EndOfInput:
			return nil
		case runnel.NothingAvailable:
			select {
			case <-r.Available():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// limitContext is the runtime context of a reader of the limit run: the generator's reader asks only for
// its subtask and the parallelism (any other method panics on the nil interface).
type limitContext struct {
	runnel.RuntimeContext
	subtask int
}

func (c limitContext) SubtaskIndex() int { return c.subtask }
func (c limitContext) Parallelism() int  { return nexmarkBenchParallelism }

// limitSink is the collector of the limit run: it counts the events and sums each one's time and the length
// of its padding, the least that reads every event.
type limitSink struct {
	n, sum uint64
	_      [64]byte // written per event by its subtask: keeps the other subtask's sink off its cache line
}

func (s *limitSink) Collect(e nexmark.Event) { s.add(&e) }

func (s *limitSink) CollectBatch(es []nexmark.Event) {
	for i := range es {
		s.add(&es[i])
	}
}

func (s *limitSink) add(e *nexmark.Event) {
	s.n++
	s.sum += uint64(e.DateTime()) + uint64(len(e.Person.Extra)+len(e.Auction.Extra)+len(e.Bid.Extra))
}

// runNexmarkRSS runs the query unbounded at a fixed rate for the duration and reports RSS every
// rssEvery, then the first and last samples.
func runNexmarkRSS(ctx context.Context, cfg nexmarkBenchConfig, out io.Writer, asJSON bool) error {
	probe := &pollProbe{}
	env, _, err := nexmarkBenchJob(cfg, nexmark.GeneratorConfig{Rate: cfg.rate}, probe)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	start := time.Now()
	done := make(chan struct{})
	var samples []rssSample
	var sampleErr error
	go func() {
		defer close(done)
		tick := time.NewTicker(cfg.rssEvery)
		defer tick.Stop()
		enc := json.NewEncoder(out)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rss, err := readRSS()
			if err != nil {
				sampleErr = err
				return
			}
			s := rssSample{At: time.Since(start).Round(time.Second), RSS: rss, Events: probe.polled.Load()}
			samples = append(samples, s)
			if asJSON {
				enc.Encode(s)
			} else {
				fmt.Fprintf(out, "%8s  RSS %7.1f MiB  %d events\n", s.At, float64(rss)/(1<<20), s.Events)
			}
		}
	}()
	res, err := env.Execute(ctx, "nexmark-rss-"+cfg.query)
	cancel()
	<-done
	if err != nil {
		return fmt.Errorf("nexmark %s: %w", cfg.query, err)
	}
	if res.Status != "CANCELED" {
		return fmt.Errorf("nexmark %s: job %s before --duration: %s", cfg.query, res.Status, res.Error)
	}
	if sampleErr != nil {
		return sampleErr
	}
	if len(samples) > 0 && !asJSON {
		first, last := samples[0], samples[len(samples)-1]
		fmt.Fprintf(out, "RSS %0.1f MiB at %s, %0.1f MiB at %s (%+.1f%%)\n", float64(first.RSS)/(1<<20), first.At,
			float64(last.RSS)/(1<<20), last.At, 100*(float64(last.RSS)/float64(first.RSS)-1))
	}
	return nil
}

// readRSS returns this process's resident set size: VmRSS of /proc/self/status.
func readRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("reading RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("reading RSS: VmRSS %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading RSS: %w", err)
	}
	return 0, errors.New("reading RSS: no VmRSS in /proc/self/status")
}

// pollProbe records when a source first polled, and how many events the sources emitted.
type pollProbe struct {
	firstNs atomic.Int64
	polled  atomic.Int64
}

func (p *pollProbe) first() time.Time { return time.Unix(0, p.firstNs.Load()) }

// probedSource is a source that tells its probe when it first polled; it is the source it wraps otherwise.
type probedSource struct {
	src   runnel.Source[nexmark.Event]
	probe *pollProbe
}

func (s *probedSource) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[nexmark.Event], error) {
	r, err := s.src.CreateReader(ctx)
	if err != nil {
		return nil, err
	}
	cr, ok := r.(runnel.CheckpointedReader)
	if !ok {
		return nil, errors.New("probedSource: the generator's reader is not checkpointed")
	}
	return &probedReader{SourceReader: r, cr: cr, probe: s.probe}, nil
}

type probedReader struct {
	runnel.SourceReader[nexmark.Event]
	cr     runnel.CheckpointedReader
	probe  *pollProbe
	polled bool
	count  countingCollector
}

func (r *probedReader) PollNext(out runnel.Collector[nexmark.Event]) (runnel.InputStatus, error) {
	if !r.polled {
		r.polled = true
		r.probe.firstNs.CompareAndSwap(0, time.Now().UnixNano())
	}
	if r.count.out != out {
		r.count = countingCollector{out: out, probe: r.probe}
		if bc, ok := out.(runnel.BatchCollector[nexmark.Event]); ok {
			r.count.batch = bc
		}
	}
	if r.count.batch != nil {
		return r.SourceReader.PollNext(&r.count)
	}
	return r.SourceReader.PollNext(countingPlain{&r.count})
}

// SnapshotState implements runnel.CheckpointedReader.
func (r *probedReader) SnapshotState(id int64) ([]byte, error) { return r.cr.SnapshotState(id) }

// RestoreState implements runnel.CheckpointedReader.
func (r *probedReader) RestoreState(b []byte) error { return r.cr.RestoreState(b) }

// ReplaysDeterministically implements runnel.DeterministicReader as the probed reader does.
func (r *probedReader) ReplaysDeterministically() bool {
	dr, ok := r.SourceReader.(runnel.DeterministicReader)
	return ok && dr.ReplaysDeterministically()
}

// countingCollector counts what the reader emits into the probe, as a BatchCollector.
type countingCollector struct {
	out   runnel.Collector[nexmark.Event]
	batch runnel.BatchCollector[nexmark.Event]
	probe *pollProbe
}

func (c *countingCollector) Collect(e nexmark.Event) { c.probe.polled.Add(1); c.out.Collect(e) }
func (c *countingCollector) CollectBatch(es []nexmark.Event) {
	c.probe.polled.Add(int64(len(es)))
	c.batch.CollectBatch(es)
}

// countingPlain is countingCollector without the batch method, for a collector that has none.
type countingPlain struct{ c *countingCollector }

func (c countingPlain) Collect(e nexmark.Event) { c.c.Collect(e) }

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/runnel-dev/runnel/bench/recovery"
	"github.com/runnel-dev/runnel/bench/throughput"
	"github.com/runnel-dev/runnel/internal/cli"
)

func newBenchCmd() *cobra.Command {
	bench := &cobra.Command{Use: "bench", Short: "Benchmarks of the engine"}
	var cfg throughput.Config
	var asJSON bool
	var processes int
	var dashboard bool
	tp := &cobra.Command{
		Use:   "throughput",
		Short: "generator -> map -> keyBy -> sum -> discard at parallelism 2, engine vs a hand-written Go baseline",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Records < 1 {
				return usageError(fmt.Errorf("invalid --records %d: must be at least 1", cfg.Records))
			}
			if cfg.Keys < 1 {
				return usageError(fmt.Errorf("invalid --keys %d: must be at least 1", cfg.Keys))
			}
			if processes != 0 {
				return runProcessThroughputCmd(cmd, cfg, processes, asJSON)
			}
			if dashboard {
				return runDashboardThroughputCmd(cmd, cfg, asJSON)
			}
			res, err := throughput.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(res)
			}
			fmt.Fprintf(out, "records            %d (keys %d, parallelism 2, local channels)\n", cfg.Records, cfg.Keys)
			fmt.Fprintf(out, "engine             %12.0f records/s  (%v)\n", res.EngineRPS, res.EngineTime.Round(1e6))
			fmt.Fprintf(out, "baseline (Go)      %12.0f records/s  (%v)\n", res.BaselineRPS, res.BaselineTime.Round(1e6))
			fmt.Fprintf(out, "ratio              %12.3f\n", res.Ratio)
			fmt.Fprintf(out, "allocs per record  %12.4f\n", res.AllocsPerRecord)
			return nil
		},
	}
	tp.Flags().Uint64Var(&cfg.Records, "records", 20_000_000, "records to process")
	tp.Flags().Int64Var(&cfg.Keys, "keys", 1024, "distinct keys")
	tp.Flags().IntVar(&cfg.Runs, "runs", 3, "alternating engine and baseline runs; medians are reported")
	tp.Flags().BoolVar(&asJSON, "json", false, "print one JSON object {engine_rps, baseline_rps, ratio, allocs_per_record}")
	tp.Flags().IntVar(&processes, "processes", 0, "run the pipeline at parallelism N on a JobManager and N TaskManager processes, as a ratio to the mini-cluster with N TaskManagers")
	tp.Flags().BoolVar(&dashboard, "ui", false, "run the pipeline without and with its web dashboard served and read every second (runnel run --ui), alternating, as a ratio")
	tp.MarkFlagsMutuallyExclusive("ui", "processes")
	bench.AddCommand(tp, newCheckpointBenchCmd(), newRecoveryBenchCmd(), newTMLossBenchCmd(), newJMLossBenchCmd(), newNexmarkBenchCmd(), newKafkaBenchCmd())
	// The benchmarks run their jobs in this process, which paces its collector as runnel run does.
	heapBudget := cli.AddHeapBudgetFlag(bench.PersistentFlags())
	bench.PersistentPreRunE = func(*cobra.Command, []string) error {
		p, err := heapBudget()
		if err != nil {
			return usageError(err)
		}
		benchPacer = p
		return nil
	}
	bench.PersistentPostRun = func(*cobra.Command, []string) { benchPacer.Stop() }
	return bench
}

// runDashboardThroughputCmd is bench throughput --ui.
func runDashboardThroughputCmd(cmd *cobra.Command, cfg throughput.Config, asJSON bool) error {
	res, err := throughput.RunDashboardOverhead(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(out).Encode(res)
	}
	fmt.Fprintf(out, "records            %d (keys %d, parallelism 2, local channels)\n", cfg.Records, cfg.Keys)
	fmt.Fprintf(out, "engine             %12.0f records/s\n", res.EngineRPS)
	fmt.Fprintf(out, "with the dashboard %12.0f records/s  (%d documents read)\n", res.DashboardRPS, res.Reads)
	fmt.Fprintf(out, "ratio              %12.3f\n", res.Ratio)
	return nil
}

func newCheckpointBenchCmd() *cobra.Command {
	var cfg throughput.Config
	var interval time.Duration
	var asJSON bool
	var failover string
	var backpressure, restore bool
	var bp throughput.BackpressureConfig
	var rs throughput.RestoreConfig
	var ua unalignedFlags
	cmd := &cobra.Command{
		Use:   "checkpoints",
		Short: "the standard pipeline with checkpoints every --interval, as a ratio to the same pipeline without; with --backpressure, aligned vs unaligned checkpoints behind a slow sink",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if restore && !backpressure {
				return usageError(errors.New("--restore measures the backpressured pipeline: set --backpressure too"))
			}
			if backpressure {
				if ua.unaligned {
					return usageError(errors.New("--backpressure runs aligned and unaligned checkpoints side by side (--restore: unaligned only): choose them with --modes, not --unaligned-checkpoints"))
				}
				if ua.timeout < 0 {
					return usageError(fmt.Errorf("invalid --aligned-checkpoint-timeout %s: must not be negative", ua.timeout))
				}
				if ua.timeout > 0 && !restore && !slices.Contains(bp.Modes, throughput.Unaligned) {
					return usageError(errors.New("--aligned-checkpoint-timeout applies to the unaligned runs: --modes has none"))
				}
				bp.Keys, bp.Runs, bp.Interval, bp.AlignedCheckpointTimeout = cfg.Keys, cfg.Runs, interval, ua.timeout
				if restore {
					if cmd.Flags().Changed("modes") {
						return usageError(errors.New("--restore runs unaligned checkpoints only: drop --modes"))
					}
					if !cmd.Flags().Changed("duration") {
						bp.MaxDuration = time.Minute
					}
					rs.BackpressureConfig = bp
					return runRestoreCmd(cmd, rs, asJSON)
				}
				return runBackpressureCmd(cmd, bp, asJSON)
			}
			if err := ua.validate(true, ""); err != nil {
				return usageError(err)
			}
			cfg.Unaligned, cfg.AlignedCheckpointTimeout = ua.unaligned, ua.timeout
			if cfg.Records < 1 {
				return usageError(fmt.Errorf("invalid --records %d: must be at least 1", cfg.Records))
			}
			if interval <= 0 {
				return usageError(fmt.Errorf("invalid --interval %s: must be positive", interval))
			}
			if cfg.InflightLogMemory < 0 {
				return usageError(fmt.Errorf("invalid --inflight-log-memory %d: must not be negative", cfg.InflightLogMemory))
			}
			out := cmd.OutOrStdout()
			if failover != "" {
				switch failover {
				case "full", "region", "approximate", "task":
				default:
					return usageError(fmt.Errorf("invalid --failover %q: use full, region, approximate or task", failover))
				}
				res, err := throughput.RunFailoverOverhead(cmd.Context(), cfg, interval, failover)
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(out).Encode(res)
				}
				fmt.Fprintf(out, "records               %d (keys %d, parallelism 2, checkpoints every %s)\n", cfg.Records, cfg.Keys, interval)
				fmt.Fprintf(out, "region failover       %12.0f records/s\n", res.RegionRPS)
				fmt.Fprintf(out, "%-21s %12.0f records/s\n", failover+" failover", res.StrategyRPS)
				fmt.Fprintf(out, "ratio                 %12.3f\n", res.Ratio)
				return nil
			}
			res, err := throughput.RunCheckpointOverhead(cmd.Context(), cfg, interval)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(out).Encode(res)
			}
			fmt.Fprintf(out, "records               %d (keys %d, parallelism 2)\n", cfg.Records, cfg.Keys)
			fmt.Fprintf(out, "without checkpoints   %12.0f records/s\n", res.EngineRPS)
			fmt.Fprintf(out, "checkpoints every %-4s %11.0f records/s (%d completed in the last run)\n", interval, res.CheckpointedRPS, res.Checkpoints)
			fmt.Fprintf(out, "ratio                 %12.3f\n", res.Ratio)
			return nil
		},
	}
	cmd.Flags().Uint64Var(&cfg.Records, "records", 100_000_000, "records per run (enough for several checkpoints)")
	cmd.Flags().Int64Var(&cfg.Keys, "keys", 1024, "distinct keys")
	cmd.Flags().IntVar(&cfg.Runs, "runs", 3, "alternating runs without and with checkpoints; medians are reported")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "checkpoint interval")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().StringVar(&failover, "failover", "", "compare the checkpointed pipeline under this failover strategy (task, approximate, full) with it under region failover, instead of with and without checkpoints")
	cmd.Flags().Int64Var(&cfg.InflightLogMemory, "inflight-log-memory", 0, "with --failover task: the TaskManager's bytes of memory for the in-flight logs before they spill (0: 1 GiB)")
	cmd.Flags().BoolVar(&backpressure, "backpressure", false, "run generator -> map -> keyBy -> sum -> a sink paced to a fifth of the sources' rate, with aligned and with unaligned checkpoints, alternating, and compare the checkpoints' durations")
	cmd.Flags().Float64Var(&bp.SinkRate, "sink-rate", 20_000, "with --backpressure: records per second each sink subtask takes (the sources offer 5 times as many)")
	cmd.Flags().DurationVar(&bp.MaxDuration, "duration", 20*time.Second, "with --backpressure: the longest a run lasts (it ends sooner once it completed its checkpoints)")
	cmd.Flags().IntVar(&bp.Checkpoints, "checkpoints", 5, "with --backpressure: checkpoints each run measures, after the warm-up")
	cmd.Flags().IntVar(&bp.Warmup, "warmup", 1, "with --backpressure: checkpoints each run takes before those it measures")
	cmd.Flags().IntSliceVar(&bp.BuffersPerChannel, "buffers-per-channel", []int{4}, "with --backpressure: network queue lengths (buffers per channel) to run at, each with --runs rounds (e.g. 4,16,64)")
	cmd.Flags().IntVar(&bp.BufferSize, "buffer-size", 32*1024, "with --backpressure: network buffer size in bytes")
	cmd.Flags().StringSliceVar(&bp.Modes, "modes", []string{throughput.Aligned, throughput.Unaligned}, "with --backpressure: the checkpoints to run, aligned and/or unaligned")
	cmd.Flags().BoolVar(&restore, "restore", false, "with --backpressure: unaligned checkpoints only, and sum[0] fails after checkpoint --fail-at-checkpoint, with the queues full: the restored checkpoint's channel state, the failover's recovery and outage, the time until the sinks' throughput is back, and a page-cache read of as many bytes as the baseline")
	cmd.Flags().IntVar(&rs.FailAtCheckpoint, "fail-at-checkpoint", 3, "with --restore: sum[0] fails at its first record after it heard this checkpoint completed")
	cmd.Flags().StringVar(&rs.Dir, "restore-dir", "", "with --restore: the directory for the checkpoints and the read baseline's file (default: the system's temporary directory)")
	ua.register(cmd.Flags(), "the checkpointed runs (without --backpressure; with it, --aligned-checkpoint-timeout applies to the unaligned runs)")
	cmd.MarkFlagsMutuallyExclusive("backpressure", "failover")
	return cmd
}

// runRestoreCmd is bench checkpoints --backpressure --restore.
func runRestoreCmd(cmd *cobra.Command, cfg throughput.RestoreConfig, asJSON bool) error {
	if cfg.SinkRate <= 0 || cfg.Interval <= 0 || cfg.MaxDuration <= 0 || cfg.Runs < 1 {
		return usageError(fmt.Errorf("invalid --sink-rate %v, --interval %s, --duration %s or --runs %d: must be positive", cfg.SinkRate, cfg.Interval, cfg.MaxDuration, cfg.Runs))
	}
	if cfg.FailAtCheckpoint < 1 {
		return usageError(fmt.Errorf("invalid --fail-at-checkpoint %d: must be at least 1", cfg.FailAtCheckpoint))
	}
	for _, n := range cfg.BuffersPerChannel {
		if n < 1 {
			return usageError(fmt.Errorf("invalid --buffers-per-channel %d: must be at least 1", n))
		}
	}
	res, err := throughput.RunRestore(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(out).Encode(res)
	}
	fmt.Fprintf(out, "sink %.0f records/s per subtask, sources %.0f, parallelism %d, unaligned checkpoints every %s, sum[0] fails after checkpoint %d, region failover, %d runs\n",
		res.SinkRate, res.SourceRate, res.Parallelism, cfg.Interval, res.FailAtCheckpoint, cfg.Runs)
	fmt.Fprintf(out, "read baseline: %s (%s)\n", res.ReadBaseline, res.Dir)
	fmt.Fprintf(out, "%-8s %14s %14s %12s %10s %14s %12s %10s %12s %12s\n", "buffers", "channel bytes", "state bytes", "recovery ms", "outage ms",
		"sink back ms", "read ms", "read MB/s", "recov/read", "outage/read")
	for _, q := range res.Queues {
		fmt.Fprintf(out, "%-8d %14d %14d %12.0f %10.0f %14.0f %12.2f %10.0f %12.1f %12.1f\n", q.BuffersPerChannel, q.RestoredChannelStateBytes, q.RestoredStateBytes,
			q.RecoveryMillis, q.OutageMillis, q.SinkRecoveredMillis, q.ReadMillis, q.ReadMBPerS, q.RecoveryReadRatio, q.OutageReadRatio)
	}
	return nil
}

// runBackpressureCmd is bench checkpoints --backpressure.
func runBackpressureCmd(cmd *cobra.Command, cfg throughput.BackpressureConfig, asJSON bool) error {
	if cfg.SinkRate <= 0 {
		return usageError(fmt.Errorf("invalid --sink-rate %v: must be positive", cfg.SinkRate))
	}
	if cfg.Interval <= 0 || cfg.MaxDuration <= 0 {
		return usageError(fmt.Errorf("invalid --interval %s or --duration %s: must be positive", cfg.Interval, cfg.MaxDuration))
	}
	if cfg.Checkpoints < 1 || cfg.Warmup < 0 || cfg.Runs < 1 {
		return usageError(fmt.Errorf("invalid --checkpoints %d, --warmup %d or --runs %d: at least 1, 0 and 1", cfg.Checkpoints, cfg.Warmup, cfg.Runs))
	}
	for _, n := range cfg.BuffersPerChannel {
		if n < 1 {
			return usageError(fmt.Errorf("invalid --buffers-per-channel %d: must be at least 1", n))
		}
	}
	for _, m := range cfg.Modes {
		if m != throughput.Aligned && m != throughput.Unaligned {
			return usageError(fmt.Errorf("invalid --modes %q: use aligned and/or unaligned", m))
		}
	}
	res, err := throughput.RunBackpressure(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(out).Encode(res)
	}
	fmt.Fprintf(out, "sink %.0f records/s per subtask, sources %.0f, parallelism %d, checkpoints every %s, %d runs of each\n",
		res.SinkRate, res.SourceRate, res.Parallelism, cfg.Interval, cfg.Runs)
	fmt.Fprintf(out, "%-8s %-10s %11s %15s %6s %12s %12s %13s %12s\n", "buffers", "mode", "median (ms)", "range (ms)", "count", "alignment ms", "state bytes", "channel bytes", "sink rec/s")
	queues := res.Queues
	if len(queues) == 0 {
		queues = []*throughput.BackpressureResult{res}
	}
	for _, q := range queues {
		for _, m := range cfg.Modes {
			ms, rng, n, align, size, channel, rps := q.AlignedMillis, q.AlignedRangeMillis, q.AlignedCheckpoints, q.AlignedAlignmentMillis, q.AlignedStateBytes, q.AlignedChannelStateBytes, q.AlignedSinkRPS
			if m == throughput.Unaligned {
				ms, rng, n, align, size, channel, rps = q.UnalignedMillis, q.UnalignedRangeMillis, q.UnalignedCheckpoints, q.UnalignedAlignmentMillis, q.UnalignedStateBytes, q.UnalignedChannelStateBytes, q.UnalignedSinkRPS
			}
			fmt.Fprintf(out, "%-8d %-10s %11.1f %15s %6d %12.1f %12d %13d %12.0f\n", q.BuffersPerChannel, m, ms, fmt.Sprintf("%d-%d", rng[0], rng[1]), n, align, size, channel, rps)
		}
		if q.Ratio > 0 {
			fmt.Fprintf(out, "%-8d ratio      %11.1f  (aligned / unaligned)\n", q.BuffersPerChannel, q.Ratio)
		}
	}
	return nil
}

func newRecoveryBenchCmd() *cobra.Command {
	var cfg recovery.Config
	var asJSON bool
	var plotPath string
	var ua unalignedFlags
	cmd := &cobra.Command{
		Use:   "recovery",
		Short: "one injected failure under each failover strategy: outage, upstream throughput, records lost, subtasks restarted",
		Long: `Runs generator -> map -> keyBy -> check -> sink (parallelism 4, one TaskManager, chaining off,
checkpoints every 200 ms, fixed-delay restarts without delay) once per --failover strategy; map[1] fails
--fail-after into each run. Prints a table, or with --json one JSON object per strategy per line (field
names as in the Flink harness, bench/flink). See package bench/recovery for how each figure is measured.

--scenario after-state runs generator -> keyBy -> check -> map -> sink instead: the failing map is
downstream of the keyed state (make it large with --keys, --state-bytes and --state-backend pebble), which
approximate recovery leaves running and full or region failover restore.

--plot FILE.svg draws, after the table, the records per second the sources emitted and the sinks
received around the failure, one panel per strategy on the same scales, with the failure and the
engine's outage marked (the JSON holds the same series, in --series-bucket buckets, as "series").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Rate < 0 {
				return usageError(fmt.Errorf("invalid --rate %v: must not be negative", cfg.Rate))
			}
			if cfg.Duration <= 0 || cfg.FailAfter <= 0 || cfg.FailAfter >= cfg.Duration {
				return usageError(fmt.Errorf("invalid --fail-after %s with --duration %s: both must be positive and the failure must come first", cfg.FailAfter, cfg.Duration))
			}
			if cfg.CheckpointInterval <= 0 {
				return usageError(fmt.Errorf("invalid --checkpoint-interval %s: must be positive (every run restores a checkpoint)", cfg.CheckpointInterval))
			}
			if err := ua.validate(true, ""); err != nil {
				return usageError(err)
			}
			cfg.Unaligned, cfg.AlignedCheckpointTimeout = ua.unaligned, ua.timeout
			// The plot's file is created before the runs, so that a bad path fails at once rather than after them.
			var plot *os.File
			plotted := false
			if plotPath != "" {
				f, err := os.Create(plotPath)
				if err != nil {
					return usageError(fmt.Errorf("invalid --plot: %w", err))
				}
				plot = f
				defer func() {
					plot.Close() // a second Close after a written plot only returns an error
					if !plotted {
						os.Remove(plotPath)
					}
				}()
			}
			res, err := recovery.Run(cmd.Context(), cfg)
			if errors.Is(err, recovery.ErrConfig) {
				return usageError(err)
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				err = writeJSONLines(out, res)
			} else {
				err = recovery.WriteTable(out, res)
			}
			if err != nil || plot == nil {
				return err
			}
			b, err := recovery.Plot(res)
			if err != nil {
				return fmt.Errorf("--plot %s: %w", plotPath, err)
			}
			if _, err := plot.Write(b); err != nil {
				return fmt.Errorf("--plot: %w", err)
			}
			if err := plot.Close(); err != nil {
				return fmt.Errorf("--plot: %w", err)
			}
			plotted = true
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&cfg.Failovers, "failover", recovery.Strategies, "failover strategies to run, in order (full, region, approximate, task)")
	cmd.Flags().DurationVar(&cfg.Duration, "duration", recovery.DefaultDuration, "length of each run")
	cmd.Flags().DurationVar(&cfg.FailAfter, "fail-after", recovery.DefaultFailAfter, "when map[1] fails, after the job started")
	cmd.Flags().Float64Var(&cfg.Rate, "rate", recovery.DefaultRate, "records per second over all source subtasks (0: as fast as possible)")
	cmd.Flags().IntVar(&cfg.Keys, "keys", recovery.DefaultKeys, "distinct keys (a multiple of the parallelism 4)")
	cmd.Flags().DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", recovery.DefaultCheckpointInterval, "checkpoint interval")
	ua.register(cmd.Flags(), "every run")
	cmd.Flags().StringVar(&cfg.Scenario, "scenario", recovery.ScenarioBeforeShuffle, "where the failing map sits: before-shuffle (it feeds every check subtask) or after-state (downstream of the keyed state)")
	cmd.Flags().IntVar(&cfg.StateBytes, "state-bytes", 0, "payload bytes per key in the check operator's state (0: 32 bytes of counters)")
	cmd.Flags().StringVar(&cfg.StateBackend, "state-backend", "memory", "keyed state backend: memory or pebble")
	cmd.Flags().DurationVar(&cfg.BufferTimeout, "buffer-timeout", recovery.DefaultBufferTimeout, "network buffer timeout: the resolution of the sink-side timings")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per strategy per line")
	cmd.Flags().StringVar(&plotPath, "plot", "", "write an SVG image of the records per second around the failure, one panel per strategy, to this file")
	cmd.Flags().DurationVar(&cfg.SeriesBucket, "series-bucket", recovery.DefaultSeriesBucket, "width of the buckets of the throughput series (--plot, and \"series\" in --json); a multiple of 1ms")
	return cmd
}

// startCPUProfile starts a CPU profile of the process into the file path names ("": none) and returns
// what stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, usageError(fmt.Errorf("invalid --cpuprofile: %w", err))
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeJSONLines writes each of a benchmark's results as one JSON line (--json).
func writeJSONLines[T any](w io.Writer, res []T) error {
	enc := json.NewEncoder(w)
	for _, r := range res {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

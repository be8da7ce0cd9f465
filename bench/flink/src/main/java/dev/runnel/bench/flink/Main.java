package dev.runnel.bench.flink;

import dev.runnel.bench.flink.nexmark.NexmarkJob;
import dev.runnel.bench.flink.nexmark.Query;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import java.io.IOException;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * Runs one of Runnel's benchmark jobs on Apache Flink, in an embedded MiniCluster (standalone-kill:
 * on a standalone cluster of separate JVMs, see {@link StandaloneKill}), and prints one JSON object as
 * the last line of stdout.
 *
 * <pre>
 *   java -jar runnel-flink-bench.jar throughput  [--records N] [--keys N] [--parallelism N] [--checkpoint-interval MS]
 *   java -jar runnel-flink-bench.jar checkpoints [--sink-rate N] [--modes aligned,unaligned] [--runs N] ...
 *   java -jar runnel-flink-bench.jar recovery    [--failover region|full] [--duration 10s] [--fail-after 3s] [--rate N] ...
 *   java -jar runnel-flink-bench.jar approximate [same flags as recovery]
 *   java -jar runnel-flink-bench.jar standalone-kill [--failover region|approximate] [--heartbeat-interval 500ms ...]
 *   java -jar runnel-flink-bench.jar nexmark --query Q --input FILE [--output FILE] [--json] ...
 *   java -jar runnel-flink-bench.jar nexmark --query Q --events N --warmup 1 --runs 3 [--json]
 *   java -jar runnel-flink-bench.jar nexmark-limit --events N --parallelism 2 --runs 3
 *   java -jar runnel-flink-bench.jar kafka --bootstrap HOST:PORT [--input-topic T] [--records N] ...
 * </pre>
 */
public final class Main {
    static final String ENGINE = "flink-2.3.0";
    static final TypeInformation<Tuple2<Long, Long>> RECORD = Types.TUPLE(Types.LONG, Types.LONG);

    private Main() {}

    public static void main(String[] argv) throws Exception {
        if (argv.length == 0 || argv[0].equals("-h") || argv[0].equals("--help")) {
            usage(System.out);
            return;
        }
        String job = argv[0];
        // --json takes no value; only nexmark has it (every other job always prints JSON).
        boolean json = job.equals("nexmark") && List.of(argv).contains("--json");
        Map<String, String> flags = parseFlags(json ? Stream.of(argv).filter(a -> !a.equals("--json"))
                .toArray(String[]::new) : argv);
        Json result;
        switch (job) {
            case "throughput":
                result = throughput(flags);
                break;
            case "checkpoints":
                result = Checkpoints.run(flags);
                break;
            case "recovery":
                result = recovery(flags, false);
                break;
            case "approximate":
                result = recovery(flags, true);
                break;
            case "standalone-kill":
                result = StandaloneKill.run(flags);
                break;
            case "jm-kill":
                result = JmKill.run(flags);
                break;
            case "kafka":
                result = KafkaBench.run(flags);
                break;
            case "nexmark-generate": // JSON lines on stdout: no result object after them
                dev.runnel.bench.flink.nexmark.Generator.command(flags);
                return;
            case "nexmark-limit":
                result = nexmarkLimit(flags);
                break;
            case "nexmark":
                Map<String, Object> r = nexmark(flags);
                if (!json) {
                    System.out.println(NexmarkJob.describe(r));
                    System.out.flush();
                    System.exit(0);
                }
                result = new Json();
                r.forEach(result::put);
                break;
            default:
                System.err.println("unknown job: " + job);
                usage(System.err);
                System.exit(2);
                return;
        }
        // The machine's 1-minute load average at the end of the run: these runs share their cores.
        result.put("load_avg_1m", ManagementFactory.getOperatingSystemMXBean().getSystemLoadAverage());
        result.put("cores", Runtime.getRuntime().availableProcessors());
        System.out.println(result);
        System.out.flush();
        // Flink leaves non-daemon threads behind (e.g. the MiniCluster's I/O pools of a cancelled job).
        System.exit(0);
    }

    private static void usage(PrintStream out) {
        out.println("usage: java -jar runnel-flink-bench.jar JOB [flags]");
        out.println("  throughput   --records 20000000 --keys 1024 --parallelism 2 --checkpoint-interval 0 (ms, 0 = off)");
        out.println("               --warmup 0 --warmup-records N --runs 1: discarded runs first, then the median of the measured runs");
        out.println("  checkpoints  --sink-rate 20000 (records/s per sink subtask; sources 5x) --interval 1s --duration 20s");
        out.println("               --warmup 1 --checkpoints 5 --runs 2 --modes aligned,unaligned --segment-size 32768");
        out.println("               --keys 1024 --parallelism 2: aligned vs unaligned checkpoints behind a slow sink");
        out.println("  recovery     --parallelism 4 --keys 1024 --checkpoint-interval 200 --duration 10s --fail-after 3s");
        out.println("               --failover region|full --rate 500000 (records/s over all sources, 0 = unbounded)");
        out.println("               --buffer-timeout 5 (ms) --scheduler default|adaptive (jobmanager.scheduler)");
        out.println("  approximate  as recovery, with execution.state-recovery.approximate-local-recovery = true");
        out.println("  standalone-kill  the recovery job on a standalone cluster (1 JobManager + 3 TaskManager JVMs),");
        out.println("               SIGKILLs the TaskManager of map[1]: --failover region|approximate");
        out.println("               [--heartbeat-interval 500ms --heartbeat-timeout 1500ms] (Flink's defaults if unset)");
        out.println("               --kill-after 3s --wait 120s --settle 2s --restart-attempts 10, and recovery's flags");
        out.println("  jm-kill      Runnel's sequence job on a standalone cluster with ZooKeeper HA (ZooKeeper, 2 JobManagers,");
        out.println("               3 TaskManager JVMs), SIGKILLs the leading JobManager: --parallelism 4 --keys 16 --rate 1000");
        out.println("               (per source subtask) --duration 20s --checkpoint-interval 100ms --buffer-timeout 100ms");
        out.println("               --kill-after 3s --emit-every 10 --zk-session-timeout 2s --wait 180s --log-dir DIR");
        out.println("  nexmark-generate  --events 1000 [--rate 0 --seed 0 --base-time MS --output FILE]: the Nexmark");
        out.println("               generator's events as JSON lines (stdout by default); --rate only spaces the timestamps");
        out.println("  nexmark      --query Q (q0 … q22 but q10) (--input FILE (JSON lines) | --events N [--seed S])");
        out.println("               [--output FILE (JSON lines)] | --query Q1,Q2,... --input FILE --output-dir DIR (DIR/Q.jsonl each)");
        out.println("               --out-of-orderness 4s --parallelism 2 --checkpoint-interval 0 (off) [--json]");
        out.println("               --tuning nexmark (the Nexmark suite's table options: mini-batch, split distinct) | none");
        out.println("               without --output: into a blackhole sink, printing events/s; --runs 1 measured runs");
        out.println("               (median and range) after --warmup 0 discarded runs of --warmup-events (--events) each");
        out.println("  nexmark-limit  --events 10000000 --parallelism 2 --runs 3 --warmup 1: the generator alone on");
        out.println("               --parallelism threads, no engine (the bound for any query over it), events/s");
        out.println("  kafka        --bootstrap HOST:PORT (required) [--input-topic T] --records 10000000 --keys 1000");
        out.println("               --parallelism 2 --checkpoint-interval 1s --guarantee both|exactly-once|at-least-once");
        out.println("               --rounds 3 --warmup true --eos-first false --rate 20000 --latency-duration 10s --latency-skip 2s");
        out.println("               --keep-topics false: KafkaSource -> keyBy -> running count -> KafkaSink, as runnel bench kafka");
        out.println("durations take ms, s or m (a bare number is milliseconds)");
    }

    // ---- throughput -------------------------------------------------------------------------

    static Json throughput(Map<String, String> f) throws Exception {
        long records = longFlag(f, "records", 20_000_000L);
        long keys = longFlag(f, "keys", 1024);
        int p = (int) longFlag(f, "parallelism", 2);
        long ckptMs = durationMs(f, "checkpoint-interval", 0);
        int warmup = (int) longFlag(f, "warmup", 0);
        int runs = (int) longFlag(f, "runs", 1);
        long warmupRecords = longFlag(f, "warmup-records", records);
        checkUnused(f, "records", "keys", "parallelism", "checkpoint-interval", "warmup", "warmup-records", "runs");
        if (warmup < 0 || runs < 1 || warmupRecords < 1) {
            throw new IllegalArgumentException("throughput: --warmup must not be negative, --runs and --warmup-records at least 1");
        }
        // Warm-up runs in the same JVM (JIT, class loading, heap sizing), discarded; then the measured runs,
        // reported by the median of engine_rps with the range and every run's figure.
        for (int i = 0; i < warmup; i++) {
            throughputOnce(warmupRecords, keys, p, ckptMs);
        }
        List<Json> measured = new ArrayList<>();
        List<Long> rps = new ArrayList<>();
        for (int i = 0; i < runs; i++) {
            Json j = throughputOnce(records, keys, p, ckptMs);
            measured.add(j);
            rps.add((Long) j.get("engine_rps"));
        }
        List<Long> sorted = new ArrayList<>(rps);
        Collections.sort(sorted);
        Json j = measured.get(measured.size() - 1);
        j.put("runs_engine_rps", rps);
        j.put("engine_rps", sorted.get(sorted.size() / 2));
        j.put("engine_rps_min", sorted.get(0));
        j.put("engine_rps_max", sorted.get(sorted.size() - 1));
        j.put("warmup_runs", warmup);
        j.put("warmup_records", warmup > 0 ? warmupRecords : 0);
        Map<String, Object> setup = new java.util.LinkedHashMap<>();
        NexmarkJob.putSetup(setup);
        setup.forEach(j::put);
        return j;
    }

    static Json throughputOnce(long records, long keys, int p, long ckptMs) throws Exception {
        Probes.resetThroughput();
        Path dir = Files.createTempDirectory("runnel-flink-bench-");
        try {
            Configuration conf = baseConfig(ckptMs, dir);
            StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(p, conf);
            env.fromSource(new SeqSource(p, records, keys, SeqSource.Mode.SEQ, 0, false),
                            WatermarkStrategy.noWatermarks(), "generator", RECORD)
                    .uid("generator")
                    .map(new Functions.AddOne()).name("map").uid("map")
                    .keyBy(new Functions.KeyOf())
                    .reduce(new Functions.RunningSum()).name("sum").uid("sum")
                    .sinkTo(new Functions.ChecksumSink()).name("discard").uid("discard");

            long t0 = System.nanoTime();
            JobExecutionResult res = env.execute("runnel-bench-throughput");
            long t1 = System.nanoTime();

            long first = Probes.FIRST_EMIT.get();
            long last = Probes.LAST_SINK_END.get();
            double windowMs = (last - first) / 1e6;
            long seen = Probes.SINK_RECORDS.sum();
            Json j = new Json()
                    .put("engine", ENGINE)
                    .put("job", "throughput")
                    .put("engine_rps", Math.round(records / (windowMs / 1000.0)))
                    .put("records", records)
                    .put("keys", keys)
                    .put("parallelism", p)
                    .put("checkpoint_interval_ms", ckptMs)
                    .put("wall_ms", Math.round(windowMs))
                    .put("net_runtime_ms", res.getNetRuntime(TimeUnit.MILLISECONDS))
                    .put("execute_ms", Math.round((t1 - t0) / 1e6))
                    .put("records_out", seen);
            if (ckptMs > 0) {
                j.put("checkpoints_completed", Probes.CHECKPOINTS.size());
            }
            if (keys % p == 0) {
                // Each key is fed by one source subtask, so the sum of all emitted running sums is fixed.
                j.put("checksum_ok", Probes.SINK_CHECKSUM.sum() == expectedChecksum(records, keys, p));
            }
            if (seen != records) {
                j.put("error", "sink saw " + seen + " records, expected " + records);
            }
            return j;
        } finally {
            deleteTree(dir);
        }
    }

    /** Sum over all records of the running sum emitted for them, computed directly. */
    static long expectedChecksum(long records, long keys, int p) {
        long[] sums = new long[(int) keys];
        long total = 0;
        for (int s = 0; s < p; s++) {
            long share = records / p + (s < records % p ? 1 : 0);
            for (long seq = 0; seq < share; seq++) {
                int k = (int) ((seq * p + s) % keys);
                sums[k] += seq + 1;
                total += sums[k];
            }
        }
        return total;
    }

    // ---- recovery / approximate -------------------------------------------------------------

    static Json recovery(Map<String, String> f, boolean approximate) throws Exception {
        int p = (int) longFlag(f, "parallelism", 4);
        long keys = longFlag(f, "keys", 1024);
        long ckptMs = durationMs(f, "checkpoint-interval", 200);
        long durationMs = durationMs(f, "duration", 10_000);
        long failAfterMs = durationMs(f, "fail-after", 3_000);
        String failover = f.getOrDefault("failover", "region");
        f.remove("failover");
        String scheduler = f.getOrDefault("scheduler", "default");
        f.remove("scheduler");
        double rate = longFlag(f, "rate", 500_000);
        long bufferTimeoutMs = durationMs(f, "buffer-timeout", 5);
        checkUnused(f, "parallelism", "keys", "checkpoint-interval", "duration", "fail-after", "rate",
                "buffer-timeout");  // failover and scheduler were taken above
        if (!failover.equals("region") && !failover.equals("full")) {
            throw new IllegalArgumentException("--failover must be region or full");
        }
        if (!scheduler.equals("default") && !scheduler.equals("adaptive")) {
            throw new IllegalArgumentException("--scheduler must be default or adaptive");
        }
        if (keys % p != 0) {
            throw new IllegalArgumentException("--keys must be a multiple of --parallelism for the sequence checker");
        }

        Json j = new Json()
                .put("engine", ENGINE)
                .put("job", approximate ? "approximate" : "recovery")
                .put("failover", failover)
                .put("scheduler", scheduler)
                .put("approximate_local_recovery", approximate)
                .put("parallelism", p)
                .put("keys", keys)
                .put("source_rate_rps", (long) rate) // 0: unbounded
                .put("checkpoint_interval_ms", ckptMs)
                .put("buffer_timeout_ms", bufferTimeoutMs)
                .put("fail_after_ms", failAfterMs)
                .put("duration_ms", durationMs);

        Path dir = Files.createTempDirectory("runnel-flink-bench-");
        Thread sampler = null;
        JobClient client = null;
        try {
            Configuration conf = baseConfig(ckptMs, dir);
            conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
            conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 10);
            conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ZERO);
            conf.set(JobManagerOptions.EXECUTION_FAILOVER_STRATEGY, failover);
            conf.set(JobManagerOptions.SCHEDULER, scheduler.equals("adaptive")
                    ? JobManagerOptions.SchedulerType.Adaptive : JobManagerOptions.SchedulerType.Default);
            conf.set(ExecutionOptions.BUFFER_TIMEOUT, Duration.ofMillis(bufferTimeoutMs));
            if (approximate) {
                conf.set(StateRecoveryOptions.APPROXIMATE_LOCAL_RECOVERY, true);
            }
            Probes.initRecovery((int) keys, p, p);

            StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(p, conf);
            recoveryPipeline(env, p, keys, rate, TimeUnit.MILLISECONDS.toNanos(failAfterMs), new Functions.TimingSink(p));

            try {
                client = env.executeAsync("runnel-bench-" + (approximate ? "approximate" : "recovery"));
            } catch (Exception e) {
                return j.put("error", describe(e)).put("error_root", describe(rootCause(e)));
            }
            sampler = startSampler();

            // Run for --duration from the first record, or until the job ends by itself.
            long deadline = Long.MAX_VALUE;
            long startWait = System.nanoTime();
            JobStatus status = JobStatus.RUNNING;
            while (true) {
                long first = Probes.FIRST_EMIT.get();
                if (first != 0 && deadline == Long.MAX_VALUE) {
                    deadline = first + TimeUnit.MILLISECONDS.toNanos(durationMs);
                }
                long now = System.nanoTime();
                if (now >= deadline) {
                    break;
                }
                if (first == 0 && now - startWait > TimeUnit.SECONDS.toNanos(60)) {
                    j.put("error", "no record within 60 s of submission");
                    break;
                }
                status = client.getJobStatus().get();
                if (status.isGloballyTerminalState()) {
                    break;
                }
                Thread.sleep(20);
            }
            long runEnd = System.nanoTime();
            status = client.getJobStatus().get();
            j.put("job_status", status.toString());
            if (status.isGloballyTerminalState()) {
                try {
                    client.getJobExecutionResult().get();
                } catch (Exception e) {
                    j.put("error", describe(e)).put("error_root", describe(rootCause(e)));
                }
            } else {
                client.cancel().get(30, TimeUnit.SECONDS);
                // Let the cancelled job end (its per-job MiniCluster then shuts down) before the
                // checkpoint directory is deleted.
                try {
                    client.getJobExecutionResult().get(30, TimeUnit.SECONDS);
                } catch (Exception expected) {
                    // a cancelled job reports its cancellation as an exception
                }
            }
            sampler.interrupt();
            sampler.join();
            measure(j, p, runEnd);
            return j;
        } finally {
            if (sampler != null) {
                sampler.interrupt();
            }
            deleteTree(dir);
        }
    }

    /**
     * The recovery job's pipeline: generator -> map -> keyBy -> sequence checker -> {@code sink}.
     * Map subtask 0 throws once, {@code failAfterNanos} after the first record (-1: never).
     */
    static void recoveryPipeline(StreamExecutionEnvironment env, int p, long keys, double rate,
            long failAfterNanos, Sink<Tuple2<Long, Long>> sink) {
        env.setParallelism(p); // a remote environment's default is 1
        env.fromSource(new SeqSource(p, -1, keys, SeqSource.Mode.PER_KEY, rate / p, true),
                        WatermarkStrategy.noWatermarks(), "generator", RECORD)
                .uid("generator")
                // Its own task, so that the failing map is not the source itself: the source of
                // the affected path stays up if the failover strategy allows it.
                .map(new Functions.FailingMap(failAfterNanos, 0))
                .name("map").uid("map").disableChaining()
                .keyBy(new Functions.KeyOf())
                .process(new Functions.SeqChecker()).name("checker").uid("checker")
                .sinkTo(sink).name("sink").uid("sink");
    }

    /** Fills in the figures of a recovery run from the probes. */
    private static void measure(Json j, int p, long runEnd) {
        long first = Probes.FIRST_EMIT.get();
        long failAt = Probes.FAIL_AT.get();
        j.put("failure_injected", failAt != 0);

        List<long[]> samples;
        synchronized (Probes.SOURCE_SAMPLES) {
            samples = new ArrayList<>(Probes.SOURCE_SAMPLES);
        }
        if (System.getenv("BENCH_DEBUG") != null) {
            long lastT = 0;
            for (long[] s : samples) {
                if (s[0] - lastT >= 250_000_000L) {
                    System.err.printf("t=%.3fs emitted=%d%n", (s[0] - first) / 1e9, s[1]);
                    lastT = s[0];
                }
            }
            System.err.printf("fail at %.3fs emitted=%d checked=%d%n", (failAt - first) / 1e9, Probes.FAIL_EMITTED.get(), Probes.CHECKED.sum());
        }
        if (failAt != 0) {
            long warm = first + TimeUnit.MILLISECONDS.toNanos(500);
            long[] affected = pathOutage(0, p, runEnd, failAt, runEnd);
            long outageEnd = affected == null ? failAt : affected[1];
            j.put("outage_ms", affected == null ? 0.0 : ms(affected[1] - affected[0]));
            j.put("outage_recovered", affected == null || affected[1] < runEnd);
            j.put("failure_to_recovery_ms", ms(outageEnd - failAt));
            double unaffected = 0;
            for (int path = 1; path < p; path++) {
                long[] s = pathOutage(path, p, runEnd, failAt, outageEnd);
                if (s != null) {
                    unaffected = Math.max(unaffected, ms(s[1] - s[0]));
                }
            }
            j.put("unaffected_paths_max_stall_ms", unaffected);
            double baseline = 0;
            for (int path = 0; path < p; path++) {
                long[] s = longestStallWithin(pathStalls(path, p, runEnd), warm, failAt);
                if (s != null) {
                    baseline = Math.max(baseline, ms(s[1] - s[0]));
                }
            }
            j.put("baseline_max_stall_ms", baseline);

            long second = TimeUnit.SECONDS.toNanos(1);
            long failEmitted = Probes.FAIL_EMITTED.get();
            double before = (failEmitted - emittedAt(samples, failAt - second)) / 1.0; // per second
            double window = Math.max(outageEnd - failAt, 1);
            double during = (emittedAt(samples, outageEnd) - failEmitted) / (window / second);
            double after1s = emittedAt(samples, failAt + second) - failEmitted;
            j.put("source_rps_before", Math.round(before));
            j.put("source_rps_during_recovery", Math.round(during));
            j.put("upstream_throughput_ratio", before > 0 ? during / before : null);
            j.put("upstream_throughput_ratio_1s", before > 0 && failAt + second <= runEnd ? after1s / before : null);
        }
        long lost = Probes.LOST.sum();
        long dup = Probes.DUPLICATED.sum();
        long ooo = Probes.OUT_OF_ORDER.sum();
        long checked = Probes.CHECKED.sum();
        long distinct = 0;
        for (int k = 0; k < Probes.maxSeqPerKey.length(); k++) {
            distinct += Probes.maxSeqPerKey.get(k);
        }
        j.put("records_lost", lost);
        j.put("records_duplicated", dup);
        j.put("records_out_of_order", ooo);
        // Records the checker processed again after its state was rolled back to a checkpoint
        // (Flink's replay; invisible to the checker itself): processed - distinct - duplicates.
        j.put("records_replayed", Math.max(0, checked - (distinct - lost) - dup));
        j.put("records_checked", checked);
        j.put("restarted_subtasks", Probes.restartedSubtasks());
        j.put("subtasks", Probes.subtasksSeen());
        j.put("checkpoints_completed", Probes.CHECKPOINTS.size());
        j.put("run_ms", first == 0 ? 0.0 : ms(runEnd - first));
    }

    private static double ms(long nanos) {
        return Math.round(nanos / 1e4) / 100.0;
    }

    /**
     * The intervals during which no sink subtask saw a record of path {@code path}: the
     * intersection, over the sink subtasks that saw the path at all, of their silences.
     */
    static List<long[]> pathStalls(int path, int sinks, long runEnd) {
        Map<Integer, List<long[]>> bySink = new HashMap<>();
        for (long[] g : Probes.SINK_GAPS) {
            if (g[1] == path) {
                bySink.computeIfAbsent((int) g[0], k -> new ArrayList<>()).add(new long[] {g[2], g[3]});
            }
        }
        List<long[]> acc = null;
        for (int s = 0; s < sinks; s++) {
            long last = Probes.sinkLastSeen.get(s * sinks + path);
            if (last == 0) {
                continue; // this sink never saw the path
            }
            List<long[]> gaps = bySink.getOrDefault(s, new ArrayList<>());
            if (runEnd - last > Probes.GAP_NANOS) {
                gaps.add(new long[] {last, runEnd});
            }
            gaps.sort(Comparator.comparingLong(a -> a[0]));
            acc = acc == null ? gaps : intersect(acc, gaps);
        }
        return acc == null ? new ArrayList<>() : acc;
    }

    static List<long[]> intersect(List<long[]> a, List<long[]> b) {
        List<long[]> out = new ArrayList<>();
        int i = 0;
        int k = 0;
        while (i < a.size() && k < b.size()) {
            long lo = Math.max(a.get(i)[0], b.get(k)[0]);
            long hi = Math.min(a.get(i)[1], b.get(k)[1]);
            if (lo < hi) {
                out.add(new long[] {lo, hi});
            }
            if (a.get(i)[1] < b.get(k)[1]) {
                i++;
            } else {
                k++;
            }
        }
        return out;
    }

    /**
     * The outage of path {@code path} caused by the failure at {@code failAt}. If the path's map
     * subtask was restarted, it is the silence that its replacement ended: the first stall of the
     * path that ends at or after the replacement's first record. Otherwise (the path was never cut)
     * it is the longest stall overlapping [failAt, until].
     */
    static long[] pathOutage(int path, int sinks, long runEnd, long failAt, long until) {
        List<long[]> stalls = pathStalls(path, sinks, runEnd);
        long resumed = Probes.MAP_RESUMED.get(path);
        long[] best = null;
        if (resumed != 0) {
            for (long[] s : stalls) {
                if (s[1] >= resumed && (best == null || s[1] < best[1])) {
                    best = s;
                }
            }
            return best;
        }
        for (long[] s : stalls) {
            if (s[1] >= failAt && s[0] <= until && (best == null || s[1] - s[0] > best[1] - best[0])) {
                best = s;
            }
        }
        return best;
    }

    /** The longest stall lying entirely within [from, to]. */
    static long[] longestStallWithin(List<long[]> stalls, long from, long to) {
        long[] best = null;
        for (long[] s : stalls) {
            if (s[0] >= from && s[1] <= to && (best == null || s[1] - s[0] > best[1] - best[0])) {
                best = s;
            }
        }
        return best;
    }

    /** Sources' emitted total at time {@code t}, interpolated between samples. */
    static double emittedAt(List<long[]> samples, long t) {
        long[] prev = null;
        for (long[] s : samples) {
            if (s[0] >= t) {
                if (prev == null) {
                    return s[1];
                }
                double w = (double) (t - prev[0]) / Math.max(1, s[0] - prev[0]);
                return prev[1] + w * (s[1] - prev[1]);
            }
            prev = s;
        }
        return prev == null ? 0 : prev[1];
    }

    private static Thread startSampler() {
        Thread t = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                long[] s = {System.nanoTime(), Probes.sourceEmittedTotal()};
                synchronized (Probes.SOURCE_SAMPLES) {
                    Probes.SOURCE_SAMPLES.add(s);
                }
                try {
                    Thread.sleep(2);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "source-rate-sampler");
        t.setDaemon(true);
        t.start();
        return t;
    }

    // ---- nexmark ----------------------------------------------------------------------------

    static Map<String, Object> nexmark(Map<String, String> f) throws Exception {
        String query = f.get("query");
        String input = f.get("input");
        String output = f.get("output");
        int p = (int) longFlag(f, "parallelism", 2);
        long bound = durationMs(f, "out-of-orderness", 4_000);
        long ckptMs = durationMs(f, "checkpoint-interval", 0);
        long events = longFlag(f, "events", 0);
        long seed = longFlag(f, "seed", 0);
        int runs = (int) longFlag(f, "runs", 1);
        int warmup = (int) longFlag(f, "warmup", 0);
        long warmupEvents = longFlag(f, "warmup-events", events);
        String outputDir = f.get("output-dir");
        NexmarkJob.Tuning tuning = NexmarkJob.Tuning.of(f.getOrDefault("tuning", "nexmark"));
        checkUnused(f, "query", "input", "output", "output-dir", "parallelism", "out-of-orderness", "checkpoint-interval", "events",
                "seed", "runs", "warmup", "warmup-events", "tuning");
        if (outputDir != null) {
            // Several queries over one file in one JVM: DIR/Q.jsonl each (the equality test's way, which
            // saves a JVM and a MiniCluster start per query).
            if (query == null || input == null || output != null || runs != 1 || warmup != 0) {
                throw new IllegalArgumentException("nexmark: --output-dir takes --input FILE and --query Q1,Q2,... only");
            }
            List<Object> written = new ArrayList<>();
            for (String q : query.split(",")) {
                NexmarkJob.Options o = new NexmarkJob.Options(Query.of(q), p, bound, ckptMs, tuning);
                written.add(NexmarkJob.run(o, nexmarkSource(input, 0, p, seed), Path.of(outputDir, q + ".jsonl")).get("output"));
            }
            Map<String, Object> r = new java.util.LinkedHashMap<>();
            r.put("engine", "flink-2.3.0");
            r.put("job", "nexmark");
            r.put("query", query);
            r.put("source", input);
            r.put("outputs", written);
            return r;
        }
        if (query == null || (input == null) == (events == 0)) {
            throw new IllegalArgumentException("nexmark needs --query Q and one of --input FILE or --events N");
        }
        if (runs < 1 || warmup < 0 || (warmup > 0 && input == null && warmupEvents < 1)) {
            throw new IllegalArgumentException("nexmark: --runs must be at least 1, --warmup at least 0, --warmup-events at least 1");
        }
        if (output != null && runs + warmup > 1) {
            throw new IllegalArgumentException("nexmark: --output writes one result: leave out --runs and --warmup");
        }
        NexmarkJob.Options o = new NexmarkJob.Options(Query.of(query), p, bound, ckptMs, tuning);
        // Warm-up runs go through the same JVM first (JIT, class loading, heap sizing) and are discarded.
        for (int i = 0; i < warmup; i++) {
            NexmarkJob.run(o, nexmarkSource(input, warmupEvents, p, seed), null);
        }
        List<Map<String, Object>> measured = new ArrayList<>();
        for (int i = 0; i < runs; i++) {
            measured.add(NexmarkJob.run(o, nexmarkSource(input, events, p, seed), output == null ? null : Path.of(output)));
        }
        Map<String, Object> r = measured.get(measured.size() - 1);
        if (output == null) {
            List<Long> eps = new ArrayList<>();
            for (Map<String, Object> m : measured) {
                eps.add((Long) m.get("events_per_s"));
            }
            r.put("runs_events_per_s", eps);
            List<Long> sorted = new ArrayList<>(eps);
            Collections.sort(sorted);
            r.put("events_per_s", sorted.get(sorted.size() / 2));
            r.put("events_per_s_min", sorted.get(0));
            r.put("events_per_s_max", sorted.get(sorted.size() - 1));
        }
        r.put("warmup_runs", warmup);
        r.put("warmup_events", warmup > 0 ? warmupEvents : 0);
        NexmarkJob.putSetup(r);
        return r;
    }

    /** The input of one run: the file, or the generator ported from examples/nexmark. */
    static NexmarkJob.Source nexmarkSource(String input, long events, int p, long seed) throws IOException {
        if (input != null) {
            return NexmarkJob.fileSource(Path.of(input));
        }
        // The same events as `runnel bench nexmark`, unthrottled, at the nominal rate for their timestamps.
        return NexmarkJob.streamSource("generator", events, env -> env
                .fromSource(new dev.runnel.bench.flink.nexmark.NexmarkSource(p, events, 0, seed, 0),
                        org.apache.flink.api.common.eventtime.WatermarkStrategy.noWatermarks(), "nexmark")
                .setParallelism(p)
                .map(dev.runnel.bench.flink.nexmark.Model::toRow)
                .returns(dev.runnel.bench.flink.nexmark.Model.ROW_TYPE));
    }

    /** nexmark-limit: the generator alone on --parallelism threads, no engine; events/s per run. */
    static Json nexmarkLimit(Map<String, String> f) throws Exception {
        int p = (int) longFlag(f, "parallelism", 2);
        long events = longFlag(f, "events", 10_000_000L);
        long seed = longFlag(f, "seed", 0);
        int runs = (int) longFlag(f, "runs", 3);
        int warmup = (int) longFlag(f, "warmup", 1);
        checkUnused(f, "parallelism", "events", "seed", "runs", "warmup");
        if (p < 1 || events < 1 || runs < 1 || warmup < 0) {
            throw new IllegalArgumentException("nexmark-limit: --parallelism, --events and --runs must be positive, --warmup not negative");
        }
        for (int i = 0; i < warmup; i++) {
            dev.runnel.bench.flink.nexmark.GeneratorLimit.once(p, events, seed);
        }
        List<Long> eps = new ArrayList<>();
        for (int i = 0; i < runs; i++) {
            eps.add(Math.round(dev.runnel.bench.flink.nexmark.GeneratorLimit.once(p, events, seed)));
        }
        List<Long> sorted = new ArrayList<>(eps);
        Collections.sort(sorted);
        Json r = new Json();
        r.put("engine", "java-generator");
        r.put("job", "nexmark-limit");
        r.put("events", events);
        r.put("parallelism", p);
        r.put("warmup_runs", warmup);
        r.put("runs_events_per_s", eps);
        r.put("events_per_s", sorted.get(sorted.size() / 2));
        r.put("events_per_s_min", sorted.get(0));
        r.put("events_per_s_max", sorted.get(sorted.size() - 1));
        Map<String, Object> setup = new java.util.LinkedHashMap<>();
        NexmarkJob.putSetup(setup);
        setup.forEach(r::put);
        return r;
    }

    // ---- configuration ----------------------------------------------------------------------

    static Configuration baseConfig(long checkpointIntervalMs, Path dir) {
        Configuration conf = new Configuration();
        conf.set(ExecutionOptions.RUNTIME_MODE, RuntimeExecutionMode.STREAMING);
        // Safe here: no function keeps a reference to an input record or changes one it emitted.
        conf.set(PipelineOptions.OBJECT_REUSE, true);
        conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
        conf.set(RestOptions.BIND_PORT, "0");
        conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
        if (checkpointIntervalMs > 0) {
            conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(checkpointIntervalMs));
            conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
            conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, dir.toUri().toString());
        }
        return conf;
    }

    // ---- flags and helpers ------------------------------------------------------------------

    static Map<String, String> parseFlags(String[] argv) {
        Map<String, String> f = new HashMap<>();
        for (int i = 1; i < argv.length; i++) {
            String a = argv[i];
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument: " + a);
            }
            String name = a.substring(2);
            String value;
            int eq = name.indexOf('=');
            if (eq >= 0) {
                value = name.substring(eq + 1);
                name = name.substring(0, eq);
            } else if (i + 1 < argv.length) {
                value = argv[++i];
            } else {
                throw new IllegalArgumentException("flag --" + name + " needs a value");
            }
            f.put(name, value);
        }
        return f;
    }

    static void checkUnused(Map<String, String> f, String... known) {
        for (String k : known) {
            f.remove(k);
        }
        if (!f.isEmpty()) {
            throw new IllegalArgumentException("unknown flags: " + f.keySet());
        }
    }

    static long longFlag(Map<String, String> f, String name, long def) {
        String v = f.get(name);
        return v == null ? def : Long.parseLong(v.replace("_", ""));
    }

    /** "250ms", "3s", "1.5s", "2m"; a bare number is milliseconds. */
    static long durationMs(Map<String, String> f, String name, long def) {
        String v = f.get(name);
        if (v == null) {
            return def;
        }
        v = v.trim().toLowerCase(Locale.ROOT);
        if (v.endsWith("ms")) {
            return Math.round(Double.parseDouble(v.substring(0, v.length() - 2)));
        } else if (v.endsWith("s")) {
            return Math.round(Double.parseDouble(v.substring(0, v.length() - 1)) * 1000);
        } else if (v.endsWith("m")) {
            return Math.round(Double.parseDouble(v.substring(0, v.length() - 1)) * 60_000);
        }
        return Math.round(Double.parseDouble(v));
    }

    /** The exception chain, each as "Class: message", joined by " <- caused by: ". */
    static String describe(Throwable t) {
        StringBuilder b = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (b.length() > 0) {
                b.append(" | caused by: ");
            }
            b.append(c.getClass().getName()).append(": ").append(c.getMessage());
        }
        return b.toString();
    }

    static Throwable rootCause(Throwable t) {
        while (t.getCause() != null && t.getCause() != t) {
            t = t.getCause();
        }
        return t;
    }

    static void deleteTree(Path dir) {
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(q -> q.toFile().delete());
        } catch (IOException e) {
            // best effort
        }
    }
}

package dev.runnel.bench.flink;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.configuration.HighAvailabilityOptions;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.WebOptions;
import org.apache.flink.runtime.clusterframework.TaskExecutorProcessSpec;
import org.apache.flink.runtime.clusterframework.TaskExecutorProcessUtils;
import org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint;
import org.apache.flink.runtime.jobmanager.JobManagerProcessSpec;
import org.apache.flink.runtime.jobmanager.JobManagerProcessUtils;
import org.apache.flink.runtime.taskexecutor.TaskManagerRunner;
import org.apache.flink.runtime.util.config.memory.ProcessMemoryUtils;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * The {@code jm-kill} job: the Flink side of {@code runnel bench jm-loss} (docs/cluster.md §6.4). A
 * standalone Flink cluster with ZooKeeper high availability: a ZooKeeper server, two JobManager JVMs
 * ({@code high-availability.type: zookeeper}, one storage directory) and three TaskManagers, all
 * separate processes started from the harness's shaded jar. The job is Runnel's sequence job; once it
 * runs steadily the leading JobManager is SIGKILLed, and the figures come from the sink's own log of
 * when each report arrived, as in Runnel's bench.
 *
 * <p>The ZooKeeper server is {@code ZooKeeperServerMain} of the ZooKeeper that flink-runtime already
 * depends on (flink-shaded-zookeeper-3, ZooKeeper 3.7.2, relocated under
 * {@code org.apache.flink.shaded.zookeeper3}): the very version Flink's own client speaks, and in the
 * shaded jar already, so no other artifact is needed.
 *
 * <p>It owns every process it starts: the {@code finally} of {@link #run} (or a shutdown hook, if the
 * harness is stopped) SIGKILLs them all.
 */
final class JmKill {
    private JmKill() {}

    static final int TASKMANAGERS = 3;
    static final int SLOTS_PER_TASKMANAGER = 2;
    static final String ZK_MAIN = "org.apache.flink.shaded.zookeeper3.org.apache.zookeeper.server.ZooKeeperServerMain";
    /**
     * The standby's log line when its Dispatcher leads (Flink 2.3.0's wording); its time is the
     * takeover. The ResourceManager and the REST endpoint are granted leadership around it.
     */
    static final String DISPATCHER_GRANTED = "DefaultDispatcherRunner was granted leadership";

    static Json run(Map<String, String> f) throws Exception {
        int p = (int) Main.longFlag(f, "parallelism", 4);
        long keys = Main.longFlag(f, "keys", 16);
        double rate = Main.longFlag(f, "rate", 1000); // per source subtask, as runnel's --rate
        long durationMs = Main.durationMs(f, "duration", 20_000);
        long ckptMs = Main.durationMs(f, "checkpoint-interval", 100);
        long bufferTimeoutMs = Main.durationMs(f, "buffer-timeout", 100); // Runnel's default
        long killAfterMs = Main.durationMs(f, "kill-after", 3_000);
        long emitEvery = Main.longFlag(f, "emit-every", 10);
        long sessionMs = Main.durationMs(f, "zk-session-timeout", 2_000);
        long waitMs = Main.durationMs(f, "wait", 180_000);
        String logDirFlag = f.remove("log-dir");
        Main.checkUnused(f, "parallelism", "keys", "rate", "duration", "checkpoint-interval", "buffer-timeout",
                "kill-after", "emit-every", "zk-session-timeout", "wait");
        long records = (long) (rate * durationMs / 1000.0) * p;
        long stride = keys / p;
        if (keys % p != 0 || (records / p) % stride != 0) {
            throw new IllegalArgumentException("--keys must be a multiple of --parallelism, and each subtask's records ("
                    + records / p + ") a multiple of the keys it owns (" + stride + ")");
        }
        if (p > (TASKMANAGERS) * SLOTS_PER_TASKMANAGER) {
            throw new IllegalArgumentException("--parallelism must be at most " + TASKMANAGERS * SLOTS_PER_TASKMANAGER);
        }
        long perKey = records / keys;

        Path dir = Files.createTempDirectory("runnel-flink-jm-kill-");
        Path sinkDir = Files.createDirectories(dir.resolve("sinks"));
        Path ckptDir = Files.createDirectories(dir.resolve("checkpoints"));
        Path haDir = Files.createDirectories(dir.resolve("ha"));
        Path zkDir = Files.createDirectories(dir.resolve("zookeeper"));

        Configuration jobConf = Main.baseConfig(ckptMs, ckptDir);
        jobConf.removeConfig(RestOptions.BIND_PORT);
        jobConf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
        jobConf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 1000);
        jobConf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ZERO);
        jobConf.set(ExecutionOptions.BUFFER_TIMEOUT, Duration.ofMillis(bufferTimeoutMs));

        Json j = new Json()
                .put("engine", Main.ENGINE)
                .put("job", "jm-kill")
                .put("mode", "restart")
                .put("ha", "zookeeper")
                .put("zk_session_timeout_ms", sessionMs)
                .put("taskmanagers", TASKMANAGERS)
                .put("slots_per_taskmanager", SLOTS_PER_TASKMANAGER)
                .put("parallelism", p)
                .put("keys", keys)
                .put("rate", (long) rate)
                .put("records", records)
                .put("checkpoint_interval_ms", ckptMs)
                .put("buffer_timeout_ms", bufferTimeoutMs)
                .put("emit_every", emitEvery);

        Path jar = StandaloneKill.harnessJar();
        Path logDir = logDirFlag != null ? Paths.get(logDirFlag) : jar.getParent().resolve("logs");
        Files.createDirectories(logDir);
        String logPrefix = "jm-kill";
        StandaloneKill.Cluster launcher = new StandaloneKill.Cluster(jar, dir, logDir, logPrefix);
        List<Process> zk = new ArrayList<>();
        Thread hook = new Thread(() -> {
            launcher.killAll();
            zk.forEach(Process::destroyForcibly);
        }, "kill-flink-jm-kill");
        Runtime.getRuntime().addShutdownHook(hook);
        try {
            int zkPort = StandaloneKill.freePort();
            zk.add(startZooKeeper(jar, zkDir, zkPort, sessionMs, logDir.resolve(logPrefix + "-zookeeper.log").toFile()));
            awaitPort(zkPort, zk.get(0));

            Configuration common = new Configuration(jobConf);
            common.set(HighAvailabilityOptions.HA_MODE, "zookeeper");
            common.set(HighAvailabilityOptions.HA_ZOOKEEPER_QUORUM, "127.0.0.1:" + zkPort);
            common.set(HighAvailabilityOptions.HA_STORAGE_PATH, haDir.toUri().toString());
            common.set(HighAvailabilityOptions.HA_CLUSTER_ID, "/jm-kill");
            common.set(HighAvailabilityOptions.ZOOKEEPER_SESSION_TIMEOUT, Duration.ofMillis(sessionMs));
            common.set(JobManagerOptions.BIND_HOST, "127.0.0.1");
            common.set(RestOptions.ADDRESS, "127.0.0.1");
            common.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
            common.set(TaskManagerOptions.HOST, "127.0.0.1");
            common.set(TaskManagerOptions.BIND_HOST, "127.0.0.1");
            common.set(TaskManagerOptions.NUM_TASK_SLOTS, SLOTS_PER_TASKMANAGER);
            common.set(JobManagerOptions.TOTAL_PROCESS_MEMORY, StandaloneKill.JOBMANAGER_PROCESS);
            common.set(TaskManagerOptions.TOTAL_PROCESS_MEMORY, StandaloneKill.TASKMANAGER_PROCESS);
            common.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.ZERO);
            common.set(WebOptions.MAX_EXCEPTION_HISTORY_SIZE, 1000);
            j.put("zk_session_timeout_ms", common.get(HighAvailabilityOptions.ZOOKEEPER_SESSION_TIMEOUT).toMillis());

            // Two JobManagers, each with its own RPC and REST port; the first leads (it starts alone).
            Map<String, Integer> restPorts = new HashMap<>();
            Map<String, Process> jms = new HashMap<>();
            for (String name : List.of("jm-a", "jm-b")) {
                Configuration jm = new Configuration(common);
                jm.set(JobManagerOptions.ADDRESS, "127.0.0.1");
                jm.set(JobManagerOptions.PORT, StandaloneKill.freePort());
                jm.set(HighAvailabilityOptions.HA_JOB_MANAGER_PORT_RANGE, Integer.toString(jm.get(JobManagerOptions.PORT)));
                int rest = StandaloneKill.freePort();
                jm.set(RestOptions.PORT, rest);
                restPorts.put(name, rest);
                Path tmp = Files.createDirectories(dir.resolve("tmp-" + name));
                jm.set(CoreOptions.TMP_DIRS, tmp.toString());
                jm.set(WebOptions.TMP_DIR, tmp.toString());
                JobManagerProcessSpec spec = JobManagerProcessUtils.processSpecFromConfig(jm);
                jms.put(name, launcher.launch(name, jm, StandaloneSessionClusterEntrypoint.class.getName(),
                        JobManagerProcessUtils.generateJvmParametersStr(spec, jm),
                        JobManagerProcessUtils.generateDynamicConfigsStr(spec)));
                if (name.equals("jm-a")) {
                    awaitLog(logDir.resolve(logPrefix + "-jm-a.log"), DISPATCHER_GRANTED, 0, 90_000, jms.get(name));
                }
            }
            for (int i = 0; i < TASKMANAGERS; i++) {
                String id = "tm-" + i;
                Configuration tm = new Configuration(common);
                tm.set(TaskManagerOptions.TASK_MANAGER_RESOURCE_ID, id);
                tm.set(CoreOptions.TMP_DIRS, Files.createDirectories(dir.resolve("tmp-" + id)).toString());
                TaskExecutorProcessSpec spec = TaskExecutorProcessUtils.processSpecFromConfig(tm);
                launcher.launch(id, tm, TaskManagerRunner.class.getName(), ProcessMemoryUtils.generateJvmParametersStr(spec),
                        TaskExecutorProcessUtils.generateDynamicConfigsStr(spec));
            }
            StandaloneKill.Rest leaderRest = new StandaloneKill.Rest(restPorts.get("jm-a"));
            StandaloneKill.Rest standbyRest = new StandaloneKill.Rest(restPorts.get("jm-b"));
            awaitSlots(leaderRest, 90_000);
            j.put("logs", logDir.resolve(logPrefix + "-*.log").toString());

            StreamExecutionEnvironment env = StreamExecutionEnvironment.createRemoteEnvironment(
                    "127.0.0.1", restPorts.get("jm-a"), common, StandaloneKill.userJar(jar, dir).toString());
            pipeline(env, p, records, keys, rate, emitEvery, perKey, sinkDir.toString());
            String job = env.executeAsync("runnel-bench-jm-kill").getJobID().toHexString();
            measure(j, leaderRest, standbyRest, jms.get("jm-a"), logDir.resolve(logPrefix + "-jm-b.log"), job, sinkDir,
                    killAfterMs, waitMs, keys, perKey);
            return j;
        } catch (Exception e) {
            return j.put("error", Main.describe(e)).put("error_root", Main.describe(Main.rootCause(e)));
        } finally {
            launcher.killAll();
            for (Process z : zk) {
                z.destroyForcibly();
                z.waitFor(10, TimeUnit.SECONDS);
            }
            Runtime.getRuntime().removeShutdownHook(hook);
            Main.deleteTree(dir);
        }
    }

    /**
     * The sequence job as Runnel's: source → map (chained) → keyBy → check (parallelism P) → sink
     * (parallelism 1). The check reports a key's counters every {@code emitEvery} of its records, on
     * every anomaly and at its last record.
     */
    static void pipeline(StreamExecutionEnvironment env, int p, long records, long keys, double rate, long emitEvery,
            long perKey, String sinkDir) {
        env.setParallelism(p);
        env.fromSource(new SeqSource(p, records, keys, SeqSource.Mode.PER_KEY, rate, false),
                        WatermarkStrategy.noWatermarks(), "source", Main.RECORD)
                .uid("source")
                .map(new Functions.FailingMap(-1, 0)).name("map").uid("map")
                .keyBy(new Functions.KeyOf())
                .process(new Check(emitEvery, perKey)).name("check").uid("check")
                .sinkTo(new ProgressSink(sinkDir)).name("sink").uid("sink").setParallelism(1);
    }

    /** A key's counters, as the check reports them to the sink. */
    public static final class Report {
        public long key;
        public long last;
        public long lost;
        public long duplicated;
        public long outOfOrder;
        public boolean finalReport; // the report of the key's last record

        public Report() {}
    }

    /**
     * The keyed sequence checker of the job: its state ({@link SeqState}, restored with the job's
     * checkpoint) holds the highest value seen and a 64-wide bitmap below it, plus the counts. A
     * jump forward counts the skipped values as lost; a value seen before (or older than the window)
     * as duplicated; one not seen before behind the highest as out of order, and no longer lost.
     */
    static final class Check extends KeyedProcessFunction<Long, Tuple2<Long, Long>, Report> {
        private final long every;
        private final long perKey;
        private transient ValueState<SeqState> state;

        Check(long every, long perKey) {
            this.every = every;
            this.perKey = perKey;
        }

        /** The checker's keyed state. */
        public static final class SeqState {
            public long last;
            public long window;
            public long lost;
            public long duplicated;
            public long outOfOrder;

            public SeqState() {}
        }

        @Override
        public void open(OpenContext ctx) {
            state = getRuntimeContext().getState(new ValueStateDescriptor<>("seq", SeqState.class));
        }

        @Override
        public void processElement(Tuple2<Long, Long> r, Context ctx, Collector<Report> out) throws Exception {
            long v = r.f1; // 1, 2, 3, ... per key (the map adds 1)
            SeqState st = state.value();
            if (st == null) {
                st = new SeqState();
                st.window = 1;
            }
            boolean anomaly = true;
            if (v > st.last) {
                long d = v - st.last;
                if (d > 1) {
                    st.lost += d - 1;
                } else {
                    anomaly = false;
                }
                st.window = d >= 64 ? 1 : (st.window << d) | 1;
                st.last = v;
            } else {
                long d = st.last - v;
                if (d >= 64 || (st.window & (1L << d)) != 0) {
                    st.duplicated++;
                } else {
                    st.outOfOrder++;
                    st.lost--;
                    st.window |= 1L << d;
                }
            }
            state.update(st);
            if (anomaly || v % every == 0 || v == perKey) {
                Report rep = new Report();
                rep.key = r.f0;
                rep.last = st.last;
                rep.lost = st.lost;
                rep.duplicated = st.duplicated;
                rep.outOfOrder = st.outOfOrder;
                rep.finalReport = v == perKey;
                out.collect(rep);
            }
        }
    }

    /**
     * The sink: each writer appends to its own file {@code sink-<attempt>-<pid>-<nanos>.log} in a
     * directory all JVMs share: {@code start <t>}, then {@code w <t>} for every report it receives and
     * {@code final <key> <last> <lost> <duplicated> <out of order>} for a key's report of its last
     * record. Times are wall-clock epoch microseconds. Lines are kept in memory for at most 10 ms
     * while reports arrive and written whole, as Runnel's sequence sink does with --progress-dir.
     */
    static final class ProgressSink implements Sink<Report> {
        private final String dir;

        ProgressSink(String dir) {
            this.dir = dir;
        }

        @Override
        public SinkWriter<Report> createWriter(WriterInitContext ctx) throws IOException {
            int attempt = ctx.getTaskInfo().getAttemptNumber();
            Path file = Paths.get(dir, "sink-" + attempt + "-" + ProcessHandle.current().pid() + "-" + System.nanoTime() + ".log");
            OutputStream out = Files.newOutputStream(file, StandardOpenOption.CREATE_NEW, StandardOpenOption.APPEND);
            final long wallBase = Probes.epochMicros();
            final long nanoBase = System.nanoTime();
            out.write(("start " + wallBase + "\n").getBytes(StandardCharsets.US_ASCII));
            out.flush();
            return new SinkWriter<>() {
                private final StringBuilder buf = new StringBuilder();
                private long flushed = nanoBase;

                @Override
                public void write(Report r, Context c) throws IOException {
                    long now = System.nanoTime();
                    buf.append("w ").append(wallBase + (now - nanoBase) / 1_000L).append('\n');
                    if (r.finalReport) {
                        buf.append("final ").append(r.key).append(' ').append(r.last).append(' ').append(r.lost).append(' ')
                                .append(r.duplicated).append(' ').append(r.outOfOrder).append('\n');
                    }
                    if (now - flushed >= 10_000_000L) {
                        flush(false);
                    }
                }

                @Override
                public void flush(boolean endOfInput) throws IOException {
                    flushed = System.nanoTime();
                    if (buf.length() > 0) {
                        out.write(buf.toString().getBytes(StandardCharsets.US_ASCII));
                        buf.setLength(0);
                    }
                }

                @Override
                public void close() throws IOException {
                    flush(true);
                    out.close();
                }
            };
        }
    }

    /** The run after submission: steady state, the kill, the takeover, the job's end, the figures. */
    private static void measure(Json j, StandaloneKill.Rest leader, StandaloneKill.Rest standby, Process leaderProc,
            Path standbyLog, String job, Path sinkDir, long killAfterMs, long waitMs, long keys, long perKey) throws Exception {
        // 1. Every task running, a checkpoint completed: steady. Then --kill-after more.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        while (true) {
            JsonNode info = leader.get("/jobs/" + job);
            String state = info.path("state").asText();
            long completed = leader.get("/jobs/" + job + "/checkpoints").path("counts").path("completed").asLong();
            if (state.equals("RUNNING") && allRunning(info) && completed > 0) {
                break;
            }
            if (StandaloneKill.isTerminal(state) || System.nanoTime() > deadline) {
                throw new IllegalStateException("job " + job + " not running with a completed checkpoint within 90 s (" + state + ")");
            }
            Thread.sleep(10);
        }
        long steadyAt = Probes.epochMicros();
        Thread.sleep(killAfterMs);
        j.put("checkpoints_before_kill", leader.get("/jobs/" + job + "/checkpoints").path("counts").path("completed").asLong());

        // 2. SIGKILL the leader (Process.destroyForcibly() on Linux); its exit code 137 shows it.
        long killedAt = Probes.epochMicros();
        leaderProc.destroyForcibly();
        if (!leaderProc.waitFor(10, TimeUnit.SECONDS)) {
            throw new IllegalStateException("the leading JobManager (pid " + leaderProc.pid() + ") alive 10 s after SIGKILL");
        }
        j.put("killed_exit_code", leaderProc.exitValue());

        // 3. The takeover: the standby's Dispatcher granted leadership (its log line's time).
        long takeoverAt = awaitLog(standbyLog, DISPATCHER_GRANTED, killedAt, waitMs, null);

        // 4. The job's end under the new leader.
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(waitMs);
        String state = "";
        while (System.nanoTime() < end) {
            try {
                state = standby.getOnce("/jobs/" + job).path("state").asText();
            } catch (IOException notYet) {
                state = "(not known to the new leader yet)";
            }
            if (StandaloneKill.isTerminal(state)) {
                break;
            }
            Thread.sleep(50);
        }
        j.put("job_status", state);
        JsonNode ck = standby.get("/jobs/" + job + "/checkpoints");
        JsonNode restored = ck.path("latest").path("restored");
        if (restored.has("id")) {
            j.put("checkpoint_restored", restored.path("id").asLong());
        }
        if (!state.equals("FINISHED")) {
            throw new IllegalStateException("the job did not finish within " + waitMs + " ms of the kill: " + state);
        }
        SinkLogs logs = SinkLogs.read(sinkDir);
        measureLogs(j, logs, steadyAt, killedAt, takeoverAt);
        long[] c = logs.checker(keys, perKey);
        j.put("records_expected", keys * perKey)
                .put("records_checked", c[0])
                .put("records_lost", c[1])
                .put("records_duplicated", c[2])
                .put("records_out_of_order", c[3])
                .put("keys_complete", c[4])
                .put("exactly_once", c[0] == keys * perKey && c[1] == 0 && c[2] == 0 && c[3] == 0 && c[4] == keys);
    }

    /** What the sink writers logged: per writer its start and report times; the final reports. */
    static final class SinkLogs {
        final List<long[]> writers = new ArrayList<>(); // {start, t1, t2, ...}
        /** Per key its last final report: {last, lost, duplicated, out of order}. */
        final Map<Long, long[]> finals = new HashMap<>();

        static SinkLogs read(Path dir) throws IOException {
            SinkLogs l = new SinkLogs();
            List<Path> files;
            try (Stream<Path> s = Files.list(dir)) {
                files = s.sorted().toList();
            }
            for (Path f : files) {
                l.parse(f.getFileName().toString(), Files.readString(f, StandardCharsets.US_ASCII));
            }
            return l;
        }

        void parse(String name, String text) throws IOException {
            text = text.substring(0, text.lastIndexOf('\n') + 1); // whole lines only
            List<Long> ts = new ArrayList<>();
            for (String line : text.split("\n")) {
                if (line.isEmpty()) {
                    continue;
                }
                String[] w = line.split(" ");
                try {
                    switch (w[0]) {
                        case "start":
                            if (!ts.isEmpty()) {
                                throw new IOException("a second start line in " + name);
                            }
                            ts.add(Long.parseLong(w[1]));
                            break;
                        case "w":
                            if (ts.isEmpty()) {
                                throw new IOException("a report before the start line in " + name);
                            }
                            ts.add(Long.parseLong(w[1]));
                            break;
                        case "final":
                            finals.put(Long.parseLong(w[1]), new long[] {Long.parseLong(w[2]), Long.parseLong(w[3]),
                                Long.parseLong(w[4]), Long.parseLong(w[5])});
                            break;
                        default:
                            throw new IOException("unknown line in " + name + ": " + line);
                    }
                } catch (ArrayIndexOutOfBoundsException | NumberFormatException e) {
                    throw new IOException("malformed line in " + name + ": " + line, e);
                }
            }
            if (ts.isEmpty()) {
                throw new IOException("no start line in " + name);
            }
            writers.add(ts.stream().mapToLong(Long::longValue).toArray());
        }

        /** {records checked, lost, duplicated, out of order, keys complete} from the keys' final reports. */
        long[] checker(long keys, long perKey) {
            long[] c = new long[5];
            for (long k = 0; k < keys; k++) {
                long[] f = finals.get(k);
                if (f == null) {
                    continue;
                }
                c[0] += f[0] - f[1]; // the highest value, less those never seen
                c[1] += f[1];
                c[2] += f[2];
                c[3] += f[3];
                if (f[0] == perKey) {
                    c[4]++;
                }
            }
            return c;
        }
    }

    /**
     * The figures of Runnel's jm-loss from the sink writers' logs (all times epoch µs; results in ms
     * from the kill, rounded away from zero): takeover_ms, first_output_ms (first report at or after
     * the takeover) and first_output_writer (kept: a writer started before the kill), longest_gap_ms
     * (the longest silence ending after the kill), gap_start_ms, output_resumed_ms,
     * baseline_max_gap_ms (the longest silence from steady state to the kill).
     */
    static void measureLogs(Json j, SinkLogs logs, long steadyAt, long killedAt, long takeoverAt) {
        List<long[]> ws = new ArrayList<>(); // {t, kept}
        int keptAfter = 0;
        for (long[] w : logs.writers) {
            boolean kept = w[0] < killedAt;
            for (int i = 1; i < w.length; i++) {
                ws.add(new long[] {w[i], kept ? 1 : 0});
                if (kept && w[i] > killedAt) {
                    keptAfter++;
                }
            }
        }
        ws.sort((a, b) -> Long.compare(a[0], b[0]));
        j.put("takeover_ms", ms(takeoverAt - killedAt));
        j.put("sink_writers", logs.writers.size());
        j.put("kept_writer_reports_after_kill", keptAfter);
        int first = -1;
        int before = -1;
        for (int i = 0; i < ws.size(); i++) {
            if (first < 0 && ws.get(i)[0] >= takeoverAt) {
                first = i;
            }
            if (before < 0 && ws.get(i)[0] > killedAt) {
                before = i;
            }
        }
        if (first < 0) {
            throw new IllegalStateException("the sink reported nothing after the takeover (" + ws.size() + " reports in all)");
        }
        if (before <= 0) {
            throw new IllegalStateException("the sink reported nothing before the kill");
        }
        j.put("first_output_ms", ms(ws.get(first)[0] - killedAt));
        j.put("first_output_writer", ws.get(first)[1] == 1 ? "kept" : "new");
        long longest = -1;
        for (int i = before; i < ws.size(); i++) {
            long g = ws.get(i)[0] - ws.get(i - 1)[0];
            if (g > longest) {
                longest = g;
                j.put("gap_start_ms", ms(ws.get(i - 1)[0] - killedAt));
                j.put("output_resumed_ms", ms(ws.get(i)[0] - killedAt));
            }
        }
        j.put("longest_gap_ms", ms(longest));
        long baseline = 0;
        for (int i = 1; i < before; i++) {
            if (ws.get(i - 1)[0] >= steadyAt) {
                baseline = Math.max(baseline, ws.get(i)[0] - ws.get(i - 1)[0]);
            }
        }
        j.put("baseline_max_gap_ms", ms(baseline));
    }

    /** Microseconds to whole milliseconds, rounded away from zero (as runnel's figures). */
    static long ms(long micros) {
        return micros < 0 ? -((-micros + 999) / 1000) : (micros + 999) / 1000;
    }

    private static boolean allRunning(JsonNode info) {
        for (JsonNode v : info.path("vertices")) {
            if (!v.path("status").asText().equals("RUNNING")) {
                return false;
            }
        }
        return info.path("vertices").size() > 0;
    }

    private static Process startZooKeeper(Path jar, Path dataDir, int port, long sessionMs, File log) throws IOException {
        // tickTime bounds the session timeouts the server grants (2 to 20 ticks): a tick of a quarter
        // of the session timeout lets the client's timeout stand.
        long tick = Math.max(100, sessionMs / 4);
        Path cfg = dataDir.resolve("zoo.cfg");
        Files.write(cfg, List.of(
                "tickTime=" + tick,
                "dataDir=" + dataDir,
                "clientPort=" + port,
                "clientPortAddress=127.0.0.1",
                "maxClientCnxns=0",
                "admin.enableServer=false",
                "minSessionTimeout=" + 2 * tick,
                "maxSessionTimeout=" + 20 * tick), StandardCharsets.UTF_8);
        List<String> cmd = List.of(Paths.get(System.getProperty("java.home"), "bin", "java").toString(),
                "-Xmx256m", "-Dzookeeper.admin.enableServer=false", "-cp", jar.toString(), ZK_MAIN, cfg.toString());
        Files.write(log.toPath(), (String.join(" ", cmd) + "\n").getBytes(StandardCharsets.UTF_8));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(log))
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
    }

    private static void awaitPort(int port, Process proc) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (true) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 500);
                return;
            } catch (IOException notYet) {
                if (!proc.isAlive()) {
                    throw new IllegalStateException("ZooKeeper exited with code " + proc.exitValue() + " during start-up");
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("ZooKeeper not listening on " + port + " within 60 s");
                }
                Thread.sleep(50);
            }
        }
    }

    /**
     * Waits until {@code log} has a line with {@code marker} timed at or after {@code notBefore}
     * (epoch µs; the log's times have ms resolution, so a line in the kill's own millisecond counts)
     * and returns that line's time in epoch µs.
     */
    static long awaitLog(Path log, String marker, long notBefore, long timeoutMs, Process proc) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        while (true) {
            if (Files.exists(log)) {
                for (String line : Files.readAllLines(log, StandardCharsets.UTF_8)) {
                    int sp = line.indexOf(' ');
                    if (!line.contains(marker) || sp < 0) {
                        continue;
                    }
                    long t = Instant.parse(line.substring(0, sp)).toEpochMilli() * 1000;
                    if (t >= notBefore - 999) {
                        return Math.max(t, notBefore);
                    }
                }
            }
            if (proc != null && !proc.isAlive()) {
                throw new IllegalStateException(log.getFileName() + ": the JVM exited with code " + proc.exitValue()
                        + " before logging '" + marker + "'");
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("no '" + marker + "' in " + log + " within " + timeoutMs + " ms");
            }
            Thread.sleep(10);
        }
    }

    private static void awaitSlots(StandaloneKill.Rest rest, long timeoutMs) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        while (true) {
            try {
                JsonNode o = rest.getOnce("/overview");
                if (o.path("taskmanagers").asInt() == TASKMANAGERS && o.path("slots-total").asInt() == TASKMANAGERS * SLOTS_PER_TASKMANAGER) {
                    return;
                }
            } catch (IOException notYet) {
                // the REST endpoint is not up yet
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("cluster not up with " + TASKMANAGERS + " TaskManagers within " + timeoutMs + " ms");
            }
            Thread.sleep(100);
        }
    }
}

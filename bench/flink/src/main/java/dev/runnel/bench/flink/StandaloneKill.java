package dev.runnel.bench.flink;

import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.ConfigurationUtils;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.HeartbeatManagerOptions;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.configuration.WebOptions;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.clusterframework.TaskExecutorProcessSpec;
import org.apache.flink.runtime.clusterframework.TaskExecutorProcessUtils;
import org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint;
import org.apache.flink.runtime.jobmanager.JobManagerProcessSpec;
import org.apache.flink.runtime.jobmanager.JobManagerProcessUtils;
import org.apache.flink.runtime.taskexecutor.TaskManagerRunner;
import org.apache.flink.runtime.util.config.memory.ProcessMemoryUtils;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Enumeration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.jar.Attributes;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import java.util.jar.JarOutputStream;
import java.util.jar.Manifest;
import java.util.stream.Stream;

/**
 * The {@code standalone-kill} job: the recovery job on a real Flink cluster of separate JVMs on this
 * machine (one JobManager, three TaskManagers with two slots each), with the TaskManager that runs
 * map subtask 1 killed by SIGKILL once a checkpoint has completed.
 *
 * <p>It owns the cluster's processes from start to end: every JVM it starts is killed when the run
 * ends, by the {@code finally} of {@link #run} or, if the harness is stopped, by a shutdown hook. It
 * reads the cluster only through Flink's REST API and the sinks' files (see
 * {@link Functions.FileTimingSink}), since the job runs in none of the harness's threads.
 *
 * <p>Times are wall-clock epoch microseconds ({@link Probes#epochMicros()}) throughout, because they
 * are compared between JVMs and with the JobManager's REST timestamps (epoch milliseconds).
 */
final class StandaloneKill {
    private StandaloneKill() {}

    static final int TASKMANAGERS = 3;
    static final int SLOTS_PER_TASKMANAGER = 2;
    /** The path (map subtask) whose TaskManager is killed; path 0 is map[0]'s in the recovery job. */
    static final int KILLED_PATH = 1;
    /** A sink notes a silence of a path longer than this (see FileTimingSink). */
    static final long SINK_GAP_NANOS = TimeUnit.MILLISECONDS.toNanos(50);
    /** Each JVM's memory: small enough that four fit beside other work on a shared 24 GiB machine. */
    static final MemorySize JOBMANAGER_PROCESS = MemorySize.parse("1g");
    static final MemorySize TASKMANAGER_PROCESS = MemorySize.parse("1g");

    private static final ObjectMapper JSON = new ObjectMapper();
    /** BENCH_DEBUG=1: print every REST answer to stderr. */
    private static final boolean DEBUG = System.getenv("BENCH_DEBUG") != null;

    static Json run(Map<String, String> f) throws Exception {
        int p = (int) Main.longFlag(f, "parallelism", 4);
        long keys = Main.longFlag(f, "keys", 1024);
        long ckptMs = Main.durationMs(f, "checkpoint-interval", 200);
        double rate = Main.longFlag(f, "rate", 500_000);
        long bufferTimeoutMs = Main.durationMs(f, "buffer-timeout", 5);
        long killAfterMs = Main.durationMs(f, "kill-after", 3_000);
        long waitMs = Main.durationMs(f, "wait", 120_000);
        long settleMs = Main.durationMs(f, "settle", 2_000);
        // Not recovery's 10: with Flink's default heartbeats the JobMaster keeps redeploying onto the
        // dead TaskManager's slots for many seconds, each attempt failing at once, and 10 attempts
        // run out before it gives those slots up (the job then FAILS; see the README).
        int restartAttempts = (int) Main.longFlag(f, "restart-attempts", 1000);
        long hbInterval = Main.durationMs(f, "heartbeat-interval", -1);
        long hbTimeout = Main.durationMs(f, "heartbeat-timeout", -1);
        String failover = f.getOrDefault("failover", "region");
        f.remove("failover");
        String logDirFlag = f.remove("log-dir");
        Main.checkUnused(f, "parallelism", "keys", "checkpoint-interval", "rate", "buffer-timeout", "kill-after",
                "wait", "settle", "restart-attempts", "heartbeat-interval", "heartbeat-timeout");
        if (!failover.equals("region") && !failover.equals("approximate")) {
            throw new IllegalArgumentException("--failover must be region or approximate");
        }
        if ((hbInterval < 0) != (hbTimeout < 0)) {
            throw new IllegalArgumentException("give both --heartbeat-interval and --heartbeat-timeout, or neither");
        }
        if (keys % p != 0) {
            throw new IllegalArgumentException("--keys must be a multiple of --parallelism for the sequence checker");
        }
        if (p > (TASKMANAGERS - 1) * SLOTS_PER_TASKMANAGER || p <= KILLED_PATH) {
            throw new IllegalArgumentException("--parallelism must be in [" + (KILLED_PATH + 1) + ", "
                    + (TASKMANAGERS - 1) * SLOTS_PER_TASKMANAGER + "] so the job fits once a TaskManager is gone");
        }
        boolean approximate = failover.equals("approximate");

        Path dir = Files.createTempDirectory("runnel-flink-standalone-");
        Path sinkDir = Files.createDirectories(dir.resolve("sinks"));
        Path ckptDir = Files.createDirectories(dir.resolve("checkpoints"));

        // The job's settings: what `recovery` sets, with approximate local recovery for "approximate"
        // (Flink's default failover strategy, region, in both). They go into the cluster's
        // config.yaml and into the client's configuration, since Flink reads some on the client
        // (checkpointing, buffer timeout) and some on the JobManager (failover strategy).
        Configuration jobConf = Main.baseConfig(ckptMs, ckptDir);
        jobConf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
        jobConf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, restartAttempts);
        jobConf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ZERO);
        jobConf.set(JobManagerOptions.EXECUTION_FAILOVER_STRATEGY, "region");
        jobConf.set(ExecutionOptions.BUFFER_TIMEOUT, Duration.ofMillis(bufferTimeoutMs));
        if (approximate) {
            jobConf.set(StateRecoveryOptions.APPROXIMATE_LOCAL_RECOVERY, true);
        }
        jobConf.removeConfig(RestOptions.BIND_PORT);
        if (hbInterval >= 0) {
            jobConf.set(HeartbeatManagerOptions.HEARTBEAT_INTERVAL, Duration.ofMillis(hbInterval));
            jobConf.set(HeartbeatManagerOptions.HEARTBEAT_TIMEOUT, Duration.ofMillis(hbTimeout));
        }

        Json j = new Json()
                .put("engine", Main.ENGINE)
                .put("job", "standalone-kill")
                .put("failover", failover)
                .put("approximate_local_recovery", approximate)
                .put("heartbeat_interval_ms", jobConf.get(HeartbeatManagerOptions.HEARTBEAT_INTERVAL).toMillis())
                .put("heartbeat_timeout_ms", jobConf.get(HeartbeatManagerOptions.HEARTBEAT_TIMEOUT).toMillis())
                .put("heartbeat_rpc_failure_threshold",
                        jobConf.get(HeartbeatManagerOptions.HEARTBEAT_RPC_FAILURE_THRESHOLD))
                .put("taskmanagers", TASKMANAGERS)
                .put("slots_per_taskmanager", SLOTS_PER_TASKMANAGER)
                .put("parallelism", p)
                .put("keys", keys)
                .put("source_rate_rps", (long) rate)
                .put("checkpoint_interval_ms", ckptMs)
                .put("buffer_timeout_ms", bufferTimeoutMs)
                .put("restart_attempts", restartAttempts);

        Path jar = harnessJar();
        Path logDir = logDirFlag != null ? Paths.get(logDirFlag) : jar.getParent().resolve("logs");
        String logPrefix = "standalone-kill-" + failover + "-hb" + jobConf.get(HeartbeatManagerOptions.HEARTBEAT_INTERVAL).toMillis();
        Cluster cluster = new Cluster(jar, dir, logDir, logPrefix);
        Thread hook = new Thread(cluster::killAll, "kill-flink-cluster");
        Runtime.getRuntime().addShutdownHook(hook);
        try {
            cluster.start(jobConf);
            j.put("logs", logDir.resolve(logPrefix + "-*.log").toString());
            Rest rest = new Rest(cluster.restPort);

            StreamExecutionEnvironment env = StreamExecutionEnvironment.createRemoteEnvironment(
                    "127.0.0.1", cluster.restPort, jobConf, userJar(jar, dir).toString());
            Main.recoveryPipeline(env, p, keys, rate, -1,
                    new Functions.FileTimingSink(sinkDir.toString(), p, SINK_GAP_NANOS));
            JobClient client = env.executeAsync("runnel-bench-standalone-kill-" + failover);
            JobID job = client.getJobID();
            measure(j, rest, cluster, job.toHexString(), sinkDir, killAfterMs, waitMs, settleMs);
            return j;
        } catch (Exception e) {
            return j.put("error", Main.describe(e)).put("error_root", Main.describe(Main.rootCause(e)));
        } finally {
            // No cancellation first: the cluster and its job end together, and the checkpoint
            // directory goes with them.
            cluster.killAll();
            Runtime.getRuntime().removeShutdownHook(hook);
            Main.deleteTree(dir);
        }
    }

    /** The run after submission: wait, kill, observe. Fills {@code j}; throws on anything unexpected. */
    private static void measure(Json j, Rest rest, Cluster cluster, String job, Path sinkDir,
            long killAfterMs, long waitMs, long settleMs) throws Exception {
        // 1. Every task running for --kill-after, with a checkpoint completed in that time. A restart
        // before the kill (short heartbeats can time out a live TaskManager on a starved machine)
        // starts the wait over.
        long runningAt = 0;
        long completedAtRunning = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        long completed = 0;
        while (true) {
            JsonNode info = rest.get("/jobs/" + job);
            String state = info.path("state").asText();
            if (isTerminal(state)) {
                JsonNode ex = rest.get("/jobs/" + job + "/exceptions?maxExceptions=10");
                JsonNode entries = ex.path("exceptionHistory").path("entries");
                String first = entries.size() > 0 ? firstLine(entries.get(0).path("stacktrace").asText()) : "";
                String root = entries.size() > 0 ? rootLine(entries.get(0).path("stacktrace").asText()) : "";
                j.put("job_status", state);
                j.put("error", "the job ended before the kill: " + first);
                j.put("error_root", root);
                return;
            }
            completed = rest.get("/jobs/" + job + "/checkpoints").path("counts").path("completed").asLong();
            boolean running = state.equals("RUNNING") && allRunning(info);
            if (!running) {
                runningAt = 0;
            } else if (runningAt == 0) {
                runningAt = System.nanoTime();
                completedAtRunning = completed;
            } else if (System.nanoTime() - runningAt >= TimeUnit.MILLISECONDS.toNanos(killAfterMs)
                    && completed > completedAtRunning) {
                break;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("job " + job + " not running for " + killAfterMs
                        + " ms with a completed checkpoint within 90 s (state " + state + ", " + completed + " checkpoints)");
            }
            Thread.sleep(50);
        }
        j.put("checkpoints_before_kill", completed);

        // 2. Which TaskManager runs map[1], and what else it runs.
        Map<String, String> vertexIds = vertexIds(rest.get("/jobs/" + job));
        String mapVertex = vertexIds.get("map");
        if (mapVertex == null) {
            throw new IllegalStateException("no vertex named map in " + vertexIds.keySet());
        }
        String victim = rest.get("/jobs/" + job + "/vertices/" + mapVertex)
                .path("subtasks").get(KILLED_PATH).path("taskmanager-id").asText();
        Process proc = cluster.taskManagers.get(victim);
        if (proc == null) {
            throw new IllegalStateException("map[" + KILLED_PATH + "] runs on TaskManager '" + victim
                    + "', which is none of ours " + cluster.taskManagers.keySet());
        }
        List<String> victimTasks = new ArrayList<>();
        Map<String, int[]> attemptsBefore = attempts(rest, job, vertexIds);
        for (Map.Entry<String, String> v : vertexIds.entrySet()) {
            JsonNode subs = rest.get("/jobs/" + job + "/vertices/" + v.getValue()).path("subtasks");
            for (JsonNode s : subs) {
                if (victim.equals(s.path("taskmanager-id").asText())) {
                    victimTasks.add(v.getKey() + "[" + s.path("subtask").asInt() + "]");
                }
            }
        }

        // 3. SIGKILL: Process.destroyForcibly() sends SIGKILL on Linux; the exit code (128 + 9) shows it.
        long killedAt = Probes.epochMicros();
        proc.destroyForcibly();
        if (!proc.waitFor(10, TimeUnit.SECONDS)) {
            throw new IllegalStateException("TaskManager " + victim + " (pid " + proc.pid() + ") still alive 10 s after SIGKILL");
        }
        j.put("killed_taskmanager", victim)
                .put("killed_pid", proc.pid())
                .put("killed_exit_code", proc.exitValue())
                .put("killed_tasks", String.join(" ", victimTasks))
                .put("killed_at_ms", killedAt / 1000);

        // 4. Wait for the failover in the exception history, and the restarted path's first output.
        long failedAtMs = -1;
        JsonNode firstFailure = null;
        long firstOutput = -1;
        long stop = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(waitMs);
        String state = "";
        while (System.nanoTime() < stop) {
            if (failedAtMs < 0) {
                JsonNode entries = rest.get("/jobs/" + job + "/exceptions?maxExceptions=100")
                        .path("exceptionHistory").path("entries");
                for (JsonNode e : entries) {
                    long t = e.path("timestamp").asLong();
                    if (t * 1000 >= killedAt - 1000 && (failedAtMs < 0 || t < failedAtMs)) {
                        failedAtMs = t;
                        firstFailure = e;
                    }
                }
            }
            if (failedAtMs >= 0) {
                firstOutput = SinkLog.read(sinkDir).firstOutputAfter(KILLED_PATH, killedAt, failedAtMs * 1000);
                if (firstOutput >= 0) {
                    break;
                }
            }
            state = rest.get("/jobs/" + job).path("state").asText();
            if (isTerminal(state)) {
                break;
            }
            Thread.sleep(20);
        }
        if (failedAtMs >= 0) {
            j.put("failed_at_ms", failedAtMs);
            j.put("detection_ms", round2((failedAtMs * 1000 - killedAt) / 1000.0));
            j.put("detected_by", firstLine(firstFailure.path("stacktrace").asText()));
            j.put("detected_by_root", rootLine(firstFailure.path("stacktrace").asText()));
            j.put("detected_in", firstFailure.path("taskName").asText("(global)") + " @ "
                    + firstFailure.path("taskManagerId").asText(firstFailure.path("endpoint").asText("")));
        }
        if (firstOutput >= 0) {
            j.put("first_output_at_ms", firstOutput / 1000);
            j.put("first_output_from", SinkLog.read(sinkDir).describe(firstOutput));
            j.put("restart_ms", round2((firstOutput - failedAtMs * 1000) / 1000.0));
            j.put("total_ms", round2((firstOutput - killedAt) / 1000.0));
        } else if (isTerminal(state)) {
            j.put("error", "the job ended (" + state + ") before path " + KILLED_PATH + " had output again");
        } else {
            j.put("error", failedAtMs < 0
                    ? "no failure in the exception history within " + waitMs + " ms of the kill (job " + state + ")"
                    : "no output of path " + KILLED_PATH + " within " + waitMs + " ms of the kill (job " + state + ")");
        }

        // 5. Let it run on a little, then read what restarted.
        Thread.sleep(settleMs);
        JsonNode info = rest.get("/jobs/" + job);
        j.put("job_status", info.path("state").asText());
        Map<String, int[]> attemptsAfter = attempts(rest, job, vertexIds);
        int restarted = 0;
        int subtasks = 0;
        for (Map.Entry<String, int[]> v : attemptsAfter.entrySet()) {
            int[] before = attemptsBefore.get(v.getKey());
            for (int i = 0; i < v.getValue().length; i++) {
                subtasks++;
                if (v.getValue()[i] != before[i]) {
                    restarted++;
                }
            }
        }
        j.put("restarted_subtasks", restarted);
        j.put("subtasks", subtasks);
        String sourceVertex = null;
        for (String name : vertexIds.keySet()) {
            if (name.contains("generator")) {
                sourceVertex = name;
            }
        }
        if (sourceVertex != null) {
            j.put("upstream_attempts_unchanged", Arrays.equals(attemptsBefore.get(sourceVertex), attemptsAfter.get(sourceVertex)));
            j.put("source_attempts", Arrays.toString(attemptsAfter.get(sourceVertex)));
        }
        j.put("map_attempts", Arrays.toString(attemptsAfter.get("map")));
        JsonNode entries = rest.get("/jobs/" + job + "/exceptions?maxExceptions=100").path("exceptionHistory").path("entries");
        List<String> failures = new ArrayList<>();
        int afterOutput = 0;
        int beforeKill = 0;
        for (JsonNode e : entries) { // newest first
            long t = e.path("timestamp").asLong();
            String line = firstLine(e.path("stacktrace").asText());
            if (t * 1000 < killedAt - 1000) {
                beforeKill++;
                continue;
            }
            failures.add(0, "+" + (t - failedAtMs) + "ms " + line.substring(0, Math.min(160, line.length())));
            if (firstOutput >= 0 && t * 1000 > firstOutput) {
                afterOutput++;
            }
        }
        j.put("failures", entries.size() - beforeKill);
        j.put("failures_before_kill", beforeKill);
        if (entries.size() > 0) {
            j.put("last_failure", firstLine(entries.get(0).path("stacktrace").asText()));
        }
        j.put("failures_after_first_output", afterOutput);
        j.put("failure_history", String.join(" || ", failures.subList(0, Math.min(5, failures.size()))));
        // Every subtask starts at attempt 0 and a region failover of this job restarts all of them,
        // so the highest attempt is the number of restarts. (The numRestarts metric reaches the
        // REST API only every metrics.fetcher.update-interval, 10 s, and reads 0 here.)
        int maxAttempt = 0;
        for (int[] a : attemptsAfter.values()) {
            for (int x : a) {
                maxAttempt = Math.max(maxAttempt, x);
            }
        }
        j.put("max_attempt", maxAttempt);

        // The sequence checker's verdicts, as each TaskManager JVM last reported them (the killed
        // one's up to 100 ms before the kill). Exactly-once recovery must leave all three at 0.
        long[] counts = SinkLog.read(sinkDir).totalCounts();
        j.put("records_lost", counts[0]);
        j.put("records_duplicated", counts[1]);
        j.put("records_out_of_order", counts[2]);
        j.put("records_checked", counts[3]);

        // 6. When the JobMaster gave the killed TaskManager up (it deploys to its slots until then),
        // and whether it gave up a live one too (heartbeats too short for a starved machine).
        List<String> others = new ArrayList<>();
        int lostBeforeKill = 0;
        for (String[] d : cluster.disconnects(Cluster.JOBMASTER_DISCONNECT)) {
            long t = Long.parseLong(d[0]);
            boolean lossLike = isLoss(d[2]);
            if (t * 1000 < killedAt) {
                lostBeforeKill += lossLike ? 1 : 0;
                continue;
            }
            if (!lossLike) {
                continue; // e.g. "Stopping JobMaster" when the job ends, or a TaskManager with no slots left
            }
            if (d[1].equals(victim) && !j.has("taskmanager_lost_ms")) {
                j.put("taskmanager_lost_ms", round2((t * 1000 - killedAt) / 1000.0));
                j.put("taskmanager_lost_by", d[2]);
            } else if (!d[1].equals(victim)) {
                others.add(d[1] + " +" + round2((t * 1000 - killedAt) / 1000.0) + "ms: " + d[2]);
            }
        }
        for (String[] d : cluster.disconnects(Cluster.RESOURCEMANAGER_DISCONNECT)) {
            long t = Long.parseLong(d[0]);
            if (d[1].equals(victim) && t * 1000 >= killedAt && isLoss(d[2])) {
                j.put("resourcemanager_lost_ms", round2((t * 1000 - killedAt) / 1000.0));
                j.put("resourcemanager_lost_by", d[2]);
                break;
            }
        }
        j.put("live_taskmanagers_lost", String.join(" || ", others));
        j.put("live_taskmanagers_lost_before_kill", lostBeforeKill);
    }

    /**
     * Whether a disconnect reason is a heartbeat monitor's verdict that the TaskManager is gone:
     * "... is no longer reachable" (heartbeat RPCs failed heartbeat.rpc-failure-threshold times in
     * a row) or "Heartbeat of TaskManager ... timed out" (heartbeat.timeout).
     */
    static boolean isLoss(String reason) {
        return reason.contains("no longer reachable") || reason.contains("timed out");
    }

    static boolean isTerminal(String state) {
        return state.equals("FAILED") || state.equals("CANCELED") || state.equals("FINISHED");
    }

    private static boolean allRunning(JsonNode info) {
        for (JsonNode v : info.path("vertices")) {
            if (!v.path("status").asText().equals("RUNNING")) {
                return false;
            }
        }
        return info.path("vertices").size() > 0;
    }

    /** Vertex name (Flink's, e.g. "Source: generator", "map") to vertex id, in the job's order. */
    private static Map<String, String> vertexIds(JsonNode info) {
        Map<String, String> ids = new LinkedHashMap<>();
        for (JsonNode v : info.path("vertices")) {
            ids.put(v.path("name").asText(), v.path("id").asText());
        }
        return ids;
    }

    /** Per vertex name, the current attempt number of each subtask. */
    private static Map<String, int[]> attempts(Rest rest, String job, Map<String, String> vertexIds)
            throws IOException, InterruptedException {
        Map<String, int[]> out = new LinkedHashMap<>();
        for (Map.Entry<String, String> v : vertexIds.entrySet()) {
            JsonNode subs = rest.get("/jobs/" + job + "/vertices/" + v.getValue()).path("subtasks");
            int[] a = new int[subs.size()];
            for (JsonNode s : subs) {
                a[s.path("subtask").asInt()] = s.path("attempt").asInt();
            }
            out.put(v.getKey(), a);
        }
        return out;
    }

    static String firstLine(String stacktrace) {
        int nl = stacktrace.indexOf('\n');
        return (nl < 0 ? stacktrace : stacktrace.substring(0, nl)).trim();
    }

    /** The last "Caused by:" line of a stack trace (the root cause), or its first line if none. */
    static String rootLine(String stacktrace) {
        String root = firstLine(stacktrace);
        for (String line : stacktrace.split("\n")) {
            if (line.startsWith("Caused by: ")) {
                root = line.substring("Caused by: ".length()).trim();
            }
        }
        return root;
    }

    private static double round2(double v) {
        return Math.round(v * 100) / 100.0;
    }

    /** The shaded jar this class was loaded from. */
    static Path harnessJar() throws Exception {
        Path p = Paths.get(StandaloneKill.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        if (!Files.isRegularFile(p)) {
            throw new IllegalStateException("standalone-kill must run from the shaded jar (java -jar), not from " + p);
        }
        return p;
    }

    /**
     * The user jar that the job ships: the harness's own classes (dev/runnel/**), taken from the
     * shaded jar. Flink is on every cluster JVM's class path already, as it would be in a
     * distribution's lib/, so shipping all 80 MB again would only make each TaskManager download it
     * (also during a failover, onto a TaskManager that did not have it yet).
     */
    static Path userJar(Path shaded, Path dir) throws IOException {
        Path out = dir.resolve("runnel-flink-bench-job.jar");
        Manifest m = new Manifest();
        m.getMainAttributes().put(Attributes.Name.MANIFEST_VERSION, "1.0");
        try (JarFile in = new JarFile(shaded.toFile());
                JarOutputStream jo = new JarOutputStream(Files.newOutputStream(out), m)) {
            for (Enumeration<JarEntry> es = in.entries(); es.hasMoreElements(); ) {
                JarEntry e = es.nextElement();
                if (e.getName().startsWith("dev/runnel/") && !e.isDirectory()) {
                    jo.putNextEntry(new JarEntry(e.getName()));
                    try (InputStream is = in.getInputStream(e)) {
                        is.transferTo(jo);
                    }
                    jo.closeEntry();
                }
            }
        }
        return out;
    }

    // ---- the cluster's processes ------------------------------------------------------------

    /**
     * One JobManager and {@link #TASKMANAGERS} TaskManager JVMs, started from the harness's shaded
     * jar as flink-dist's scripts would start them: memory flags and memory options computed by
     * Flink's own process-spec utilities (what flink-dist's BashJavaUtils prints), `--configDir`
     * with a generated config.yaml, and the JVM flags of the jar's Add-Opens manifest entry.
     */
    static final class Cluster {
        private final Path jar;
        private final Path dir;
        private final Path logDir;
        private final String logPrefix;
        private final List<Process> all = new ArrayList<>();
        /** TaskManager resource id (taskmanager.resource-id) to its process. */
        final Map<String, Process> taskManagers = new LinkedHashMap<>();
        Process jobManager;
        int restPort;

        Cluster(Path jar, Path dir, Path logDir, String logPrefix) {
            this.jar = jar;
            this.dir = dir;
            this.logDir = logDir;
            this.logPrefix = logPrefix;
        }

        void start(Configuration jobConf) throws Exception {
            Files.createDirectories(logDir);
            int rpcPort = freePort();
            restPort = freePort();
            Configuration common = new Configuration(jobConf);
            common.set(JobManagerOptions.ADDRESS, "127.0.0.1");
            common.set(JobManagerOptions.PORT, rpcPort);
            common.set(JobManagerOptions.BIND_HOST, "127.0.0.1");
            common.set(RestOptions.ADDRESS, "127.0.0.1");
            common.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
            common.set(RestOptions.PORT, restPort);
            common.set(TaskManagerOptions.HOST, "127.0.0.1");
            common.set(TaskManagerOptions.BIND_HOST, "127.0.0.1");
            common.set(TaskManagerOptions.NUM_TASK_SLOTS, SLOTS_PER_TASKMANAGER);
            common.set(JobManagerOptions.TOTAL_PROCESS_MEMORY, JOBMANAGER_PROCESS);
            common.set(TaskManagerOptions.TOTAL_PROCESS_MEMORY, TASKMANAGER_PROCESS);
            // The job keeps its state on the heap (hashmap backend): no managed memory, so the heap
            // gets the small process's share.
            common.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.ZERO);
            // Keep every failure of a run in the exception history (default: the last 16).
            common.set(WebOptions.MAX_EXCEPTION_HISTORY_SIZE, 1000);

            Configuration jm = new Configuration(common);
            Path jmTmp = Files.createDirectories(dir.resolve("tmp-jm"));
            jm.set(CoreOptions.TMP_DIRS, jmTmp.toString());
            // The web frontend's directory; by default /tmp/flink-web-*, which a SIGKILLed
            // JobManager never removes.
            jm.set(WebOptions.TMP_DIR, jmTmp.toString());
            JobManagerProcessSpec jmSpec = JobManagerProcessUtils.processSpecFromConfig(jm);
            jobManager = launch("jm", jm, StandaloneSessionClusterEntrypoint.class.getName(),
                    JobManagerProcessUtils.generateJvmParametersStr(jmSpec, jm),
                    JobManagerProcessUtils.generateDynamicConfigsStr(jmSpec));
            for (int i = 0; i < TASKMANAGERS; i++) {
                String id = "tm-" + i;
                Configuration tm = new Configuration(common);
                tm.set(TaskManagerOptions.TASK_MANAGER_RESOURCE_ID, id);
                tm.set(CoreOptions.TMP_DIRS, Files.createDirectories(dir.resolve("tmp-" + id)).toString());
                TaskExecutorProcessSpec spec = TaskExecutorProcessUtils.processSpecFromConfig(tm);
                taskManagers.put(id, launch(id, tm, TaskManagerRunner.class.getName(),
                        ProcessMemoryUtils.generateJvmParametersStr(spec),
                        TaskExecutorProcessUtils.generateDynamicConfigsStr(spec)));
            }

            // Ready when the ResourceManager has every TaskManager's slots.
            Rest rest = new Rest(restPort);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
            while (true) {
                for (Process pr : all) {
                    if (!pr.isAlive()) {
                        throw new IllegalStateException("a cluster JVM (pid " + pr.pid() + ") exited with code "
                                + pr.exitValue() + " during start-up; see " + logDir.resolve(logPrefix + "-*.log"));
                    }
                }
                try {
                    JsonNode o = rest.getOnce("/overview");
                    if (o.path("taskmanagers").asInt() == TASKMANAGERS
                            && o.path("slots-total").asInt() == TASKMANAGERS * SLOTS_PER_TASKMANAGER) {
                        return;
                    }
                } catch (IOException notYet) {
                    // the REST endpoint is not up yet
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("cluster not up with " + TASKMANAGERS + " TaskManagers within 90 s; see "
                            + logDir.resolve(logPrefix + "-*.log"));
                }
                Thread.sleep(100);
            }
        }

        Process launch(String name, Configuration conf, String mainClass, String jvmParams, String dynamic)
                throws IOException {
            Path confDir = Files.createDirectories(dir.resolve("conf-" + name));
            Files.write(confDir.resolve("config.yaml"), ConfigurationUtils.convertConfigToWritableLines(conf, true),
                    StandardCharsets.UTF_8);
            List<String> cmd = new ArrayList<>();
            cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
            cmd.addAll(Arrays.asList(jvmParams.trim().split("\\s+")));
            cmd.addAll(addOpens());
            // Whatever else a JVM puts in the temporary directory is removed with the run's directory.
            cmd.add("-Djava.io.tmpdir=" + Files.createDirectories(dir.resolve("tmp-" + name)));
            cmd.add("-Dlog4j2.configurationFile=" + log4jConfig());
            cmd.add("-cp");
            cmd.add(jar.toString());
            cmd.add(mainClass);
            cmd.add("--configDir");
            cmd.add(confDir.toString());
            cmd.addAll(Arrays.asList(dynamic.trim().split("\\s+")));
            File log = logDir.resolve(logPrefix + "-" + name + ".log").toFile();
            Files.write(log.toPath(), (String.join(" ", cmd) + "\n").getBytes(StandardCharsets.UTF_8));
            Process pr = new ProcessBuilder(cmd)
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(log))
                    .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
                    .start();
            synchronized (all) {
                all.add(pr);
            }
            return pr;
        }

        /**
         * The cluster JVMs' Log4j configuration: everything at INFO, which names the events of a
         * failover (what detected it, deployments, TaskManagers disconnected), to stdout, which
         * goes to the JVM's file in the log directory. Times are UTC with the date, so that
         * {@link #disconnects} can place them.
         */
        private Path log4jConfig() throws IOException {
            Path f = dir.resolve("log4j2-cluster.properties");
            if (!Files.exists(f)) {
                Files.write(f, List.of(
                        "rootLogger.level = INFO",
                        "rootLogger.appenderRef.out.ref = out",
                        "appender.out.name = out",
                        "appender.out.type = Console",
                        "appender.out.target = SYSTEM_OUT",
                        "appender.out.layout.type = PatternLayout",
                        "appender.out.layout.pattern = %d{yyyy-MM-dd'T'HH:mm:ss.SSS'Z'}{UTC} %-5level %c{1} - %msg%n"),
                        StandardCharsets.UTF_8);
            }
            return f;
        }

        /** The JobMaster's log line when it gives a TaskManager (and the job's slots there) up. */
        static final String JOBMASTER_DISCONNECT = " JobMaster - Disconnect TaskExecutor ";
        /** The ResourceManager's: it only then sees that the job is short of slots and finds new ones. */
        static final String RESOURCEMANAGER_DISCONNECT = " StandaloneResourceManager - Closing TaskExecutor connection ";

        /**
         * The "{@code marker} ID because: REASON" lines of the JobManager's log: when and why the
         * JobMaster or the ResourceManager gave up a TaskManager. {time epoch ms, id, reason}.
         */
        List<String[]> disconnects(String marker) throws IOException {
            return parseDisconnects(Files.readAllLines(logDir.resolve(logPrefix + "-jm.log"), StandardCharsets.UTF_8), marker);
        }

        static List<String[]> parseDisconnects(List<String> lines, String marker) {
            List<String[]> out = new ArrayList<>();
            for (String line : lines) {
                int at = line.indexOf(marker);
                int sp = line.indexOf(' ');
                if (at < 0 || sp < 0) {
                    continue;
                }
                String rest = line.substring(at + marker.length());
                int because = rest.indexOf(" because: ");
                if (because < 0) {
                    continue;
                }
                long t = java.time.Instant.parse(line.substring(0, sp)).toEpochMilli();
                out.add(new String[] {Long.toString(t), rest.substring(0, because), rest.substring(because + " because: ".length())});
            }
            return out;
        }

        /** The jar manifest's Add-Opens entry as JVM flags (a manifest entry only applies to -jar). */
        private List<String> addOpens() throws IOException {
            List<String> flags = new ArrayList<>();
            try (JarFile jf = new JarFile(jar.toFile())) {
                String v = jf.getManifest().getMainAttributes().getValue("Add-Opens");
                if (v != null) {
                    for (String pkg : v.trim().split("\\s+")) {
                        flags.add("--add-opens=" + pkg + "=ALL-UNNAMED");
                    }
                }
            }
            return flags;
        }

        /** SIGKILLs every JVM still alive and waits for each; safe to call more than once. */
        void killAll() {
            List<Process> procs;
            synchronized (all) {
                procs = new ArrayList<>(all);
            }
            for (Process pr : procs) {
                pr.destroyForcibly();
            }
            for (Process pr : procs) {
                try {
                    pr.waitFor(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        }
    }

    /** A port that was free a moment ago (the JVM binds it shortly after; loopback only). */
    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    // ---- REST -------------------------------------------------------------------------------

    /** GETs JSON from the JobManager's REST API on loopback. */
    static final class Rest {
        private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
        private final String base;

        Rest(int port) {
            this.base = "http://127.0.0.1:" + port;
        }

        /**
         * GET with retries for 30 s: on a machine shared with other work, the JobManager can be
         * too starved to answer one request in time without anything being wrong.
         */
        JsonNode get(String path) throws IOException, InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (true) {
                try {
                    return getOnce(path);
                } catch (IOException e) {
                    if (System.nanoTime() > deadline) {
                        throw new IOException("GET " + path + " failed for 30 s: " + e, e);
                    }
                    Thread.sleep(200);
                }
            }
        }

        JsonNode getOnce(String path) throws IOException, InterruptedException {
            HttpRequest req = HttpRequest.newBuilder(URI.create(base + path)).timeout(Duration.ofSeconds(10)).GET().build();
            HttpResponse<String> resp = http.send(req, HttpResponse.BodyHandlers.ofString());
            if (DEBUG) {
                System.err.println("GET " + path + " -> " + resp.statusCode() + " "
                        + resp.body().substring(0, Math.min(2000, resp.body().length())));
            }
            if (resp.statusCode() != 200) {
                throw new IOException("GET " + path + ": HTTP " + resp.statusCode() + ": " + resp.body());
            }
            return JSON.readTree(resp.body());
        }
    }

    // ---- the sinks' files -------------------------------------------------------------------

    /** The lines of every sink attempt's file (see {@link Functions.FileTimingSink}). */
    static final class SinkLog {
        /** One attempt: its start and, per path, its first record (-1: none). */
        static final class Attempt {
            String name;
            long start = -1;
            final Map<Integer, Long> first = new LinkedHashMap<>();
        }

        final List<Attempt> attempts = new ArrayList<>();
        /** {path, from, to} of every silence a sink noted. */
        final List<long[]> gaps = new ArrayList<>();
        /** Per JVM and class loader ("pid:loader"), its latest checker counts: {lost, duplicated, out of order, checked}. */
        final Map<String, long[]> counts = new LinkedHashMap<>();

        static SinkLog read(Path dir) throws IOException {
            SinkLog log = new SinkLog();
            try (Stream<Path> files = Files.list(dir)) {
                for (Path f : (Iterable<Path>) files::iterator) {
                    Attempt a = new Attempt();
                    a.name = f.getFileName().toString().replace(".log", "");
                    String text = Files.readString(f, StandardCharsets.US_ASCII);
                    // Only whole lines: the last one may be being written (a truncated number would
                    // read as an earlier time).
                    text = text.substring(0, text.lastIndexOf('\n') + 1);
                    for (String line : text.split("\n")) {
                        if (line.isEmpty()) {
                            continue;
                        }
                        String[] w = line.split(" ");
                        try {
                            switch (w[0]) {
                                case "start":
                                    a.start = Long.parseLong(w[1]);
                                    break;
                                case "first":
                                    a.first.put(Integer.parseInt(w[1]), Long.parseLong(w[2]));
                                    break;
                                case "gap":
                                    log.gaps.add(new long[] {Integer.parseInt(w[1]), Long.parseLong(w[2]), Long.parseLong(w[3])});
                                    break;
                                case "counts": {
                                    long[] c = {Long.parseLong(w[2]), Long.parseLong(w[3]), Long.parseLong(w[4]), Long.parseLong(w[5])};
                                    // Several sinks in one JVM report the same JVM-wide counters:
                                    // the one that has seen the most records is the latest.
                                    log.counts.merge(w[1], c, (a1, a2) -> a1[3] >= a2[3] ? a1 : a2);
                                    break;
                                }
                                default:
                                    throw new IOException("unknown line in " + f + ": " + line);
                            }
                        } catch (ArrayIndexOutOfBoundsException | NumberFormatException e) {
                            throw new IOException("malformed line in " + f + ": " + line, e);
                        }
                    }
                    log.attempts.add(a);
                }
            } catch (UncheckedIOException e) {
                throw e.getCause();
            }
            return log;
        }

        /**
         * The first record of {@code path} that a sink received after the failure was detected at
         * {@code failedAt}, from the path's restarted producer (-1: none yet). That is either the
         * first record of the path in a sink attempt started after the kill (a restarted sink), or
         * the end of a silence of the path, noted by a sink that kept running, that began before
         * the failure was detected and ended after it. Records still in flight from before the
         * kill, which a surviving sink may take after {@code killedAt}, are neither.
         */
        long firstOutputAfter(int path, long killedAt, long failedAt) {
            long best = -1;
            for (Attempt a : attempts) {
                Long t = a.first.get(path);
                if (a.start > killedAt && t != null && t > failedAt && (best < 0 || t < best)) {
                    best = t;
                }
            }
            for (long[] g : gaps) {
                if (g[0] == path && g[1] <= failedAt && g[2] > failedAt && (best < 0 || g[2] < best)) {
                    best = g[2];
                }
            }
            return best;
        }

        /** The checker's counts summed over the JVMs: {lost, duplicated, out of order, checked}. */
        long[] totalCounts() {
            long[] sum = new long[4];
            for (long[] c : counts.values()) {
                for (int i = 0; i < 4; i++) {
                    sum[i] += c[i];
                }
            }
            return sum;
        }

        /** Which sink file noted time {@code t} ("sink-<subtask>-<attempt>", first or after a gap). */
        String describe(long t) {
            for (Attempt a : attempts) {
                if (a.first.containsValue(t)) {
                    return a.name + " (its first record of the path)";
                }
            }
            return "a surviving sink, after a silence of the path";
        }
    }
}

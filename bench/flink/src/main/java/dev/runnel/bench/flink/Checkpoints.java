package dev.runnel.bench.flink;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.configuration.WebOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * {@code checkpoints}: the backpressured pipeline of {@code runnel bench checkpoints --backpressure}, with
 * aligned and with unaligned checkpoints ({@code execution.checkpointing.unaligned.enabled}),
 * alternating, and the durations and sizes of its checkpoints as Flink's own checkpoint statistics
 * (the MiniCluster's REST API, {@code GET /jobs/:id/checkpoints}) give them.
 *
 * <p>Pipeline: generator ({@code 5 x sink-rate} records/s per subtask, unbounded) -> map ({@code value + 1})
 * -> keyBy key -> keyed running sum -> a sink that takes {@code sink-rate} records/s per subtask, sleeping
 * whenever it is ahead of that pace. Parallelism 2 on one TaskManager, checkpoints every second, the
 * hashmap state backend with filesystem checkpoint storage in a temporary directory.
 */
final class Checkpoints {
    private Checkpoints() {}

    /** Records the paced sinks took, and System.nanoTime() of the first (0 until then); per run. */
    static final LongAdder SUNK = new LongAdder();
    static final AtomicLong FIRST_SUNK = new AtomicLong();

    static Json run(Map<String, String> f) throws Exception {
        double sinkRate = longFlag(f, "sink-rate", 20_000);
        double factor = Double.parseDouble(f.getOrDefault("source-factor", "5"));
        f.remove("source-factor");
        long keys = Main.longFlag(f, "keys", 1024);
        int p = (int) Main.longFlag(f, "parallelism", 2);
        long intervalMs = Main.durationMs(f, "interval", 1000);
        long maxMs = Main.durationMs(f, "duration", 20_000);
        int warmup = (int) Main.longFlag(f, "warmup", 1);
        int measure = (int) Main.longFlag(f, "checkpoints", 5);
        int runs = (int) Main.longFlag(f, "runs", 2);
        long segment = Main.longFlag(f, "segment-size", 32 * 1024);
        String modes = f.getOrDefault("modes", "aligned,unaligned");
        f.remove("modes");
        Main.checkUnused(f, "sink-rate", "keys", "parallelism", "interval", "duration", "warmup", "checkpoints", "runs",
                "segment-size");
        List<String> order = List.of(modes.split(","));
        for (String m : order) {
            if (!m.equals("aligned") && !m.equals("unaligned")) {
                throw new IllegalArgumentException("--modes: aligned and/or unaligned, got " + m);
            }
        }
        if (sinkRate <= 0 || factor < 1 || runs < 1 || measure < 1 || warmup < 0) {
            throw new IllegalArgumentException("--sink-rate must be positive, --source-factor at least 1, --runs and --checkpoints at least 1");
        }

        List<Json> runList = new ArrayList<>();
        Map<String, List<Long>> durations = new TreeMap<>();
        Map<String, List<Long>> sizes = new TreeMap<>();
        Map<String, List<Long>> channel = new TreeMap<>();
        Map<String, List<Long>> alignments = new TreeMap<>();
        Map<String, List<Double>> rps = new TreeMap<>();
        for (int round = 0; round < runs; round++) {
            List<String> modesNow = new ArrayList<>(order);
            if (round % 2 == 1) {
                Collections.reverse(modesNow);
            }
            for (String mode : modesNow) {
                Json r = once(mode.equals("unaligned"), p, keys, sinkRate, factor, intervalMs, maxMs, warmup, measure, segment);
                r.put("mode", mode);
                runList.add(r);
                if (r.has("error")) {
                    throw new IllegalStateException(mode + " run failed: " + r.get("error"));
                }
                @SuppressWarnings("unchecked") List<Long> d = (List<Long>) r.get("checkpoint_ms");
                @SuppressWarnings("unchecked") List<Long> s = (List<Long>) r.get("state_bytes");
                @SuppressWarnings("unchecked") List<Long> c = (List<Long>) r.get("channel_state_bytes");
                @SuppressWarnings("unchecked") List<Long> a = (List<Long>) r.get("alignment_ms");
                durations.computeIfAbsent(mode, k -> new ArrayList<>()).addAll(d);
                sizes.computeIfAbsent(mode, k -> new ArrayList<>()).addAll(s);
                channel.computeIfAbsent(mode, k -> new ArrayList<>()).addAll(c);
                alignments.computeIfAbsent(mode, k -> new ArrayList<>()).addAll(a);
                rps.computeIfAbsent(mode, k -> new ArrayList<>()).add((Double) r.get("sink_rps"));
            }
        }
        Json j = new Json().put("engine", Main.ENGINE).put("job", "checkpoints");
        for (String mode : List.of("aligned", "unaligned")) {
            List<Long> d = durations.getOrDefault(mode, List.of());
            j.put(mode + "_checkpoint_ms", median(d));
        }
        double a = (Double) j.get("aligned_checkpoint_ms");
        double u = (Double) j.get("unaligned_checkpoint_ms");
        j.put("ratio", u > 0 ? a / u : 0.0);
        for (String mode : List.of("aligned", "unaligned")) {
            List<Long> d = durations.getOrDefault(mode, List.of());
            j.put(mode + "_checkpoint_ms_range", d.isEmpty() ? List.of(0L, 0L) : List.of(Collections.min(d), Collections.max(d)));
            j.put(mode + "_checkpoints", d.size());
            j.put(mode + "_state_bytes", Math.round(median(sizes.getOrDefault(mode, List.of()))));
            j.put(mode + "_channel_state_bytes", Math.round(median(channel.getOrDefault(mode, List.of()))));
            j.put(mode + "_alignment_ms", median(alignments.getOrDefault(mode, List.of())));
            j.put(mode + "_sink_rps", medianD(rps.getOrDefault(mode, List.of())));
        }
        j.put("sink_rate", sinkRate).put("source_rate", sinkRate * factor).put("parallelism", p)
                .put("checkpoint_interval_ms", intervalMs).put("segment_size", segment).put("runs", runList);
        return j;
    }

    private static long longFlag(Map<String, String> f, String name, long def) {
        return Main.longFlag(f, name, def);
    }

    /** One run: until it completed warmup + measure checkpoints or maxMs passed, then cancelled. */
    private static Json once(boolean unaligned, int p, long keys, double sinkRate, double factor, long intervalMs,
            long maxMs, int warmup, int measure, long segment) throws Exception {
        SUNK.reset();
        FIRST_SUNK.set(0);
        Path dir = Files.createTempDirectory("runnel-flink-bench-");
        JobClient client = null;
        try {
            Configuration conf = Main.baseConfig(intervalMs, dir);
            int port = StandaloneKill.freePort();
            conf.set(RestOptions.BIND_PORT, Integer.toString(port));
            conf.set(WebOptions.CHECKPOINTS_HISTORY_SIZE, 1000);
            conf.set(CheckpointingOptions.ENABLE_UNALIGNED, unaligned);
            conf.set(CheckpointingOptions.CHECKPOINTING_TIMEOUT, Duration.ofMinutes(10));
            conf.set(ExecutionOptions.BUFFER_TIMEOUT, Duration.ofMillis(100));
            conf.set(TaskManagerOptions.MEMORY_SEGMENT_SIZE, new MemorySize(segment));
            StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(p, conf);
            env.fromSource(new SeqSource(p, -1, keys, SeqSource.Mode.SEQ, sinkRate * factor, false),
                            WatermarkStrategy.noWatermarks(), "generator", Main.RECORD)
                    .uid("generator")
                    .map(new Functions.AddOne()).name("map").uid("map")
                    .keyBy(new Functions.KeyOf())
                    .reduce(new Functions.RunningSum()).name("sum").uid("sum")
                    .sinkTo(new PacedSink(sinkRate)).name("sink").uid("sink");
            client = env.executeAsync("runnel-bench-checkpoints-" + (unaligned ? "unaligned" : "aligned"));
            JobID job = client.getJobID();
            StandaloneKill.Rest rest = new StandaloneKill.Rest(port);
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(maxMs);
            JsonNode stats = null;
            boolean timedOut = true;
            while (System.nanoTime() < deadline) {
                if (client.getJobStatus().get().isGloballyTerminalState()) {
                    break;
                }
                stats = rest.get("/jobs/" + job + "/checkpoints");
                if (stats.path("counts").path("completed").asLong() >= warmup + measure) {
                    timedOut = false;
                    break;
                }
                Thread.sleep(100);
            }
            long end = System.nanoTime();
            stats = rest.get("/jobs/" + job + "/checkpoints");
            String status = client.getJobStatus().get().toString();
            Json r = new Json().put("job_status_before_cancel", status);
            List<Long> durations = new ArrayList<>();
            List<Long> sizes = new ArrayList<>();
            List<Long> channel = new ArrayList<>();
            List<Long> alignments = new ArrayList<>();
            int incomplete = 0;
            int failed = 0;
            String type = "";
            // The REST history lists the newest first; its counts may lag (they are cached), so a run
            // can have completed more than it measures.
            List<JsonNode> history = new ArrayList<>();
            stats.path("history").forEach(history::add);
            Collections.reverse(history);
            for (JsonNode c : history) {
                if (c.path("id").asLong() <= warmup || c.path("is_savepoint").asBoolean() || durations.size() == measure) {
                    continue;
                }
                switch (c.path("status").asText()) {
                    case "COMPLETED":
                        durations.add(c.path("end_to_end_duration").asLong());
                        sizes.add(c.path("state_size").asLong());
                        channel.add(c.path("persisted_data").asLong());
                        alignments.add(maxAlignment(rest, job, c.path("id").asLong()));
                        type = c.path("checkpoint_type").asText();
                        break;
                    case "FAILED":
                        failed++;
                        break;
                    default:
                        if (timedOut) {
                            incomplete++;
                        }
                }
            }
            client.cancel().get(30, TimeUnit.SECONDS);
            try {
                client.getJobExecutionResult().get(30, TimeUnit.SECONDS);
            } catch (Exception expected) {
                // a cancelled job reports its cancellation as an exception
            }
            long first = FIRST_SUNK.get();
            double sinkRps = first == 0 ? 0.0 : SUNK.sum() / ((end - first) / 1e9);
            r.put("checkpoint_type", type).put("checkpoint_ms", durations).put("state_bytes", sizes)
                    .put("channel_state_bytes", channel).put("alignment_ms", alignments)
                    .put("incomplete", incomplete).put("failed", failed).put("sink_rps", sinkRps);
            if (failed > 0) {
                r.put("error", failed + " checkpoints failed");
            }
            return r;
        } finally {
            deleteQuietly(dir);
        }
    }

    /** The longest alignment of a subtask in checkpoint id, in milliseconds, from its per-subtask details. */
    private static long maxAlignment(StandaloneKill.Rest rest, JobID job, long id) throws Exception {
        String base = "/jobs/" + job + "/checkpoints/details/" + id;
        long max = 0;
        var it = rest.get(base).path("tasks").fieldNames();
        while (it.hasNext()) {
            JsonNode sum = rest.get(base + "/subtasks/" + it.next()).path("summary");
            max = Math.max(max, sum.path("alignment").path("duration").path("max").asLong(0));
        }
        return max;
    }

    private static void deleteQuietly(Path dir) {
        Main.deleteTree(dir);
    }

    static double median(List<Long> xs) {
        if (xs.isEmpty()) {
            return 0.0;
        }
        List<Long> s = new ArrayList<>(xs);
        Collections.sort(s);
        int n = s.size();
        return n % 2 == 1 ? s.get(n / 2) : (s.get(n / 2 - 1) + s.get(n / 2)) / 2.0;
    }

    static double medianD(List<Double> xs) {
        if (xs.isEmpty()) {
            return 0.0;
        }
        List<Double> s = new ArrayList<>(xs);
        Collections.sort(s);
        int n = s.size();
        return n % 2 == 1 ? s.get(n / 2) : (s.get(n / 2 - 1) + s.get(n / 2)) / 2.0;
    }

    /** Takes {@code rate} records per second per subtask, sleeping whenever it is ahead of that pace. */
    static final class PacedSink implements Sink<Tuple2<Long, Long>> {
        private final double rate;

        PacedSink(double rate) {
            this.rate = rate;
        }

        @Override
        public SinkWriter<Tuple2<Long, Long>> createWriter(WriterInitContext ctx) {
            long perRecordNanos = Math.round(1e9 / rate);
            return new SinkWriter<>() {
                private long n;
                private long start;

                @Override
                public void write(Tuple2<Long, Long> r, Context c) throws InterruptedException {
                    if (n == 0) {
                        start = System.nanoTime();
                        FIRST_SUNK.compareAndSet(0, start);
                    }
                    n++;
                    if (n % 64 == 0) {
                        SUNK.add(64);
                        long ahead = n * perRecordNanos - (System.nanoTime() - start);
                        if (ahead > 0) {
                            TimeUnit.NANOSECONDS.sleep(ahead);
                        }
                    }
                }

                @Override
                public void flush(boolean endOfInput) {}

                @Override
                public void close() {}
            };
        }
    }
}

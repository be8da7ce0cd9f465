package dev.runnel.bench.flink.nexmark;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.Table;
import org.apache.flink.table.api.TableDescriptor;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.api.config.ExecutionConfigOptions;
import org.apache.flink.table.api.config.OptimizerConfigOptions;
import org.apache.flink.table.api.config.TableConfigOptions;
import org.apache.flink.types.Row;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.stream.Stream;

/**
 * The {@code nexmark} job of the Flink harness: one {@link Query} in Flink SQL over a source of
 * Nexmark events, in an embedded MiniCluster.
 *
 * <p>Two modes. With an output file, the result's changelog stream ({@code toChangelogStream}) goes
 * to a sink at parallelism 1 ({@link QuerySink}) that applies it ({@link QueryOutput}) and writes
 * JSON lines, to a temporary file renamed into place at the end, so the file is either the whole
 * result or absent. (A sink rather than {@code TableResult.collect}: with the per-job MiniCluster of a
 * local environment, the collect client finds the cluster gone when the job ends and logs
 * warnings with stack traces before it reads the last rows from the accumulators.) Without one, the query is
 * inserted into Flink's {@code blackhole} sink (the Nexmark project's own setup) and measured:
 * {@code events_per_s} = events ÷ the job's net runtime ({@link JobExecutionResult#getNetRuntime}:
 * from the job's start on the JobMaster to its end, including task deployment, excluding MiniCluster
 * start-up and SQL planning, which {@code execute_ms} includes).
 *
 * <p>The source is a {@link Source}: {@link #fileSource} reads the JSON lines file, and
 * {@link #streamSource} takes any {@code DataStream<Row>} of {@link QueryTables#EVENT_TYPE}, which is
 * where a generator plugs in. This class owns the job's configuration and timing; it does not own
 * the model or the generator.
 */
public final class NexmarkJob {
    private NexmarkJob() {}

    /**
     * What to run: the query, the parallelism, the watermark bound, the checkpoint interval (0 = off)
     * and the table tuning ({@link #tuning}).
     */
    public record Options(Query query, int parallelism, long outOfOrdernessMs, long checkpointIntervalMs,
                          Tuning tuning) {
        /** Checks the options. */
        public Options {
            if (parallelism < 1) {
                throw new IllegalArgumentException("--parallelism must be at least 1, got " + parallelism);
            }
            if (checkpointIntervalMs < 0) {
                throw new IllegalArgumentException("--checkpoint-interval must not be negative");
            }
            QueryTables.watermarkExpr(outOfOrdernessMs); // checks the bound
            if (tuning == null) {
                throw new IllegalArgumentException("no table tuning");
            }
        }

        /** The options with the Nexmark suite's tuning. */
        public Options(Query query, int parallelism, long outOfOrdernessMs, long checkpointIntervalMs) {
            this(query, parallelism, outOfOrdernessMs, checkpointIntervalMs, Tuning.NEXMARK);
        }
    }

    /**
     * The table options the planner gets beyond Flink's defaults. NEXMARK is the Nexmark suite's own
     * configuration for Flink (its conf/config.yaml): mini-batch aggregation (2 s, 50,000 rows) and
     * split distinct aggregation, which Flink's tuning guide recommends for such queries. NONE leaves
     * Flink's defaults, to show what the tuning is worth.
     */
    public enum Tuning {
        NEXMARK, NONE;

        /** Parses a --tuning value: nexmark or none. */
        public static Tuning of(String s) {
            return switch (s) {
                case "nexmark" -> NEXMARK;
                case "none" -> NONE;
                default -> throw new IllegalArgumentException("--tuning must be nexmark or none, got " + s);
            };
        }

        void apply(Configuration conf) {
            if (this == NEXMARK) {
                conf.set(ExecutionConfigOptions.TABLE_EXEC_MINIBATCH_ENABLED, true);
                conf.set(ExecutionConfigOptions.TABLE_EXEC_MINIBATCH_ALLOW_LATENCY, Duration.ofSeconds(2));
                conf.set(ExecutionConfigOptions.TABLE_EXEC_MINIBATCH_SIZE, 50_000L);
                conf.set(OptimizerConfigOptions.TABLE_OPTIMIZER_DISTINCT_AGG_SPLIT_ENABLED, true);
            }
        }
    }

    /** The events a job reads: it registers the table {@code events} and its views. */
    public interface Source {
        /** Registers {@code events}, {@code person}, {@code auction} and {@code bid} in {@code tEnv}. */
        void register(StreamExecutionEnvironment env, StreamTableEnvironment tEnv, long outOfOrdernessMs);

        /** How many events the source produces in all (it must be bounded). */
        long events();

        /** What the source is, for the result line. */
        String describe();
    }

    /**
     * The JSON lines file, checked and counted first ({@link QueryInput#check}), then read by
     * the filesystem connector with the json format.
     */
    public static Source fileSource(Path file) throws IOException {
        QueryInput.Counts counts = QueryInput.check(file);
        return new Source() {
            @Override
            public void register(StreamExecutionEnvironment env, StreamTableEnvironment tEnv, long boundMs) {
                QueryTables.registerFile(tEnv, file, boundMs);
            }

            @Override
            public long events() {
                return counts.events();
            }

            @Override
            public String describe() {
                return file.toString();
            }
        };
    }

    /**
     * A bounded stream of {@code events} events of type {@link QueryTables#EVENT_TYPE}, built by
     * {@code build} on the job's environment (for example {@code env.fromSource(generator, ...)}).
     * Its watermarks are replaced by the SQL declaration, as for the file.
     */
    public static Source streamSource(String name, long events,
                                      Function<StreamExecutionEnvironment, DataStream<Row>> build) {
        return new Source() {
            @Override
            public void register(StreamExecutionEnvironment env, StreamTableEnvironment tEnv, long boundMs) {
                QueryTables.registerStream(tEnv, build.apply(env), boundMs);
            }

            @Override
            public long events() {
                return events;
            }

            @Override
            public String describe() {
                return name;
            }
        };
    }

    /**
     * Runs the query: into {@code output} as JSON lines if it is not null, else into a blackhole sink,
     * measured. Returns the result line's fields, in order.
     */
    public static Map<String, Object> run(Options o, Source source, Path output) throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("engine", "flink-2.3.0");
        r.put("job", "nexmark");
        r.put("query", o.query().id());
        r.put("source", source.describe());
        r.put("events", source.events());
        r.put("parallelism", o.parallelism());
        r.put("out_of_orderness_ms", o.outOfOrdernessMs());
        r.put("checkpoint_interval_ms", o.checkpointIntervalMs());
        r.put("tuning", o.tuning().name().toLowerCase(java.util.Locale.ROOT));
        r.put("sink", output == null ? "blackhole" : "json-lines");

        Path ckptDir = Files.createTempDirectory("runnel-flink-nexmark-");
        try {
            StreamExecutionEnvironment env =
                    StreamExecutionEnvironment.createLocalEnvironment(o.parallelism(), config(o, ckptDir));
            StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
            o.tuning().apply(tEnv.getConfig().getConfiguration());
            source.register(env, tEnv, o.outOfOrdernessMs());

            long t0 = System.nanoTime();
            JobExecutionResult job;
            Table table = tEnv.sqlQuery(o.query().sql());
            if (output == null) {
                TableResult result = table.executeInsert(TableDescriptor.forConnector("blackhole").build());
                job = result.getJobClient()
                        .orElseThrow(() -> new IllegalStateException("the query ran no job"))
                        .getJobExecutionResult().get();
            } else {
                List<String> names = table.getResolvedSchema().getColumnNames();
                tEnv.toChangelogStream(table)
                        .sinkTo(new QuerySink(o.query(), names, output)).name("json-lines").setParallelism(1);
                job = env.execute("nexmark-" + o.query().id());
                r.put("output", output.toString());
                r.put("rows_out", lines(output));
            }
            long t1 = System.nanoTime();
            long netMs = job.getNetRuntime(TimeUnit.MILLISECONDS);
            r.put("net_runtime_ms", netMs);
            r.put("execute_ms", TimeUnit.NANOSECONDS.toMillis(t1 - t0));
            if (output == null) {
                r.put("events_per_s", Math.round(source.events() / (Math.max(1, netMs) / 1000.0)));
            }
            return r;
        } finally {
            deleteTree(ckptDir);
        }
    }

    private static long lines(Path file) throws IOException {
        try (Stream<String> s = Files.lines(file, StandardCharsets.UTF_8)) {
            return s.count();
        }
    }

    /**
     * The job's configuration: streaming, object reuse (SQL operators do not keep input rows), heap
     * state, no restarts (a failure fails the run), checkpoints with filesystem storage in {@code
     * dir} if asked for, and UTC as the session time zone, so that windows over TIMESTAMP_LTZ are
     * aligned to the epoch whatever the JVM's zone.
     */
    static Configuration config(Options o, Path dir) {
        Configuration conf = new Configuration();
        conf.set(ExecutionOptions.RUNTIME_MODE, RuntimeExecutionMode.STREAMING);
        conf.set(PipelineOptions.OBJECT_REUSE, true);
        conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
        conf.set(RestOptions.BIND_PORT, "0");
        conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        conf.set(TableConfigOptions.LOCAL_TIME_ZONE, "UTC");
        if (o.checkpointIntervalMs() > 0) {
            conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(o.checkpointIntervalMs()));
            conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
            conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, dir.toUri().toString());
        }
        return conf;
    }

    /**
     * Adds what a reader of a figure needs to judge it: the JVM, its maximum heap and collector, the
     * cores, the state backend and the object-reuse setting of {@link #config}.
     */
    public static void putSetup(Map<String, Object> r) {
        r.put("jvm", System.getProperty("java.vm.name") + " " + System.getProperty("java.version"));
        r.put("heap_max_bytes", Runtime.getRuntime().maxMemory());
        List<String> gcs = new java.util.ArrayList<>();
        for (java.lang.management.GarbageCollectorMXBean gc : java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()) {
            gcs.add(gc.getName());
        }
        r.put("gc", String.join(", ", gcs));
        r.put("cores", Runtime.getRuntime().availableProcessors());
        r.put("state_backend", "hashmap");
        r.put("object_reuse", true);
    }

    /** The result line for a person: the query, the events and, when measured, events/s. */
    public static String describe(Map<String, Object> r) {
        StringBuilder b = new StringBuilder();
        if (r.containsKey("outputs")) {
            return b.append(r.get("query")).append(" over ").append(r.get("source")).append(": ").append(r.get("outputs")).toString();
        }
        b.append(r.get("query")).append(": ").append(r.get("events")).append(" events from ").append(r.get("source"));
        if (r.containsKey("runs_events_per_s")) {
            b.append(String.format(", median %,d events/s [%,d–%,d] of runs %s after %s warm-up run(s) (parallelism %s,"
                            + " heap %d MiB, %s state, %s tuning, %s)",
                    (Long) r.get("events_per_s"), (Long) r.get("events_per_s_min"), (Long) r.get("events_per_s_max"),
                    r.get("runs_events_per_s"), r.get("warmup_runs"), r.get("parallelism"),
                    ((Long) r.get("heap_max_bytes")) >> 20, r.get("state_backend"), r.get("tuning"), r.get("jvm")));
        } else if (r.containsKey("events_per_s")) {
            b.append(String.format(", %,d events/s (net runtime %d ms, parallelism %s)",
                    (Long) r.get("events_per_s"), (Long) r.get("net_runtime_ms"), r.get("parallelism")));
        } else {
            b.append(", ").append(r.get("rows_out")).append(" lines to ").append(r.get("output"))
                    .append(" (").append(r.get("execute_ms")).append(" ms)");
        }
        return b.toString();
    }

    private static void deleteTree(Path dir) {
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(q -> q.toFile().delete());
        } catch (IOException e) {
            // best effort: a temporary directory
        }
    }
}

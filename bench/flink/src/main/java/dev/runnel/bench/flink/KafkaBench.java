package dev.runnel.bench.flink;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple4;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.KafkaSourceBuilder;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The {@code kafka} job: the pipeline of {@code runnel bench kafka} on Flink, against a broker given by
 * {@code --bootstrap}. KafkaSource (read_committed) → keyBy → running count per key (reduce) → KafkaSink
 * (AT_LEAST_ONCE, then EXACTLY_ONCE), at {@code --parallelism} with checkpoints every
 * {@code --checkpoint-interval}. The record format, the two measurements, the warm-up and the JSON fields
 * are those of {@code runnel bench kafka} (see its --help):
 *
 * <ul>
 *   <li>throughput: the whole of {@code --input-topic} (created and filled with {@code --records} records if
 *       missing; else it must hold exactly that many) into a fresh output topic, a bounded source;
 *       records/s = records / (when a read_committed reader of the output has read every record − when the
 *       source's deserializer saw the first record).</li>
 *   <li>latency: a fresh input produced at {@code --rate} for {@code --latency-duration} while the job runs;
 *       a read_committed reader takes produce-to-read times of the records produced after
 *       {@code --latency-skip} and after it read the first output record.</li>
 * </ul>
 *
 * Record: (key, seq, produced, count) as a Tuple4 of longs. Input value = produced (Unix ns), seq; output
 * value = produced, seq, count; keys are 8 bytes, all big endian.
 */
final class KafkaBench {
    private KafkaBench() {}

    static final TypeInformation<Tuple4<Long, Long, Long, Long>> REC =
            Types.TUPLE(Types.LONG, Types.LONG, Types.LONG, Types.LONG);
    static final int PARTITIONS = 3;

    /** System.nanoTime() of the first record the source's deserializer saw in the current run. */
    static final AtomicLong FIRST = new AtomicLong();

    private static String bootstrap;
    private static Admin admin;
    private static final String BASE = "flink-bench-" + ProcessHandle.current().pid() + "-"
            + Long.toString(System.currentTimeMillis() / 1000, 36);
    private static int names;
    private static boolean keepTopics;

    static Json run(Map<String, String> f) throws Exception {
        bootstrap = f.get("bootstrap");
        if (bootstrap == null) {
            throw new IllegalArgumentException("kafka needs --bootstrap HOST:PORT");
        }
        String input = f.getOrDefault("input-topic", "");
        long records = Main.longFlag(f, "records", 10_000_000L);
        long keys = Main.longFlag(f, "keys", 1000);
        int p = (int) Main.longFlag(f, "parallelism", 2);
        long ckptMs = Main.durationMs(f, "checkpoint-interval", 1000);
        String guarantee = f.getOrDefault("guarantee", "both");
        int rounds = (int) Main.longFlag(f, "rounds", 3);
        boolean warmup = Boolean.parseBoolean(f.getOrDefault("warmup", "true"));
        boolean eosFirst = Boolean.parseBoolean(f.getOrDefault("eos-first", "false"));
        double rate = Double.parseDouble(f.getOrDefault("rate", "20000"));
        long latencyMs = Main.durationMs(f, "latency-duration", 10_000);
        long skipMs = Main.durationMs(f, "latency-skip", 2_000);
        keepTopics = Boolean.parseBoolean(f.getOrDefault("keep-topics", "false"));
        Main.checkUnused(f, "bootstrap", "input-topic", "records", "keys", "parallelism", "checkpoint-interval",
                "guarantee", "rounds", "warmup", "eos-first", "rate", "latency-duration", "latency-skip", "keep-topics");
        List<String> gs;
        switch (guarantee) {
            case "both":
                gs = eosFirst ? List.of("exactly-once", "at-least-once") : List.of("at-least-once", "exactly-once");
                break;
            case "at-least-once": case "exactly-once": gs = List.of(guarantee); break;
            default: throw new IllegalArgumentException("--guarantee: exactly-once, at-least-once or both, not " + guarantee);
        }
        if (ckptMs <= 0 || rounds < 1 || keys < 1 || p < 1 || (latencyMs > 0 && (rate <= 0 || skipMs >= latencyMs))) {
            throw new IllegalArgumentException("invalid flags: positive --checkpoint-interval, --rounds, --keys, --parallelism;"
                    + " with --latency-duration a positive --rate and a shorter --latency-skip");
        }

        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        admin = Admin.create(ap);
        boolean ownInput = false;
        try {
            if (records > 0) {
                if (input.isEmpty()) {
                    input = name("in");
                    ownInput = true;
                }
                long have = topicRecords(input);
                if (have < 0) {
                    createTopic(input);
                    System.err.printf("flink kafka: filling %s with %d records%n", input, records);
                    fill(input, records, keys);
                } else if (have != records) {
                    throw new IllegalArgumentException("the input topic " + input + " holds " + have + " records, not --records " + records);
                }
            }
            Json res = new Json().put("engine", Main.ENGINE).put("job", "kafka").put("bootstrap", bootstrap)
                    .put("input_topic", input).put("records", records).put("keys", keys).put("parallelism", p)
                    .put("checkpoint_interval_ms", ckptMs);
            if (records > 0 && warmup) {
                for (String g : gs) {
                    Json r = throughputRun(g, input, records, p, ckptMs);
                    System.err.printf("flink kafka: warm-up %-13s %10.0f records/s (discarded)%n", g, (Double) r.get("records_per_s"));
                }
            }
            List<Object> tp = new ArrayList<>();
            List<Object> lat = new ArrayList<>();
            for (int round = 1; round <= rounds; round++) {
                for (String g : gs) {
                    if (records == 0) {
                        break;
                    }
                    Json r = throughputRun(g, input, records, p, ckptMs);
                    r.put("round", round);
                    System.err.printf("flink kafka: round %d %-13s %10.0f records/s (%s checkpoints)%n", round, g,
                            (Double) r.get("records_per_s"), r.get("checkpoints"));
                    tp.add(r);
                }
                for (String g : gs) {
                    if (latencyMs == 0) {
                        break;
                    }
                    Json r = latencyRun(g, keys, p, ckptMs, rate, latencyMs, skipMs);
                    r.put("round", round);
                    System.err.printf("flink kafka: round %d %-13s latency p50 %.1f ms p99 %.1f ms (%s samples)%n", round, g,
                            (Double) r.get("p50_ms"), (Double) r.get("p99_ms"), r.get("samples"));
                    lat.add(r);
                }
            }
            res.put("throughput", tp).put("latency", lat);
            Json summary = new Json();
            double eos = 0, alo = 0;
            for (String g : gs) {
                Json s = new Json();
                double[] v = field(tp, g, "records_per_s");
                if (v.length > 0) {
                    double[] m = medianRange(v);
                    s.put("records_per_s", m[0]).put("records_per_s_min", m[1]).put("records_per_s_max", m[2]);
                    if (g.equals("exactly-once")) {
                        eos = m[0];
                    } else {
                        alo = m[0];
                    }
                }
                double[] p50 = field(lat, g, "p50_ms");
                if (p50.length > 0) {
                    double[] m = medianRange(p50);
                    double[] m99 = medianRange(field(lat, g, "p99_ms"));
                    s.put("p50_ms", m[0]).put("p50_ms_min", m[1]).put("p50_ms_max", m[2])
                            .put("p99_ms", m99[0]).put("p99_ms_min", m99[1]).put("p99_ms_max", m99[2]);
                }
                summary.put(g, s);
            }
            res.put("summary", summary);
            if (eos > 0 && alo > 0) {
                res.put("ratio_eos_alo", eos / alo);
            }
            return res;
        } finally {
            if (ownInput) {
                deleteTopics(input);
            }
            admin.close();
        }
    }

    static double[] field(List<Object> runs, String guarantee, String key) {
        return runs.stream().map(o -> (Json) o).filter(j -> guarantee.equals(j.get("guarantee")))
                .mapToDouble(j -> ((Number) j.get(key)).doubleValue()).toArray();
    }

    static double[] medianRange(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        int n = s.length;
        double med = n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
        return new double[] {med, s[0], s[n - 1]};
    }

    // ---- the two runs ---------------------------------------------------------------------------

    static Json throughputRun(String guarantee, String input, long records, int p, long ckptMs) throws Exception {
        String out = name("out");
        createTopic(out);
        Path dir = Files.createTempDirectory("runnel-flink-kafka-");
        try (Reader reader = new Reader(out, records, 0)) {
            FIRST.set(0);
            StreamExecutionEnvironment env = job(p, ckptMs, dir, source(input).setBounded(OffsetsInitializer.latest()), sink(out, guarantee));
            long start = System.nanoTime();
            org.apache.flink.api.common.JobExecutionResult jr = env.execute("flink-kafka-bench-" + guarantee);
            long jobEnd = System.nanoTime();
            reader.await(records, 30_000);
            double elapsedNs = reader.lastNanos - FIRST.get();
            return new Json().put("guarantee", guarantee).put("records", records)
                    .put("elapsed_ms", elapsedNs / 1e6).put("records_per_s", records / (elapsedNs / 1e9))
                    .put("job_ms", (jobEnd - start) / 1e6)
                    .put("net_runtime_ms", jr.getNetRuntime(TimeUnit.MILLISECONDS))
                    .put("checkpoints", Probes.CHECKPOINTS.size())
                    .put("duplicates", reader.dups).put("output_topic", out);
        } finally {
            Probes.CHECKPOINTS.clear();
            Main.deleteTree(dir);
            deleteTopics(out);
        }
    }

    static Json latencyRun(String guarantee, long keys, int p, long ckptMs, double rate, long durationMs, long skipMs)
            throws Exception {
        String in = name("lat-in"), out = name("lat-out");
        createTopic(in);
        createTopic(out);
        long total = (long) (rate * durationMs / 1000.0);
        Path dir = Files.createTempDirectory("runnel-flink-kafka-");
        StreamExecutionEnvironment env = job(p, ckptMs, dir, source(in), sink(out, guarantee));
        // The input is produced from when the job was submitted (the MiniCluster is up); --latency-skip
        // counts from there, as in runnel bench kafka.
        JobClient jc = env.executeAsync("flink-kafka-bench-latency-" + guarantee);
        long start = System.nanoTime();
        long startEpoch = epochNanos();
        try (Reader reader = new Reader(out, total, startEpoch + skipMs * 1_000_000L)) {
            try {
                produceAtRate(in, total, keys, rate, start);
                reader.await(total, 30_000);
            } finally {
                jc.cancel().get(60, TimeUnit.SECONDS);
            }
            reader.close();
            long[] lat = Arrays.copyOf(reader.lat, reader.nlat);
            if (lat.length == 0) {
                throw new IllegalStateException("no latency sample: --latency-skip covers the whole run");
            }
            Arrays.sort(lat);
            return new Json().put("guarantee", guarantee).put("rate", rate).put("produced", total)
                    .put("samples", lat.length).put("first_output_ms", (reader.firstEpochNanos - startEpoch) / 1e6)
                    .put("p50_ms", pct(lat, 0.5)).put("p99_ms", pct(lat, 0.99))
                    .put("max_ms", lat[lat.length - 1] / 1e6).put("duplicates", reader.dups)
                    .put("input_topic", in).put("output_topic", out);
        } finally {
            Main.deleteTree(dir);
            deleteTopics(in, out);
        }
    }

    static double pct(long[] sorted, double p) {
        return sorted[Math.min(sorted.length - 1, (int) (p * sorted.length))] / 1e6;
    }

    // ---- the job ----------------------------------------------------------------------------------

    static KafkaSourceBuilder<Tuple4<Long, Long, Long, Long>> source(String topic) {
        return KafkaSource.<Tuple4<Long, Long, Long, Long>>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(topic)
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setDeserializer(new Decode())
                .setProperty(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed")
                // Runnel's source commits no offsets without a group: neither does this one.
                .setProperty("commit.offsets.on.checkpoint", "false");
    }

    static KafkaSink<Tuple4<Long, Long, Long, Long>> sink(String topic, String guarantee) {
        return KafkaSink.<Tuple4<Long, Long, Long, Long>>builder()
                .setBootstrapServers(bootstrap)
                .setRecordSerializer(new Encode(topic))
                .setDeliveryGuarantee(guarantee.equals("exactly-once") ? DeliveryGuarantee.EXACTLY_ONCE : DeliveryGuarantee.AT_LEAST_ONCE)
                .setTransactionalIdPrefix(topic)
                // Runnel's default transaction timeout: the broker's transaction.max.timeout.ms.
                .setProperty(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "900000")
                .build();
    }

    static StreamExecutionEnvironment job(int p, long ckptMs, Path dir, KafkaSourceBuilder<Tuple4<Long, Long, Long, Long>> src,
            KafkaSink<Tuple4<Long, Long, Long, Long>> sink) {
        Configuration conf = Main.baseConfig(ckptMs, dir);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(p, conf);
        env.fromSource(src.build(), WatermarkStrategy.noWatermarks(), "kafka-in", REC).uid("kafka-in")
                .keyBy(new KeyOf())
                .reduce(new Count()).name("count").uid("count")
                .sinkTo(sink).name("kafka-out").uid("kafka-out");
        return env;
    }

    static final class KeyOf implements KeySelector<Tuple4<Long, Long, Long, Long>, Long> {
        @Override
        public Long getKey(Tuple4<Long, Long, Long, Long> r) {
            return r.f0;
        }
    }

    /**
     * The running count: into the state object in place (see Functions.RunningSum for why that is safe),
     * carrying the latest record's sequence number and produce time. It counts the completed checkpoints
     * into Probes.CHECKPOINTS.
     */
    static final class Count implements ReduceFunction<Tuple4<Long, Long, Long, Long>>, CheckpointListener {
        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            Probes.CHECKPOINTS.add(checkpointId);
        }

        @Override
        public Tuple4<Long, Long, Long, Long> reduce(Tuple4<Long, Long, Long, Long> acc, Tuple4<Long, Long, Long, Long> r) {
            acc.f1 = r.f1;
            acc.f2 = r.f2;
            acc.f3 = acc.f3 + r.f3;
            return acc;
        }
    }

    static final class Decode implements KafkaRecordDeserializationSchema<Tuple4<Long, Long, Long, Long>> {
        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<Tuple4<Long, Long, Long, Long>> out) {
            if (FIRST.get() == 0) {
                FIRST.compareAndSet(0, System.nanoTime());
            }
            byte[] k = r.key(), v = r.value();
            if (k == null || k.length != 8 || v == null || v.length != 16) {
                throw new IllegalArgumentException("record " + r.topic() + "/" + r.partition() + "@" + r.offset() + " is not the benchmark's");
            }
            ByteBuffer vb = ByteBuffer.wrap(v);
            long produced = vb.getLong(), seq = vb.getLong();
            out.collect(Tuple4.of(ByteBuffer.wrap(k).getLong(), seq, produced, 1L));
        }

        @Override
        public TypeInformation<Tuple4<Long, Long, Long, Long>> getProducedType() {
            return REC;
        }
    }

    static final class Encode implements KafkaRecordSerializationSchema<Tuple4<Long, Long, Long, Long>> {
        private final String topic;

        Encode(String topic) {
            this.topic = topic;
        }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(Tuple4<Long, Long, Long, Long> r, KafkaSinkContext ctx, Long ts) {
            byte[] k = ByteBuffer.allocate(8).putLong(r.f0).array();
            byte[] v = ByteBuffer.allocate(24).putLong(r.f2).putLong(r.f1).putLong(r.f3).array();
            return new ProducerRecord<>(topic, k, v);
        }
    }

    // ---- the reader of the output -----------------------------------------------------------------

    /** Reads a topic read_committed from its start on a thread of its own; see runnel bench kafka's outputReader. */
    static final class Reader implements AutoCloseable {
        private final KafkaConsumer<byte[], byte[]> consumer;
        private final long[] seen;
        private long latencyFrom;
        /** epochNanos() when the first output record was read (0 until then). */
        volatile long firstEpochNanos;
        final long[] lat;
        int nlat;
        volatile long distinct;
        volatile long lastNanos;
        volatile long dups;
        private volatile boolean stop;
        private final AtomicReference<Throwable> err = new AtomicReference<>();
        private final Thread thread;

        Reader(String topic, long expect, long latencyFromEpochNanos) {
            Properties cp = new Properties();
            cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
            cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            consumer = new KafkaConsumer<>(cp);
            List<TopicPartition> parts = new ArrayList<>();
            for (int i = 0; i < PARTITIONS; i++) {
                parts.add(new TopicPartition(topic, i));
            }
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            seen = new long[(int) ((expect + 63) / 64)];
            latencyFrom = latencyFromEpochNanos;
            lat = new long[latencyFromEpochNanos > 0 ? (int) expect : 0];
            thread = new Thread(this::loop, "output-reader");
            thread.setDaemon(true);
            thread.start();
        }

        private void loop() {
            try {
                while (!stop) {
                    ConsumerRecords<byte[], byte[]> rs = consumer.poll(Duration.ofMillis(100));
                    long now = epochNanos(), mono = System.nanoTime();
                    for (ConsumerRecord<byte[], byte[]> r : rs) {
                        ByteBuffer v = ByteBuffer.wrap(r.value());
                        long produced = v.getLong(), seq = v.getLong();
                        if (seq < 0 || seq / 64 >= seen.length) {
                            throw new IllegalStateException("output record with sequence number " + seq + ", beyond the input");
                        }
                        long bit = 1L << (seq % 64);
                        if ((seen[(int) (seq / 64)] & bit) != 0) {
                            dups++;
                            continue;
                        }
                        seen[(int) (seq / 64)] |= bit;
                        if (firstEpochNanos == 0) {
                            // Latency counts from when the pipeline runs end to end, as in runnel bench kafka.
                            firstEpochNanos = now;
                            latencyFrom = Math.max(latencyFrom, now);
                        }
                        if (lat.length > 0 && produced >= latencyFrom && nlat < lat.length) {
                            lat[nlat++] = now - produced;
                        }
                        lastNanos = mono;
                        distinct++;
                    }
                }
            } catch (Throwable t) {
                err.compareAndSet(null, t);
            } finally {
                consumer.close();
            }
        }

        /** Waits until want distinct records were read; fails after quietMs without a new one. */
        void await(long want, long quietMs) throws InterruptedException {
            long last = -1, lastAt = System.nanoTime();
            while (true) {
                Throwable t = err.get();
                if (t != null) {
                    throw new IllegalStateException("reading the output: " + t, t);
                }
                long n = distinct;
                if (n >= want) {
                    return;
                }
                if (n != last) {
                    last = n;
                    lastAt = System.nanoTime();
                } else if (System.nanoTime() - lastAt > quietMs * 1_000_000L) {
                    throw new IllegalStateException("the read_committed reader of the output has read " + n + " of " + want
                            + " records, and nothing new for " + quietMs + " ms");
                }
                Thread.sleep(5);
            }
        }

        @Override
        public void close() throws InterruptedException {
            stop = true;
            thread.join();
        }
    }

    // ---- Kafka helpers ------------------------------------------------------------------------------

    static long epochNanos() {
        Instant i = Instant.now();
        return i.getEpochSecond() * 1_000_000_000L + i.getNano();
    }

    static String name(String what) {
        return BASE + "-" + what + "-" + (++names);
    }

    static void createTopic(String name) throws Exception {
        admin.createTopics(List.of(new NewTopic(name, PARTITIONS, (short) 1))).all().get(30, TimeUnit.SECONDS);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (true) {
            try {
                TopicDescription d = admin.describeTopics(List.of(name)).allTopicNames().get(30, TimeUnit.SECONDS).get(name);
                if (d.partitions().size() == PARTITIONS && d.partitions().stream().allMatch(pi -> pi.leader() != null)) {
                    return;
                }
            } catch (java.util.concurrent.ExecutionException e) {
                // not known yet
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("topic " + name + " has no leader for each partition after 30 s");
            }
            Thread.sleep(20);
        }
    }

    static void deleteTopics(String... names) {
        if (keepTopics) {
            return;
        }
        try {
            admin.deleteTopics(List.of(names)).all().get(30, TimeUnit.SECONDS);
        } catch (Exception e) {
            // best effort: a topic left behind costs disk only
        }
    }

    /** The records in topic (the sum of its partitions' end offsets), or -1 when it does not exist. */
    static long topicRecords(String topic) throws Exception {
        if (!admin.listTopics().names().get(30, TimeUnit.SECONDS).contains(topic)) {
            return -1;
        }
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        d.partitions().forEach(pi -> req.put(new TopicPartition(topic, pi.partition()), OffsetSpec.latest()));
        long n = 0;
        for (var e : admin.listOffsets(req).all().get(30, TimeUnit.SECONDS).values()) {
            n += e.offset();
        }
        return n;
    }

    static KafkaProducer<byte[], byte[]> producer(long lingerMs) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.LINGER_MS_CONFIG, Long.toString(lingerMs));
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return new KafkaProducer<>(pp);
    }

    static ProducerRecord<byte[], byte[]> input(String topic, long seq, long keys) {
        byte[] k = ByteBuffer.allocate(8).putLong(seq % keys).array();
        byte[] v = ByteBuffer.allocate(16).putLong(epochNanos()).putLong(seq).array();
        return new ProducerRecord<>(topic, k, v);
    }

    static void fill(String topic, long n, long keys) throws Exception {
        AtomicReference<Exception> failed = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> p = producer(10)) {
            for (long i = 0; i < n && failed.get() == null; i++) {
                p.send(input(topic, i, keys), (md, e) -> {
                    if (e != null) {
                        failed.compareAndSet(null, e);
                    }
                });
            }
            p.flush();
        }
        if (failed.get() != null) {
            throw new IllegalStateException("filling " + topic + ": " + failed.get(), failed.get());
        }
    }

    /** Produces total records to topic at rate per second from start (System.nanoTime()), each stamped with its produce time. */
    static void produceAtRate(String topic, long total, long keys, double rate, long start) throws Exception {
        AtomicReference<Exception> failed = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> p = producer(0)) {
            long sent = 0;
            while (sent < total) {
                long due = Math.min(total, (long) ((System.nanoTime() - start) / 1e9 * rate) + 1);
                for (; sent < due; sent++) {
                    p.send(input(topic, sent, keys), (md, e) -> {
                        if (e != null) {
                            failed.compareAndSet(null, e);
                        }
                    });
                }
                if (failed.get() != null) {
                    throw new IllegalStateException("producing the latency input: " + failed.get(), failed.get());
                }
                Thread.sleep(1);
            }
            p.flush();
        }
    }
}

package dev.runnel.bench.flink;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.atomic.AtomicLongArray;

/** The operators of the benchmark jobs. Records are {@code Tuple2<Long, Long>} = (key, value). */
public final class Functions {
    private Functions() {}

    /**
     * map: value = value + 1, key unchanged; updates the record in place (object reuse is on).
     * Also notes completed checkpoints, which costs nothing per record.
     */
    static final class AddOne implements MapFunction<Tuple2<Long, Long>, Tuple2<Long, Long>>, CheckpointListener {
        @Override
        public Tuple2<Long, Long> map(Tuple2<Long, Long> r) {
            r.f1 = r.f1 + 1;
            return r;
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            Probes.CHECKPOINTS.add(checkpointId);
        }
    }

    static final class KeyOf implements KeySelector<Tuple2<Long, Long>, Long> {
        @Override
        public Long getKey(Tuple2<Long, Long> r) {
            return r.f0;
        }
    }

    /**
     * Keyed running sum, emitting (key, sum) for every record. Adds into the state object in place:
     * the hashmap backend copies a value on access while a snapshot holds it, and the network input
     * hands the operator a fresh object per record, so this is safe and allocates nothing extra.
     */
    static final class RunningSum implements ReduceFunction<Tuple2<Long, Long>> {
        @Override
        public Tuple2<Long, Long> reduce(Tuple2<Long, Long> acc, Tuple2<Long, Long> r) {
            acc.f1 = acc.f1 + r.f1;
            return acc;
        }
    }

    /** Discards records but folds them into a checksum, so none of the work can be optimised away. */
    static final class ChecksumSink implements Sink<Tuple2<Long, Long>> {
        @Override
        public SinkWriter<Tuple2<Long, Long>> createWriter(WriterInitContext ctx) {
            Probes.taskStarted("sum+sink", ctx.getTaskInfo().getIndexOfThisSubtask());
            return new SinkWriter<>() {
                private long count;
                private long checksum;

                @Override
                public void write(Tuple2<Long, Long> r, Context c) {
                    count++;
                    checksum += r.f1;
                }

                @Override
                public void flush(boolean endOfInput) {
                    if (endOfInput) {
                        Probes.sinkEnded(System.nanoTime());
                    }
                }

                @Override
                public void close() {
                    Probes.SINK_RECORDS.add(count);
                    Probes.SINK_CHECKSUM.add(checksum);
                    count = 0;
                    checksum = 0;
                }
            };
        }
    }

    // ---- recovery job -----------------------------------------------------------------------

    /**
     * map: value = value + 1, and subtask {@code failSubtask} of attempt 0 throws once, when
     * {@code failAfterNanos} have passed since the first record of the job.
     */
    static final class FailingMap extends RichMapFunction<Tuple2<Long, Long>, Tuple2<Long, Long>> {
        private final long failAfterNanos;
        private final int failSubtask;
        private transient boolean armed;
        private transient int subtask;
        private transient boolean noteFirst; // a restarted attempt notes when its first record came

        FailingMap(long failAfterNanos, int failSubtask) {
            this.failAfterNanos = failAfterNanos;
            this.failSubtask = failSubtask;
        }

        @Override
        public void open(OpenContext ctx) {
            subtask = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
            int attempt = getRuntimeContext().getTaskInfo().getAttemptNumber();
            Probes.taskStarted("map", subtask);
            armed = failAfterNanos >= 0 && subtask == failSubtask && attempt == 0;
            noteFirst = attempt > 0;
        }

        @Override
        public Tuple2<Long, Long> map(Tuple2<Long, Long> r) {
            if (noteFirst) {
                noteFirst = false;
                AtomicLongArray resumed = Probes.MAP_RESUMED;
                if (subtask < resumed.length()) { // empty in a TaskManager JVM, which only the harness sizes
                    resumed.compareAndSet(subtask, 0, System.nanoTime());
                }
            }
            if (armed) {
                long first = Probes.FIRST_EMIT.get();
                long now = System.nanoTime();
                if (first != 0 && now - first >= failAfterNanos) {
                    armed = false;
                    Probes.FAIL_EMITTED.set(Probes.sourceEmittedTotal());
                    Probes.FAIL_AT.set(now);
                    throw new IllegalStateException("injected failure in map subtask " + failSubtask);
                }
            }
            r.f1 = r.f1 + 1;
            return r;
        }
    }

    /** Keyed state of the checker: the highest sequence number seen and a 64-wide seen-bitmap below it. */
    public static final class SeqState {
        public long last;
        public long window; // bit i set: sequence number (last - i) was seen

        public SeqState() {}
    }

    /**
     * Keyed counter with sequence checking. Each key's values arrive as 1, 2, 3, ... (per-key
     * sequence + 1 from the map). A jump forward counts the skipped numbers as lost; a number behind
     * the highest seen is a duplicate if it was seen (or is too old to know), otherwise it fills a
     * gap late: out of order, and no longer lost. Emits the record unchanged.
     */
    static final class SeqChecker extends KeyedProcessFunction<Long, Tuple2<Long, Long>, Tuple2<Long, Long>>
            implements CheckpointListener {
        private transient ValueState<SeqState> state;
        private transient AtomicLongArray maxSeq;

        @Override
        public void open(OpenContext ctx) {
            state = getRuntimeContext().getState(new ValueStateDescriptor<>("seq", SeqState.class));
            maxSeq = Probes.maxSeqPerKey;
        }

        @Override
        public void processElement(Tuple2<Long, Long> r, Context ctx, Collector<Tuple2<Long, Long>> out)
                throws Exception {
            long v = r.f1;
            SeqState st = state.value();
            if (st == null) {
                st = new SeqState();
                st.window = 1; // sequence number 0 stands for "before the first record"
            }
            if (v > st.last) {
                long d = v - st.last;
                if (d > 1) {
                    Probes.LOST.add(d - 1);
                }
                st.window = d >= 64 ? 1 : (st.window << d) | 1;
                st.last = v;
            } else {
                long d = st.last - v;
                if (d >= 64 || (st.window & (1L << d)) != 0) {
                    Probes.DUPLICATED.increment();
                } else {
                    Probes.OUT_OF_ORDER.increment();
                    Probes.LOST.decrement();
                    st.window |= 1L << d;
                }
            }
            state.update(st);
            Probes.CHECKED.increment();
            int k = (int) (long) r.f0;
            if (k < maxSeq.length() && v > maxSeq.get(k)) { // empty in a TaskManager JVM
                maxSeq.lazySet(k, v);
            }
            out.collect(r);
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            Probes.CHECKPOINTS.add(checkpointId);
        }
    }

    /**
     * Sink of the recovery job: notes, per (sink subtask, path), when records arrive, and every
     * silence longer than {@link Probes#GAP_NANOS}. The path of a record is the source/map subtask
     * it passed through, {@code key % P} (each key is generated by exactly one source subtask,
     * which forwards to the map subtask of the same index).
     */
    static final class TimingSink implements Sink<Tuple2<Long, Long>> {
        private final int paths;

        TimingSink(int paths) {
            this.paths = paths;
        }

        @Override
        public SinkWriter<Tuple2<Long, Long>> createWriter(WriterInitContext ctx) {
            final int subtask = ctx.getTaskInfo().getIndexOfThisSubtask();
            Probes.taskStarted("checker+sink", subtask);
            final AtomicLongArray lastSeen = Probes.sinkLastSeen;
            return new SinkWriter<>() {
                private long checksum;

                @Override
                public void write(Tuple2<Long, Long> r, Context c) {
                    long now = System.nanoTime();
                    int slot = subtask * paths + (int) (r.f0 % paths);
                    long prev = lastSeen.get(slot);
                    if (prev != 0 && now - prev > Probes.GAP_NANOS) {
                        Probes.SINK_GAPS.add(new long[] {subtask, slot - subtask * paths, prev, now});
                    }
                    lastSeen.lazySet(slot, now);
                    checksum += r.f1;
                    Probes.SINK_SEEN.increment();
                }

                @Override
                public void flush(boolean endOfInput) {}

                @Override
                public void close() {
                    Probes.SINK_CHECKSUM.add(checksum);
                }
            };
        }
    }

    /**
     * Sink of the {@code standalone-kill} job. It observes what {@link TimingSink} does, but writes
     * it to a file, because there the sinks run in TaskManager JVMs and the harness in none of them.
     * Each sink subtask attempt appends to its own file {@code sink-<subtask>-<attempt>.log} in a
     * directory that every JVM of the cluster shares (one machine). Lines, times in wall-clock
     * microseconds ({@link Probes#epochMicros()}, comparable between JVMs and with Flink's REST
     * timestamps):
     * <pre>
     *   start &lt;t&gt;                    the writer was created
     *   first &lt;path&gt; &lt;t&gt;            the attempt's first record of that path
     *   gap &lt;path&gt; &lt;from&gt; &lt;to&gt;       no record of that path for longer than the gap threshold
     *   counts &lt;pid:loader&gt; &lt;lost&gt; &lt;duplicated&gt; &lt;out of order&gt; &lt;checked&gt;
     *                               the sequence checker's counts in this JVM and class loader
     *                               (where {@link Probes} lives), all attempts so far
     * </pre>
     * A line is written unbuffered when it happens, so a TaskManager that is killed loses none that
     * it wrote. Bound: {@code paths} "first" lines per attempt, at most one "gap" line per path per
     * threshold (50 ms by default: 20 per path per second, only while a path stalls), and one
     * "counts" line per {@link #COUNTS_NANOS} while records arrive.
     */
    static final class FileTimingSink implements Sink<Tuple2<Long, Long>> {
        /** How often a sink writes the checker's counts (the checker and the sink share a task). */
        static final long COUNTS_NANOS = 100_000_000L;
        /**
         * Whose counters these are: this JVM, and this class loader of the job's classes (a
         * TaskManager that gives up all of a job's slots may load them afresh, with new statics).
         */
        private static final String COUNTER_OWNER = ProcessHandle.current().pid() + ":"
                + Long.toHexString(new java.util.Random().nextLong());
        private final String dir;
        private final int paths;
        private final long gapNanos;

        FileTimingSink(String dir, int paths, long gapNanos) {
            this.dir = dir;
            this.paths = paths;
            this.gapNanos = gapNanos;
        }

        @Override
        public SinkWriter<Tuple2<Long, Long>> createWriter(WriterInitContext ctx) throws IOException {
            final int subtask = ctx.getTaskInfo().getIndexOfThisSubtask();
            final int attempt = ctx.getTaskInfo().getAttemptNumber();
            Probes.taskStarted("checker+sink", subtask);
            Path file = Paths.get(dir, "sink-" + subtask + "-" + attempt + ".log");
            final OutputStream out = Files.newOutputStream(file, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            // One calibration per attempt maps this JVM's nanoTime (cheap, per record) to the wall clock.
            final long wallBase = Probes.epochMicros();
            final long nanoBase = System.nanoTime();
            out.write(("start " + wallBase + "\n").getBytes(StandardCharsets.US_ASCII));
            return new SinkWriter<>() {
                private final long[] last = new long[paths]; // nanoTime of the path's last record; 0: none yet
                private long checksum;
                private long countsAt = nanoBase;

                private long wall(long nanos) {
                    return wallBase + (nanos - nanoBase) / 1_000L;
                }

                @Override
                public void write(Tuple2<Long, Long> r, Context c) throws IOException {
                    long now = System.nanoTime();
                    int path = (int) (r.f0 % paths);
                    long prev = last[path];
                    if (prev == 0) {
                        out.write(("first " + path + " " + wall(now) + "\n").getBytes(StandardCharsets.US_ASCII));
                    } else if (now - prev > gapNanos) {
                        out.write(("gap " + path + " " + wall(prev) + " " + wall(now) + "\n")
                                .getBytes(StandardCharsets.US_ASCII));
                    }
                    last[path] = now;
                    checksum += r.f1;
                    if (now - countsAt > COUNTS_NANOS) {
                        countsAt = now;
                        out.write(("counts " + COUNTER_OWNER + " " + Probes.LOST.sum() + " " + Probes.DUPLICATED.sum() + " "
                                + Probes.OUT_OF_ORDER.sum() + " " + Probes.CHECKED.sum() + "\n")
                                .getBytes(StandardCharsets.US_ASCII));
                    }
                }

                @Override
                public void flush(boolean endOfInput) {}

                @Override
                public void close() throws IOException {
                    Probes.SINK_CHECKSUM.add(checksum);
                    out.close();
                }
            };
        }
    }
}

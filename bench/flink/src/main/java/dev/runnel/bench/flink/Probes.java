package dev.runnel.bench.flink;

import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.LongAdder;

/**
 * Measurements taken from inside the running job.
 *
 * <p>The embedded MiniCluster runs every task in this JVM, and the job's classes come from the
 * application class path (a local environment ships no user jars), so these statics are shared by
 * all subtasks and survive task restarts. Hot-path writes are single-writer {@code lazySet}s or
 * {@link LongAdder}s; everything else happens once per task attempt or once per failure.
 */
final class Probes {
    private Probes() {}

    // ---- both jobs --------------------------------------------------------------------------

    /** System.nanoTime() of the first record any source emitted (0 until then). */
    static final AtomicLong FIRST_EMIT = new AtomicLong();

    static void firstEmit(long nanos) {
        FIRST_EMIT.compareAndSet(0, nanos);
    }

    /** Task attempts started, per "vertex/subtask". */
    private static final Map<String, AtomicInteger> ATTEMPTS = new ConcurrentHashMap<>();

    static void taskStarted(String vertex, int subtask) {
        ATTEMPTS.computeIfAbsent(vertex + "/" + subtask, k -> new AtomicInteger()).incrementAndGet();
    }

    /** Subtasks that ran more than once. */
    static int restartedSubtasks() {
        int n = 0;
        for (AtomicInteger a : ATTEMPTS.values()) {
            if (a.get() > 1) {
                n++;
            }
        }
        return n;
    }

    static int subtasksSeen() {
        return ATTEMPTS.size();
    }

    // ---- throughput job ---------------------------------------------------------------------

    /** System.nanoTime() at which the last sink subtask reached the end of its input. */
    static final AtomicLong LAST_SINK_END = new AtomicLong();
    static final LongAdder SINK_RECORDS = new LongAdder();
    static final LongAdder SINK_CHECKSUM = new LongAdder();

    static void sinkEnded(long nanos) {
        LAST_SINK_END.accumulateAndGet(nanos, Math::max);
    }

    /** Clears what one throughput run records, for the next run in the same JVM. */
    static void resetThroughput() {
        FIRST_EMIT.set(0);
        LAST_SINK_END.set(0);
        SINK_RECORDS.reset();
        SINK_CHECKSUM.reset();
        CHECKPOINTS.clear();
    }

    // ---- recovery job -----------------------------------------------------------------------

    /** Emission counters of every source reader instance ever started (replays included). */
    private static final ConcurrentLinkedQueue<AtomicLong> SOURCE_COUNTERS = new ConcurrentLinkedQueue<>();

    static AtomicLong registerSource(int subtask) {
        AtomicLong c = new AtomicLong();
        SOURCE_COUNTERS.add(c);
        return c;
    }

    static long sourceEmittedTotal() {
        long n = 0;
        for (AtomicLong c : SOURCE_COUNTERS) {
            n += c.get();
        }
        return n;
    }

    /**
     * Per source subtask, when its first attempt in this JVM started (wall-clock microseconds): the
     * epoch of its rate limit until a checkpoint carries it in the split.
     */
    private static final Map<Integer, Long> SOURCE_EPOCH = new ConcurrentHashMap<>();

    static long sourceEpochMicros(int subtask, long nowMicros) {
        return SOURCE_EPOCH.computeIfAbsent(subtask, k -> nowMicros);
    }

    /**
     * The wall clock in microseconds since the Unix epoch. Unlike System.nanoTime() it is
     * comparable between JVMs, and with Flink's REST timestamps (epoch milliseconds).
     */
    static long epochMicros() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1_000_000L + t.getNano() / 1_000;
    }

    /** System.nanoTime() at which the map subtask threw (0: not yet). */
    static final AtomicLong FAIL_AT = new AtomicLong();
    static final AtomicLong FAIL_EMITTED = new AtomicLong();

    // checker
    static final LongAdder CHECKED = new LongAdder();
    static final LongAdder LOST = new LongAdder();
    static final LongAdder DUPLICATED = new LongAdder();
    static final LongAdder OUT_OF_ORDER = new LongAdder();
    static final ConcurrentSkipListSet<Long> CHECKPOINTS = new ConcurrentSkipListSet<>();
    /** Highest per-key sequence number the checker ever saw, per key; one writer per key. */
    static volatile AtomicLongArray maxSeqPerKey = new AtomicLongArray(0);

    // sink: per (sink subtask, path) the arrival time of the last record, and every gap > GAP_NANOS
    static final long GAP_NANOS = 1_000_000L;
    static volatile AtomicLongArray sinkLastSeen = new AtomicLongArray(0);
    static final ConcurrentLinkedQueue<long[]> SINK_GAPS = new ConcurrentLinkedQueue<>(); // {sink, path, from, to}
    static final LongAdder SINK_SEEN = new LongAdder();

    /** Per map subtask, when its first restarted attempt processed its first record (0: never). */
    static volatile AtomicLongArray MAP_RESUMED = new AtomicLongArray(0);

    static void initRecovery(int keys, int sinkParallelism, int paths) {
        MAP_RESUMED = new AtomicLongArray(paths);
        maxSeqPerKey = new AtomicLongArray(keys);
        sinkLastSeen = new AtomicLongArray(sinkParallelism * paths);
    }

    /** A sampled time series of {@link #sourceEmittedTotal()}: {nanos, emitted} pairs. */
    static final List<long[]> SOURCE_SAMPLES = new ArrayList<>();
}

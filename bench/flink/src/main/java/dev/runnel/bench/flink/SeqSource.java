package dev.runnel.bench.flink;

import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.core.io.SimpleVersionedSerializer;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The record generator of Runnel's benchmarks, as a Flink (FLIP-27) source.
 *
 * <p>Source subtask {@code s} of {@code P} emits {@code seq = 0, 1, 2, ...} up to its share of the
 * records (records split evenly, the first {@code records % P} subtasks take one more); the record
 * is {@code (key, value)} with {@code key = (seq * P + s) % keys}. In {@link Mode#SEQ} the value is
 * {@code seq}, as in {@code runnel bench throughput}. In {@link Mode#PER_KEY} (the recovery job,
 * which needs {@code keys % P == 0}) every key is fed by exactly one subtask ({@code key % P == s})
 * and the value is the key's own sequence number {@code 0, 1, 2, ...}, i.e. {@code seq / (keys/P)}.
 *
 * <p>Each subtask owns one split, the split {@code s}, whose checkpointed state is the next
 * sequence number: after a restore the subtask replays from there, so the source is rewindable and
 * the job exactly-once. An unbounded source has {@code records = -1}. With a rate limit, record
 * {@code seq} of a subtask becomes available {@code seq / ratePerSubtask} seconds after the
 * subtask first started, as if read from a log written at that rate: a subtask that restarts from
 * a checkpoint finds a backlog and catches up at full speed. That epoch travels in the split's
 * state as wall-clock microseconds, so a subtask restored in another JVM (the standalone cluster of
 * {@code standalone-kill}) finds the same backlog as one restored in the JVM it ran in.
 */
public final class SeqSource implements Source<Tuple2<Long, Long>, SeqSource.Split, TreeSet<Integer>> {

    private static final long serialVersionUID = 1L;

    /** What the value field carries. */
    public enum Mode { SEQ, PER_KEY }

    private final int parallelism;
    private final long records; // -1: unbounded
    private final long keys;
    private final Mode mode;
    private final double ratePerSubtask; // <= 0: unlimited
    private final boolean probes; // count emissions for the recovery job

    public SeqSource(int parallelism, long records, long keys, Mode mode, double ratePerSubtask, boolean probes) {
        if (parallelism <= 0 || keys <= 0) {
            throw new IllegalArgumentException("parallelism and keys must be positive");
        }
        if (mode == Mode.PER_KEY && keys % parallelism != 0) {
            throw new IllegalArgumentException("keys must be a multiple of the parallelism");
        }
        this.parallelism = parallelism;
        this.records = records;
        this.keys = keys;
        this.mode = mode;
        this.ratePerSubtask = ratePerSubtask;
        this.probes = probes;
    }

    /** The number of records subtask {@code s} emits; Long.MAX_VALUE when unbounded. */
    long shareOf(int s) {
        if (records < 0) {
            return Long.MAX_VALUE;
        }
        return records / parallelism + (s < records % parallelism ? 1 : 0);
    }

    @Override
    public Boundedness getBoundedness() {
        return records < 0 ? Boundedness.CONTINUOUS_UNBOUNDED : Boundedness.BOUNDED;
    }

    @Override
    public SplitEnumerator<Split, TreeSet<Integer>> createEnumerator(SplitEnumeratorContext<Split> ctx) {
        TreeSet<Integer> pending = new TreeSet<>();
        for (int s = 0; s < parallelism; s++) {
            pending.add(s);
        }
        return new Enumerator(ctx, pending);
    }

    @Override
    public SplitEnumerator<Split, TreeSet<Integer>> restoreEnumerator(
            SplitEnumeratorContext<Split> ctx, TreeSet<Integer> pending) {
        return new Enumerator(ctx, new TreeSet<>(pending));
    }

    @Override
    public SimpleVersionedSerializer<Split> getSplitSerializer() {
        return new SplitSerializer();
    }

    @Override
    public SimpleVersionedSerializer<TreeSet<Integer>> getEnumeratorCheckpointSerializer() {
        return new PendingSerializer();
    }

    @Override
    public SourceReader<Tuple2<Long, Long>, Split> createReader(SourceReaderContext ctx) {
        return new Reader(ctx.getIndexOfSubtask());
    }

    // ---------------------------------------------------------------------------------------------

    /**
     * Split {@code s}: the sequence numbers {@code [next, end)} of source subtask {@code s}, and the
     * wall-clock microsecond at which its record 0 became available (0: not started yet).
     */
    public static final class Split implements SourceSplit {
        final int subtask;
        final long next;
        final long end;
        final long epochMicros;

        Split(int subtask, long next, long end, long epochMicros) {
            this.subtask = subtask;
            this.next = next;
            this.end = end;
            this.epochMicros = epochMicros;
        }

        @Override
        public String splitId() {
            return Integer.toString(subtask);
        }
    }

    /** Hands split {@code s} to reader {@code s}, the first time it registers or after it failed. */
    private final class Enumerator implements SplitEnumerator<Split, TreeSet<Integer>> {
        private final SplitEnumeratorContext<Split> ctx;
        private final TreeSet<Integer> pending; // split ids not yet owned by a reader
        private final List<Split> returned = new ArrayList<>(); // split state handed back on failure

        Enumerator(SplitEnumeratorContext<Split> ctx, TreeSet<Integer> pending) {
            this.ctx = ctx;
            this.pending = pending;
        }

        @Override
        public void start() {}

        @Override
        public void handleSplitRequest(int subtask, String host) {}

        @Override
        public void addSplitsBack(List<Split> splits, int subtask) {
            returned.addAll(splits);
        }

        @Override
        public void addReader(int subtask) {
            Split back = null;
            for (Split sp : returned) {
                if (sp.subtask == subtask) {
                    back = sp;
                }
            }
            if (back != null) {
                returned.remove(back);
                ctx.assignSplit(back, subtask);
            } else if (pending.remove(subtask)) {
                ctx.assignSplit(new Split(subtask, 0, shareOf(subtask), 0), subtask);
            }
            if (getBoundedness() == Boundedness.BOUNDED) {
                ctx.signalNoMoreSplits(subtask);
            }
        }

        @Override
        public TreeSet<Integer> snapshotState(long checkpointId) {
            TreeSet<Integer> out = new TreeSet<>(pending);
            // A split handed back and not yet re-assigned starts over from its checkpointed state.
            for (Split sp : returned) {
                out.add(sp.subtask);
            }
            return out;
        }

        @Override
        public void close() {}
    }

    /** The reader of subtask {@code s}: one record per {@link #pollNext} call, as the API advises. */
    private final class Reader implements SourceReader<Tuple2<Long, Long>, Split> {
        private final int subtask;
        private final Tuple2<Long, Long> record = new Tuple2<>(); // reused; safe, see Main
        private final long stride = keys / parallelism; // PER_KEY: a key recurs every `stride` seqs
        private final AtomicLong emittedProbe;
        private final double ratePerNano = ratePerSubtask / 1e9;

        private CompletableFuture<Void> available = new CompletableFuture<>();
        private boolean noMoreSplits;
        private boolean hasSplit;
        private long next;
        private long end;
        private long emitted; // by this reader instance
        private long epochMicros; // wall clock: when this subtask's record 0 became available (first attempt)
        private long epochNanos; // the same instant on this JVM's System.nanoTime() scale (0: not yet)

        Reader(int subtask) {
            this.subtask = subtask;
            this.emittedProbe = probes ? Probes.registerSource(subtask) : null;
            Probes.taskStarted("source", subtask);
        }

        @Override
        public void start() {}

        @Override
        public InputStatus pollNext(ReaderOutput<Tuple2<Long, Long>> output) {
            if (!hasSplit || next >= end) {
                if (noMoreSplits) {
                    return InputStatus.END_OF_INPUT;
                }
                return waitFor(0);
            }
            if (ratePerNano > 0) {
                // Record `seq` becomes available at epoch + seq / rate, like an external log being
                // written at a fixed rate: a restored reader finds a backlog and catches up.
                long now = System.nanoTime();
                if (epochNanos == 0) {
                    long wall = Probes.epochMicros();
                    if (epochMicros == 0) {
                        epochMicros = Probes.sourceEpochMicros(subtask, wall);
                    }
                    epochNanos = now - (wall - epochMicros) * 1_000L;
                }
                double available = (now - epochNanos) * ratePerNano + 1;
                if (next >= available) {
                    return waitFor(1_000_000L); // about 1 ms later, then emit a burst
                }
            }
            long seq = next++;
            long key = (seq * parallelism + subtask) % keys;
            record.f0 = key;
            record.f1 = mode == Mode.SEQ ? seq : seq / stride;
            if (emitted++ == 0) {
                Probes.firstEmit(System.nanoTime());
            }
            output.collect(record);
            if (emittedProbe != null) {
                emittedProbe.lazySet(emitted);
            }
            if (next < end) {
                return InputStatus.MORE_AVAILABLE;
            }
            return noMoreSplits ? InputStatus.END_OF_INPUT : InputStatus.NOTHING_AVAILABLE;
        }

        private InputStatus waitFor(long nanos) {
            if (available.isDone()) {
                available = new CompletableFuture<>();
            }
            if (nanos > 0) {
                CompletableFuture<Void> f = available;
                TIMER.schedule(() -> f.complete(null), nanos, TimeUnit.NANOSECONDS);
            }
            return InputStatus.NOTHING_AVAILABLE;
        }

        @Override
        public List<Split> snapshotState(long checkpointId) {
            if (!hasSplit) {
                return Collections.emptyList();
            }
            return Collections.singletonList(new Split(subtask, next, end, epochMicros));
        }

        @Override
        public CompletableFuture<Void> isAvailable() {
            return available;
        }

        @Override
        public void addSplits(List<Split> splits) {
            for (Split sp : splits) {
                hasSplit = true;
                next = sp.next;
                end = sp.end;
                epochMicros = sp.epochMicros;
                epochNanos = 0;
            }
            available.complete(null);
        }

        @Override
        public void notifyNoMoreSplits() {
            noMoreSplits = true;
            available.complete(null);
        }

        @Override
        public void close() {}
    }

    /** Wakes rate-limited readers; daemon, shared by all readers in this JVM. */
    private static final ScheduledExecutorService TIMER = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "seq-source-rate-limit");
        t.setDaemon(true);
        return t;
    });

    // ---------------------------------------------------------------------------------------------

    static final class SplitSerializer implements SimpleVersionedSerializer<Split> {
        @Override
        public int getVersion() {
            return 2; // 2 added the epoch
        }

        @Override
        public byte[] serialize(Split sp) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream(28);
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                out.writeInt(sp.subtask);
                out.writeLong(sp.next);
                out.writeLong(sp.end);
                out.writeLong(sp.epochMicros);
            }
            return bytes.toByteArray();
        }

        @Override
        public Split deserialize(int version, byte[] data) throws IOException {
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(data))) {
                return new Split(in.readInt(), in.readLong(), in.readLong(), version >= 2 ? in.readLong() : 0);
            }
        }
    }

    static final class PendingSerializer implements SimpleVersionedSerializer<TreeSet<Integer>> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(TreeSet<Integer> pending) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                out.writeInt(pending.size());
                for (int s : pending) {
                    out.writeInt(s);
                }
            }
            return bytes.toByteArray();
        }

        @Override
        public TreeSet<Integer> deserialize(int version, byte[] data) throws IOException {
            TreeSet<Integer> pending = new TreeSet<>();
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(data))) {
                for (int n = in.readInt(); n > 0; n--) {
                    pending.add(in.readInt());
                }
            }
            return pending;
        }
    }
}

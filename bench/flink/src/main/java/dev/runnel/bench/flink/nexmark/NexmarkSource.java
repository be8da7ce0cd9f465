package dev.runnel.bench.flink.nexmark;

import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
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

/**
 * The Nexmark generator as a Flink (FLIP-27) source of {@link Model.Event}s, as Runnel's
 * {@code nexmark.Source}: source subtask {@code s} of {@code P} generates the events {@code n ≡ s (mod P)}
 * in increasing n, so the subtasks together generate exactly the stream of parallelism 1.
 *
 * <pre>
 *   env.fromSource(new NexmarkSource(p, events, rate, seed, 0), WatermarkStrategy.noWatermarks(), "nexmark")
 *      .setParallelism(p)   // must equal the p given here
 * </pre>
 *
 * <p>Each subtask owns split {@code s}, whose checkpointed state is its next n, so a restore rewinds
 * exactly. {@code events} bounds the stream (0: unbounded). With {@code rate > 0} event n is emitted no
 * earlier than n/rate seconds after the reader got its split (counted from the restored n after a
 * restore); with 0 it runs unthrottled and dateTime is spaced at the nominal 10 M events/s.
 */
public final class NexmarkSource implements Source<Model.Event, NexmarkSource.Split, TreeSet<Integer>> {
    private static final long serialVersionUID = 1L;

    private final int parallelism;
    private final long events; // 0: unbounded
    private final long rate;
    private final long seed;
    private final long baseTime;

    /**
     * @param parallelism the source's parallelism (the splits are made for it)
     * @param events how many events over all subtasks; 0 for an unbounded stream
     * @param rate events per second over all subtasks, 0 for unthrottled
     * @param seed the generator's seed
     * @param baseTime dateTime of event 0 in epoch ms, 0 for the default 2015-07-15
     */
    public NexmarkSource(int parallelism, long events, long rate, long seed, long baseTime) {
        if (parallelism <= 0 || events < 0) {
            throw new IllegalArgumentException("nexmark source: parallelism must be positive and events not negative");
        }
        new Generator(seed, rate, baseTime); // checks rate and base time now, not in the job
        this.parallelism = parallelism;
        this.events = events;
        this.rate = rate;
        this.seed = seed;
        this.baseTime = baseTime;
    }

    @Override
    public Boundedness getBoundedness() {
        return events == 0 ? Boundedness.CONTINUOUS_UNBOUNDED : Boundedness.BOUNDED;
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
    public SplitEnumerator<Split, TreeSet<Integer>> restoreEnumerator(SplitEnumeratorContext<Split> ctx, TreeSet<Integer> pending) {
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
    public SourceReader<Model.Event, Split> createReader(SourceReaderContext ctx) {
        return new Reader();
    }

    /** Split s: subtask s's events, next being the first not yet emitted. */
    public static final class Split implements SourceSplit {
        final int subtask;
        final long next;

        Split(int subtask, long next) {
            this.subtask = subtask;
            this.next = next;
        }

        @Override
        public String splitId() {
            return Integer.toString(subtask);
        }
    }

    /** Hands split s to reader s the first time it registers; a split handed back goes to its reader again. */
    private final class Enumerator implements SplitEnumerator<Split, TreeSet<Integer>> {
        private final SplitEnumeratorContext<Split> ctx;
        private final TreeSet<Integer> pending;
        private final List<Split> returned = new ArrayList<>();

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
                ctx.assignSplit(new Split(subtask, subtask), subtask);
            }
            if (getBoundedness() == Boundedness.BOUNDED) {
                ctx.signalNoMoreSplits(subtask);
            }
        }

        @Override
        public TreeSet<Integer> snapshotState(long checkpointId) {
            TreeSet<Integer> out = new TreeSet<>(pending);
            for (Split sp : returned) {
                out.add(sp.subtask);
            }
            return out;
        }

        @Override
        public void close() {}
    }

    /** Emits one event per poll, as the API advises; package-private for tests that drive it directly. */
    final class Reader implements SourceReader<Model.Event, Split> {
        private final Generator gen = new Generator(seed, rate, baseTime);
        private CompletableFuture<Void> available = new CompletableFuture<>();
        private boolean hasSplit;
        private boolean noMoreSplits;
        private int subtask;
        private long next;
        private long base; // n at which the rate clock started
        private long startNanos; // 0: not started

        @Override
        public void start() {}

        @Override
        public InputStatus pollNext(ReaderOutput<Model.Event> output) {
            if (!hasSplit || ended()) {
                return noMoreSplits ? InputStatus.END_OF_INPUT : waitFor(0);
            }
            if (rate > 0) {
                long now = System.nanoTime();
                if (startNanos == 0) {
                    startNanos = now;
                }
                double due = base + (now - startNanos) / 1e9 * rate + 1;
                if (next >= due) {
                    return waitFor((long) ((next - due + 1) / rate * 1e9) + 1);
                }
            }
            output.collect(gen.event(next), gen.time(next));
            next += parallelism;
            if (!ended()) {
                return InputStatus.MORE_AVAILABLE;
            }
            return noMoreSplits ? InputStatus.END_OF_INPUT : InputStatus.NOTHING_AVAILABLE;
        }

        private boolean ended() {
            return events > 0 && next >= events;
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
            return hasSplit ? Collections.singletonList(new Split(subtask, next)) : Collections.emptyList();
        }

        @Override
        public CompletableFuture<Void> isAvailable() {
            return available;
        }

        @Override
        public void addSplits(List<Split> splits) {
            for (Split sp : splits) {
                if (sp.next % parallelism != sp.subtask % parallelism) {
                    throw new IllegalStateException("nexmark source: split " + sp.subtask + " at n=" + sp.next
                            + " does not belong to parallelism " + parallelism);
                }
                hasSplit = true;
                subtask = sp.subtask;
                next = sp.next;
                base = sp.next;
                startNanos = 0;
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

    /** Wakes throttled readers; daemon, shared by the readers of this JVM. */
    private static final ScheduledExecutorService TIMER = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "nexmark-source-rate");
        t.setDaemon(true);
        return t;
    });

    static final class SplitSerializer implements SimpleVersionedSerializer<Split> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(Split sp) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream(12);
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                out.writeInt(sp.subtask);
                out.writeLong(sp.next);
            }
            return bytes.toByteArray();
        }

        @Override
        public Split deserialize(int version, byte[] data) throws IOException {
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(data))) {
                return new Split(in.readInt(), in.readLong());
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
                for (int k = in.readInt(); k > 0; k--) {
                    pending.add(in.readInt());
                }
            }
            return pending;
        }
    }
}

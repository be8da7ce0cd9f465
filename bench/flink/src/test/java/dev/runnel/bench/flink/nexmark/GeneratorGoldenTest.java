package dev.runnel.bench.flink.nexmark;

import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.SourceOutput;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The Java generator against the Go side's golden files (examples/nexmark/testdata, written by Go's
 * TestGeneratorGolden): the same events and the same JSON lines, byte for byte.
 */
class GeneratorGoldenTest {

    /** One golden file and the stream that made it. */
    record Golden(String file, long seed, long rate, long events) {}

    static final List<Golden> GOLDEN = List.of(
            new Golden("generator-1000.jsonl", 0, 0, 1000),
            new Golden("generator-seed42-rate1000-300.jsonl", 42, 1000, 300));

    /** examples/nexmark/testdata/NAME, found from the working directory upwards (bench/flink under mvn). */
    static Path testdata(String name) {
        for (Path dir = Paths.get("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
            Path p = dir.resolve("examples").resolve("nexmark").resolve("testdata").resolve(name);
            if (Files.isRegularFile(p)) {
                return p;
            }
        }
        throw new IllegalStateException("examples/nexmark/testdata/" + name + " not found above " + Paths.get("").toAbsolutePath());
    }

    static String lines(long seed, long rate, long from, long to) {
        Generator g = new Generator(seed, rate, 0);
        StringBuilder b = new StringBuilder();
        for (long n = from; n < to; n++) {
            JsonLines.appendEvent(b, g.event(n));
            b.append('\n');
        }
        return b.toString();
    }

    @Test
    void generatesTheGoldenFilesByteForByte() throws IOException {
        for (Golden gf : GOLDEN) {
            byte[] want = Files.readAllBytes(testdata(gf.file()));
            byte[] got = lines(gf.seed(), gf.rate(), 0, gf.events()).getBytes(StandardCharsets.UTF_8);
            if (java.util.Arrays.equals(got, want)) {
                continue;
            }
            String[] g = new String(got, StandardCharsets.UTF_8).split("\n", -1);
            String[] w = new String(want, StandardCharsets.UTF_8).split("\n", -1);
            for (int i = 0; i < Math.min(g.length, w.length); i++) {
                if (!g[i].equals(w[i])) {
                    fail(gf.file() + ": line " + (i + 1) + " differs:\n got " + g[i] + "\nwant " + w[i]);
                }
            }
            fail(gf.file() + ": " + g.length + " lines, want " + w.length);
        }
    }

    /** The same table as Go's TestAppendString, less Go's invalid UTF-8 bytes, plus Java's lone surrogate. */
    @Test
    void escapesStringsAsGoDoes() {
        String[][] cases = {
            {"", "\"\""},
            {"plain text", "\"plain text\""},
            {"q\"b\\s", "\"q\\\"b\\\\s\""},
            {"\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\""},
            {"\u0000\u001f\u007f", "\"\\u0000\\u001f\u007f\""},
            {"ünï €😀 </>&", "\"ünï €😀 </>&\""},
            {"\u2028", "\"\u2028\""},
            {"a\ud800b", "\"a\\ufffdb\""},
        };
        for (String[] c : cases) {
            StringBuilder b = new StringBuilder();
            JsonLines.appendString(b, c[0]);
            assertEquals(c[1], b.toString(), "escaping " + c[0]);
        }
    }

    /** The same table as Go's TestAppendDecimal3. */
    @Test
    void writesExactDecimals() {
        long[] in = {0, 1120472, 90800, 908000, 5, -5, -1500, 100 * 908, 99_999_999L * 908, Long.MIN_VALUE, Long.MAX_VALUE};
        String[] want = {"0", "1120.472", "90.8", "908", "0.005", "-0.005", "-1.5", "90.8", "90799999.092",
            "-9223372036854775.808", "9223372036854775.807"};
        for (int i = 0; i < in.length; i++) {
            StringBuilder b = new StringBuilder();
            JsonLines.appendDecimal3(b, in[i]);
            assertEquals(want[i], b.toString(), "decimal3 of " + in[i]);
        }
        StringBuilder row = new StringBuilder();
        new JsonLines.Row(row).num("auction", 1007).str("name", "a\"b").decimal3("price", 1234 * 908).end();
        assertEquals("{\"auction\":1007,\"name\":\"a\\\"b\",\"price\":1120.472}", row.toString());
    }

    /** Collects what a reader emits. */
    static final class Collecting implements ReaderOutput<Model.Event> {
        final List<Model.Event> events = new ArrayList<>();
        final List<Long> timestamps = new ArrayList<>();

        @Override
        public void collect(Model.Event e) {
            events.add(e);
            timestamps.add(Long.MIN_VALUE);
        }

        @Override
        public void collect(Model.Event e, long ts) {
            events.add(e);
            timestamps.add(ts);
        }

        @Override
        public void emitWatermark(Watermark w) {}

        @Override
        public void markIdle() {}

        @Override
        public void markActive() {}

        @Override
        public SourceOutput<Model.Event> createOutputForSplit(String id) {
            return this;
        }

        @Override
        public void releaseOutputForSplit(String id) {}
    }

    /** Subtask s of P emits exactly events n ≡ s (mod P), in order, from its split, and ends. */
    @Test
    void subtasksGenerateTheStream() throws Exception {
        final int events = 1001;
        Generator g = new Generator(3, 0, 0);
        for (int p : new int[] {1, 2, 3, 7}) {
            NexmarkSource src = new NexmarkSource(p, events, 0, 3, 0);
            int total = 0;
            for (int s = 0; s < p; s++) {
                NexmarkSource.Reader r = src.new Reader();
                r.addSplits(List.of(new NexmarkSource.Split(s, s)));
                r.notifyNoMoreSplits();
                Collecting out = new Collecting();
                for (int i = 0; i < 10_000 && r.pollNext(out) != InputStatus.END_OF_INPUT; i++) {
                    // poll to the end
                }
                for (int i = 0; i < out.events.size(); i++) {
                    long n = s + (long) i * p;
                    assertEquals(g.event(n), out.events.get(i), "p=" + p + " event " + n);
                    assertEquals(g.time(n), out.timestamps.get(i));
                }
                total += out.events.size();
            }
            assertEquals(events, total, "events over " + p + " subtasks");
        }
    }

    /** A restored split continues at its n; a split of another parallelism is refused. */
    @Test
    void restoredSplitContinues() throws Exception {
        NexmarkSource src = new NexmarkSource(2, 100, 0, 0, 0);
        NexmarkSource.Reader r = src.new Reader();
        r.addSplits(List.of(new NexmarkSource.Split(1, 1)));
        Collecting out = new Collecting();
        for (int i = 0; i < 5; i++) {
            r.pollNext(out);
        }
        NexmarkSource.Split state = new NexmarkSource.SplitSerializer().deserialize(1,
                new NexmarkSource.SplitSerializer().serialize(r.snapshotState(1).get(0)));
        assertEquals(11, state.next);
        NexmarkSource.Reader again = src.new Reader();
        again.addSplits(List.of(state));
        again.pollNext(out);
        assertEquals(new Generator(0, 0, 0).event(11), out.events.get(5));
        assertThrows(IllegalStateException.class, () -> src.new Reader().addSplits(List.of(new NexmarkSource.Split(1, 4))));
    }

    /** Throttled: 200 events at 2000/s take at least 99.5 ms. */
    @Test
    void throttlesToTheRate() throws Exception {
        NexmarkSource.Reader r = new NexmarkSource(1, 200, 2000, 0, 0).new Reader();
        r.addSplits(List.of(new NexmarkSource.Split(0, 0)));
        r.notifyNoMoreSplits();
        Collecting out = new Collecting();
        long t0 = System.nanoTime();
        for (int i = 0; i < 100_000; i++) {
            InputStatus st = r.pollNext(out);
            if (st == InputStatus.END_OF_INPUT) {
                break;
            }
            if (st == InputStatus.NOTHING_AVAILABLE) {
                r.isAvailable().get();
            }
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        assertEquals(200, out.events.size());
        assertTrue(ms >= 99, "200 events at 2000/s in " + ms + " ms");
        assertEquals(Generator.DEFAULT_BASE_TIME + 199 * 1000 / 2000, out.events.get(199).dateTime());
    }

    /** What {@link QueueSink} received: the MiniCluster runs in this JVM. */
    static final Queue<String> RECEIVED = new ConcurrentLinkedQueue<>();

    /** Keeps every record in {@link #RECEIVED}. */
    static final class QueueSink implements Sink<String> {
        @Override
        public SinkWriter<String> createWriter(WriterInitContext ctx) {
            return new SinkWriter<>() {
                @Override
                public void write(String line, Context c) {
                    RECEIVED.add(line);
                }

                @Override
                public void flush(boolean endOfInput) {}

                @Override
                public void close() {}
            };
        }
    }

    /**
     * In a real job (MiniCluster, parallelism 2) the source emits every event of the stream once, and the
     * events are Flink POJOs (not Kryo's generic type), null kinds included.
     */
    @Test
    void sourceInAJobEmitsTheStream() throws Exception {
        assertTrue(TypeInformation.of(Model.Event.class) instanceof org.apache.flink.api.java.typeutils.PojoTypeInfo,
                "Model.Event is " + TypeInformation.of(Model.Event.class));
        final int events = 3000;
        RECEIVED.clear();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(2);
        env.fromSource(new NexmarkSource(2, events, 0, 9, 0), WatermarkStrategy.noWatermarks(), "nexmark")
                .setParallelism(2)
                .rebalance() // over the network: the events go through Flink's POJO serializer
                .map(JsonLines::event).returns(Types.STRING)
                .sinkTo(new QueueSink());
        env.execute("nexmark-source-test");
        List<String> got = new ArrayList<>(RECEIVED);
        List<String> want = new ArrayList<>(List.of(lines(9, 0, 0, events).split("\n")));
        Collections.sort(got);
        Collections.sort(want);
        assertEquals(want, got);
    }

    /**
     * Model.ROW_TYPE has the JSON lines' layout: its kinds and each kind's field names in the order the
     * writer writes the keys, and toRow's values are the event's, in that order.
     */
    @Test
    void rowsHaveTheJsonLayout() throws Exception {
        org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper json = new org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper();
        org.apache.flink.api.java.typeutils.RowTypeInfo top = (org.apache.flink.api.java.typeutils.RowTypeInfo) Model.ROW_TYPE;
        Generator g = new Generator(1, 0, 0);
        for (long n : new long[] {0, 1, 4}) {
            Model.Event e = g.event(n);
            org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode line = json.readTree(JsonLines.event(e));
            String kind = line.fieldNames().next();
            int k = top.getFieldIndex(kind);
            assertEquals(e.kind, k, "kind column of " + kind);
            org.apache.flink.api.java.typeutils.RowTypeInfo rt = (org.apache.flink.api.java.typeutils.RowTypeInfo) (TypeInformation<?>) top.getTypeAt(k);
            org.apache.flink.types.Row row = Model.toRow(e);
            for (int other = 0; other < 3; other++) {
                assertEquals(other != k, row.getField(other) == null, "column " + other + " of a " + kind);
            }
            org.apache.flink.types.Row inner = (org.apache.flink.types.Row) row.getField(k);
            List<String> keys = new ArrayList<>();
            line.get(kind).fieldNames().forEachRemaining(keys::add);
            assertEquals(keys, List.of(rt.getFieldNames()), kind + " field order");
            for (int i = 0; i < keys.size(); i++) {
                org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode v = line.get(kind).get(keys.get(i));
                Object want = v.isTextual() ? v.asText() : (Object) v.asLong();
                assertEquals(want, inner.getField(i), kind + "." + keys.get(i));
                assertEquals(want.getClass(), rt.getTypeAt(i).getTypeClass(), kind + "." + keys.get(i) + " type");
            }
        }
    }
}

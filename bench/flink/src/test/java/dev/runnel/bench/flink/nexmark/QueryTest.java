package dev.runnel.bench.flink.nexmark;

import org.apache.flink.types.Row;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TimeZone;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Every query, run as a real Flink job in the MiniCluster at parallelism 2, on a small hand-written
 * input, against output worked out by hand from the definitions. Times are milliseconds after
 * {@link #BASE} (2015-07-15T00:00:00Z, a multiple of 10 s, so window bounds below are BASE + a round
 * number). Each windowed case has an event at exactly a window's end, which belongs to the next
 * window, and events out of order within the 4 s bound.
 *
 * <p>The JVM's default time zone is not UTC while these tests run (Asia/Kolkata, UTC+5:30), so
 * the job's own session time zone is what makes window bounds epoch milliseconds.
 */
class QueryTest {
    static final long BASE = 1_436_918_400_000L;

    private static TimeZone savedZone;

    @BeforeAll
    static void nonUtcDefaultZone() {
        savedZone = TimeZone.getDefault();
        TimeZone.setDefault(TimeZone.getTimeZone("Asia/Kolkata"));
    }

    @AfterAll
    static void restoreZone() {
        TimeZone.setDefault(savedZone);
    }

    /** One event as a JSON line of the format and as a row of {@link QueryTables#EVENT_TYPE}. */
    record Ev(String json, Row row) {}

    static Ev person(long id, String name, String state, long t) {
        String json = String.format("{\"person\":{\"id\":%d,\"name\":\"%s\",\"emailAddress\":\"%s@example.com\","
                + "\"creditCard\":\"1234 5678 9012 3456\",\"city\":\"Boise\",\"state\":\"%s\",\"dateTime\":%d,"
                + "\"extra\":\"\"}}", id, name, name, state, BASE + t);
        Row p = Row.of(id, name, name + "@example.com", "1234 5678 9012 3456", "Boise", state, BASE + t, "");
        return new Ev(json, Row.of(p, null, null));
    }

    static Ev auction(long id, long seller, long category, long t, long expires) {
        String json = String.format("{\"auction\":{\"id\":%d,\"itemName\":\"item\",\"description\":\"desc\","
                + "\"initialBid\":1,\"reserve\":2,\"dateTime\":%d,\"expires\":%d,\"seller\":%d,\"category\":%d,"
                + "\"extra\":\"\"}}", id, BASE + t, BASE + expires, seller, category);
        Row a = Row.of(id, "item", "desc", 1L, 2L, BASE + t, BASE + expires, seller, category, "");
        return new Ev(json, Row.of(null, a, null));
    }

    static Ev bid(long auction, long bidder, long price, long t) {
        return bid(auction, bidder, price, t, "", "");
    }

    /** A bid whose extra is {@code extraJson} in the JSON line (escaped) and {@code extra} in the row. */
    static Ev bid(long auction, long bidder, long price, long t, String extraJson, String extra) {
        String json = String.format("{\"bid\":{\"auction\":%d,\"bidder\":%d,\"price\":%d,\"channel\":\"Google\","
                + "\"url\":\"https://example.com/b\",\"dateTime\":%d,\"extra\":\"%s\"}}",
                auction, bidder, price, BASE + t, extraJson);
        Row b = Row.of(auction, bidder, price, "Google", "https://example.com/b", BASE + t, extra);
        return new Ev(json, Row.of(null, null, b));
    }

    /** One query on one input, with its expected output lines (in any order). */
    record Case(String name, Query query, List<Ev> input, List<String> want) {
        @Override
        public String toString() {
            return query.id() + ": " + name;
        }
    }

    static List<Case> cases() {
        return List.of(
                new Case("every bid with all its fields; strings re-escaped", Query.Q0,
                        List.of(person(1, "alice", "OR", 0),
                                bid(7, 8, 9, 1),
                                auction(2, 1, 10, 2, 100),
                                bid(10, 11, 12, 3, "say \\\"hi\\\" \\\\ \\u00e9", "say \"hi\" \\ \u00e9")),
                        List.of("{\"auction\":7,\"bidder\":8,\"price\":9,\"channel\":\"Google\","
                                        + "\"url\":\"https://example.com/b\",\"dateTime\":1436918400001,\"extra\":\"\"}",
                                "{\"auction\":10,\"bidder\":11,\"price\":12,\"channel\":\"Google\","
                                        + "\"url\":\"https://example.com/b\",\"dateTime\":1436918400003,"
                                        + "\"extra\":\"say \\\"hi\\\" \\\\ \u00e9\"}")),
                new Case("0.908 × price as an exact decimal", Query.Q1,
                        List.of(bid(1, 2, 1, 0), bid(1, 2, 1000, 1), bid(1, 2, 12345, 2), bid(1, 2, 0, 3),
                                bid(1, 2, 123_456_789_012_345L, 4)),
                        List.of("{\"auction\":1,\"bidder\":2,\"price\":0.908,\"dateTime\":1436918400000}",
                                "{\"auction\":1,\"bidder\":2,\"price\":908,\"dateTime\":1436918400001}",
                                "{\"auction\":1,\"bidder\":2,\"price\":11209.26,\"dateTime\":1436918400002}",
                                "{\"auction\":1,\"bidder\":2,\"price\":0,\"dateTime\":1436918400003}",
                                "{\"auction\":1,\"bidder\":2,\"price\":112098764423209.26,\"dateTime\":1436918400004}")),
                new Case("auction ids that are multiples of 123", Query.Q2,
                        List.of(bid(0, 1, 5, 0), bid(123, 1, 6, 1), bid(124, 1, 7, 2), bid(246, 1, 8, 3),
                                bid(122, 1, 9, 4), bid(1230, 1, 10, 5)),
                        List.of("{\"auction\":0,\"price\":5}", "{\"auction\":123,\"price\":6}",
                                "{\"auction\":246,\"price\":8}", "{\"auction\":1230,\"price\":10}")),
                new Case("category 10 with sellers in OR, ID, CA; a seller arriving after its auction", Query.Q3,
                        List.of(person(1, "alice", "OR", 0),
                                auction(10, 1, 10, 10, 1000),   // seller already there
                                auction(11, 2, 10, 20, 1000),   // seller 2 comes later
                                person(3, "carol", "WA", 30),
                                auction(12, 3, 10, 40, 1000),   // WA: no
                                auction(13, 1, 11, 50, 1000),   // category 11: no
                                person(2, "bob", "CA", 5000),
                                person(4, "dave", "ID", 5010),
                                auction(14, 4, 10, 5020, 9000),
                                auction(15, 4, 10, 5030, 9000)),
                        List.of("{\"name\":\"alice\",\"city\":\"Boise\",\"state\":\"OR\",\"id\":10}",
                                "{\"name\":\"bob\",\"city\":\"Boise\",\"state\":\"CA\",\"id\":11}",
                                "{\"name\":\"dave\",\"city\":\"Boise\",\"state\":\"ID\",\"id\":14}",
                                "{\"name\":\"dave\",\"city\":\"Boise\",\"state\":\"ID\",\"id\":15}")),
                new Case("closing price: bids in [dateTime, expires] inclusive; AVG truncates", Query.Q4,
                        List.of(auction(1, 100, 10, 0, 10_000),
                                bid(1, 1, 100, 0),          // at the auction's start: counts
                                bid(1, 1, 300, 10_000),     // at expires: counts, and updates the max
                                bid(1, 1, 500, 10_001),     // after expires: no
                                bid(2, 1, 8, 2000),         // before its auction's line
                                auction(2, 100, 10, 1000, 5000),
                                bid(2, 1, 7, 999),          // before the auction's start: no
                                auction(3, 100, 11, 0, 20_000),
                                bid(3, 1, 5, 100), bid(3, 1, 6, 200),
                                auction(4, 100, 11, 0, 20_000),
                                bid(4, 1, 9, 300),
                                auction(5, 100, 12, 0, 20_000)), // no bid: no category 12
                        // category 10: (300 + 8) / 2 = 154; category 11: (6 + 9) / 2 = 7.5, truncated to 7.
                        List.of("{\"category\":10,\"avg\":154}", "{\"category\":11,\"avg\":7}")),
                new Case("hop 10 s every 2 s: top auctions per window, ties, an event at a window's end", Query.Q5,
                        List.of(bid(1, 1, 1, 0), bid(1, 1, 1, 1000), bid(2, 1, 1, 1500),
                                bid(3, 1, 1, 2000),
                                bid(2, 1, 1, 1999),         // out of order, within the bound
                                bid(4, 1, 1, 10_000)),      // not in [0, 10000)
                        List.of(q5(1, 2, -8000), q5(2, 2, -8000),
                                q5(1, 2, -6000), q5(2, 2, -6000),
                                q5(1, 2, -4000), q5(2, 2, -4000),
                                q5(1, 2, -2000), q5(2, 2, -2000),
                                q5(1, 2, 0), q5(2, 2, 0),
                                q5(3, 1, 2000), q5(4, 1, 2000),
                                q5(4, 1, 4000), q5(4, 1, 6000), q5(4, 1, 8000), q5(4, 1, 10_000))),
                new Case("tumble 10 s: every bid at its window's highest price, ties, an event at a window's end",
                        Query.Q7,
                        List.of(bid(1, 6, 10, 0), bid(4, 6, 20, 3000), bid(2, 7, 30, 5000),
                                bid(5, 9, 100, 10_000),     // window [10000, 20000)
                                bid(3, 8, 30, 9999),        // out of order, ties with bidder 7
                                bid(6, 9, 50, 19_999)),
                        List.of("{\"auction\":2,\"price\":30,\"bidder\":7,\"dateTime\":1436918405000,\"window_end\":1436918410000}",
                                "{\"auction\":3,\"price\":30,\"bidder\":8,\"dateTime\":1436918409999,\"window_end\":1436918410000}",
                                "{\"auction\":5,\"price\":100,\"bidder\":9,\"dateTime\":1436918410000,\"window_end\":1436918420000}")),
                new Case("tumble 10 s: persons who opened an auction in their own window", Query.Q8,
                        List.of(person(1, "alice", "OR", 1000),
                                person(2, "bob", "CA", 5000),
                                auction(10, 1, 10, 9999, 50_000),   // alice, same window
                                auction(11, 2, 10, 10_000, 50_000), // bob, at the window's end: next window
                                person(3, "carol", "WA", 12_000),
                                auction(12, 3, 10, 13_000, 50_000),
                                auction(13, 3, 11, 15_000, 50_000), // carol again: still one line
                                person(4, "dave", "ID", 21_000),    // no auction
                                auction(14, 99, 10, 22_000, 50_000), // no such person
                                person(5, "erin", "OR", 25_000),
                                auction(15, 5, 10, 29_999, 50_000)),
                        List.of("{\"id\":1,\"name\":\"alice\",\"window_start\":1436918400000}",
                                "{\"id\":3,\"name\":\"carol\",\"window_start\":1436918410000}",
                                "{\"id\":5,\"name\":\"erin\",\"window_start\":1436918420000}")),
                new Case("last ten closed auctions per seller, by expiry then id; AVG truncates", Query.Q6,
                        q6Input(),
                        // Seller 100's auctions by (expires, id): 1, 2, 3, 13, 4, ..., 12; the last ten are 13
                        // and 4 to 12: (130 + 40 + ... + 120) / 10 = 85. Seller 200: 7 (auction 21 has no bid).
                        List.of("{\"seller\":100,\"avg_price\":85}", "{\"seller\":200,\"avg_price\":7}")),
                new Case("winning bid: highest in [dateTime, expires], ties to the earliest", Query.Q9,
                        List.of(auction(1, 100, 10, 0, 10_000),
                                bid(1, 5, 100, 0),
                                bid(1, 6, 300, 5000),
                                bid(1, 7, 300, 4000),       // as high, earlier: wins
                                bid(1, 8, 900, 10_001),     // after expires
                                auction(2, 100, 10, 0, 10_000)), // no bid: no row
                        List.of("{\"id\":1,\"itemName\":\"item\",\"description\":\"desc\",\"initialBid\":1,"
                                + "\"reserve\":2,\"dateTime\":1436918400000,\"expires\":1436918410000,\"seller\":100,"
                                + "\"category\":10,\"extra\":\"\",\"auction\":1,\"bidder\":7,\"price\":300,"
                                + "\"bid_dateTime\":1436918404000,\"bid_extra\":\"\"}")),
                new Case("sessions of 10 s per bidder; a bid exactly a gap after the last joins", Query.Q11,
                        List.of(bid(1, 1, 1, 0), bid(1, 1, 1, 5000), bid(1, 2, 1, 1000),
                                bid(1, 2, 1, 3000),         // out of order, within the bound
                                bid(1, 1, 1, 15_000),       // exactly 10 s after 5000: the same session
                                bid(1, 1, 1, 40_000)),
                        List.of(q11(1, 3, 0, 25_000), q11(2, 2, 1000, 13_000), q11(1, 1, 40_000, 50_000))),
                new Case("side input: the row of auction mod 10000", Query.Q13,
                        List.of(bid(5, 1, 10, 0), bid(10_005, 2, 20, 1), bid(9999, 3, 30, 2)),
                        List.of(q13(5, 1, 10, 0, "5"), q13(10_005, 2, 20, 1, "5"), q13(9999, 3, 30, 2, "9999"))),
                new Case("0.908 × price strictly inside the range; time of day; the c's of extra", Query.Q14,
                        List.of(bid(1, 2, 1_101_322, 0, "cacbc", "cacbc"),
                                bid(1, 2, 1_101_321, 1),      // 999999.468: below
                                bid(1, 2, 55_066_080, 2),     // 50000000.64: above
                                bid(1, 2, 55_066_079, 7 * HOUR),
                                bid(1, 2, 2_000_000, 8 * HOUR),
                                bid(1, 2, 2_000_000, 19 * HOUR - 1),
                                bid(1, 2, 2_000_000, 19 * HOUR),
                                bid(1, 2, 2_000_000, 20 * HOUR)),
                        List.of(q14("1000000.376", "nightTime", 0, "cacbc", 3),
                                q14("49999999.732", "otherTime", 7 * HOUR, "", 0),
                                q14("1816000", "dayTime", 8 * HOUR, "", 0),
                                q14("1816000", "dayTime", 19 * HOUR - 1, "", 0),
                                q14("1816000", "otherTime", 19 * HOUR, "", 0),
                                q14("1816000", "nightTime", 20 * HOUR, "", 0))));
    }

    static final long HOUR = 3_600_000L;

    /** q6's input: seller 100 closes 13 auctions (two expire at once), seller 200 one with a bid. */
    static List<Ev> q6Input() {
        List<Ev> in = new ArrayList<>();
        for (long i = 1; i <= 12; i++) {
            in.add(auction(i, 100, 10, i * 10, 1000 + i));
            in.add(bid(i, 1, i * 10, i * 10 + 1));
        }
        in.add(auction(13, 100, 10, 130, 1003));
        in.add(bid(13, 1, 130, 131));
        in.add(auction(20, 200, 10, 140, 1500));
        in.add(bid(20, 1, 7, 141));
        in.add(auction(21, 200, 10, 150, 1500));
        return in;
    }

    /** A q11 line for bidder's session [BASE + start, BASE + end). */
    static String q11(long bidder, long count, long start, long end) {
        return String.format("{\"bidder\":%d,\"bid_count\":%d,\"starttime\":%d,\"endtime\":%d}",
                bidder, count, BASE + start, BASE + end);
    }

    /** A q13 line. */
    static String q13(long auction, long bidder, long price, long t, String value) {
        return String.format("{\"auction\":%d,\"bidder\":%d,\"price\":%d,\"dateTime\":%d,\"value\":\"%s\"}",
                auction, bidder, price, BASE + t, value);
    }

    /** A q14 line of a bid on auction 1 by bidder 2. */
    static String q14(String price, String type, long t, String extra, long cs) {
        return String.format("{\"auction\":1,\"bidder\":2,\"price\":%s,\"bidTimeType\":\"%s\",\"dateTime\":%d,"
                + "\"extra\":\"%s\",\"c_counts\":%d}", price, type, BASE + t, extra, cs);
    }

    /** A q5 line for a window starting at BASE + start. */
    static String q5(long auction, long num, long start) {
        return String.format("{\"auction\":%d,\"num\":%d,\"window_start\":%d,\"window_end\":%d}",
                auction, num, BASE + start, BASE + start + 10_000);
    }

    static Path write(Path dir, List<Ev> events) throws Exception {
        Path in = dir.resolve("in.jsonl");
        Files.write(in, events.stream().map(Ev::json).collect(Collectors.toList()), StandardCharsets.UTF_8);
        return in;
    }

    static List<String> sorted(List<String> lines) {
        List<String> s = new ArrayList<>(lines);
        s.sort(null);
        return s;
    }

    static final NexmarkJob.Options opts(Query q) {
        return new NexmarkJob.Options(q, 2, 4000, 0);
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("cases")
    void queryFromFile(Case c, @TempDir Path dir) throws Exception {
        Path out = dir.resolve("out.jsonl");
        Map<String, Object> r = NexmarkJob.run(opts(c.query()), NexmarkJob.fileSource(write(dir, c.input())), out);
        List<String> got = Files.readAllLines(out, StandardCharsets.UTF_8);
        assertEquals(sorted(c.want()), sorted(got));
        assertEquals((long) c.want().size(), r.get("rows_out"));
        assertEquals((long) c.input().size(), r.get("events"));
        assertFalse(Files.exists(dir.resolve("out.jsonl.tmp")), "temporary output left behind");
    }

    /** The plug-in point of a generator: the same events as a DataStream give the same result. */
    @Test
    void streamSourceGivesTheFileResult(@TempDir Path dir) throws Exception {
        for (Case c : cases()) {
            if (c.query() != Query.Q8) {
                continue;
            }
            List<Row> rows = c.input().stream().map(Ev::row).collect(Collectors.toList());
            Path out = dir.resolve(c.query().id() + ".jsonl");
            NexmarkJob.run(opts(c.query()), NexmarkJob.streamSource("rows", rows.size(),
                    env -> env.fromData(rows, QueryTables.EVENT_TYPE).setParallelism(1)), out);
            assertEquals(sorted(c.want()), sorted(Files.readAllLines(out, StandardCharsets.UTF_8)), c.toString());
        }
    }

    /** Without an output file: the blackhole sink and a rate. */
    @Test
    void measureModeReportsEventsPerSecond(@TempDir Path dir) throws Exception {
        List<Ev> input = new ArrayList<>();
        for (int i = 0; i < 1000; i++) {
            input.add(bid(i, 1, 10, i));
        }
        Map<String, Object> r = NexmarkJob.run(opts(Query.Q2), NexmarkJob.fileSource(write(dir, input)), null);
        assertEquals("blackhole", r.get("sink"));
        assertEquals(1000L, r.get("events"));
        long netMs = (Long) r.get("net_runtime_ms");
        assertTrue(netMs > 0, "net runtime " + netMs);
        assertEquals(Math.round(1000 / (netMs / 1000.0)), r.get("events_per_s"));
        assertTrue(NexmarkJob.describe(r).contains("events/s"), NexmarkJob.describe(r));
    }
}

package dev.runnel.bench.flink.nexmark;

import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.io.StringWriter;
import java.math.BigDecimal;
import java.time.Instant;
import java.time.LocalDateTime;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Changelogs applied, values as JSON, and the watermark expression. */
class QueryOutputTest {
    static Row row(RowKind kind, Object... fields) {
        Row r = Row.of(fields);
        r.setKind(kind);
        return r;
    }

    /** A changelog of (category, avg) rows and the result set it leaves, in first-insertion order. */
    record Case(String name, List<Row> changelog, String want) {
        @Override
        public String toString() {
            return name;
        }
    }

    static List<Case> cases() {
        RowKind i = RowKind.INSERT;
        RowKind ub = RowKind.UPDATE_BEFORE;
        RowKind ua = RowKind.UPDATE_AFTER;
        RowKind d = RowKind.DELETE;
        return List.of(
                new Case("inserts only", List.of(row(i, 10L, 5L), row(i, 11L, 6L)),
                        "{\"category\":10,\"avg\":5}\n{\"category\":11,\"avg\":6}\n"),
                new Case("updates leave the last value per key",
                        List.of(row(i, 10L, 5L), row(i, 11L, 6L), row(ub, 10L, 5L), row(ua, 10L, 7L),
                                row(ub, 10L, 7L), row(ua, 10L, 8L)),
                        "{\"category\":11,\"avg\":6}\n{\"category\":10,\"avg\":8}\n"),
                new Case("a delete removes the row", List.of(row(i, 10L, 5L), row(d, 10L, 5L)), ""),
                new Case("a row twice is written twice, once after one retraction",
                        List.of(row(i, 10L, 5L), row(i, 10L, 5L), row(i, 10L, 5L), row(ub, 10L, 5L)),
                        "{\"category\":10,\"avg\":5}\n{\"category\":10,\"avg\":5}\n"));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("cases")
    void changelogApplied(Case c) throws Exception {
        StringWriter w = new StringWriter();
        QueryOutput out = new QueryOutput(Query.Q4, List.of("category", "avg"), w);
        for (Row r : c.changelog()) {
            out.accept(r);
        }
        assertEquals("", w.toString(), "an updating result is written only at the end");
        out.finish();
        assertEquals(c.want(), w.toString());
    }

    @Test
    void retractionOfAnAbsentRowIsAnError() {
        QueryOutput out = new QueryOutput(Query.Q4, List.of("category", "avg"), new StringWriter());
        Exception e = assertThrows(IllegalStateException.class, () -> out.accept(row(RowKind.UPDATE_BEFORE, 1L, 2L)));
        assertTrue(e.getMessage().contains("not in the result"), e.getMessage());
    }

    @Test
    void insertOnlyQueryRefusesUpdates() throws Exception {
        StringWriter w = new StringWriter();
        QueryOutput out = new QueryOutput(Query.Q2, List.of("auction", "price"), w);
        out.accept(row(RowKind.INSERT, 123L, 5L));
        assertEquals("{\"auction\":123,\"price\":5}\n", w.toString(), "insert-only rows are written at once");
        Exception e = assertThrows(IllegalStateException.class, () -> out.accept(row(RowKind.UPDATE_AFTER, 1L, 2L)));
        assertTrue(e.getMessage().contains("insert-only"), e.getMessage());
    }

    record Value(String name, Object value, String json) {
        @Override
        public String toString() {
            return name;
        }
    }

    static List<Value> values() {
        return List.of(
                new Value("long", -42L, "-42"),
                new Value("int", 7, "7"),
                new Value("decimal with trailing zeros", new BigDecimal("908.000"), "908"),
                new Value("decimal fraction", new BigDecimal("0.908"), "0.908"),
                new Value("decimal zero with scale", new BigDecimal("0.000"), "0"),
                new Value("decimal no exponent", new BigDecimal("9.08E+14"), "908000000000000"),
                new Value("instant", Instant.ofEpochMilli(1_436_918_400_123L), "1436918400123"),
                new Value("timestamp read as UTC", LocalDateTime.of(2015, 7, 15, 0, 0, 10), "1436918410000"),
                new Value("string escapes", "a\"b\\c\nd\te\u0001f\u00e9", "\"a\\\"b\\\\c\\nd\\te\\u0001f\u00e9\""),
                new Value("null", null, "null"));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("values")
    void valueAsJson(Value v) {
        assertEquals("{\"v\":" + v.json() + "}", QueryOutput.line(List.of("v"), Row.of(v.value())));
    }

    @Test
    void watermarkExpression() {
        assertEquals("`dateTime` - INTERVAL '0 00:00:04.000' DAY TO SECOND(3)", QueryTables.watermarkExpr(4000));
        assertEquals("`dateTime` - INTERVAL '0 00:00:00.000' DAY TO SECOND(3)", QueryTables.watermarkExpr(0));
        assertEquals("`dateTime` - INTERVAL '1 01:01:01.001' DAY TO SECOND(3)", QueryTables.watermarkExpr(90_061_001));
        assertThrows(IllegalArgumentException.class, () -> QueryTables.watermarkExpr(-1));
        assertThrows(IllegalArgumentException.class, () -> QueryTables.watermarkExpr(100L * 86_400_000L));
    }
}

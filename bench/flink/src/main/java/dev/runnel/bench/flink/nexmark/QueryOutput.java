package dev.runnel.bench.flink.nexmark;

import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;

import java.io.IOException;
import java.io.Writer;
import java.math.BigDecimal;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Turns a query's collected rows into JSON lines, one object per result row with the result's
 * column names as keys, in column order.
 *
 * <p>An insert-only query's rows are written as they arrive, and any other row kind is an error: it
 * would mean the plan is not the one {@link Query} documents. An updating query's changelog is
 * applied instead (+I and +U add a row, -U and -D take one away), and {@link #finish} writes the
 * final result set, in the order in which its rows were first inserted. For q4 that is one line per
 * category, the same as the last line per category of an update stream. A query with an upsert key
 * ({@link Query#upsertKey}, q9) is applied by key instead: the planner may send its updates as
 * UPDATE_AFTER alone (a Top-1 does, even to a changelog stream that accepts UPDATE_BEFORE), so each
 * +I or +U row replaces the row with its key, and -U or -D removes it.
 *
 * <p>Values: BIGINT and INT as JSON integers; DECIMAL as a JSON number in plain notation with
 * trailing zeros removed ({@code 908}, {@code 0.908}, {@code 11209.26}); TIMESTAMP_LTZ and TIMESTAMP
 * (window bounds, read as UTC) as epoch milliseconds; strings JSON-escaped; NULL as {@code null}.
 */
public final class QueryOutput {
    /**
     * The most distinct rows an updating query's result may hold. q4 has one per category; past this
     * bound the changelog is not the one expected, and {@link #accept} throws rather than grow.
     */
    static final int MAX_UPDATING_ROWS = 1_000_000;

    private final Query query;
    private final List<String> names;
    private final Writer out;
    /** Updating queries only: each distinct result row and how many times it is in the result. */
    private final Map<List<Object>, Integer> table = new LinkedHashMap<>();
    /** The positions of the upsert key's columns; empty for a query without one. */
    private final int[] keyColumns;
    /** Queries with an upsert key only: the result row of each key. */
    private final Map<List<Object>, List<Object>> upserts = new LinkedHashMap<>();
    private long written;

    /** A writer of {@code query}'s result, whose columns are {@code names}, to {@code out}. */
    public QueryOutput(Query query, List<String> names, Writer out) {
        this.query = query;
        this.names = List.copyOf(names);
        this.out = out;
        this.keyColumns = query.upsertKey().stream().mapToInt(k -> {
            int i = this.names.indexOf(k);
            if (i < 0) {
                throw new IllegalArgumentException(query.id() + ": upsert key column " + k + " is not in " + names);
            }
            return i;
        }).toArray();
    }

    /** Takes one collected row. */
    public void accept(Row row) throws IOException {
        if (row.getArity() != names.size()) {
            throw new IllegalStateException(query.id() + ": row " + row + " has " + row.getArity()
                    + " fields, the result has columns " + names);
        }
        RowKind kind = row.getKind();
        if (!query.updating()) {
            if (kind != RowKind.INSERT) {
                throw new IllegalStateException(query.id() + " is insert-only but produced a " + kind + " row " + row);
            }
            write(row);
            return;
        }
        if (keyColumns.length > 0) {
            upsert(kind, row);
            return;
        }
        List<Object> key = values(row);
        switch (kind) {
            case INSERT:
            case UPDATE_AFTER:
                if (!table.containsKey(key) && table.size() >= MAX_UPDATING_ROWS) {
                    throw new IllegalStateException(query.id() + ": result exceeds " + MAX_UPDATING_ROWS + " rows");
                }
                table.merge(key, 1, Integer::sum);
                break;
            case UPDATE_BEFORE:
            case DELETE:
                Integer n = table.get(key);
                if (n == null) {
                    throw new IllegalStateException(query.id() + ": " + kind + " of a row not in the result: " + row);
                }
                if (n == 1) {
                    table.remove(key);
                } else {
                    table.put(key, n - 1);
                }
                break;
            default:
                throw new IllegalStateException(query.id() + ": unknown row kind " + kind);
        }
    }

    private void upsert(RowKind kind, Row row) {
        List<Object> key = new ArrayList<>(keyColumns.length);
        for (int i : keyColumns) {
            key.add(row.getField(i));
        }
        switch (kind) {
            case INSERT:
            case UPDATE_AFTER:
                if (!upserts.containsKey(key) && upserts.size() >= MAX_UPDATING_ROWS) {
                    throw new IllegalStateException(query.id() + ": result exceeds " + MAX_UPDATING_ROWS + " rows");
                }
                upserts.put(key, values(row));
                break;
            case UPDATE_BEFORE:
            case DELETE:
                if (upserts.remove(key) == null) {
                    throw new IllegalStateException(query.id() + ": " + kind + " of a key not in the result: " + row);
                }
                break;
            default:
                throw new IllegalStateException(query.id() + ": unknown row kind " + kind);
        }
    }

    /** Writes an updating query's final result set; for an insert-only query there is nothing left. */
    public void finish() throws IOException {
        for (List<Object> v : upserts.values()) {
            write(Row.of(v.toArray()));
        }
        upserts.clear();
        for (Map.Entry<List<Object>, Integer> e : table.entrySet()) {
            Row row = Row.of(e.getKey().toArray());
            for (int i = 0; i < e.getValue(); i++) {
                write(row);
            }
        }
        table.clear();
        out.flush();
    }

    /** The lines written so far. */
    public long written() {
        return written;
    }

    private void write(Row row) throws IOException {
        out.write(line(names, row));
        out.write('\n');
        written++;
    }

    private static List<Object> values(Row row) {
        Object[] v = new Object[row.getArity()];
        for (int i = 0; i < v.length; i++) {
            v[i] = row.getField(i);
        }
        return new ArrayList<>(Arrays.asList(v));
    }

    /** One JSON object: {@code names[i]} to field {@code i} of {@code row}. */
    static String line(List<String> names, Row row) {
        StringBuilder b = new StringBuilder(128).append('{');
        for (int i = 0; i < names.size(); i++) {
            if (i > 0) {
                b.append(',');
            }
            string(b, names.get(i));
            b.append(':');
            value(b, row.getField(i));
        }
        return b.append('}').toString();
    }

    private static void value(StringBuilder b, Object v) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) {
            b.append(v);
        } else if (v instanceof BigDecimal) {
            BigDecimal d = (BigDecimal) v;
            b.append(d.signum() == 0 ? "0" : d.stripTrailingZeros().toPlainString());
        } else if (v instanceof Instant) {
            b.append(((Instant) v).toEpochMilli());
        } else if (v instanceof LocalDateTime) {
            b.append(((LocalDateTime) v).toInstant(ZoneOffset.UTC).toEpochMilli());
        } else if (v instanceof String) {
            string(b, (String) v);
        } else {
            throw new IllegalArgumentException("no JSON form for a " + v.getClass().getName() + ": " + v);
        }
    }

    /** A JSON string: quotes, backslashes and control characters escaped, everything else as is. */
    static void string(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                case '\b': b.append("\\b"); break;
                case '\f': b.append("\\f"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        b.append('"');
    }
}

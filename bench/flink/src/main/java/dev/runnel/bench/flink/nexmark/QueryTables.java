package dev.runnel.bench.flink.nexmark;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.table.api.Schema;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;

import java.nio.file.Path;
import java.util.List;
import java.util.stream.Collectors;

/**
 * The tables the Nexmark queries read: one table {@code events} of the whole event stream and the
 * three views {@code person}, {@code auction} and {@code bid} over it, each with {@code dateTime} as
 * its event-time attribute.
 *
 * <p>{@code events} has one nullable {@code ROW} column per kind ({@code person}, {@code auction},
 * {@code bid}; exactly one is set in each row, as in a JSON line of the input format), and
 * the computed rowtime column {@code dateTime = TO_TIMESTAMP_LTZ(<the set row's dateTime>, 3)} with
 * {@code WATERMARK FOR dateTime AS dateTime - <out-of-orderness>}. It comes either from a JSON lines
 * file (the filesystem connector with the json format, {@link #registerFile}) or from any
 * {@code DataStream<Row>} of {@link #EVENT_TYPE} ({@link #registerStream}), which is how a generator
 * source plugs in. Both declare the same watermark, so the queries cannot tell them apart.
 *
 * <p>Beside them, q13's bounded side input {@code side_input}, a lookup table ({@link SideInputTable}).
 *
 * <p>Every field of the model is BIGINT or STRING, as in the issue; {@code dateTime} and {@code
 * expires} are epoch milliseconds in the input and TIMESTAMP_LTZ(3) in the views. The views' window
 * TVFs then compute window bounds in the session time zone, which {@link NexmarkJob} sets to UTC so
 * that windows are aligned to the epoch.
 */
public final class QueryTables {
    private QueryTables() {}

    /** One field of a model type: its name as in the JSON input and whether it is a string (else BIGINT). */
    record Field(String name, boolean string) {
        String sqlType() {
            return string ? "STRING" : "BIGINT";
        }

        TypeInformation<?> typeInfo() {
            return string ? Types.STRING : Types.LONG;
        }
    }

    private static Field n(String name) {
        return new Field(name, false);
    }

    private static Field s(String name) {
        return new Field(name, true);
    }

    /** The Nexmark person, in the field order. */
    static final List<Field> PERSON = List.of(n("id"), s("name"), s("emailAddress"), s("creditCard"), s("city"),
            s("state"), n("dateTime"), s("extra"));
    /** The Nexmark auction, in the field order. */
    static final List<Field> AUCTION = List.of(n("id"), s("itemName"), s("description"), n("initialBid"),
            n("reserve"), n("dateTime"), n("expires"), n("seller"), n("category"), s("extra"));
    /** The Nexmark bid, in the field order. */
    static final List<Field> BID = List.of(n("auction"), n("bidder"), n("price"), s("channel"), s("url"),
            n("dateTime"), s("extra"));

    /** The three kinds, in the column order of {@code events}. */
    static final List<String> KINDS = List.of("person", "auction", "bid");

    static List<Field> fieldsOf(String kind) {
        switch (kind) {
            case "person": return PERSON;
            case "auction": return AUCTION;
            case "bid": return BID;
            default: throw new IllegalArgumentException("unknown event kind " + kind);
        }
    }

    private static TypeInformation<Row> rowType(List<Field> fields) {
        return Types.ROW_NAMED(fields.stream().map(Field::name).toArray(String[]::new),
                fields.stream().map(Field::typeInfo).toArray(TypeInformation<?>[]::new));
    }

    /**
     * The type of one event of a {@code DataStream} source: a row of three named fields {@code
     * person}, {@code auction}, {@code bid}, each a row of the model's fields (BIGINT as {@code Long},
     * STRING as {@code String}) in the order of {@link #PERSON}, {@link #AUCTION}, {@link #BID}.
     * Exactly one of the three is non-null.
     */
    public static final TypeInformation<Row> EVENT_TYPE = Types.ROW_NAMED(
            KINDS.toArray(String[]::new), rowType(PERSON), rowType(AUCTION), rowType(BID));

    /** {@code ROW<id BIGINT, name STRING, ...>}. */
    private static String rowSql(List<Field> fields) {
        return fields.stream().map(f -> "`" + f.name() + "` " + f.sqlType())
                .collect(Collectors.joining(", ", "ROW<", ">"));
    }

    /** The computed rowtime: the epoch milliseconds of whichever row is set. */
    static final String ROWTIME_EXPR =
            "TO_TIMESTAMP_LTZ(COALESCE(`person`.`dateTime`, `auction`.`dateTime`, `bid`.`dateTime`), 3)";

    /**
     * {@code dateTime - INTERVAL ...} for a bound in milliseconds. Flink SQL's watermark is exactly
     * the expression's value: the largest {@code dateTime} seen minus the bound, without the 1 ms
     * that Runnel's BoundedOutOfOrderness (and Flink's own DataStream strategy) also subtract. So an
     * event exactly {@code bound} behind the largest {@code dateTime} seen before it can be late here
     * (a window drops it if it is the window's last millisecond) and is never late in Runnel. Input
     * whose disorder stays below the bound, as the issue assumes, gives both engines the same results.
     */
    static String watermarkExpr(long boundMs) {
        if (boundMs < 0 || boundMs >= 100L * 86_400_000L) {
            throw new IllegalArgumentException("--out-of-orderness must be in [0, 100 days), got " + boundMs + " ms");
        }
        long d = boundMs / 86_400_000L;
        long h = boundMs / 3_600_000L % 24;
        long m = boundMs / 60_000L % 60;
        long s = boundMs / 1000 % 60;
        long ms = boundMs % 1000;
        return String.format("`dateTime` - INTERVAL '%d %02d:%02d:%02d.%03d' DAY TO SECOND(3)", d, h, m, s, ms);
    }

    /**
     * Registers {@code events} over a JSON lines file: the filesystem connector with the json format.
     * The format cannot insist on exactly one kind per line (two of the three columns are always
     * absent), so {@link QueryInput#check} validates the file before the job runs; a line the format
     * cannot parse still fails the job ({@code json.ignore-parse-errors} is false).
     */
    static void registerFile(StreamTableEnvironment tEnv, Path file, long boundMs) {
        String ddl = "CREATE TEMPORARY TABLE `events` (\n"
                + "  `person` " + rowSql(PERSON) + ",\n"
                + "  `auction` " + rowSql(AUCTION) + ",\n"
                + "  `bid` " + rowSql(BID) + ",\n"
                + "  `dateTime` AS " + ROWTIME_EXPR + ",\n"
                + "  WATERMARK FOR `dateTime` AS " + watermarkExpr(boundMs) + "\n"
                + ") WITH (\n"
                + "  'connector' = 'filesystem',\n"
                + "  'path' = '" + file.toAbsolutePath().toString().replace("'", "''") + "',\n"
                + "  'format' = 'json',\n"
                + "  'json.fail-on-missing-field' = 'false',\n"
                + "  'json.ignore-parse-errors' = 'false'\n"
                + ")";
        tEnv.executeSql(ddl);
        registerViews(tEnv);
    }

    /**
     * Registers {@code events} over a {@code DataStream} of {@link #EVENT_TYPE} (a generator source),
     * with the same rowtime and watermark as {@link #registerFile}. The stream's own watermarks, if
     * any, are replaced by the declared ones.
     */
    public static void registerStream(StreamTableEnvironment tEnv, DataStream<Row> events, long boundMs) {
        if (!events.getType().equals(EVENT_TYPE)) {
            throw new IllegalArgumentException("nexmark events stream has type " + events.getType()
                    + ", want QueryTables.EVENT_TYPE " + EVENT_TYPE);
        }
        Schema schema = Schema.newBuilder()
                .columnByExpression("dateTime", ROWTIME_EXPR)
                .watermark("dateTime", watermarkExpr(boundMs))
                .build();
        tEnv.createTemporaryView("events", events, schema);
        registerViews(tEnv);
    }

    /**
     * Registers q13's bounded side input {@code side_input (key BIGINT, value STRING)}: the lookup
     * table {@link SideInputTable} with the Nexmark suite's 10,000 rows.
     */
    static void registerSideInput(StreamTableEnvironment tEnv) {
        tEnv.executeSql("CREATE TEMPORARY TABLE `side_input` (`key` BIGINT, `value` STRING) WITH ('connector' = '"
                + SideInputTable.IDENTIFIER + "')");
    }

    /** The views of one kind each: the model's fields, with {@code dateTime} (and {@code expires}) as timestamps. */
    private static void registerViews(StreamTableEnvironment tEnv) {
        registerSideInput(tEnv);
        for (String kind : KINDS) {
            StringBuilder b = new StringBuilder("CREATE TEMPORARY VIEW `").append(kind).append("` AS SELECT ");
            boolean first = true;
            for (Field f : fieldsOf(kind)) {
                if (!first) {
                    b.append(", ");
                }
                first = false;
                if (f.name().equals("dateTime")) {
                    b.append("e.`dateTime`"); // the rowtime attribute, not the BIGINT it was computed from
                } else if (f.name().equals("expires")) {
                    b.append("TO_TIMESTAMP_LTZ(e.`auction`.`expires`, 3) AS `expires`");
                } else {
                    b.append("e.`").append(kind).append("`.`").append(f.name()).append("` AS `")
                            .append(f.name()).append('`');
                }
            }
            b.append(" FROM `events` AS e WHERE e.`").append(kind).append("` IS NOT NULL");
            tEnv.executeSql(b.toString());
        }
    }
}

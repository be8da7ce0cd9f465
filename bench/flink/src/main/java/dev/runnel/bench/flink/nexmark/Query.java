package dev.runnel.bench.flink.nexmark;

import java.util.Locale;

/**
 * The Nexmark queries of issue 11 in Flink SQL, over the views of {@link QueryTables}.
 *
 * <p>Each query is written to the definition, which differs from the Nexmark project's SQL
 * where the issue says so: windows are the window TVFs ({@code TUMBLE}, {@code HOP}), aligned to the
 * epoch and holding {@code start <= dateTime < end}; q7 joins each bid to its window's highest price
 * on the window itself (a window join), not on Nexmark's inclusive {@code BETWEEN}; q5 and q7 report
 * every tie. The column names of each result are the output field names.
 *
 * <p>Only q4 produces updates: its result is a changelog whose final state has one row per
 * category. Every other query is insert-only, and {@link QueryOutput} refuses anything else from them.
 */
public enum Query {
    /** Every bid with all its fields. */
    Q0(false, """
            SELECT auction, bidder, price, channel, url, `dateTime`, extra FROM bid"""),

    /**
     * Every bid with its price in euros. {@code 0.908} is an exact DECIMAL literal and the product a
     * DECIMAL with three places, so the price is exact, as the issue asks.
     */
    Q1(false, """
            SELECT auction, bidder, 0.908 * price AS price, `dateTime` FROM bid"""),

    /** The bids on auctions whose id is a multiple of 123. */
    Q2(false, """
            SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"""),

    /**
     * Every auction of category 10 with its seller, if the seller lives in OR, ID or CA: a regular
     * streaming join, so either side may come first, and both sides stay in state for good.
     */
    Q3(false, """
            SELECT P.name, P.city, P.state, A.id
            FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
            WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')"""),

    /**
     * The average closing price per category. An auction's closing price is its highest bid with
     * {@code auction.dateTime <= bid.dateTime <= auction.expires} (both ends inclusive); an auction
     * without such a bid does not count. AVG of BIGINT is BIGINT in Flink SQL (the sum divided by the
     * count in integer arithmetic, truncated). The result updates as bids arrive.
     */
    Q4(true, """
            SELECT Q.category, AVG(Q.closing) AS `avg`
            FROM (
              SELECT MAX(B.price) AS closing, A.category
              FROM auction AS A, bid AS B
              WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
              GROUP BY A.id, A.category
            ) AS Q
            GROUP BY Q.category"""),

    /**
     * Hot items: per hopping window of 10 s every 2 s, every auction whose bid count is the highest
     * of the window, ties included. The counts per auction are a window aggregate; the window's
     * highest count is a second window aggregate over the first (Flink keeps the window attached);
     * a window join on the window's bounds and {@code num = maxnum} keeps the auctions at the top.
     * Every stage emits once per window, when the watermark passes its end, so the output is
     * insert-only. (A window Top-N would be the natural form, but Flink 2.3 supports only ROW_NUMBER
     * there, which drops ties.)
     */
    Q5(false, """
            WITH counts AS (
              SELECT auction, COUNT(*) AS num, window_start, window_end
              FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
              GROUP BY auction, window_start, window_end
            )
            SELECT C.auction, C.num, C.window_start, C.window_end
            FROM counts AS C
            JOIN (
              SELECT MAX(num) AS maxnum, window_start, window_end FROM counts GROUP BY window_start, window_end
            ) AS M
            ON C.window_start = M.window_start AND C.window_end = M.window_end AND C.num = M.maxnum"""),

    /**
     * Highest bid: per tumbling window of 10 s, every bid whose price is the window's highest. A
     * window join of the windowed bids with the window's maximum, on the window's bounds.
     */
    Q7(false, """
            SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.window_end
            FROM (
              SELECT auction, price, bidder, `dateTime`, window_start, window_end
              FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
            ) AS B
            JOIN (
              SELECT MAX(price) AS maxprice, window_start, window_end
              FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
              GROUP BY window_start, window_end
            ) AS M
            ON B.window_start = M.window_start AND B.window_end = M.window_end AND B.price = M.maxprice"""),

    /**
     * New users: every person who opened an auction as seller in the tumbling 10 s window in which
     * the person was created. A window join of the windowed persons and the windowed sellers; one
     * row per person and window however many auctions the person opened in it.
     */
    Q8(false, """
            SELECT P.id, P.name, P.window_start
            FROM (
              SELECT id, name, window_start, window_end
              FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
              GROUP BY id, name, window_start, window_end
            ) AS P
            JOIN (
              SELECT seller, window_start, window_end
              FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
              GROUP BY seller, window_start, window_end
            ) AS A
            ON P.id = A.seller AND P.window_start = A.window_start AND P.window_end = A.window_end""");

    private final boolean updating;
    private final String sql;

    Query(boolean updating, String sql) {
        this.updating = updating;
        this.sql = sql;
    }

    /** The query's name on the command line: q0, q1, ... */
    public String id() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** Whether the result is a changelog with updates (q4) rather than insert-only. */
    public boolean updating() {
        return updating;
    }

    /** The SELECT statement, over the views {@code person}, {@code auction} and {@code bid}. */
    public String sql() {
        return sql;
    }

    /** The query named {@code id} (q0, q1, q2, q3, q4, q5, q7, q8). */
    public static Query of(String id) {
        for (Query q : values()) {
            if (q.id().equals(id)) {
                return q;
            }
        }
        throw new IllegalArgumentException("unknown nexmark query " + id + " (want one of q0 q1 q2 q3 q4 q5 q7 q8)");
    }
}

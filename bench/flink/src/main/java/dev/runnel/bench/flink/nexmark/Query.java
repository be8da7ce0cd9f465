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
 * <p>q4 and q15–q19 produce updates: each result is a changelog whose final state is compared (q4
 * one row per category, q15–q17 one per group, q18 one per bidder and auction, q19 up to ten per
 * auction). Every other query is insert-only, and {@link QueryOutput} refuses anything else from them.
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
            ON P.id = A.seller AND P.window_start = A.window_start AND P.window_end = A.window_end"""),

    /**
     * Bidding statistics per day: the bids, distinct bidders and distinct auctions, in total and per
     * price rank (below 10,000; below 1,000,000; the rest), as COUNT DISTINCT with FILTER. The day is
     * {@code DATE_FORMAT} of the bid's time in the session time zone (UTC). An unbounded GROUP BY:
     * the result updates with every bid, and its final rows are compared.
     */
    Q15(true, """
            SELECT
              DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`,
              COUNT(*) AS total_bids,
              COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
              COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
              COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
              COUNT(DISTINCT bidder) AS total_bidders,
              COUNT(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
              COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
              COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
              COUNT(DISTINCT auction) AS total_auctions,
              COUNT(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
              COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
              COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
            FROM bid
            GROUP BY DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')"""),

    /**
     * Q15 per channel and day, with the latest minute of the day ({@code 'HH:mm'}) of the channel's
     * bids. Updating, as Q15.
     */
    Q16(true, """
            SELECT
              channel,
              DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`,
              MAX(DATE_FORMAT(`dateTime`, 'HH:mm')) AS `minute`,
              COUNT(*) AS total_bids,
              COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
              COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
              COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
              COUNT(DISTINCT bidder) AS total_bidders,
              COUNT(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
              COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
              COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
              COUNT(DISTINCT auction) AS total_auctions,
              COUNT(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
              COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
              COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
            FROM bid
            GROUP BY channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')"""),

    /**
     * Auction statistics per auction and day: the bids in total and per price rank, and the
     * minimum, maximum, average (BIGINT: integer division) and sum of their prices. Updating, as Q15.
     */
    Q17(true, """
            SELECT
              auction,
              DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`,
              COUNT(*) AS total_bids,
              COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
              COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
              COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
              MIN(price) AS min_price,
              MAX(price) AS max_price,
              AVG(price) AS avg_price,
              SUM(price) AS sum_price
            FROM bid
            GROUP BY auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')"""),

    /**
     * Each bidder's last bid on each auction: ROW_NUMBER over the bidder and auction ordered by the
     * bid's time, latest first, which the planner runs as a deduplication keeping the last row by
     * event time. Updating: a later bid replaces the row.
     */
    Q18(true, """
            SELECT auction, bidder, price, channel, url, `dateTime`, extra
            FROM (
              SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY `dateTime` DESC) AS rank_number
              FROM bid
            )
            WHERE rank_number <= 1"""),

    /**
     * The ten highest bids of each auction, numbered. Nexmark orders by price alone and Flink's Top-N
     * then breaks ties by arrival, which parallel channels make nondeterministic; here a tie on price
     * goes to the earlier bid ({@code dateTime} as the second sort key), as in Runnel's job. Updating:
     * a bid that enters moves the ones below it down a rank.
     */
    Q19(true, """
            SELECT auction, bidder, price, channel, url, `dateTime`, extra, rank_number
            FROM (
              SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC, `dateTime` ASC) AS rank_number
              FROM bid
            )
            WHERE rank_number <= 10"""),

    /**
     * Every bid on an auction of category 10 with the auction's fields: a regular join, so either
     * side may come first and both stay in state for good. The two times are cast to plain
     * TIMESTAMP_LTZ(3), since a regular join cannot output time attributes; the output's column
     * names are those of the Nexmark sink table.
     */
    Q20(false, """
            SELECT
              B.auction, B.bidder, B.price, B.channel, B.url,
              CAST(B.`dateTime` AS TIMESTAMP_LTZ(3)) AS bid_dateTime, B.extra AS bid_extra,
              A.itemName, A.description, A.initialBid, A.reserve,
              CAST(A.`dateTime` AS TIMESTAMP_LTZ(3)) AS auction_dateTime, A.expires, A.seller, A.category,
              A.extra AS auction_extra
            FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id
            WHERE A.category = 10"""),

    /**
     * Bids with a channel id: the four hot channels' fixed ids (compared in lower case), else the
     * url's {@code channel_id} parameter; bids with neither are dropped.
     */
    Q21(false, """
            SELECT auction, bidder, price, channel,
              CASE
                WHEN LOWER(channel) = 'apple' THEN '0'
                WHEN LOWER(channel) = 'google' THEN '1'
                WHEN LOWER(channel) = 'facebook' THEN '2'
                WHEN LOWER(channel) = 'baidu' THEN '3'
                ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)
              END AS channel_id
            FROM bid
            WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL
              OR LOWER(channel) IN ('apple', 'google', 'facebook', 'baidu')"""),

    /** Bids with the url's pieces 3, 4 and 5 (from 0) between slashes: the directories after the host. */
    Q22(false, """
            SELECT auction, bidder, price, channel,
              SPLIT_INDEX(url, '/', 3) AS dir1,
              SPLIT_INDEX(url, '/', 4) AS dir2,
              SPLIT_INDEX(url, '/', 5) AS dir3
            FROM bid""");

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

    /** Whether the result is a changelog with updates (q4, q15–q19) rather than insert-only. */
    public boolean updating() {
        return updating;
    }

    /** The SELECT statement, over the views {@code person}, {@code auction} and {@code bid}. */
    public String sql() {
        return sql;
    }

    /** The query named {@code id} (q0, q1, ..., q22). */
    public static Query of(String id) {
        for (Query q : values()) {
            if (q.id().equals(id)) {
                return q;
            }
        }
        throw new IllegalArgumentException("unknown nexmark query " + id + " (want one of q0 q1 q2 q3 q4 q5 q7 q8 q15 q16 q17 q18 q19 q20 q21 q22)");
    }
}

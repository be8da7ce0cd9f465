package dev.runnel.bench.flink.nexmark;

import java.io.BufferedOutputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * The Nexmark generator, ported from Runnel's {@code examples/nexmark/generator.go} event for event:
 * event {@code n} is a pure function of the seed, the rate and the base time, drawn from SplitMix64
 * seeded with {@code seed ^ n}, so Go and Java produce the same events and the same JSON lines byte for
 * byte ({@code GeneratorGoldenTest} compares with the Go side's golden files). The rules and their values
 * are listed once, in the Go generator's doc comment; this class follows them in the same draw order, with
 * Java's signed longs where Go has unsigned ones: every value drawn is non-negative ({@code next >>> 1}),
 * so division and remainder agree.
 *
 * <p>A Generator keeps a scratch buffer and is not thread-safe; each source reader has its own.
 */
public final class Generator implements Serializable {
    private static final long serialVersionUID = 1L;

    /** The events per second that space dateTime when the stream is unthrottled (rate 0). */
    public static final long NOMINAL_RATE = 10_000_000L;
    /** 2015-07-15T00:00:00Z in epoch milliseconds. */
    public static final long DEFAULT_BASE_TIME = 1436918400000L;

    private static final int PROPORTION_DENOMINATOR = 50;
    private static final int PERSON_PROPORTION = 1;
    private static final int AUCTION_PROPORTION = 3;
    private static final long FIRST_PERSON_ID = 1000;
    private static final long FIRST_AUCTION_ID = 1000;
    private static final long FIRST_CATEGORY_ID = 10;
    private static final long NUM_CATEGORIES = 5;
    private static final long NUM_ACTIVE_PEOPLE = 1000;
    private static final long NUM_IN_FLIGHT_AUCTIONS = 100;
    private static final long PERSON_ID_LEAD = 10;
    private static final long AUCTION_ID_LEAD = 10;
    private static final long HOT_SELLERS_RATIO = 4;
    private static final long HOT_AUCTION_RATIO = 2;
    private static final long HOT_BIDDERS_RATIO = 4;
    private static final long HOT_CHANNELS_RATIO = 2;
    private static final long HOT_BLOCK = 100;
    private static final int CHANNELS = 10_000;
    private static final long AVG_PERSON_BYTES = 200;
    private static final long AVG_AUCTION_BYTES = 500;
    private static final long AVG_BID_BYTES = 100;
    private static final long HOT_URL_SEED = 0x686f7455524cL; // "hotURL"
    private static final long CHANNEL_URL_SEED = 0x6368616e6e656cL; // "channel"

    private static final String[] FIRST_NAMES = {"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"};
    private static final String[] LAST_NAMES = {"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"};
    private static final String[] CITIES = {"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"};
    private static final String[] STATES = {"AZ", "CA", "ID", "OR", "WA", "WY"};
    private static final String[] HOT_NAMES = {"Google", "Facebook", "Baidu", "Apple"};

    private final long seed;
    private final long rate; // events/s that space dateTime, never 0
    private final long baseTime;
    private transient StringBuilder buf;

    /**
     * @param seed xor-ed with n to seed event n's random stream
     * @param rate events per second over all subtasks; 0 for the nominal {@link #NOMINAL_RATE}
     * @param baseTime dateTime of event 0 in epoch ms; 0 for {@link #DEFAULT_BASE_TIME}
     */
    public Generator(long seed, long rate, long baseTime) {
        if (rate < 0) {
            throw new IllegalArgumentException("nexmark generator: negative rate " + rate);
        }
        if (baseTime < 0) {
            throw new IllegalArgumentException("nexmark generator: negative base time " + baseTime);
        }
        this.seed = seed;
        this.rate = rate == 0 ? NOMINAL_RATE : rate;
        this.baseTime = baseTime == 0 ? DEFAULT_BASE_TIME : baseTime;
    }

    /** The dateTime of event n: baseTime + n·1000/rate ms. */
    public long time(long n) {
        return baseTime + n * 1000 / rate;
    }

    /** SplitMix64. */
    static final class SplitMix {
        private long s;

        SplitMix(long seed) {
            s = seed;
        }

        long next() {
            s += 0x9e3779b97f4a7c15L;
            long z = s;
            z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
            z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
            return z ^ (z >>> 31);
        }

        /** A value in [0, m) for m > 0. */
        long draw(long m) {
            return (next() >>> 1) % m;
        }
    }

    /** Event n of the stream, a new object. */
    public Model.Event event(long n) {
        if (n < 0) {
            throw new IllegalArgumentException("nexmark generator: negative event number " + n);
        }
        SplitMix r = new SplitMix(seed ^ n);
        long ts = time(n);
        long off = n % PROPORTION_DENOMINATOR;
        Model.Event e = new Model.Event();
        if (off < PERSON_PROPORTION) {
            e.kind = Model.Event.PERSON;
            e.person = person(n, r, ts);
        } else if (off < PERSON_PROPORTION + AUCTION_PROPORTION) {
            e.kind = Model.Event.AUCTION;
            e.auction = auction(n, r, ts);
        } else {
            e.kind = Model.Event.BID;
            e.bid = bid(n, r, ts);
        }
        return e;
    }

    static long lastPerson(long n) {
        return n / PROPORTION_DENOMINATOR;
    }

    static long lastAuction(long n) {
        long epoch = n / PROPORTION_DENOMINATOR;
        long off = n % PROPORTION_DENOMINATOR;
        if (off < PERSON_PROPORTION) {
            return (epoch - 1) * AUCTION_PROPORTION + AUCTION_PROPORTION - 1;
        }
        if (off >= PERSON_PROPORTION + AUCTION_PROPORTION) {
            return epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1;
        }
        return epoch * AUCTION_PROPORTION + off - PERSON_PROPORTION;
    }

    private static long randomPerson(long n, SplitMix r) {
        long people = lastPerson(n) + 1;
        long active = Math.min(people, NUM_ACTIVE_PEOPLE);
        return people - active + r.draw(active + PERSON_ID_LEAD);
    }

    private static long randomAuction(long n, SplitMix r) {
        long hi = lastAuction(n);
        long lo = Math.max(hi - NUM_IN_FLIGHT_AUCTIONS, 0);
        return lo + r.draw(hi - lo + 1 + AUCTION_ID_LEAD);
    }

    private static long nextPrice(SplitMix r) {
        long lo = 100;
        for (long d = r.draw(6); d > 0; d--) {
            lo *= 10;
        }
        return lo + r.draw(9 * lo);
    }

    /** Appends string(m, special): 3 + draw(m − 3) characters, spaces trimmed at both ends. */
    static void appendString(StringBuilder b, SplitMix r, long m, char special) {
        int start = b.length();
        for (long l = 3 + r.draw(m - 3); l > 0; l--) {
            if (r.draw(13) == 0) {
                b.append(special);
            } else {
                b.append((char) ('a' + r.draw(26)));
            }
        }
        if (special != ' ') {
            return;
        }
        int i = start;
        int j = b.length();
        while (i < j && b.charAt(i) == ' ') {
            i++;
        }
        while (j > i && b.charAt(j - 1) == ' ') {
            j--;
        }
        b.setLength(j);
        b.delete(start, i);
    }

    static void appendExact(StringBuilder b, SplitMix r, long l) {
        while (l > 0) {
            long x = r.next() >>> 1;
            for (int k = 0; k < 13 && l > 0; k++) {
                b.append((char) ('a' + x % 26));
                x /= 26;
                l--;
            }
        }
    }

    static void appendExtra(StringBuilder b, SplitMix r, long size, long avg) {
        if (size > avg) {
            return;
        }
        long d = avg - size;
        long delta = (2 * d + 5) / 10;
        long l = d - delta;
        if (delta > 0) {
            l += r.draw(2 * delta);
        }
        appendExact(b, r, l);
    }

    private StringBuilder scratch() {
        if (buf == null) {
            buf = new StringBuilder(1024);
        }
        buf.setLength(0);
        return buf;
    }

    private Model.Person person(long n, SplitMix r, long ts) {
        StringBuilder b = scratch();
        Model.Person p = new Model.Person();
        p.id = lastPerson(n) + FIRST_PERSON_ID;
        b.append(FIRST_NAMES[(int) r.draw(FIRST_NAMES.length)]).append(' ').append(LAST_NAMES[(int) r.draw(LAST_NAMES.length)]);
        p.name = b.toString();
        b.setLength(0);
        appendString(b, r, 7, ' ');
        b.append('@');
        appendString(b, r, 5, ' ');
        b.append(".com");
        p.emailAddress = b.toString();
        b.setLength(0);
        for (int i = 0; i < 4; i++) {
            if (i > 0) {
                b.append(' ');
            }
            long v = r.draw(10000);
            b.append((char) ('0' + v / 1000)).append((char) ('0' + v / 100 % 10))
                    .append((char) ('0' + v / 10 % 10)).append((char) ('0' + v % 10));
        }
        p.creditCard = b.toString();
        p.city = CITIES[(int) r.draw(CITIES.length)];
        p.state = STATES[(int) r.draw(STATES.length)];
        b.setLength(0);
        long size = 8 + p.name.length() + p.emailAddress.length() + p.creditCard.length() + p.city.length() + p.state.length();
        appendExtra(b, r, size, AVG_PERSON_BYTES);
        p.extra = b.toString();
        p.dateTime = ts;
        return p;
    }

    private Model.Auction auction(long n, SplitMix r, long ts) {
        Model.Auction a = new Model.Auction();
        a.id = lastAuction(n) + FIRST_AUCTION_ID;
        long seller;
        if (r.draw(HOT_SELLERS_RATIO) > 0) {
            seller = lastPerson(n) / HOT_BLOCK * HOT_BLOCK;
        } else {
            seller = randomPerson(n, r);
        }
        a.seller = seller + FIRST_PERSON_ID;
        a.category = FIRST_CATEGORY_ID + r.draw(NUM_CATEGORIES);
        a.initialBid = nextPrice(r);
        long horizon = time(n + NUM_IN_FLIGHT_AUCTIONS * PROPORTION_DENOMINATOR / AUCTION_PROPORTION) - ts;
        a.expires = ts + 1 + r.draw(Math.max(2 * horizon, 1));
        StringBuilder b = scratch();
        appendString(b, r, 20, ' ');
        a.itemName = b.toString();
        b.setLength(0);
        appendString(b, r, 100, ' ');
        a.description = b.toString();
        a.reserve = a.initialBid + nextPrice(r);
        b.setLength(0);
        appendExtra(b, r, 8 + a.itemName.length() + a.description.length() + 40, AVG_AUCTION_BYTES);
        a.extra = b.toString();
        a.dateTime = ts;
        return a;
    }

    private Model.Bid bid(long n, SplitMix r, long ts) {
        Model.Bid bd = new Model.Bid();
        long auction;
        if (r.draw(HOT_AUCTION_RATIO) > 0) {
            auction = lastAuction(n) / HOT_BLOCK * HOT_BLOCK;
        } else {
            auction = randomAuction(n, r);
        }
        long bidder;
        if (r.draw(HOT_BIDDERS_RATIO) > 0) {
            bidder = lastPerson(n) / HOT_BLOCK * HOT_BLOCK + 1;
        } else {
            bidder = randomPerson(n, r);
        }
        bd.auction = auction + FIRST_AUCTION_ID;
        bd.bidder = bidder + FIRST_PERSON_ID;
        bd.price = nextPrice(r);
        if (r.draw(HOT_CHANNELS_RATIO) > 0) {
            int i = (int) r.draw(HOT_NAMES.length);
            bd.channel = HOT_NAMES[i];
            bd.url = Channels.HOT_URLS[i];
        } else {
            int k = (int) r.draw(CHANNELS);
            bd.channel = Channels.NAMES[k];
            bd.url = Channels.URLS[k];
        }
        StringBuilder b = scratch();
        appendExtra(b, r, 32, AVG_BID_BYTES);
        bd.extra = b.toString();
        bd.dateTime = ts;
        return bd;
    }

    /** The channels' names and urls, made once per JVM on first use (about 1 MB). */
    private static final class Channels {
        static final String[] HOT_URLS = new String[HOT_NAMES.length];
        static final String[] NAMES = new String[CHANNELS];
        static final String[] URLS = new String[CHANNELS];

        static {
            for (int i = 0; i < HOT_NAMES.length; i++) {
                StringBuilder b = new StringBuilder();
                appendBaseUrl(b, new SplitMix(HOT_URL_SEED ^ i));
                HOT_URLS[i] = b.toString();
            }
            for (int k = 0; k < CHANNELS; k++) {
                SplitMix r = new SplitMix(CHANNEL_URL_SEED ^ k);
                StringBuilder b = new StringBuilder();
                appendBaseUrl(b, r);
                if (r.draw(10) > 0) {
                    b.append("&channel_id=").append(Math.abs((long) Integer.reverse(k)));
                }
                NAMES[k] = "channel-" + k;
                URLS[k] = b.toString();
            }
        }

        private static void appendBaseUrl(StringBuilder b, SplitMix r) {
            b.append("https://www.nexmark.com/");
            for (int i = 0; i < 3; i++) {
                appendString(b, r, 5, '_');
                b.append('/');
            }
            b.append("item.htm?query=1");
        }
    }

    /**
     * {@code nexmark-generate --events N [--rate R] [--seed S] [--base-time MS] [--output FILE]}: writes
     * events 0 … N−1 as JSON lines to stdout or FILE. The rate only spaces the timestamps.
     */
    public static void command(Map<String, String> flags) throws IOException {
        long events = longFlag(flags, "events", 1000);
        long rate = longFlag(flags, "rate", 0);
        long seed = longFlag(flags, "seed", 0);
        long base = longFlag(flags, "base-time", DEFAULT_BASE_TIME);
        String output = flags.remove("output");
        for (String k : new String[] {"events", "rate", "seed", "base-time"}) {
            flags.remove(k);
        }
        if (!flags.isEmpty()) {
            throw new IllegalArgumentException("unknown flags: " + flags.keySet());
        }
        if (events <= 0) {
            throw new IllegalArgumentException("--events must be positive: the file is bounded");
        }
        Generator g = new Generator(seed, rate, base);
        OutputStream out = output == null ? System.out : new FileOutputStream(output);
        try (OutputStream w = new BufferedOutputStream(out, 256 << 10)) {
            StringBuilder line = new StringBuilder(1024);
            for (long n = 0; n < events; n++) {
                line.setLength(0);
                JsonLines.appendEvent(line, g.event(n));
                line.append('\n');
                w.write(line.toString().getBytes(StandardCharsets.UTF_8));
            }
        }
    }

    private static long longFlag(Map<String, String> f, String name, long def) {
        String v = f.get(name);
        if (v == null) {
            return def;
        }
        try {
            return Long.parseUnsignedLong(v.replace("_", ""));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--" + name + ": not a number: " + v, e);
        }
    }
}

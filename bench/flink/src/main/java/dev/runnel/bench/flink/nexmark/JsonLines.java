package dev.runnel.bench.flink.nexmark;

/**
 * The JSON lines writer of Runnel's {@code examples/nexmark/json.go}, byte for byte once encoded as UTF-8:
 * no spaces, keys in the model's order, integers in decimal, strings escaped as there ('"' and '\\' with a
 * backslash; \b \f \n \r \t short; other characters below U+0020 as a backslash, u, 00 and two lowercase
 * hex digits; a lone surrogate, which UTF-8 cannot carry, as the escape of U+FFFD, as Go writes an invalid
 * UTF-8 byte; everything else as it is). {@link Row} writes the flat objects of the queries' output.
 */
public final class JsonLines {
    private JsonLines() {}

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    /** The event as one JSON object, without a newline. */
    public static String event(Model.Event e) {
        StringBuilder b = new StringBuilder(512);
        appendEvent(b, e);
        return b.toString();
    }

    /** Appends the event as one JSON object ({"person":{…}}, {"auction":{…}} or {"bid":{…}}), no newline. */
    public static void appendEvent(StringBuilder b, Model.Event e) {
        switch (e.kind) {
            case Model.Event.PERSON: {
                Model.Person p = e.person;
                b.append("{\"person\":");
                new Row(b).num("id", p.id).str("name", p.name).str("emailAddress", p.emailAddress)
                        .str("creditCard", p.creditCard).str("city", p.city).str("state", p.state)
                        .num("dateTime", p.dateTime).str("extra", p.extra).end();
                break;
            }
            case Model.Event.AUCTION: {
                Model.Auction a = e.auction;
                b.append("{\"auction\":");
                new Row(b).num("id", a.id).str("itemName", a.itemName).str("description", a.description)
                        .num("initialBid", a.initialBid).num("reserve", a.reserve).num("dateTime", a.dateTime)
                        .num("expires", a.expires).num("seller", a.seller).num("category", a.category)
                        .str("extra", a.extra).end();
                break;
            }
            case Model.Event.BID: {
                Model.Bid d = e.bid;
                b.append("{\"bid\":");
                new Row(b).num("auction", d.auction).num("bidder", d.bidder).num("price", d.price)
                        .str("channel", d.channel).str("url", d.url).num("dateTime", d.dateTime)
                        .str("extra", d.extra).end();
                break;
            }
            default:
                throw new IllegalArgumentException("nexmark event of unknown kind " + e.kind);
        }
        b.append('}');
    }

    /** Appends s as a JSON string (null as ""). */
    public static void appendString(StringBuilder b, String s) {
        b.append('"');
        if (s != null) {
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"':
                    case '\\':
                        b.append('\\').append(c);
                        break;
                    case '\b':
                        b.append("\\b");
                        break;
                    case '\f':
                        b.append("\\f");
                        break;
                    case '\n':
                        b.append("\\n");
                        break;
                    case '\r':
                        b.append("\\r");
                        break;
                    case '\t':
                        b.append("\\t");
                        break;
                    default:
                        if (c < 0x20) {
                            b.append("\\u00").append(HEX[c >> 4]).append(HEX[c & 0xf]);
                        } else if (Character.isHighSurrogate(c) && i + 1 < s.length()
                                && Character.isLowSurrogate(s.charAt(i + 1))) {
                            b.append(c).append(s.charAt(++i));
                        } else if (Character.isSurrogate(c)) {
                            b.append("\\ufffd");
                        } else {
                            b.append(c);
                        }
                }
            }
        }
        b.append('"');
    }

    /**
     * Appends v/1000 as an exact decimal: the integer part, then, unless v is a multiple of 1000, a point and
     * the three decimals with trailing zeros trimmed (1120472 → 1120.472, 90800 → 90.8, -5 → -0.005). q1's
     * euro price 0.908 × price is {@code appendDecimal3(b, price * 908)}.
     */
    public static void appendDecimal3(StringBuilder b, long v) {
        if (v < 0) {
            b.append('-');
        }
        // Unsigned arithmetic on the magnitude: correct for Long.MIN_VALUE too.
        long u = v < 0 ? -v : v;
        b.append(Long.toUnsignedString(Long.divideUnsigned(u, 1000)));
        int frac = (int) Long.remainderUnsigned(u, 1000);
        if (frac == 0) {
            return;
        }
        char[] d = {(char) ('0' + frac / 100), (char) ('0' + frac / 10 % 10), (char) ('0' + frac % 10)};
        int n = 3;
        while (d[n - 1] == '0') {
            n--;
        }
        b.append('.').append(d, 0, n);
    }

    /** A flat JSON object written field by field into a StringBuilder, for the queries' output rows. */
    public static final class Row {
        private final StringBuilder b;
        private int fields;

        /** Appends '{' to b. */
        public Row(StringBuilder b) {
            this.b = b;
            b.append('{');
        }

        private void key(String k) {
            if (fields++ > 0) {
                b.append(',');
            }
            appendString(b, k);
            b.append(':');
        }

        /** The field k with the integer v. */
        public Row num(String k, long v) {
            key(k);
            b.append(v);
            return this;
        }

        /** The field k with the string v, escaped. */
        public Row str(String k, String v) {
            key(k);
            appendString(b, v);
            return this;
        }

        /** The field k with the exact decimal thousandths/1000 (see {@link #appendDecimal3}). */
        public Row decimal3(String k, long thousandths) {
            key(k);
            appendDecimal3(b, thousandths);
            return this;
        }

        /** Appends '}'. */
        public StringBuilder end() {
            return b.append('}');
        }
    }
}

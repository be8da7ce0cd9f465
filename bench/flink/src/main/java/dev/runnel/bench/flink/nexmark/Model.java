package dev.runnel.bench.flink.nexmark;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.types.Row;

import java.util.Objects;

/**
 * The Nexmark data model, as in Runnel's {@code examples/nexmark} (model.go): {@link Person},
 * {@link Auction}, {@link Bid} and the {@link Event} that holds one of them. Times are epoch
 * milliseconds, prices cents.
 *
 * <p>The classes are Flink POJOs (public, a public no-argument constructor, public fields), so a
 * {@code DataStream<Model.Event>} is serialized with Flink's POJO serializer and converts to a table
 * whose columns are the fields ({@code person}, {@code auction}, {@code bid} as ROWs, {@code null}
 * where the event is of another kind). {@link #toRow} and {@link #ROW_TYPE} give the same event as a
 * {@code Row} of three nullable named rows, the layout of the JSON lines input:
 *
 * <pre>
 *   env.fromSource(new NexmarkSource(p, events, rate, seed, 0), WatermarkStrategy.noWatermarks(), "nexmark")
 *      .setParallelism(p).map(Model::toRow).returns(Model.ROW_TYPE)
 * </pre>
 */
public final class Model {
    private Model() {}

    /** A person as a Row: the fields in the order, BIGINT as Long, STRING as String. */
    public static final TypeInformation<Row> PERSON_ROW = Types.ROW_NAMED(
            new String[] {"id", "name", "emailAddress", "creditCard", "city", "state", "dateTime", "extra"},
            Types.LONG, Types.STRING, Types.STRING, Types.STRING, Types.STRING, Types.STRING, Types.LONG, Types.STRING);
    /** An auction as a Row, as {@link #PERSON_ROW}. */
    public static final TypeInformation<Row> AUCTION_ROW = Types.ROW_NAMED(
            new String[] {"id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires", "seller", "category", "extra"},
            Types.LONG, Types.STRING, Types.STRING, Types.LONG, Types.LONG, Types.LONG, Types.LONG, Types.LONG, Types.LONG, Types.STRING);
    /** A bid as a Row, as {@link #PERSON_ROW}. */
    public static final TypeInformation<Row> BID_ROW = Types.ROW_NAMED(
            new String[] {"auction", "bidder", "price", "channel", "url", "dateTime", "extra"},
            Types.LONG, Types.LONG, Types.LONG, Types.STRING, Types.STRING, Types.LONG, Types.STRING);
    /** An event as a Row of the named fields person, auction, bid: exactly one is set, the others null. */
    public static final TypeInformation<Row> ROW_TYPE = Types.ROW_NAMED(
            new String[] {"person", "auction", "bid"}, PERSON_ROW, AUCTION_ROW, BID_ROW);

    /** The event as a Row of {@link #ROW_TYPE} (positional rows; the names are the type's). */
    public static Row toRow(Event e) {
        switch (e.kind) {
            case Event.PERSON: {
                Person p = e.person;
                return Row.of(Row.of(p.id, p.name, p.emailAddress, p.creditCard, p.city, p.state, p.dateTime, p.extra), null, null);
            }
            case Event.AUCTION: {
                Auction a = e.auction;
                return Row.of(null, Row.of(a.id, a.itemName, a.description, a.initialBid, a.reserve, a.dateTime,
                        a.expires, a.seller, a.category, a.extra), null);
            }
            case Event.BID: {
                Bid b = e.bid;
                return Row.of(null, null, Row.of(b.auction, b.bidder, b.price, b.channel, b.url, b.dateTime, b.extra));
            }
            default:
                throw new IllegalArgumentException("nexmark event of unknown kind " + e.kind);
        }
    }

    /** A new user of the auction site. */
    public static class Person {
        public long id;
        public String name;
        public String emailAddress;
        public String creditCard;
        public String city;
        public String state;
        public long dateTime;
        public String extra;

        public Person() {}

        @Override
        public boolean equals(Object o) {
            if (!(o instanceof Person)) {
                return false;
            }
            Person p = (Person) o;
            return id == p.id && dateTime == p.dateTime && Objects.equals(name, p.name)
                    && Objects.equals(emailAddress, p.emailAddress) && Objects.equals(creditCard, p.creditCard)
                    && Objects.equals(city, p.city) && Objects.equals(state, p.state) && Objects.equals(extra, p.extra);
        }

        @Override
        public int hashCode() {
            return Objects.hash(id, name, dateTime);
        }
    }

    /** A new item for sale; {@code seller} is a person's id. */
    public static class Auction {
        public long id;
        public String itemName;
        public String description;
        public long initialBid;
        public long reserve;
        public long dateTime;
        public long expires;
        public long seller;
        public long category;
        public String extra;

        public Auction() {}

        @Override
        public boolean equals(Object o) {
            if (!(o instanceof Auction)) {
                return false;
            }
            Auction a = (Auction) o;
            return id == a.id && initialBid == a.initialBid && reserve == a.reserve && dateTime == a.dateTime
                    && expires == a.expires && seller == a.seller && category == a.category
                    && Objects.equals(itemName, a.itemName) && Objects.equals(description, a.description)
                    && Objects.equals(extra, a.extra);
        }

        @Override
        public int hashCode() {
            return Objects.hash(id, dateTime);
        }
    }

    /** A bid on an auction; {@code auction} is an auction's id, {@code bidder} a person's. */
    public static class Bid {
        public long auction;
        public long bidder;
        public long price;
        public String channel;
        public String url;
        public long dateTime;
        public String extra;

        public Bid() {}

        @Override
        public boolean equals(Object o) {
            if (!(o instanceof Bid)) {
                return false;
            }
            Bid b = (Bid) o;
            return auction == b.auction && bidder == b.bidder && price == b.price && dateTime == b.dateTime
                    && Objects.equals(channel, b.channel) && Objects.equals(url, b.url)
                    && Objects.equals(extra, b.extra);
        }

        @Override
        public int hashCode() {
            return Objects.hash(auction, bidder, price, dateTime);
        }
    }

    /** One record of the stream: {@code kind} says which of the three is set; the others are null. */
    public static class Event {
        public static final int PERSON = 0;
        public static final int AUCTION = 1;
        public static final int BID = 2;

        public int kind;
        public Person person;
        public Auction auction;
        public Bid bid;

        public Event() {}

        /** The event's time in epoch milliseconds, whichever its kind. */
        public long dateTime() {
            switch (kind) {
                case PERSON:
                    return person.dateTime;
                case AUCTION:
                    return auction.dateTime;
                default:
                    return bid.dateTime;
            }
        }

        @Override
        public boolean equals(Object o) {
            if (!(o instanceof Event)) {
                return false;
            }
            Event e = (Event) o;
            return kind == e.kind && Objects.equals(person, e.person) && Objects.equals(auction, e.auction)
                    && Objects.equals(bid, e.bid);
        }

        @Override
        public int hashCode() {
            return Objects.hash(kind, person, auction, bid);
        }

        @Override
        public String toString() {
            return JsonLines.event(this);
        }
    }
}

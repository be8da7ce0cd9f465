package dev.runnel.bench.flink.nexmark;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core.JsonFactory;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core.JsonParser;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core.JsonToken;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * Checks a Nexmark JSON lines file before a job reads it, and counts its events.
 *
 * <p>The format: each line one JSON object with exactly one key, {@code person}, {@code
 * auction} or {@code bid}, whose value is an object with exactly the model's fields
 * ({@link QueryTables#PERSON}, ...), BIGINT fields as JSON integers and STRING fields as JSON strings.
 * Flink's json format would read a line with a missing or an extra field, or with two kinds, without
 * complaint (missing fields become NULL), so this check is what makes such a file an error, naming
 * its line, as Runnel's reader does. It streams the file with Jackson (Flink's shaded copy, already on
 * the class path) and keeps nothing but the counts.
 */
public final class QueryInput {
    private static final JsonFactory JSON = new JsonFactory();

    private QueryInput() {}

    /** How many events of each kind a file holds. */
    public record Counts(long persons, long auctions, long bids) {
        /** All events. */
        public long events() {
            return persons + auctions + bids;
        }
    }

    /** Validates {@code file} line by line; the first bad line is an exception naming it. */
    public static Counts check(Path file) throws IOException {
        long persons = 0;
        long auctions = 0;
        long bids = 0;
        try (BufferedReader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            long lineNo = 0;
            for (String line; (line = r.readLine()) != null; ) {
                lineNo++;
                String kind;
                try {
                    kind = checkLine(line);
                } catch (IllegalArgumentException | IOException e) {
                    throw new IllegalArgumentException(file + ":" + lineNo + ": " + e.getMessage(), e);
                }
                switch (kind) {
                    case "person": persons++; break;
                    case "auction": auctions++; break;
                    default: bids++; break;
                }
            }
        }
        return new Counts(persons, auctions, bids);
    }

    /** Checks one line and returns its kind. */
    static String checkLine(String line) throws IOException {
        if (line.isBlank()) {
            throw new IllegalArgumentException("empty line, want one JSON object with one key person, auction or bid");
        }
        try (JsonParser p = JSON.createParser(line)) {
            expect(p.nextToken() == JsonToken.START_OBJECT, "not a JSON object");
            JsonToken t = p.nextToken();
            expect(t == JsonToken.FIELD_NAME, "an event object needs one key: person, auction or bid");
            String kind = p.currentName();
            expect(QueryTables.KINDS.contains(kind), "unknown event kind \"" + kind + "\", want person, auction or bid");
            expect(p.nextToken() == JsonToken.START_OBJECT, "the value of \"" + kind + "\" is not an object");
            checkFields(p, kind, QueryTables.fieldsOf(kind));
            t = p.nextToken();
            expect(t == JsonToken.END_OBJECT, t == JsonToken.FIELD_NAME
                    ? "more than one key in an event object (\"" + kind + "\" and \"" + p.currentName() + "\")"
                    : "malformed event object");
            expect(p.nextToken() == null, "text after the event object");
            return kind;
        }
    }

    private static void checkFields(JsonParser p, String kind, List<QueryTables.Field> fields) throws IOException {
        Set<String> seen = new HashSet<>();
        for (JsonToken t = p.nextToken(); t != JsonToken.END_OBJECT; t = p.nextToken()) {
            expect(t == JsonToken.FIELD_NAME, "malformed " + kind + " object");
            String name = p.currentName();
            QueryTables.Field f = fields.stream().filter(x -> x.name().equals(name)).findFirst().orElse(null);
            expect(f != null, kind + " has no field \"" + name + "\"");
            expect(seen.add(name), kind + " field \"" + name + "\" appears twice");
            JsonToken v = p.nextToken();
            if (f.string()) {
                expect(v == JsonToken.VALUE_STRING, kind + "." + name + " must be a string, got " + v);
            } else {
                expect(v == JsonToken.VALUE_NUMBER_INT, kind + "." + name + " must be an integer, got " + v);
                JsonParser.NumberType nt = p.getNumberType();
                expect(nt == JsonParser.NumberType.INT || nt == JsonParser.NumberType.LONG,
                        kind + "." + name + " does not fit in 64 bits: " + p.getText());
            }
        }
        if (seen.size() != fields.size()) {
            for (QueryTables.Field f : fields) {
                expect(seen.contains(f.name()), kind + " lacks field \"" + f.name() + "\"");
            }
        }
    }

    private static void expect(boolean ok, String problem) {
        if (!ok) {
            throw new IllegalArgumentException(problem);
        }
    }
}

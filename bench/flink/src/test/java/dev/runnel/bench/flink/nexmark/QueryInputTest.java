package dev.runnel.bench.flink.nexmark;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The check of the input format: what it accepts, what it refuses and how it names the problem. */
class QueryInputTest {
    static final String BID = "{\"bid\":{\"auction\":1,\"bidder\":2,\"price\":3,\"channel\":\"c\",\"url\":\"u\","
            + "\"dateTime\":1436918400000,\"extra\":\"\"}}";

    /** A line and the problem it must be refused for (a part of the message), or null if it is fine. */
    record Case(String name, String line, String problem) {
        @Override
        public String toString() {
            return name;
        }
    }

    static List<Case> cases() {
        String bidFields = "\"auction\":1,\"bidder\":2,\"price\":3,\"channel\":\"c\",\"url\":\"u\",\"dateTime\":5";
        return List.of(
                new Case("a bid", BID, null),
                new Case("fields in another order", "{\"bid\":{\"extra\":\"x\"," + bidFields + "}}", null),
                new Case("a person", QueryTest.person(1, "a", "OR", 0).json(), null),
                new Case("an auction", QueryTest.auction(1, 2, 10, 0, 5).json(), null),
                new Case("empty line", "", "empty line"),
                new Case("not an object", "[1]", "not a JSON object"),
                new Case("no key", "{}", "needs one key"),
                new Case("unknown kind", "{\"click\":{}}", "unknown event kind \"click\""),
                new Case("two kinds", "{\"bid\":{" + bidFields + ",\"extra\":\"\"},\"person\":{}}",
                        "more than one key"),
                new Case("kind is not an object", "{\"bid\":3}", "not an object"),
                new Case("missing field", "{\"bid\":{" + bidFields + "}}", "bid lacks field \"extra\""),
                new Case("unknown field", "{\"bid\":{" + bidFields + ",\"extra\":\"\",\"tip\":1}}",
                        "bid has no field \"tip\""),
                new Case("field twice", "{\"bid\":{" + bidFields + ",\"extra\":\"\",\"price\":4}}",
                        "\"price\" appears twice"),
                new Case("string for a number", "{\"bid\":{\"auction\":\"1\"}}", "bid.auction must be an integer"),
                new Case("fraction for a number", "{\"bid\":{\"auction\":1.5}}", "bid.auction must be an integer"),
                new Case("number too big", "{\"bid\":{\"auction\":18446744073709551616}}", "does not fit in 64 bits"),
                new Case("number for a string", "{\"bid\":{\"url\":7}}", "bid.url must be a string"),
                new Case("null for a string", "{\"bid\":{\"url\":null}}", "bid.url must be a string"),
                new Case("text after the object", BID + " 1", "text after the event object"),
                new Case("truncated", BID.substring(0, BID.length() - 2), "Unexpected end-of-input"));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("cases")
    void checkLine(Case c) throws Exception {
        if (c.problem() == null) {
            QueryInput.checkLine(c.line());
            return;
        }
        Exception e = assertThrows(Exception.class, () -> QueryInput.checkLine(c.line()));
        assertTrue(e.getMessage().contains(c.problem()), "message \"" + e.getMessage() + "\" lacks \"" + c.problem() + "\"");
    }

    @Test
    void countsKindsAndNamesTheBadLine(@TempDir Path dir) throws Exception {
        Path f = dir.resolve("in.jsonl");
        String person = QueryTest.person(1, "a", "OR", 0).json();
        String auction = QueryTest.auction(1, 2, 10, 0, 5).json();
        Files.write(f, List.of(person, auction, BID, BID), StandardCharsets.UTF_8);
        assertEquals(new QueryInput.Counts(1, 1, 2), QueryInput.check(f));

        Files.write(f, List.of(person, BID, "{\"bid\":{}}", BID), StandardCharsets.UTF_8);
        Exception e = assertThrows(IllegalArgumentException.class, () -> QueryInput.check(f));
        assertTrue(e.getMessage().startsWith(f + ":3: bid lacks field"), e.getMessage());
    }
}

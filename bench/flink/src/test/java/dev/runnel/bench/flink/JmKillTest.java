package dev.runnel.bench.flink;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** jm-kill's reading of the sink writers' logs: the same figures as runnel bench jm-loss. */
class JmKillTest {
    // Times in microseconds: steady at 7 s, the kill at 10 s.
    static final long STEADY = 7_000_000L;
    static final long KILLED = 10_000_000L;

    static JmKill.SinkLogs logs(String... texts) throws IOException {
        JmKill.SinkLogs l = new JmKill.SinkLogs();
        for (int i = 0; i < texts.length; i++) {
            l.parse("sink-" + i, texts[i]);
        }
        return l;
    }

    /** One case: the writers' logs, the takeover, and the figures wanted. */
    record Case(String name, String[] texts, long takeover, Map<String, Object> want) {}

    static final List<Case> CASES = List.of(
            new Case("the old writer stops at the kill; a new one after the takeover",
                    new String[] {"start 6000000\nw 6500000\nw 7010000\nw 7100000\nw 9985000\n",
                        "start 12500000\nw 13100000\nw 13110000\nw 13300000\n"},
                    12_000_000L,
                    Map.of("takeover_ms", 2000L, "first_output_ms", 3100L, "first_output_writer", "new", "longest_gap_ms", 3115L,
                            "gap_start_ms", -15L, "output_resumed_ms", 3100L, "baseline_max_gap_ms", 2885L,
                            "kept_writer_reports_after_kill", 0, "sink_writers", 2)),
            new Case("the old writer goes on until the takeover, then a restart (Flink's TaskManagers)",
                    new String[] {"start 6000000\nw 7000000\nw 9990000\nw 11000000\nw 12001000\n",
                        "start 12500000\nw 13900000\nw 14000000\n"},
                    12_000_000L,
                    Map.of("takeover_ms", 2000L, "first_output_ms", 2001L, "first_output_writer", "kept", "longest_gap_ms", 1899L,
                            "gap_start_ms", 2001L, "output_resumed_ms", 3900L, "baseline_max_gap_ms", 2990L,
                            "kept_writer_reports_after_kill", 2, "sink_writers", 2)));

    @Test
    void measuresLikeRunnel() throws IOException {
        for (Case c : CASES) {
            Json j = new Json();
            JmKill.measureLogs(j, logs(c.texts()), STEADY, KILLED, c.takeover());
            for (Map.Entry<String, Object> e : c.want().entrySet()) {
                assertEquals(e.getValue(), j.get(e.getKey()), c.name() + ": " + e.getKey() + " in " + j);
            }
        }
    }

    @Test
    void refusesRunsWithoutOutput() throws IOException {
        JmKill.SinkLogs none = logs("start 6000000\nw 9000000\n");
        assertThrows(IllegalStateException.class, () -> JmKill.measureLogs(new Json(), none, STEADY, KILLED, 12_000_000L));
        JmKill.SinkLogs onlyAfter = logs("start 12000000\nw 13000000\n");
        assertThrows(IllegalStateException.class, () -> JmKill.measureLogs(new Json(), onlyAfter, STEADY, KILLED, 12_000_000L));
    }

    @Test
    void checkerFromTheKeysFinalReports() throws IOException {
        // Two keys of 100 values: key 0 complete and clean (its final report twice, as after a replay),
        // key 1 with 3 lost, 1 duplicated; key 2 never reported its last record.
        JmKill.SinkLogs l = logs("start 1\nw 2\nfinal 0 100 0 0 0\nfinal 1 100 3 1 0\n", "start 5\nfinal 0 100 0 0 0\n");
        assertArrayEquals(new long[] {197, 3, 1, 0, 2}, l.checker(3, 100));
        assertArrayEquals(new long[] {200, 0, 0, 0, 2}, logs("start 1\nfinal 0 100 0 0 0\nfinal 1 100 0 0 0\n").checker(2, 100));
    }

    @Test
    void malformedLogs() {
        assertThrows(IOException.class, () -> logs("w 5\n"));
        assertThrows(IOException.class, () -> logs("start 1\nw x\n"));
        assertThrows(IOException.class, () -> logs("start 1\nstart 2\n"));
        assertThrows(IOException.class, () -> logs("start 1\nwhat 2\n"));
        // A half-written last line is left out.
        assertTrue(assertDoesNotThrowLogs("start 1\nw 2\nw 3").writers.get(0).length == 2);
    }

    static JmKill.SinkLogs assertDoesNotThrowLogs(String text) {
        try {
            return logs(text);
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    void millisRoundAwayFromZero() {
        assertEquals(2, JmKill.ms(1001));
        assertEquals(-2, JmKill.ms(-1001));
        assertEquals(0, JmKill.ms(0));
    }
}

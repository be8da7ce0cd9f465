package dev.runnel.bench.flink;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The harness's reading of the sinks' files and of Flink's stack traces. */
class StandaloneKillTest {
    // Times in microseconds: the kill at 10_000_000, the JobManager's failure record at 10_300_000.
    static final long KILLED = 10_000_000L;
    static final long FAILED = 10_300_000L;

    /** One case: the sink files' contents (file name to text) and the expected first output of path 1. */
    record Case(String name, Map<String, String> files, long want) {}

    static final List<Case> CASES = List.of(
            new Case("restarted sink: its first record of the path",
                    Map.of("sink-0-0.log", "start 1000\nfirst 1 2000\nfirst 0 2100\n",
                            "sink-0-1.log", "start 10400000\nfirst 0 10500000\nfirst 1 10600000\n"),
                    10_600_000L),
            new Case("earliest of several restarted sinks",
                    Map.of("sink-0-1.log", "start 10400000\nfirst 1 10700000\n",
                            "sink-1-1.log", "start 10400000\nfirst 1 10650000\n",
                            "sink-2-2.log", "start 10900000\nfirst 1 11000000\n"),
                    10_650_000L),
            new Case("a sink that started before the kill does not count its first record",
                    Map.of("sink-3-0.log", "start 1000\nfirst 1 10400000\n"),
                    -1),
            new Case("nor does a restarted sink's record from before the failure record",
                    Map.of("sink-3-1.log", "start 10100000\nfirst 1 10200000\n"),
                    -1),
            new Case("surviving sink: the end of a silence that spans the failure record",
                    Map.of("sink-1-0.log", "start 1000\nfirst 1 2000\ngap 1 9990000 10800000\n"),
                    10_800_000L),
            new Case("a silence over before the failure record, or of another path, does not count",
                    Map.of("sink-1-0.log", "start 1000\nfirst 1 2000\ngap 1 9000000 9100000\ngap 0 9990000 10500000\n"),
                    -1),
            new Case("the earlier of a restarted sink and a surviving one",
                    Map.of("sink-1-0.log", "start 1000\ngap 1 9990000 10800000\n",
                            "sink-2-1.log", "start 10400000\nfirst 1 10900000\n"),
                    10_800_000L),
            new Case("a half-written last line is skipped until it is whole",
                    Map.of("sink-0-1.log", "start 10400000\nfirst 1 10600000\nfirst 2 1070"),
                    10_600_000L));

    @Test
    void firstOutputAfter(@TempDir Path tmp) throws IOException {
        for (Case c : CASES) {
            Path dir = Files.createDirectories(tmp.resolve(c.name().replaceAll("[^a-z]+", "-")));
            for (Map.Entry<String, String> f : c.files().entrySet()) {
                Files.write(dir.resolve(f.getKey()), f.getValue().getBytes(StandardCharsets.US_ASCII));
            }
            assertEquals(c.want(), StandaloneKill.SinkLog.read(dir).firstOutputAfter(1, KILLED, FAILED), c.name());
        }
    }

    @Test
    void countsAreSummedOverJvmsLatestFirst(@TempDir Path dir) throws IOException {
        // JVM 7 hosts two sinks that report the same counters (loader a), then loads the job's
        // classes again (loader b, counting from 0); JVM 9 is another TaskManager.
        Files.write(dir.resolve("sink-0-0.log"), "start 1\ncounts 7:a 0 0 0 100\ncounts 7:a 2 1 0 300\n".getBytes(StandardCharsets.US_ASCII));
        Files.write(dir.resolve("sink-1-0.log"), "start 1\ncounts 7:a 1 0 0 200\n".getBytes(StandardCharsets.US_ASCII));
        Files.write(dir.resolve("sink-1-3.log"), "start 1\ncounts 7:b 0 0 0 20\n".getBytes(StandardCharsets.US_ASCII));
        Files.write(dir.resolve("sink-2-1.log"), "start 1\ncounts 9:c 0 0 5 50\n".getBytes(StandardCharsets.US_ASCII));
        assertEquals(List.of(2L, 1L, 5L, 370L), java.util.Arrays.stream(StandaloneKill.SinkLog.read(dir).totalCounts())
                .boxed().toList());
    }

    @Test
    void rootLine() {
        String[][] cases = {
                // stack trace, first line, root cause line
                {"a.B: top\n\tat x.y(Z.java:1)\nCaused by: c.D: middle\n\tat q\nCaused by: e.F: root\n\tat r\n",
                        "a.B: top", "e.F: root"},
                {"a.B: alone\n\tat x.y(Z.java:1)\n", "a.B: alone", "a.B: alone"},
                {"a.B: no frames", "a.B: no frames", "a.B: no frames"},
        };
        for (String[] c : cases) {
            assertEquals(c[1], StandaloneKill.firstLine(c[0]), c[0]);
            assertEquals(c[2], StandaloneKill.rootLine(c[0]), c[0]);
        }
    }

    @Test
    void splitKeepsItsEpoch() throws IOException {
        SeqSource.SplitSerializer ser = new SeqSource.SplitSerializer();
        SeqSource.Split[] cases = {
                new SeqSource.Split(1, 12345, Long.MAX_VALUE, 1_796_161_771_498_123L),
                new SeqSource.Split(0, 0, 10, 0), // not started: the reader takes its epoch when it starts
        };
        for (SeqSource.Split sp : cases) {
            SeqSource.Split back = ser.deserialize(ser.getVersion(), ser.serialize(sp));
            assertEquals(List.of(sp.subtask, sp.next, sp.end, sp.epochMicros),
                    List.of(back.subtask, back.next, back.end, back.epochMicros));
        }
    }

    @Test
    void disconnectsFromTheJobManagerLog() {
        List<String> log = List.of(
                "/usr/bin/java -cp ... StandaloneSessionClusterEntrypoint --configDir /tmp/x",
                "2026-12-01T22:13:59.221Z INFO  JobMaster - TaskManager with id tm-1 is no longer reachable.",
                "2026-12-01T22:13:59.232Z INFO  JobMaster - Disconnect TaskExecutor tm-1 because: TaskManager with id tm-1 is no longer reachable.",
                "2026-12-01T22:14:04.370Z INFO  StandaloneResourceManager - Closing TaskExecutor connection tm-1 because: The heartbeat of TaskManager with id tm-1 timed out.",
                "2026-12-01T22:14:09.000Z INFO  JobMaster - Disconnect TaskExecutor tm-2 because: Stopping JobMaster for job 'x' (5d5c).",
                "\tat org.apache.flink.Something(Something.java:1)");
        List<String[]> jm = StandaloneKill.Cluster.parseDisconnects(log, StandaloneKill.Cluster.JOBMASTER_DISCONNECT);
        assertEquals(2, jm.size());
        assertEquals(List.of("1796163239232", "tm-1", "TaskManager with id tm-1 is no longer reachable."), List.of(jm.get(0)));
        assertEquals("tm-2", jm.get(1)[1]);
        List<String[]> rm = StandaloneKill.Cluster.parseDisconnects(log, StandaloneKill.Cluster.RESOURCEMANAGER_DISCONNECT);
        assertEquals(List.of("1796163244370", "tm-1", "The heartbeat of TaskManager with id tm-1 timed out."), List.of(rm.get(0)));

        String[][] reasons = {
                {"TaskManager with id tm-1 is no longer reachable.", "true"},
                {"The heartbeat of TaskManager with id tm-1 timed out.", "true"},
                {"Stopping JobMaster for job 'x' (5d5c).", "false"},
                {"TaskExecutor pekko.tcp://flink@127.0.0.1:39391/user/rpc/taskmanager_0 has no more allocated slots for job 7e46.", "false"},
        };
        for (String[] r : reasons) {
            assertEquals(Boolean.parseBoolean(r[1]), StandaloneKill.isLoss(r[0]), r[0]);
        }
    }
}

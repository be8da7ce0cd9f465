package dev.runnel.bench.flink;

import org.apache.flink.api.java.tuple.Tuple4;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

/** The kafka job's arithmetic, record format and JSON, without a broker (bench/flink/kafka.sh runs it on one). */
class KafkaBenchTest {
    @Test
    void medianAndRange() {
        assertArrayEquals(new double[] {2, 1, 9}, KafkaBench.medianRange(new double[] {9, 1, 2}));
        assertArrayEquals(new double[] {2.5, 1, 9}, KafkaBench.medianRange(new double[] {9, 3, 1, 2}));
    }

    @Test
    void countCarriesTheLatestRecord() {
        Tuple4<Long, Long, Long, Long> acc = Tuple4.of(7L, 0L, 100L, 1L);
        Tuple4<Long, Long, Long, Long> out = new KafkaBench.Count().reduce(acc, Tuple4.of(7L, 14L, 200L, 1L));
        assertEquals(Tuple4.of(7L, 14L, 200L, 2L), out);
    }

    @Test
    void outputRecordLayout() {
        // runnel bench kafka's reader decodes this layout: produced, seq, count, all big endian.
        var r = new KafkaBench.Encode("t").serialize(Tuple4.of(3L, 5L, 11L, 2L), null, null);
        assertEquals("t", r.topic());
        assertEquals(3L, ByteBuffer.wrap(r.key()).getLong());
        ByteBuffer v = ByteBuffer.wrap(r.value());
        assertEquals(11L, v.getLong());
        assertEquals(5L, v.getLong());
        assertEquals(2L, v.getLong());
        assertEquals(0, v.remaining());
    }

    @Test
    void jsonNestsObjectsAndLists() {
        Json j = new Json().put("a", List.of(new Json().put("x", 1L), 2.5)).put("s", new Json().put("y", "z"));
        assertEquals("{\"a\":[{\"x\":1},2.500],\"s\":{\"y\":\"z\"}}", j.toString());
    }
}

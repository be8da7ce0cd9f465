package dev.runnel.bench.flink.nexmark;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.table.api.config.ExecutionConfigOptions;
import org.apache.flink.table.api.config.OptimizerConfigOptions;
import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The --tuning flag: what each value sets, and the refusal of any other value. */
class TuningTest {
    @Test
    void nexmarkSetsTheSuitesTableOptions() {
        Configuration c = new Configuration();
        NexmarkJob.Tuning.of("nexmark").apply(c);
        assertTrue(c.get(ExecutionConfigOptions.TABLE_EXEC_MINIBATCH_ENABLED));
        assertEquals(Duration.ofSeconds(2), c.get(ExecutionConfigOptions.TABLE_EXEC_MINIBATCH_ALLOW_LATENCY));
        assertEquals(50_000L, c.get(ExecutionConfigOptions.TABLE_EXEC_MINIBATCH_SIZE));
        assertTrue(c.get(OptimizerConfigOptions.TABLE_OPTIMIZER_DISTINCT_AGG_SPLIT_ENABLED));
    }

    @Test
    void noneLeavesFlinksDefaults() {
        Configuration c = new Configuration();
        NexmarkJob.Tuning.of("none").apply(c);
        assertTrue(c.toMap().isEmpty(), c.toMap().toString());
        assertFalse(c.get(ExecutionConfigOptions.TABLE_EXEC_MINIBATCH_ENABLED));
    }

    @Test
    void refusesOtherValues() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> NexmarkJob.Tuning.of("fast"));
        assertTrue(e.getMessage().contains("--tuning") && e.getMessage().contains("fast"), e.getMessage());
    }
}

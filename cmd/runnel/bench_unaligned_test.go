package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchUnalignedFlagsRefused: --unaligned-checkpoints and --aligned-checkpoint-timeout are refused
// where they would do nothing, before anything runs.
func TestBenchUnalignedFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nexmark", "--query", "q5", "--unaligned-checkpoints"}, "need checkpoints: set --checkpoint-interval"},
		{[]string{"nexmark", "--query", "q5", "--checkpoint-interval", "1s", "--aligned-checkpoint-timeout", "1s"}, "set --unaligned-checkpoints too"},
		{[]string{"nexmark", "--query", "q5", "--checkpoint-interval", "1s", "--unaligned-checkpoints", "--aligned-checkpoint-timeout", "-1s"}, "must not be negative"},
		{[]string{"recovery", "--aligned-checkpoint-timeout", "1s"}, "set --unaligned-checkpoints too"},
		{[]string{"recovery", "--unaligned-checkpoints", "--checkpoint-interval", "0s"}, "invalid --checkpoint-interval 0s"},
		{[]string{"checkpoints", "--aligned-checkpoint-timeout", "1s"}, "set --unaligned-checkpoints too"},
		{[]string{"tm-loss", "--aligned-checkpoint-timeout", "1s"}, "set --unaligned-checkpoints too"},
		{[]string{"jm-loss", "--aligned-checkpoint-timeout", "1s"}, "set --unaligned-checkpoints too"},
		{[]string{"kafka", "--unaligned-checkpoints", "--aligned-checkpoint-timeout", "-1s"}, "must not be negative"},
		{[]string{"checkpoints", "--failover", "task", "--aligned-checkpoint-timeout", "1s"}, "set --unaligned-checkpoints too"},
		{[]string{"checkpoints", "--backpressure", "--unaligned-checkpoints"}, "choose them with --modes"},
		{[]string{"checkpoints", "--backpressure", "--modes", "aligned", "--aligned-checkpoint-timeout", "1s"}, "--modes has none"},
		{[]string{"checkpoints", "--restore"}, "set --backpressure too"},
		{[]string{"checkpoints", "--backpressure", "--restore", "--modes", "unaligned"}, "drop --modes"},
		{[]string{"checkpoints", "--backpressure", "--restore", "--fail-at-checkpoint", "0"}, "invalid --fail-at-checkpoint 0"},
	} {
		_, stderr, code := runCLI(t, append([]string{"bench"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestBenchUnalignedRuns runs each bench command that takes checkpoints briefly with unaligned ones.
func TestBenchUnalignedRuns(t *testing.T) {
	decode := func(args ...string) map[string]any {
		t.Helper()
		out, stderr, code := runCLI(t, append([]string{"bench"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d:\n%s", args, code, stderr)
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %v: %q", args, err, out)
		}
		return r
	}
	r := decode("nexmark", "--query", "q5", "--events", "50000", "--runs", "1", "--checkpoint-interval", "20ms",
		"--unaligned-checkpoints", "--aligned-checkpoint-timeout", "5ms", "--json")
	if r["unaligned_checkpoints"] != true || r["events_per_s"].(float64) <= 0 {
		t.Errorf("nexmark: %v", r)
	}
	r = decode("checkpoints", "--records", "2000000", "--runs", "1", "--interval", "50ms", "--unaligned-checkpoints", "--json")
	if r["unaligned_checkpoints"] != true || r["checkpoints_completed"].(float64) < 1 {
		t.Errorf("checkpoints: %v", r)
	}
	r = decode("checkpoints", "--records", "1000000", "--runs", "1", "--interval", "50ms", "--failover", "task", "--unaligned-checkpoints", "--json")
	if r["unaligned_checkpoints"] != true || r["strategy_rps"].(float64) <= 0 {
		t.Errorf("checkpoints --failover task: %v", r)
	}
	r = decode("recovery", "--failover", "region", "--duration", "1500ms", "--fail-after", "700ms", "--rate", "20000",
		"--unaligned-checkpoints", "--json")
	if r["unaligned_checkpoints"] != true || r["job_status"] != "CANCELED" || r["failovers"].(float64) != 1 || r["checkpoint_restored"] == nil {
		t.Errorf("recovery: %v", r)
	}
}

// TestBenchCheckpointsRestore runs bench checkpoints --backpressure --restore at a tiny size: the job
// restored an unaligned checkpoint with channel state, and every figure of the restore is there.
func TestBenchCheckpointsRestore(t *testing.T) {
	out, stderr, code := runCLI(t, "bench", "checkpoints", "--backpressure", "--restore", "--json", "--runs", "1",
		"--interval", "200ms", "--fail-at-checkpoint", "3", "--buffers-per-channel", "4", "--restore-dir", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r struct {
		ReadBaseline string `json:"read_baseline"`
		Queues       []struct {
			BuffersPerChannel         int     `json:"buffers_per_channel"`
			RestoredChannelStateBytes int64   `json:"restored_channel_state_bytes"`
			RestoredStateBytes        int64   `json:"restored_state_bytes"`
			RecoveryMillis            float64 `json:"recovery_ms"`
			OutageMillis              float64 `json:"outage_ms"`
			SinkRecoveredMillis       float64 `json:"sink_throughput_recovered_ms"`
			ReadMillis                float64 `json:"page_cache_read_ms"`
			RecoveryReadRatio         float64 `json:"recovery_to_read_ratio"`
			Runs                      []struct {
				CheckpointRestored int64 `json:"checkpoint_restored"`
			} `json:"runs"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if !strings.Contains(r.ReadBaseline, "page-cache read") || len(r.Queues) != 1 || len(r.Queues[0].Runs) != 1 {
		t.Fatalf("result: %s", out)
	}
	q := r.Queues[0]
	if q.BuffersPerChannel != 4 || q.Runs[0].CheckpointRestored < 3 {
		t.Errorf("buffers %d, checkpoint restored %d: %s", q.BuffersPerChannel, q.Runs[0].CheckpointRestored, out)
	}
	// The queues are full behind the slow sink: the restored checkpoint holds channel state.
	if q.RestoredChannelStateBytes <= 0 || q.RestoredStateBytes < q.RestoredChannelStateBytes {
		t.Errorf("channel state %d bytes of %d: %s", q.RestoredChannelStateBytes, q.RestoredStateBytes, out)
	}
	// The outage ends when the restarted sinks write again, which may come before the last restarted
	// subtask runs: it is not bounded by the recovery time.
	if q.RecoveryMillis <= 0 || q.OutageMillis <= 0 || q.SinkRecoveredMillis <= 0 || q.ReadMillis <= 0 || q.RecoveryReadRatio <= 0 {
		t.Errorf("figures: %s", out)
	}
}

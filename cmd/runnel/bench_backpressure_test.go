package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchCheckpointsBackpressure runs bench checkpoints --backpressure at a tiny size: every measured
// checkpoint of each mode completed, and the figures are those of a backpressured job that checkpoints.
func TestBenchCheckpointsBackpressure(t *testing.T) {
	modes := []string{"aligned", "unaligned"}
	out, stderr, code := runCLI(t, "bench", "checkpoints", "--backpressure", "--json", "--runs", "1", "--interval", "200ms",
		"--warmup", "1", "--checkpoints", "2", "--duration", "10s", "--modes", strings.Join(modes, ","))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	for _, k := range []string{"aligned_checkpoint_ms", "unaligned_checkpoint_ms", "ratio", "aligned_state_bytes", "unaligned_state_bytes",
		"aligned_sink_rps", "unaligned_sink_rps", "unaligned_channel_state_bytes", "aligned_checkpoint_ms_range", "buffers_per_channel", "runs"} {
		if _, ok := r[k]; !ok {
			t.Fatalf("missing %s in %s", k, out)
		}
	}
	// An unaligned checkpoint stores the buffers its barrier overtook: it is larger than an aligned one.
	if a, u := r["aligned_state_bytes"].(float64), r["unaligned_state_bytes"].(float64); u <= a {
		t.Errorf("unaligned checkpoints of %v bytes, aligned of %v: want the unaligned ones to hold channel state: %s", u, a, out)
	}
	if c, u := r["unaligned_channel_state_bytes"].(float64), r["unaligned_state_bytes"].(float64); c <= 0 || c > u {
		t.Errorf("unaligned checkpoints of %v bytes, %v of them channel state: %s", u, c, out)
	}
	if v := r["ratio"].(float64); v <= 0 {
		t.Errorf("ratio = %v, want it positive: %s", v, out)
	}
	for _, m := range modes {
		if n := r[m+"_checkpoints"].(float64); n != 2 {
			t.Errorf("%s: %v checkpoints measured, want 2: %s", m, n, out)
		}
		for _, k := range []string{m + "_checkpoint_ms", m + "_state_bytes", m + "_sink_rps"} {
			if v := r[k].(float64); v <= 0 {
				t.Errorf("%s = %v, want it positive: %s", k, v, out)
			}
		}
		// The sinks take 20,000 records/s each, two of them.
		if v := r[m+"_sink_rps"].(float64); v > 2*20_000*1.1 {
			t.Errorf("%s_sink_rps = %v, above the sinks' pace", m, v)
		}
	}
}

func TestBenchCheckpointsBackpressureBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--modes", "aligned,sideways"}, `invalid --modes "sideways"`},
		{[]string{"--buffers-per-channel", "4,0"}, "invalid --buffers-per-channel 0"},
		{[]string{"--sink-rate", "0"}, "invalid --sink-rate 0"},
		{[]string{"--failover", "task"}, "none of the others can be"},
	} {
		_, stderr, code := runCLI(t, append([]string{"bench", "checkpoints", "--backpressure"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

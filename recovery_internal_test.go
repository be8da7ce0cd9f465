package runnel

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/scheduler"
)

// TestDefaultRestartIsImmediateFirst holds the default restart strategy of a checkpointed job to its
// promise: the first failure restarts at once, the ones that follow it back off, and a failure after a
// quiet minute is again restarted at once.
func TestDefaultRestartIsImmediateFirst(t *testing.T) {
	cfg := Config{Checkpoint: CheckpointConfig{Interval: time.Second}}
	rc, err := cfg.recovery("job")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := scheduler.NewRestartStrategy(rc.Restart, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		nowMillis            int64
		minMillis, maxMillis int64
	}{
		{0, 0, 0},
		{10, 90, 110},  // 100 ms ± 10%
		{20, 180, 220}, // doubled
		{80_000, 0, 0}, // a minute later: a new burst
		{80_001, 90, 110},
	} {
		rs.NotifyFailure(st.nowMillis, nil)
		if b := rs.BackoffMillis(); !rs.CanRestart() || b < st.minMillis || b > st.maxMillis {
			t.Errorf("failure at %d ms: restart %v after %d ms, want a restart after %d to %d ms", st.nowMillis, rs.CanRestart(), b, st.minMillis, st.maxMillis)
		}
	}
	// Without checkpoints nothing restarts by default.
	rc, err = (&Config{}).recovery("job")
	if err != nil || rc.Restart.Kind != scheduler.NoRestart {
		t.Fatalf("without checkpoints: %+v, %v", rc.Restart, err)
	}
}

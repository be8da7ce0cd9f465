package jobmaster

import (
	"testing"

	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// TestFinalAccumulatorsStand: a TaskManager's periodic values that arrive after its final ones (they are
// sent from another goroutine) do not replace them; values before the final ones do not count as final.
func TestFinalAccumulatorsStand(t *testing.T) {
	d := &Driver{accumulators: map[jobcore.TaskManagerID]map[string][]byte{}, finals: map[jobcore.TaskManagerID]bool{},
		accWake: make(chan struct{}, 1)}
	const tm = jobcore.TaskManagerID(3)
	steps := []struct {
		a          protocol.Accumulators
		want       string
		wantFinals bool
	}{
		{protocol.Accumulators{Values: map[string][]byte{"sink": []byte("early")}}, "early", false},
		{protocol.Accumulators{Values: map[string][]byte{"sink": []byte("last")}, Final: true}, "last", true},
		{protocol.Accumulators{Values: map[string][]byte{"sink": []byte("stale")}}, "last", true},
	}
	for i, s := range steps {
		d.accumulated(tm, s.a)
		if got := string(d.Accumulators()[tm]["sink"]); got != s.want || d.finals[tm] != s.wantFinals {
			t.Fatalf("after message %d: %q final %v, want %q final %v", i, got, d.finals[tm], s.want, s.wantFinals)
		}
	}
}

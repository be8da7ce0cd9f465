package jobmaster

import (
	"testing"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// TestRestoreSpecInputsRescaled pins when a subtask whose own parallelism did not change starts its input
// channels fresh: when one of its producers ran with another parallelism in the checkpoint (or was not in
// it), since its channels are then not those whose positions the checkpoint holds.
func TestRestoreSpecInputsRescaled(t *testing.T) {
	for _, tc := range []struct {
		name               string
		upThen, upNow      int
		upInCheckpoint     bool
		wantInputsRescaled bool
	}{
		{"producer unchanged", 2, 2, true, false},
		{"producer scaled out", 2, 3, true, true},
		{"producer scaled in", 3, 2, true, true},
		{"producer new", 0, 2, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &graph.JobVertex{ID: 1, Name: "sum", Parallelism: tc.upNow, MaxParallelism: 128}
			sink := &graph.JobVertex{ID: 2, Name: "sink", Parallelism: 1, MaxParallelism: 128}
			sink.Inputs = []*graph.JobEdge{{Source: up, Target: sink, Pattern: graph.Rebalance}}
			cp := &checkpoint.CompletedCheckpoint{ID: 4, Vertices: []checkpoint.Vertex{{ID: 2, Name: "sink", Parallelism: 1}}}
			if tc.upInCheckpoint {
				cp.Vertices = append(cp.Vertices, checkpoint.Vertex{ID: 1, Name: "sum", Parallelism: int32(tc.upThen)})
			}
			s := ident.Subtask{Vertex: 2}
			cp.States = []checkpoint.StateHandle{{Attempt: ident.Attempt{Subtask: s}}}
			spec := restoreSpecOf(sink, s, cp)
			if spec == nil || spec.RescaledFrom != 0 || spec.InputsRescaled != tc.wantInputsRescaled {
				t.Fatalf("spec %+v, want InputsRescaled %v", spec, tc.wantInputsRescaled)
			}
		})
	}
}

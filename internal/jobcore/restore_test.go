package jobcore

import (
	"fmt"
	"testing"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// TestRestoreSpecRescales pins which old subtasks' state a subtask of a rescaled vertex reads: every one,
// in subtask order, so that operator list state can be redistributed over them (keyed state is filtered to
// the subtask's key groups as it is read), and every key group it owns is covered.
func TestRestoreSpecRescales(t *testing.T) {
	const maxP = 128
	for _, tc := range []struct{ from, to int }{{2, 3}, {3, 2}, {4, 1}, {1, 4}, {5, 7}, {7, 5}, {2, 2}} {
		t.Run(fmt.Sprintf("%d to %d", tc.from, tc.to), func(t *testing.T) {
			cp := &checkpoint.CompletedCheckpoint{ID: 9, Vertices: []checkpoint.Vertex{{ID: 3, Name: "sum", Parallelism: int32(tc.from)}}}
			for i := range tc.from {
				cp.States = append(cp.States, checkpoint.StateHandle{Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: 3, Index: int32(i)}}})
			}
			v := &graph.JobVertex{ID: 3, Name: "sum", Parallelism: tc.to, MaxParallelism: maxP}
			for i := range tc.to {
				spec := RestoreSpecOf(v, ident.Subtask{Vertex: 3, Index: int32(i)}, cp)
				if spec == nil || spec.CheckpointID != 9 {
					t.Fatalf("subtask %d: spec %+v", i, spec)
				}
				if tc.from == tc.to {
					if spec.RescaledFrom != 0 || spec.Handle.Attempt.Index != int32(i) {
						t.Fatalf("subtask %d of an unchanged vertex: %+v", i, spec)
					}
					continue
				}
				start, end := graph.KeyGroupRange(i, maxP, tc.to)
				covered := map[int]bool{}
				if len(spec.Parts) != tc.from {
					t.Errorf("subtask %d reads %d old subtasks, want all %d", i, len(spec.Parts), tc.from)
				}
				for j, h := range spec.Parts {
					os, oe := graph.KeyGroupRange(int(h.Attempt.Index), maxP, tc.from)
					if int(h.Attempt.Index) != j {
						t.Errorf("subtask %d: part %d is old subtask %d, want them in subtask order", i, j, h.Attempt.Index)
					}
					for kg := os; kg <= oe; kg++ {
						covered[kg] = true
					}
				}
				for kg := start; kg <= end; kg++ {
					if !covered[kg] {
						t.Errorf("subtask %d: key group %d comes from no old subtask (parts %+v)", i, kg, spec.Parts)
					}
				}
				if spec.RescaledFrom != tc.from {
					t.Errorf("subtask %d: RescaledFrom %d", i, spec.RescaledFrom)
				}
			}
		})
	}
}

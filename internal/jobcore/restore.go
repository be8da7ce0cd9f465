package jobcore

import (
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/task"
)

// RestoreSpecOf returns the state subtask s of vertex v starts from in checkpoint cp (nil: none). When the
// vertex ran with another parallelism in cp, the subtask takes the state of every old subtask whose key
// groups overlap its own (rescaling): keyed state is filtered to its key groups as it is read, and the task
// refuses state that is not keyed, which cannot be split.
func RestoreSpecOf(v *graph.JobVertex, s ident.Subtask, cp *checkpoint.CompletedCheckpoint) *task.RestoreSpec {
	old, ok := cp.VertexByID(s.Vertex)
	if !ok || v == nil || int(old.Parallelism) == v.Parallelism {
		h, ok := cp.State(s)
		if !ok {
			return nil
		}
		return &task.RestoreSpec{CheckpointID: cp.ID, Handle: h}
	}
	// Every old subtask's state, in subtask order: keyed state is filtered to the subtask's key groups as
	// it is read, and operator list state is redistributed over all of them (even split or union).
	spec := &task.RestoreSpec{CheckpointID: cp.ID, RescaledFrom: int(old.Parallelism)}
	for i := range int(old.Parallelism) {
		if h, ok := cp.State(ident.Subtask{Vertex: s.Vertex, Index: int32(i)}); ok {
			spec.Parts = append(spec.Parts, h)
		}
	}
	return spec
}

package jobcore

import (
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// RestoreSpecOf returns the state subtask s of vertex v starts from in checkpoint cp (nil: none).
//
// A vertex that is in cp as it is in the job (same id, same operator uids) takes its own subtask's state,
// or, when the vertex ran with another parallelism in cp, the state of every old subtask (rescaling): keyed
// state is filtered to the subtask's key groups as it is read, and the task refuses state that is not
// keyed, which cannot be split. Any other vertex is re-mapped: each of its operators takes its state from
// the old vertex that held the operator's uid, whatever that vertex's chain (see remappedSpec).
func RestoreSpecOf(v *graph.JobVertex, s ident.Subtask, cp *checkpoint.CompletedCheckpoint) *deploy.RestoreSpec {
	old, ok := cp.VertexByID(s.Vertex)
	if v == nil || !hasOperators(cp) || (ok && slices.Equal(old.Operators, v.UIDs())) {
		return sameVertexSpec(v, s, cp, old, ok)
	}
	return remappedSpec(v, s, cp)
}

func sameVertexSpec(v *graph.JobVertex, s ident.Subtask, cp *checkpoint.CompletedCheckpoint, old checkpoint.Vertex, ok bool) *deploy.RestoreSpec {
	if !ok || v == nil || int(old.Parallelism) == v.Parallelism {
		h, ok := cp.State(s)
		if !ok {
			return nil
		}
		return &deploy.RestoreSpec{CheckpointID: cp.ID, Handle: h}
	}
	// Every old subtask's state, in subtask order: keyed state is filtered to the subtask's key groups as
	// it is read, and operator list state is redistributed over all of them (even split or union).
	spec := &deploy.RestoreSpec{CheckpointID: cp.ID, RescaledFrom: int(old.Parallelism)}
	for i := range int(old.Parallelism) {
		if h, ok := cp.State(ident.Subtask{Vertex: s.Vertex, Index: int32(i)}); ok {
			spec.Parts = append(spec.Parts, h)
		}
	}
	return spec
}

// hasOperators reports whether cp records its vertices' operator uids (metadata format 2): only then can
// state be mapped to operators rather than to vertices.
func hasOperators(cp *checkpoint.CompletedCheckpoint) bool {
	for _, v := range cp.Vertices {
		if len(v.Operators) > 0 {
			return true
		}
	}
	return false
}

// remappedSpec gathers, for subtask s of a vertex that is not in cp as it is, the state of each of its
// operators: for the operators of one old vertex at the same parallelism, the old subtask of the same index
// (its key groups are the same); at another parallelism, every old subtask, whose keyed state the task
// filters to its key groups. Old subtasks that hold none of the operators' state are not read, unless they
// had finished (the new subtask has then finished too, or, if only part of what it takes had, refuses to
// start). A vertex whose operators are all new, or kept no state, starts empty: nil.
func remappedSpec(v *graph.JobVertex, s ident.Subtask, cp *checkpoint.CompletedCheckpoint) *deploy.RestoreSpec {
	spec := &deploy.RestoreSpec{CheckpointID: cp.ID}
	uids := v.UIDs()
	for _, old := range cp.Vertices {
		var group []string
		for _, u := range old.Operators {
			if slices.Contains(uids, u) {
				group = append(group, u)
			}
		}
		if len(group) == 0 {
			continue
		}
		rescaled := int(old.Parallelism) != v.Parallelism
		for i := range int(old.Parallelism) {
			if !rescaled && int32(i) != s.Index {
				continue
			}
			h, ok := cp.State(ident.Subtask{Vertex: old.ID, Index: int32(i)})
			if !ok {
				continue
			}
			read := deploy.StateRead{Handle: h}
			if rescaled {
				read.RescaledFrom = int(old.Parallelism)
			}
			for _, u := range group {
				if slices.Contains(h.Operators, u) {
					read.Operators = append(read.Operators, u)
				}
			}
			if len(read.Operators) > 0 || h.Finished {
				spec.Reads = append(spec.Reads, read)
			}
		}
	}
	if len(spec.Reads) == 0 {
		return nil
	}
	return spec
}

// RestoreCheck is what CheckRestore needs to know of the job.
type RestoreCheck struct {
	// Vertices are the job's vertices.
	Vertices []*graph.JobVertex
	// Fixed says which vertices must keep their old parallelism (a source whose position cannot be split).
	Fixed func(v *graph.JobVertex) bool
	// AllowNonRestoredState lets the job start when the checkpoint holds state of operators it lacks; that
	// state is then dropped (and returned, to be logged).
	AllowNonRestoredState bool
}

// CheckRestore decides whether the job can start from cp, before anything is deployed. With a checkpoint
// that records operator uids (format 2), state is mapped to operators: every operator with state in cp
// must be in the job (unless AllowNonRestoredState: then the uids of the state left behind are returned),
// operators new to the job start empty, and a fixed vertex whose head was in a vertex of another
// parallelism is refused. An older checkpoint is mapped to vertices, as checkpoint.CompatibleVertices says.
// The error, an *checkpoint.IncompatibleError where it is about the job's shape, names the operators.
func CheckRestore(cp *checkpoint.CompletedCheckpoint, job RestoreCheck) (dropped []string, err error) {
	if !hasOperators(cp) {
		var vs []checkpoint.Vertex
		fixed := map[ident.VertexID]bool{}
		for _, v := range job.Vertices {
			vs = append(vs, checkpoint.Vertex{ID: v.ID, Name: v.Name, Parallelism: int32(v.Parallelism)})
			fixed[v.ID] = job.Fixed != nil && job.Fixed(v)
		}
		return nil, checkpoint.CompatibleVertices(cp, vs, func(v checkpoint.Vertex) bool { return fixed[v.ID] })
	}
	inJob := map[string]*graph.JobVertex{}
	for _, v := range job.Vertices {
		for _, u := range v.UIDs() {
			inJob[u] = v
		}
	}
	oldOf := map[string]checkpoint.Vertex{}
	for _, old := range cp.Vertices {
		for _, u := range old.Operators {
			oldOf[u] = old
		}
	}
	stateful := map[string]bool{}
	for _, h := range cp.States {
		for _, u := range h.Operators {
			stateful[u] = true
		}
	}
	e := &checkpoint.IncompatibleError{CheckpointID: cp.ID, ByUID: true}
	for u := range stateful {
		if inJob[u] == nil {
			dropped = append(dropped, u)
		}
	}
	slices.Sort(dropped)
	if len(dropped) > 0 && !job.AllowNonRestoredState {
		e.Missing = dropped
	}
	for _, v := range job.Vertices {
		if job.Fixed == nil || !job.Fixed(v) {
			continue
		}
		head := v.Head().UID()
		if old, ok := oldOf[head]; ok && stateful[head] && int(old.Parallelism) != v.Parallelism {
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%q parallelism %d in checkpoint, %d in job (a source: its positions cannot be split, keep its parallelism)",
				v.Head().Name, old.Parallelism, v.Parallelism))
		}
	}
	if len(e.Missing) > 0 || len(e.Mismatched) > 0 {
		return nil, e
	}
	if !job.AllowNonRestoredState {
		dropped = nil
	}
	return dropped, nil
}

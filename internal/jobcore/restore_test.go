package jobcore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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

// remapJob builds job vertices from chains of uids; every vertex gets the given parallelism unless par
// names another.
func remapJob(p int, par map[string]int, chains ...[]string) []*graph.JobVertex {
	var vs []*graph.JobVertex
	for i, c := range chains {
		v := &graph.JobVertex{ID: ident.VertexID(i), Name: c[0], Parallelism: p, MaxParallelism: 128}
		if q, ok := par[c[0]]; ok {
			v.Parallelism = q
		}
		for j, u := range c {
			v.Nodes = append(v.Nodes, &graph.StreamNode{ID: 10*i + j, Name: "name of " + u, Uid: u})
		}
		vs = append(vs, v)
	}
	return vs
}

// remapCheckpoint is a checkpoint of the job "src -> double" (p2), "sum -> tag" (p2), "out" (p1), where
// src and sum keep state and "out" had finished.
func remapCheckpoint() *checkpoint.CompletedCheckpoint {
	h := func(v, i int32, finished bool, ops ...string) checkpoint.StateHandle {
		s := checkpoint.StateHandle{Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: ident.VertexID(v), Index: i}}, Finished: finished, Operators: ops}
		if !finished {
			s.Blobs = []checkpoint.BlobRef{{Key: fmt.Sprintf("v%d-%d", v, i), Size: 40}}
		}
		return s
	}
	return &checkpoint.CompletedCheckpoint{ID: 4, Vertices: []checkpoint.Vertex{
		{ID: 0, Name: "src -> double", Parallelism: 2, Operators: []string{"src", "double"}},
		{ID: 1, Name: "sum -> tag", Parallelism: 2, Operators: []string{"sum", "tag"}},
		{ID: 2, Name: "out", Parallelism: 1, Operators: []string{"out"}},
	}, States: []checkpoint.StateHandle{h(0, 0, false, "src"), h(0, 1, false, "src"), h(1, 0, false, "sum"), h(1, 1, false, "sum"), h(2, 0, true)}}
}

// TestRestoreSpecRemaps pins which old subtasks' entries each subtask of a re-chained, grown or rescaled
// job takes: state follows the operator uid, whole at the same parallelism (the same index), from every old
// subtask at another; finished old subtasks come along so that the new one finishes too; a vertex of new
// or stateless operators starts empty.
func TestRestoreSpecRemaps(t *testing.T) {
	type read struct {
		from     string // old subtask, "v1[0]"
		ops      string
		rescaled int
		finished bool
	}
	for _, tc := range []struct {
		name   string
		job    []*graph.JobVertex
		vertex int // the vertex whose subtasks are looked at
		want   [][]read
	}{
		{name: "unchanged vertex", job: remapJob(2, map[string]int{"out": 1}, []string{"src", "double"}, []string{"sum", "tag"}, []string{"out"}), vertex: 1,
			want: nil}, // the same-vertex path: Handle, no Reads
		{name: "source split from its map", job: remapJob(2, map[string]int{"out": 1}, []string{"src"}, []string{"double"}, []string{"sum", "tag"}, []string{"out"}), vertex: 0,
			want: [][]read{{{from: "v0[0]", ops: "src"}}, {{from: "v0[1]", ops: "src"}}}},
		{name: "stateless vertex", job: remapJob(2, map[string]int{"out": 1}, []string{"src"}, []string{"double"}, []string{"sum", "tag"}, []string{"out"}), vertex: 1,
			want: [][]read{{}, {}}},
		{name: "everything in one chain", job: remapJob(2, map[string]int{"out": 1}, []string{"src", "double", "sum", "tag", "out"}), vertex: 0,
			// The finished sink comes along: the task refuses a mix of finished and running old subtasks.
			want: [][]read{{{from: "v0[0]", ops: "src"}, {from: "v1[0]", ops: "sum"}, {from: "v2[0]", rescaled: 1, finished: true}},
				{{from: "v0[1]", ops: "src"}, {from: "v1[1]", ops: "sum"}, {from: "v2[0]", rescaled: 1, finished: true}}}},
		{name: "sum rescaled and chained to a new operator", job: remapJob(2, map[string]int{"sum": 3, "out": 1}, []string{"src", "double"}, []string{"sum", "fresh"}, []string{"tag"}, []string{"out"}), vertex: 1,
			want: [][]read{
				{{from: "v1[0]", ops: "sum", rescaled: 2}, {from: "v1[1]", ops: "sum", rescaled: 2}},
				{{from: "v1[0]", ops: "sum", rescaled: 2}, {from: "v1[1]", ops: "sum", rescaled: 2}},
				{{from: "v1[0]", ops: "sum", rescaled: 2}, {from: "v1[1]", ops: "sum", rescaled: 2}}}},
		{name: "finished sink chained otherwise", job: remapJob(2, map[string]int{"tag": 1}, []string{"src", "double"}, []string{"sum"}, []string{"tag", "out"}), vertex: 2,
			want: [][]read{{{from: "v2[0]", finished: true}}}},
		{name: "new operators only", job: remapJob(2, map[string]int{"out": 1}, []string{"src", "double"}, []string{"sum", "tag"}, []string{"audit"}, []string{"out"}), vertex: 2,
			want: [][]read{{}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := remapCheckpoint()
			v := tc.job[tc.vertex]
			for i := range v.Parallelism {
				spec := RestoreSpecOf(v, ident.Subtask{Vertex: v.ID, Index: int32(i)}, cp)
				if tc.want == nil {
					if spec == nil || len(spec.Reads) != 0 || spec.Handle.Attempt.Subtask != (ident.Subtask{Vertex: v.ID, Index: int32(i)}) {
						t.Fatalf("subtask %d of an unchanged vertex: %+v", i, spec)
					}
					continue
				}
				var got []read
				if spec != nil {
					if spec.CheckpointID != 4 {
						t.Fatalf("checkpoint id %d", spec.CheckpointID)
					}
					for _, r := range spec.Reads {
						got = append(got, read{from: r.Handle.Attempt.Subtask.String(), ops: fmt.Sprint(r.Operators), rescaled: r.RescaledFrom, finished: r.Handle.Finished})
					}
				}
				want := tc.want[i]
				for j := range want {
					want[j].ops = "[" + want[j].ops + "]"
				}
				if fmt.Sprint(got) != fmt.Sprint(want) && !(len(got) == 0 && len(want) == 0) {
					t.Errorf("subtask %d reads %v, want %v", i, got, want)
				}
				if (len(want) == 0) != (spec == nil) {
					t.Errorf("subtask %d: spec %+v, want nil exactly when it reads nothing", i, spec)
				}
			}
		})
	}
}

// TestCheckRestore pins what a restore refuses before anything is deployed: state of an operator the job
// lacks (unless allowed: then it is dropped and named), a source moved to another parallelism; and what it
// lets through: new operators, stateless operators gone, other chaining. A checkpoint without uids is
// checked by vertex, as before.
func TestCheckRestore(t *testing.T) {
	source := func(v *graph.JobVertex) bool { return v.Nodes[0].UID() == "src" }
	for _, tc := range []struct {
		name        string
		job         []*graph.JobVertex
		allow       bool
		legacy      bool
		wantDropped []string
		wantErr     string
	}{
		{name: "same job", job: remapJob(2, map[string]int{"out": 1}, []string{"src", "double"}, []string{"sum", "tag"}, []string{"out"})},
		{name: "other chaining", job: remapJob(2, map[string]int{"out": 1}, []string{"src"}, []string{"double", "sum"}, []string{"tag", "out"})},
		{name: "stateless operators gone, new ones added", job: remapJob(2, nil, []string{"src", "audit"}, []string{"sum"}, []string{"out2"})},
		{name: "stateful operator gone", job: remapJob(2, nil, []string{"src", "double"}, []string{"tag"}, []string{"out"}), wantErr: `operator uids missing from the job: "sum"`},
		{name: "stateful operator gone, allowed", job: remapJob(2, nil, []string{"src", "double"}, []string{"tag"}, []string{"out"}), allow: true, wantDropped: []string{"sum"}},
		{name: "source at another parallelism", job: remapJob(2, map[string]int{"src": 3}, []string{"src"}, []string{"double", "sum", "tag"}, []string{"out"}), wantErr: "parallelism 2 in checkpoint, 3 in job"},
		{name: "legacy: same vertices", legacy: true, job: remapJob(2, map[string]int{"out": 1}, []string{"src", "double"}, []string{"sum", "tag"}, []string{"out"})},
		{name: "legacy: other chaining", legacy: true, job: remapJob(2, map[string]int{"out": 1}, []string{"src"}, []string{"double", "sum", "tag"}, []string{"out"}), wantErr: "missing from the job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := remapCheckpoint()
			if tc.legacy {
				for i := range cp.Vertices {
					cp.Vertices[i].Operators = nil
				}
				for i := range cp.States {
					cp.States[i].Operators = nil
				}
				for i, v := range tc.job { // legacy vertices are matched by name
					v.Name = cp.Vertices[min(i, len(cp.Vertices)-1)].Name
				}
				if tc.wantErr != "" {
					tc.job[0].Name = "src"
				}
			}
			dropped, err := CheckRestore(cp, RestoreCheck{Vertices: tc.job, Fixed: source, AllowNonRestoredState: tc.allow})
			if tc.wantErr != "" {
				if !errors.Is(err, checkpoint.ErrIncompatible) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(dropped, tc.wantDropped) {
				t.Fatalf("dropped %v, err %v; want %v", dropped, err, tc.wantDropped)
			}
		})
	}
}

package jobcore

import (
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// adoptGraph is source p=2 -> (hash) sink p=2.
func adoptGraph(t *testing.T) *graph.JobGraph {
	t.Helper()
	sg := &graph.StreamGraph{JobName: "adopt", Nodes: []*graph.StreamNode{
		{ID: 0, Name: "source", Kind: graph.SourceNode, Parallelism: 2, MaxParallelism: 128},
		{ID: 1, Name: "sink", Kind: graph.SinkNode, Parallelism: 2, MaxParallelism: 128},
	}, Edges: []*graph.StreamEdge{{Source: 0, Target: 1, Pattern: graph.Hash, PatternSet: true}}}
	jg, err := graph.BuildJobGraph(sg, graph.JobGraphOptions{PipelinedType: graph.PipelinedBounded})
	if err != nil {
		t.Fatal(err)
	}
	return jg
}

// TestReconcile checks which reports of kept tasks make an adoption, and the reason of each that does not.
func TestReconcile(t *testing.T) {
	jg := adoptGraph(t)
	src, snk := jg.Vertices[0].ID, jg.Vertices[1].ID
	task := func(v ident.VertexID, i int32, n int32, st deploy.State) KeptTask {
		return KeptTask{Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: v, Index: i}, Number: n}, State: st}
	}
	run := deploy.Running
	tm1 := func(ts ...KeptTask) KeptReport {
		return KeptReport{TaskManager: 1, Name: "tm-1", Secret: []byte("s"), Checkpoint: 4, Tasks: ts}
	}
	tm2 := func(ts ...KeptTask) KeptReport {
		return KeptReport{TaskManager: 2, Name: "tm-2", Secret: []byte("s"), Checkpoint: 6, Tasks: ts}
	}
	for _, tc := range []struct {
		name    string
		reports []KeptReport
		sharing bool
		want    string // "" adopts
	}{
		{name: "whole job on two TaskManagers", sharing: true,
			reports: []KeptReport{tm1(task(src, 0, 0, run), task(snk, 0, 3, deploy.Finished)), tm2(task(src, 1, 2, deploy.Initializing), task(snk, 1, 0, run))}},
		{name: "nothing reported", want: "no TaskManager reported the job's tasks"},
		{name: "a subtask missing", sharing: true, reports: []KeptReport{tm1(task(src, 0, 0, run), task(snk, 0, 0, run)), tm2(task(src, 1, 0, run))},
			want: "no TaskManager reported subtasks [sink[1]]"},
		{name: "a subtask twice", sharing: true,
			reports: []KeptReport{tm1(task(src, 0, 0, run), task(snk, 0, 0, run), task(src, 1, 0, run)), tm2(task(src, 1, 1, run), task(snk, 1, 0, run))},
			want:    "both tm-1 and tm-2 report subtask source[1]"},
		{name: "a failed attempt", sharing: true,
			reports: []KeptReport{tm1(task(src, 0, 0, run), KeptTask{Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: snk}}, State: deploy.Failed, Failure: "boom"}),
				tm2(task(src, 1, 0, run), task(snk, 1, 0, run))},
			want: "subtask sink[0] was FAILED when the leader was lost: boom"},
		{name: "a replaying attempt", sharing: true,
			reports: []KeptReport{tm1(task(src, 0, 0, run), KeptTask{Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: snk}, Number: 1}, State: run, Replaying: true}),
				tm2(task(src, 1, 0, run), task(snk, 1, 0, run))},
			want: "subtask sink[0] was replaying its log"},
		{name: "a slot split over two TaskManagers", sharing: true,
			reports: []KeptReport{tm1(task(src, 0, 0, run), task(snk, 1, 0, run)), tm2(task(src, 1, 0, run), task(snk, 0, 0, run))},
			want:    "the subtasks of slot 0 run on two TaskManagers, tm-1 and tm-2"},
		{name: "without slot sharing a slot each", sharing: false,
			reports: []KeptReport{tm1(task(src, 0, 0, run), task(snk, 1, 0, run)), tm2(task(src, 1, 0, run), task(snk, 0, 0, run))}},
		{name: "a subtask the job does not have", sharing: true,
			reports: []KeptReport{tm1(task(src, 0, 0, run), task(snk, 0, 0, run), task(snk, 2, 0, run)), tm2(task(src, 1, 0, run), task(snk, 1, 0, run))},
			want:    "which the job does not have"},
		{name: "two secrets", sharing: true,
			reports: []KeptReport{tm1(task(src, 0, 0, run), task(snk, 0, 0, run)), {TaskManager: 2, Name: "tm-2", Secret: []byte("other"),
				Tasks: []KeptTask{task(src, 1, 0, run), task(snk, 1, 0, run)}}},
			want: "hold different secrets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Reconcile(jg, !tc.sharing, tc.reports)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Reconcile = %v, want an error containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Tasks) != 4 || a.Checkpoint != 6 {
				t.Fatalf("adoption of %d tasks up to checkpoint %d, want 4 and 6", len(a.Tasks), a.Checkpoint)
			}
			for _, r := range tc.reports {
				for _, kt := range r.Tasks {
					got := a.Tasks[kt.Attempt.Subtask]
					if got.Attempt != kt.Attempt || got.TaskManager != r.TaskManager || got.State != kt.State {
						t.Errorf("%v: adopted %+v, reported %+v on %d", kt.Attempt, got, kt, r.TaskManager)
					}
					if slot := logicalSlot(jg, !tc.sharing, kt.Attempt.Subtask); a.Placement[slot] != r.TaskManager {
						t.Errorf("slot %d placed on %d, its subtask %v runs on %d", slot, a.Placement[slot], kt.Attempt, r.TaskManager)
					}
				}
			}
		})
	}
}

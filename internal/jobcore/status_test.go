package jobcore

import (
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

// TestStatusMachine drives a one-subtask job through each path of the status machine and checks where it
// ends: CREATED → RUNNING → FINISHED, or through FAILING to FAILED, or through CANCELING to CANCELED, and
// cancel in any state.
func TestStatusMachine(t *testing.T) {
	src := ident.Attempt{Subtask: ident.Subtask{Vertex: 0}}
	type step struct {
		ev   Event
		want Status // the core's status after the step
	}
	up := func(st deploy.State, f *Failure) TaskUpdate { return TaskUpdate{Attempt: src, State: st, Failure: f} }
	grant := SlotsGranted{Slots: []Slot{{TaskManager: 1, Name: "tm-1", DataAddress: "tm-1:1"}}}
	setup := JobSetUp{TaskManager: 1}
	for _, tc := range []struct {
		name    string
		restart string
		steps   []step
		errHas  string
	}{
		{"finishes", "none", []step{{Start{}, StatusRunning}, {grant, StatusRunning}, {setup, StatusRunning},
			{up(deploy.Running, nil), StatusRunning}, {up(deploy.Finished, nil), StatusFinished}}, ""},
		{"no restart fails the job", "none", []step{{Start{}, StatusRunning}, {grant, StatusRunning}, {setup, StatusRunning},
			{up(deploy.Failed, &Failure{Message: "boom"}), StatusFailed}}, "boom (restart strategy none gives up)"},
		{"a non-recoverable failure is not restarted", "fixed-delay:attempts=9,delay=0s", []step{{Start{}, StatusRunning},
			{grant, StatusRunning}, {setup, StatusRunning}, {up(deploy.Failed, &Failure{Message: "bad config", NonRecoverable: true}), StatusFailed}}, "bad config"},
		{"a refused deployment fails the job", "fixed-delay:attempts=9,delay=0s", []step{{Start{}, StatusRunning},
			{grant, StatusRunning}, {setup, StatusRunning}, {up(deploy.Failed, &Failure{Message: "TaskManager shut down", Kind: FailureDeploy}), StatusFailed}},
			"deploy source -> sink[0]: TaskManager shut down"},
		{"a failed setup fails the job", "none", []step{{Start{}, StatusRunning}, {grant, StatusRunning},
			{JobSetUp{TaskManager: 1, Err: errString("fingerprint mismatch")}, StatusFailed}}, "TaskManager tm-1 cannot run the job: fingerprint mismatch"},
		{"cancel before start", "none", []step{{Cancel{}, StatusCanceled}}, ""},
		{"cancel before deployment", "none", []step{{Start{}, StatusRunning}, {Cancel{}, StatusCanceled}}, ""},
		{"cancel while running waits for the task", "none", []step{{Start{}, StatusRunning}, {grant, StatusRunning},
			{setup, StatusRunning}, {Cancel{}, StatusCanceling}, {Cancel{}, StatusCanceling}, {up(deploy.Canceled, nil), StatusCanceled}}, ""},
		{"cancel while failing changes nothing", "none", []step{{Start{}, StatusRunning}, {grant, StatusRunning},
			{setup, StatusRunning}, {JobSetUp{TaskManager: 1, Err: errString("late")}, StatusFailing}, {Cancel{}, StatusFailing},
			{up(deploy.Canceled, nil), StatusFailed}}, "late"},
		{"slot wait times out", "none", []step{{Start{}, StatusRunning}, {Tick{}, StatusFailed}}, "deployment waits for 1 slot, for 5m0s"},
		{"losing the TaskManager of a running task restarts it", "fixed-delay:attempts=1,delay=0s", []step{{Start{}, StatusRunning},
			{grant, StatusRunning}, {setup, StatusRunning}, {up(deploy.Running, nil), StatusRunning},
			{TaskManagerLost{TaskManager: 1, Reason: "gone"}, StatusRunning}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := scheduler.ParseRestartStrategy(tc.restart)
			if err != nil {
				t.Fatal(err)
			}
			sg := &graph.StreamGraph{JobName: "j", Nodes: []*graph.StreamNode{{ID: 0, Name: "source", Kind: graph.SourceNode, Parallelism: 1, MaxParallelism: 128},
				{ID: 1, Name: "sink", Kind: graph.SinkNode, Parallelism: 1, MaxParallelism: 128}},
				Edges: []*graph.StreamEdge{{Source: 0, Target: 1, Pattern: graph.Forward, PatternSet: true}}}
			jg, err := graph.BuildJobGraph(sg, graph.JobGraphOptions{Chaining: true, PipelinedType: graph.PipelinedBounded})
			if err != nil {
				t.Fatal(err)
			}
			c, err := New(Config{Job: jg, Restart: rc})
			if err != nil {
				t.Fatal(err)
			}
			if c.Status() != StatusCreated {
				t.Fatalf("a new core is %s", c.Status())
			}
			now := time.Duration(0)
			for i, st := range tc.steps {
				if _, ok := st.ev.(Tick); ok {
					now += DefaultSlotWaitTimeout
				}
				if err := c.Step(now, st.ev); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				c.Ready()
				c.Advance()
				if c.Status() != st.want {
					t.Fatalf("step %d (%T): status %s, want %s", i, st.ev, c.Status(), st.want)
				}
				if snap := c.Snapshot(); (st.want == StatusFailing || st.want == StatusCanceling) && snap.Status != StatusRunning {
					t.Fatalf("a %s job shows as %s, want RUNNING", st.want, snap.Status)
				}
			}
			snap := c.Snapshot()
			if tc.errHas != "" && (snap.Err == nil || !strings.Contains(snap.Err.Error(), tc.errHas)) {
				t.Fatalf("error %v, want it to say %q", snap.Err, tc.errHas)
			}
			if snap.Status.Terminal() != c.Status().Terminal() {
				t.Fatalf("snapshot %s, core %s", snap.Status, c.Status())
			}
			for _, vs := range snap.Vertices {
				for _, st := range vs.Subtasks {
					if snap.Status.Terminal() && !st.State.Terminal() {
						t.Fatalf("job %s with subtask %s", snap.Status, st.State)
					}
				}
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestCoreRefusesMisuse: a Step between Ready and Advance, time going back, events before Start and an
// invalid checkpoint configuration are errors, not silent behaviour.
func TestCoreRefusesMisuse(t *testing.T) {
	sg := &graph.StreamGraph{JobName: "j", Nodes: []*graph.StreamNode{{ID: 0, Name: "source", Kind: graph.SourceNode, Parallelism: 1, MaxParallelism: 128},
		{ID: 1, Name: "sink", Kind: graph.SinkNode, Parallelism: 1, MaxParallelism: 128}},
		Edges: []*graph.StreamEdge{{Source: 0, Target: 1, Pattern: graph.Forward, PatternSet: true}}}
	jg, err := graph.BuildJobGraph(sg, graph.JobGraphOptions{PipelinedType: graph.PipelinedBounded})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Job: jg})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Step(0, Tick{}); err == nil {
		t.Fatal("a Tick before Start was taken")
	}
	if err := c.Step(time.Second, Start{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Step(time.Millisecond, Tick{}); err == nil {
		t.Fatal("time went back without an error")
	}
	c.Ready()
	if err := c.Step(2*time.Second, Tick{}); err == nil {
		t.Fatal("a Step between Ready and Advance was taken")
	}
	c.Advance()
	if err := c.Step(2*time.Second, Tick{}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Job: jg, Checkpoint: &checkpoint.Config{IntervalMillis: 100}}); err == nil {
		t.Fatal("a checkpoint configuration without a timeout was taken")
	}
	cc := checkpoint.DefaultConfig()
	cc.IntervalMillis = 100
	if _, err := New(Config{Job: jg, Checkpoint: &cc}); err != nil {
		t.Fatalf("a valid checkpoint configuration was refused: %v", err)
	}
}

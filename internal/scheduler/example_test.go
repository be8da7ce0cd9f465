package scheduler_test

import (
	"fmt"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

// The diamond a -> {b, c} -> d under approximate local recovery: a failure restarts the failed subtask and
// everything downstream of it, nothing upstream.
func ExampleNewFailoverStrategy() {
	node := func(id int, name string, kind graph.NodeKind) *graph.StreamNode {
		return &graph.StreamNode{ID: id, Name: name, Kind: kind, Parallelism: 1, MaxParallelism: 128}
	}
	sg := &graph.StreamGraph{
		JobName: "diamond",
		Nodes:   []*graph.StreamNode{node(0, "a", graph.SourceNode), node(1, "b", graph.OperatorNode), node(2, "c", graph.OperatorNode), node(3, "d", graph.SinkNode)},
		Edges:   []*graph.StreamEdge{{Source: 0, Target: 1}, {Source: 0, Target: 2}, {Source: 1, Target: 3}, {Source: 2, Target: 3}},
	}
	jg, err := graph.BuildJobGraph(sg, graph.JobGraphOptions{PipelinedType: graph.PipelinedApproximate})
	if err != nil {
		panic(err)
	}
	mode, err := scheduler.ParseFailoverStrategy("approximate")
	if err != nil {
		panic(err)
	}
	fs, err := scheduler.NewFailoverStrategy(mode, scheduler.ComputeRegions(jg), nil)
	if err != nil {
		panic(err)
	}
	for _, v := range jg.Vertices {
		var names []string
		for _, s := range fs.TasksToRestart(ident.Subtask{Vertex: v.ID}) {
			names = append(names, jg.Vertex(s.Vertex).Name)
		}
		fmt.Println(v.Name, "fails:", names)
	}
	// Output:
	// a fails: [a b c d]
	// b fails: [b d]
	// c fails: [c d]
	// d fails: [d]
}

// A restart strategy is fed failures with the caller's time and answers whether and when to restart.
func ExampleParseRestartStrategy() {
	cfg, err := scheduler.ParseRestartStrategy("exponential-delay:initial=100ms,max=1s,multiplier=2,reset=1m,jitter=0")
	if err != nil {
		panic(err)
	}
	rs, err := scheduler.NewRestartStrategy(cfg, nil)
	if err != nil {
		panic(err)
	}
	for _, now := range []int64{0, 50, 100, 150, 200, 90_000} {
		rs.NotifyFailure(now, fmt.Errorf("task failed"))
		fmt.Println(now, rs.CanRestart(), rs.BackoffMillis())
	}
	// Output:
	// 0 true 100
	// 50 true 200
	// 100 true 400
	// 150 true 800
	// 200 true 1000
	// 90000 true 100
}

package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

var (
	diamond       = job{nodes: []string{"a:src:1", "b:op:1", "c:op:1", "d:sink:1"}, edges: []string{"a>b", "a>c", "b>d", "c>d"}}
	diamondApprox = job{nodes: diamond.nodes, edges: diamond.edges, approx: true}
	// src -> map (forward) -> hash -> sink(3)
	shuffle       = job{nodes: []string{"src:src:2", "map:op:2", "sink:sink:3"}, edges: []string{"src>map", "map>sink:hash"}}
	shuffleApprox = job{nodes: shuffle.nodes, edges: shuffle.edges, approx: true}
	pipelines     = job{nodes: []string{"src:src:3", "map:op:3", "sink:sink:3"}, edges: []string{"src>map", "map>sink"}}
	// Topological order a, c, b, d.
	disconnected = job{nodes: []string{"a:src:2", "b:sink:2", "c:src:2", "d:sink:2"}, edges: []string{"a>b:hash", "c>d:hash"}}
	batch        = job{nodes: []string{"src:src:2", "agg:op:2", "sink:sink:2"}, edges: []string{"src>agg:hash:blocking", "agg>sink"}}
)

func TestTasksToRestart(t *testing.T) {
	cases := []struct {
		name        string
		job         job
		mode        FailoverMode
		failed      string
		unavailable string // partitions the predicate reports gone, "rN@name[i]"; "*" for all
		want        string
	}{
		// Full failover restarts everything, whatever the topology.
		{"full chain", pipelines, FullFailover, "map[1]", "", "src[0,1,2] map[0,1,2] sink[0,1,2]"},
		{"full disconnected", disconnected, FullFailover, "d[0]", "", "a[0,1] c[0,1] b[0,1] d[0,1]"},
		{"full approximate graph", diamondApprox, FullFailover, "d[0]", "", "a[0] b[0] c[0] d[0]"},

		// Region failover.
		{"region forward pipelines: one slice", pipelines, RegionFailover, "map[1]", "", "src[1] map[1] sink[1]"},
		{"region forward pipelines: source", pipelines, RegionFailover, "src[2]", "", "src[2] map[2] sink[2]"},
		{"region hash shuffle: everything", shuffle, RegionFailover, "map[0]", "", "src[0,1] map[0,1] sink[0,1,2]"},
		{"region diamond", diamond, RegionFailover, "c[0]", "", "a[0] b[0] c[0] d[0]"},
		{"region disconnected: only one pipeline", disconnected, RegionFailover, "d[1]", "", "c[0,1] d[0,1]"},
		{"region disconnected: the other", disconnected, RegionFailover, "a[0]", "", "a[0,1] b[0,1]"},
		{"region rescale", job{nodes: []string{"src:src:4", "sink:sink:2"}, edges: []string{"src>sink:rescale"}}, RegionFailover, "src[3]", "", "src[2,3] sink[1]"},
		{"region blocking: consumer alone", batch, RegionFailover, "agg[0]", "", "agg[0] sink[0]"},
		{"region blocking: sink restarts its region", batch, RegionFailover, "sink[1]", "", "agg[1] sink[1]"},
		{"region blocking: producer restarts its consumers", batch, RegionFailover, "src[0]", "", "src[0] agg[0,1] sink[0,1]"},
		{"region blocking: lost input reruns its producer", batch, RegionFailover, "agg[0]", "r0@src[1]", "src[1] agg[0,1] sink[0,1]"},
		{"region blocking: all inputs lost", batch, RegionFailover, "sink[0]", "*", "src[0,1] agg[0,1] sink[0,1]"},
		{"region blocking: lost partition of a restarted producer is not asked about", batch, RegionFailover, "src[0]", "r0@src[0]", "src[0] agg[0,1] sink[0,1]"},
		{"region blocking forward", job{nodes: []string{"src:src:2", "sink:sink:2"}, edges: []string{"src>sink:forward:blocking"}}, RegionFailover, "src[1]", "", "src[1] sink[1]"},
		{"region blocking chain of stages", job{nodes: []string{"a:src:1", "b:op:1", "c:sink:1"}, edges: []string{"a>b:forward:blocking", "b>c:forward:blocking"}}, RegionFailover, "a[0]", "", "a[0] b[0] c[0]"},
		{"region blocking chain, middle fails, lost input", job{nodes: []string{"a:src:1", "b:op:1", "c:sink:1"}, edges: []string{"a>b:forward:blocking", "b>c:forward:blocking"}}, RegionFailover, "b[0]", "*", "a[0] b[0] c[0]"},
		{"region blocking chain, last fails, lost input", job{nodes: []string{"a:src:1", "b:op:1", "c:sink:1"}, edges: []string{"a>b:forward:blocking", "b>c:forward:blocking"}}, RegionFailover, "c[0]", "r1@b[0]", "b[0] c[0]"},
		{"region blocking both ways", job{nodes: []string{"a:src:2", "b:sink:2", "c:op:2"}, edges: []string{"a>b", "a>c:hash:blocking", "c>b"}}, RegionFailover, "b[1]", "", "a[0,1] c[0,1] b[0,1]"},
		// On an approximate graph every subtask is a region: region failover equals approximate failover.
		{"region approximate diamond", diamondApprox, RegionFailover, "b[0]", "", "b[0] d[0]"},
		{"region approximate shuffle", shuffleApprox, RegionFailover, "map[1]", "", "map[1] sink[0,1,2]"},

		// Approximate failover: the failed subtask and everything downstream, nothing upstream.
		{"approximate diamond a", diamondApprox, ApproximateFailover, "a[0]", "", "a[0] b[0] c[0] d[0]"},
		{"approximate diamond b", diamondApprox, ApproximateFailover, "b[0]", "", "b[0] d[0]"},
		{"approximate diamond c", diamondApprox, ApproximateFailover, "c[0]", "", "c[0] d[0]"},
		{"approximate diamond d", diamondApprox, ApproximateFailover, "d[0]", "", "d[0]"},
		{"approximate hash: one map restarts every sink", shuffleApprox, ApproximateFailover, "map[0]", "", "map[0] sink[0,1,2]"},
		{"approximate hash: source", shuffleApprox, ApproximateFailover, "src[1]", "", "src[1] map[1] sink[0,1,2]"},
		{"approximate hash: sink", shuffleApprox, ApproximateFailover, "sink[2]", "", "sink[2]"},
		{"approximate chain middle", job{nodes: pipelines.nodes, edges: pipelines.edges, approx: true}, ApproximateFailover, "map[1]", "", "map[1] sink[1]"},
		{"approximate rescale", job{nodes: []string{"src:src:4", "sink:sink:2"}, edges: []string{"src>sink:rescale"}, approx: true}, ApproximateFailover, "src[1]", "", "src[1] sink[0]"},
		{"approximate fan-in", job{nodes: []string{"a:src:1", "b:src:1", "u:op:1", "sink:sink:1"}, edges: []string{"a>u", "b>u", "u>sink"}, approx: true}, ApproximateFailover, "b[0]", "", "b[0] u[0] sink[0]"},
		{"approximate fan-out", job{nodes: []string{"src:src:1", "x:sink:1", "y:sink:1"}, edges: []string{"src>x", "src>y"}, approx: true}, ApproximateFailover, "x[0]", "", "x[0]"},
		{"approximate disconnected", job{nodes: disconnected.nodes, edges: disconnected.edges, approx: true}, ApproximateFailover, "c[1]", "", "c[1] d[0,1]"},
		// Only partitions that restarted subtasks consume matter.
		{"approximate: lost partitions of others do not matter", shuffleApprox, ApproximateFailover, "sink[0]", "r0@src[0]", "sink[0]"},
		{"approximate after blocking", job{nodes: []string{"src:src:1", "map:op:1", "sink:sink:1"}, edges: []string{"src>map:forward:blocking", "map>sink"}, approx: true}, ApproximateFailover, "map[0]", "", "map[0] sink[0]"},
		{"approximate after blocking, input lost", job{nodes: []string{"src:src:1", "map:op:1", "sink:sink:1"}, edges: []string{"src>map:forward:blocking", "map>sink"}, approx: true}, ApproximateFailover, "map[0]", "r0@src[0]", "src[0] map[0] sink[0]"},
		// A producer rerun for a lost partition regenerates all its output: its other consumers restart too.
		{"approximate: a lost partition two hops up does not matter", job{nodes: []string{"src:src:1", "map:op:2", "sink:sink:2"}, edges: []string{"src>map:rebalance:blocking", "map>sink"}, approx: true}, ApproximateFailover, "sink[1]", "r0@src[0]", "sink[1]"},
		{"approximate: a rerun producer restarts its other consumers", job{nodes: []string{"src:src:1", "map:op:2", "sink:sink:2"}, edges: []string{"src>map:rebalance:blocking", "map>sink"}, approx: true}, ApproximateFailover, "map[1]", "r0@src[0]", "src[0] map[0,1] sink[0,1]"},
		{"approximate: a lost reconnectable partition reruns its producer", job{nodes: []string{"src:src:1", "map:op:2", "sink:sink:2"}, edges: []string{"src>map:rebalance:blocking", "map>sink"}, approx: true}, ApproximateFailover, "sink[1]", "*", "src[0] map[0,1] sink[0,1]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jg := tc.job.build(t)
			topo := ComputeRegions(jg)
			var asked []string
			available := func(r ident.ResultID, p ident.Subtask) bool {
				asked = append(asked, fmtPartitions(jg, []Partition{{r, p}}))
				if tc.unavailable == "*" {
					return false
				}
				for _, u := range strings.Fields(tc.unavailable) {
					if partition(t, jg, u) == (Partition{r, p}) {
						return false
					}
				}
				return true
			}
			fs, err := NewFailoverStrategy(tc.mode, topo, available)
			if err != nil {
				t.Fatal(err)
			}
			failed := subtask(t, jg, tc.failed)
			got := fs.TasksToRestart(failed)
			if s := fmtSubtasks(jg, got); s != tc.want {
				t.Fatalf("%s failover of %s restarts\n got %s\nwant %s\n(availability asked about %v)", tc.mode, tc.failed, s, tc.want, asked)
			}
			checkRestartSet(t, got, failed)
			if again := fs.TasksToRestart(failed); !slices.Equal(again, got) {
				t.Fatalf("second call gave %v", again)
			}
		})
	}
}

func checkRestartSet(t *testing.T, got []ident.Subtask, failed ident.Subtask) {
	t.Helper()
	if !slices.Contains(got, failed) {
		t.Fatalf("restart set %v misses the failed subtask %s", got, failed)
	}
	for i := 1; i < len(got); i++ {
		if compareSubtasks(got[i-1], got[i]) >= 0 {
			t.Fatalf("restart set %v not sorted or has duplicates", got)
		}
	}
}

func TestFailoverUnknownSubtask(t *testing.T) {
	topo := ComputeRegions(diamondApprox.build(t))
	for _, m := range failoverModes {
		fs, err := NewFailoverStrategy(m, topo, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []ident.Subtask{{Vertex: 0, Index: 1}, {Vertex: 4, Index: 0}, {Vertex: -1}} {
			if got := fs.TasksToRestart(s); got != nil {
				t.Errorf("%s: TasksToRestart(%s) = %v, want nil", m, s, got)
			}
		}
	}
}

func TestNewFailoverStrategyErrors(t *testing.T) {
	bounded := ComputeRegions(diamond.build(t))
	if _, err := NewFailoverStrategy(ApproximateFailover, bounded, nil); err == nil ||
		!strings.Contains(err.Error(), `edge from "a" to "b" is PIPELINED_BOUNDED`) || !strings.Contains(err.Error(), "PipelinedApproximate") {
		t.Errorf("approximate over bounded edges: %v", err)
	}
	if _, err := NewFailoverStrategy(0, bounded, nil); err == nil || !strings.Contains(err.Error(), "full, region, approximate") {
		t.Errorf("mode 0: %v", err)
	}
	// Blocking edges are fine for approximate failover.
	blocking := ComputeRegions(job{nodes: []string{"src:src:1", "sink:sink:1"}, edges: []string{"src>sink:forward:blocking"}}.build(t))
	if _, err := NewFailoverStrategy(ApproximateFailover, blocking, nil); err != nil {
		t.Error(err)
	}
}

func TestParseFailoverStrategy(t *testing.T) {
	for _, m := range failoverModes {
		got, err := ParseFailoverStrategy(m.String())
		if err != nil || got != m {
			t.Errorf("ParseFailoverStrategy(%q) = %v, %v", m, got, err)
		}
	}
	for _, bad := range []string{"", "Full", "regions", "restart-all", "approx"} {
		_, err := ParseFailoverStrategy(bad)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) || !strings.Contains(err.Error(), "valid values are full, region, approximate") {
			t.Errorf("ParseFailoverStrategy(%q): %v", bad, err)
		}
	}
	if s := FailoverMode(9).String(); s != "failover-mode(9)" {
		t.Errorf("String = %q", s)
	}
}

// shapes are the topologies the exhaustive tests enumerate: vertex names and edges between them.
var shapes = []struct {
	name  string
	kinds []string
	edges [][2]int
}{
	{"chain", []string{"src", "op", "sink"}, [][2]int{{0, 1}, {1, 2}}},
	{"diamond", []string{"src", "op", "op", "sink"}, [][2]int{{0, 1}, {0, 2}, {1, 3}, {2, 3}}},
	{"fan-in", []string{"src", "src", "sink"}, [][2]int{{0, 2}, {1, 2}}},
	{"fan-out", []string{"src", "sink", "sink"}, [][2]int{{0, 1}, {0, 2}}},
	{"two pipelines", []string{"src", "sink", "src", "sink"}, [][2]int{{0, 1}, {2, 3}}},
	{"triangle", []string{"src", "op", "sink"}, [][2]int{{0, 1}, {0, 2}, {1, 2}}},
}

// enumerate calls fn with every job of every shape where each vertex has parallelism 1 or 2, each edge is
// rescale (pointwise) or hash (all-to-all), and each edge is pipelined or blocking; pipelined edges are
// bounded, or approximate when approx is set.
func enumerate(t *testing.T, approx bool, fn func(name string, jg *graph.JobGraph)) {
	for _, sh := range shapes {
		nv, ne := len(sh.kinds), len(sh.edges)
		for par := 0; par < 1<<nv; par++ {
			for pat := 0; pat < 1<<ne; pat++ {
				for typ := 0; typ < 1<<ne; typ++ {
					j := job{approx: approx}
					for v, k := range sh.kinds {
						j.nodes = append(j.nodes, fmt.Sprintf("v%d:%s:%d", v, k, 1+(par>>v)&1))
					}
					for i, e := range sh.edges {
						p, ty := "rescale", ""
						if pat>>i&1 == 1 {
							p = "hash"
						}
						if typ>>i&1 == 1 {
							ty = "blocking"
						}
						j.edges = append(j.edges, fmt.Sprintf("v%d>v%d:%s:%s", e[0], e[1], p, ty))
					}
					fn(fmt.Sprintf("%s %v %v", sh.name, j.nodes, j.edges), j.build(t))
				}
			}
		}
	}
}

type conn struct {
	e    *graph.JobEdge
	p, c ident.Subtask
}

func connections(jg *graph.JobGraph) []conn {
	var cs []conn
	for _, e := range jg.Edges {
		for p := 0; p < e.Source.Parallelism; p++ {
			for _, c := range graph.ConsumersOf(e, p) {
				cs = append(cs, conn{e, ident.Subtask{Vertex: e.Source.ID, Index: int32(p)}, ident.Subtask{Vertex: e.Target.ID, Index: int32(c)}})
			}
		}
	}
	return cs
}

// oracleRegions labels every subtask with the smallest subtask of its region, by relaxing until nothing
// changes: a slow, obviously correct rendering of the definition.
func oracleRegions(jg *graph.JobGraph) map[ident.Subtask]ident.Subtask {
	label := map[ident.Subtask]ident.Subtask{}
	for _, s := range jg.Subtasks() {
		label[s] = s
	}
	cs := connections(jg)
	for changed := true; changed; {
		changed = false
		for _, c := range cs {
			if c.e.PartitionType != graph.PipelinedBounded || label[c.p] == label[c.c] {
				continue
			}
			m := label[c.p]
			if compareSubtasks(label[c.c], m) < 0 {
				m = label[c.c]
			}
			label[c.p], label[c.c] = m, m
			changed = true
		}
	}
	return label
}

// oracleRestart computes a restart set by iterating the rules to a fixed point. With regions set, a restarted
// subtask's whole region restarts (region failover); without, only the subtask (approximate failover).
func oracleRestart(jg *graph.JobGraph, failed ident.Subtask, regions map[ident.Subtask]ident.Subtask, available PartitionAvailable) []ident.Subtask {
	in := map[ident.Subtask]bool{failed: true}
	cs := connections(jg)
	for changed := true; changed; {
		changed = false
		add := func(s ident.Subtask) {
			if !in[s] {
				in[s] = true
				changed = true
			}
		}
		for _, c := range cs {
			if in[c.p] {
				add(c.c)
			}
			if in[c.c] && !in[c.p] && !available(c.e.Result, c.p) {
				add(c.p)
			}
		}
		if regions != nil {
			restarted := map[ident.Subtask]bool{}
			for s := range in {
				restarted[regions[s]] = true
			}
			for _, s := range jg.Subtasks() {
				if restarted[regions[s]] {
					add(s)
				}
			}
		}
	}
	var out []ident.Subtask
	for _, s := range jg.Subtasks() {
		if in[s] {
			out = append(out, s)
		}
	}
	return out
}

// TestFailoverExhaustive compares region computation and every failover strategy with slow oracles on every
// small job of several shapes, under three partition availability patterns.
func TestFailoverExhaustive(t *testing.T) {
	predicates := map[string]PartitionAvailable{
		"all available":  nil,
		"none available": func(ident.ResultID, ident.Subtask) bool { return false },
		"some available": func(r ident.ResultID, p ident.Subtask) bool { return (int(r)+int(p.Vertex)+int(p.Index))%2 == 0 },
	}
	always := func(ident.ResultID, ident.Subtask) bool { return true }
	jobs := 0
	for _, approx := range []bool{false, true} {
		enumerate(t, approx, func(name string, jg *graph.JobGraph) {
			jobs++
			topo := ComputeRegions(jg)
			checkTopologyInvariants(t, topo)
			label := oracleRegions(jg)
			for _, s := range jg.Subtasks() {
				for _, o := range jg.Subtasks() {
					rs, _ := topo.RegionOf(s)
					ro, _ := topo.RegionOf(o)
					if (rs == ro) != (label[s] == label[o]) {
						t.Fatalf("%s: %s and %s: same region %v, oracle says %v", name, s, o, rs == ro, label[s] == label[o])
					}
				}
			}
			for pname, pred := range predicates {
				oraclePred := pred
				if oraclePred == nil {
					oraclePred = always
				}
				for _, mode := range failoverModes {
					fs, err := NewFailoverStrategy(mode, topo, pred)
					if (mode == ApproximateFailover || mode == TaskFailover) && !approx && slices.ContainsFunc(jg.Edges, func(e *graph.JobEdge) bool { return e.PartitionType == graph.PipelinedBounded }) {
						if err == nil {
							t.Fatalf("%s: %s failover accepted bounded edges", name, mode)
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					for _, s := range jg.Subtasks() {
						got := fs.TasksToRestart(s)
						var want []ident.Subtask
						switch mode {
						case FullFailover:
							want = jg.Subtasks()
						case RegionFailover:
							want = oracleRestart(jg, s, label, oraclePred)
						case ApproximateFailover:
							want = oracleRestart(jg, s, nil, oraclePred)
						case TaskFailover:
							want = []ident.Subtask{s}
						}
						if !slices.Equal(got, want) {
							t.Fatalf("%s, %s, %s failover of %s:\n got %s\nwant %s", name, pname, mode, s, fmtSubtasks(jg, got), fmtSubtasks(jg, want))
						}
						checkRestartSet(t, got, s)
					}
				}
			}
		})
	}
	t.Logf("%d jobs", jobs)
}

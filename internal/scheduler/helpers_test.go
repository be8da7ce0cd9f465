package scheduler

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// job describes a small job compactly. Nodes are "name:kind:parallelism" with kind src, op or sink. Edges are
// "a>b:pattern:type" where pattern is forward, rebalance, rescale, hash or broadcast, and type is bounded,
// approx or blocking; an empty type takes the job's pipelined type. Operators are not chained unless chain
// is set, so every operator is a vertex of its own name.
type job struct {
	nodes, edges []string
	approx       bool // pipelined edges are PIPELINED_APPROXIMATE
	chain        bool
}

func (j job) build(t testing.TB) *graph.JobGraph {
	t.Helper()
	sg := &graph.StreamGraph{JobName: "test"}
	ids := map[string]int{}
	for i, spec := range j.nodes {
		f := strings.Split(spec, ":")
		if len(f) != 3 {
			t.Fatalf("bad node %q", spec)
		}
		kind := map[string]graph.NodeKind{"src": graph.SourceNode, "op": graph.OperatorNode, "sink": graph.SinkNode}[f[1]]
		p, err := strconv.Atoi(f[2])
		if kind == 0 || err != nil {
			t.Fatalf("bad node %q", spec)
		}
		ids[f[0]] = i
		sg.Nodes = append(sg.Nodes, &graph.StreamNode{ID: i, Name: f[0], Kind: kind, Parallelism: p, MaxParallelism: 128})
	}
	types := map[*graph.StreamEdge]graph.PartitionType{}
	for _, spec := range j.edges {
		f := strings.Split(spec, ":")
		ab := strings.Split(f[0], ">")
		if len(ab) != 2 {
			t.Fatalf("bad edge %q", spec)
		}
		a, okA := ids[ab[0]]
		b, okB := ids[ab[1]]
		if !okA || !okB {
			t.Fatalf("edge %q names an unknown node", spec)
		}
		e := &graph.StreamEdge{Source: a, Target: b}
		if len(f) > 1 && f[1] != "" {
			e.Pattern = map[string]graph.Pattern{"forward": graph.Forward, "rebalance": graph.Rebalance, "rescale": graph.Rescale, "hash": graph.Hash, "broadcast": graph.Broadcast}[f[1]]
			e.PatternSet = true
			if e.Pattern == 0 {
				t.Fatalf("bad pattern in %q", spec)
			}
		}
		if len(f) > 2 && f[2] != "" {
			pt := map[string]graph.PartitionType{"bounded": graph.PipelinedBounded, "approx": graph.PipelinedApproximate, "blocking": graph.Blocking}[f[2]]
			if pt == 0 {
				t.Fatalf("bad partition type in %q", spec)
			}
			types[e] = pt
		}
		sg.Edges = append(sg.Edges, e)
	}
	opts := graph.JobGraphOptions{Chaining: j.chain, PipelinedType: graph.PipelinedBounded}
	if j.approx {
		opts.PipelinedType = graph.PipelinedApproximate
	}
	jg, err := graph.BuildJobGraph(sg, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range jg.Edges {
		if pt, ok := types[e.Stream]; ok {
			e.PartitionType = pt
		}
	}
	return jg
}

// subtask parses "name[i]" against the vertex names of jg.
func subtask(t testing.TB, jg *graph.JobGraph, s string) ident.Subtask {
	t.Helper()
	name, idx, ok := strings.Cut(strings.TrimSuffix(s, "]"), "[")
	i, err := strconv.Atoi(idx)
	if !ok || err != nil {
		t.Fatalf("bad subtask %q", s)
	}
	for _, v := range jg.Vertices {
		if v.Name == name {
			return ident.Subtask{Vertex: v.ID, Index: int32(i)}
		}
	}
	t.Fatalf("no vertex %q", name)
	return ident.Subtask{}
}

// subtasks parses a space-separated list of "name[i]".
func subtasks(t testing.TB, jg *graph.JobGraph, s string) []ident.Subtask {
	var out []ident.Subtask
	for _, f := range strings.Fields(s) {
		out = append(out, subtask(t, jg, f))
	}
	return out
}

// partition parses "rN@name[i]".
func partition(t testing.TB, jg *graph.JobGraph, s string) Partition {
	t.Helper()
	r, p, ok := strings.Cut(strings.TrimPrefix(s, "r"), "@")
	n, err := strconv.Atoi(r)
	if !ok || err != nil {
		t.Fatalf("bad partition %q", s)
	}
	return Partition{Result: ident.ResultID(n), Producer: subtask(t, jg, p)}
}

// fmtSubtasks writes subtasks compactly in the order given, merging runs of one vertex: "a[0,1] b[2]".
func fmtSubtasks(jg *graph.JobGraph, ss []ident.Subtask) string {
	var b strings.Builder
	for i, s := range ss {
		if i > 0 && ss[i-1].Vertex == s.Vertex {
			fmt.Fprintf(&b, ",%d", s.Index)
			continue
		}
		if i > 0 {
			b.WriteString("] ")
		}
		fmt.Fprintf(&b, "%s[%d", jg.Vertex(s.Vertex).Name, s.Index)
	}
	if len(ss) > 0 {
		b.WriteString("]")
	}
	return b.String()
}

func fmtPartitions(jg *graph.JobGraph, ps []Partition) string {
	var f []string
	for _, p := range ps {
		f = append(f, fmt.Sprintf("r%d@%s[%d]", p.Result, jg.Vertex(p.Producer.Vertex).Name, p.Producer.Index))
	}
	return strings.Join(f, " ")
}

// fmtRegions writes regions by their members: "{a[0] b[0]} {a[1] b[1]}".
func fmtRegions(topo *Topology, rs []RegionID) string {
	var f []string
	for _, r := range rs {
		f = append(f, "{"+fmtSubtasks(topo.Graph(), topo.Members(r))+"}")
	}
	return strings.Join(f, " ")
}

func allRegions(topo *Topology) []RegionID {
	rs := make([]RegionID, topo.NumRegions())
	for i := range rs {
		rs[i] = RegionID(i)
	}
	return rs
}

func fmtIDs(rs []RegionID) string {
	f := make([]string, len(rs))
	for i, r := range rs {
		f[i] = strconv.Itoa(int(r))
	}
	return strings.Join(f, " ")
}

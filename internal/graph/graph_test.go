package graph

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// build makes a stream graph from a compact description: nodes "name:kind:parallelism" and edges
// "a>b:pattern" (pattern optional, "!" suffix marks it explicit).
func build(nodes []string, edges []string) *StreamGraph {
	g := &StreamGraph{JobName: "t"}
	ids := map[string]int{}
	for i, spec := range nodes {
		f := strings.Split(spec, ":")
		kind := map[string]NodeKind{"src": SourceNode, "op": OperatorNode, "sink": SinkNode}[f[1]]
		var p int
		fmt.Sscan(f[2], &p)
		n := &StreamNode{ID: i, Name: f[0], Kind: kind, Parallelism: p, MaxParallelism: 128}
		if len(f) > 3 && f[3] == "newchain" {
			n.StartsChain = true
		}
		ids[f[0]] = i
		g.Nodes = append(g.Nodes, n)
	}
	for _, spec := range edges {
		var pat string
		if i := strings.IndexByte(spec, ':'); i >= 0 {
			spec, pat = spec[:i], spec[i+1:]
		}
		ab := strings.Split(spec, ">")
		e := &StreamEdge{Source: ids[ab[0]], Target: ids[ab[1]]}
		if strings.HasSuffix(pat, "!") {
			e.PatternSet = true
			pat = strings.TrimSuffix(pat, "!")
		}
		e.Pattern = map[string]Pattern{"": 0, "forward": Forward, "rebalance": Rebalance, "rescale": Rescale, "hash": Hash, "broadcast": Broadcast}[pat]
		g.Edges = append(g.Edges, e)
	}
	return g
}

func TestChaining(t *testing.T) {
	cases := []struct {
		name     string
		nodes    []string
		edges    []string
		chaining bool
		vertices []string
		edgesOut []string // "from>to:pattern"
	}{
		{"linear chain", []string{"src:src:2", "map:op:2", "sink:sink:2"}, []string{"src>map", "map>sink"}, true,
			[]string{"src -> map -> sink"}, nil},
		{"no chaining", []string{"src:src:2", "map:op:2", "sink:sink:2"}, []string{"src>map", "map>sink"}, false,
			[]string{"src", "map", "sink"}, []string{"src>map:forward", "map>sink:forward"}},
		{"hash breaks chain", []string{"src:src:2", "map:op:2", "sum:op:2", "sink:sink:2"}, []string{"src>map", "map>sum:hash", "sum>sink"}, true,
			[]string{"src -> map", "sum -> sink"}, []string{"src -> map>sum -> sink:hash"}},
		{"parallelism change becomes rebalance", []string{"src:src:1", "map:op:3", "sink:sink:3"}, []string{"src>map", "map>sink"}, true,
			[]string{"src", "map -> sink"}, []string{"src>map -> sink:rebalance"}},
		{"fan-in is not chained", []string{"a:src:2", "b:src:2", "u:op:2", "sink:sink:2"}, []string{"a>u", "b>u", "u>sink"}, true,
			[]string{"a", "b", "u -> sink"}, []string{"a>u -> sink:forward", "b>u -> sink:forward"}},
		{"fan-out chains both", []string{"src:src:2", "x:sink:2", "y:sink:2"}, []string{"src>x", "src>y"}, true,
			[]string{"src -> x -> y"}, nil},
		{"fan-out mixed", []string{"src:src:2", "x:sink:2", "y:sink:2"}, []string{"src>x", "src>y:broadcast"}, true,
			[]string{"src -> x", "y"}, []string{"src -> x>y:broadcast"}},
		{"start new chain", []string{"src:src:2", "map:op:2:newchain", "sink:sink:2"}, []string{"src>map", "map>sink"}, true,
			[]string{"src", "map -> sink"}, []string{"src>map -> sink:forward"}},
		{"rescale not chained", []string{"src:src:4", "map:op:2", "sink:sink:2"}, []string{"src>map:rescale", "map>sink"}, true,
			[]string{"src", "map -> sink"}, []string{"src>map -> sink:rescale"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jg, err := BuildJobGraph(build(tc.nodes, tc.edges), JobGraphOptions{Chaining: tc.chaining})
			if err != nil {
				t.Fatal(err)
			}
			var vs []string
			for _, v := range jg.Vertices {
				vs = append(vs, v.Name)
			}
			if !reflect.DeepEqual(vs, tc.vertices) {
				t.Errorf("vertices = %q, want %q", vs, tc.vertices)
			}
			var es []string
			for _, e := range jg.Edges {
				es = append(es, fmt.Sprintf("%s>%s:%s", e.Source.Name, e.Target.Name, e.Pattern))
				if e.PartitionType != PipelinedBounded {
					t.Errorf("edge type %s", e.PartitionType)
				}
			}
			if !reflect.DeepEqual(es, tc.edgesOut) {
				t.Errorf("edges = %q, want %q", es, tc.edgesOut)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name  string
		nodes []string
		edges []string
		want  string
	}{
		{"empty", nil, nil, "no operators"},
		{"dangling", []string{"src:src:1", "map:op:1", "sink:sink:1"}, []string{"src>map", "src>sink"}, `output of operator "map" is not consumed`},
		{"unused source", []string{"src:src:1", "s2:src:1", "sink:sink:1"}, []string{"src>sink"}, `source "s2" is not consumed`},
		{"zero parallelism", []string{"src:src:0", "sink:sink:1"}, []string{"src>sink"}, "parallelism must be at least 1"},
		{"duplicate names", []string{"x:src:1", "x:sink:1"}, []string{"x>x"}, "two operators are named"},
		{"explicit forward mismatch", []string{"src:src:1", "sink:sink:2"}, []string{"src>sink:forward!"}, "needs equal parallelism"},
		{"cycle", []string{"src:src:1", "a:op:1", "b:op:1", "sink:sink:1"}, []string{"src>a", "a>b", "b>a", "b>sink"}, "cycle"},
		{"input into source", []string{"src:src:1", "s2:src:1", "sink:sink:1"}, []string{"src>s2", "s2>sink"}, "cannot have inputs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildJobGraph(build(tc.nodes, tc.edges), JobGraphOptions{Chaining: true})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestConnections(t *testing.T) {
	cases := []struct {
		pat      Pattern
		up, down int
	}{
		{Forward, 3, 3}, {Rescale, 4, 2}, {Rescale, 2, 4}, {Rescale, 3, 5}, {Rescale, 5, 3}, {Hash, 3, 2}, {Broadcast, 2, 3}, {Rebalance, 1, 4},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s-%d-%d", tc.pat, tc.up, tc.down), func(t *testing.T) {
			// Every producer->consumer pair must appear in both views, exactly once.
			pairs := map[[2]int]int{}
			for p := 0; p < tc.up; p++ {
				for _, c := range consumers(tc.pat, tc.up, tc.down, p) {
					pairs[[2]int{p, c}]++
				}
			}
			for c := 0; c < tc.down; c++ {
				ps := producers(tc.pat, tc.up, tc.down, c)
				if len(ps) == 0 {
					t.Fatalf("consumer %d has no producer", c)
				}
				for _, p := range ps {
					pairs[[2]int{p, c}]--
				}
			}
			for k, v := range pairs {
				if v != 0 {
					t.Fatalf("pair %v unbalanced (%d)", k, v)
				}
			}
			for p := 0; p < tc.up; p++ {
				if len(consumers(tc.pat, tc.up, tc.down, p)) == 0 {
					t.Fatalf("producer %d feeds nobody", p)
				}
			}
		})
	}
}

func TestKeyGroups(t *testing.T) {
	for _, maxP := range []int{1, 7, 128} {
		for p := 1; p <= maxP && p <= 9; p++ {
			owned := 0
			for i := 0; i < p; i++ {
				s, e := KeyGroupRange(i, maxP, p)
				for kg := s; kg <= e; kg++ {
					if got := OperatorIndexOf(kg, maxP, p); got != i {
						t.Fatalf("maxP=%d p=%d: key group %d owned by %d, range says %d", maxP, p, kg, got, i)
					}
					owned++
				}
			}
			if owned != maxP {
				t.Fatalf("maxP=%d p=%d: ranges cover %d key groups", maxP, p, owned)
			}
		}
	}
}

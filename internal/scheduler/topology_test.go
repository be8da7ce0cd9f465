package scheduler

import (
	"testing"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

func TestComputeRegions(t *testing.T) {
	type regionWant struct {
		region    int
		blocking  string // BlockingInputs
		inputs    string // Inputs
		producers string
		consumers string
	}
	cases := []struct {
		name    string
		job     job
		regions string // all regions in ID order
		details []regionWant
	}{
		{"single subtask", job{nodes: []string{"src:src:1", "sink:sink:1"}, edges: []string{"src>sink"}},
			"{src[0] sink[0]}", nil},
		{"forward pipelines: one region per slice", job{nodes: []string{"src:src:3", "map:op:3", "sink:sink:3"}, edges: []string{"src>map", "map>sink"}},
			"{src[0] map[0] sink[0]} {src[1] map[1] sink[1]} {src[2] map[2] sink[2]}",
			[]regionWant{{region: 1}}},
		{"chained forward pipelines", job{nodes: []string{"src:src:2", "map:op:2", "sink:sink:2"}, edges: []string{"src>map", "map>sink"}, chain: true},
			"{src -> map -> sink[0]} {src -> map -> sink[1]}", nil},
		{"hash shuffle joins everything", job{nodes: []string{"src:src:2", "sink:sink:3"}, edges: []string{"src>sink:hash"}},
			"{src[0,1] sink[0,1,2]}", nil},
		{"broadcast", job{nodes: []string{"src:src:1", "sink:sink:2"}, edges: []string{"src>sink:broadcast"}},
			"{src[0] sink[0,1]}", nil},
		{"parallelism change becomes rebalance", job{nodes: []string{"src:src:1", "map:op:3", "sink:sink:3"}, edges: []string{"src>map", "map>sink"}},
			"{src[0] map[0,1,2] sink[0,1,2]}", nil},
		{"rescale 4 to 2", job{nodes: []string{"src:src:4", "sink:sink:2"}, edges: []string{"src>sink:rescale"}},
			"{src[0,1] sink[0]} {src[2,3] sink[1]}", nil},
		{"rescale 2 to 4", job{nodes: []string{"src:src:2", "sink:sink:4"}, edges: []string{"src>sink:rescale"}},
			"{src[0] sink[0,1]} {src[1] sink[2,3]}", nil},
		{"rescale 3 to 2", job{nodes: []string{"src:src:3", "sink:sink:2"}, edges: []string{"src>sink:rescale"}},
			"{src[0] sink[0]} {src[1,2] sink[1]}", nil},
		{"rescale 2 to 3", job{nodes: []string{"src:src:2", "sink:sink:3"}, edges: []string{"src>sink:rescale"}},
			"{src[0] sink[0]} {src[1] sink[1,2]}", nil},
		{"diamond", job{nodes: []string{"a:src:2", "b:op:2", "c:op:2", "d:sink:2"}, edges: []string{"a>b", "a>c", "b>d", "c>d"}},
			"{a[0] b[0] c[0] d[0]} {a[1] b[1] c[1] d[1]}", nil},
		{"diamond with one hash side", job{nodes: []string{"a:src:2", "b:op:2", "c:op:2", "d:sink:2"}, edges: []string{"a>b", "a>c:hash", "b>d", "c>d"}},
			"{a[0,1] b[0,1] c[0,1] d[0,1]}", nil},
		{"fan-in", job{nodes: []string{"a:src:2", "b:src:2", "u:op:2", "sink:sink:2"}, edges: []string{"a>u", "b>u", "u>sink"}},
			"{a[0] b[0] u[0] sink[0]} {a[1] b[1] u[1] sink[1]}", nil},
		{"fan-out", job{nodes: []string{"src:src:2", "x:sink:2", "y:sink:2"}, edges: []string{"src>x", "src>y"}},
			"{src[0] x[0] y[0]} {src[1] x[1] y[1]}", nil},
		// Topological order of a, c, b, d gives a=v0, c=v1, b=v2, d=v3.
		{"disconnected pipelines", job{nodes: []string{"a:src:2", "b:sink:2", "c:src:1", "d:sink:1"}, edges: []string{"a>b:hash", "c>d"}},
			"{a[0,1] b[0,1]} {c[0] d[0]}",
			[]regionWant{{region: 0}, {region: 1}}},
		{"blocking hash splits every subtask", job{nodes: []string{"src:src:2", "sink:sink:2"}, edges: []string{"src>sink:hash:blocking"}},
			"{src[0]} {src[1]} {sink[0]} {sink[1]}",
			[]regionWant{
				{region: 0, consumers: "2 3"},
				{region: 2, blocking: "r0@src[0] r0@src[1]", inputs: "r0@src[0] r0@src[1]", producers: "0 1"},
				{region: 3, blocking: "r0@src[0] r0@src[1]", inputs: "r0@src[0] r0@src[1]", producers: "0 1"},
			}},
		{"blocking forward then pipelined", job{nodes: []string{"src:src:2", "agg:op:2", "sink:sink:2"}, edges: []string{"src>agg:forward:blocking", "agg>sink"}},
			"{src[0]} {src[1]} {agg[0] sink[0]} {agg[1] sink[1]}",
			[]regionWant{
				{region: 1, consumers: "3"},
				{region: 2, blocking: "r0@src[0]", inputs: "r0@src[0]", producers: "0"},
				{region: 3, blocking: "r0@src[1]", inputs: "r0@src[1]", producers: "1"},
			}},
		{"bounded batch stages", job{nodes: []string{"src:src:2", "agg:op:2", "fmt:op:2", "sink:sink:1"}, edges: []string{"src>agg:hash:blocking", "agg>fmt", "fmt>sink:rebalance:blocking"}},
			"{src[0]} {src[1]} {agg[0] fmt[0]} {agg[1] fmt[1]} {sink[0]}",
			[]regionWant{
				{region: 2, blocking: "r0@src[0] r0@src[1]", inputs: "r0@src[0] r0@src[1]", producers: "0 1", consumers: "4"},
				{region: 4, blocking: "r2@fmt[0] r2@fmt[1]", inputs: "r2@fmt[0] r2@fmt[1]", producers: "2 3"},
			}},
		{"blocking edge inside a region", job{nodes: []string{"a:src:1", "c:op:1", "b:sink:1"}, edges: []string{"a>b", "a>c:forward:blocking", "c>b"}},
			"{a[0] c[0] b[0]}",
			[]regionWant{{region: 0}}},
		// a=v0, c=v1, b=v2; r0 a>b, r1 a>c, r2 c>b. a[1] feeds c[0] through the blocking hash edge and a[0]
		// feeds c[1]: the two regions consume each other's blocking results.
		{"blocking results across regions both ways", job{nodes: []string{"a:src:2", "b:sink:2", "c:op:2"}, edges: []string{"a>b", "a>c:hash:blocking", "c>b"}},
			"{a[0] c[0] b[0]} {a[1] c[1] b[1]}",
			[]regionWant{
				{region: 0, blocking: "r1@a[1]", inputs: "r1@a[1]", producers: "1", consumers: "1"},
				{region: 1, blocking: "r1@a[0]", inputs: "r1@a[0]", producers: "0", consumers: "0"},
			}},
		{"approximate chain: a region per subtask", job{nodes: []string{"src:src:2", "map:op:2", "sink:sink:2"}, edges: []string{"src>map", "map>sink"}, approx: true},
			"{src[0]} {src[1]} {map[0]} {map[1]} {sink[0]} {sink[1]}",
			[]regionWant{
				{region: 0, consumers: "2"},
				{region: 2, inputs: "r0@src[0]", producers: "0", consumers: "4"},
			}},
		{"approximate hash", job{nodes: []string{"map:src:2", "sink:sink:2"}, edges: []string{"map>sink:hash"}, approx: true},
			"{map[0]} {map[1]} {sink[0]} {sink[1]}",
			[]regionWant{{region: 3, inputs: "r0@map[0] r0@map[1]", producers: "0 1"}}},
		{"approximate with a bounded edge", job{nodes: []string{"src:src:2", "map:op:2", "sink:sink:2"}, edges: []string{"src>map:forward:bounded", "map>sink"}, approx: true},
			"{src[0] map[0]} {src[1] map[1]} {sink[0]} {sink[1]}", nil},
		{"approximate and blocking", job{nodes: []string{"src:src:1", "map:op:2", "sink:sink:2"}, edges: []string{"src>map:rebalance:blocking", "map>sink"}, approx: true},
			"{src[0]} {map[0]} {map[1]} {sink[0]} {sink[1]}",
			[]regionWant{{region: 1, blocking: "r0@src[0]", inputs: "r0@src[0]", producers: "0", consumers: "3"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jg := tc.job.build(t)
			topo := ComputeRegions(jg)
			if got := fmtRegions(topo, allRegions(topo)); got != tc.regions {
				t.Fatalf("regions\n got %s\nwant %s", got, tc.regions)
			}
			checkTopologyInvariants(t, topo)
			for _, d := range tc.details {
				r := RegionID(d.region)
				for _, c := range []struct{ what, got, want string }{
					{"blocking inputs", fmtPartitions(jg, topo.BlockingInputs(r)), d.blocking},
					{"inputs", fmtPartitions(jg, topo.Inputs(r)), d.inputs},
					{"producer regions", fmtIDs(topo.ProducerRegions(r)), d.producers},
					{"consumer regions", fmtIDs(topo.ConsumerRegions(r)), d.consumers},
				} {
					if c.got != c.want {
						t.Errorf("region %d %s = %q, want %q", r, c.what, c.got, c.want)
					}
				}
			}
		})
	}
}

// checkTopologyInvariants checks what must hold for every topology: regions partition the subtasks, are
// numbered by smallest member, and lookups agree with each other.
func checkTopologyInvariants(t *testing.T, topo *Topology) {
	t.Helper()
	seen := map[ident.Subtask]bool{}
	var prevFirst ident.Subtask
	for r := 0; r < topo.NumRegions(); r++ {
		ms := topo.Members(RegionID(r))
		if len(ms) == 0 {
			t.Fatalf("region %d is empty", r)
		}
		for i, s := range ms {
			if i > 0 && compareSubtasks(ms[i-1], s) >= 0 {
				t.Fatalf("region %d members not sorted: %v", r, ms)
			}
			if seen[s] {
				t.Fatalf("subtask %s in two regions", s)
			}
			seen[s] = true
			if got, ok := topo.RegionOf(s); !ok || got != RegionID(r) {
				t.Fatalf("RegionOf(%s) = %d, %v; want %d", s, got, ok, r)
			}
		}
		if r > 0 && compareSubtasks(prevFirst, ms[0]) >= 0 {
			t.Fatalf("region %d numbered out of order", r)
		}
		prevFirst = ms[0]
		for _, p := range topo.BlockingInputs(RegionID(r)) {
			if e := topo.Graph().Edges[p.Result]; e.PartitionType != graph.Blocking {
				t.Fatalf("blocking input %s is %s", p, e.PartitionType)
			}
		}
	}
	if len(seen) != len(topo.Subtasks()) {
		t.Fatalf("regions cover %d of %d subtasks", len(seen), len(topo.Subtasks()))
	}
}

func TestTopologyLookupsOutOfRange(t *testing.T) {
	jg := job{nodes: []string{"src:src:2", "sink:sink:2"}, edges: []string{"src>sink"}}.build(t)
	topo := ComputeRegions(jg)
	for _, s := range []ident.Subtask{{Vertex: 0, Index: 2}, {Vertex: 0, Index: -1}, {Vertex: 2, Index: 0}, {Vertex: -1, Index: 0}} {
		if _, ok := topo.RegionOf(s); ok {
			t.Errorf("RegionOf(%s) found a region", s)
		}
		if topo.Contains(s) {
			t.Errorf("Contains(%s)", s)
		}
	}
	for _, r := range []RegionID{-1, 2} {
		if topo.Members(r) != nil || topo.Inputs(r) != nil || topo.BlockingInputs(r) != nil || topo.ProducerRegions(r) != nil || topo.ConsumerRegions(r) != nil {
			t.Errorf("region %d: lookups answered", r)
		}
	}
	if got := fmtIDs(topo.RegionsOf([]ident.Subtask{{Vertex: 1, Index: 1}, {Vertex: 9, Index: 0}, {Vertex: 0, Index: 1}, {Vertex: 0, Index: 0}})); got != "0 1" {
		t.Errorf("RegionsOf = %q", got)
	}
	// Lookups return copies.
	topo.Members(0)[0] = ident.Subtask{Vertex: 7}
	if topo.Members(0)[0] != (ident.Subtask{}) {
		t.Error("Members exposes internal state")
	}
}

func TestComputeRegionsPanicsOnMalformedGraph(t *testing.T) {
	cases := map[string]func(jg *graph.JobGraph){
		"vertex ID":      func(jg *graph.JobGraph) { jg.Vertices[1].ID = 5 },
		"partition type": func(jg *graph.JobGraph) { jg.Edges[0].PartitionType = 0 },
		"parallelism":    func(jg *graph.JobGraph) { jg.Vertices[0].Parallelism = 0 },
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			jg := job{nodes: []string{"src:src:2", "sink:sink:2"}, edges: []string{"src>sink"}}.build(t)
			spoil(jg)
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			ComputeRegions(jg)
		})
	}
}

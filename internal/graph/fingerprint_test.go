package graph

import (
	"testing"
)

// fingerprintJob builds the job every case of TestGraphFingerprint starts from: a chained source and map,
// a hash edge to a keyed operator chained with its sink, and a second, rebalanced sink, with origins.
func fingerprintJob(t *testing.T) *JobGraph {
	t.Helper()
	sg := build([]string{"src:src:2", "map:op:2", "sum:op:2", "sink:sink:2", "audit:sink:1"},
		[]string{"src>map", "map>sum:hash", "sum>sink", "map>audit"})
	for _, n := range sg.Nodes {
		n.Origin = "job.go:" + n.Name
	}
	jg, err := BuildJobGraph(sg, JobGraphOptions{Chaining: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(jg.Vertices) != 3 || len(jg.Edges) != 2 || len(jg.Vertices[0].ChainedEdges) == 0 {
		t.Fatalf("the base job lost its shape: %d vertices, %d edges", len(jg.Vertices), len(jg.Edges))
	}
	return jg
}

// TestGraphFingerprint: two builds of the same job have one fingerprint, and a change to any one field
// the fingerprint covers changes it.
func TestGraphFingerprint(t *testing.T) {
	base := Fingerprint(fingerprintJob(t))
	if again := Fingerprint(fingerprintJob(t)); again != base {
		t.Fatalf("two builds of the same job: fingerprints %x and %x", base, again)
	}
	cases := []struct {
		field  string
		change func(jg *JobGraph)
	}{
		{"job name", func(jg *JobGraph) { jg.Name = "other" }},
		{"vertex id", func(jg *JobGraph) { jg.Vertices[1].ID = 7 }},
		{"vertex name", func(jg *JobGraph) { jg.Vertices[1].Name = "sum2 -> sink" }},
		{"vertex parallelism", func(jg *JobGraph) { jg.Vertices[1].Parallelism = 3 }},
		{"vertex max parallelism", func(jg *JobGraph) { jg.Vertices[1].MaxParallelism = 64 }},
		{"vertex order", func(jg *JobGraph) { jg.Vertices[0], jg.Vertices[1] = jg.Vertices[1], jg.Vertices[0] }},
		{"a vertex more", func(jg *JobGraph) { jg.Vertices = append(jg.Vertices, &JobVertex{ID: 3, Name: "x"}) }},
		{"node id", func(jg *JobGraph) { jg.Vertices[0].Nodes[1].ID = 9 }},
		{"node name", func(jg *JobGraph) { jg.Vertices[0].Nodes[1].Name = "map2" }},
		{"node kind", func(jg *JobGraph) { jg.Vertices[1].Nodes[1].Kind = OperatorNode }},
		{"node parallelism", func(jg *JobGraph) { jg.Vertices[0].Nodes[1].Parallelism = 1 }},
		{"node max parallelism", func(jg *JobGraph) { jg.Vertices[0].Nodes[1].MaxParallelism = 256 }},
		{"node starts a chain", func(jg *JobGraph) { jg.Vertices[0].Nodes[1].StartsChain = true }},
		{"node origin", func(jg *JobGraph) { jg.Vertices[0].Nodes[1].Origin = "job.go:99" }},
		{"node origin missing", func(jg *JobGraph) { jg.Vertices[0].Nodes[1].Origin = "" }},
		{"a chained node fewer", func(jg *JobGraph) { jg.Vertices[1].Nodes = jg.Vertices[1].Nodes[:1] }},
		{"chained edge source", func(jg *JobGraph) { jg.Vertices[0].ChainedEdges[0].Source = 4 }},
		{"chained edge target", func(jg *JobGraph) { jg.Vertices[0].ChainedEdges[0].Target = 4 }},
		{"chained edge pattern", func(jg *JobGraph) { jg.Vertices[0].ChainedEdges[0].Pattern = Rescale }},
		{"chained edge pattern set", func(jg *JobGraph) { jg.Vertices[0].ChainedEdges[0].PatternSet = true }},
		{"a chained edge fewer", func(jg *JobGraph) { jg.Vertices[0].ChainedEdges = nil }},
		{"edge result id", func(jg *JobGraph) { jg.Edges[0].Result = 5 }},
		{"edge source vertex", func(jg *JobGraph) { jg.Edges[0].Source = jg.Vertices[2] }},
		{"edge target vertex", func(jg *JobGraph) { jg.Edges[0].Target = jg.Vertices[2] }},
		{"edge without a source", func(jg *JobGraph) { jg.Edges[0].Source = nil }},
		{"edge pattern", func(jg *JobGraph) { jg.Edges[0].Pattern = Broadcast }},
		{"edge partition type", func(jg *JobGraph) { jg.Edges[0].PartitionType = PipelinedApproximate }},
		{"edge input index", func(jg *JobGraph) { jg.Edges[0].InputIndex = 1 }},
		{"edge stream source", func(jg *JobGraph) { jg.Edges[0].Stream = &StreamEdge{Source: 0, Target: 2, Pattern: Hash} }},
		{"edge stream pattern set", func(jg *JobGraph) { s := *jg.Edges[0].Stream; s.PatternSet = true; jg.Edges[0].Stream = &s }},
		{"edge order", func(jg *JobGraph) { jg.Edges[0], jg.Edges[1] = jg.Edges[1], jg.Edges[0] }},
		{"an edge fewer", func(jg *JobGraph) { jg.Edges = jg.Edges[:1] }},
	}
	seen := map[[32]byte]string{base: "the base job"}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			jg := fingerprintJob(t)
			tc.change(jg)
			got := Fingerprint(jg)
			if got == base {
				t.Fatalf("changing the %s left the fingerprint as it was", tc.field)
			}
			if prev, dup := seen[got]; dup {
				t.Fatalf("changing the %s gave the fingerprint of %q", tc.field, prev)
			}
			seen[got] = tc.field
		})
	}
}

// TestGraphFingerprintIgnoresPayloads: operator code is the binary's; two builds hold different closures
// (payloads) for the same shape and must still agree.
func TestGraphFingerprintIgnoresPayloads(t *testing.T) {
	a, b := fingerprintJob(t), fingerprintJob(t)
	for i, v := range b.Vertices {
		for j, n := range v.Nodes {
			n.Payload = func() int { return i * j }
		}
	}
	for _, e := range b.Edges {
		e.Stream.Payload = struct{ x int }{1}
	}
	if Fingerprint(a) != Fingerprint(b) {
		t.Fatal("payloads changed the fingerprint")
	}
}

package graph

import (
	"fmt"
	"strings"

	"github.com/runnel-dev/runnel/internal/ident"
)

// JobVertex is one task after chaining: a chain of operators that runs in one goroutine per subtask.
type JobVertex struct {
	ID             ident.VertexID
	Name           string
	Nodes          []*StreamNode // head first, then the chained operators in topological order
	ChainedEdges   []*StreamEdge // edges inside the chain
	Parallelism    int
	MaxParallelism int
	Inputs         []*JobEdge // in the order of the head's inputs
	Outputs        []*JobEdge
}

// Head returns the first operator of the chain (the one network inputs feed).
func (v *JobVertex) Head() *StreamNode { return v.Nodes[0] }

// IsSource reports whether the vertex starts with a source.
func (v *JobVertex) IsSource() bool { return v.Nodes[0].Kind == SourceNode }

// UIDs returns the stable ids of the chain's operators, head first: the names of their states in a
// checkpoint.
func (v *JobVertex) UIDs() []string {
	uids := make([]string, len(v.Nodes))
	for i, n := range v.Nodes {
		uids[i] = n.UID()
	}
	return uids
}

// Contains reports whether the chain holds the node.
func (v *JobVertex) Contains(nodeID int) bool {
	for _, n := range v.Nodes {
		if n.ID == nodeID {
			return true
		}
	}
	return false
}

// JobEdge is a network connection between two vertices: an intermediate result.
type JobEdge struct {
	Result        ident.ResultID
	Source        *JobVertex
	Target        *JobVertex
	Pattern       Pattern
	PartitionType PartitionType
	// Stream is the operator-level edge this connection carries.
	Stream *StreamEdge
	// InputIndex is the position of the edge in Target.Inputs.
	InputIndex int
}

// JobGraph is the dataflow after chaining.
type JobGraph struct {
	Name     string
	Vertices []*JobVertex
	Edges    []*JobEdge
}

// Vertex returns the vertex with the given ID.
func (g *JobGraph) Vertex(id ident.VertexID) *JobVertex { return g.Vertices[id] }

// VertexOf returns the vertex containing the stream node, or nil.
func (g *JobGraph) VertexOf(nodeID int) *JobVertex {
	for _, v := range g.Vertices {
		if v.Contains(nodeID) {
			return v
		}
	}
	return nil
}

// VertexByOperator returns the vertex holding the operator with the given name, or nil.
func (g *JobGraph) VertexByOperator(name string) *JobVertex {
	for _, v := range g.Vertices {
		for _, n := range v.Nodes {
			if n.Name == name {
				return v
			}
		}
	}
	return nil
}

// ExchangeMode says which network edges are pipelined and which blocking.
type ExchangeMode uint8

const (
	// AllPipelined streams every edge (streaming jobs; the default).
	AllPipelined ExchangeMode = iota
	// AllBlocking makes every network edge blocking: each task runs to completion before its consumers
	// start, and every task is its own region (Flink's batch ALL_EDGES_BLOCKING). Bounded jobs only.
	AllBlocking
	// ForwardPipelined keeps forward and rescale edges pipelined and makes shuffles (hash, rebalance,
	// broadcast) blocking (Flink's FORWARD_EDGES_PIPELINED). Bounded jobs only.
	ForwardPipelined
)

func (m ExchangeMode) String() string {
	switch m {
	case AllPipelined:
		return "pipelined"
	case AllBlocking:
		return "blocking"
	case ForwardPipelined:
		return "forward-pipelined"
	}
	return fmt.Sprintf("exchange-mode(%d)", uint8(m))
}

// ParseExchangeMode parses "pipelined", "blocking" or "forward-pipelined".
func ParseExchangeMode(s string) (ExchangeMode, error) {
	for _, m := range []ExchangeMode{AllPipelined, AllBlocking, ForwardPipelined} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown exchange mode %q: valid modes are pipelined, blocking, forward-pipelined", s)
}

// JobGraphOptions control the translation.
type JobGraphOptions struct {
	// Exchange picks blocking edges; blocking edges split pipelined regions.
	Exchange ExchangeMode
	// Chaining fuses forward edges between operators of equal parallelism into one task.
	Chaining bool
	// PipelinedType is the partition type of pipelined edges: PipelinedBounded, or PipelinedApproximate for
	// approximate local recovery.
	PipelinedType PartitionType
}

// BuildJobGraph validates the stream graph and chains it into a job graph.
func BuildJobGraph(sg *StreamGraph, opts JobGraphOptions) (*JobGraph, error) {
	if err := sg.Validate(); err != nil {
		return nil, err
	}
	if opts.PipelinedType == 0 {
		opts.PipelinedType = PipelinedBounded
	}
	if !opts.PipelinedType.Pipelined() {
		return nil, fmt.Errorf("pipelined edges cannot have partition type %s", opts.PipelinedType)
	}
	// A default forward edge between different parallelisms becomes rebalance, as in Flink.
	for _, e := range sg.Edges {
		if e.Pattern == 0 {
			e.Pattern = Forward
		}
		if e.Pattern == Forward && sg.Node(e.Source).Parallelism != sg.Node(e.Target).Parallelism {
			e.Pattern = Rebalance
		}
	}
	chainable := func(e *StreamEdge) bool {
		s, t := sg.Node(e.Source), sg.Node(e.Target)
		return opts.Chaining && e.Pattern == Forward && !t.StartsChain &&
			s.Parallelism == t.Parallelism && s.MaxParallelism == t.MaxParallelism &&
			len(sg.inEdges(t.ID)) == 1
	}
	jg := &JobGraph{Name: sg.JobName}
	vertexOf := make(map[int]*JobVertex)
	order := sg.TopologicalOrder()
	for _, id := range order {
		if _, done := vertexOf[id]; done {
			continue
		}
		head := sg.Node(id)
		v := &JobVertex{ID: ident.VertexID(len(jg.Vertices)), Parallelism: head.Parallelism, MaxParallelism: head.MaxParallelism}
		var add func(n *StreamNode)
		add = func(n *StreamNode) {
			v.Nodes = append(v.Nodes, n)
			vertexOf[n.ID] = v
			for _, e := range sg.outEdges(n.ID) {
				if chainable(e) {
					v.ChainedEdges = append(v.ChainedEdges, e)
					add(sg.Node(e.Target))
				}
			}
		}
		add(head)
		names := make([]string, len(v.Nodes))
		for i, n := range v.Nodes {
			names[i] = n.Name
		}
		v.Name = strings.Join(names, " -> ")
		jg.Vertices = append(jg.Vertices, v)
	}
	for _, id := range order {
		for _, e := range sg.outEdges(id) {
			if chainable(e) {
				continue
			}
			src, dst := vertexOf[e.Source], vertexOf[e.Target]
			pt := opts.PipelinedType
			if opts.Exchange == AllBlocking || (opts.Exchange == ForwardPipelined && !e.Pattern.Pointwise()) {
				pt = Blocking
			}
			je := &JobEdge{
				Result: ident.ResultID(len(jg.Edges)), Source: src, Target: dst,
				Pattern: e.Pattern, PartitionType: pt, Stream: e,
				InputIndex: len(dst.Inputs),
			}
			src.Outputs = append(src.Outputs, je)
			dst.Inputs = append(dst.Inputs, je)
			jg.Edges = append(jg.Edges, je)
		}
	}
	return jg, nil
}

// Package graph holds the three shapes of a job: the StreamGraph the API builds (one node per operator), the
// JobGraph after operator chaining (one vertex per task), and the ExecutionGraph's parallel connections (which
// producer subtask feeds which consumer subtask). It also owns edge patterns, result partition types and the
// key-group arithmetic of hash partitioning.
//
// Everything here is pure data and pure functions: no goroutines, no I/O. Operator code is opaque to this
// package (StreamNode.Payload, StreamEdge.Payload); it must not import the network, task, scheduler or
// jobmaster packages, nor the public runnel package.
package graph

import (
	"fmt"
	"strings"
)

// Pattern is how records of an edge are distributed over the consumer's parallel subtasks.
type Pattern uint8

const (
	// Forward sends subtask i's records to subtask i of the consumer (equal parallelism required).
	Forward Pattern = iota + 1
	// Rebalance distributes records round-robin over all consumer subtasks.
	Rebalance
	// Rescale distributes round-robin over a local subset of consumers (pointwise connection).
	Rescale
	// Hash sends each record to the subtask owning its key's key group.
	Hash
	// Broadcast sends every record to every consumer subtask.
	Broadcast
)

func (p Pattern) String() string {
	switch p {
	case Forward:
		return "forward"
	case Rebalance:
		return "rebalance"
	case Rescale:
		return "rescale"
	case Hash:
		return "hash"
	case Broadcast:
		return "broadcast"
	}
	return fmt.Sprintf("pattern(%d)", uint8(p))
}

// Pointwise reports whether producers connect to a subset of consumers (forward, rescale) rather than to
// all of them.
func (p Pattern) Pointwise() bool { return p == Forward || p == Rescale }

// PartitionType is Flink's ResultPartitionType: how an edge's data is held between producer and consumer.
type PartitionType uint8

const (
	// PipelinedBounded streams data with a bounded number of buffers in flight (backpressure).
	PipelinedBounded PartitionType = iota + 1
	// PipelinedApproximate is PipelinedBounded made reconnectable: a consumer may go away and a new attempt
	// reconnect while the producer keeps running; data is dropped (and counted) while nobody reads.
	PipelinedApproximate
	// Blocking partitions are fully produced before consumption (bounded jobs).
	Blocking
)

func (t PartitionType) String() string {
	switch t {
	case PipelinedBounded:
		return "PIPELINED_BOUNDED"
	case PipelinedApproximate:
		return "PIPELINED_APPROXIMATE"
	case Blocking:
		return "BLOCKING"
	}
	return fmt.Sprintf("partition-type(%d)", uint8(t))
}

// Pipelined reports whether producer and consumer run at the same time (they share a pipelined region).
func (t PartitionType) Pipelined() bool { return t == PipelinedBounded || t == PipelinedApproximate }

// Reconnectable reports whether a consumer may reconnect to a still-running partition.
func (t PartitionType) Reconnectable() bool { return t == PipelinedApproximate }

// NodeKind says what role an operator plays.
type NodeKind uint8

const (
	// SourceNode produces records and has no inputs.
	SourceNode NodeKind = iota + 1
	// OperatorNode transforms records.
	OperatorNode
	// SinkNode consumes records and has no outputs.
	SinkNode
)

// StreamNode is one operator of the user's program.
type StreamNode struct {
	ID   int
	Name string
	// Uid is the operator's stable id: the name of its state in checkpoints and savepoints, which maps
	// that state back to the operator when the job is restored, whatever the chaining, the vertex ids or
	// the operator's name. Empty means the name (UID returns the effective one).
	Uid            string
	Kind           NodeKind
	Parallelism    int
	MaxParallelism int
	// StartsChain forbids chaining this node to its predecessor.
	StartsChain bool
	// Payload is the API layer's operator factory; opaque here.
	Payload any
	// Origin is where the user created the node (file:line), for error messages.
	Origin string
	// Inputs is the number of logical inputs of an operator: 2 for a two-input operator (a co-process
	// function, a join), whose edges say which input they feed (StreamEdge.TargetInput); else 1 (0 reads
	// as 1), whatever the number of edges (a union feeds one input through several).
	Inputs uint8
}

// UID returns the operator's stable id: Uid, or the name when none was set.
func (n *StreamNode) UID() string {
	if n.Uid != "" {
		return n.Uid
	}
	return n.Name
}

// StreamEdge connects two stream nodes.
type StreamEdge struct {
	Source, Target int
	Pattern        Pattern
	// PatternSet records that the user chose the pattern explicitly (a default forward edge silently
	// becomes rebalance when parallelisms differ; an explicit one is an error).
	PatternSet bool
	// TargetInput is the logical input of the target the edge feeds: 0, or 1 for the second input of a
	// two-input operator.
	TargetInput uint8
	// SideOutput names the side output of the source the edge carries (an OutputTag's id); empty for its
	// main output.
	SideOutput string
	// Payload is the API layer's record writer/reader factory for this edge; opaque here.
	Payload any
}

// StreamGraph is the logical dataflow built by the API.
type StreamGraph struct {
	JobName string
	Nodes   []*StreamNode
	Edges   []*StreamEdge
}

// Node returns the node with the given ID, or nil.
func (g *StreamGraph) Node(id int) *StreamNode {
	for _, n := range g.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

func (g *StreamGraph) inEdges(id int) []*StreamEdge {
	var es []*StreamEdge
	for _, e := range g.Edges {
		if e.Target == id {
			es = append(es, e)
		}
	}
	return es
}

func (g *StreamGraph) outEdges(id int) []*StreamEdge {
	var es []*StreamEdge
	for _, e := range g.Edges {
		if e.Source == id {
			es = append(es, e)
		}
	}
	return es
}

// Validate checks the graph for mistakes the API cannot rule out by construction, with messages that name
// the offending operator.
func (g *StreamGraph) Validate() error {
	if len(g.Nodes) == 0 {
		return fmt.Errorf("job %q has no operators: add a source and a sink", g.JobName)
	}
	names := make(map[string]*StreamNode)
	uids := make(map[string]*StreamNode)
	ids := make(map[int]*StreamNode)
	for _, n := range g.Nodes {
		if n.Name == "" {
			return fmt.Errorf("operator %d%s has no name", n.ID, at(n))
		}
		if prev, dup := names[n.Name]; dup {
			return fmt.Errorf("two operators are named %q%s%s: operator names must be unique in a job (they identify state and failure-injection targets); give one of them another name", n.Name, at(prev), at(n))
		}
		names[n.Name] = n
		if strings.HasPrefix(n.UID(), "\x00") {
			return fmt.Errorf("operator %q%s: its uid %q begins with a NUL byte, which names the task's own state", n.Name, at(n), n.UID())
		}
		if prev, dup := uids[n.UID()]; dup {
			return fmt.Errorf("operators %q%s and %q%s have the same uid %q: uids must be unique in a job (they name each operator's state in checkpoints); give one of them another Uid", prev.Name, at(prev), n.Name, at(n), n.UID())
		}
		uids[n.UID()] = n
		if _, dup := ids[n.ID]; dup {
			return fmt.Errorf("duplicate operator id %d", n.ID)
		}
		ids[n.ID] = n
		if n.Parallelism < 1 {
			return fmt.Errorf("operator %q%s: parallelism must be at least 1, got %d", n.Name, at(n), n.Parallelism)
		}
		if n.MaxParallelism < n.Parallelism {
			return fmt.Errorf("operator %q%s: parallelism %d exceeds max parallelism %d (the number of key groups); raise max parallelism", n.Name, at(n), n.Parallelism, n.MaxParallelism)
		}
	}
	for _, e := range g.Edges {
		s, t := ids[e.Source], ids[e.Target]
		if s == nil || t == nil {
			return fmt.Errorf("edge %d -> %d refers to an unknown operator", e.Source, e.Target)
		}
		if s.Kind == SinkNode {
			return fmt.Errorf("sink %q%s cannot have downstream operators", s.Name, at(s))
		}
		if t.Kind == SourceNode {
			return fmt.Errorf("source %q%s cannot have inputs", t.Name, at(t))
		}
		if e.TargetInput >= max(t.Inputs, 1) {
			return fmt.Errorf("edge %q -> %q feeds input %d of an operator with %d", s.Name, t.Name, e.TargetInput, max(t.Inputs, 1))
		}
		if e.Pattern == Forward && e.PatternSet && s.Parallelism != t.Parallelism {
			return fmt.Errorf("forward partitioning from %q (parallelism %d) to %q (parallelism %d) needs equal parallelism; use Rebalance or Rescale, or set equal parallelism", s.Name, s.Parallelism, t.Name, t.Parallelism)
		}
	}
	for _, n := range g.Nodes {
		in, out := len(g.inEdges(n.ID)), len(g.outEdges(n.ID))
		switch {
		case n.Kind == SourceNode && out == 0:
			return fmt.Errorf("source %q%s is not consumed by anything: connect it to an operator or a sink", n.Name, at(n))
		case n.Kind == OperatorNode && out == 0:
			return fmt.Errorf("the output of operator %q%s is not consumed by anything (a dangling stream): add a sink or remove the operator", n.Name, at(n))
		case n.Kind != SourceNode && in == 0:
			return fmt.Errorf("operator %q%s has no input", n.Name, at(n))
		}
		if n.Inputs == 2 {
			var fed [2]bool
			for _, e := range g.inEdges(n.ID) {
				fed[e.TargetInput] = true
			}
			if !fed[0] || !fed[1] {
				return fmt.Errorf("two-input operator %q%s has edges on only one of its inputs", n.Name, at(n))
			}
		}
	}
	if cyc := g.findCycle(); cyc != nil {
		return fmt.Errorf("the job graph has a cycle through %v: streaming jobs must be acyclic", cyc)
	}
	return nil
}

func at(n *StreamNode) string {
	if n.Origin == "" {
		return ""
	}
	return " (created at " + n.Origin + ")"
}

// findCycle returns the names along a cycle, or nil.
func (g *StreamGraph) findCycle() []string {
	const (
		white = iota
		grey
		black
	)
	color := make(map[int]int)
	var path []string
	var visit func(id int) []string
	visit = func(id int) []string {
		color[id] = grey
		path = append(path, g.Node(id).Name)
		for _, e := range g.outEdges(id) {
			switch color[e.Target] {
			case grey:
				return append(append([]string(nil), path...), g.Node(e.Target).Name)
			case white:
				if c := visit(e.Target); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		color[id] = black
		return nil
	}
	for _, n := range g.Nodes {
		if color[n.ID] == white {
			if c := visit(n.ID); c != nil {
				return c
			}
		}
	}
	return nil
}

// TopologicalOrder returns node IDs so that every edge points forward. The graph must be acyclic.
func (g *StreamGraph) TopologicalOrder() []int {
	indeg := make(map[int]int)
	for _, e := range g.Edges {
		indeg[e.Target]++
	}
	var order, queue []int
	for _, n := range g.Nodes {
		if indeg[n.ID] == 0 {
			queue = append(queue, n.ID)
		}
	}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		order = append(order, id)
		for _, e := range g.outEdges(id) {
			indeg[e.Target]--
			if indeg[e.Target] == 0 {
				queue = append(queue, e.Target)
			}
		}
	}
	return order
}

package graph

import "github.com/runnel-dev/runnel/internal/ident"

// ConsumersOf returns the consumer subtasks fed by producer subtask p over edge e, in subpartition order:
// subpartition i of p's partition goes to consumer ConsumersOf(e, p)[i].
func ConsumersOf(e *JobEdge, p int) []int {
	return consumers(e.Pattern, e.Source.Parallelism, e.Target.Parallelism, p)
}

// ProducersOf returns the producer subtasks that feed consumer subtask c over edge e, in input channel
// order: channel i of c's input gate reads producer ProducersOf(e, c)[i].
func ProducersOf(e *JobEdge, c int) []int {
	return producers(e.Pattern, e.Source.Parallelism, e.Target.Parallelism, c)
}

func consumers(pat Pattern, up, down, p int) []int {
	if !pat.Pointwise() {
		return seq(0, down)
	}
	if up >= down {
		// Several producers share one consumer: the consumer whose range holds p.
		for c := 0; c < down; c++ {
			lo, hi := c*up/down, (c+1)*up/down
			if p >= lo && p < hi {
				return []int{c}
			}
		}
		return nil
	}
	return seq(p*down/up, (p+1)*down/up)
}

func producers(pat Pattern, up, down, c int) []int {
	if !pat.Pointwise() {
		return seq(0, up)
	}
	if up >= down {
		return seq(c*up/down, (c+1)*up/down)
	}
	for p := 0; p < up; p++ {
		if c >= p*down/up && c < (p+1)*down/up {
			return []int{p}
		}
	}
	return nil
}

func seq(lo, hi int) []int {
	s := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

// SubpartitionIndex returns which subpartition of producer p's partition feeds consumer c over e, or -1.
func SubpartitionIndex(e *JobEdge, p, c int) int {
	for i, x := range ConsumersOf(e, p) {
		if x == c {
			return i
		}
	}
	return -1
}

// Subtasks lists every subtask of the job graph, vertex by vertex.
func (g *JobGraph) Subtasks() []ident.Subtask {
	var s []ident.Subtask
	for _, v := range g.Vertices {
		for i := 0; i < v.Parallelism; i++ {
			s = append(s, ident.Subtask{Vertex: v.ID, Index: int32(i)})
		}
	}
	return s
}

// Downstream returns the subtasks directly fed by s, over all its output edges.
func (g *JobGraph) Downstream(s ident.Subtask) []ident.Subtask {
	var out []ident.Subtask
	for _, e := range g.Vertex(s.Vertex).Outputs {
		for _, c := range ConsumersOf(e, int(s.Index)) {
			out = append(out, ident.Subtask{Vertex: e.Target.ID, Index: int32(c)})
		}
	}
	return out
}

// Upstream returns the subtasks that directly feed s.
func (g *JobGraph) Upstream(s ident.Subtask) []ident.Subtask {
	var in []ident.Subtask
	for _, e := range g.Vertex(s.Vertex).Inputs {
		for _, p := range ProducersOf(e, int(s.Index)) {
			in = append(in, ident.Subtask{Vertex: e.Source.ID, Index: int32(p)})
		}
	}
	return in
}

// KeyGroupOf maps a key hash to its key group in [0, maxParallelism).
func KeyGroupOf(hash uint64, maxParallelism int) int {
	return int(hash % uint64(maxParallelism))
}

// OperatorIndexOf returns the subtask that owns key group kg (Flink's assignment: contiguous ranges).
func OperatorIndexOf(kg, maxParallelism, parallelism int) int {
	return kg * parallelism / maxParallelism
}

// KeyGroupRange returns the key groups [start, end] owned by subtask i.
func KeyGroupRange(i, maxParallelism, parallelism int) (start, end int) {
	start = (i*maxParallelism + parallelism - 1) / parallelism
	end = ((i+1)*maxParallelism - 1) / parallelism
	return start, end
}

package scheduler

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// RegionID names a pipelined region of a Topology. Regions are numbered from 0 in the order of their smallest
// member, so the numbering depends on the job graph alone.
type RegionID int32

// Partition names one result partition independent of attempts: the output of one producer subtask for one
// intermediate result (one JobEdge). ident.PartitionID adds the producer's attempt.
type Partition struct {
	Result   ident.ResultID
	Producer ident.Subtask
}

// String formats the partition as "r2@v1[0]".
func (p Partition) String() string { return fmt.Sprintf("r%d@%s", p.Result, p.Producer) }

// Topology is a job graph's subtasks grouped into pipelined regions, with the connections between regions.
// It is immutable after ComputeRegions and safe to share.
type Topology struct {
	jg       *graph.JobGraph
	offset   []int           // offset[v] is the dense index of subtask (v, 0)
	subtasks []ident.Subtask // dense index -> subtask, sorted by vertex then index
	regionOf []RegionID      // dense index -> region
	regions  []region
}

type region struct {
	members   []ident.Subtask // sorted
	inputs    []Partition     // partitions consumed from other regions, any partition type; sorted
	blocking  []Partition     // the BLOCKING ones among inputs; sorted
	producers []RegionID      // regions producing inputs; sorted
	consumers []RegionID      // other regions consuming partitions of this one; sorted
}

// ComputeRegions groups the subtasks of jg into pipelined regions (see the package documentation). It does
// not modify jg, and the topology keeps referring to it: the caller must not change jg afterwards.
//
// It panics if jg is malformed in a way BuildJobGraph never produces: a vertex whose ID is not its position
// in jg.Vertices, a parallelism below 1, or an edge with an unknown partition type.
func ComputeRegions(jg *graph.JobGraph) *Topology {
	t := &Topology{jg: jg, offset: make([]int, len(jg.Vertices))}
	for i, v := range jg.Vertices {
		if int(v.ID) != i {
			panic(fmt.Sprintf("scheduler: vertex %q at position %d of the job graph has ID %d", v.Name, i, v.ID))
		}
		if v.Parallelism < 1 {
			panic(fmt.Sprintf("scheduler: vertex %q has parallelism %d", v.Name, v.Parallelism))
		}
		t.offset[i] = len(t.subtasks)
		for k := 0; k < v.Parallelism; k++ {
			t.subtasks = append(t.subtasks, ident.Subtask{Vertex: v.ID, Index: int32(k)})
		}
	}
	for _, e := range jg.Edges {
		switch e.PartitionType {
		case graph.PipelinedBounded, graph.PipelinedApproximate, graph.Blocking:
		default:
			panic(fmt.Sprintf("scheduler: edge %q -> %q has partition type %s", e.Source.Name, e.Target.Name, e.PartitionType))
		}
	}

	uf := newUnionFind(len(t.subtasks))
	for _, e := range jg.Edges {
		if joinsRegion(e.PartitionType) {
			t.eachConnection(e, func(p, c int) { uf.union(p, c) })
		}
	}
	// Dense indices are in subtask order, so numbering components as they are first met numbers them by
	// their smallest member and appends members in sorted order.
	t.regionOf = make([]RegionID, len(t.subtasks))
	idOfRoot := make(map[int]RegionID)
	for i, s := range t.subtasks {
		root := uf.find(i)
		id, ok := idOfRoot[root]
		if !ok {
			id = RegionID(len(t.regions))
			idOfRoot[root] = id
			t.regions = append(t.regions, region{})
		}
		t.regionOf[i] = id
		t.regions[id].members = append(t.regions[id].members, s)
	}

	for _, e := range jg.Edges {
		t.eachConnection(e, func(p, c int) {
			rp, rc := t.regionOf[p], t.regionOf[c]
			if rp == rc {
				return
			}
			part := Partition{Result: e.Result, Producer: t.subtasks[p]}
			cr := &t.regions[rc]
			cr.inputs = append(cr.inputs, part)
			if e.PartitionType == graph.Blocking {
				cr.blocking = append(cr.blocking, part)
			}
			cr.producers = append(cr.producers, rp)
			t.regions[rp].consumers = append(t.regions[rp].consumers, rc)
		})
	}
	for i := range t.regions {
		r := &t.regions[i]
		r.inputs = sortedPartitions(r.inputs)
		r.blocking = sortedPartitions(r.blocking)
		r.producers = sortedRegions(r.producers)
		r.consumers = sortedRegions(r.consumers)
	}
	return t
}

// joinsRegion reports whether a connection of this type puts producer and consumer into one region.
func joinsRegion(pt graph.PartitionType) bool { return pt.Pipelined() && !pt.Reconnectable() }

// eachConnection calls fn with the dense indices of every producer/consumer subtask pair that e connects.
func (t *Topology) eachConnection(e *graph.JobEdge, fn func(p, c int)) {
	src, dst := t.offset[e.Source.ID], t.offset[e.Target.ID]
	for p := 0; p < e.Source.Parallelism; p++ {
		for _, c := range graph.ConsumersOf(e, p) {
			fn(src+p, dst+c)
		}
	}
}

// index returns the dense index of s, or false if s is not a subtask of the graph.
func (t *Topology) index(s ident.Subtask) (int, bool) {
	if s.Vertex < 0 || int(s.Vertex) >= len(t.jg.Vertices) || s.Index < 0 || int(s.Index) >= t.jg.Vertices[s.Vertex].Parallelism {
		return 0, false
	}
	return t.offset[s.Vertex] + int(s.Index), true
}

// Graph returns the job graph the topology was computed from.
func (t *Topology) Graph() *graph.JobGraph { return t.jg }

// Subtasks returns every subtask of the job, sorted by vertex then index.
func (t *Topology) Subtasks() []ident.Subtask { return slices.Clone(t.subtasks) }

// Contains reports whether s is a subtask of the job.
func (t *Topology) Contains(s ident.Subtask) bool {
	_, ok := t.index(s)
	return ok
}

// NumRegions returns the number of regions; their IDs are 0 to NumRegions()-1.
func (t *Topology) NumRegions() int { return len(t.regions) }

func (t *Topology) valid(r RegionID) bool { return r >= 0 && int(r) < len(t.regions) }

// RegionOf returns the region holding s, or false if s is not a subtask of the job.
func (t *Topology) RegionOf(s ident.Subtask) (RegionID, bool) {
	i, ok := t.index(s)
	if !ok {
		return 0, false
	}
	return t.regionOf[i], true
}

// RegionsOf returns the regions holding any of the given subtasks, sorted and without duplicates. Subtasks
// that are not part of the job are ignored.
func (t *Topology) RegionsOf(subtasks []ident.Subtask) []RegionID {
	var rs []RegionID
	for _, s := range subtasks {
		if r, ok := t.RegionOf(s); ok {
			rs = append(rs, r)
		}
	}
	return sortedRegions(rs)
}

// Members returns the subtasks of region r, sorted by vertex then index; nil for an unknown region.
func (t *Topology) Members(r RegionID) []ident.Subtask {
	if !t.valid(r) {
		return nil
	}
	return slices.Clone(t.regions[r].members)
}

// Inputs returns the partitions that members of r consume from other regions, of any partition type
// (BLOCKING, or PIPELINED_APPROXIMATE under approximate recovery), sorted by result then producer.
func (t *Topology) Inputs(r RegionID) []Partition {
	if !t.valid(r) {
		return nil
	}
	return slices.Clone(t.regions[r].inputs)
}

// BlockingInputs returns the BLOCKING partitions that members of r consume from other regions (its consumed
// results), sorted by result then producer. A blocking result produced and consumed inside one region is not
// among them.
func (t *Topology) BlockingInputs(r RegionID) []Partition {
	if !t.valid(r) {
		return nil
	}
	return slices.Clone(t.regions[r].blocking)
}

// ProducerRegions returns the other regions that produce partitions r consumes, sorted.
func (t *Topology) ProducerRegions(r RegionID) []RegionID {
	if !t.valid(r) {
		return nil
	}
	return slices.Clone(t.regions[r].producers)
}

// ConsumerRegions returns the other regions that consume partitions r produces, sorted.
func (t *Topology) ConsumerRegions(r RegionID) []RegionID {
	if !t.valid(r) {
		return nil
	}
	return slices.Clone(t.regions[r].consumers)
}

func compareSubtasks(a, b ident.Subtask) int {
	if c := cmp.Compare(a.Vertex, b.Vertex); c != 0 {
		return c
	}
	return cmp.Compare(a.Index, b.Index)
}

func comparePartitions(a, b Partition) int {
	if c := cmp.Compare(a.Result, b.Result); c != 0 {
		return c
	}
	return compareSubtasks(a.Producer, b.Producer)
}

func sortedPartitions(ps []Partition) []Partition {
	slices.SortFunc(ps, comparePartitions)
	return slices.Clip(slices.Compact(ps))
}

func sortedRegions(rs []RegionID) []RegionID {
	slices.Sort(rs)
	return slices.Clip(slices.Compact(rs))
}

// unionFind is a disjoint-set forest over 0..n-1 with path halving and union by size.
type unionFind struct {
	parent, size []int
}

func newUnionFind(n int) *unionFind {
	u := &unionFind{parent: make([]int, n), size: make([]int, n)}
	for i := range u.parent {
		u.parent[i] = i
		u.size[i] = 1
	}
	return u
}

func (u *unionFind) find(x int) int {
	for u.parent[x] != x {
		u.parent[x] = u.parent[u.parent[x]]
		x = u.parent[x]
	}
	return x
}

func (u *unionFind) union(a, b int) {
	a, b = u.find(a), u.find(b)
	if a == b {
		return
	}
	if u.size[a] < u.size[b] {
		a, b = b, a
	}
	u.parent[b] = a
	u.size[a] += u.size[b]
}

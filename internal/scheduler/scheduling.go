package scheduler

import (
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// SchedulingStrategy decides which regions to deploy when. The caller deploys every member of each region a
// method returns, and reports the events the strategy asks for. A region is returned at most once between
// its deployment and its next restart. A strategy is a state machine owned by one goroutine of the caller;
// it is not safe for concurrent use.
type SchedulingStrategy interface {
	// Start returns the regions to deploy when the job starts. Later calls return nil.
	Start() []RegionID
	// OnResultFinished reports that producer has fully produced its partition of result (a BLOCKING
	// partition became consumable), and returns the regions that can be deployed now. The caller reports
	// each partition once per producer attempt and must not pass events of cancelled attempts; a report
	// for a producer whose region is not deployed, or a repeated one, is ignored.
	OnResultFinished(result ident.ResultID, producer ident.Subtask) []RegionID
	// OnRegionsRestarted reports that the given regions were cancelled for a restart: their partitions are
	// gone and will be produced again. It returns the regions, among them, that can be deployed again now;
	// the others follow from later OnResultFinished calls. Unknown region IDs are ignored.
	OnRegionsRestarted(regions []RegionID) []RegionID
}

// SchedulingMode names a scheduling strategy.
type SchedulingMode uint8

const (
	// EagerScheduling deploys every region at once; consumers of blocking results wait for them at runtime.
	EagerScheduling SchedulingMode = iota + 1
	// PipelinedRegionScheduling deploys a region once all its blocking inputs from other regions are fully
	// produced (Flink's PipelinedRegionSchedulingStrategy); see the package documentation for how
	// approximate edges and blocking cycles group regions.
	PipelinedRegionScheduling
)

var schedulingModes = []SchedulingMode{EagerScheduling, PipelinedRegionScheduling}

// String returns the mode's name: "eager" or "pipelined-region".
func (m SchedulingMode) String() string {
	switch m {
	case EagerScheduling:
		return "eager"
	case PipelinedRegionScheduling:
		return "pipelined-region"
	}
	return fmt.Sprintf("scheduling-mode(%d)", uint8(m))
}

// ParseSchedulingStrategy returns the scheduling mode named name ("eager" or "pipelined-region").
func ParseSchedulingStrategy(name string) (SchedulingMode, error) {
	for _, m := range schedulingModes {
		if name == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown scheduling strategy %q: valid values are eager, pipelined-region", name)
}

// NewSchedulingStrategy builds the scheduling strategy mode over topo.
func NewSchedulingStrategy(mode SchedulingMode, topo *Topology) (SchedulingStrategy, error) {
	switch mode {
	case EagerScheduling:
		return &eagerScheduling{topo: topo}, nil
	case PipelinedRegionScheduling:
		return newRegionScheduling(topo), nil
	}
	return nil, fmt.Errorf("unknown scheduling strategy %s: valid values are eager, pipelined-region", mode)
}

type eagerScheduling struct {
	topo    *Topology
	started bool
}

func (s *eagerScheduling) Start() []RegionID {
	if s.started {
		return nil
	}
	s.started = true
	out := make([]RegionID, s.topo.NumRegions())
	for i := range out {
		out[i] = RegionID(i)
	}
	return out
}

func (s *eagerScheduling) OnResultFinished(ident.ResultID, ident.Subtask) []RegionID { return nil }

func (s *eagerScheduling) OnRegionsRestarted(regions []RegionID) []RegionID {
	if !s.started {
		return nil
	}
	var out []RegionID
	for _, r := range regions {
		if s.topo.valid(r) {
			out = append(out, r)
		}
	}
	return sortedRegions(out)
}

// regionScheduling deploys groups of regions (see the package documentation) once every blocking partition
// the group consumes from outside itself has finished.
type regionScheduling struct {
	topo    *Topology
	started bool

	groupOf []int               // region -> group
	members [][]RegionID        // group -> its regions, sorted
	pending []int               // group -> number of its gates not finished
	gates   map[Partition][]int // gating partition -> groups it gates, sorted
	// produced lists, per region, the gating partitions its members produce.
	produced [][]Partition

	finished  map[Partition]bool
	scheduled []bool // region -> deployed and not restarted since
}

func newRegionScheduling(t *Topology) *regionScheduling {
	s := &regionScheduling{
		topo: t, groupOf: computeGroups(t), gates: make(map[Partition][]int),
		produced: make([][]Partition, t.NumRegions()), finished: make(map[Partition]bool),
		scheduled: make([]bool, t.NumRegions()),
	}
	ngroups := 0
	for _, g := range s.groupOf {
		ngroups = max(ngroups, g+1)
	}
	s.pending = make([]int, ngroups)
	s.members = make([][]RegionID, ngroups)
	for r, g := range s.groupOf {
		s.members[g] = append(s.members[g], RegionID(r))
	}
	perGroup := make([][]Partition, ngroups)
	for r := range t.regions {
		g := s.groupOf[r]
		for _, p := range t.regions[r].blocking {
			pr, _ := t.RegionOf(p.Producer)
			if s.groupOf[pr] != g {
				perGroup[g] = append(perGroup[g], p)
			}
		}
	}
	for g, ps := range perGroup {
		ps = sortedPartitions(ps)
		s.pending[g] = len(ps)
		for _, p := range ps {
			if _, ok := s.gates[p]; !ok {
				pr, _ := t.RegionOf(p.Producer)
				s.produced[pr] = append(s.produced[pr], p)
			}
			s.gates[p] = append(s.gates[p], g) // g ascends, so the list is sorted
		}
	}
	for r := range s.produced {
		s.produced[r] = sortedPartitions(s.produced[r])
	}
	return s
}

// computeGroups returns the scheduling group of every region: regions joined by PIPELINED_APPROXIMATE
// connections share a group, and so do groups on a cycle of BLOCKING connections. Groups are numbered from 0
// in the order of their smallest region.
func computeGroups(t *Topology) []int {
	n := t.NumRegions()
	uf := newUnionFind(n)
	for _, e := range t.jg.Edges {
		if e.PartitionType == graph.PipelinedApproximate {
			t.eachConnection(e, func(p, c int) { uf.union(int(t.regionOf[p]), int(t.regionOf[c])) })
		}
	}
	// Condense the approximate components and link them by blocking connections.
	succ := make([][]int, n) // indexed by union-find root
	for _, e := range t.jg.Edges {
		if e.PartitionType == graph.Blocking {
			t.eachConnection(e, func(p, c int) {
				a, b := uf.find(int(t.regionOf[p])), uf.find(int(t.regionOf[c]))
				if a != b {
					succ[a] = append(succ[a], b)
				}
			})
		}
	}
	for i := range succ {
		slices.Sort(succ[i])
		succ[i] = slices.Compact(succ[i])
	}
	scc := stronglyConnected(n, func(v int) bool { return uf.find(v) == v }, succ)
	groupOf := make([]int, n)
	idOf := make(map[int]int)
	for r := 0; r < n; r++ {
		c := scc[uf.find(r)]
		id, ok := idOf[c]
		if !ok {
			id = len(idOf)
			idOf[c] = id
		}
		groupOf[r] = id
	}
	return groupOf
}

// stronglyConnected labels the nodes among 0..n-1 for which isNode holds with the ID of their strongly
// connected component (Tarjan's algorithm) in the graph of succ; other labels are -1.
func stronglyConnected(n int, isNode func(int) bool, succ [][]int) []int {
	const unvisited = -1
	index := make([]int, n)
	low := make([]int, n)
	comp := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i], comp[i] = unvisited, -1
	}
	var stack []int
	next, ncomp := 0, 0
	var visit func(v int)
	visit = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range succ[v] {
			if index[w] == unvisited {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = ncomp
				if w == v {
					break
				}
			}
			ncomp++
		}
	}
	for v := 0; v < n; v++ {
		if isNode(v) && index[v] == unvisited {
			visit(v)
		}
	}
	return comp
}

func (s *regionScheduling) Start() []RegionID {
	if s.started {
		return nil
	}
	s.started = true
	var out []RegionID
	for r := range s.scheduled {
		out = s.deployIfReady(out, RegionID(r))
	}
	return out
}

// deployIfReady appends r to out and marks it deployed if it is not deployed and its group has no pending
// gates.
func (s *regionScheduling) deployIfReady(out []RegionID, r RegionID) []RegionID {
	if s.scheduled[r] || s.pending[s.groupOf[r]] > 0 {
		return out
	}
	s.scheduled[r] = true
	return append(out, r)
}

func (s *regionScheduling) OnResultFinished(result ident.ResultID, producer ident.Subtask) []RegionID {
	p := Partition{Result: result, Producer: producer}
	groups, ok := s.gates[p]
	if !ok || s.finished[p] {
		return nil
	}
	if pr, _ := s.topo.RegionOf(producer); !s.scheduled[pr] {
		return nil
	}
	s.finished[p] = true
	var out []RegionID
	for _, g := range groups {
		s.pending[g]--
		if s.pending[g] > 0 {
			continue
		}
		for _, r := range s.members[g] {
			out = s.deployIfReady(out, r)
		}
	}
	return sortedRegions(out)
}

func (s *regionScheduling) OnRegionsRestarted(regions []RegionID) []RegionID {
	var restarted []RegionID
	for _, r := range regions {
		if s.topo.valid(r) {
			restarted = append(restarted, r)
		}
	}
	restarted = sortedRegions(restarted)
	for _, r := range restarted {
		s.scheduled[r] = false
		for _, p := range s.produced[r] {
			if s.finished[p] {
				delete(s.finished, p)
				for _, g := range s.gates[p] {
					s.pending[g]++
				}
			}
		}
	}
	if !s.started {
		return nil
	}
	var out []RegionID
	for _, r := range restarted {
		out = s.deployIfReady(out, r)
	}
	return out
}

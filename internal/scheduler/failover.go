package scheduler

import (
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// FailoverStrategy decides which subtasks to cancel and redeploy when one fails. The strategies keep no state
// between calls; they are safe for concurrent use if their PartitionAvailable is.
type FailoverStrategy interface {
	// TasksToRestart returns the subtasks to restart after failed failed: failed itself and the others the
	// strategy adds, sorted by vertex then index, without duplicates. It returns nil if failed is not a
	// subtask of the job. The same inputs always give the same answer.
	TasksToRestart(failed ident.Subtask) []ident.Subtask
}

// PartitionAvailable reports whether the result partition of producer for result still exists and can be
// consumed again (Flink's ResultPartitionAvailabilityChecker). Failover strategies ask it about partitions
// that restarted subtasks consume from producers that are not restarted; when it says no, the producer must
// run again to regenerate the partition and is restarted too. A nil PartitionAvailable treats every partition
// as available. The job master passes nil: it releases a producer's partitions only when that producer
// fails, is cancelled or is restarted, and each of these restarts the producer too (or ends the job). No
// partition tracker exists yet that could learn of a partition lost otherwise (a TaskManager that went away).
type PartitionAvailable func(result ident.ResultID, producer ident.Subtask) bool

// FailoverMode names a failover strategy.
type FailoverMode uint8

const (
	// FullFailover restarts every subtask of the job.
	FullFailover FailoverMode = iota + 1
	// RegionFailover restarts the failed subtask's pipelined region, every region that consumes
	// (transitively) results of restarted regions, and the producer regions of unavailable partitions that
	// restarted regions consume (Flink's RestartPipelinedRegionFailoverStrategy).
	RegionFailover
	// ApproximateFailover restarts the failed subtask and every subtask transitively downstream of it;
	// nothing upstream, except the producer of a consumed partition that is no longer available (and its
	// downstream). It needs a job graph without PIPELINED_BOUNDED edges.
	ApproximateFailover
	// TaskFailover restarts only the failed subtask, exactly once: its producers keep what they sent in
	// in-flight logs, it replays its inputs in the order it had recorded, and its consumers drop what they
	// had already (docs/taskfailover.md). Like approximate failover it needs reconnectable edges.
	TaskFailover
)

var failoverModes = []FailoverMode{FullFailover, RegionFailover, ApproximateFailover, TaskFailover}

// String returns the mode's name as users write it and reports show it: "full", "region" or "approximate".
func (m FailoverMode) String() string {
	switch m {
	case FullFailover:
		return "full"
	case RegionFailover:
		return "region"
	case ApproximateFailover:
		return "approximate"
	case TaskFailover:
		return "task"
	}
	return fmt.Sprintf("failover-mode(%d)", uint8(m))
}

// ParseFailoverStrategy returns the failover mode named name ("full", "region" or "approximate").
func ParseFailoverStrategy(name string) (FailoverMode, error) {
	for _, m := range failoverModes {
		if name == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown failover strategy %q: valid values are full, region, approximate, task", name)
}

// NewFailoverStrategy builds the failover strategy mode over topo. available may be nil (see
// PartitionAvailable). Approximate failover fails on a graph with PIPELINED_BOUNDED edges: restarting only
// the consumer of a partition that cannot be reconnected would leave its producer stuck.
func NewFailoverStrategy(mode FailoverMode, topo *Topology, available PartitionAvailable) (FailoverStrategy, error) {
	if available == nil {
		available = func(ident.ResultID, ident.Subtask) bool { return true }
	}
	switch mode {
	case FullFailover:
		return &fullFailover{topo: topo}, nil
	case RegionFailover:
		return &regionFailover{topo: topo, available: available}, nil
	case ApproximateFailover:
		for _, e := range topo.jg.Edges {
			if e.PartitionType == graph.PipelinedBounded {
				return nil, fmt.Errorf("approximate failover needs reconnectable edges, but the edge from %q to %q is %s: build the job graph with PipelinedType PipelinedApproximate (CheckpointConfig.ApproximateLocalRecovery), or use region failover",
					e.Source.Name, e.Target.Name, e.PartitionType)
			}
		}
		return &approximateFailover{topo: topo, available: available}, nil
	case TaskFailover:
		for _, e := range topo.jg.Edges {
			if e.PartitionType == graph.PipelinedBounded {
				return nil, fmt.Errorf("task failover needs reconnectable edges, but the edge from %q to %q is %s: build the job graph with PipelinedType PipelinedApproximate, or use region failover",
					e.Source.Name, e.Target.Name, e.PartitionType)
			}
		}
		return &taskFailover{topo: topo}, nil
	}
	return nil, fmt.Errorf("unknown failover strategy %s: valid values are full, region, approximate, task", mode)
}

// taskFailover restarts the failed subtask alone.
type taskFailover struct {
	topo *Topology
}

func (f *taskFailover) TasksToRestart(failed ident.Subtask) []ident.Subtask {
	if !f.topo.Contains(failed) {
		return nil
	}
	return []ident.Subtask{failed}
}

type fullFailover struct {
	topo *Topology
}

func (f *fullFailover) TasksToRestart(failed ident.Subtask) []ident.Subtask {
	if !f.topo.Contains(failed) {
		return nil
	}
	return f.topo.Subtasks()
}

type regionFailover struct {
	topo      *Topology
	available PartitionAvailable
}

func (f *regionFailover) TasksToRestart(failed ident.Subtask) []ident.Subtask {
	start, ok := f.topo.RegionOf(failed)
	if !ok {
		return nil
	}
	visited := make([]bool, f.topo.NumRegions())
	queue := []RegionID{start}
	visited[start] = true
	visit := func(r RegionID) {
		if !visited[r] {
			visited[r] = true
			queue = append(queue, r)
		}
	}
	for len(queue) > 0 {
		r := &f.topo.regions[queue[0]]
		queue = queue[1:]
		// A partition the region needs again that is gone must be regenerated by its producer.
		for _, p := range r.inputs {
			pr := f.topo.regionOf[f.topo.offset[p.Producer.Vertex]+int(p.Producer.Index)]
			if !visited[pr] && !f.available(p.Result, p.Producer) {
				visit(pr)
			}
		}
		// The region's results will be produced anew, so whoever consumes them restarts too.
		for _, c := range r.consumers {
			visit(c)
		}
	}
	var out []ident.Subtask
	for r, v := range visited {
		if v {
			out = append(out, f.topo.regions[r].members...)
		}
	}
	slices.SortFunc(out, compareSubtasks)
	return out
}

type approximateFailover struct {
	topo      *Topology
	available PartitionAvailable
}

func (f *approximateFailover) TasksToRestart(failed ident.Subtask) []ident.Subtask {
	start, ok := f.topo.index(failed)
	if !ok {
		return nil
	}
	t := f.topo
	visited := make([]bool, len(t.subtasks))
	queue := []int{start}
	visited[start] = true
	visit := func(i int) {
		if !visited[i] {
			visited[i] = true
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		s := t.subtasks[queue[0]]
		queue = queue[1:]
		v := t.jg.Vertex(s.Vertex)
		for _, e := range v.Outputs {
			for _, c := range graph.ConsumersOf(e, int(s.Index)) {
				visit(t.offset[e.Target.ID] + c)
			}
		}
		for _, e := range v.Inputs {
			for _, p := range graph.ProducersOf(e, int(s.Index)) {
				i := t.offset[e.Source.ID] + p
				if !visited[i] && !f.available(e.Result, t.subtasks[i]) {
					visit(i)
				}
			}
		}
	}
	var out []ident.Subtask
	for i, v := range visited {
		if v {
			out = append(out, t.subtasks[i])
		}
	}
	return out
}

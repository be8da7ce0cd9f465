package runnel_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/internal/cluster"
)

// TestFailoversLeaveNoMemoryBehind fails one subtask 200 times under approximate recovery with immediate
// restarts, over TCP between two TaskManagers, and holds the tables that grew with every attempt to the
// attempts that still run: the TaskManagers' task tables and partition managers, sampled after a warm-up
// and at the end, stay within the live subtasks, and the heap after a GC grows by no more than a small
// bound per failover (what is left is the job master's failover reports, kept for the job's report).
func TestFailoversLeaveNoMemoryBehind(t *testing.T) {
	const (
		failovers          = 200
		warmup             = 20
		every              = 100 // records of map[0] between two failures
		subtasks           = 6   // source, map and sink at parallelism 2
		heapPerFailoverMax = 4 << 10
	)
	type sample struct {
		heap              uint64
		tasks, partitions int
	}
	var mc *cluster.MiniCluster
	defer runnel.OnClusterStarted(func(c *cluster.MiniCluster) { mc = c })()
	measure := func() sample {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s := sample{heap: ms.HeapAlloc}
		for _, tm := range mc.TMs {
			s.tasks += tm.NumTasks()
			s.partitions += tm.NumPartitions()
		}
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var seen, fired atomic.Int64
	var first, last sample
	env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithParallelism(2), runnel.WithChaining(false),
		runnel.WithTaskManagers(2), runnel.WithFailover("approximate"),
		runnel.WithRestartStrategy("fixed-delay:attempts=100000,delay=0s"))
	// Source subtask i emits i, i+2, i+4, ...; forward edges bring the even values to map[0] alone.
	src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) int64 { return int64(2*s) + int64(sub) },
		connector.GeneratorOptions{RatePerSubtask: 200_000})).Name("source")
	m := runnel.Map(src.Forward(), func(v int64) (int64, error) {
		if v%2 != 0 || seen.Add(1)%every != 0 || fired.Load() >= failovers {
			return v, nil
		}
		switch fired.Add(1) {
		case warmup:
			first = measure()
		case failovers:
			last = measure()
			cancel()
			return v, nil
		}
		return 0, errors.New("planned failure")
	}).Name("map")
	m.Rebalance().SinkTo(connector.Discard[int64]()).Name("sink")
	res, err := env.Execute(ctx, "failovers")
	if err != nil || res.Status != "CANCELED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if n := len(res.Failovers); n != failovers-1 {
		t.Fatalf("%d failovers, want %d", n, failovers-1)
	}
	for _, s := range []sample{first, last} {
		// Beyond the attempts that run, only those whose goroutine is returning may be held for a moment.
		if s.tasks > 2*subtasks || s.partitions > 2*subtasks {
			t.Errorf("the TaskManagers hold %d tasks and %d partitions for %d subtasks", s.tasks, s.partitions, subtasks)
		}
	}
	grown := int64(last.heap) - int64(first.heap)
	perFailover := grown / (failovers - warmup)
	t.Logf("heap %d -> %d bytes over %d failovers: %d bytes each; tasks %d -> %d, partitions %d -> %d",
		first.heap, last.heap, failovers-warmup, perFailover, first.tasks, last.tasks, first.partitions, last.partitions)
	if perFailover > heapPerFailoverMax {
		t.Errorf("the heap grew by %d bytes per failover, over the bound of %d", perFailover, heapPerFailoverMax)
	}
}

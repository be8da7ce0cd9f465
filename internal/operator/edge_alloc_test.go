package operator

import (
	"log/slog"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/task"
)

// keyedRow is a record with a string, so that the writer takes its codec's path (not the flat one).
type keyedRow struct {
	Key  int64
	Name string
}

// TestWriterAllocatesNothing: a hash edge's writer hands records on without allocating, one by one
// (Collect) and in batches (CollectBatch): neither the record nor a pointer to it goes to the heap on its
// way through the key's hash function and the codec.
func TestWriterAllocatesNothing(t *testing.T) {
	pool := network.NewBufferPool("producer", network.MinBufferSize*8, 64)
	t.Cleanup(pool.Destroy)
	p, err := network.NewResultPartition(ident.PartitionID{}, network.PartitionOptions{Subpartitions: 2}, pool, make(chan struct{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Release)
	rt := &task.Runtime{Info: deploy.Info{Parallelism: 1, MaxParallelism: 128}, Counters: task.NewCounters(),
		Logger: slog.Default(), Clock: clockwork.NewFakeClock()}
	spec := &EdgeSpec[keyedRow]{Codec: codec.MustStruct[keyedRow](),
		Hash: func(v *keyedRow, scratch []byte) (uint64, []byte) { return uint64(v.Key) * 0x9e3779b97f4a7c15, scratch }}
	e := &graph.JobEdge{Source: &graph.JobVertex{Name: "a", Parallelism: 1, MaxParallelism: 128},
		Target: &graph.JobVertex{Name: "b", Parallelism: 2, MaxParallelism: 128}, Pattern: graph.Hash}
	wa, err := spec.NewWriter(NewContext(rt, "w"), p, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := wa.(*writer[keyedRow])
	batch := []keyedRow{{1, "one"}, {2, "two"}, {3, "three"}, {4, "four"}}
	w.CollectBatch(batch) // the first records size the writer's scratch
	if n := testing.AllocsPerRun(50, func() { w.Collect(keyedRow{Key: 5, Name: "five"}) }); n != 0 {
		t.Errorf("Collect: %v allocations per record", n)
	}
	if n := testing.AllocsPerRun(50, func() { w.CollectBatch(batch) }); n != 0 {
		t.Errorf("CollectBatch: %v allocations per batch", n)
	}
}

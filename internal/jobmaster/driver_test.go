package jobmaster

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gocloud.dev/blob/memblob"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/checkpoint/errorbucket"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/task"
)

// fakeTM runs no task: every attempt it is given reports RUNNING and then FINISHED with 7 records in and
// out, from a goroutine it owns and waits for in stop.
type fakeTM struct {
	mu     sync.Mutex
	setups int
	wg     sync.WaitGroup
}

func (f *fakeTM) Name() string        { return "fake" }
func (f *fakeTM) DataAddress() string { return "127.0.0.1:1" }
func (f *fakeTM) Slots() int          { return 4 }
func (f *fakeTM) Submit(cfg task.Config, report func(task.Update)) error {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		report(task.Update{Attempt: cfg.Info.Attempt, State: task.Running})
		report(task.Update{Attempt: cfg.Info.Attempt, State: task.Finished, RecordsIn: 7, RecordsOut: 7})
	}()
	return nil
}
func (f *fakeTM) Cancel(ident.Attempt)                                       {}
func (f *fakeTM) Counters(ident.Attempt) (uint64, uint64, bool)              { return 0, 0, false }
func (f *fakeTM) TriggerCheckpoint(ident.Attempt, int64, int64, uint32) bool { return false }
func (f *fakeTM) AbortCheckpoint(ident.Attempt, int64)                       {}
func (f *fakeTM) NotifyCheckpointComplete(ident.Attempt, int64)              {}
func (f *fakeTM) SetupJob([network.JobIDSize]byte, []byte) {
	f.mu.Lock()
	f.setups++
	f.mu.Unlock()
}
func (f *fakeTM) ReleasePartitions(ident.Attempt) {}
func (f *fakeTM) SubpartitionStats(ident.PartitionID, int) (network.SubpartitionStats, bool) {
	return network.SubpartitionStats{}, false
}

// chained is source → sink at parallelism 2, chained into one vertex.
func chained(t *testing.T) *graph.JobGraph {
	t.Helper()
	sg := &graph.StreamGraph{JobName: "driver", Nodes: []*graph.StreamNode{
		{ID: 1, Name: "source", Kind: graph.SourceNode, Parallelism: 2, MaxParallelism: 2},
		{ID: 2, Name: "sink", Kind: graph.SinkNode, Parallelism: 2, MaxParallelism: 2},
	}, Edges: []*graph.StreamEdge{{Source: 1, Target: 2, Pattern: graph.Forward}}}
	jg, err := graph.BuildJobGraph(sg, graph.JobGraphOptions{Chaining: true})
	if err != nil {
		t.Fatal(err)
	}
	return jg
}

// TestDriverRunsAJobAndStopsItsGoroutines runs a job to its end on a TaskManager that only reports, and
// checks the snapshots before, during and after Run, and that every goroutine of the driver ended with Run.
func TestDriverRunsAJobAndStopsItsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	tm := &fakeTM{}
	d, err := NewDriver(Config{Job: chained(t), TaskManagers: []TaskManager{tm}, Logger: slog.New(slog.DiscardHandler),
		ChainFor: func(*graph.JobVertex) task.ChainFactory { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Snapshot(); s.Status != StatusCreated {
		t.Fatalf("before Run: %s", s.Status)
	}
	snap := d.Run(context.Background())
	tm.wg.Wait()
	if snap.Status != StatusFinished || snap.Vertices[0].RecordsOut != 14 {
		t.Fatalf("job %s, %d records out: %v", snap.Status, snap.Vertices[0].RecordsOut, snap.Err)
	}
	if s := d.Snapshot(); s.Status != StatusFinished || s.Ended != snap.Ended {
		t.Fatalf("after Run: %s, ended %v, want the final snapshot", s.Status, s.Ended)
	}
	if tm.setups != 1 {
		t.Fatalf("%d SetupJob calls, want 1", tm.setups)
	}
}

// TestStorageOpsHaveDeadlines hangs the storage's first list: the NextID op fails by the storage timeout
// with the context's error, so the job fails saying so instead of waiting for the store.
func TestStorageOpsHaveDeadlines(t *testing.T) {
	defer goleak.VerifyNone(t)
	eb := errorbucket.Wrap(checkpoint.BlobBucket(memblob.OpenBucket(nil)))
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpList, Hang: true, Times: 1})
	cc := checkpoint.DefaultConfig()
	d, err := NewDriver(Config{Job: chained(t), TaskManagers: []TaskManager{&fakeTM{}}, Logger: slog.New(slog.DiscardHandler),
		ChainFor: func(*graph.JobVertex) task.ChainFactory { return nil }, Checkpoint: &cc,
		Storage: checkpoint.NewStorage(eb, "mem://hang"), StorageTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	snap := d.Run(context.Background())
	if snap.Status != StatusFailed || !errors.Is(snap.Err, context.DeadlineExceeded) || !strings.Contains(snap.Err.Error(), "checkpoint storage") {
		t.Fatalf("job %s: %v; want FAILED by the storage's deadline", snap.Status, snap.Err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the job took %s to fail", d)
	}
}

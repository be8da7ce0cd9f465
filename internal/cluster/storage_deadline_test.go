package cluster_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/checkpoint/errorbucket"
	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/task"
)

// TestStorageThatStopsAnsweringFailsTheCallNotTheJobMaster makes the checkpoint storage hang on the first
// commits of checkpoint metadata: every storage call of the job master has a deadline, so those checkpoints
// fail (tolerated) and the job goes on to finish with a later one, instead of the job master's loop waiting
// for the store forever.
func TestStorageThatStopsAnsweringFailsTheCallNotTheJobMaster(t *testing.T) {
	const total = 200_000
	tm, err := cluster.NewTaskManager(cluster.TaskManagerConfig{Name: "tm", Slots: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tm.Shutdown() })
	eb := errorbucket.Wrap(checkpoint.BlobBucket(memblob.OpenBucket(nil)))
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: "_metadata", Hang: true, Times: 2})
	storage := checkpoint.NewStorage(eb, "mem://hanging")
	jg := sourceToSink(t, "hanging-storage", graph.Forward, graph.JobGraphOptions{})
	cc := checkpoint.DefaultConfig()
	cc.IntervalMillis, cc.TolerableFailed = 20, 10
	chainFor := func(v *graph.JobVertex) task.ChainFactory {
		return func(rt *task.Runtime) (task.Chain, error) {
			if v.IsSource() {
				return &sequenceSource{rt: rt, total: total}, nil
			}
			return &checkingSink{rt: rt, progress: func(int32, uint64, error) {}}, nil
		}
	}
	disp := connect(t, jobmaster.DispatcherConfig{}, &testCatalog{jg: jg, chainFor: chainFor, store: storage}, tm)
	jm, err := jobmaster.NewDriver(jobmaster.Config{
		Job: jg, Dispatcher: disp, RequireSlots: true, Logger: slog.New(slog.DiscardHandler),
		Checkpoint: &cc, Storage: storage, StorageTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan jobmaster.Snapshot, 1)
	go func() { done <- jm.Run(ctx) }()
	var snap jobmaster.Snapshot
	select {
	case snap = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the job master is still waiting for the storage after 15 s")
	}
	if snap.Status != jobmaster.StatusFinished {
		t.Fatalf("job %s: %v", snap.Status, snap.Err)
	}
	if eb.Hits() != 2 || snap.Checkpoints == nil || snap.Checkpoints.Failed < 2 || snap.Checkpoints.Completed == 0 {
		t.Fatalf("%d hung commits, checkpoints %+v: want 2 failed by the deadline and a later one completed", eb.Hits(), snap.Checkpoints)
	}
}

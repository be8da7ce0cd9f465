package cluster_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/scheduler"
	"github.com/runnel-dev/runnel/internal/task"
)

// reentrantTM is a real TaskManager whose every method first blocks until the driver's Snapshot answers,
// which its loop makes: if the loop itself made the call, or waited for it, the snapshot would wait for the
// call to return. The watchdog records such a call instead of deadlocking.
type reentrantTM struct {
	*cluster.TaskManager
	jm func() *jobmaster.Driver

	mu        sync.Mutex
	underLock []string // the calls during which no snapshot was answered
	calls     int
	watchdog  time.Duration
}

func (r *reentrantTM) probe(method string) {
	jm := r.jm()
	if jm == nil {
		return
	}
	done := make(chan struct{})
	go func() { jm.Snapshot(); close(done) }()
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	select {
	case <-done:
	case <-time.After(r.watchdog):
		r.mu.Lock()
		r.underLock = append(r.underLock, method)
		r.mu.Unlock()
	}
}

func (r *reentrantTM) Submit(cfg task.Config, report func(task.Update)) error {
	r.probe("Submit")
	return r.TaskManager.Submit(cfg, report)
}
func (r *reentrantTM) Cancel(a ident.Attempt) { r.probe("Cancel"); r.TaskManager.Cancel(a) }
func (r *reentrantTM) Counters(a ident.Attempt) (uint64, uint64, bool) {
	r.probe("Counters")
	return r.TaskManager.Counters(a)
}
func (r *reentrantTM) TriggerCheckpoint(a ident.Attempt, id, ts int64, flags uint32) bool {
	r.probe("TriggerCheckpoint")
	return r.TaskManager.TriggerCheckpoint(a, id, ts, flags)
}
func (r *reentrantTM) AbortCheckpoint(a ident.Attempt, id int64) {
	r.probe("AbortCheckpoint")
	r.TaskManager.AbortCheckpoint(a, id)
}
func (r *reentrantTM) NotifyCheckpointComplete(a ident.Attempt, id int64) {
	r.probe("NotifyCheckpointComplete")
	r.TaskManager.NotifyCheckpointComplete(a, id)
}
func (r *reentrantTM) ReleasePartitions(a ident.Attempt) {
	r.probe("ReleasePartitions")
	r.TaskManager.ReleasePartitions(a)
}
func (r *reentrantTM) SubpartitionStats(p ident.PartitionID, sub int) (network.SubpartitionStats, bool) {
	r.probe("SubpartitionStats")
	return r.TaskManager.SubpartitionStats(p, sub)
}

// failingSink counts what it gets (a restarted attempt of an approximate channel starts mid-stream) and
// fails its first attempt after failAfter records.
type failingSink struct {
	checkingSink
	seen, failAfter uint64
}

func (c *failingSink) ProcessBuffer(_ int, dec *network.RecordDecoder) (int, error) {
	n := 0
	for {
		rec, err := dec.Next()
		if err != nil || rec == nil {
			return n, err
		}
		n++
		c.seen++
		if c.rt.Info.Attempt.Number == 0 && c.seen == c.failAfter {
			return n, errors.New("injected sink failure")
		}
	}
}

// TestBlockedTaskManagerCallDoesNotStallSnapshots runs a job with checkpoints and an approximate failover
// (so that deployment, cancellation, counters, checkpoint messages, partition release and the loss
// baseline's subpartition statistics are all asked of the TaskManager), every call blocking until a
// snapshot of the job was taken, and requires that the loop answered the snapshot each time: a TaskManager
// that is slow to answer holds up its own messages, never the loop.
func TestBlockedTaskManagerCallDoesNotStallSnapshots(t *testing.T) {
	real, err := cluster.NewTaskManager(cluster.TaskManagerConfig{Name: "tm", Slots: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = real.Shutdown() })
	var (
		jmMu sync.Mutex
		jmp  *jobmaster.Driver
	)
	tm := &reentrantTM{TaskManager: real, watchdog: 2 * time.Second, jm: func() *jobmaster.Driver {
		jmMu.Lock()
		defer jmMu.Unlock()
		return jmp
	}}
	jg := sourceToSink(t, "no-lock", graph.Rebalance, graph.JobGraphOptions{PipelinedType: graph.PipelinedApproximate})
	cc := checkpoint.DefaultConfig()
	cc.IntervalMillis = 10
	restart, err := scheduler.ParseRestartStrategy("fixed-delay:attempts=2,delay=0s")
	if err != nil {
		t.Fatal(err)
	}
	jm, err := jobmaster.NewDriver(jobmaster.Config{
		Job: jg, TaskManagers: []jobmaster.TaskManager{tm}, Logger: slog.New(slog.DiscardHandler),
		Checkpoint: &cc, Storage: checkpoint.NewStorage(checkpoint.BlobBucket(memblob.OpenBucket(nil)), "mem://no-lock"),
		Failover: scheduler.ApproximateFailover, Restart: restart,
		ChainFor: func(v *graph.JobVertex) task.ChainFactory {
			return func(rt *task.Runtime) (task.Chain, error) {
				if v.IsSource() {
					return &sequenceSource{rt: rt, total: 300_000}, nil
				}
				return &failingSink{checkingSink: checkingSink{rt: rt}, failAfter: 50_000}, nil
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	jmMu.Lock()
	jmp = jm
	jmMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	snap := jm.Run(ctx)
	if snap.Status != jobmaster.StatusFinished || len(snap.Failovers) != 1 {
		t.Fatalf("job %s with %d failovers: %v", snap.Status, len(snap.Failovers), snap.Err)
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.calls == 0 {
		t.Fatal("the TaskManager was never called")
	}
	if len(tm.underLock) > 0 {
		t.Fatalf("the loop did not answer a snapshot while the TaskManager's %v blocked (of %d calls)", tm.underLock, tm.calls)
	}
}

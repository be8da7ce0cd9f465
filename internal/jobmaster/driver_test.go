package jobmaster

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gocloud.dev/blob/memblob"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/checkpoint/errorbucket"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc"
)

// fakeTM speaks the TaskManager's side of a session and runs no task: every attempt it is given reports
// RUNNING and then FINISHED with 7 records in and out. It counts the job setups it was sent.
type fakeTM struct {
	setups atomic.Int32
	wg     sync.WaitGroup
	// ack makes its attempts run until cancelled and acknowledge every checkpoint (with no state);
	// notified counts the completions they hear.
	ack      bool
	notified atomic.Int32
}

// attach registers a fakeTM with 4 slots on d; it serves until the session ends, which d.Close does.
func (f *fakeTM) attach(t *testing.T, d *Dispatcher) {
	jm, tm := rpc.Pipe()
	d.Attach(jm)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		_ = tm.Send(protocol.Envelope{Body: protocol.Register{Version: protocol.Version, Name: "fake", Slots: 4, DataAddress: "127.0.0.1:1"}})
		for {
			env, err := tm.Recv()
			if err != nil {
				return
			}
			switch m := env.Body.(type) {
			case protocol.SetupJob:
				f.setups.Add(1)
				_ = tm.Send(protocol.Envelope{Job: env.Job, Body: jobcore.JobSetUp{}})
			case jobcore.Deploy:
				a := m.Deployment.Info.Attempt
				_ = tm.Send(protocol.Envelope{Job: env.Job, Body: jobcore.TaskUpdate{Attempt: a, State: deploy.Running}})
				if !f.ack {
					_ = tm.Send(protocol.Envelope{Job: env.Job, Body: jobcore.TaskUpdate{Attempt: a, State: deploy.Finished, RecordsIn: 7, RecordsOut: 7}})
				}
			case jobcore.CancelTask:
				_ = tm.Send(protocol.Envelope{Job: env.Job, Body: jobcore.TaskUpdate{Attempt: m.Attempt, State: deploy.Canceled}})
			case jobcore.TriggerCheckpoint:
				if f.ack {
					_ = tm.Send(protocol.Envelope{Job: env.Job, Body: jobcore.CheckpointAck{ID: m.ID, Attempt: m.Attempt}})
					continue
				}
				_ = tm.Send(protocol.Envelope{Job: env.Job, Body: jobcore.CheckpointDecline{ID: m.ID, Attempt: m.Attempt,
					Err: checkpoint.ErrTaskNotReady, NotReady: true}})
			case jobcore.NotifyCheckpointComplete:
				f.notified.Add(1)
			}
		}
	}()
	if !d.WaitTaskManagers(1, nil) {
		t.Fatal("the fake TaskManager did not register")
	}
}

// dispatcherWithFake starts a dispatcher with one fakeTM; cleanup closes both and waits for them.
func dispatcherWithFake(t *testing.T) (*Dispatcher, *fakeTM) {
	d := NewDispatcher(DispatcherConfig{Logger: slog.New(slog.DiscardHandler)})
	f := &fakeTM{}
	f.attach(t, d)
	return d, f
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
	disp, tm := dispatcherWithFake(t)
	d, err := NewDriver(Config{Job: chained(t), Dispatcher: disp, RequireSlots: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Snapshot(); s.Status != StatusCreated {
		t.Fatalf("before Run: %s", s.Status)
	}
	snap := d.Run(context.Background())
	disp.Close()
	tm.wg.Wait()
	if snap.Status != StatusFinished || snap.Vertices[0].RecordsOut != 14 {
		t.Fatalf("job %s, %d records out: %v", snap.Status, snap.Vertices[0].RecordsOut, snap.Err)
	}
	if s := d.Snapshot(); s.Status != StatusFinished || s.Ended != snap.Ended {
		t.Fatalf("after Run: %s, ended %v, want the final snapshot", s.Status, s.Ended)
	}
	if n := tm.setups.Load(); n != 1 {
		t.Fatalf("%d SetupJob messages, want 1", n)
	}
}

// TestStorageOpsHaveDeadlines hangs the storage's first list: the NextID op fails by the storage timeout
// with the context's error, so the job fails saying so instead of waiting for the store.
func TestStorageOpsHaveDeadlines(t *testing.T) {
	defer goleak.VerifyNone(t)
	eb := errorbucket.Wrap(checkpoint.BlobBucket(memblob.OpenBucket(nil)))
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpList, Hang: true, Times: 1})
	cc := checkpoint.DefaultConfig()
	disp, tm := dispatcherWithFake(t)
	defer tm.wg.Wait()
	defer disp.Close()
	d, err := NewDriver(Config{Job: chained(t), Dispatcher: disp, Logger: slog.New(slog.DiscardHandler), Checkpoint: &cc,
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

// TestCommittedHookFencesCompletion: a checkpoint counts as completed only once Config.Committed took it
// (high availability records it on etcd there). While the hook refuses (a deposed leader), every
// checkpoint fails after its metadata was written and no task hears a completion; once it accepts,
// checkpoints complete and the tasks hear of them.
func TestCommittedHookFencesCompletion(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, refuse := range []bool{true, false} {
		d := NewDispatcher(DispatcherConfig{Logger: slog.New(slog.DiscardHandler)})
		tm := &fakeTM{ack: true}
		tm.attach(t, d)
		cc := checkpoint.DefaultConfig()
		cc.IntervalMillis, cc.TolerableFailed = 10, 1000
		var calls atomic.Int32
		drv, err := NewDriver(Config{Job: chained(t), Dispatcher: d, RequireSlots: true, Logger: slog.New(slog.DiscardHandler), Checkpoint: &cc,
			Storage: checkpoint.NewStorage(checkpoint.BlobBucket(memblob.OpenBucket(nil)), "mem://hook"),
			Committed: func(_ context.Context, id int64) error {
				calls.Add(1)
				if refuse {
					return errors.New("not the leader")
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan Snapshot, 1)
		go func() { done <- drv.Run(ctx) }()
		deadline := time.Now().Add(20 * time.Second)
		for calls.Load() < 3 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		snap := <-done
		d.Close()
		tm.wg.Wait()
		if calls.Load() < 3 {
			t.Fatalf("refuse=%v: the hook was called %d times in 20 s", refuse, calls.Load())
		}
		switch c := snap.Checkpoints; {
		case refuse && (c.Completed != 0 || c.Failed == 0 || tm.notified.Load() != 0):
			t.Fatalf("hook refusing: checkpoints %+v, %d completions heard; want none completed", *c, tm.notified.Load())
		case !refuse && (c.Completed == 0 || tm.notified.Load() == 0):
			t.Fatalf("hook accepting: checkpoints %+v, %d completions heard; want completions", *c, tm.notified.Load())
		}
	}
}

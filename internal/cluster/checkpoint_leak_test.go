package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/checkpoint/errorbucket"
	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/scheduler"
	"github.com/runnel-dev/runnel/internal/task"
)

// leakJob runs source -> sink (two tasks, on two TaskManagers) with checkpoints cc into a local directory
// behind eb's faults. The source stops halfway until release returns, which the test calls once it has
// seen what it waits for; then the job runs to its end, or until release cancels it (with the function it
// is given). The job must end in status want.
func leakJob(t *testing.T, eb *errorbucket.Bucket, dir string, cc checkpoint.Config, restartSpec string, want jobmaster.Status, release func(cancel func())) jobmaster.Snapshot {
	t.Helper()
	const total = 20_000
	// A TaskManager per task: each has its own snapshot writers (one at a time on two cores), so that a
	// write the test holds up does not hold up the other task's.
	var tms []*cluster.TaskManager
	for _, name := range []string{"tm-1", "tm-2"} {
		tm, err := cluster.NewTaskManager(cluster.TaskManagerConfig{Name: name, Slots: 1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tm.Shutdown() })
		tms = append(tms, tm)
	}
	storage := checkpoint.NewStorage(eb, dir)
	jg := sourceToSink(t, "leak", graph.Forward, graph.JobGraphOptions{})
	gate := make(chan struct{})
	chainFor := func(v *graph.JobVertex) task.ChainFactory {
		return func(rt *task.Runtime) (task.Chain, error) {
			if v.IsSource() {
				return &sequenceSource{rt: rt, total: total, gate: gate, gateAt: total / 2}, nil
			}
			return &checkingSink{rt: rt, progress: func(int32, uint64, error) {}}, nil
		}
	}
	restart, err := scheduler.ParseRestartStrategy(restartSpec)
	if err != nil {
		t.Fatal(err)
	}
	disp := connect(t, jobmaster.DispatcherConfig{}, &testCatalog{jg: jg, chainFor: chainFor, store: storage}, tms...)
	jm, err := jobmaster.NewDriver(jobmaster.Config{
		Job: jg, Dispatcher: disp, RequireSlots: true, NoSlotSharing: true, Logger: slog.New(slog.DiscardHandler),
		Checkpoint: &cc, Storage: storage, Failover: scheduler.RegionFailover, Restart: restart,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop, cancelJob := context.WithCancel(ctx)
	defer cancelJob()
	go func() {
		release(cancelJob)
		close(gate)
	}()
	snap := jm.Run(stop)
	if ctx.Err() != nil || snap.Status != want {
		t.Fatalf("job %s: %v; want %s", snap.Status, snap.Err, want)
	}
	return snap
}

// stateKeyOf is the part of a state blob's key that names the first attempt of the subtask 0 of the
// vertex that holds operator.
func stateKeyOf(t *testing.T, operator string) string {
	t.Helper()
	jg := sourceToSink(t, "leak", graph.Forward, graph.JobGraphOptions{})
	v := jg.VertexByOperator(operator)
	if v == nil {
		t.Fatalf("no vertex holds %s", operator)
	}
	return fmt.Sprintf("/v%d-0-a", v.ID)
}

// checkNoPartial fails unless every checkpoint directory left in dir, empty ones included, is committed,
// and at least one and at most retained of them are left (none with retained 0).
func checkNoPartial(t *testing.T, dir string, retained int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var committed, partial []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "chk-") {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "_metadata")); err == nil {
			committed = append(committed, e.Name())
			continue
		}
		files, _ := os.ReadDir(filepath.Join(dir, e.Name()))
		var names []string
		for _, f := range files {
			names = append(names, f.Name())
		}
		partial = append(partial, fmt.Sprintf("%s/%v", e.Name(), names))
	}
	if len(partial) > 0 {
		t.Errorf("%d checkpoint directories without _metadata left after the job: %v", len(partial), partial)
	}
	if retained == 0 && len(committed) > 0 || retained > 0 && (len(committed) == 0 || len(committed) > retained) {
		t.Errorf("committed checkpoints left: %v, want 1 to %d", committed, retained)
	}
}

// TestFailedCheckpointsLeaveNoData: a disk that fails the sink's writes for a while (the source's land
// late, after the failed checkpoint's data was discarded), with failed checkpoints tolerated, and then a
// job that finishes: no chk-N directory without _metadata remains, only committed ones, at most the
// retained number. Before, every failed checkpoint left the source's late blob behind, and with fewer
// checkpoints completed than retained nothing removed them.
func TestFailedCheckpointsLeaveNoData(t *testing.T) {
	dir := t.TempDir()
	eb := faultyBucket(t, dir)
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: stateKeyOf(t, "sink"), Err: fmt.Errorf("no space left on device")})
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: stateKeyOf(t, "source"), Delay: 30 * time.Millisecond, Pass: true})
	cc := checkpoint.DefaultConfig()
	cc.IntervalMillis, cc.TolerableFailed, cc.Retained = 10, 1000, 5
	const failures = 8
	snap := leakJob(t, eb, dir, cc, "none", jobmaster.StatusFinished, func(func()) {
		waitHits(eb, failures)
		eb.Clear() // the disk has room again
	})
	if snap.Checkpoints == nil || snap.Checkpoints.Failed < failures || snap.Checkpoints.Completed == 0 {
		t.Fatalf("checkpoints %+v: want at least %d failed and one completed", snap.Checkpoints, failures)
	}
	checkNoPartial(t, dir, cc.Retained)
}

// TestFailoverLeavesNoEmptyCheckpointDirectory: a checkpoint fails (the sink's write) while the source's
// write of it is still out; past the tolerable failures the job fails over, which cancels that write
// after the store began it: it made the checkpoint's directory and leaves it empty. Once the restarted
// job finished, no directory of it is left. Before, the empty directory stayed: a bucket's listing does
// not show an empty directory, so neither the abort's Discard (which ran first) nor retention saw it.
func TestFailoverLeavesNoEmptyCheckpointDirectory(t *testing.T) {
	dir := t.TempDir()
	eb := faultyBucket(t, dir)
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: stateKeyOf(t, "sink"), Err: fmt.Errorf("no space left on device"), Times: 1})
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: stateKeyOf(t, "source"), Hang: true, Pass: true, Times: 1})
	cc := checkpoint.DefaultConfig()
	cc.IntervalMillis, cc.TolerableFailed, cc.Retained = 10, 0, 2
	snap := leakJob(t, eb, dir, cc, "fixed-delay:attempts=3,delay=0s", jobmaster.StatusFinished, func(func()) {
		waitHits(eb, 1)
	})
	if len(snap.Failovers) != 1 || snap.Checkpoints == nil || snap.Checkpoints.Failed != 1 {
		t.Fatalf("%d failovers, checkpoints %+v: want one failover for one failed checkpoint", len(snap.Failovers), snap.Checkpoints)
	}
	checkNoPartial(t, dir, cc.Retained)
}

// TestCancelledJobLeavesNoData: a job cancelled while the disk fails the sink's writes (the source's land
// late) leaves no checkpoint directory: none completed, and what the failed ones left is removed once
// every task stopped. Before, each failed checkpoint left the source's blob, and no later completion
// removed it.
func TestCancelledJobLeavesNoData(t *testing.T) {
	dir := t.TempDir()
	eb := faultyBucket(t, dir)
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: stateKeyOf(t, "sink"), Err: fmt.Errorf("no space left on device")})
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: stateKeyOf(t, "source"), Delay: 30 * time.Millisecond, Pass: true})
	cc := checkpoint.DefaultConfig()
	cc.IntervalMillis, cc.TolerableFailed = 10, 1000
	const failures = 5
	snap := leakJob(t, eb, dir, cc, "none", jobmaster.StatusCanceled, func(cancel func()) {
		// One checkpoint at a time: the sink's write of the next one failing means the job master took
		// the failure before it (a write fails before its decline reaches the job master, and the
		// cancellation would abort the checkpoint of the last failure counted).
		waitHits(eb, failures+1)
		cancel()
	})
	if snap.Checkpoints == nil || snap.Checkpoints.Failed < failures || snap.Checkpoints.Completed != 0 {
		t.Fatalf("checkpoints %+v: want at least %d failed and none completed", snap.Checkpoints, failures)
	}
	checkNoPartial(t, dir, 0)
}

// faultyBucket opens the checkpoint bucket at dir wrapped for injected faults.
func faultyBucket(t *testing.T, dir string) *errorbucket.Bucket {
	t.Helper()
	inner, err := checkpoint.OpenBucket(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return errorbucket.Wrap(inner)
}

// waitHits waits, for at most 20 s, until eb's faults were hit n times.
func waitHits(eb *errorbucket.Bucket, n int) {
	for deadline := time.Now().Add(20 * time.Second); eb.Hits() < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

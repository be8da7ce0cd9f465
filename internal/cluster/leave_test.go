package cluster_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc"
)

// stickySession is a TaskManager's end of a session whose Close does not reach the JobManager: a
// connection that does not close at once (a pod network torn down around a process that exits, a proxy
// that holds the JobManager's side open). What was sent before still arrives.
type stickySession struct{ protocol.Session }

func (stickySession) Close(error) {}

// TestLeavingTaskManagerFailsOverAtOnce stops the TaskManager that runs the sink (its Serve's context
// ends, as SIGTERM ends it) mid-run, with a heartbeat timeout far beyond the test's bound: it tells the
// JobManager it is leaving before it stops its tasks, so the job fails over at once, in one failover whose
// cause says it left, onto the slots that remain (its own are gone from the pool), and finishes with every
// record. Also when its connection does not close at once: the notice alone reveals the loss. A context
// that ends with cluster.ErrEndSessionOnly ends the session without the notice (a TaskManager that leaves
// a deposed JobManager does not shut down).
func TestLeavingTaskManagerFailsOverAtOnce(t *testing.T) {
	const leaving = "TaskManager tm-b is leaving (shutting down)"
	for _, tc := range []struct {
		name   string
		sticky bool
		// endOnly ends tm-b's context with cluster.ErrEndSessionOnly: it leaves this JobManager only, without
		// the notice, and the closed session is the loss.
		endOnly bool
		cause   string
	}{
		{name: "connection closes", cause: leaving},
		{name: "connection stays open", sticky: true, cause: leaving},
		{name: "session ended only", endOnly: true,
			cause: "TaskManager tm-b lost: TaskManager tm-b ended the session: the session ends; the TaskManager stays"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { goleak.VerifyNone(t) })
			const total = 200_000
			const timeout = 10 * time.Second // never reached: the test's bound on detection is 1 s
			lg := slog.New(slog.DiscardHandler)
			left := make(chan struct{})
			h := newHandover(t, "leave", total, left, lg)
			a, b, cat, started := h.a, h.b, h.cat, h.started
			disp := jobmaster.NewDispatcher(jobmaster.DispatcherConfig{Logger: lg, HeartbeatInterval: timeout / 4, HeartbeatTimeout: timeout})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			bctx, stopB := context.WithCancelCause(ctx)
			defer stopB(nil)
			var wg sync.WaitGroup
			served := make(chan error, 1)
			for i, tm := range []*cluster.TaskManager{a, b} {
				jm, end := rpc.Pipe()
				var s protocol.Session = end
				sctx := ctx
				if tm == b {
					sctx = bctx
					if tc.sticky {
						s = stickySession{end}
					}
				}
				disp.Attach(jm)
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := tm.Serve(sctx, s, cat)
					if tm == b {
						served <- err
					}
				}()
				if !disp.WaitTaskManagers(i+1, ctx.Done()) {
					t.Fatal("TaskManagers did not register")
				}
			}
			defer wg.Wait()
			defer disp.Close()
			jm := h.driver(t, disp, 1, lg)
			var leftAt time.Time
			go func() {
				defer close(left)
				select {
				case <-started:
				case <-ctx.Done():
					return
				}
				leftAt = time.Now()
				if tc.endOnly {
					stopB(cluster.ErrEndSessionOnly)
				} else {
					stopB(nil)
				}
			}()
			snap := jm.Run(ctx)
			<-left
			if snap.Status != jobmaster.StatusFinished || len(snap.Failovers) != 1 {
				t.Fatalf("job %s with %d failovers %+v: %v", snap.Status, len(snap.Failovers), snap.Failovers, snap.Err)
			}
			f := snap.Failovers[0]
			if f.Cause == nil || f.Cause.Error() != tc.cause || f.TaskManager != "tm-b" {
				t.Errorf("failover cause %q on %q, want %q", f.Cause, f.TaskManager, tc.cause)
			}
			if d := f.FailedAt.Sub(leftAt); d < 0 || d > time.Second {
				t.Errorf("failed over %v after tm-b began to leave, want at once (the heartbeat timeout is %v)", d, timeout)
			} else {
				t.Logf("failed over %v after tm-b began to leave", d)
			}
			got, received := h.receivedBy(1)
			if got != total {
				t.Fatalf("the restarted sink received %d of %d records (all: %v)", got, total, received)
			}
			for _, v := range snap.Vertices {
				for _, st := range v.Subtasks {
					if st.TaskManager != "tm-a" {
						t.Errorf("%s runs on %s after the failover, want tm-a", v.Vertex.Name, st.TaskManager)
					}
				}
			}
			if tms := disp.TaskManagers(); len(tms) != 1 || tms[0].Name != "tm-a" {
				t.Errorf("the dispatcher's TaskManagers after tm-b left: %+v", tms)
			}
			select {
			case <-served:
			case <-time.After(5 * time.Second):
				t.Fatal("the leaving TaskManager's Serve did not return")
			}
			if n := b.NumTasks(); n != 0 {
				t.Errorf("the TaskManager that left still runs %d tasks", n)
			}
		})
	}
}

package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc"
	"github.com/runnel-dev/runnel/internal/scheduler"
	"github.com/runnel-dev/runnel/internal/task"
)

// muteSession is a TaskManager's end of a session that, once muted, drops everything the TaskManager
// sends while still delivering what the JobManager sends: a TaskManager behind a one-way network
// partition, or a frozen process as the JobManager sees it.
type muteSession struct {
	protocol.Session
	muted atomic.Bool
}

func (m *muteSession) Send(e protocol.Envelope) error {
	if m.muted.Load() {
		return nil
	}
	return m.Session.Send(e)
}

// TestSilentTaskManagerIsLostAndItsWorkMoves mutes the TaskManager that runs the sink mid-run: the
// dispatcher declares it lost after the heartbeat timeout, the job fails over (region: source and sink)
// onto the slots that remain, the TaskManager cancels its tasks once its session ends, and the job
// finishes with every record.
func TestSilentTaskManagerIsLostAndItsWorkMoves(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const total = 200_000
	const timeout = 300 * time.Millisecond
	lg := slog.New(slog.DiscardHandler)
	muted := make(chan struct{})
	h := newHandover(t, "mute", total, muted, lg)
	a, b, cat, started := h.a, h.b, h.cat, h.started
	disp := jobmaster.NewDispatcher(jobmaster.DispatcherConfig{Logger: lg, HeartbeatInterval: timeout / 6, HeartbeatTimeout: timeout})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	served := make(chan error, 2)
	var mute *muteSession
	for i, tm := range []*cluster.TaskManager{a, b} {
		jm, end := rpc.Pipe()
		var s protocol.Session = end
		if tm == b {
			mute = &muteSession{Session: end}
			s = mute
		}
		disp.Attach(jm)
		wg.Add(1)
		go func() {
			defer wg.Done()
			served <- tm.Serve(ctx, s, cat)
		}()
		if !disp.WaitTaskManagers(i+1, ctx.Done()) {
			t.Fatal("TaskManagers did not register")
		}
	}
	defer wg.Wait()
	defer disp.Close()
	jm := h.driver(t, disp, 2, lg)
	var mutedAt time.Time
	go func() {
		defer close(muted)
		select {
		case <-started:
		case <-ctx.Done():
			return
		}
		mutedAt = time.Now()
		mute.muted.Store(true)
	}()
	snap := jm.Run(ctx)
	<-muted
	if snap.Status != jobmaster.StatusFinished || len(snap.Failovers) != 1 {
		t.Fatalf("job %s with %d failovers: %v", snap.Status, len(snap.Failovers), snap.Err)
	}
	f := snap.Failovers[0]
	if !strings.Contains(f.Cause.Error(), "tm-b") || !strings.Contains(f.Cause.Error(), "no heartbeat") {
		t.Errorf("failover cause %q does not name the silent TaskManager and why", f.Cause)
	}
	// Lost a timeout after the last message heard, which may have come up to a heartbeat interval before the
	// mute (a bound of exactly the timeout failed by 0.25 ms on a fresh CI machine).
	if d := f.FailedAt.Sub(mutedAt); d < timeout-timeout/6 || d > timeout+time.Second {
		t.Errorf("declared lost %v after it went silent, timeout %v", d, timeout)
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
	// The muted TaskManager heard its session end and cancelled its tasks.
	select {
	case err := <-served:
		if err == nil {
			t.Error("a TaskManager's Serve returned nil")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lost TaskManager's Serve did not return")
	}
	if n := b.NumTasks(); n != 0 {
		t.Errorf("the lost TaskManager still runs %d tasks", n)
	}
}

// slowCatalog takes delay to open a job, as a storage that is slow to answer would.
type slowCatalog struct {
	cluster.Catalog
	delay time.Duration
}

func (c slowCatalog) Open(ctx context.Context, id protocol.JobID, s protocol.SetupJob) (*cluster.JobBuild, error) {
	time.Sleep(c.delay)
	return c.Catalog.Open(ctx, id, s)
}

// TestSlowJobSetupIsNotSilence sets a job up for longer than the heartbeat timeout: the TaskManager, busy
// with the JobManager's own message, must not take the JobManager for silent, and the job runs.
func TestSlowJobSetupIsNotSilence(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	lg := slog.New(slog.DiscardHandler)
	tm, err := cluster.NewTaskManager(cluster.TaskManagerConfig{Name: "tm-slow", Slots: 1, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tm.Shutdown() })
	jg := sourceToSink(t, "slow-setup", graph.Forward, graph.JobGraphOptions{})
	chainFor := func(v *graph.JobVertex) task.ChainFactory {
		return func(rt *task.Runtime) (task.Chain, error) {
			if v.IsSource() {
				return &sequenceSource{rt: rt, total: 1000}, nil
			}
			return &checkingSink{rt: rt, progress: func(int32, uint64, error) {}}, nil
		}
	}
	const timeout = 200 * time.Millisecond
	disp := connect(t, jobmaster.DispatcherConfig{Logger: lg, HeartbeatInterval: timeout / 4, HeartbeatTimeout: timeout},
		slowCatalog{Catalog: &testCatalog{jg: jg, chainFor: chainFor}, delay: 3 * timeout}, tm)
	jm, err := jobmaster.NewDriver(jobmaster.Config{Job: jg, Dispatcher: disp, RequireSlots: true, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if snap := jm.Run(ctx); snap.Status != jobmaster.StatusFinished || len(snap.Failovers) != 0 {
		t.Fatalf("job %s with failovers %+v: %v", snap.Status, snap.Failovers, snap.Err)
	}
}

// handover is what TestLeavingTaskManagerFailsOverAtOnce and TestSilentTaskManagerIsLostAndItsWorkMoves
// share: TaskManagers tm-a (2 slots) and tm-b (1 slot), and the catalog of a source → sink job whose
// source sends total records, pausing at half of them until gate closes, and whose sink notes what each
// attempt received (started closes once 1000 arrived).
type handover struct {
	a, b    *cluster.TaskManager
	cat     *testCatalog
	started chan struct{}

	mu       sync.Mutex
	received map[int32]uint64
}

func newHandover(t *testing.T, name string, total uint64, gate chan struct{}, lg *slog.Logger) *handover {
	t.Helper()
	h := &handover{started: make(chan struct{}), received: map[int32]uint64{}}
	var err error
	if h.a, err = cluster.NewTaskManager(cluster.TaskManagerConfig{Name: "tm-a", Slots: 2, Logger: lg}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.a.Shutdown() })
	if h.b, err = cluster.NewTaskManager(cluster.TaskManagerConfig{Name: "tm-b", Slots: 1, Logger: lg}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.b.Shutdown() })
	jg := sourceToSink(t, name, graph.Forward, graph.JobGraphOptions{})
	var once sync.Once
	chainFor := func(v *graph.JobVertex) task.ChainFactory {
		return func(rt *task.Runtime) (task.Chain, error) {
			if v.IsSource() {
				return &sequenceSource{rt: rt, total: total, gate: gate, gateAt: total / 2}, nil
			}
			return &checkingSink{rt: rt, progress: func(attempt int32, n uint64, err error) {
				h.mu.Lock()
				h.received[attempt] = n
				h.mu.Unlock()
				if n >= 1000 {
					once.Do(func() { close(h.started) })
				}
			}}, nil
		}
	}
	h.cat = &testCatalog{jg: jg, chainFor: chainFor}
	return h
}

// receivedBy returns what attempt received, and all attempts' counts, for an error.
func (h *handover) receivedBy(attempt int32) (uint64, map[int32]uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	all := make(map[int32]uint64, len(h.received))
	for k, v := range h.received {
		all[k] = v
	}
	return h.received[attempt], all
}

// driver returns the job master of the handover's job on disp: region failover, at most attempts restarts.
func (h *handover) driver(t *testing.T, disp *jobmaster.Dispatcher, attempts int, lg *slog.Logger) *jobmaster.Driver {
	t.Helper()
	restart, err := scheduler.ParseRestartStrategy(fmt.Sprintf("fixed-delay:attempts=%d,delay=0s", attempts))
	if err != nil {
		t.Fatal(err)
	}
	jm, err := jobmaster.NewDriver(jobmaster.Config{Job: h.cat.jg, Dispatcher: disp, RequireSlots: true, NoSlotSharing: true,
		Failover: scheduler.RegionFailover, Restart: restart, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	return jm
}

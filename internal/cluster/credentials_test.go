package cluster_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/scheduler"
	"github.com/runnel-dev/runnel/internal/task"
)

// TestIntruderCannotTakeOverAChannel runs source → sink over TCP on a reconnectable (approximate) edge and,
// while records flow, lets a local process that knows the job's id ask the producer's data server for the
// sink's subpartition as a newer attempt of the sink, with credentials it made up. The job master issued
// the real sink a credential for its own attempt only, so every intruder is refused, the real consumer is
// never fenced out (no failover), and every record arrives in order.
func TestIntruderCannotTakeOverAChannel(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const total = 100_000
	lg := slog.New(slog.DiscardHandler)
	producerTM, err := cluster.NewTaskManager(cluster.TaskManagerConfig{Name: "producer", Slots: 1, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = producerTM.Shutdown() })
	consumerTM, err := cluster.NewTaskManager(cluster.TaskManagerConfig{Name: "consumer", Slots: 1, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = consumerTM.Shutdown() })
	jg := sourceToSink(t, "intruders", graph.Forward, graph.JobGraphOptions{PipelinedType: graph.PipelinedApproximate})
	restart, err := scheduler.ParseRestartStrategy("fixed-delay:attempts=3,delay=0s")
	if err != nil {
		t.Fatal(err)
	}
	started, attacked := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	received := map[int32]uint64{}
	var sinkErr error
	chainFor := func(v *graph.JobVertex) task.ChainFactory {
		return func(rt *task.Runtime) (task.Chain, error) {
			if v.IsSource() {
				// The second half waits until the intruders have tried.
				return &sequenceSource{rt: rt, total: total, gate: attacked, gateAt: total / 2}, nil
			}
			return &checkingSink{rt: rt, progress: func(attempt int32, n uint64, err error) {
				mu.Lock()
				received[attempt] = n
				if err != nil && sinkErr == nil {
					sinkErr = err
				}
				mu.Unlock()
				if n >= 1000 {
					once.Do(func() { close(started) })
				}
			}}, nil
		}
	}
	disp := connect(t, jobmaster.DispatcherConfig{}, &testCatalog{jg: jg, chainFor: chainFor}, producerTM, consumerTM)
	jm, err := jobmaster.NewDriver(jobmaster.Config{
		Job: jg, Dispatcher: disp, RequireSlots: true, NoSlotSharing: true,
		Failover: scheduler.ApproximateFailover, Restart: restart, Logger: lg,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	intruderErrs := make(chan error, 8)
	go func() {
		defer close(attacked)
		select {
		case <-started:
		case <-ctx.Done():
			return
		}
		pid := ident.PartitionID{Result: jg.Vertices[0].Outputs[0].Result,
			Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: jg.Vertices[0].ID}}}
		sink := ident.Attempt{Subtask: ident.Subtask{Vertex: jg.Vertices[1].ID}}
		forged := [network.CredentialSize]byte{1, 2, 3}
		for _, tc := range []struct {
			attempt    int32
			credential [network.CredentialSize]byte
		}{{1, [network.CredentialSize]byte{}}, {7, forged}, {0, forged}} {
			owner := sink
			owner.Number = tc.attempt
			pool := network.NewBufferPool("intruder", network.DefaultBufferSize, 2)
			ch, err := network.DialRemoteChannel(ctx, producerTM.DataAddress(), pid, 0, owner, pool, 2, nil,
				network.DialOptions{Job: [network.JobIDSize]byte(jm.JobID()), Credential: tc.credential, Timeout: 5 * time.Second})
			if err == nil {
				ch.Release()
				err = errors.New("an intruder was admitted")
			} else if errors.Is(err, network.ErrBadCredential) {
				err = nil
			}
			pool.Destroy()
			intruderErrs <- err
		}
	}()
	snap := jm.Run(ctx)
	<-attacked
	close(intruderErrs)
	for err := range intruderErrs {
		if err != nil {
			t.Fatalf("intruder: %v", err)
		}
	}
	if snap.Status != jobmaster.StatusFinished || len(snap.Failovers) != 0 {
		t.Fatalf("job %s with failovers %+v: %v", snap.Status, snap.Failovers, snap.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if sinkErr != nil || received[0] != total {
		t.Fatalf("the sink's first attempt received %d of %d records (%v)", received[0], total, sinkErr)
	}
}

package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc"
	"github.com/runnel-dev/runnel/internal/task"
)

// testCatalog builds the one job of a test: its chains from chainFor over jg, its checkpoints in store.
type testCatalog struct {
	jg       *graph.JobGraph
	chainFor func(*graph.JobVertex) task.ChainFactory
	store    task.StateStore
}

func (c *testCatalog) Open(context.Context, protocol.JobID, protocol.SetupJob) (*cluster.JobBuild, error) {
	return &cluster.JobBuild{Store: c.store, ChainFor: func(id ident.VertexID) (task.ChainFactory, error) {
		v := c.jg.Vertex(id)
		if v == nil {
			return nil, fmt.Errorf("no vertex %d", id)
		}
		return c.chainFor(v), nil
	}}, nil
}

// connect registers the TaskManagers, in order, with a new dispatcher through in-process sessions, each
// served on a goroutine the test owns. Cleanup closes the dispatcher and waits for every Serve.
func connect(t *testing.T, dc jobmaster.DispatcherConfig, cat cluster.Catalog, tms ...*cluster.TaskManager) *jobmaster.Dispatcher {
	t.Helper()
	if dc.Logger == nil {
		dc.Logger = slog.New(slog.DiscardHandler)
	}
	d := jobmaster.NewDispatcher(dc)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		d.Close()
		cancel()
		wg.Wait()
	})
	for i, tm := range tms {
		jm, end := rpc.Pipe()
		d.Attach(jm)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = tm.Serve(ctx, end, cat)
		}()
		if !d.WaitTaskManagers(i+1, ctx.Done()) {
			t.Fatalf("TaskManager %s did not register", tm.Name())
		}
	}
	return d
}

package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc"
)

// miniCluster is the in-process cluster Execute runs a job on: a dispatcher and N TaskManagers, each
// connected to it by a session, exactly as separate processes are but for the transport.
type miniCluster struct {
	*cluster.MiniCluster
	dispatcher *jobmaster.Dispatcher
	catalog    *inProcessCatalog
	cancel     context.CancelFunc
	serving    sync.WaitGroup
	errs       []error // what each TaskManager's Serve returned, read after serving is done
}

// inProcessCatalog is the catalog of the mini-cluster's TaskManagers: the one job Execute built, whose
// operators, storage and savepoint every TaskManager shares with the job master.
type inProcessCatalog struct {
	build *cluster.JobBuild
}

// Open implements cluster.Catalog.
func (c *inProcessCatalog) Open(_ context.Context, _ protocol.JobID, setup protocol.SetupJob) (*cluster.JobBuild, error) {
	if c.build == nil {
		return nil, fmt.Errorf("job %q is not built in this process", setup.Name)
	}
	return c.build, nil
}

// startMiniCluster starts the TaskManagers and registers them with a new dispatcher one after the other,
// so that their ids and the slot pool's placement follow their names (tm-1, tm-2, ...).
func startMiniCluster(cfg cluster.MiniClusterConfig) (*miniCluster, error) {
	mc, err := cluster.StartMiniCluster(cfg)
	if err != nil {
		return nil, err
	}
	m := &miniCluster{MiniCluster: mc, catalog: &inProcessCatalog{},
		// Heartbeats carry the TaskManagers' memory to the dashboard; no timeout: they share this process.
		dispatcher: jobmaster.NewDispatcher(jobmaster.DispatcherConfig{Logger: cfg.Logger, HeartbeatInterval: time.Second})}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.errs = make([]error, len(mc.TMs))
	for i, tm := range mc.TMs {
		jm, tmEnd := rpc.Pipe()
		m.dispatcher.Attach(jm)
		m.serving.Add(1)
		go func() {
			defer m.serving.Done()
			m.errs[i] = tm.Serve(ctx, tmEnd, m.catalog)
		}()
		if !m.dispatcher.WaitTaskManagers(i+1, ctx.Done()) {
			break
		}
	}
	return m, nil
}

// close ends the sessions, waits for the TaskManagers to cancel what they still run, and shuts them down.
func (m *miniCluster) close() error {
	m.dispatcher.Close()
	m.cancel()
	m.serving.Wait()
	var errs []error
	for i, err := range m.errs {
		var refused *cluster.RefusedError
		if errors.As(err, &refused) {
			errs = append(errs, fmt.Errorf("TaskManager %s: %w", m.TMs[i].Name(), err))
		}
	}
	return errors.Join(append(errs, m.Close())...)
}

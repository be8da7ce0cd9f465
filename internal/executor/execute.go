package executor

import (
	"context"
	"fmt"
	"sync"

	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/report"
)

// clusterStarted, when set (OnClusterStarted), is called with the mini-cluster of each job Execute runs.
var clusterStarted struct {
	mu sync.Mutex
	f  func(*cluster.MiniCluster)
}

// OnClusterStarted makes Execute call f with the mini-cluster of each job it runs, before the job starts,
// until the returned function is called: for tests that watch the cluster's tables.
func OnClusterStarted(f func(*cluster.MiniCluster)) (restore func()) {
	clusterStarted.mu.Lock()
	defer clusterStarted.mu.Unlock()
	clusterStarted.f = f
	return func() {
		clusterStarted.mu.Lock()
		defer clusterStarted.mu.Unlock()
		clusterStarted.f = nil
	}
}

// Execute runs job in an in-process cluster and blocks until it ends (see Run). The tasks run the
// operators (and fire the injections) of chains, a build with job's fingerprint: job itself, or another
// build of it, as a TaskManager of a cluster runs its own.
func Execute(ctx context.Context, job, chains *Job) (*report.JobResult, error) {
	if err := SameBuild(job.Name, job.Fingerprint, chains.Fingerprint); err != nil {
		return nil, err
	}
	mcCfg := job.Settings.MiniCluster
	if mcCfg.SlotsPerTM == 0 {
		maxP := 0
		for _, v := range job.Graph.Vertices {
			if job.Settings.NoSlotSharing {
				maxP += v.Parallelism
			} else {
				maxP = max(maxP, v.Parallelism)
			}
		}
		mcCfg.SlotsPerTM = (maxP + mcCfg.TaskManagers - 1) / mcCfg.TaskManagers
	}
	mc, err := startMiniCluster(mcCfg)
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", job.Name, err)
	}
	defer mc.close()
	clusterStarted.mu.Lock()
	started := clusterStarted.f
	clusterStarted.mu.Unlock()
	if started != nil {
		started(mc.MiniCluster)
	}
	on := On{Dispatcher: mc.dispatcher, requireSlots: true, catalog: mc.catalog, chains: chains, taskManagers: mc.TMs}
	stopDashboard, err := job.serveDashboard(&on, mc.TMs)
	if err != nil {
		return nil, err
	}
	defer stopDashboard()
	return Run(ctx, job, on)
}

// jobBuild gives the in-process TaskManagers of on the operators of its chains, and returns the build
// whose storage and savepoint Run sets; nil for TaskManagers in other processes.
func (on On) jobBuild(job *Job) *cluster.JobBuild {
	if on.catalog == nil {
		return nil
	}
	chains := on.chains
	build := &cluster.JobBuild{ChainFor: chains.chainFor, Incremental: job.Recovery.Incremental, SyncInjections: chains.SyncInjections}
	on.catalog.build = build
	return build
}

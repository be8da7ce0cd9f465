package runnel

import "github.com/runnel-dev/runnel/internal/cluster"

// OnClusterStarted makes Execute call f with the mini-cluster of each job it runs, until the returned
// function is called (for tests that watch the cluster's tables; not safe with parallel jobs).
func OnClusterStarted(f func(*cluster.MiniCluster)) (restore func()) {
	clusterStarted = f
	return func() { clusterStarted = nil }
}

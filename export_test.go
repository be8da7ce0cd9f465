package runnel

import (
	"context"
	"maps"
	"slices"

	"github.com/runnel-dev/runnel/internal/cluster"
)

// OnClusterStarted makes Execute call f with the mini-cluster of each job it runs, until the returned
// function is called (for tests that watch the cluster's tables; not safe with parallel jobs).
func OnClusterStarted(f func(*cluster.MiniCluster)) (restore func()) {
	clusterStarted = f
	return func() { clusterStarted = nil }
}

// Prepared is a prepared build of a job (prepare), for tests of the registry.
type Prepared = prepared

// Fingerprint is the build's graph fingerprint.
func (p *prepared) Fingerprint() [32]byte { return p.fingerprint }

// FiredInjections reports, per failure injection of the build in the order given, whether it fired.
func (p *prepared) FiredInjections() []bool {
	out := make([]bool, len(p.rc.injections))
	for i, inj := range p.rc.injections {
		out[i] = inj.Fired()
	}
	return out
}

// BuildRegistered is buildRegistered.
func BuildRegistered(ctx context.Context, name string, args []string) (*Environment, *Prepared, error) {
	return buildRegistered(ctx, name, args)
}

// BuildVerified is buildVerified.
func BuildVerified(ctx context.Context, name string, args []string, want [32]byte) (*Environment, *Prepared, error) {
	return buildVerified(ctx, name, args, want)
}

// LookupJob reports whether name is registered.
func LookupJob(name string) bool { _, ok := lookupJob(name); return ok }

// RunChainsFrom makes env's Execute run the operators of another build of the job in every task, as the
// TaskManagers of a cluster do.
func RunChainsFrom(env *Environment, p *Prepared) { env.chainsFrom = p }

// AccumulatorNames returns the names of env's accumulators, sorted.
func AccumulatorNames(env *Environment) []string { return slices.Sorted(maps.Keys(env.accumulators())) }

// EncodeAccumulators is (*Environment).encodeAccumulators.
func EncodeAccumulators(env *Environment) (map[string][]byte, error) { return env.encodeAccumulators() }

// MergeAccumulators is (*Environment).mergeAccumulators.
func MergeAccumulators(env *Environment, values map[string][]byte) error {
	return env.mergeAccumulators(values)
}

// SyncInjections does what a TaskManager does with the fired set of a deployment of subtask sub of the
// vertex that holds operator before it builds the chain; it returns whether each of the build's injections
// is fired after.
func (p *prepared) SyncInjections(operator string, sub int, fired ...int) []bool {
	for _, v := range p.jg.Vertices {
		for _, n := range v.Nodes {
			if n.Name == operator {
				p.syncInjections(v.ID, sub, fired)
			}
		}
	}
	var out []bool
	for _, inj := range p.rc.injections {
		out = append(out, inj.Fired())
	}
	return out
}

// MainWith is Main on args, for tests: it returns the exit code.
var MainWith = mainWith

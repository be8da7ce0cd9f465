package runnel

import (
	"context"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/runnel-dev/runnel/internal/cli"
	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/executor"
)

// OnClusterStarted makes Execute call f with the mini-cluster of each job it runs, until the returned
// function is called (for tests that watch the cluster's tables; not safe with parallel jobs).
func OnClusterStarted(f func(*cluster.MiniCluster)) (restore func()) {
	return executor.OnClusterStarted(f)
}

// Prepared is a compiled build of a job, for tests of the registry.
type Prepared = executor.Job

// FiredInjections reports, per failure injection of the build p in the order given, whether it fired.
func FiredInjections(p *Prepared) []bool {
	out := make([]bool, len(p.Recovery.Injections))
	for i, inj := range p.Recovery.Injections {
		out[i] = inj.Fired()
	}
	return out
}

// builds maps each build of a registered job to the Environment it was built in.
var builds sync.Map

func init() {
	onBuild = func(job *executor.Job, env *Environment) { builds.Store(job, env) }
}

// BuildRegistered is buildRegistered, with the Environment of the build.
func BuildRegistered(ctx context.Context, name string, args []string) (*Environment, *Prepared, error) {
	p, err := buildRegistered(ctx, name, args)
	if err != nil {
		return nil, nil, err
	}
	env, _ := builds.Load(p)
	return env.(*Environment), p, nil
}

// BuildVerified is what a process that runs a job another built does: buildRegistered, refused unless the
// build's fingerprint is want.
func BuildVerified(ctx context.Context, name string, args []string, want [32]byte) (*Environment, *Prepared, error) {
	env, p, err := BuildRegistered(ctx, name, args)
	if err == nil {
		err = executor.SameBuild(name, want, p.Fingerprint)
	}
	if err != nil {
		return nil, nil, err
	}
	return env, p, nil
}

// LookupJob reports whether name is registered.
func LookupJob(name string) bool { _, ok := cli.Lookup(name); return ok }

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
// vertex of build p that holds operator before it builds the chain; it returns whether each of the build's
// injections is fired after.
func SyncInjections(p *Prepared, operator string, sub int, fired ...int) []bool {
	for _, v := range p.Graph.Vertices {
		for _, n := range v.Nodes {
			if n.Name == operator {
				p.SyncInjections(v.ID, sub, fired)
			}
		}
	}
	return FiredInjections(p)
}

// MainWith is Main on args, for tests: it returns the exit code.
func MainWith(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Main(ctx, cliSettings(NewEnvironment().cfg), args, stdout, stderr)
}

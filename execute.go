package runnel

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/executor"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/operator"
)

// Execute runs the job in an in-process cluster and blocks until it ends: FINISHED when every source ended
// and all records were processed, FAILED when a task failed (the error names the subtask), CANCELED when ctx
// was cancelled first. The result is returned in every case where the job ran; err is non-nil unless the
// job finished or was cancelled.
func (e *Environment) Execute(ctx context.Context, name string) (*JobResult, error) {
	if e.executed {
		return nil, errors.New("Execute: an Environment runs one job; make a new Environment for another")
	}
	e.executed = true
	if ln := e.cfg.MetricsListener; ln != nil {
		defer ln.Close() // also when the job never starts; the metrics server closes it first otherwise
	}
	if ln := e.cfg.UIListener; ln != nil {
		defer ln.Close() // as the metrics listener
	}
	job, err := e.compile(ctx, name)
	if err != nil {
		return nil, err
	}
	// The tasks run the operators (and fire the injections) of this build, or of the other build a test
	// put in its place, as a TaskManager runs its own.
	chains := job
	if e.chainsFrom != nil {
		chains = e.chainsFrom
	}
	return executor.Execute(ctx, job, chains)
}

// compile is the first half of running a job: the recovery options, the job graph, the failure injections'
// targets, the sinks' own checks (JobChecker) and (when stopping with a savepoint) the savepoint target,
// checked now rather than at the end of a long run, and the settings of the run. Every error names the job. It starts nothing and holds nothing
// that needs closing. Execute, Submit and the processes of a cluster (through Register) all run what it
// makes.
func (e *Environment) compile(ctx context.Context, name string) (*executor.Job, error) {
	rc, err := e.cfg.recovery(name)
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	jg, err := e.jobGraph(name, rc.exchange, rc.pipelinedType)
	if err == nil {
		err = checkInjections(jg, rc.Injections)
	}
	if err == nil {
		err = e.checkSinks(name)
	}
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	if rc.SavepointDir != "" {
		if err := checkpoint.CheckSavepointTarget(ctx, rc.SavepointDir); err != nil {
			return nil, fmt.Errorf("job %q: WithSavepointOnStop: %w", name, err)
		}
	}
	c := &e.cfg
	return &executor.Job{Name: name, Graph: jg, Fingerprint: graph.Fingerprint(jg), Recovery: rc.Recovery,
		Settings: executor.Settings{
			BufferTimeout: c.BufferTimeout, MaxRecordSize: c.MaxRecordSize, NoSlotSharing: c.NoSlotSharing,
			NetworkBuffersPerChannel: c.networkBuffersPerChannel(),
			MiniCluster: cluster.MiniClusterConfig{TaskManagers: c.TaskManagers, SlotsPerTM: c.SlotsPerTM,
				NetworkMemoryBytes: c.NetworkMemoryBytes, InflightLogMemory: c.InflightLogMemory, InflightLogDisk: c.InflightLogDisk,
				BufferSize: c.BufferSize, Logger: c.Logger, Clock: c.Clock},
			MetricsAddr: c.MetricsAddr, MetricsListener: c.MetricsListener, UIAddr: c.UIAddr, UIListener: c.UIListener,
			ProgressInterval: c.ProgressInterval, Progress: c.Progress,
		},
		EncodeAccumulators: e.encodeAccumulators, MergeAccumulators: e.mergeAccumulators,
	}, nil
}

// jobGraph validates the job and returns its vertices after chaining.
func (e *Environment) jobGraph(name string, exchange graph.ExchangeMode, pipelined graph.PartitionType) (*graph.JobGraph, error) {
	if err := e.cfg.validate(); err != nil {
		return nil, err
	}
	if err := e.Err(); err != nil {
		return nil, err
	}
	sg := &graph.StreamGraph{JobName: name, Nodes: e.nodes, Edges: e.edges}
	jg, err := graph.BuildJobGraph(sg, graph.JobGraphOptions{Chaining: e.cfg.Chaining, PipelinedType: pipelined, Exchange: exchange})
	if err != nil {
		return nil, err
	}
	// Only edges that cross a task boundary need a codec.
	var errs []error
	for _, je := range jg.Edges {
		for _, r := range e.resolvers {
			if r.edge == je.Stream {
				if err := r.resolve(); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return jg, errors.Join(errs...)
}

// checkInjections makes sure every failure injection names an operator and subtask of the job.
func checkInjections(jg *graph.JobGraph, injections []*operator.Injection) error {
	var errs []error
	for _, inj := range injections {
		v := jg.VertexByOperator(inj.Operator)
		if v == nil {
			var names []string
			for _, v := range jg.Vertices {
				for _, n := range v.Nodes {
					names = append(names, n.Name)
				}
			}
			errs = append(errs, fmt.Errorf("WithFailureInjection %q: no operator is named %q; the operators are %s", inj.Spec, inj.Operator, strings.Join(names, ", ")))
			continue
		}
		if inj.Subtask >= v.Parallelism {
			errs = append(errs, fmt.Errorf("WithFailureInjection %q: operator %q has parallelism %d, so subtasks 0 to %d", inj.Spec, inj.Operator, v.Parallelism, v.Parallelism-1))
		}
	}
	return errors.Join(errs...)
}

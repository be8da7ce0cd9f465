package runnel

import (
	"context"
	"fmt"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/operator"
	"github.com/runnel-dev/runnel/internal/task"
)

// prepared is a job made ready to run: its options validated, its job graph chained, its failure injections
// checked against the graph. It is what running the job needs from the Environment, in whichever process:
// Execute, the JobManager's submit handler, a TaskManager's job setup and Submit all start from one.
type prepared struct {
	name string
	rc   *recoveryConfig
	jg   *graph.JobGraph
	// args are the arguments a registered job was built from (nil for a job Execute runs): what every
	// other process builds it from.
	args []string
	// fingerprint is graph.Fingerprint(jg): two processes run the job together only when theirs agree.
	fingerprint [32]byte
}

// prepare is the first half of running a job: the recovery options, the job graph, the failure injections'
// targets and (when stopping with a savepoint) the savepoint target, checked now rather than at the end of a
// long run. Every error names the job. It starts nothing and holds nothing that needs closing.
func prepare(ctx context.Context, env *Environment, name string) (*prepared, error) {
	rc, err := env.cfg.recovery(name)
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	jg, err := env.jobGraph(name, rc.exchange, rc.pipelinedType)
	if err == nil {
		err = checkInjections(jg, rc.injections)
	}
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	if rc.savepointDir != "" {
		if err := checkpoint.CheckSavepointTarget(ctx, rc.savepointDir); err != nil {
			return nil, fmt.Errorf("job %q: WithSavepointOnStop: %w", name, err)
		}
	}
	return &prepared{name: name, rc: rc, jg: jg, fingerprint: graph.Fingerprint(jg)}, nil
}

// chainFor returns the factory of the operators of vertex id from this build, with this build's failure
// injections. id is a vertex of any build with the same fingerprint: the vertices are the same, the
// operator objects (and what sinks write into) are this build's.
func (p *prepared) chainFor(id ident.VertexID) task.ChainFactory {
	return operator.ChainFactory(p.jg.Vertex(id), p.rc.injections)
}

// sameBuild returns nil when a build of job name has the fingerprint want, and otherwise the error that
// refuses it: the same arguments gave another graph, so the build function reads something else.
func sameBuild(name string, want, got [32]byte) error {
	if want == got {
		return nil
	}
	return fmt.Errorf("job %q: built from the same arguments, its job graph differs (fingerprint %x… here, %x… expected): "+
		"the job's build function depends on something other than its arguments (a clock, the host, randomness or a global variable); "+
		"make the job's shape a function of its arguments alone", name, got[:6], want[:6])
}

package cli

import (
	"context"
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/internal/executor"
)

// RegisteredJobs are the registered jobs as the processes of a cluster build them (roles.Jobs): from the
// command line submit sent, parsed with the job's flags and those of a run, as the client parsed it.
type RegisteredJobs struct{}

// Names implements roles.Jobs.
func (RegisteredJobs) Names() []string { return Names() }

// Build implements roles.Jobs.
func (RegisteredJobs) Build(ctx context.Context, name string, args []string) (*executor.Job, error) {
	return BuildJob(ctx, name, args, Local{})
}

// BuildJob builds the registered job name from its command line args (its flags, those of a run, and its
// free arguments after them), with what only this process adds, and compiles it. The error names the job.
func BuildJob(ctx context.Context, name string, args []string, local Local) (*executor.Job, error) {
	job, ok := Lookup(name)
	if !ok {
		return nil, notRegistered(name)
	}
	r := newRunFlagSet("", job)
	s, err := r.parse(args)
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	built, err := r.build(ctx, s, local, r.fs.Args())
	if err != nil {
		return nil, err // it names the job
	}
	built.Job.Args = slices.Clone(args)
	return built.Job, nil
}

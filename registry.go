package runnel

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/runnel-dev/runnel/internal/cli"
	"github.com/runnel-dev/runnel/internal/executor"
)

// registry holds the jobs a binary can run by name. It is as large as the program's Register calls make it
// (they are code, not input), so it needs no bound of its own.
var registry struct {
	mu   sync.Mutex
	jobs map[string]func(args []string) (*Environment, error)
}

// Register makes a job known by name to every process started from this binary. build must construct the
// job from args alone (no clock, host or randomness in its shape): the JobManager and every TaskManager call
// it with the arguments the job was submitted with, and the graphs must come out the same (they are
// compared by fingerprint, and a process whose build differs refuses the job).
//
// Register is meant for init functions or the top of main. Like defining a flag twice, registering a name
// twice panics, and so does an empty name, a name Main reserves for its roles (run, jobmanager,
// taskmanager, submit, cancel), a name that starts with '-' or holds white space, and a nil build.
func Register(name string, build func(args []string) (*Environment, error)) {
	switch {
	case name == "":
		panic("runnel.Register: a job needs a name")
	case slices.Contains(cli.Roles, name):
		panic(fmt.Sprintf("runnel.Register(%q): %q is a role of runnel.Main (%s) and cannot name a job", name, name, strings.Join(cli.Roles, ", ")))
	case strings.HasPrefix(name, "-") || strings.ContainsFunc(name, unicode.IsSpace):
		panic(fmt.Sprintf("runnel.Register(%q): a job name must not start with '-' or hold white space: it is given on command lines", name))
	case build == nil:
		panic(fmt.Sprintf("runnel.Register(%q): build is nil", name))
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if _, dup := registry.jobs[name]; dup {
		panic(fmt.Sprintf("runnel.Register: job %q is registered twice; job names must be unique in a binary", name))
	}
	if registry.jobs == nil {
		registry.jobs = map[string]func([]string) (*Environment, error){}
	}
	registry.jobs[name] = build
}

// RegisteredJobs returns the names of the jobs registered in this binary, sorted.
func RegisteredJobs() []string { return registeredJobs() }

// registeredJobs returns the registered names, sorted.
func registeredJobs() []string {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	names := make([]string, 0, len(registry.jobs))
	for n := range registry.jobs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// lookupJob returns the build function registered under name.
func lookupJob(name string) (build func(args []string) (*Environment, error), ok bool) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	build, ok = registry.jobs[name]
	return build, ok
}

// buildRegistered builds the registered job name from args and compiles it: what a JobManager does with a
// submitted job, and a TaskManager with a job it is asked to run. A build function that fails or panics is
// an error naming the job (a long-lived TaskManager must survive a job it cannot build).
func buildRegistered(ctx context.Context, name string, args []string) (*Environment, *executor.Job, error) {
	build, ok := lookupJob(name)
	if !ok {
		registered := "none"
		if names := registeredJobs(); len(names) > 0 {
			registered = strings.Join(names, ", ")
		}
		return nil, nil, fmt.Errorf("job %q is not registered in this binary; registered: %s", name, registered)
	}
	env, err := callBuild(build, args)
	if err != nil {
		return nil, nil, fmt.Errorf("job %q: building it from its arguments %q: %w", name, args, err)
	}
	job, err := env.compile(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	job.Args = slices.Clone(args)
	return env, job, nil
}

// callBuild calls a registered build function, turning a panic into an error with its stack.
func callBuild(build func([]string) (*Environment, error), args []string) (env *Environment, err error) {
	defer func() {
		if p := recover(); p != nil {
			env, err = nil, fmt.Errorf("the build function panicked: %v\n%s", p, debug.Stack())
		}
	}()
	env, err = build(slices.Clone(args))
	if err == nil && env == nil {
		err = fmt.Errorf("the build function returned neither an Environment nor an error")
	}
	return env, err
}

// registryJobs are the jobs of this binary's registry, as the roles of its processes build them.
type registryJobs struct{}

// Names implements roles.Jobs.
func (registryJobs) Names() []string { return registeredJobs() }

// Build implements roles.Jobs.
func (registryJobs) Build(ctx context.Context, name string, args []string) (*executor.Job, error) {
	_, job, err := buildRegistered(ctx, name, args)
	return job, err
}

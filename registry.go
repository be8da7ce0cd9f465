package runnel

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// roleWords are the first arguments Main reserves for the roles (docs/cluster.md §2.1); no job may be
// called by one of them, since "myjob submit" must mean the role.
var roleWords = []string{"run", "jobmanager", "taskmanager", "submit", "cancel"}

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
	case slices.Contains(roleWords, name):
		panic(fmt.Sprintf("runnel.Register(%q): %q is a role of runnel.Main (%s) and cannot name a job", name, name, strings.Join(roleWords, ", ")))
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

// buildRegistered builds the registered job name from args and prepares it: what a JobManager does with a
// submitted job, and a TaskManager with a job it is asked to run. A build function that fails or panics is
// an error naming the job (a long-lived TaskManager must survive a job it cannot build).
func buildRegistered(ctx context.Context, name string, args []string) (*Environment, *prepared, error) {
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
	p, err := prepare(ctx, env, name)
	if err != nil {
		return nil, nil, err
	}
	p.args = slices.Clone(args)
	return env, p, nil
}

// buildVerified is buildRegistered for a process that must run the same job as another: the result's
// fingerprint must be want (the JobManager's, or the client's), or the error says that the build function
// depends on something other than its arguments.
func buildVerified(ctx context.Context, name string, args []string, want [32]byte) (*Environment, *prepared, error) {
	env, p, err := buildRegistered(ctx, name, args)
	if err != nil {
		return nil, nil, err
	}
	if err := sameBuild(name, want, p.fingerprint); err != nil {
		return nil, nil, err
	}
	return env, p, nil
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

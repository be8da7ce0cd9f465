package runnel

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"slices"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel/internal/cli"
	"github.com/runnel-dev/runnel/internal/executor"
)

// Job is a job a binary registers (RegisterJob): Build adds its operators to env. env comes configured by
// the job's command line (parallelism, checkpoints, failover, ...), over the options the job was
// registered with; args are the job's free arguments (the words of its command line that are not flags).
//
// Build must make the job from its flags and args alone (no clock, host or randomness in its shape): the
// JobManager and every TaskManager build it from the same command line, and the graphs must come out the
// same (they are compared by fingerprint, and a process whose build differs refuses the job).
//
// A Job may also implement JobEnder.
type Job interface {
	Build(env *Environment, args []string) error
}

// BuildFunc is a Job that is a function.
type BuildFunc func(env *Environment, args []string) error

// Build calls f.
func (f BuildFunc) Build(env *Environment, args []string) error { return f(env, args) }

// JobEnder is implemented by a Job that has something to do once it ended, in the process that ran it
// (run) or submitted it and followed it to its end (submit): print its results, check them, add fields to
// the run's --report. End is called once, with the job's result, also when the job failed or was
// cancelled. What it writes to w follows the job's output (stdout); each field it returns becomes a
// top-level field of the --report JSON next to the JobResult's (an entry named like one of those is
// dropped); an error makes a run that would have succeeded exit with code 1, so that scripts notice.
type JobEnder interface {
	End(w io.Writer, res *JobResult) (report map[string]any, err error)
}

// Register makes a job known by name to every process started from this binary (see Main), with a
// one-line description for its help. The job takes no flags of its own: its arguments are the words of
// its command line that are not flags (all the words after "--"), and build adds its operators to env.
// opts are the job's defaults: every run starts from them, and the command line's flags override those
// they set (its --help shows them as the flags' defaults).
//
// Register is meant for init functions or the top of main. Like defining a flag twice, registering a name
// twice panics, and so does an empty name, a name Main reserves for its roles (run, submit, cancel,
// jobmanager, taskmanager, help), a name that starts with '-' or holds white space, a description of more
// than one line, and a nil build.
func Register(name, description string, build BuildFunc, opts ...Option) {
	if build == nil {
		panic(fmt.Sprintf("runnel.Register(%q): build is nil", name))
	}
	register(name, description, func(*pflag.FlagSet) Job { return build }, opts)
}

// RegisterJob is Register for a job with flags of its own. define declares them on flags and returns the
// Job that reads them when it builds; it is called once for every build, each time with a FlagSet of its
// own, so the Job must keep its flags' values (flags.IntVar(&job.n, ...)), not share them between builds.
// The job's flags are shown by "prog run JOB --help" before those of every run, and checked, with the
// rest of the command line, before anything runs. They must not take the name of a flag of every run
// (--parallelism, --checkpoint-interval, ...) or of --help: RegisterJob panics naming the flag.
func RegisterJob(name, description string, define func(flags *pflag.FlagSet) Job, opts ...Option) {
	if define == nil {
		panic(fmt.Sprintf("runnel.RegisterJob(%q): define is nil", name))
	}
	register(name, description, define, opts)
}

func register(name, description string, define func(*pflag.FlagSet) Job, opts []Option) {
	opts = slices.Clone(opts)
	cli.Register(cli.Job{
		Name: name, Description: description, Defaults: cliSettings(NewEnvironment(opts...).cfg),
		Define: func(fs *pflag.FlagSet) cli.Build {
			job := define(fs)
			return func(ctx context.Context, s cli.Settings, local cli.Local, args []string) (*cli.Built, error) {
				if job == nil {
					return nil, fmt.Errorf("job %q: its define function returned no Job", name)
				}
				all := append(slices.Clone(opts), withCLISettings(s))
				if local.Logger != nil {
					all = append(all, WithLogger(local.Logger))
				}
				if local.Progress != nil {
					all = append(all, WithProgress(local.ProgressInterval, local.Progress))
				}
				env := NewEnvironment(all...)
				if err := callBuild(job, env, args); err != nil {
					return nil, fmt.Errorf("job %q: building it from its arguments %q: %w", name, args, err)
				}
				compiled, err := env.compile(ctx, name)
				if err != nil {
					return nil, err
				}
				if onBuild != nil {
					onBuild(compiled, env)
				}
				built := &cli.Built{Job: compiled}
				if e, ok := job.(JobEnder); ok {
					built.End = e.End
				}
				return built, nil
			}
		},
	})
}

// onBuild, when set (by this package's tests), learns the Environment of every build of a registered job.
var onBuild func(*executor.Job, *Environment)

// RegisteredJobs returns the names of the jobs registered in this binary, sorted.
func RegisteredJobs() []string { return cli.Names() }

// buildRegistered builds the registered job name from its command line args, as a JobManager does with a
// submitted job and a TaskManager with a job it is asked to run.
func buildRegistered(ctx context.Context, name string, args []string) (*executor.Job, error) {
	return cli.BuildJob(ctx, name, args, cli.Local{})
}

// callBuild calls a job's Build, turning a panic into an error with its stack.
func callBuild(job Job, env *Environment, args []string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the build panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return job.Build(env, slices.Clone(args))
}

// cliSettings are the settings of c that the flags of a run set: the defaults a job's command line shows.
func cliSettings(c Config) cli.Settings {
	return cli.Settings{
		Parallelism: c.Parallelism, MaxParallelism: c.MaxParallelism, TaskManagers: c.TaskManagers,
		Chaining: c.Chaining, MetricsAddr: c.MetricsAddr, UIAddr: c.UIAddr,
		CheckpointInterval: c.Checkpoint.Interval, CheckpointMode: cmp.Or(string(c.Checkpoint.Mode), string(ExactlyOnce)),
		TolerableFailed: c.Checkpoint.TolerableFailed, Incremental: c.IncrementalCheckpoints,
		CheckpointStorage: c.Checkpoint.Storage, Failover: cmp.Or(c.Failover, "region"),
		RestartStrategy: c.RestartStrategy, StateBackend: cmp.Or(c.StateBackend, "memory"),
		InjectFailures: slices.Clone(c.FailureInjections), SavepointOnStop: c.SavepointOnStop,
		FromSavepoint: c.RestoreFrom, AllowNonRestored: c.AllowNonRestoredState,
		InflightLogMemory: c.InflightLogMemory, InflightLogDisk: c.InflightLogDisk,
		ExchangeMode: cmp.Or(c.ExchangeMode, "pipelined"), Scheduling: cmp.Or(c.Scheduling, "pipelined-region"),
	}
}

// withCLISettings sets what the flags of a run set, leaving the rest of the Config as the job's options
// made it.
func withCLISettings(s cli.Settings) Option {
	return func(c *Config) {
		c.Parallelism, c.MaxParallelism, c.TaskManagers = s.Parallelism, s.MaxParallelism, s.TaskManagers
		c.Chaining, c.MetricsAddr, c.UIAddr = s.Chaining, s.MetricsAddr, s.UIAddr
		if s.CheckpointInterval > 0 {
			c.Checkpoint.Interval, c.Checkpoint.Mode = s.CheckpointInterval, CheckpointingMode(s.CheckpointMode)
			c.Checkpoint.TolerableFailed, c.Checkpoint.Storage = s.TolerableFailed, s.CheckpointStorage
			c.Checkpoint.Unaligned, c.Checkpoint.AlignedCheckpointTimeout = s.Unaligned, s.AlignedTimeout
		} else {
			c.Checkpoint = CheckpointConfig{}
		}
		c.IncrementalCheckpoints = s.Incremental
		c.Failover, c.RestartStrategy, c.StateBackend = s.Failover, s.RestartStrategy, s.StateBackend
		c.FailureInjections = slices.Clone(s.InjectFailures)
		c.SavepointOnStop, c.RestoreFrom, c.AllowNonRestoredState = s.SavepointOnStop, s.FromSavepoint, s.AllowNonRestored
		c.InflightLogMemory, c.InflightLogDisk = s.InflightLogMemory, s.InflightLogDisk
		c.ExchangeMode, c.Scheduling = s.ExchangeMode, s.Scheduling
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples"
	"github.com/runnel-dev/runnel/internal/cli"
)

// registerExamples makes every bundled example a registered job: a JobManager and its TaskManagers build
// it from the arguments `runnel submit` was given (the flags of `runnel run EXAMPLE`).
func registerExamples() {
	for _, ex := range examples.All() {
		runnel.Register(ex.Name, func(args []string) (*runnel.Environment, error) {
			env, _, err := buildExample(ex, args, os.Stdout)
			return env, err
		})
	}
}

// buildExample parses args as the flags of `runnel run EXAMPLE` and builds the example with them, plus
// opts (what only this process needs: a logger, a progress callback).
func buildExample(ex examples.Example, args []string, out io.Writer, opts ...runnel.Option) (*runnel.Environment, examples.Job, error) {
	fs := pflag.NewFlagSet(ex.Name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f runFlags
	f.register(fs)
	job := ex.New(fs)
	if err := fs.Parse(args); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", ex.Name, err)
	}
	if err := f.validate(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", ex.Name, err)
	}
	env := runnel.NewEnvironment(append(f.jobOptions(), opts...)...)
	if err := job.Build(env, examples.Options{Out: out, Duration: f.duration, Restoring: f.fromSavepoint != ""}); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", ex.Name, err)
	}
	return env, job, env.Err()
}

// clusterOnly are the flags of `runnel submit` that are not the job's: they are not passed to the cluster.
var clusterOnly = map[string]bool{"jobmanager": true, "report": true, "verbose": true, "progress-interval": true,
	"tls-cert": true, "tls-key": true, "tls-ca": true, "tls-server-name": true}

// jobArgs returns the flags the user set on cmd, as arguments the cluster's processes parse again.
func jobArgs(cmd *cobra.Command) []string {
	var args []string
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if clusterOnly[fl.Name] {
			return
		}
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				args = append(args, "--"+fl.Name+"="+v)
			}
			return
		}
		args = append(args, "--"+fl.Name+"="+fl.Value.String())
	})
	return args
}

func newSubmitCmd() *cobra.Command {
	var f runFlags
	var jobManager string
	var tls func() *runnel.TLSFiles
	submit := &cobra.Command{
		Use:   "submit EXAMPLE --jobmanager HOST:PORT [flags]",
		Short: "Run a bundled example job on a cluster (runnel jobmanager and runnel taskmanager)",
		Long: "Run a bundled example job on the cluster of a JobManager, with the flags of runnel run EXAMPLE, and wait for it to end.\n" +
			"Every process of the cluster must be started from this same binary. Checkpoint storage must be shared by all of them.\n" +
			"Ctrl-C (SIGINT) or SIGTERM stops the job as runnel run does. Exit codes as runnel run.",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return usageError(fmt.Errorf("unknown example %q (runnel examples lists them)", args[0]))
		},
	}
	pf := submit.PersistentFlags()
	f.register(pf)
	pf.StringVar(&jobManager, "jobmanager", runnel.DefaultJobManagerAddr, "the JobManager's address")
	tls = cli.AddTLSFlags(pf)
	for _, ex := range examples.All() {
		c := &cobra.Command{Use: ex.Name + " [flags]", Short: ex.Description, Args: cobra.NoArgs}
		ex.New(c.Flags()) // the example's flags, parsed again from the arguments by every process
		c.RunE = func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"taskmanagers", "metrics-addr"} {
				if cmd.Flags().Changed(name) {
					return usageError(fmt.Errorf("--%s is not a flag of submit: the cluster's TaskManagers are its own, and the JobManager serves the job's metrics (runnel jobmanager --rest-addr), each TaskManager its in-flight logs' (runnel taskmanager --metrics-addr)", name))
				}
			}
			for _, name := range []string{"inflight-log-memory", "inflight-log-disk"} {
				if cmd.Flags().Changed(name) {
					return usageError(fmt.Errorf("--%s is not a flag of submit: the in-flight logs live in the TaskManagers, give it to runnel taskmanager", name))
				}
			}
			args := jobArgs(cmd)
			f := f
			f.jobManager = jobManager
			build := func(opts []runnel.Option) (*runnel.Environment, examples.Job, error) {
				return buildExample(ex, args, cmd.OutOrStdout(), opts[len(f.jobOptions()):]...)
			}
			return runExample(cmd, ex.Name, f, build, func(ctx context.Context, env *runnel.Environment) (*runnel.JobResult, error) {
				return runnel.Submit(ctx, runnel.SubmitConfig{JobManager: jobManager, TLS: tls(), Job: ex.Name, Args: args, Env: env})
			})
		}
		submit.AddCommand(c)
	}
	return submit
}

// daemonContext is cancelled by the first SIGINT or SIGTERM.
func daemonContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

func daemonLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

func newJobManagerCmd() *cobra.Command {
	var config func() runnel.JobManagerConfig
	var verbose bool
	c := &cobra.Command{
		Use:   "jobmanager [flags]",
		Short: "Run a JobManager: TaskManagers register with it, and runnel submit runs jobs on them",
		Long: "Run a JobManager until SIGINT or SIGTERM, which cancel its jobs and end its TaskManagers' tasks.\n" +
			"It prints \"JobManager listening on ADDR\" once it accepts TaskManagers and clients.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config()
			cfg.Logger = daemonLogger(cmd.ErrOrStderr(), verbose)
			listening := false
			cfg.Listening = func(addr, rest string) {
				listening = true
				line := "JobManager listening on " + addr
				if rest != "" {
					line += " (REST API http://" + rest + "/v1/jobs)"
				}
				fmt.Fprintln(cmd.ErrOrStderr(), line)
			}
			ctx, stop := daemonContext(cmd.Context())
			defer stop()
			err := runnel.ServeJobManager(ctx, cfg)
			if err != nil && !listening {
				return usageError(err) // it could not start as configured (an address, a TLS file)
			}
			return err
		},
	}
	config = cli.AddJobManagerFlags(c.Flags())
	c.Flags().BoolVar(&verbose, "verbose", false, "DEBUG logs")
	return c
}

func newTaskManagerCmd() *cobra.Command {
	var config func() (runnel.TaskManagerConfig, error)
	var verbose bool
	c := &cobra.Command{
		Use:   "taskmanager --jobmanager HOST:PORT [flags]",
		Short: "Run a TaskManager: it offers its slots to a JobManager and runs the tasks it is given",
		Long: "Run a TaskManager until SIGINT or SIGTERM. When it loses its JobManager it cancels its tasks and registers again\n" +
			"(with --jobmanager-wait, it exits with code 1 after that long without one). A JobManager of another build refuses it: exit code 2.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config()
			if err != nil {
				return usageError(err)
			}
			cfg.Logger = daemonLogger(cmd.ErrOrStderr(), verbose)
			ctx, stop := daemonContext(cmd.Context())
			defer stop()
			registered := false
			cfg.Registered = func() { registered = true }
			cfg.MetricsListening = func(addr string) {
				fmt.Fprintln(cmd.ErrOrStderr(), "TaskManager metrics on http://"+addr+"/metrics")
			}
			err = runnel.ServeTaskManager(ctx, cfg)
			switch {
			case err == nil:
			case strings.Contains(err.Error(), "same build"):
				return usageError(err)
			case !registered && !errors.Is(err, runnel.ErrJobManagerUnreachable) && !strings.Contains(err.Error(), "--jobmanager-wait"):
				return usageError(err) // it could not start as configured (an address, a TLS file)
			}
			return err
		},
	}
	config = cli.AddTaskManagerFlags(c.Flags())
	c.Flags().BoolVar(&verbose, "verbose", false, "DEBUG logs")
	return c
}

func newCancelCmd() *cobra.Command {
	var cfg runnel.CancelConfig
	var tls func() *runnel.TLSFiles
	c := &cobra.Command{
		Use:   "cancel JOBID --jobmanager HOST:PORT [--savepoint DIR]",
		Short: "Stop a job that runs on a cluster (with a savepoint first, with --savepoint)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Job, cfg.TLS = args[0], tls()
			err := runnel.Cancel(cmd.Context(), cfg)
			if err != nil && strings.Contains(err.Error(), "32 hexadecimal digits") {
				return usageError(err)
			}
			return err
		},
	}
	c.Flags().StringVar(&cfg.JobManager, "jobmanager", runnel.DefaultJobManagerAddr, "the JobManager's address")
	c.Flags().StringVar(&cfg.Savepoint, "savepoint", "", "write a savepoint to this directory (which every process reaches) before the job is cancelled")
	tls = cli.AddTLSFlags(c.Flags())
	return c
}

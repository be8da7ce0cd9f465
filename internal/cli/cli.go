// Package cli is the command line of a Runnel binary (runnel.Main): it picks the role its first argument
// names (run, jobmanager, taskmanager, submit), parses the role's flags, builds the job from the binary's
// registered jobs, and runs the role, mapping the outcome to an exit code. The flag sets of the roles are
// here too, for other command lines that start them. It must not import the root package, which calls it.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel/internal/executor"
	"github.com/runnel-dev/runnel/internal/report"
	"github.com/runnel-dev/runnel/internal/roles"
)

// usageErr marks a mistake in Main's command line.
type usageErr struct{ error }

func (e usageErr) Unwrap() error { return e.error }

// Roles are the first arguments Main reserves for the roles (docs/cluster.md §2.1); no job may be called by
// one of them, since "myjob submit" must mean the role.
var Roles = []string{"run", "jobmanager", "taskmanager", "submit", "cancel"}

// Main runs the role args name, with the jobs registered in the binary, writing to stdout and stderr, and
// returns the exit code (runnel.Main documents the command line and the codes).
func Main(ctx context.Context, jobs roles.Jobs, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && isHelp(args[0]) || len(args) > 1 && args[0] == "run" && isHelp(args[1]) {
		// Asked before any job is picked: with one job registered, "--help" would otherwise be taken for
		// that job's first argument, and the job would start.
		usage(stdout, jobs)
		return 0
	}
	role := "run"
	if len(args) > 0 && slices.Contains(Roles, args[0]) {
		role, args = args[0], args[1:]
	}
	var err error
	switch role {
	case "run":
		err = mainRun(ctx, jobs, args, stderr)
	case "jobmanager":
		err = mainJobManager(ctx, jobs, args, stderr)
	case "taskmanager":
		err = mainTaskManager(ctx, jobs, args, stderr)
	case "submit":
		err = mainSubmit(ctx, jobs, args, stderr)
	default:
		err = usageErr{fmt.Errorf("%s is not a role this program has: run, jobmanager, taskmanager, submit", role)}
	}
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", progName(), err)
	if ue := (usageErr{}); errors.As(err, &ue) {
		return 2
	}
	return 1
}

func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// usage writes what the program can do: its roles and its registered jobs.
func usage(w io.Writer, jobs roles.Jobs) {
	prog := progName()
	fmt.Fprintf(w, `Usage:
  %[1]s [run] [JOB] [ARGS...]                  run JOB in the embedded mini-cluster
  %[1]s jobmanager [--addr HOST:PORT] [--rest-addr HOST:PORT]
                                               run a JobManager
  %[1]s taskmanager --jobmanager HOST:PORT [--slots N]
                                               run a TaskManager
  %[1]s submit [JOB] --jobmanager HOST:PORT [--report FILE] [-- ARGS...]
                                               run JOB on the cluster and wait for its end

JOB may be left out when one job is registered; ARGS go to its build function.
Exit codes: 0 finished, 1 failed or stopped, 2 a mistake in the command line.
`, prog)
	names := jobs.Names()
	if len(names) == 0 {
		fmt.Fprintln(w, "\nNo job is registered in this program.")
		return
	}
	fmt.Fprintf(w, "\nRegistered jobs: %s\n", strings.Join(names, ", "))
}

func progName() string {
	if len(os.Args) > 0 {
		return os.Args[0]
	}
	return "runnel"
}

// pickJob returns the job args name (its first word, when registered) and the arguments after it; with
// one job registered the name may be left out.
func pickJob(registry roles.Jobs, args []string) (string, []string, error) {
	jobs := registry.Names()
	if len(args) > 0 && slices.Contains(jobs, args[0]) {
		return args[0], args[1:], nil
	}
	if len(jobs) == 1 {
		return jobs[0], args, nil
	}
	if len(jobs) == 0 {
		return "", nil, usageErr{errors.New("no job is registered in this program: call runnel.Register before runnel.Main")}
	}
	return "", nil, usageErr{fmt.Errorf("name the job to run: registered are %s", strings.Join(jobs, ", "))}
}

func mainRun(ctx context.Context, jobs roles.Jobs, args []string, stderr io.Writer) error {
	name, args, err := pickJob(jobs, args)
	if err != nil {
		return err
	}
	job, err := jobs.Build(ctx, name, args)
	if err != nil {
		return usageErr{err}
	}
	res, err := executor.Execute(ctx, job, job)
	return summarize(stderr, name, res, err)
}

// summarize writes a job's end to stderr and returns what makes the exit code.
func summarize(stderr io.Writer, name string, res *report.JobResult, err error) error {
	if res == nil {
		return usageErr{err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "job %s %s in %v (%d failovers)\n", name, res.Status, time.Duration(res.WallMillis)*time.Millisecond, len(res.Failovers))
	if res.Status != "FINISHED" {
		return fmt.Errorf("job %s %s", name, res.Status)
	}
	return nil
}

// AddTLSFlags adds the mutual TLS flags of every cluster role to fs (--tls-cert, --tls-key, --tls-ca,
// --tls-server-name); the function it returns gives the files once fs is parsed (nil when none was set).
func AddTLSFlags(fs *pflag.FlagSet) func() *roles.TLSFiles {
	var f roles.TLSFiles
	fs.StringVar(&f.Cert, "tls-cert", "", "PEM certificate of this process: with --tls-key and --tls-ca, every connection is mutual TLS 1.3")
	fs.StringVar(&f.Key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.CA, "tls-ca", "", "PEM certificate of the authority every peer's certificate must be signed by")
	fs.StringVar(&f.ServerName, "tls-server-name", "", "verify every peer's certificate against this name instead of the host dialled")
	return func() *roles.TLSFiles {
		if f.Cert == "" && f.Key == "" && f.CA == "" {
			return nil
		}
		return &f
	}
}

func parse(fs *pflag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usageErr{fmt.Errorf("%s: %w", fs.Name(), err)}
	}
	return nil
}

// AddJobManagerFlags adds the flags of the jobmanager role to fs (address, REST address, heartbeats, slot
// wait, buffer size, TLS); the function it returns gives the configuration once fs is parsed.
func AddJobManagerFlags(fs *pflag.FlagSet) func() roles.JobManagerConfig {
	var cfg roles.JobManagerConfig
	fs.StringVar(&cfg.Addr, "addr", roles.DefaultJobManagerAddr, "where TaskManagers and clients reach the JobManager")
	fs.StringVar(&cfg.RESTAddr, "rest-addr", roles.DefaultRESTAddr, "where the JSON REST API and /metrics are served (\"\" none)")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", roles.DefaultHeartbeatInterval, "how often the JobManager and TaskManagers send each other a heartbeat")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", roles.DefaultHeartbeatTimeout, "silence after which either side declares the other lost")
	fs.DurationVar(&cfg.SlotWaitTimeout, "slot-wait-timeout", 5*time.Minute, "how long a job waits for slots (a lost TaskManager's replacement) before it fails")
	fs.IntVar(&cfg.BufferSize, "buffer-size", 0, "network buffer size every TaskManager must use (0: the default)")
	tls := AddTLSFlags(fs)
	return func() roles.JobManagerConfig {
		c := cfg
		c.TLS = tls()
		return c
	}
}

// noInflightLogDisk is --inflight-log-disk's value for no spilling (runnel.NoInflightLogDisk).
const noInflightLogDisk = -1

// AddTaskManagerFlags adds the flags of the taskmanager role to fs (JobManager, slots, name, data address,
// network memory, TLS); the function it returns gives the configuration once fs is parsed, or the mistake.
func AddTaskManagerFlags(fs *pflag.FlagSet) func() (roles.TaskManagerConfig, error) {
	var cfg roles.TaskManagerConfig
	fs.StringVar(&cfg.JobManager, "jobmanager", roles.DefaultJobManagerAddr, "the JobManager's address")
	fs.IntVar(&cfg.Slots, "slots", 1, "task slots")
	fs.StringVar(&cfg.Name, "name", "", "name in reports and logs (default tm-PID)")
	fs.StringVar(&cfg.DataAddr, "data-addr", "127.0.0.1:0", "where the data server listens for other TaskManagers")
	fs.StringVar(&cfg.DataAdvertise, "data-advertise", "", "the address other TaskManagers reach the data server at (default: where it listens)")
	fs.Int64Var(&cfg.NetworkMemoryBytes, "network-memory", 0, "bytes of network buffers (0: 128 MiB)")
	fs.Int64Var(&cfg.InflightLogMemory, "inflight-log-memory", 0, "bytes of memory for task failover's in-flight logs before they spill to disk (0: 1 GiB)")
	fs.Int64Var(&cfg.InflightLogDisk, "inflight-log-disk", 0, "bytes of disk for task failover's in-flight logs past their memory (0: 4 GiB; -1: no spilling)")
	fs.IntVar(&cfg.BufferSize, "buffer-size", 0, "network buffer size, the JobManager's (0: the default)")
	fs.DurationVar(&cfg.JobManagerWait, "jobmanager-wait", 0, "exit after this long without a JobManager (0: keep trying)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "serve this TaskManager's Prometheus metrics (its in-flight logs, the Go runtime) at http://ADDR/metrics (\"\": none)")
	tls := AddTLSFlags(fs)
	return func() (roles.TaskManagerConfig, error) {
		c := cfg
		if c.Slots < 1 {
			return c, fmt.Errorf("invalid --slots %d: must be at least 1", c.Slots)
		}
		if d := c.InflightLogDisk; d != 0 && d != noInflightLogDisk && d < 1<<20 {
			return c, fmt.Errorf("invalid --inflight-log-disk %d: at least 1 MiB (1048576), or -1 for no spilling", d)
		}
		c.TLS = tls()
		return c, nil
	}
}

func mainJobManager(ctx context.Context, jobs roles.Jobs, args []string, stderr io.Writer) error {
	fs := pflag.NewFlagSet("jobmanager", pflag.ContinueOnError)
	config := AddJobManagerFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg := config()
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	cfg.Listening = func(addr, rest string) {
		fmt.Fprintf(stderr, "JobManager listening on %s (REST API http://%s/v1/jobs)\n", addr, rest)
	}
	return roles.ServeJobManager(ctx, jobs, cfg)
}

func mainTaskManager(ctx context.Context, jobs roles.Jobs, args []string, stderr io.Writer) error {
	fs := pflag.NewFlagSet("taskmanager", pflag.ContinueOnError)
	config := AddTaskManagerFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := config()
	if err != nil {
		return usageErr{fmt.Errorf("taskmanager: %w", err)}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	return roles.ServeTaskManager(ctx, jobs, cfg)
}

func mainSubmit(ctx context.Context, jobs roles.Jobs, args []string, stderr io.Writer) error {
	fs := pflag.NewFlagSet("submit", pflag.ContinueOnError)
	var jm, report string
	fs.StringVar(&jm, "jobmanager", roles.DefaultJobManagerAddr, "the JobManager's address")
	fs.StringVar(&report, "report", "", "write the job result as JSON to this file")
	tls := AddTLSFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	var jobArgs []string
	if at := fs.ArgsLenAtDash(); at >= 0 {
		rest, jobArgs = fs.Args()[:at], fs.Args()[at:]
	}
	if len(rest) > 1 {
		return usageErr{fmt.Errorf("submit: unexpected %q: the job's arguments go after --", rest[1:])}
	}
	name, _, err := pickJob(jobs, rest)
	if err != nil {
		return err
	}
	job, err := jobs.Build(ctx, name, jobArgs)
	if err != nil {
		return usageErr{err}
	}
	res, err := roles.Submit(ctx, roles.SubmitConfig{JobManager: jm, TLS: tls(), Job: job})
	if res != nil && report != "" {
		b, merr := json.MarshalIndent(res, "", "  ")
		if merr == nil {
			merr = os.WriteFile(report, append(b, '\n'), 0o644)
		}
		if merr != nil {
			return fmt.Errorf("--report: %w", merr)
		}
	}
	return summarize(stderr, name, res, err)
}

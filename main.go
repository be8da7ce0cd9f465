package runnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// Main runs the role its program's command line names, with the jobs registered in the binary (see
// Register), and exits:
//
//	prog [run] [JOB] [ARGS...]                                  run JOB in the embedded mini-cluster
//	prog jobmanager [--addr HOST:PORT] [--rest-addr HOST:PORT]  run a JobManager
//	prog taskmanager --jobmanager HOST:PORT [--slots N]         run a TaskManager
//	prog submit [JOB] --jobmanager HOST:PORT [--report FILE] [-- ARGS...]
//	                                                             run JOB on the cluster and wait for its end
//
// JOB may be left out when one job is registered; ARGS are what its build function gets, the same on every
// process. Every process of a cluster must run the same binary. SIGINT or SIGTERM stops a job (run, submit)
// or a daemon. Exit codes: 0 the job finished or a daemon stopped; 1 the job failed or was stopped; 2 a
// mistake in the command line or configuration, found before anything ran.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := mainWith(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageErr marks a mistake in Main's command line.
type usageErr struct{ error }

func (e usageErr) Unwrap() error { return e.error }

// mainWith is Main on args, writing to stdout and stderr, and returning the exit code.
func mainWith(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	role := "run"
	if len(args) > 0 && slices.Contains(roleWords, args[0]) {
		role, args = args[0], args[1:]
	}
	var err error
	switch role {
	case "run":
		err = mainRun(ctx, args, stderr)
	case "jobmanager":
		err = mainJobManager(ctx, args, stderr)
	case "taskmanager":
		err = mainTaskManager(ctx, args, stderr)
	case "submit":
		err = mainSubmit(ctx, args, stderr)
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

func progName() string {
	if len(os.Args) > 0 {
		return os.Args[0]
	}
	return "runnel"
}

// pickJob returns the job args name (its first word, when registered) and the arguments after it; with
// one job registered the name may be left out.
func pickJob(args []string) (string, []string, error) {
	jobs := registeredJobs()
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

func mainRun(ctx context.Context, args []string, stderr io.Writer) error {
	name, args, err := pickJob(args)
	if err != nil {
		return err
	}
	env, _, err := buildRegistered(ctx, name, args)
	if err != nil {
		return usageErr{err}
	}
	res, err := env.Execute(ctx, name)
	return summarize(stderr, name, res, err)
}

// summarize writes a job's end to stderr and returns what makes the exit code.
func summarize(stderr io.Writer, name string, res *JobResult, err error) error {
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
func AddTLSFlags(fs *pflag.FlagSet) func() *TLSFiles {
	var f TLSFiles
	fs.StringVar(&f.Cert, "tls-cert", "", "PEM certificate of this process: with --tls-key and --tls-ca, every connection is mutual TLS 1.3")
	fs.StringVar(&f.Key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.CA, "tls-ca", "", "PEM certificate of the authority every peer's certificate must be signed by")
	fs.StringVar(&f.ServerName, "tls-server-name", "", "verify every peer's certificate against this name instead of the host dialled")
	return func() *TLSFiles {
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
func AddJobManagerFlags(fs *pflag.FlagSet) func() JobManagerConfig {
	var cfg JobManagerConfig
	fs.StringVar(&cfg.Addr, "addr", DefaultJobManagerAddr, "where TaskManagers and clients reach the JobManager")
	fs.StringVar(&cfg.RESTAddr, "rest-addr", DefaultRESTAddr, "where the JSON REST API and /metrics are served (\"\" none)")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", DefaultHeartbeatInterval, "how often the JobManager and TaskManagers send each other a heartbeat")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", DefaultHeartbeatTimeout, "silence after which either side declares the other lost")
	fs.DurationVar(&cfg.SlotWaitTimeout, "slot-wait-timeout", 5*time.Minute, "how long a job waits for slots (a lost TaskManager's replacement) before it fails")
	fs.IntVar(&cfg.BufferSize, "buffer-size", 0, "network buffer size every TaskManager must use (0: the default)")
	tls := AddTLSFlags(fs)
	return func() JobManagerConfig {
		c := cfg
		c.TLS = tls()
		return c
	}
}

// AddTaskManagerFlags adds the flags of the taskmanager role to fs (JobManager, slots, name, data address,
// network memory, TLS); the function it returns gives the configuration once fs is parsed, or the mistake.
func AddTaskManagerFlags(fs *pflag.FlagSet) func() (TaskManagerConfig, error) {
	var cfg TaskManagerConfig
	fs.StringVar(&cfg.JobManager, "jobmanager", DefaultJobManagerAddr, "the JobManager's address")
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
	return func() (TaskManagerConfig, error) {
		c := cfg
		if c.Slots < 1 {
			return c, fmt.Errorf("invalid --slots %d: must be at least 1", c.Slots)
		}
		if d := c.InflightLogDisk; d != 0 && d != NoInflightLogDisk && d < 1<<20 {
			return c, fmt.Errorf("invalid --inflight-log-disk %d: at least 1 MiB (1048576), or -1 for no spilling", d)
		}
		c.TLS = tls()
		return c, nil
	}
}

func mainJobManager(ctx context.Context, args []string, stderr io.Writer) error {
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
	return ServeJobManager(ctx, cfg)
}

func mainTaskManager(ctx context.Context, args []string, stderr io.Writer) error {
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
	return ServeTaskManager(ctx, cfg)
}

func mainSubmit(ctx context.Context, args []string, stderr io.Writer) error {
	fs := pflag.NewFlagSet("submit", pflag.ContinueOnError)
	var jm, report string
	fs.StringVar(&jm, "jobmanager", DefaultJobManagerAddr, "the JobManager's address")
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
	name, _, err := pickJob(rest)
	if err != nil {
		return err
	}
	res, err := Submit(ctx, SubmitConfig{JobManager: jm, TLS: tls(), Job: name, Args: jobArgs})
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

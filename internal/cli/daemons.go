package cli

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
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel/internal/ha"
	"github.com/runnel-dev/runnel/internal/roles"
)

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

// AddJobManagerFlags adds the flags of the jobmanager role to fs (address, REST address, heartbeats, slot
// wait, buffer size, TLS); the function it returns gives the configuration once fs is parsed.
func AddJobManagerFlags(fs *pflag.FlagSet) func() (roles.JobManagerConfig, error) {
	var cfg roles.JobManagerConfig
	fs.StringVar(&cfg.Addr, "addr", roles.DefaultJobManagerAddr, "where TaskManagers and clients reach the JobManager")
	fs.StringVar(&cfg.RESTAddr, "rest-addr", roles.DefaultRESTAddr, "where the JSON REST API and /metrics are served (\"\" none)")
	fs.StringVar(&cfg.HealthAddr, "health-addr", "", "where GET /healthz and /healthz/ready alone are served over plain HTTP, also with TLS: for probes without a client certificate (\"\" none)")
	fs.StringVar(&cfg.Advertise, "advertise-addr", "", "with --ha: the address the other processes reach this JobManager at (default --addr, which must then name a host)")
	fs.StringVar(&cfg.RESTAdvertise, "rest-advertise-addr", "", "with --ha: the address of this JobManager's REST API that /v1/leader gives (default --rest-addr, which must then name a host)")
	haf := AddHAFlags(fs, true)
	fs.BoolVar(&cfg.Continuity, "ha-continuity", true, "with --ha: take over the tasks a lost leader's TaskManagers kept running (false: restart every job from its latest checkpoint, as Flink does)")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", roles.DefaultHeartbeatInterval, "how often the JobManager and TaskManagers send each other a heartbeat")
	fs.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", roles.DefaultHeartbeatTimeout, "silence after which either side declares the other lost")
	fs.DurationVar(&cfg.SlotWaitTimeout, "slot-wait-timeout", 5*time.Minute, "how long a job waits for slots (a lost TaskManager's replacement) before it fails")
	fs.IntVar(&cfg.BufferSize, "buffer-size", 0, "network buffer size every TaskManager must use (0: the default)")
	tls := AddTLSFlags(fs)
	return func() (roles.JobManagerConfig, error) {
		c := cfg
		c.TLS = tls()
		var err error
		c.HA, err = haf()
		return c, err
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
	haf := AddHAFlags(fs, false)
	fs.DurationVar(&cfg.Grace, "ha-grace", roles.DefaultGrace, "with --ha: how long the tasks keep running after the leader is lost, for the next leader to take them over (0: cancel them at once)")
	tls := AddTLSFlags(fs)
	return func() (roles.TaskManagerConfig, error) {
		c := cfg
		if c.Grace < 0 {
			return c, fmt.Errorf("invalid --ha-grace %v: must not be negative", c.Grace)
		}
		if c.Slots < 1 {
			return c, fmt.Errorf("invalid --slots %d: must be at least 1", c.Slots)
		}
		if d := c.InflightLogDisk; d != 0 && d != noInflightLogDisk && d < 1<<20 {
			return c, fmt.Errorf("invalid --inflight-log-disk %d: at least 1 MiB (1048576), or -1 for no spilling", d)
		}
		c.TLS = tls()
		var err error
		c.HA, err = haf()
		return c, err
	}
}

// roleHelp writes the help of a role that takes no job.
func roleHelp(w io.Writer, usage, about string, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s %s\n\n%s\n\nFlags:\n%s", progName(), usage, about, fs.FlagUsages())
}

// parseDaemon parses the command line of a daemon role, which takes flags only; help reports that it
// asked for (and was given) the role's help instead.
func parseDaemon(fs *pflag.FlagSet, args []string, stdout io.Writer, usage, about string) (help bool, err error) {
	if wantsHelp(args) {
		roleHelp(stdout, usage, about, fs)
		return true, nil
	}
	if err := parse(fs, args); err != nil {
		return false, err
	}
	if fs.NArg() > 0 {
		return false, usageErr{fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())}
	}
	return false, nil
}

// daemonLogger logs at INFO, or at DEBUG with --verbose.
func daemonLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

func mainJobManager(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("jobmanager", pflag.ContinueOnError)
	config := AddJobManagerFlags(fs)
	verbose := fs.Bool("verbose", false, "DEBUG logs")
	if help, err := parseDaemon(fs, args, stdout, "jobmanager [FLAGS]", "Runs a JobManager until SIGINT or SIGTERM, which cancel its jobs and end its TaskManagers' tasks.\n"+
		"It prints \"JobManager listening on ADDR\" once it accepts TaskManagers and clients."); help || err != nil {
		return err
	}
	cfg, err := config()
	if err != nil {
		return usageErr{fmt.Errorf("jobmanager: %w", err)}
	}
	cfg.Logger = daemonLogger(stderr, *verbose)
	listening := false
	cfg.Listening = func(addr, rest string) {
		listening = true
		line := "JobManager listening on " + addr
		if rest != "" {
			scheme := "http"
			if cfg.TLS != nil {
				scheme = "https"
			}
			line += " (REST API " + scheme + "://" + rest + "/v1/jobs)"
		}
		fmt.Fprintln(stderr, line)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = roles.ServeJobManager(ctx, RegisteredJobs{}, cfg)
	if err != nil && !listening && !errors.Is(err, ha.ErrUnreachable) {
		return usageErr{err} // it could not start as configured (an address, a TLS file)
	}
	return err
}

func mainTaskManager(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("taskmanager", pflag.ContinueOnError)
	config := AddTaskManagerFlags(fs)
	heapBudget := AddHeapBudgetFlag(fs)
	verbose := fs.Bool("verbose", false, "DEBUG logs")
	if help, err := parseDaemon(fs, args, stdout, "taskmanager --jobmanager HOST:PORT [FLAGS]", "Runs a TaskManager until SIGINT or SIGTERM. When it loses its JobManager it cancels its tasks and registers\n"+
		"again (with --ha, it keeps them running for --ha-grace and reports them to the next leader, which takes them over)\n"+
		" (with --jobmanager-wait, it exits with code 1 after that long without one). A JobManager of another build\n"+
		"refuses it: exit code 2."); help || err != nil {
		return err
	}
	cfg, err := config()
	if err != nil {
		return usageErr{fmt.Errorf("taskmanager: %w", err)}
	}
	pacer, err := heapBudget()
	if err != nil {
		return usageErr{fmt.Errorf("taskmanager: %w", err)}
	}
	defer pacer.Stop()
	cfg.Logger = daemonLogger(stderr, *verbose)
	registered := false
	cfg.Registered = func() { registered = true }
	cfg.MetricsListening = func(addr string) {
		fmt.Fprintln(stderr, "TaskManager metrics on http://"+addr+"/metrics")
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = roles.ServeTaskManager(ctx, RegisteredJobs{}, cfg)
	switch {
	case err == nil:
	case strings.Contains(err.Error(), "same build"):
		return usageErr{err}
	case !registered && !errors.Is(err, roles.ErrJobManagerUnreachable) && !errors.Is(err, ha.ErrUnreachable) && !strings.Contains(err.Error(), "--jobmanager-wait"):
		return usageErr{err} // it could not start as configured (an address, a TLS file)
	}
	return err
}

func mainCancel(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := pflag.NewFlagSet("cancel", pflag.ContinueOnError)
	var cfg roles.CancelConfig
	fs.StringVar(&cfg.JobManager, "jobmanager", roles.DefaultJobManagerAddr, "the JobManager's address")
	fs.StringVar(&cfg.Savepoint, "savepoint", "", "write a savepoint to this directory (which every process reaches) before the job is cancelled")
	haf := AddHAFlags(fs, false)
	tls := AddTLSFlags(fs)
	if wantsHelp(args) {
		roleHelp(stdout, "cancel JOBID --jobmanager HOST:PORT [--savepoint DIR]", "Stops a job that runs on a cluster, with a savepoint first when --savepoint is given.", fs)
		return nil
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr{fmt.Errorf("cancel: want one JOBID (the id submit and the REST API give), got %d arguments", fs.NArg())}
	}
	cfg.Job, cfg.TLS = fs.Arg(0), tls()
	var err error
	if cfg.HA, err = haf(); err != nil {
		return usageErr{fmt.Errorf("cancel: %w", err)}
	}
	err = roles.Cancel(ctx, cfg)
	if err != nil && strings.Contains(err.Error(), "32 hexadecimal digits") {
		return usageErr{err}
	}
	return err
}

package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel/internal/ha"
	"github.com/runnel-dev/runnel/internal/heapbudget"
	"github.com/runnel-dev/runnel/internal/roles"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

// Settings are the engine's settings of a run that its flags set: what every process of a cluster builds
// the job with. The root package turns them into its Config.
type Settings struct {
	Parallelism        int
	MaxParallelism     int
	TaskManagers       int
	Chaining           bool
	MetricsAddr        string
	UIAddr             string
	CheckpointInterval time.Duration
	CheckpointMode     string
	Unaligned          bool
	AlignedTimeout     time.Duration
	TolerableFailed    int
	Incremental        bool
	CheckpointStorage  string
	Failover           string
	RestartStrategy    string
	StateBackend       string
	InjectFailures     []string
	SavepointOnStop    string
	FromSavepoint      string
	AllowNonRestored   bool
	InflightLogMemory  int64
	InflightLogDisk    int64
	ExchangeMode       string
	Scheduling         string
}

// runOnly are the flags of a run that concern the process running or following it, not the job.
type runOnly struct {
	duration time.Duration
	report   string
	verbose  bool
	progress time.Duration
	// heapBudget starts the pacer of the process that runs the job (run only).
	heapBudget func() (*heapbudget.Pacer, error)
}

// clientOnly are the flags of run and submit that are not sent to a cluster with the job's arguments.
var clientOnly = map[string]bool{"jobmanager": true, "ha": true, "ha-cluster": true, "report": true, "verbose": true, "progress-interval": true,
	"tls-cert": true, "tls-key": true, "tls-ca": true, "tls-server-name": true}

// localOnly are the flags of run that belong to the processes of a cluster, so submit refuses them, and
// the process that takes each.
var localOnly = []struct{ name, why string }{
	{"taskmanagers", "the cluster's TaskManagers are its own"},
	{"metrics-addr", "the JobManager serves the job's metrics (jobmanager --rest-addr), each TaskManager its in-flight logs' (taskmanager --metrics-addr)"},
	{"ui", "the JobManager serves the dashboard on its REST address (jobmanager --rest-addr)"},
	{"inflight-log-memory", "the in-flight logs live in the TaskManagers: give it to taskmanager"},
	{"inflight-log-disk", "the in-flight logs live in the TaskManagers: give it to taskmanager"},
	{heapBudgetFlag, "it paces the collector of the processes that run the tasks: give it to taskmanager"},
}

// addRunFlags defines the flags of a run (run and submit) on fs, with def as their defaults.
func addRunFlags(fs *pflag.FlagSet, def Settings, ro *runOnly) *Settings {
	s := &Settings{}
	fs.IntVar(&s.Parallelism, "parallelism", def.Parallelism, "default parallelism of the job's operators")
	fs.IntVar(&s.MaxParallelism, "max-parallelism", def.MaxParallelism, "key groups of keyed state: the most any operator's parallelism may be, now or when rescaled from a savepoint\n"+
		"(1 to 32768; a savepoint is restored only with the max parallelism it was taken with)")
	fs.IntVar(&s.TaskManagers, "taskmanagers", def.TaskManagers, "TaskManagers of the in-process cluster (tasks on different ones talk over TCP)")
	fs.DurationVar(&ro.duration, "duration", 0, "stop (cancel) the job after this long; 0 runs until bounded sources end")
	ro.heapBudget = AddHeapBudgetFlag(fs)
	fs.Bool("no-chaining", !def.Chaining, "do not chain operators into tasks")
	fs.StringVar(&s.MetricsAddr, "metrics-addr", def.MetricsAddr, "serve the job's Prometheus metrics at http://ADDR/metrics while it runs (for example :9249)")
	fs.StringVar(&s.UIAddr, "ui", def.UIAddr, "serve the web dashboard (the job graph, throughput, backpressure, failovers, checkpoints) and the REST API\n"+
		"at http://ADDR/ while the job runs (for example 127.0.0.1:8081)")
	fs.StringVar(&ro.report, "report", "", "write the job result as JSON to this file")
	fs.BoolVar(&ro.verbose, "verbose", false, "show the runtime's INFO logs")
	fs.DurationVar(&ro.progress, "progress-interval", time.Second, "how often to show progress")
	fs.DurationVar(&s.CheckpointInterval, "checkpoint-interval", def.CheckpointInterval, "take a checkpoint this often (0: checkpointing off)")
	fs.StringVar(&s.CheckpointMode, "checkpoint-mode", def.CheckpointMode, "checkpoint mode: exactly-once (aligned barriers) or at-least-once")
	fs.BoolVar(&s.Unaligned, "unaligned-checkpoints", def.Unaligned, "unaligned checkpoints: barriers overtake the data queued in front of them, which is stored with the checkpoint, so that a checkpoint under backpressure does not wait for the queues to drain (savepoints stay aligned)")
	fs.DurationVar(&s.AlignedTimeout, "aligned-checkpoint-timeout", def.AlignedTimeout, "with --unaligned-checkpoints: checkpoints start aligned, and a subtask switches to unaligned once its alignment took this long (0: unaligned from the start)")
	fs.BoolVar(&s.Incremental, "incremental-checkpoints", def.Incremental, "incremental checkpoints: keyed state on the memory backend writes what changed since the previous checkpoint and refers to earlier checkpoints for the rest")
	fs.IntVar(&s.TolerableFailed, "tolerable-failed-checkpoints", def.TolerableFailed, "consecutive failed checkpoints tolerated; one more fails the job over through its restart strategy (a full restart from the latest checkpoint)")
	fs.StringVar(&s.CheckpointStorage, "checkpoint-storage", def.CheckpointStorage, "where checkpoints go: a directory, file://DIR, s3://BUCKET/PREFIX or mem:// (default: a temporary directory, removed afterwards)")
	fs.StringVar(&s.Failover, "failover", def.Failover, "failover strategy: full (restart every task), region (restart the pipelined regions that must) approximate (restart the failed subtask and everything downstream while upstream keeps running; the loss is counted)\n"+
		"or task (restart only the failed subtask, exactly once: its inputs replayed from in-flight logs in the recorded order)")
	fs.StringVar(&s.RestartStrategy, "restart-strategy", def.RestartStrategy, "restart strategy: none, fixed-delay:attempts=3,delay=1s, exponential-delay:initial=100ms,max=10s,multiplier=2,reset=1m,jitter=0.1,immediate=1\n"+
		"or failure-rate:max-failures=3,interval=1m,delay=1s. Default: none without checkpointing; with it\n"+
		scheduler.DefaultRestartWithCheckpoints+":\n"+
		"the first restart of a failure is immediate, and only failures within a minute of each other back off (100ms doubling to 10s)")
	fs.StringVar(&s.StateBackend, "state-backend", def.StateBackend, "where keyed state lives: memory or pebble (on disk)")
	fs.StringVar(&s.SavepointOnStop, "savepoint-on-stop", def.SavepointOnStop, "write a savepoint to this directory when the job is stopped (--duration, Ctrl-C or SIGTERM); checked before the job runs")
	fs.StringVar(&s.FromSavepoint, "from-savepoint", def.FromSavepoint, "start from a savepoint directory, or from the newest valid checkpoint of a checkpoint storage directory (which must exist;\n"+
		"damaged newer checkpoints are passed over with a WARN)")
	fs.Int64Var(&s.InflightLogMemory, "inflight-log-memory", def.InflightLogMemory, "with --failover task: each TaskManager's bytes of memory for the in-flight logs before they spill (0: 1 GiB)")
	fs.Int64Var(&s.InflightLogDisk, "inflight-log-disk", def.InflightLogDisk, "with --failover task: each TaskManager's bytes of disk for the in-flight logs past their memory (0: 4 GiB; -1: no spilling)")
	fs.BoolVar(&s.AllowNonRestored, "allow-non-restored-state", def.AllowNonRestored, "with --from-savepoint: drop, with a WARN, the state of operators (uids) the job no longer has, rather than refuse to start")
	fs.StringVar(&s.ExchangeMode, "exchange-mode", def.ExchangeMode, "pipelined, blocking (bounded jobs: every shuffle spilled, each task its own failover region) or forward-pipelined")
	fs.StringVar(&s.Scheduling, "scheduling", def.Scheduling, "pipelined-region or eager")
	fs.StringArrayVar(&s.InjectFailures, "inject-failure", def.InjectFailures, "make a task fail once, on purpose: OPERATOR[SUBTASK]@WHEN, WHEN a duration since the start (2s),\n"+
		"a record count (5000: after that many records reached the subtask, over all its attempts) or a checkpoint (chk-3: at the first\n"+
		"record after the subtask heard that checkpoint 3 or a later one completed); repeatable: every spec fires once,\n"+
		"also several for one subtask (map[0]@1000 and map[0]@5000 fail it twice; specs due together fire one per attempt, in the order given)")
	return s
}

// settings returns the settings fs was parsed into (addRunFlags's s, with --no-chaining read).
func settings(fs *pflag.FlagSet, s *Settings) Settings {
	out := *s
	noChaining, _ := fs.GetBool("no-chaining")
	out.Chaining = !noChaining
	return out
}

// addSubmitFlags defines the flags only submit has on fs: the JobManager (or HA) and TLS.
func addSubmitFlags(fs *pflag.FlagSet, jobManager *string) (func() *roles.TLSFiles, func() (*ha.Config, error)) {
	fs.StringVar(jobManager, "jobmanager", roles.DefaultJobManagerAddr, "the JobManager's address")
	haf := AddHAFlags(fs, false)
	return AddTLSFlags(fs), haf
}

// takenFlags returns a FlagSet with the flags of every run and of submit: the names no job may take, and
// what a command line's words are read with before its job is known.
func takenFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("taken", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addRunFlags(fs, Settings{}, &runOnly{})
	_, _ = addSubmitFlags(fs, new(string))
	return fs
}

// validate returns the mistakes in the flags of a run, each naming its flag.
func (s Settings) validate(fs *pflag.FlagSet, ro runOnly) error {
	var errs []error
	if s.Parallelism < 1 {
		errs = append(errs, fmt.Errorf("invalid --parallelism %d: must be at least 1", s.Parallelism))
	}
	if ro.duration < 0 {
		errs = append(errs, fmt.Errorf("invalid --duration %s: must not be negative", ro.duration))
	}
	if s.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(s.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("invalid --metrics-addr %q: want HOST:PORT or :PORT (%v)", s.MetricsAddr, err))
		}
	}
	if s.UIAddr != "" {
		if _, _, err := net.SplitHostPort(s.UIAddr); err != nil {
			errs = append(errs, fmt.Errorf("invalid --ui %q: want HOST:PORT or :PORT (%v)", s.UIAddr, err))
		}
	}
	if ro.progress <= 0 {
		errs = append(errs, fmt.Errorf("invalid --progress-interval %s: must be positive", ro.progress))
	}
	if s.CheckpointInterval < 0 {
		errs = append(errs, fmt.Errorf("invalid --checkpoint-interval %s: must not be negative (0 turns checkpointing off)", s.CheckpointInterval))
	}
	if fs.Changed("checkpoint-storage") && s.CheckpointInterval == 0 {
		errs = append(errs, errors.New("--checkpoint-storage is set but checkpointing is off: set --checkpoint-interval too"))
	}
	if s.TolerableFailed < 0 {
		errs = append(errs, fmt.Errorf("invalid --tolerable-failed-checkpoints %d: must not be negative (0 fails over at the first failed checkpoint)", s.TolerableFailed))
	}
	switch s.CheckpointMode {
	case "exactly-once", "at-least-once":
	default:
		errs = append(errs, fmt.Errorf("invalid --checkpoint-mode %q: use exactly-once or at-least-once", s.CheckpointMode))
	}
	if s.Unaligned && s.CheckpointMode == "at-least-once" {
		errs = append(errs, errors.New("--unaligned-checkpoints with --checkpoint-mode at-least-once: unaligned checkpoints are exactly once; at-least-once checkpoints do not align anyway"))
	}
	if s.AlignedTimeout < 0 {
		errs = append(errs, fmt.Errorf("invalid --aligned-checkpoint-timeout %s: must not be negative", s.AlignedTimeout))
	}
	if fs.Changed("aligned-checkpoint-timeout") && !s.Unaligned {
		errs = append(errs, errors.New("--aligned-checkpoint-timeout switches aligned checkpoints to unaligned: set --unaligned-checkpoints too"))
	}
	if (s.Unaligned || fs.Changed("aligned-checkpoint-timeout")) && s.CheckpointInterval == 0 {
		errs = append(errs, errors.New("--unaligned-checkpoints is set but checkpointing is off: set --checkpoint-interval too"))
	}
	switch s.Failover {
	case "full", "region", "approximate", "task":
	default:
		errs = append(errs, fmt.Errorf("invalid --failover %q: use full, region, approximate or task", s.Failover))
	}
	if s.RestartStrategy != "" {
		if _, err := scheduler.ParseRestartStrategy(s.RestartStrategy); err != nil {
			errs = append(errs, fmt.Errorf("invalid --restart-strategy %q: %w", s.RestartStrategy, err))
		}
	}
	switch s.StateBackend {
	case "memory", "pebble":
	default:
		errs = append(errs, fmt.Errorf("invalid --state-backend %q: use memory or pebble", s.StateBackend))
	}
	return errors.Join(errs...)
}

// wireArgs returns the command line a cluster's processes build the job from: the flags the user set
// (those of the run and the job's own) but the client's, then the job's free arguments after "--".
func wireArgs(fs *pflag.FlagSet, free []string) []string {
	var args []string
	fs.Visit(func(fl *pflag.Flag) {
		if clientOnly[fl.Name] {
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
	if len(free) > 0 {
		args = append(append(args, "--"), free...)
	}
	return args
}

// optionFlags maps the names of runnel options, as the engine's configuration errors use them, to the
// flags that set them, so that a mistake found only when the job is built (an --inject-failure naming no
// operator, a state backend that is not available) names the flag.
var optionFlags = strings.NewReplacer(
	"WithParallelism:", "--parallelism:",
	"WithMaxParallelism:", "--max-parallelism:",
	"; raise max parallelism", "; raise --max-parallelism",
	"WithTaskManagers:", "--taskmanagers:",
	"CheckpointConfig.Interval:", "--checkpoint-interval:",
	"CheckpointConfig.Mode:", "--checkpoint-mode:",
	"CheckpointConfig.Unaligned", "--unaligned-checkpoints",
	"CheckpointConfig.AlignedCheckpointTimeout", "--aligned-checkpoint-timeout",
	"CheckpointConfig.Storage:", "--checkpoint-storage:",
	"WithFailover:", "--failover:",
	"WithRestartStrategy:", "--restart-strategy:",
	"WithStateBackend:", "--state-backend:",
	"WithFailureInjection", "--inject-failure",
	"WithExchangeMode", "--exchange-mode",
	"WithScheduling", "--scheduling",
	"WithSavepointOnStop", "--savepoint-on-stop",
	"restore from savepoint", "--from-savepoint",
	"savepoint on stop", "--savepoint-on-stop",
)

// flagError is a configuration error of the engine in terms of the command line's flags.
type flagError struct{ err error }

func (e flagError) Error() string { return optionFlags.Replace(e.err.Error()) }
func (e flagError) Unwrap() error { return e.err }

func parse(fs *pflag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usageErr{fmt.Errorf("%s: %w", fs.Name(), err)}
	}
	return nil
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

// runFlags are the flags common to every example.
type runFlags struct {
	// jobManager is the address of the cluster that runs the job (runnel submit); "" is the mini-cluster.
	jobManager     string
	parallelism    int
	maxParallelism int
	taskManagers   int
	duration       time.Duration
	noChaining     bool
	metricsAddr    string
	report         string
	verbose        bool
	progress       time.Duration

	// Recovery.
	checkpointInterval time.Duration
	checkpointMode     string
	tolerableFailed    int
	incremental        bool
	checkpointStorage  string
	failover           string
	restartStrategy    string
	stateBackend       string
	injectFailures     []string
	savepointOnStop    string
	fromSavepoint      string
	allowNonRestored   bool
	inflightLogMemory  int64
	inflightLogDisk    int64
	exchangeMode       string
	scheduling         string
}

func newRunCmd() *cobra.Command {
	var f runFlags
	run := &cobra.Command{
		Use:   "run EXAMPLE [flags]",
		Short: "Run a bundled example job in an in-process cluster",
		Long: "Run a bundled example job in an in-process cluster (a JobManager and --taskmanagers TaskManagers).\n" +
			"Live progress goes to stderr: a refreshing status block on a terminal, log lines otherwise.\n" +
			"Ctrl-C (SIGINT) or SIGTERM stops the job cleanly (with --savepoint-on-stop, after a savepoint); a second one exits at once.\n" +
			"Exit codes: 0 done, 1 the job failed, 2 a usage error (nothing ran), 130 / 143 stopped by SIGINT / SIGTERM.",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return usageError(fmt.Errorf("unknown example %q (runnel examples lists them)", args[0]))
		},
	}
	f.register(run.PersistentFlags())
	for _, ex := range examples.All() {
		ex := ex
		c := &cobra.Command{
			Use:   ex.Name + " [flags]",
			Short: ex.Description,
			Args:  cobra.NoArgs,
		}
		job := ex.New(c.Flags())
		c.RunE = func(cmd *cobra.Command, _ []string) error {
			build := func(opts []runnel.Option) (*runnel.Environment, examples.Job, error) {
				env := runnel.NewEnvironment(append(opts, runnel.WithTaskManagers(f.taskManagers), runnel.WithMetrics(f.metricsAddr))...)
				if err := job.Build(env, examples.Options{Out: cmd.OutOrStdout(), Duration: f.duration, Restoring: f.fromSavepoint != ""}); err != nil {
					return nil, nil, err
				}
				return env, job, nil
			}
			return runExample(cmd, ex.Name, f, build, func(ctx context.Context, env *runnel.Environment) (*runnel.JobResult, error) {
				return env.Execute(ctx, ex.Name)
			})
		}
		run.AddCommand(c)
	}
	return run
}

// register defines the flags of a run on pf: those of `runnel run` and `runnel submit`, and those a
// registered example's arguments are parsed with on every process of a cluster.
func (f *runFlags) register(pf *pflag.FlagSet) {
	pf.IntVar(&f.parallelism, "parallelism", 2, "default parallelism of the job's operators")
	pf.IntVar(&f.maxParallelism, "max-parallelism", runnel.DefaultMaxParallelism, "key groups of keyed state: the most any operator's parallelism may be, now or when rescaled from a savepoint\n"+
		"(1 to 32768; a savepoint is restored only with the max parallelism it was taken with)")
	pf.IntVar(&f.taskManagers, "taskmanagers", 1, "TaskManagers of the in-process cluster (tasks on different ones talk over TCP)")
	pf.DurationVar(&f.duration, "duration", 0, "stop (cancel) the job after this long; 0 runs until bounded sources end")
	pf.BoolVar(&f.noChaining, "no-chaining", false, "do not chain operators into tasks")
	pf.StringVar(&f.metricsAddr, "metrics-addr", "", "serve the job's Prometheus metrics at http://ADDR/metrics while it runs (for example :9249)")
	pf.StringVar(&f.report, "report", "", "write the job result as JSON to this file")
	pf.BoolVar(&f.verbose, "verbose", false, "show the runtime's INFO logs")
	pf.DurationVar(&f.progress, "progress-interval", time.Second, "how often to show progress")
	pf.DurationVar(&f.checkpointInterval, "checkpoint-interval", 0, "take a checkpoint this often (0: checkpointing off)")
	pf.StringVar(&f.checkpointMode, "checkpoint-mode", string(runnel.ExactlyOnce), "checkpoint mode: exactly-once (aligned barriers) or at-least-once")
	pf.BoolVar(&f.incremental, "incremental-checkpoints", false, "incremental checkpoints: keyed state on the memory backend writes what changed since the previous checkpoint and refers to earlier checkpoints for the rest")
	pf.IntVar(&f.tolerableFailed, "tolerable-failed-checkpoints", 0, "consecutive failed checkpoints tolerated; one more fails the job over through its restart strategy (a full restart from the latest checkpoint)")
	pf.StringVar(&f.checkpointStorage, "checkpoint-storage", "", "where checkpoints go: a directory, file://DIR, s3://BUCKET/PREFIX or mem:// (default: a temporary directory, removed afterwards)")
	pf.StringVar(&f.failover, "failover", "region", "failover strategy: full (restart every task), region (restart the pipelined regions that must) approximate (restart the failed subtask and everything downstream while upstream keeps running; the loss is counted)\n"+
		"or task (restart only the failed subtask, exactly once: its inputs replayed from in-flight logs in the recorded order)")
	pf.StringVar(&f.restartStrategy, "restart-strategy", "", "restart strategy: none, fixed-delay:attempts=3,delay=1s, exponential-delay:initial=100ms,max=10s,multiplier=2,reset=1m,jitter=0.1,immediate=1\n"+
		"or failure-rate:max-failures=3,interval=1m,delay=1s. Default: none without checkpointing; with it\n"+
		runnel.DefaultRestartWithCheckpoints+":\n"+
		"the first restart of a failure is immediate, and only failures within a minute of each other back off (100ms doubling to 10s)")
	pf.StringVar(&f.stateBackend, "state-backend", "memory", "where keyed state lives: memory or pebble (on disk)")
	pf.StringVar(&f.savepointOnStop, "savepoint-on-stop", "", "write a savepoint to this directory when the job is stopped (--duration, Ctrl-C or SIGTERM); checked before the job runs")
	pf.StringVar(&f.fromSavepoint, "from-savepoint", "", "start from a savepoint directory, or from the newest valid checkpoint of a checkpoint storage directory (which must exist;\n"+
		"damaged newer checkpoints are passed over with a WARN)")
	pf.Int64Var(&f.inflightLogMemory, "inflight-log-memory", 0, "with --failover task: each TaskManager's bytes of memory for the in-flight logs before they spill (0: 1 GiB)")
	pf.Int64Var(&f.inflightLogDisk, "inflight-log-disk", 0, "with --failover task: each TaskManager's bytes of disk for the in-flight logs past their memory (0: 4 GiB; -1: no spilling)")
	pf.BoolVar(&f.allowNonRestored, "allow-non-restored-state", false, "with --from-savepoint: drop, with a WARN, the state of operators (uids) the job no longer has, rather than refuse to start")
	pf.StringVar(&f.exchangeMode, "exchange-mode", "pipelined", "pipelined, blocking (bounded jobs: every shuffle spilled, each task its own failover region) or forward-pipelined")
	pf.StringVar(&f.scheduling, "scheduling", "pipelined-region", "pipelined-region or eager")
	pf.StringArrayVar(&f.injectFailures, "inject-failure", nil, "make a task fail once, on purpose: OPERATOR[SUBTASK]@WHEN, WHEN a duration since the start (2s),\n"+
		"a record count (5000: after that many records reached the subtask, over all its attempts) or a checkpoint (chk-3: at the first\n"+
		"record after the subtask heard that checkpoint 3 or a later one completed); repeatable: every spec fires once,\n"+
		"also several for one subtask (map[0]@1000 and map[0]@5000 fail it twice; specs due together fire one per attempt, in the order given)")
}

func (f runFlags) validate() error {
	var errs []error
	if f.parallelism < 1 {
		errs = append(errs, fmt.Errorf("invalid --parallelism %d: must be at least 1", f.parallelism))
	}
	if f.maxParallelism < 1 || f.maxParallelism > runnel.MaxParallelismLimit {
		errs = append(errs, fmt.Errorf("invalid --max-parallelism %d: must be between 1 and %d", f.maxParallelism, runnel.MaxParallelismLimit))
	}
	if f.taskManagers < 1 || f.taskManagers > runnel.MaxTaskManagers {
		errs = append(errs, fmt.Errorf("invalid --taskmanagers %d: must be between 1 and %d", f.taskManagers, runnel.MaxTaskManagers))
	}
	if f.duration < 0 {
		errs = append(errs, fmt.Errorf("invalid --duration %s: must not be negative", f.duration))
	}
	if f.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(f.metricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("invalid --metrics-addr %q: want HOST:PORT or :PORT (%v)", f.metricsAddr, err))
		}
	}
	if f.progress <= 0 {
		errs = append(errs, fmt.Errorf("invalid --progress-interval %s: must be positive", f.progress))
	}
	if f.checkpointInterval < 0 {
		errs = append(errs, fmt.Errorf("invalid --checkpoint-interval %s: must not be negative (0 turns checkpointing off)", f.checkpointInterval))
	}
	if f.checkpointStorage != "" && f.checkpointInterval == 0 {
		errs = append(errs, errors.New("--checkpoint-storage is set but checkpointing is off: set --checkpoint-interval too"))
	}
	if f.tolerableFailed < 0 {
		errs = append(errs, fmt.Errorf("invalid --tolerable-failed-checkpoints %d: must not be negative (0 fails over at the first failed checkpoint)", f.tolerableFailed))
	}
	switch runnel.CheckpointingMode(f.checkpointMode) {
	case runnel.ExactlyOnce, runnel.AtLeastOnce:
	default:
		errs = append(errs, fmt.Errorf("invalid --checkpoint-mode %q: use %s or %s", f.checkpointMode, runnel.ExactlyOnce, runnel.AtLeastOnce))
	}
	switch f.failover {
	case "full", "region", "approximate", "task":
	default:
		errs = append(errs, fmt.Errorf("invalid --failover %q: use full, region, approximate or task", f.failover))
	}
	if f.restartStrategy != "" {
		if _, err := scheduler.ParseRestartStrategy(f.restartStrategy); err != nil {
			errs = append(errs, fmt.Errorf("invalid --restart-strategy %q: %w", f.restartStrategy, err))
		}
	}
	switch f.stateBackend {
	case "memory", "pebble":
	default:
		errs = append(errs, fmt.Errorf("invalid --state-backend %q: use memory or pebble", f.stateBackend))
	}
	for _, spec := range f.injectFailures {
		if _, err := runnel.ParseFailureInjection(spec); err != nil {
			errs = append(errs, fmt.Errorf("invalid --inject-failure: %w", err))
		}
	}
	return errors.Join(errs...)
}

// jobOptions returns the runnel options that shape the job: what every process of a cluster builds it with.
func (f runFlags) jobOptions() []runnel.Option {
	return append([]runnel.Option{
		runnel.WithParallelism(f.parallelism),
		runnel.WithMaxParallelism(f.maxParallelism),
		runnel.WithChaining(!f.noChaining),
	}, f.recoveryOptions()...)
}

// recoveryOptions returns the runnel options of the recovery flags.
func (f runFlags) recoveryOptions() []runnel.Option {
	opts := []runnel.Option{
		runnel.WithFailover(f.failover),
		runnel.WithStateBackend(f.stateBackend),
	}
	if f.checkpointInterval > 0 {
		opts = append(opts, runnel.WithCheckpointing(runnel.CheckpointConfig{
			Interval:        f.checkpointInterval,
			Mode:            runnel.CheckpointingMode(f.checkpointMode),
			Storage:         f.checkpointStorage,
			TolerableFailed: f.tolerableFailed,
		}))
	}
	if f.restartStrategy != "" {
		opts = append(opts, runnel.WithRestartStrategy(f.restartStrategy))
	}
	if len(f.injectFailures) > 0 {
		opts = append(opts, runnel.WithFailureInjection(f.injectFailures...))
	}
	if f.savepointOnStop != "" {
		opts = append(opts, runnel.WithSavepointOnStop(f.savepointOnStop))
	}
	if f.fromSavepoint != "" {
		opts = append(opts, runnel.WithRestoreFrom(f.fromSavepoint))
	}
	if f.incremental {
		opts = append(opts, runnel.WithIncrementalCheckpoints())
	}
	if f.allowNonRestored {
		opts = append(opts, runnel.WithAllowNonRestoredState())
	}
	if f.inflightLogMemory != 0 {
		opts = append(opts, runnel.WithInflightLogMemory(f.inflightLogMemory))
	}
	if f.inflightLogDisk != 0 {
		opts = append(opts, runnel.WithInflightLogDisk(f.inflightLogDisk))
	}
	opts = append(opts, runnel.WithExchangeMode(f.exchangeMode), runnel.WithScheduling(f.scheduling))
	return opts
}

// optionFlags maps the names of runnel options, as the engine's configuration errors use them, to the
// flags that set them, so that a mistake found only when the job is submitted (an --inject-failure naming
// no operator, a state backend that is not available) names the flag.
var optionFlags = strings.NewReplacer(
	"WithParallelism:", "--parallelism:",
	"WithMaxParallelism:", "--max-parallelism:",
	"; raise max parallelism", "; raise --max-parallelism",
	"WithTaskManagers:", "--taskmanagers:",
	"CheckpointConfig.Interval:", "--checkpoint-interval:",
	"CheckpointConfig.Mode:", "--checkpoint-mode:",
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

// flagError rewrites a configuration error of the engine in terms of the command's flags.
type flagError struct{ err error }

func (e flagError) Error() string { return optionFlags.Replace(e.err.Error()) }
func (e flagError) Unwrap() error { return e.err }

// runExample runs an example: build makes its Environment with the options of the run (and the job whose
// summary, report fields and verification apply), execute runs it (in process, or on a cluster).
func runExample(cmd *cobra.Command, name string, f runFlags, build func([]runnel.Option) (*runnel.Environment, examples.Job, error),
	execute func(context.Context, *runnel.Environment) (*runnel.JobResult, error)) error {
	if err := f.validate(); err != nil {
		return usageError(err)
	}
	if f.report != "" {
		// The report is written after the run: a path that cannot take it is a mistake to tell now.
		if err := examples.CheckWritableFile(f.report); err != nil {
			return usageError(fmt.Errorf("invalid --report: %w", err))
		}
	}
	stderr := cmd.ErrOrStderr()
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	runtimeLog := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cliLog := slog.New(slog.NewTextHandler(stderr, nil))

	interactive := isTerminal(stderr)
	prog := newProgress(stderr, interactive, cliLog)
	env, job, err := build(append(f.jobOptions(), runnel.WithLogger(runtimeLog), runnel.WithProgress(f.progress, prog.update)))
	if err != nil {
		return usageError(fmt.Errorf("%s: %w", name, err))
	}
	if err := env.Err(); err != nil {
		return usageError(fmt.Errorf("%s: %w", name, err))
	}

	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	signals := stopOnSignals(cancel, stderr)
	defer signals.stop()
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	if !interactive {
		where := []any{"taskmanagers", f.taskManagers}
		if f.jobManager != "" {
			where = []any{"jobmanager", f.jobManager}
		}
		attrs := append([]any{"job", name, "parallelism", f.parallelism}, append(where,
			"chaining", !f.noChaining, "duration", f.duration)...)
		if f.checkpointInterval > 0 {
			attrs = append(attrs, "checkpoint_interval", f.checkpointInterval, "checkpoint_mode", f.checkpointMode)
		}
		if len(f.injectFailures) > 0 {
			attrs = append(attrs, "failover", f.failover, "inject_failure", strings.Join(f.injectFailures, " "))
		}
		cliLog.Info("job starting", attrs...)
	}
	res, err := execute(ctx, env)
	if res == nil && (errors.Is(err, runnel.ErrJobManagerUnreachable) || errors.Is(err, runnel.ErrJobManagerLost)) {
		return err // not a mistake in the command line: the cluster is not there
	}
	if res == nil { // the job did not start: a configuration mistake
		return usageError(flagError{err})
	}
	if f.report != "" {
		var extra map[string]any
		if r, ok := job.(examples.Reporter); ok {
			extra = r.ReportFields(res)
		}
		if werr := writeReport(f.report, res, extra); werr != nil {
			return werr
		}
	}
	if s, ok := job.(examples.Summarizer); ok {
		s.Summary(cmd.OutOrStdout(), res)
	}
	switch {
	case err != nil || res.Status == "FAILED":
		if err == nil {
			err = errors.New(res.Error)
		}
		return fmt.Errorf("job %s FAILED after %s: %w", name, wall(res), err)
	case res.Status == "CANCELED" && f.duration > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded):
		fmt.Fprintf(stderr, "job %s ran for --duration %s and was stopped (CANCELED)\n", name, f.duration)
	case res.Status == "CANCELED":
		if sig := signals.stop(); sig != nil {
			return &exitError{code: signalExitCode(sig), err: fmt.Errorf("job %s CANCELED after %s (stopped by %s)", name, wall(res), signalName(sig))}
		}
		return &exitError{code: exitFailed, err: fmt.Errorf("job %s CANCELED after %s", name, wall(res))}
	default:
		fmt.Fprintf(stderr, "job %s %s in %s%s%s\n", name, res.Status, wall(res), recoverySummary(res), alreadyFinished(res))
	}
	if v, ok := job.(examples.Verifier); ok {
		if verr := v.Verify(res); verr != nil {
			return &exitError{code: exitFailed, err: fmt.Errorf("job %s: %w", name, verr)}
		}
	}
	return nil
}

// signalStop cancels a job on the first SIGINT (Ctrl-C) or SIGTERM, so that both stop it the same way:
// the job is cancelled (with a savepoint first if one was asked for) and Execute removes its temporary
// checkpoint and spill directories before the command exits. A second signal is left to its default action
// and ends the process at once.
type signalStop struct {
	ch   chan os.Signal
	quit chan struct{}
	done chan struct{}
	sig  os.Signal // the signal that stopped the job; read after done is closed
	once sync.Once
}

func stopOnSignals(cancel context.CancelFunc, stderr io.Writer) *signalStop {
	s := &signalStop{ch: make(chan os.Signal, 1), quit: make(chan struct{}), done: make(chan struct{})}
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		defer close(s.done)
		select {
		case sig := <-s.ch:
			signal.Stop(s.ch) // the next one takes the default action
			s.sig = sig
			fmt.Fprintf(stderr, "runnel: %s: stopping the job (send it again to exit at once)\n", signalName(sig))
			cancel()
		case <-s.quit:
		}
	}()
	return s
}

// stop stops listening and returns the signal that stopped the job, or nil. It may be called more than once.
func (s *signalStop) stop() os.Signal {
	s.once.Do(func() {
		signal.Stop(s.ch)
		close(s.quit)
	})
	<-s.done
	return s.sig
}

// signalExitCode is the shell's code for a process ended by sig: 128 + its number (130 SIGINT, 143 SIGTERM).
func signalExitCode(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitFailed
}

func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// alreadyFinished says, for a job restored from a checkpoint in which it had already finished, that it had
// and which checkpoint that was: the run read and emitted nothing.
func alreadyFinished(res *runnel.JobResult) string {
	r := res.RestoredFrom
	if r == nil || !r.Finished {
		return ""
	}
	return fmt.Sprintf(": it had already finished in checkpoint %d of %s, which it was restored from; nothing was read or emitted again",
		r.CheckpointID, r.Location)
}

// recoverySummary says how many checkpoints completed and failovers happened, if any.
func recoverySummary(res *runnel.JobResult) string {
	var parts []string
	if c := res.Checkpoints; c != nil {
		parts = append(parts, plural(c.Completed, "checkpoint")+" completed")
	}
	if n := len(res.Failovers); n > 0 {
		parts = append(parts, plural(int64(n), "failover"))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func plural(n int64, what string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func wall(res *runnel.JobResult) time.Duration {
	return (time.Duration(res.WallMillis) * time.Millisecond).Round(time.Millisecond)
}

// writeReport writes the job result as one JSON object: the fields of res, under their own names and in
// their order, followed by the example's extra fields (sorted by name; one named like a field of res is
// dropped).
func writeReport(path string, res *runnel.JobResult, extra map[string]any) error {
	b, err := reportJSON(res, extra)
	if err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	return nil
}

func reportJSON(res *runnel.JobResult, extra map[string]any) ([]byte, error) {
	base, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	if len(extra) > 0 {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(base, &fields); err != nil {
			return nil, err
		}
		var b bytes.Buffer
		b.Write(base[:len(base)-1]) // without the closing brace
		for _, k := range slices.Sorted(maps.Keys(extra)) {
			if _, taken := fields[k]; taken {
				continue
			}
			v, err := json.Marshal(extra[k])
			if err != nil {
				return nil, fmt.Errorf("report field %q: %w", k, err)
			}
			kb, _ := json.Marshal(k)
			b.WriteByte(',')
			b.Write(kb)
			b.WriteByte(':')
			b.Write(v)
		}
		b.WriteByte('}')
		base = b.Bytes()
	}
	var out bytes.Buffer
	if err := json.Indent(&out, base, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress shows job snapshots: a refreshing block on a terminal, one log line per snapshot otherwise.
type progress struct {
	w           io.Writer
	interactive bool
	log         *slog.Logger
	lines       int // lines of the block drawn last
	last        time.Time
	prev        map[string][2]uint64
	failovers   int // failovers logged so far
}

func newProgress(w io.Writer, interactive bool, log *slog.Logger) *progress {
	return &progress{w: w, interactive: interactive, log: log, prev: map[string][2]uint64{}}
}

// update is called from the runtime's progress goroutine, and once more with the final result; calls do
// not overlap.
func (p *progress) update(res *runnel.JobResult) {
	now := time.Now()
	dt := now.Sub(p.last).Seconds()
	if p.last.IsZero() {
		dt = float64(res.WallMillis) / 1000
	}
	p.last = now
	type row struct {
		name, status    string
		inRate, outRate float64
		in, out         uint64
	}
	rows := make([]row, 0, len(res.Vertices))
	for _, v := range res.Vertices {
		pr := p.prev[v.Name]
		r := row{name: v.Name, status: subtaskStatus(v), in: v.RecordsIn, out: v.RecordsOut}
		if terminal(res.Status) && res.WallMillis > 0 {
			// The final snapshot may come right after the last one: show the averages of the run (of the
			// current attempts, whose counters start at 0).
			secs := float64(res.WallMillis) / 1000
			r.inRate, r.outRate = float64(v.RecordsIn)/secs, float64(v.RecordsOut)/secs
		} else if dt > 0 {
			r.inRate = float64(v.RecordsIn-min(pr[0], v.RecordsIn)) / dt
			r.outRate = float64(v.RecordsOut-min(pr[1], v.RecordsOut)) / dt
		}
		p.prev[v.Name] = [2]uint64{v.RecordsIn, v.RecordsOut}
		rows = append(rows, r)
	}
	elapsed := time.Duration(res.WallMillis) * time.Millisecond
	if !p.interactive {
		// A failover is logged once it is complete (its restarted subtasks run again), or at the end.
		for _, f := range res.Failovers[min(p.failovers, len(res.Failovers)):] {
			if f.RecoveryMillis == 0 && !terminal(res.Status) {
				break
			}
			p.log.Info("failover", failoverAttrs(f)...)
			p.failovers++
		}
		parts := make([]string, len(rows))
		for i, r := range rows {
			parts[i] = fmt.Sprintf("%s [%s] in %s/s out %s/s", r.name, r.status, human(r.inRate), human(r.outRate))
		}
		attrs := []any{"job", res.Job, "status", res.Status, "elapsed", elapsed.Round(time.Second).String()}
		if c := res.Checkpoints; c != nil {
			attrs = append(attrs, "checkpoints", c.Completed)
		}
		if n := len(res.Failovers); n > 0 {
			attrs = append(attrs, "failovers", n)
		}
		p.log.Info("progress", append(attrs, "vertices", strings.Join(parts, "; "))...)
		return
	}
	var b strings.Builder
	if p.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.lines) // back to the top of the previous block
	}
	width := len("vertex")
	for _, r := range rows {
		width = max(width, len(r.name))
	}
	fmt.Fprintf(&b, "\x1b[2Kjob %s  %s  %s%s\n", res.Job, res.Status, elapsed.Round(100*time.Millisecond), recoveryStatus(res))
	fmt.Fprintf(&b, "\x1b[2K  %-*s  %-22s %12s %12s %14s %14s\n", width, "vertex", "status", "in/s", "out/s", "in", "out")
	for _, r := range rows {
		fmt.Fprintf(&b, "\x1b[2K  %-*s  %-22s %12s %12s %14d %14d\n", width, r.name, r.status, human(r.inRate), human(r.outRate), r.in, r.out)
	}
	p.lines = 2 + len(rows)
	io.WriteString(p.w, b.String())
}

// terminal reports whether a job status is final.
func terminal(status string) bool {
	return status == "FINISHED" || status == "FAILED" || status == "CANCELED"
}

// failoverAttrs describes a failover for a log line.
func failoverAttrs(f runnel.FailoverResult) []any {
	restored := "none"
	if f.CheckpointRestored != nil {
		restored = fmt.Sprint(*f.CheckpointRestored)
	}
	attrs := []any{"failed", f.Failed, "strategy", f.Strategy, "restarted", strings.Join(f.Restarted, ","),
		"checkpoint_restored", restored}
	if f.RecoveryMillis > 0 {
		attrs = append(attrs, "recovery", (time.Duration(f.RecoveryMillis) * time.Millisecond).String())
	}
	if f.Fallback != "" {
		attrs = append(attrs, "fallback", f.Fallback)
	}
	if f.RecordsReplayed+f.DuplicatesDropped > 0 {
		attrs = append(attrs, "records_replayed", f.RecordsReplayed, "duplicates_dropped", f.DuplicatesDropped)
	}
	return append(attrs, "cause", f.Cause)
}

// recoveryStatus is the part of the status block's title about checkpoints and failovers.
func recoveryStatus(res *runnel.JobResult) string {
	var b strings.Builder
	if c := res.Checkpoints; c != nil {
		fmt.Fprintf(&b, "  checkpoints %d", c.Completed)
		if c.Completed > 0 {
			fmt.Fprintf(&b, " (last #%d)", c.LastCompletedID)
		}
		if c.Failed+c.Aborted > 0 {
			fmt.Fprintf(&b, ", %d failed, %d aborted", c.Failed, c.Aborted)
		}
	}
	if n := len(res.Failovers); n > 0 {
		last := res.Failovers[n-1]
		fmt.Fprintf(&b, "  failovers %d (last: %s, %s)", n, last.Failed, last.Strategy)
	}
	return b.String()
}

// subtaskStatus summarizes the states of a vertex's subtasks, e.g. "RUNNING 2/2" or "RUNNING 1/2 FINISHED 1/2",
// and the highest attempt when a subtask was restarted ("RUNNING 2/2 attempt 1").
func subtaskStatus(v runnel.VertexResult) string {
	var order []string
	count := map[string]int{}
	for _, st := range v.Subtasks {
		if count[st.State] == 0 {
			order = append(order, st.State)
		}
		count[st.State]++
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%s %d/%d", s, count[s], len(v.Subtasks))
	}
	attempt := 0
	for _, st := range v.Subtasks {
		attempt = max(attempt, st.Attempt)
	}
	if attempt > 0 {
		parts = append(parts, fmt.Sprintf("attempt %d", attempt))
	}
	return strings.Join(parts, " ")
}

// human formats a rate with a k/M suffix.
func human(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	default:
		return fmt.Sprintf("%.0f", x)
	}
}

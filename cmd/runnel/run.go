package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples"
)

// runFlags are the flags common to every example.
type runFlags struct {
	parallelism  int
	taskManagers int
	duration     time.Duration
	noChaining   bool
	report       string
	verbose      bool
	progress     time.Duration
}

func newRunCmd() *cobra.Command {
	var f runFlags
	run := &cobra.Command{
		Use:   "run EXAMPLE [flags]",
		Short: "Run a bundled example job in an in-process cluster",
		Long: "Run a bundled example job in an in-process cluster (a JobManager and --taskmanagers TaskManagers).\n" +
			"Live progress goes to stderr: a refreshing status block on a terminal, log lines otherwise.",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return fmt.Errorf("unknown example %q (runnel examples lists them)", args[0])
		},
	}
	pf := run.PersistentFlags()
	pf.IntVar(&f.parallelism, "parallelism", 2, "default parallelism of the job's operators")
	pf.IntVar(&f.taskManagers, "taskmanagers", 1, "TaskManagers of the in-process cluster (tasks on different ones talk over TCP)")
	pf.DurationVar(&f.duration, "duration", 0, "stop (cancel) the job after this long; 0 runs until bounded sources end")
	pf.BoolVar(&f.noChaining, "no-chaining", false, "do not chain operators into tasks")
	pf.StringVar(&f.report, "report", "", "write the job result as JSON to this file")
	pf.BoolVar(&f.verbose, "verbose", false, "show the runtime's INFO logs")
	pf.DurationVar(&f.progress, "progress-interval", time.Second, "how often to show progress")
	for _, ex := range examples.All() {
		ex := ex
		c := &cobra.Command{
			Use:   ex.Name + " [flags]",
			Short: ex.Description,
			Args:  cobra.NoArgs,
		}
		job := ex.New(c.Flags())
		c.RunE = func(cmd *cobra.Command, _ []string) error {
			return runExample(cmd, ex.Name, job, f)
		}
		run.AddCommand(c)
	}
	return run
}

func (f runFlags) validate() error {
	var errs []error
	if f.parallelism < 1 {
		errs = append(errs, fmt.Errorf("invalid --parallelism %d: must be at least 1", f.parallelism))
	}
	if f.taskManagers < 1 {
		errs = append(errs, fmt.Errorf("invalid --taskmanagers %d: must be at least 1", f.taskManagers))
	}
	if f.duration < 0 {
		errs = append(errs, fmt.Errorf("invalid --duration %s: must not be negative", f.duration))
	}
	if f.progress <= 0 {
		errs = append(errs, fmt.Errorf("invalid --progress-interval %s: must be positive", f.progress))
	}
	return errors.Join(errs...)
}

func runExample(cmd *cobra.Command, name string, job examples.Job, f runFlags) error {
	if err := f.validate(); err != nil {
		return &exitError{code: 2, err: err}
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
	env := runnel.NewEnvironment(
		runnel.WithParallelism(f.parallelism),
		runnel.WithTaskManagers(f.taskManagers),
		runnel.WithChaining(!f.noChaining),
		runnel.WithLogger(runtimeLog),
		runnel.WithProgress(f.progress, prog.update),
	)
	if err := job.Build(env, examples.Options{Out: cmd.OutOrStdout(), Duration: f.duration}); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("%s: %w", name, err)}
	}
	if err := env.Err(); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("%s: %w", name, err)}
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	if !interactive {
		cliLog.Info("job starting", "job", name, "parallelism", f.parallelism, "taskmanagers", f.taskManagers,
			"chaining", !f.noChaining, "duration", f.duration)
	}
	res, err := env.Execute(ctx, name)
	if res != nil && f.report != "" {
		if werr := writeReport(f.report, res); werr != nil {
			return werr
		}
	}
	if res == nil { // the job did not start: a configuration mistake
		return &exitError{code: 2, err: err}
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
		return &exitError{code: 130, err: fmt.Errorf("job %s CANCELED after %s (interrupted)", name, wall(res))}
	default:
		fmt.Fprintf(stderr, "job %s %s in %s\n", name, res.Status, wall(res))
	}
	return nil
}

func wall(res *runnel.JobResult) time.Duration {
	return (time.Duration(res.WallMillis) * time.Millisecond).Round(time.Millisecond)
}

func writeReport(path string, res *runnel.JobResult) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	return nil
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
		if dt > 0 {
			r.inRate = float64(v.RecordsIn-min(pr[0], v.RecordsIn)) / dt
			r.outRate = float64(v.RecordsOut-min(pr[1], v.RecordsOut)) / dt
		}
		p.prev[v.Name] = [2]uint64{v.RecordsIn, v.RecordsOut}
		rows = append(rows, r)
	}
	elapsed := time.Duration(res.WallMillis) * time.Millisecond
	if !p.interactive {
		parts := make([]string, len(rows))
		for i, r := range rows {
			parts[i] = fmt.Sprintf("%s [%s] in %s/s out %s/s", r.name, r.status, human(r.inRate), human(r.outRate))
		}
		p.log.Info("progress", "job", res.Job, "status", res.Status, "elapsed", elapsed.Round(time.Second).String(),
			"vertices", strings.Join(parts, "; "))
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
	fmt.Fprintf(&b, "\x1b[2Kjob %s  %s  %s\n", res.Job, res.Status, elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(&b, "\x1b[2K  %-*s  %-22s %12s %12s %14s %14s\n", width, "vertex", "status", "in/s", "out/s", "in", "out")
	for _, r := range rows {
		fmt.Fprintf(&b, "\x1b[2K  %-*s  %-22s %12s %12s %14d %14d\n", width, r.name, r.status, human(r.inRate), human(r.outRate), r.in, r.out)
	}
	p.lines = 2 + len(rows)
	io.WriteString(p.w, b.String())
}

// subtaskStatus summarizes the states of a vertex's subtasks, e.g. "RUNNING 2/2" or "RUNNING 1/2 FINISHED 1/2".
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

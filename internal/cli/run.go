package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel/internal/executor"
	"github.com/runnel-dev/runnel/internal/ha"
	"github.com/runnel-dev/runnel/internal/report"
	"github.com/runnel-dev/runnel/internal/roles"
	"github.com/runnel-dev/runnel/internal/writable"
)

// runFlagSet is the command line of a run of job: the job's own flags, then those of every run, then
// (for submit) the JobManager and TLS.
type runFlagSet struct {
	fs       *pflag.FlagSet
	own      *pflag.FlagSet
	engine   *pflag.FlagSet
	build    Build
	settings *Settings
	ro       runOnly
	jm       string
	tls      func() *roles.TLSFiles
	ha       func() (*ha.Config, error)
}

func newRunFlagSet(role string, job Job) *runFlagSet {
	r := &runFlagSet{fs: pflag.NewFlagSet(strings.TrimSpace(role+" "+job.Name), pflag.ContinueOnError),
		own: pflag.NewFlagSet(job.Name, pflag.ContinueOnError), engine: pflag.NewFlagSet(role, pflag.ContinueOnError)}
	r.settings = addRunFlags(r.fs, job.Defaults, &r.ro)
	if role == "submit" {
		r.tls, r.ha = addSubmitFlags(r.fs, &r.jm)
	}
	r.fs.VisitAll(r.engine.AddFlag)
	// The job declares its flags beside those of the run, which it may read (--duration) but not redefine
	// (Register made sure it does not).
	r.build = job.Define(r.fs)
	r.fs.VisitAll(func(f *pflag.Flag) {
		if r.engine.Lookup(f.Name) == nil {
			r.own.AddFlag(f)
		}
	})
	return r
}

// parse parses args and returns the settings of the run, or the mistake (a usageErr).
func (r *runFlagSet) parse(args []string) (Settings, error) {
	if err := parse(r.fs, args); err != nil {
		return Settings{}, err
	}
	s := settings(r.fs, r.settings)
	if err := s.validate(r.fs, r.ro); err != nil {
		return Settings{}, usageErr{err}
	}
	return s, nil
}

// runFlagUsages is the help of the flags of a run with def as their defaults.
func runFlagUsages(def Settings) string {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	addRunFlags(fs, def, &runOnly{})
	return fs.FlagUsages()
}

// jobHelp writes the help of job under role: its own flags, then the run's.
func jobHelp(w io.Writer, role string, job Job, r *runFlagSet) {
	prog := progName()
	fmt.Fprintf(w, "Usage: %s %s %s [FLAGS] [-- JOB-ARGS]\n", prog, role, job.Name)
	if job.Description != "" {
		fmt.Fprintf(w, "\n%s\n", job.Description)
	}
	fmt.Fprintf(w, "\n%s", roleAbout(role))
	if r.own.HasFlags() {
		fmt.Fprintf(w, "\nFlags of %s:\n%s", job.Name, r.own.FlagUsages())
	} else {
		fmt.Fprintf(w, "\n%s declares no flags of its own: its arguments are the words after the flags (or after --).\n", job.Name)
	}
	fmt.Fprintf(w, "\nFlags of every %s:\n%s", role, r.engine.FlagUsages())
	fmt.Fprint(w, exitCodes)
}

// roleAbout says what run or submit does.
func roleAbout(role string) string {
	what := "Runs the job in this process (a JobManager and --taskmanagers TaskManagers)."
	if role == "submit" {
		what = "Runs the job on the cluster of a JobManager and follows it to its end. Every process of the cluster must run\n" +
			"this same program, and checkpoint storage must be shared by all of them."
	}
	return what + "\nLive progress goes to stderr: a refreshing status block on a terminal, log lines otherwise.\n" +
		"Ctrl-C (SIGINT) or SIGTERM stops the job cleanly (with --savepoint-on-stop, after a savepoint); a second one exits at once.\n"
}

// mainRun runs (role "run") or submits (role "submit") the job args name, with its flags.
func mainRun(ctx context.Context, engine Settings, role string, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) && len(Names()) != 1 {
		fmt.Fprintf(stdout, "Usage: %s %s JOB [FLAGS] [-- JOB-ARGS]   (%s %s JOB --help: the job's flags)\n\nJobs: %s\n\n%s\nFlags of every %s:\n%s%s",
			progName(), role, progName(), role, strings.Join(Names(), ", "), roleAbout(role), role, runFlagUsages(engine), exitCodes)
		return nil
	}
	job, args, err := pickJob(args)
	if err != nil {
		return err
	}
	r := newRunFlagSet(role, job)
	if wantsHelp(args) {
		jobHelp(stdout, role, job, r)
		return nil
	}
	s, err := r.parse(args)
	if err != nil {
		return err
	}
	var hc *ha.Config
	if role == "submit" {
		for _, l := range localOnly {
			if r.fs.Changed(l.name) {
				return usageErr{fmt.Errorf("--%s is not a flag of submit: %s", l.name, l.why)}
			}
		}
		if hc, err = r.ha(); err != nil {
			return usageErr{err}
		}
	}
	if role == "run" {
		pacer, err := r.ro.heapBudget()
		if err != nil {
			return usageErr{err}
		}
		defer pacer.Stop()
	}
	if r.ro.report != "" {
		// The report is written after the run: a path that cannot take it is a mistake to tell now.
		if err := writable.Check(r.ro.report); err != nil {
			return usageErr{fmt.Errorf("invalid --report: %w", err)}
		}
	}
	level := slog.LevelWarn
	if r.ro.verbose {
		level = slog.LevelInfo
	}
	cliLog := slog.New(slog.NewTextHandler(stderr, nil))
	interactive := isTerminal(stderr)
	prog := newProgress(stderr, interactive, cliLog)
	local := Local{Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
		ProgressInterval: r.ro.progress, Progress: prog.update}
	free := r.fs.Args()
	built, err := r.build(ctx, s, local, free)
	if err != nil {
		return usageErr{flagError{err}}
	}
	built.Job.Args = wireArgs(r.fs, free)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	signals := stopOnSignals(cancel, stderr)
	defer signals.stop()
	if r.ro.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.ro.duration)
		defer cancel()
	}
	if !interactive {
		where := []any{"taskmanagers", s.TaskManagers}
		if role == "submit" {
			where = []any{"jobmanager", r.jm}
		}
		attrs := append([]any{"job", job.Name, "parallelism", s.Parallelism}, append(where,
			"chaining", s.Chaining, "duration", r.ro.duration)...)
		if s.CheckpointInterval > 0 {
			attrs = append(attrs, "checkpoint_interval", s.CheckpointInterval, "checkpoint_mode", s.CheckpointMode)
		}
		if len(s.InjectFailures) > 0 {
			attrs = append(attrs, "failover", s.Failover, "inject_failure", strings.Join(s.InjectFailures, " "))
		}
		msg := "job starting"
		if role == "submit" {
			msg = "submitting the job" // the JobManager may still refuse it
		}
		cliLog.Info(msg, attrs...)
	}
	var res *report.JobResult
	if role == "submit" {
		res, err = roles.Submit(ctx, roles.SubmitConfig{JobManager: r.jm, HA: hc, TLS: r.tls(), Job: built.Job})
	} else {
		res, err = executor.Execute(ctx, built.Job, built.Job)
	}
	if res == nil && (errors.Is(err, roles.ErrJobManagerUnreachable) || errors.Is(err, roles.ErrJobManagerLost)) {
		return err // not a mistake in the command line: the cluster is not there
	}
	if res == nil { // the job did not start: a configuration mistake
		return usageErr{flagError{err}}
	}
	return ended(ctx, stdout, stderr, job.Name, r.ro, built, res, err, signals)
}

// ended tells how the job ended, lets it do its own end (built.End), writes the report, and returns what
// makes the exit code.
func ended(ctx context.Context, stdout, stderr io.Writer, name string, ro runOnly, built *Built, res *report.JobResult, err error, signals *signalStop) error {
	var extra map[string]any
	var endErr error
	if built.End != nil {
		extra, endErr = built.End(stdout, res)
	}
	if ro.report != "" {
		if werr := writeReport(ro.report, res, extra); werr != nil {
			return werr
		}
	}
	switch {
	case err != nil || res.Status == "FAILED":
		if err == nil {
			err = errors.New(res.Error)
		}
		return fmt.Errorf("job %s FAILED after %s: %w", name, wall(res), err)
	case res.Status == "CANCELED" && ro.duration > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded):
		fmt.Fprintf(stderr, "job %s ran for --duration %s and was stopped (CANCELED)\n", name, ro.duration)
	case res.Status == "CANCELED":
		if sig := signals.stop(); sig != nil {
			return exitErr{signalExitCode(sig), fmt.Errorf("job %s CANCELED after %s (stopped by %s)", name, wall(res), signalName(sig))}
		}
		return fmt.Errorf("job %s CANCELED after %s", name, wall(res))
	default:
		fmt.Fprintf(stderr, "job %s %s in %s%s%s\n", name, res.Status, wall(res), recoverySummary(res), alreadyFinished(res))
	}
	if endErr != nil {
		return fmt.Errorf("job %s: %w", name, endErr)
	}
	return nil
}

func wall(res *report.JobResult) time.Duration {
	return (time.Duration(res.WallMillis) * time.Millisecond).Round(time.Millisecond)
}

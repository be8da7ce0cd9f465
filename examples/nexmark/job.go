package nexmark

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/internal/run"
)

// Job is a configured `runnel run nexmark` run: one query over the generated stream or a JSON lines file.
type Job struct {
	Query          string
	Events         uint64
	Rate           int64
	Seed           uint64
	Input          string
	OutOfOrderness time.Duration
	// Output is the JSON lines file the results go to (empty: counted only). They are written exactly
	// once through a FileSink into the directory Output+".parts" and joined into Output when the job ends.
	Output string
	// SideInput is q13's side input file, `key,value` lines (empty: key k → "k" for k below 10,000, the
	// Nexmark suite's side input).
	SideInput string

	fs      *pflag.FlagSet
	counter *Counter
	joined  bool  // finish has run
	lines   int64 // lines joined into Output
	joinErr error
}

// New registers the example's flags on fs (nil: none) and returns the job they configure.
func New(fs *pflag.FlagSet) *Job {
	j := &Job{Events: 1_000_000, OutOfOrderness: DefaultOutOfOrderness, fs: fs}
	if fs != nil {
		fs.StringVar(&j.Query, "query", "", "the query to run: "+strings.Join(Queries, ", "))
		fs.Uint64Var(&j.Events, "events", j.Events, "events to generate (0: unbounded, stop with --duration; also unbounded when --duration is set and --events is not)")
		fs.Int64Var(&j.Rate, "rate", 0, "generated events per second over all source subtasks, which also spaces their dateTime by 1000/R ms (0: unthrottled, timestamps at a nominal 10,000,000/s)")
		fs.Uint64Var(&j.Seed, "seed", 0, "the generator's seed")
		fs.StringVar(&j.Input, "input", "", "read the events from this JSON lines file instead of generating them")
		fs.DurationVar(&j.OutOfOrderness, "out-of-orderness", j.OutOfOrderness, "the watermark bound: how far out of dateTime order events may come")
		fs.StringVar(&j.SideInput, "side-input", "", "q13's side input: a file of key,value lines, joined on auction mod 10000 (default: key k → \"k\" for k < 10000)")
		fs.StringVar(&j.Output, "output", "", "write the results to this file as JSON lines, exactly once with checkpoints (parts in FILE.parts until the job ends)")
	}
	return j
}

// partsDir is where the FileSink writes the parts of Output.
func (j *Job) partsDir() string { return run.PartsDir(j.Output) }

// Build adds the query's job to env.
func (j *Job) Build(env *runnel.Environment, opts run.Options) error {
	if !slices.Contains(Queries, j.Query) {
		return fmt.Errorf("--query %q: use one of %s", j.Query, strings.Join(Queries, ", "))
	}
	switch {
	case j.Rate < 0:
		return fmt.Errorf("--rate must not be negative, got %d", j.Rate)
	case j.OutOfOrderness < 0 || j.OutOfOrderness%time.Millisecond != 0:
		return fmt.Errorf("--out-of-orderness must be whole milliseconds, at least 0, got %s", j.OutOfOrderness)
	case j.Input != "" && j.fs != nil && (j.fs.Changed("events") || j.fs.Changed("rate") || j.fs.Changed("seed")):
		return errors.New("--input reads the events from a file: --events, --rate and --seed are for generated ones")
	case j.SideInput != "" && j.Query != "q13":
		return fmt.Errorf("--side-input is q13's, not %s's", j.Query)
	}
	var side map[int64]string
	if j.SideInput != "" {
		var err error
		if side, err = readSideInput(j.SideInput); err != nil {
			return fmt.Errorf("--side-input: %w", err)
		}
	}
	var events *runnel.Stream[Event]
	if j.Input != "" {
		if _, err := os.Stat(j.Input); err != nil {
			return fmt.Errorf("--input: %w", err)
		}
		events = Events(env, JSONFile(j.Input), 1, j.OutOfOrderness)
	} else {
		n := j.Events
		if opts.Duration > 0 && (j.fs == nil || !j.fs.Changed("events")) {
			n = 0
		}
		events = Events(env, Source(GeneratorConfig{Seed: j.Seed, Rate: j.Rate, Events: n}), 0, j.OutOfOrderness)
	}
	var res Result
	if side != nil {
		res = q13(events, side)
	} else {
		var err error
		if res, err = Build(j.Query, events); err != nil {
			return err
		}
	}
	if j.Output == "" {
		j.counter = &Counter{}
		res.ToCounter(j.counter)
		return nil
	}
	if err := run.CheckWritableFile(j.Output); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	if err := run.PrepareParts(j.Output, opts.Restoring); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	res.ToFile(j.partsDir())
	return nil
}

// finish joins the committed results into --output once the job ended (whoever asks first: the report or
// the summary); the parts directory is removed when the job FINISHED, since nothing can resume it.
func (j *Job) finish(res *runnel.JobResult) {
	if j.joined || j.Output == "" {
		return
	}
	j.joined = true
	j.lines, j.joinErr = run.JoinParts(j.Output, res.Status == "FINISHED")
	if j.joinErr != nil {
		j.joinErr = fmt.Errorf("--output %s: %w", j.Output, j.joinErr)
	}
}

// Summary writes --output and prints how many results there were.
func (j *Job) Summary(w io.Writer, res *runnel.JobResult) error {
	if j.Output == "" {
		if j.counter != nil {
			fmt.Fprintf(w, "nexmark %s: %d results\n", j.Query, j.counter.Count())
		}
		return nil
	}
	j.finish(res)
	if j.joinErr != nil {
		return j.joinErr
	}
	fmt.Fprintf(w, "nexmark %s: %d results written to %s\n", j.Query, j.lines, j.Output)
	return nil
}

// Verify fails the run when its results could not be joined into --output.
func (j *Job) Verify(*runnel.JobResult) error { return j.joinErr }

// ReportFields adds the query and its result count to the run's report.
func (j *Job) ReportFields(res *runnel.JobResult) map[string]any {
	j.finish(res)
	n := j.lines
	if j.counter != nil {
		n = j.counter.Count()
	}
	return map[string]any{"query": j.Query, "results": n}
}

package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples"
)

// registerExamples makes every bundled example a registered job, with the parallelism 2 of its runs:
// runnel run EXAMPLE, and a JobManager and its TaskManagers building it from the command line that
// runnel submit sent.
func registerExamples() {
	for _, ex := range examples.All() {
		runnel.RegisterJob(ex.Name, ex.Description, func(fs *pflag.FlagSet) runnel.Job {
			return &exampleJob{Job: ex.New(fs), name: ex.Name, flags: fs}
		}, runnel.WithParallelism(2))
	}
}

// exampleJob is a bundled example as a registered job.
type exampleJob struct {
	examples.Job
	name string
	// flags hold the run's --duration, which examples with an optionally unbounded source read.
	flags *pflag.FlagSet
}

// Build implements runnel.Job.
func (j *exampleJob) Build(env *runnel.Environment, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: the example takes flags only (runnel run %s --help)", args, j.name)
	}
	duration, err := j.flags.GetDuration("duration")
	if err != nil {
		return err
	}
	return j.Job.Build(env, examples.Options{Out: os.Stdout, Duration: duration, Restoring: env.Config().RestoreFrom != ""})
}

// End implements runnel.JobEnder: the example's report fields, summary and check of its own results.
func (j *exampleJob) End(w io.Writer, res *runnel.JobResult) (map[string]any, error) {
	var fields map[string]any
	if r, ok := j.Job.(examples.Reporter); ok {
		fields = r.ReportFields(res)
	}
	if s, ok := j.Job.(examples.Summarizer); ok {
		if err := s.Summary(w, res); err != nil {
			return fields, err
		}
	}
	if v, ok := j.Job.(examples.Verifier); ok {
		return fields, v.Verify(res)
	}
	return fields, nil
}

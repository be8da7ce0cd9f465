// Package examples is the registry of Runnel's bundled example jobs, which the runnel command lists and
// runs. Each example lives in its own package under examples/ and is built only on the public API
// (packages runnel, codec and connector), like a user's job would be.
package examples

import (
	"io"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/clickstream"
	"github.com/runnel-dev/runnel/examples/fraud"
	"github.com/runnel-dev/runnel/examples/internal/run"
	"github.com/runnel-dev/runnel/examples/nexmark"
	"github.com/runnel-dev/runnel/examples/sequence"
	"github.com/runnel-dev/runnel/examples/sessions"
	"github.com/runnel-dev/runnel/examples/wordcount"
)

// Options are the settings of a run that an example may need while building its job.
type Options = run.Options

// CheckWritableFile reports whether a file can be written at path when a run ends, without changing
// anything there (see run.CheckWritableFile); the command checks its output files with it before a job runs.
func CheckWritableFile(path string) error { return run.CheckWritableFile(path) }

// Job is one configured run of an example: its flags have been parsed into it.
type Job interface {
	// Build adds the example's operators to env.
	Build(env *runnel.Environment, opts Options) error
}

// Summarizer is implemented by jobs that print a summary after the job ended (also when it was cancelled).
type Summarizer interface {
	Summary(w io.Writer, res *runnel.JobResult) error
}

// Verifier is implemented by jobs that check their own results: Verify returns an error when the run's
// results are wrong, and the command then exits as for a failed job (1), so that scripts and CI notice.
type Verifier interface {
	Verify(res *runnel.JobResult) error
}

// Reporter is implemented by jobs that add fields to the run's `--report` JSON: each entry becomes a
// top-level field next to the engine's JobResult fields (which keep their names; an entry named like one of
// them is dropped). It is called once, after the job ended.
type Reporter interface {
	ReportFields(res *runnel.JobResult) map[string]any
}

// Example describes one bundled example job.
type Example struct {
	Name        string
	Description string
	// New registers the example's own flags on fs and returns the job they configure; the flags are read
	// when Build is called.
	New func(fs *pflag.FlagSet) Job
}

// All returns the bundled examples, sorted by name.
func All() []Example {
	return []Example{
		{
			Name:        "clickstream",
			Description: "keyed clickstream aggregation: clicks per user and page from a deterministic click generator",
			New:         func(fs *pflag.FlagSet) Job { return clickstream.New(fs) },
		},
		{
			Name:        "fraud",
			Description: "fraud detection: a large transaction within a minute of a small one on the same account raises an alert (keyed state and a processing-time timer)",
			New:         func(fs *pflag.FlagSet) Job { return fraud.New(fs) },
		},
		{
			Name:        "nexmark",
			Description: "the Nexmark benchmark's queries (--query q0, q1, q2, q3, q4, q5, q7, q8) over its generated auction stream or a JSON lines file, in event time",
			New:         func(fs *pflag.FlagSet) Job { return nexmark.New(fs) },
		},
		{
			Name:        "sequence",
			Description: "semantics checker: per-key sequence numbers through map -> keyBy -> check; reports lost, duplicated and out-of-order records",
			New:         func(fs *pflag.FlagSet) Job { return sequence.New(fs) },
		},
		{
			Name:        "sessions",
			Description: "sessionizer: out-of-order click events keyed by user into event-time session windows (--gap), one summary per session (user, start, end, clicks, distinct pages)",
			New:         func(fs *pflag.FlagSet) Job { return sessions.New(fs) },
		},
		{
			Name:        "wordcount",
			Description: "counts the words of a text file (or of generated text) and writes word<TAB>count sorted by word",
			New:         func(fs *pflag.FlagSet) Job { return wordcount.New(fs) },
		},
	}
}

// Lookup returns the example called name.
func Lookup(name string) (Example, bool) {
	for _, e := range All() {
		if e.Name == name {
			return e, true
		}
	}
	return Example{}, false
}

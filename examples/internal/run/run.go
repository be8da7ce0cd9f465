// Package run holds the settings shared by every bundled example's Build.
package run

import (
	"io"
	"time"
)

// Options are the settings of a run that an example may need while building its job.
type Options struct {
	// Out receives what the example prints (results, summaries); nil means discard.
	Out io.Writer
	// Duration is the run's time limit (0: until bounded sources end). Examples with an optionally
	// unbounded source run unbounded when it is set.
	Duration time.Duration
	// Restoring says that the run resumes from a savepoint or checkpoint (--from-savepoint): output an
	// earlier run left behind is then this run's too.
	Restoring bool
}

// Writer returns Out, or io.Discard when it is nil.
func (o Options) Writer() io.Writer {
	if o.Out == nil {
		return io.Discard
	}
	return o.Out
}

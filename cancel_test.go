package runnel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// TestCancelFinishesInAnyState cancels jobs in states where some subtasks were never deployed or are
// waiting to be restarted: cancellation must end the job, CANCELED, with every subtask in a terminal state.
func TestCancelFinishesInAnyState(t *testing.T) {
	savepointDir := t.TempDir()
	for _, tc := range []struct {
		name  string
		after time.Duration
		opts  []runnel.Option
		// errContains: the error Execute must return ("": none).
		errContains string
	}{
		// Consumers of a blocking exchange wait for an unbounded producer that never finishes: they are
		// never deployed.
		{"blocking exchange, consumers never deployed", 200 * time.Millisecond,
			[]runnel.Option{runnel.WithExchangeMode("blocking")}, ""},
		{"restart backoff pending, savepoint on stop", 300 * time.Millisecond,
			[]runnel.Option{runnel.WithFailureInjection("reduce[0]@100"), runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=1h"),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond}), runnel.WithSavepointOnStop(savepointDir)}, "is down"},
		// A failure whose restart waits out a long backoff: the restarted subtasks sit in CREATED.
		{"restart backoff pending", 300 * time.Millisecond,
			[]runnel.Option{runnel.WithFailureInjection("reduce[0]@100"), runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=1h")}, ""},
		{"cancelled before start", 0, nil, ""},
		{"pipelined, eager scheduling", 200 * time.Millisecond, []runnel.Option{runnel.WithScheduling("eager")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet)}, tc.opts...)...)
			src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) int64 { return int64(s) },
				connector.GeneratorOptions{RatePerSubtask: 20000})).Name("source")
			sums := runnel.Reduce(runnel.KeyBy(src, func(v int64) int64 { return v % 10 }), func(a, b int64) (int64, error) { return a + b, nil }).Name("reduce")
			sums.SinkTo(connector.Discard[int64]()).Name("sink")
			ctx, cancel := context.WithCancel(context.Background())
			if tc.after == 0 {
				cancel()
			} else {
				time.AfterFunc(tc.after, cancel)
			}
			done := make(chan struct{})
			var res *runnel.JobResult
			var err error
			go func() {
				defer close(done)
				res, err = env.Execute(ctx, "cancel-"+tc.name)
			}()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				cancel()
				t.Fatal("the job did not end within 20 s of its cancellation")
			}
			switch {
			case tc.errContains == "" && err != nil:
				t.Fatal(err)
			case tc.errContains != "" && (err == nil || !strings.Contains(err.Error(), tc.errContains)):
				t.Fatalf("error %v, want one that says %q", err, tc.errContains)
			}
			if res.Status != "CANCELED" {
				t.Fatalf("status %s, want CANCELED", res.Status)
			}
			for _, v := range res.Vertices {
				for _, s := range v.Subtasks {
					if s.State != "CANCELED" && s.State != "FINISHED" && s.State != "FAILED" {
						t.Fatalf("%s[%d] ended %s", v.Name, s.Index, s.State)
					}
				}
			}
		})
	}
}

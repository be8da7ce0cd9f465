package runnel_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// splitPos is one logical split of splitsSource and the next record it emits.
type splitPos struct{ Split, Next int64 }

// splitsSource reads 12 logical splits of perSplit records each; each subtask keeps the positions of its
// splits in operator list state, so the source can be rescaled: restored at another parallelism the
// positions are split evenly over the new subtasks.
type splitsSource struct{ perSplit int64 }

// Rescalable implements runnel.RescalableSource: the positions are list state only.
func (s *splitsSource) Rescalable() bool { return true }

func (s *splitsSource) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[string], error) {
	pos, err := runnel.NewOperatorListState[splitPos](ctx, "positions")
	if err != nil {
		return nil, err
	}
	return &splitsReader{s: s, ctx: ctx, pos: pos}, nil
}

type splitsReader struct {
	s       *splitsSource
	ctx     runnel.RuntimeContext
	pos     runnel.OperatorListState[splitPos]
	started bool
}

func (r *splitsReader) PollNext(out runnel.Collector[string]) (runnel.InputStatus, error) {
	if !r.started {
		r.started = true
		if len(r.pos.Get()) == 0 { // a fresh start (restored, every subtask has a split: 12 >= parallelism)
			for sp := int64(r.ctx.SubtaskIndex()); sp < 12; sp += int64(r.ctx.Parallelism()) {
				r.pos.Add(splitPos{Split: sp})
			}
		}
	}
	ps := r.pos.Get()
	done := true
	for i := range ps {
		for k := 0; k < 1 && ps[i].Next < r.s.perSplit; k++ {
			out.Collect(fmt.Sprintf("%d/%d", ps[i].Split, ps[i].Next))
			ps[i].Next++
		}
		done = done && ps[i].Next >= r.s.perSplit
	}
	r.pos.Update(ps)
	if done {
		return runnel.EndOfInput, nil
	}
	time.Sleep(time.Millisecond) // a slow source: the savepoint falls inside its input
	return runnel.MoreAvailable, nil
}
func (r *splitsReader) Available() <-chan struct{} { return nil }
func (r *splitsReader) Close() error               { return nil }

// TestOperatorListStateRescale stops a source whose positions are operator list state with a savepoint and
// resumes it at another parallelism: every record is written exactly once (file sink), none twice.
func TestOperatorListStateRescale(t *testing.T) {
	const perSplit = 600
	var want []string
	for sp := 0; sp < 12; sp++ {
		for n := 0; n < perSplit; n++ {
			want = append(want, fmt.Sprintf("%d/%d", sp, n))
		}
	}
	slices.Sort(want)
	build := func(p int, out, chk string, opts ...runnel.Option) *runnel.Environment {
		env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(p), runnel.WithLogger(quiet),
			runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 40 * time.Millisecond, Storage: chk})}, opts...)...)
		runnel.FromSource(env, &splitsSource{perSplit: perSplit}).Name("splits").Rebalance().
			SinkTo(connector.FileSink(out, func(s string) string { return s })).Name("files").SetParallelism(1)
		return env
	}
	for _, tc := range []struct{ from, to int }{{2, 3}, {3, 1}} {
		t.Run(fmt.Sprintf("%d to %d", tc.from, tc.to), func(t *testing.T) {
			dir := t.TempDir()
			sp, out := filepath.Join(dir, "sp"), filepath.Join(dir, "out")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			res, err := build(tc.from, out, filepath.Join(dir, "chk"), runnel.WithSavepointOnStop(sp)).Execute(ctx, "first")
			if err != nil || res.Status != "CANCELED" || res.Savepoint != sp {
				t.Fatalf("first run: %v, %+v", err, res)
			}
			if v := res.Vertex("splits"); v == nil || v.RecordsOut == 0 || v.RecordsOut >= 12*perSplit {
				t.Fatalf("the savepoint must fall inside the input: the source emitted %+v", v)
			}
			res, err = build(tc.to, out, filepath.Join(dir, "chk2"), runnel.WithRestoreFrom(sp)).Execute(context.Background(), "rescaled")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("rescaled run: %v, %+v", err, res)
			}
			if got := readCommitted(t, out); !slices.Equal(got, want) {
				t.Fatalf("%d records, want %d: %v", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

package connector_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// pausingSource emits 0..n-1, then nothing until a checkpoint taken after the last of them completes. Its
// first attempt then fails; a restored attempt goes on from the checkpointed position to 2n-1 and ends.
// So the failure comes after a checkpoint that covers the first n records: a sink must not lose them.
type pausingSource struct{ n int64 }

func (s *pausingSource) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[int64], error) {
	return &pausingReader{n: s.n, attempt: ctx.Attempt(), coveredBy: -1, wake: make(chan struct{}, 1)}, nil
}

type pausingReader struct {
	n, next   int64
	attempt   int
	coveredBy int64 // the first checkpoint taken at position n; -1 before it
	covered   bool  // that checkpoint completed
	wake      chan struct{}
}

func (r *pausingReader) PollNext(out runnel.Collector[int64]) (runnel.InputStatus, error) {
	switch {
	case r.next < r.n || (r.attempt > 0 && r.next < 2*r.n):
		out.Collect(r.next)
		r.next++
		return runnel.MoreAvailable, nil
	case r.next == 2*r.n:
		return runnel.EndOfInput, nil
	case r.covered:
		return runnel.EndOfInput, errors.New("pausing source: the failure after a checkpoint")
	}
	return runnel.NothingAvailable, nil
}

func (r *pausingReader) Available() <-chan struct{} { return r.wake }
func (r *pausingReader) Close() error               { return nil }

func (r *pausingReader) SnapshotState(id int64) ([]byte, error) {
	if r.next == r.n && r.coveredBy < 0 && r.attempt == 0 {
		r.coveredBy = id
	}
	return binary.AppendVarint(nil, r.next), nil
}

func (r *pausingReader) RestoreState(b []byte) error {
	v, k := binary.Varint(b)
	if k != len(b) || k <= 0 {
		return fmt.Errorf("pausing source: bad state % x", b)
	}
	r.next = v
	return nil
}

func (r *pausingReader) NotifyCheckpointComplete(id int64) error {
	if r.coveredBy >= 0 && id >= r.coveredBy {
		r.covered = true
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// TestSinksKeepWhatACheckpointCovered fails a job after a checkpoint that covers records its sink still
// held in memory (fewer than the collect sink's batch; inside the text sink's buffer). The restored job
// starts after them, so a sink that dropped them on the failure loses them for good.
func TestSinksKeepWhatACheckpointCovered(t *testing.T) {
	const n = 100
	want := int64s(0, 2*n)
	// run runs the job with p subtasks of source and sink (chained: each pair is a region of its own, which
	// fails once).
	run := func(t *testing.T, sink runnel.Sink[int64], p int, opts ...runnel.Option) {
		env := runnel.NewEnvironment(quietEnv(append(opts, runnel.WithParallelism(p),
			runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Millisecond}),
			runnel.WithRestartStrategy("fixed-delay:attempts=4,delay=0s"))...)...)
		runnel.FromSource(env, runnel.Source[int64](&pausingSource{n: n})).Name("src").SinkTo(sink).Name("sink")
		res := execute(t, env)
		if len(res.Failovers) != p {
			t.Fatalf("failovers %+v, want %d", res.Failovers, p)
		}
	}
	t.Run("collect", func(t *testing.T) {
		sink := connector.NewCollect[int64]()
		run(t, sink, 1)
		got := sink.Records()
		slices.Sort(got)
		got = slices.Compact(got) // at least once: a record may come twice
		if !slices.Equal(got, want) {
			t.Fatalf("collected %d distinct records, want %d: %s", len(got), len(want), firstDiff(fmtAll(got), fmtAll(want)))
		}
	})
	for _, tc := range []struct {
		name  string
		p     int
		opts  []runnel.Option
		files []string
	}{
		{"text file", 1, nil, []string{"out.txt"}},
		{"text files of 2 subtasks over tcp", 2, []runnel.Option{runnel.WithTaskManagers(2)}, []string{"out.txt-0", "out.txt-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			run(t, connector.TextFileSink(filepath.Join(dir, "out.txt"), func(v int64) string { return fmt.Sprint(v) }), tc.p, tc.opts...)
			for _, name := range tc.files {
				data, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if got := linesOf(string(data)); !slices.Equal(got, fmtAll(want)) {
					t.Fatalf("%s: %s", name, firstDiff(got, fmtAll(want)))
				}
			}
			if names := dirNames(t, dir); !slices.Equal(names, tc.files) {
				t.Fatalf("files %q, want only %q", names, tc.files)
			}
		})
	}
}

func fmtAll(vs []int64) []string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return s
}

// textWriterAt opens the text sink's writer at path for attempt, with checkpointing.
func textWriterAt(t *testing.T, path string, attempt int) interface {
	runnel.SinkWriter[string]
	runnel.CheckpointedWriter
	runnel.CheckpointListener
} {
	t.Helper()
	w, err := connector.TextFileSink(path, func(s string) string { return s }).
		CreateWriter(fakeContext{parallelism: 1, attempt: attempt, checkpointing: true})
	if err != nil {
		t.Fatal(err)
	}
	return w.(interface {
		runnel.SinkWriter[string]
		runnel.CheckpointedWriter
		runnel.CheckpointListener
	})
}

// TestTextFileSinkRestores drives the text sink's writer through the restores a job makes: into a later
// attempt (a copy of the checkpointed bytes), into the same attempt of a new job (the file cut back), after
// the end of input with the output committed or not, and from files that are gone or too short.
func TestTextFileSinkRestores(t *testing.T) {
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(t *testing.T, w runnel.SinkWriter[string], lines ...string) {
		t.Helper()
		for _, l := range lines {
			must(t, w.Write(l))
		}
	}
	// finish ends the input of w and completes the checkpoint after it, which commits the output.
	finish := func(t *testing.T, w interface {
		runnel.SinkWriter[string]
		runnel.CheckpointedWriter
		runnel.CheckpointListener
	}, id int64) {
		t.Helper()
		must(t, w.Flush())
		_, err := w.SnapshotState(id)
		must(t, err)
		must(t, w.NotifyCheckpointComplete(id))
		must(t, w.Close())
	}
	output := func(t *testing.T, dir string, want string) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, "out.txt"))
		if err != nil || string(data) != want {
			t.Fatalf("output %q, %v; want %q", data, err, want)
		}
		if names := dirNames(t, dir); !slices.Equal(names, []string{"out.txt"}) {
			t.Fatalf("files %q, want only out.txt", names)
		}
	}
	for _, tc := range []struct {
		name       string
		newAttempt int // the attempt that restores: another (a failover) or 0 again (a new job)
	}{{"later attempt", 1}, {"same attempt of a new job", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.txt")
			w := textWriterAt(t, path, 0)
			write(t, w, "a", "b")
			snap, err := w.SnapshotState(1)
			must(t, err)
			write(t, w, "ccccc")        // after the checkpoint: comes again, or not at all
			_, err = w.SnapshotState(2) // a checkpoint that does not complete: "ccccc" is in the file
			must(t, err)
			must(t, w.Close())
			if _, err := os.Stat(path + ".inprogress.0"); err != nil {
				t.Fatalf("the file a checkpoint names went at Close: %v", err)
			}
			w2 := textWriterAt(t, path, tc.newAttempt)
			must(t, w2.RestoreState(snap))
			write(t, w2, "d")
			_, err = w2.SnapshotState(3)
			must(t, err)
			if _, err := os.Stat(path + ".inprogress.0"); err != nil {
				t.Fatalf("the restored file went before a checkpoint of the new attempt completed: %v", err)
			}
			must(t, w2.NotifyCheckpointComplete(3))
			if _, err := os.Stat(path + ".inprogress.0"); tc.newAttempt != 0 && err == nil {
				t.Fatal("the restored file stayed after a checkpoint of the new attempt completed")
			}
			finish(t, w2, 4)
			output(t, dir, "a\nb\nd\n")
		})
	}
	for _, committed := range []bool{false, true} {
		t.Run(fmt.Sprint("after the end, committed ", committed), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.txt")
			w := textWriterAt(t, path, 0)
			write(t, w, "a", "b")
			must(t, w.Flush())
			snap, err := w.SnapshotState(1)
			must(t, err)
			if committed {
				must(t, w.NotifyCheckpointComplete(1))
			}
			must(t, w.Close())
			w2 := textWriterAt(t, path, 1)
			must(t, w2.RestoreState(snap))
			finish(t, w2, 2)
			output(t, dir, "a\nb\n")
		})
	}
	t.Run("no checkpoint names the file", func(t *testing.T) {
		dir := t.TempDir()
		w := textWriterAt(t, filepath.Join(dir, "out.txt"), 0)
		write(t, w, "a")
		must(t, w.Close())
		if names := dirNames(t, dir); len(names) != 0 {
			t.Fatalf("files %q left behind", names)
		}
	})
	for _, tc := range []struct {
		name   string
		damage func(path string, snap []byte) []byte
		want   string
	}{
		{"file gone", func(path string, snap []byte) []byte { os.Remove(path + ".inprogress.0"); return snap }, "out.txt.inprogress.0: no such file"},
		{"file short", func(path string, snap []byte) []byte { os.Truncate(path+".inprogress.0", 1); return snap }, "holds 1 bytes, fewer than the 4"},
		{"another target's file", func(_ string, snap []byte) []byte {
			return append([]byte{1, 20}, append([]byte("out.txt-1.inprogress"), snap[len(snap)-2:]...)...)
		}, "is another target's"},
		{"bad version", func(_ string, snap []byte) []byte { return append([]byte{9}, snap[1:]...) }, "malformed"},
		{"truncated", func(_ string, snap []byte) []byte { return snap[:len(snap)-1] }, "malformed"},
		{"a path, not a name", func(_ string, snap []byte) []byte {
			return append([]byte{1, 4}, append([]byte("../x"), snap[len(snap)-2:]...)...)
		}, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out.txt")
			w := textWriterAt(t, path, 0)
			write(t, w, "a", "b")
			snap, err := w.SnapshotState(1)
			must(t, err)
			must(t, w.Close())
			w2 := textWriterAt(t, path, 1)
			defer w2.Close()
			if err := w2.RestoreState(tc.damage(path, snap)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

package connector_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// readParts reads every committed part file in dir and counts each line; it also returns the hidden files
// (in progress or pending) left in dir.
func readParts(t *testing.T, dir string) (map[string]int, []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	var hidden []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			hidden = append(hidden, e.Name())
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines[sc.Text()]++
		}
		f.Close()
	}
	return lines, hidden
}

// TestFileSinkWritesEveryRecordOnce runs bounded jobs into a FileSink: with checkpoints and failures of the
// sink (in the middle, and at its end of input) under region and full failover, over local and TCP channels,
// the committed part files hold every record exactly once and nothing hidden is left; without checkpoints,
// everything is committed at the end of input.
func TestFileSinkWritesEveryRecordOnce(t *testing.T) {
	const records = 30_000
	for _, tc := range []struct {
		name         string
		checkpoints  bool
		failover     string
		taskManagers int
		inject       []string
	}{
		{name: "no checkpoints", taskManagers: 1},
		{name: "region local", checkpoints: true, failover: "region", taskManagers: 1, inject: []string{"sink[0]@7000", "sink[1]@12000"}},
		{name: "region tcp", checkpoints: true, failover: "region", taskManagers: 2, inject: []string{"sink[1]@9000"}},
		{name: "full tcp", checkpoints: true, failover: "full", taskManagers: 2, inject: []string{"sink[0]@5000", "sink[0]@14000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := []runnel.Option{runnel.WithParallelism(2), runnel.WithTaskManagers(tc.taskManagers),
				runnel.WithLogger(slog.New(slog.DiscardHandler)), runnel.WithChaining(false)}
			if tc.checkpoints {
				opts = append(opts, runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond}),
					runnel.WithFailover(tc.failover), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"))
			}
			for _, spec := range tc.inject {
				opts = append(opts, runnel.WithFailureInjection(spec))
			}
			env := runnel.NewEnvironment(opts...)
			src := runnel.FromSource(env, connector.Generator(func(sub int, seq uint64) uint64 { return seq*2 + uint64(sub) },
				connector.GeneratorOptions{TotalRecords: records, RatePerSubtask: 40_000})).Name("source")
			runnel.Map(src, func(v uint64) (uint64, error) { return v, nil }).Name("map").
				SinkTo(connector.FileSink(dir, func(v uint64) string { return strconv.FormatUint(v, 10) })).Name("sink")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "filesink")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v: %+v", err, res)
			}
			if len(res.Failovers) != len(tc.inject) {
				t.Fatalf("%d failovers, want %d: %+v", len(res.Failovers), len(tc.inject), res.Failovers)
			}
			lines, hidden := readParts(t, dir)
			if len(hidden) > 0 {
				t.Errorf("hidden part files left: %v", hidden)
			}
			if len(lines) != records {
				t.Errorf("%d distinct records committed, want %d", len(lines), records)
			}
			for i := range uint64(records) {
				if n := lines[strconv.FormatUint(i, 10)]; n != 1 {
					t.Fatalf("record %d committed %d times", i, n)
				}
			}
		})
	}
}

// TestFileSinkRefusesABadDirectory names the problem when the directory does not exist.
func TestFileSinkRefusesABadDirectory(t *testing.T) {
	env := runnel.NewEnvironment(runnel.WithLogger(slog.New(slog.DiscardHandler)))
	missing := filepath.Join(t.TempDir(), "missing")
	runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) uint64 { return seq }, connector.GeneratorOptions{TotalRecords: 10})).
		SinkTo(connector.FileSink(missing, func(v uint64) string { return fmt.Sprint(v) }))
	_, err := env.Execute(context.Background(), "bad-dir")
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err %v, want one naming %s", err, missing)
	}
}

// fileWriter is what a FileSink writer is besides a SinkWriter.
type fileWriter interface {
	runnel.SinkWriter[uint64]
	SnapshotState(id int64) ([]byte, error)
	RestoreState(b []byte) error
	NotifyCheckpointComplete(id int64) error
}

// TestFileSinkRestore drives a writer through a failure that the job-level test can hit only by chance: a
// checkpoint taken but not yet notified (its part pending), and parts begun after it, one pending for a
// checkpoint that never completed and one in progress. The restored writer commits the first, deletes the
// others, and goes on; a restore whose pending part was removed by hand says so.
func TestFileSinkRestore(t *testing.T) {
	dir := t.TempDir()
	sink := connector.FileSink(dir, func(v uint64) string { return strconv.FormatUint(v, 10) })
	open := func() fileWriter {
		w, err := sink.CreateWriter(ctxOf(0, 1))
		if err != nil {
			t.Fatal(err)
		}
		return w.(fileWriter)
	}
	w := open()
	write := func(w fileWriter, from, to uint64) {
		for v := from; v < to; v++ {
			if err := w.Write(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(w, 0, 10)
	state1, err := w.SnapshotState(1) // part 0 pending for checkpoint 1, which completes but is never notified
	if err != nil {
		t.Fatal(err)
	}
	write(w, 10, 20)
	if _, err := w.SnapshotState(2); err != nil { // part 1 pending for checkpoint 2, which never completes
		t.Fatal(err)
	}
	write(w, 20, 30)                  // part 2 in progress
	if err := w.Close(); err != nil { // the attempt fails
		t.Fatal(err)
	}

	r := open()
	if err := r.RestoreState(state1); err != nil {
		t.Fatal(err)
	}
	lines, hidden := readParts(t, dir)
	if len(lines) != 10 || len(hidden) != 0 {
		t.Fatalf("after the restore: %d records committed (want the 10 of checkpoint 1), hidden files %v (want none)", len(lines), hidden)
	}
	write(r, 10, 30) // the records after checkpoint 1 come again
	if _, err := r.SnapshotState(3); err != nil {
		t.Fatal(err)
	}
	if err := r.NotifyCheckpointComplete(3); err != nil {
		t.Fatal(err)
	}
	lines, hidden = readParts(t, dir)
	if len(lines) != 30 || len(hidden) != 0 {
		t.Fatalf("%d records committed, hidden %v", len(lines), hidden)
	}
	for v, n := range lines {
		if n != 1 {
			t.Fatalf("record %s committed %d times", v, n)
		}
	}

	// A restore from an older checkpoint than the newest (the newest was damaged and passed over) deletes
	// the parts committed after it: their records come again.
	dir2 := t.TempDir()
	sink2 := connector.FileSink(dir2, func(v uint64) string { return strconv.FormatUint(v, 10) })
	open2 := func() fileWriter {
		w, err := sink2.CreateWriter(ctxOf(0, 1))
		if err != nil {
			t.Fatal(err)
		}
		return w.(fileWriter)
	}
	f := open2()
	write(f, 0, 10)
	older, err := f.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	write(f, 10, 20)
	if _, err := f.SnapshotState(2); err != nil {
		t.Fatal(err)
	}
	if err := f.NotifyCheckpointComplete(2); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if err := open2().RestoreState(older); err != nil {
		t.Fatal(err)
	}
	if lines, hidden := readParts(t, dir2); len(lines) != 10 || len(hidden) != 0 {
		t.Fatalf("after a fallback to checkpoint 1: %d records committed (want its 10), hidden %v", len(lines), hidden)
	}

	// A pending part that someone deleted cannot be committed: the restore says which.
	x := open()
	write(x, 100, 110)
	st, err := x.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	_ = x.Close()
	_, hidden = readParts(t, dir)
	for _, h := range hidden {
		if err := os.Remove(filepath.Join(dir, h)); err != nil {
			t.Fatal(err)
		}
	}
	if err := open().RestoreState(st); err == nil || !strings.Contains(err.Error(), "neither pending nor committed") {
		t.Fatalf("restore with its pending part gone: %v", err)
	}
	if err := open().RestoreState([]byte{9}); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("restore of bad bytes: %v", err)
	}
}

package sequence_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/internal/run"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// TestResumeOfAFinishedJob runs the job to its end with checkpoints into a storage directory and then
// again on the same directory, restored from it: its newest checkpoint is the final one, in which the job
// had already finished. The second run reports so (RestoredFrom.Finished, naming the checkpoint), reads
// and emits nothing, and the checker has nothing to check (ALREADY_FINISHED, every counter 0) instead of
// counting every record lost; Verify passes. A run restored from a savepoint of a run stopped halfway is
// not finished and is checked in full.
func TestResumeOfAFinishedJob(t *testing.T) {
	const records, keys, p = 20_000, 8, 2
	dir := filepath.Join(t.TempDir(), "checkpoints")
	opts := func(more ...runnel.Option) []runnel.Option {
		return append([]runnel.Option{runnel.WithParallelism(p),
			runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond, Storage: dir})}, more...)
	}
	first := sequence.New(nil)
	first.Records, first.Keys = records, keys
	checkExact(t, first, runJob(t, first, opts()...), records, keys, p)

	again := sequence.New(nil)
	again.Records, again.Keys = records, keys
	res := runJob(t, again, opts(runnel.WithRestoreFrom(dir))...)
	if res.RestoredFrom == nil || !res.RestoredFrom.Finished || res.RestoredFrom.CheckpointID == 0 {
		t.Fatalf("restored from %+v: want the final checkpoint, finished", res.RestoredFrom)
	}
	for _, v := range res.Vertices {
		if v.RecordsIn != 0 || v.RecordsOut != 0 {
			t.Fatalf("%s read %d and emitted %d records after its job had finished", v.Name, v.RecordsIn, v.RecordsOut)
		}
	}
	c := again.Checker(res)
	if want := (sequence.Checker{ExpectedRecords: records, Verdict: sequence.VerdictAlreadyFinished}); c != want {
		t.Fatalf("checker %+v, want %+v", c, want)
	}
	if err := again.Verify(res); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := again.Summary(&b, res); err != nil {
		t.Fatal(err)
	}
	if want := "nothing to check: the job had already finished in checkpoint"; !strings.Contains(b.String(), want) {
		t.Fatalf("summary %q, want it to say %q", b.String(), want)
	}

	// Stopped halfway with a savepoint, then resumed: not finished, every record checked.
	sp := filepath.Join(t.TempDir(), "savepoint")
	half := sequence.New(nil)
	half.Records, half.Keys, half.Rate = records, keys, 20_000
	env := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithSavepointOnStop(sp))
	if err := half.Build(env, run.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if res, err := env.Execute(ctx, "sequence"); err != nil || res.Status != "CANCELED" || res.Savepoint == "" {
		t.Fatalf("stop with a savepoint: %v, %+v", err, res)
	}
	if _, err := os.Stat(filepath.Join(sp, "_metadata")); err != nil {
		t.Fatal(err)
	}
	rest := sequence.New(nil)
	rest.Records, rest.Keys = records, keys
	res = runJob(t, rest, runnel.WithParallelism(p), runnel.WithRestoreFrom(sp))
	if res.RestoredFrom == nil || res.RestoredFrom.Finished {
		t.Fatalf("restored from %+v: a savepoint of a running job is not finished", res.RestoredFrom)
	}
	checkExact(t, rest, res, records, keys, p)
}

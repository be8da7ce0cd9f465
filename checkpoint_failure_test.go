package runnel_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
)

// TestStorageOutageFailsOverThroughRestartStrategy makes the checkpoint storage unusable for a second
// while a job runs: checkpoints fail past the tolerable number, which is a failure of the job as a whole
// that the restart strategy answers (restart from the latest checkpoint), not the end of the job.
func TestStorageOutageFailsOverThroughRestartStrategy(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "checkpoints")
	const per, keys, p = 40000, 11, 2
	env := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 40 * time.Millisecond, Storage: dir, TolerableFailed: 1}),
		runnel.WithRestartStrategy("fixed-delay:attempts=20,delay=100ms"))
	sink := sumJob(env, per, keys)

	// The outage: the storage directory is moved away and a plain file put in its place, so that every
	// read and write under it fails (ENOTDIR), even for root; after a second it comes back.
	outage := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if m, _ := filepath.Glob(filepath.Join(dir, "chk-*", "_metadata")); len(m) > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		away := filepath.Join(root, "away")
		if err := os.Rename(dir, away); err != nil {
			outage <- err
			return
		}
		if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
			outage <- err
			return
		}
		time.Sleep(time.Second)
		if err := os.Remove(dir); err != nil {
			outage <- err
			return
		}
		outage <- os.Rename(away, dir)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "storage-outage")
	if oerr := <-outage; oerr != nil {
		t.Fatal(oerr)
	}
	if err != nil {
		t.Fatalf("job: %v", err)
	}
	if res.Status != "FINISHED" || len(res.Failovers) == 0 {
		t.Fatalf("status %s with %d failovers, want FINISHED after failovers: %+v", res.Status, len(res.Failovers), res.Failovers)
	}
	global := false
	for _, f := range res.Failovers {
		if f.Failed == "job" && strings.Contains(f.Cause, "consecutive checkpoint failures") {
			global = true
			if len(f.Restarted) != len(res.Vertices[0].Subtasks)+len(res.Vertices[1].Subtasks) {
				t.Fatalf("a global failover restarted %v", f.Restarted)
			}
		}
	}
	if !global {
		t.Fatalf("no failover of the job for failed checkpoints: %+v", res.Failovers)
	}
	want := map[int64]int64{}
	for s := 0; s < p; s++ {
		for i := uint64(0); i < per; i++ {
			want[int64(i)%keys]++
		}
	}
	if got := latest(sink.Records()); len(got) != len(want) {
		t.Fatalf("results %v, want %v", got, want)
	} else {
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("key %d = %d, want %d (all %v)", k, got[k], v, got)
			}
		}
	}
}

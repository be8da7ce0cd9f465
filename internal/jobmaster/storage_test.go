package jobmaster

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/ident"
)

// commit stores checkpoint id of one subtask with one blob and commits it.
func commit(t *testing.T, st *checkpoint.Storage, id int64) {
	t.Helper()
	ctx := context.Background()
	a := ident.Attempt{}
	ref, err := st.WriteState(ctx, id, a, "", []byte("state"))
	if err != nil {
		t.Fatal(err)
	}
	cp := &checkpoint.CompletedCheckpoint{ID: id, TimestampMillis: id, CompletedMillis: id, Mode: barrier.ExactlyOnce,
		Vertices: []checkpoint.Vertex{{ID: 0, Name: "source", Parallelism: 1}},
		States:   []checkpoint.StateHandle{{Attempt: a, Blobs: []checkpoint.BlobRef{ref}}}}
	if err := st.CommitMetadata(ctx, cp); err != nil {
		t.Fatal(err)
	}
}

// TestStartRemovesPartialCheckpoints: a job that starts on a checkpoint storage removes the partial
// directories (a blob without _metadata, an empty directory) older than the newest committed checkpoint,
// which earlier runs' aborted checkpoints left; the committed ones and a partial one newer than the newest
// committed (another writer's, maybe in progress) stay.
func TestStartRemovesPartialCheckpoints(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := checkpoint.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	commit(t, st, 1)
	if _, err := st.WriteState(ctx, 2, ident.Attempt{}, "", []byte("aborted")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "chk-3"), 0o755); err != nil { // a cancelled write's
		t.Fatal(err)
	}
	commit(t, st, 4)
	if _, err := st.WriteState(ctx, 5, ident.Attempt{}, "", []byte("in progress")); err != nil {
		t.Fatal(err)
	}

	cc := checkpoint.DefaultConfig()
	disp, tm := dispatcherWithFake(t)
	defer tm.wg.Wait()
	defer disp.Close()
	d, err := NewDriver(Config{Job: chained(t), Dispatcher: disp, Logger: slog.New(slog.DiscardHandler), Checkpoint: &cc, Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	if snap := d.Run(ctx); snap.Status != StatusFinished {
		t.Fatalf("job %s: %v", snap.Status, snap.Err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"chk-1", "chk-4", "chk-5"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	for _, id := range []int64{1, 4} {
		if _, err := st.ReadCheckpoint(ctx, id); err != nil {
			t.Fatalf("committed checkpoint %d: %v", id, err)
		}
	}
}

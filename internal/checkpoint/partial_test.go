package checkpoint_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// partialLayout writes, for each id, a committed checkpoint ('c'), a partial one holding a blob ('p'), or
// an empty directory ('e', local buckets only: an object store has no empty directories), and returns
// the ids it made, by kind.
func partialLayout(t *testing.T, s *checkpoint.Storage, dir string, layout map[int64]byte) map[byte][]int64 {
	t.Helper()
	ctx := context.Background()
	made := map[byte][]int64{}
	ids := make([]int64, 0, len(layout))
	for id := range layout {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		kind := layout[id]
		switch kind {
		case 'c':
			writeCheckpoint(t, s, id)
		case 'p':
			if _, err := s.WriteState(ctx, id, att(0, 0, 0), "", []byte("partial")); err != nil {
				t.Fatal(err)
			}
		case 'e':
			if dir == "" {
				continue
			}
			if err := os.Mkdir(filepath.Join(dir, "chk-"+strconv.FormatInt(id, 10)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		made[kind] = append(made[kind], id)
	}
	return made
}

// present returns the ids of the checkpoint directories left, empty ones included (os.ReadDir for a local
// bucket).
func present(t *testing.T, s *checkpoint.Storage, dir string) []int64 {
	t.Helper()
	if dir == "" {
		ids, err := s.IDs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "chk-")
		if !ok || !e.IsDir() {
			continue
		}
		id, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// without returns ids without those in drop.
func without(ids []int64, drop ...int64) []int64 {
	var out []int64
	for _, id := range ids {
		if !slices.Contains(drop, id) {
			out = append(out, id)
		}
	}
	return out
}

// TestRetainDeletesPartialCheckpoints: besides the committed checkpoints beyond the retained ones, Retain
// deletes every partial directory (blobs without _metadata, or empty) older than the newest committed
// checkpoint, also while fewer checkpoints are committed than it retains; partial ones newer than the
// newest committed checkpoint (in progress) stay.
func TestRetainDeletesPartialCheckpoints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		b, dir := be.open(t)
		s := checkpoint.NewStorage(b, be.name)
		defer s.Close()
		partialLayout(t, s, dir, map[int64]byte{1: 'c', 2: 'p', 3: 'c', 4: 'p', 5: 'e', 6: 'c', 7: 'p', 8: 'e'})
		before := present(t, s, dir)
		deleted, err := s.Retain(ctx, 5)
		want := []int64{2, 4}
		if dir != "" {
			want = []int64{2, 4, 5}
		}
		if err != nil || !slices.Equal(deleted, want) {
			t.Fatalf("Retain(5) deleted %v, %v; want %v", deleted, err, want)
		}
		if got := present(t, s, dir); !slices.Equal(got, without(before, want...)) {
			t.Fatalf("left %v, want %v", got, without(before, want...))
		}
		deleted, err = s.Retain(ctx, 1)
		if err != nil || !slices.Equal(deleted, []int64{1, 3}) {
			t.Fatalf("Retain(1) deleted %v, %v; want [1 3]", deleted, err)
		}
		if cp, _, err := s.Latest(ctx); err != nil || cp.ID != 6 {
			t.Fatalf("latest after retention: %v, %v", cp, err)
		}
	})
}

// TestRemovePartial: at the start of a job, the partial directories older than the newest committed
// checkpoint go; committed ones (the one to restore among them) and everything newer than the newest
// committed one (another writer's checkpoint in progress) stay; with nothing committed nothing goes.
func TestRemovePartial(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		b, dir := be.open(t)
		s := checkpoint.NewStorage(b, be.name)
		defer s.Close()
		partialLayout(t, s, dir, map[int64]byte{1: 'p', 2: 'e'})
		if deleted, err := s.RemovePartial(ctx); err != nil || len(deleted) != 0 {
			t.Fatalf("with nothing committed RemovePartial deleted %v, %v", deleted, err)
		}
		partialLayout(t, s, dir, map[int64]byte{3: 'c', 4: 'p', 5: 'c', 6: 'e', 7: 'c', 8: 'p', 9: 'e'})
		before := present(t, s, dir)
		want := []int64{1, 4}
		if dir != "" {
			want = []int64{1, 2, 4, 6}
		}
		deleted, err := s.RemovePartial(ctx)
		if err != nil || !slices.Equal(deleted, want) {
			t.Fatalf("RemovePartial deleted %v, %v; want %v", deleted, err, want)
		}
		if got := present(t, s, dir); !slices.Equal(got, without(before, want...)) {
			t.Fatalf("left %v, want %v", got, without(before, want...))
		}
		for _, id := range []int64{3, 5, 7} {
			cp, err := s.ReadCheckpoint(ctx, id)
			if err != nil {
				t.Fatalf("committed checkpoint %d: %v", id, err)
			}
			checkStates(t, s.Reader(id), cp)
		}
		if _, err := s.ReadCheckpoint(ctx, 8); !errors.Is(err, checkpoint.ErrIncomplete) {
			t.Fatalf("checkpoint 8, in progress: %v, want it kept incomplete", err)
		}
	})
}

// TestRemovePartialBetween: once a job ended, the partial directories among the ids it triggered go, and
// so do the shared blobs written for its checkpoints that no committed checkpoint lists; another run's
// partial directories and blobs stay, and so does every blob a committed checkpoint lists.
func TestRemovePartialBetween(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		b, dir := be.open(t)
		s := checkpoint.NewStorage(b, be.name)
		defer s.Close()
		chains := make([][]checkpoint.BlobRef, 2)
		writeIncremental(t, s, 1, chains, func(int) bool { return true })
		partialLayout(t, s, dir, map[int64]byte{2: 'p'})
		// The run: 3 and 5 committed, 4, 6 and 7 aborted (6 after its subtask 0 wrote a shared blob),
		// 9 another writer's.
		writeIncremental(t, s, 3, chains, func(int) bool { return false })
		partialLayout(t, s, dir, map[int64]byte{4: 'p'})
		writeIncremental(t, s, 5, chains, func(int) bool { return false })
		aborted, err := s.WriteSharedBlob(ctx, 6, att(0, 0, 0), "", blobOf("aborted"))
		if err != nil {
			t.Fatal(err)
		}
		partialLayout(t, s, dir, map[int64]byte{6: 'p', 7: 'e', 9: 'p'})
		other, err := s.WriteSharedBlob(ctx, 9, att(0, 0, 0), "", blobOf("another writer's"))
		if err != nil {
			t.Fatal(err)
		}
		old, err := s.WriteSharedBlob(ctx, 2, att(0, 1, 0), "", blobOf("an earlier run's"))
		if err != nil {
			t.Fatal(err)
		}
		keysBefore, err := s.SharedKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before := present(t, s, dir)
		want := []int64{4, 6}
		if dir != "" {
			want = []int64{4, 6, 7}
		}
		deleted, err := s.RemovePartialBetween(ctx, 3, 8)
		if err != nil || !slices.Equal(deleted, want) {
			t.Fatalf("RemovePartialBetween(3, 8) deleted %v, %v; want %v", deleted, err, want)
		}
		if got := present(t, s, dir); !slices.Equal(got, without(before, want...)) {
			t.Fatalf("left %v, want %v", got, without(before, want...))
		}
		keys, err := s.SharedKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantKeys := slices.DeleteFunc(slices.Clone(keysBefore), func(k string) bool { return k == aborted.Key })
		if !slices.Equal(keys, wantKeys) {
			t.Fatalf("shared blobs left %v, want %v (only %s gone; %s and %s kept)", keys, wantKeys, aborted.Key, other.Key, old.Key)
		}
		for _, id := range []int64{1, 3, 5} {
			if _, err := s.ReadCheckpoint(ctx, id); err != nil {
				t.Fatalf("committed checkpoint %d: %v", id, err)
			}
		}
		if deleted, err := s.RemovePartialBetween(ctx, 0, 8); err != nil || len(deleted) != 0 {
			t.Fatalf("an empty range deleted %v, %v", deleted, err)
		}
	})
}

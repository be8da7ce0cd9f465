package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/ident"
)

// writeIncremental stores and commits checkpoint id of a job of one vertex at parallelism 2 whose
// subtasks write a shared blob and list it after the blobs of the chain they build on (chains[i], which
// it extends; a full one starts a new chain when full says so).
func writeIncremental(t *testing.T, s *checkpoint.Storage, id int64, chains [][]checkpoint.BlobRef, full func(i int) bool) *checkpoint.CompletedCheckpoint {
	t.Helper()
	ctx := context.Background()
	cp := &checkpoint.CompletedCheckpoint{ID: id, TimestampMillis: id, CompletedMillis: id, Mode: barrier.ExactlyOnce,
		Vertices: []checkpoint.Vertex{{ID: 0, Name: "window", Parallelism: 2}}}
	for i := range chains {
		a := att(0, int32(i), 0)
		ref, err := s.WriteSharedBlob(ctx, id, a, "", blobOf(fmt.Sprintf("piece %d of %s", id, a)))
		if err != nil {
			t.Fatal(err)
		}
		if full(i) {
			chains[i] = nil
		}
		chains[i] = append(slices.Clone(chains[i]), ref)
		cp.States = append(cp.States, checkpoint.StateHandle{Attempt: a, Blobs: slices.Clone(chains[i])})
	}
	if err := s.CommitMetadata(ctx, cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestSharedBlobRetention: incremental checkpoints list the shared blobs of the chain they build on.
// After every completion Retain keeps every shared blob a retained checkpoint lists and deletes every
// other, except those of checkpoints newer than the newest committed one (in progress); an aborted
// checkpoint's blob that a later one lists stays as long as that one is retained.
func TestSharedBlobRetention(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		b, _ := be.open(t)
		s := checkpoint.NewStorage(b, be.name)
		defer s.Close()
		const retained = 2
		chains := make([][]checkpoint.BlobRef, 2)
		var committed []*checkpoint.CompletedCheckpoint
		check := func(id int64) {
			t.Helper()
			if _, err := s.Retain(ctx, retained); err != nil {
				t.Fatal(err)
			}
			listed := map[string]bool{}
			for _, cp := range committed[max(0, len(committed)-retained):] {
				for _, h := range cp.States {
					for _, ref := range h.Blobs {
						listed[ref.Key] = true
					}
				}
			}
			keys, err := s.SharedKeys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range inProgress {
				if !slices.Contains(keys, k) {
					t.Errorf("after checkpoint %d: %s, of a checkpoint in progress, was deleted", id, k)
				}
			}
			for k := range listed {
				if !slices.Contains(keys, k) {
					t.Errorf("after checkpoint %d: %s, listed by a retained checkpoint, was deleted", id, k)
				}
			}
			for _, k := range keys {
				if !listed[k] && !slices.Contains(inProgress, k) {
					t.Errorf("after checkpoint %d: %s is listed by no retained checkpoint and was kept", id, k)
				}
			}
			cp, _, err := s.Latest(ctx)
			if err != nil || cp.ID != committed[len(committed)-1].ID {
				t.Fatalf("after checkpoint %d: latest %v, %v", id, cp, err)
			}
		}
		for id := int64(1); id <= 12; id++ {
			inProgress = nil
			switch {
			case id%5 == 3:
				// Aborted after subtask 0 wrote its piece: subtask 0 builds on it next time, subtask 1
				// did not write.
				ref, err := s.WriteSharedBlob(ctx, id, att(0, 0, 0), "", blobOf("aborted"))
				if err != nil {
					t.Fatal(err)
				}
				chains[0] = append(slices.Clone(chains[0]), ref)
				if err := s.Discard(ctx, id); err != nil {
					t.Fatal(err)
				}
				continue
			case id%5 == 4:
				// A piece of the next checkpoint, in progress while this one completes, is kept (the
				// next checkpoint's subtask 1 writes it again).
				ref, err := s.WriteSharedBlob(ctx, id+1, att(0, 1, 0), "", blobOf("next"))
				if err != nil {
					t.Fatal(err)
				}
				inProgress = append(inProgress, ref.Key)
			}
			committed = append(committed, writeIncremental(t, s, id, chains, func(i int) bool { return id == 1 || int(id)%(4+i) == 0 }))
			check(id)
		}
	})
}

var inProgress []string

// TestMissingSharedBlob: a shared blob that is gone or damaged makes the checkpoint that lists it
// corrupt (the blob is named), so the restore falls back to an older checkpoint that does not list it.
func TestMissingSharedBlob(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		b, _ := be.open(t)
		s := checkpoint.NewStorage(b, be.name)
		defer s.Close()
		chains := make([][]checkpoint.BlobRef, 2)
		cp1 := writeIncremental(t, s, 1, chains, func(int) bool { return true })
		cp2 := writeIncremental(t, s, 2, chains, func(int) bool { return false })
		cp3 := writeIncremental(t, s, 3, chains, func(int) bool { return false })
		_, _ = cp1, cp3
		// The piece only checkpoints 2 and 3 list goes.
		gone := cp2.States[1].Blobs[1]
		if err := b.Delete(ctx, "shared/"+gone.Key); err != nil {
			t.Fatal(err)
		}
		cp, skipped, err := s.Latest(ctx)
		if err != nil || cp.ID != 1 {
			t.Fatalf("latest: %v, %v; want checkpoint 1", cp, err)
		}
		if len(skipped) != 2 {
			t.Fatalf("skipped %v, want checkpoints 3 and 2", skipped)
		}
		for _, sk := range skipped {
			var ce *checkpoint.CorruptError
			if !errors.As(sk.Err, &ce) || ce.Problem != checkpoint.ProblemMissingBlob || ce.Key != "shared/"+gone.Key {
				t.Fatalf("checkpoint %d: %v, want the missing shared blob %s", sk.ID, sk.Err, gone.Key)
			}
		}
		// A damaged one (another size) is reported as such.
		put(t, b, "shared/"+gone.Key, []byte("short"))
		if _, err := s.ReadCheckpoint(ctx, 3); !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Fatalf("checkpoint 3 with a damaged shared blob: %v", err)
		}
	})
}

// TestSavepointOfIncrementalCheckpoint: a savepoint of an incremental checkpoint copies the shared blobs
// it lists and lists them as its own, so it restores after the checkpoint storage is gone; a retained
// incremental chk-<id> directory opens as a savepoint too, reading its shared blobs beside it.
func TestSavepointOfIncrementalCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "job")
	s, err := checkpoint.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	chains := make([][]checkpoint.BlobRef, 2)
	writeIncremental(t, s, 1, chains, func(int) bool { return true })
	cp := writeIncremental(t, s, 2, chains, func(int) bool { return false })
	direct, err := checkpoint.ReadSavepoint(ctx, filepath.Join(dir, "chk-2"))
	if err != nil {
		t.Fatalf("chk-2 as a savepoint: %v", err)
	}
	for _, h := range direct.Checkpoint.States {
		for _, ref := range h.Blobs {
			if _, err := direct.ReadState(ctx, ref); err != nil || !ref.Shared {
				t.Fatalf("chk-2 as a savepoint: %s (shared %v): %v", ref.Key, ref.Shared, err)
			}
		}
	}
	direct.Close()
	sp := filepath.Join(t.TempDir(), "sp")
	if err := s.WriteSavepoint(ctx, sp, cp); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// The checkpoint storage goes: the savepoint holds everything.
	if err := removeAll(dir); err != nil {
		t.Fatal(err)
	}
	got, err := checkpoint.ReadSavepoint(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	for i, h := range got.Checkpoint.States {
		if len(h.Blobs) != 2 {
			t.Fatalf("subtask %d: %d blobs, want the chain of 2", i, len(h.Blobs))
		}
		for j, ref := range h.Blobs {
			if ref.Shared {
				t.Fatalf("savepoint lists %s as shared", ref.Key)
			}
			data, err := got.ReadState(ctx, ref)
			if want := fmt.Sprintf("piece %d of %s", j+1, att(0, int32(i), 0)); err != nil || string(data) != want {
				t.Fatalf("savepoint blob %s: %q, %v; want %q", ref.Key, data, err, want)
			}
		}
	}
	if got.Checkpoint.HasShared() {
		t.Fatal("the savepoint's metadata lists shared blobs")
	}
	_ = ident.Attempt{}
}

func removeAll(dir string) error { return os.RemoveAll(dir) }

func blobOf(s string) *checkpoint.Blob {
	b := checkpoint.NewBlob(checkpoint.BlobMemory{})
	b.WriteString(s)
	return b
}

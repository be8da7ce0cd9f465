package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/checkpoint/errorbucket"
	"github.com/runnel-dev/runnel/internal/ident"
)

// backend makes an empty bucket; dir is its local directory, if any.
type backend struct {
	name string
	open func(t *testing.T) (b checkpoint.Bucket, dir string)
}

var backends = []backend{
	{"memblob", func(t *testing.T) (checkpoint.Bucket, string) {
		return checkpoint.BlobBucket(memblob.OpenBucket(nil)), ""
	}},
	{"fileblob", func(t *testing.T) (checkpoint.Bucket, string) {
		dir := filepath.Join(t.TempDir(), "job-1")
		b, err := checkpoint.OpenBucket(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		return b, dir
	}},
}

func forEachBackend(t *testing.T, f func(t *testing.T, be backend)) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { f(t, be) })
	}
}

func att(v ident.VertexID, i, n int32) ident.Attempt {
	return ident.Attempt{Subtask: ident.Subtask{Vertex: v, Index: i}, Number: n}
}

// stateOf is the state every test subtask writes for checkpoint id.
func stateOf(id int64, a ident.Attempt) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("state of %s in checkpoint %d;", a, id)), 3)
}

// writeCheckpoint stores and commits checkpoint id of a job with a source (parallelism 2, inline state
// only on subtask 1) and a sink (parallelism 1), as tasks and the job master would.
func writeCheckpoint(t *testing.T, s *checkpoint.Storage, id int64) *checkpoint.CompletedCheckpoint {
	t.Helper()
	ctx := context.Background()
	cp := &checkpoint.CompletedCheckpoint{
		ID:              id,
		TimestampMillis: 1000 * id,
		CompletedMillis: 1000*id + 50,
		Mode:            barrier.ExactlyOnce,
		Vertices:        []checkpoint.Vertex{{ID: 0, Name: "gen", Parallelism: 2}, {ID: 1, Name: "sink", Parallelism: 1}},
	}
	for _, a := range []ident.Attempt{att(0, 0, 0), att(0, 1, 2), att(1, 0, 0)} {
		h := checkpoint.StateHandle{Attempt: a}
		if a.Index == 1 {
			h.Inline = []byte("offset=42")
		} else {
			ref, err := s.WriteState(ctx, id, a, "", stateOf(id, a))
			if err != nil {
				t.Fatal(err)
			}
			ref2, err := s.WriteState(ctx, id, a, "keyed", nil) // empty state is fine too
			if err != nil {
				t.Fatal(err)
			}
			h.Blobs = []checkpoint.BlobRef{ref, ref2}
		}
		cp.States = append(cp.States, h)
	}
	if err := s.CommitMetadata(ctx, cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

func readAll(t *testing.T, b checkpoint.Bucket, key string) []byte {
	t.Helper()
	r, _, err := b.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func put(t *testing.T, b checkpoint.Bucket, key string, data []byte) {
	t.Helper()
	if err := b.Put(context.Background(), key, data); err != nil {
		t.Fatal(err)
	}
}

func checkStates(t *testing.T, r checkpoint.StateReader, cp *checkpoint.CompletedCheckpoint) {
	t.Helper()
	for _, h := range cp.States {
		for i, ref := range h.Blobs {
			data, err := r.ReadState(context.Background(), ref)
			if err != nil {
				t.Fatalf("read state %s of %s: %v", ref.Key, h.Attempt, err)
			}
			want := stateOf(cp.ID, h.Attempt)
			if i == 1 {
				want = nil
			}
			if !bytes.Equal(data, want) {
				t.Fatalf("state %s of %s: got %q, want %q", ref.Key, h.Attempt, data, want)
			}
		}
	}
}

func TestStorageRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		b, dir := be.open(t)
		s := checkpoint.NewStorage(b, be.name)
		defer s.Close()
		if id, err := s.NextID(ctx); err != nil || id != 1 {
			t.Fatalf("NextID on empty storage = %d, %v", id, err)
		}
		want := writeCheckpoint(t, s, 1)
		got, skipped, err := s.Latest(ctx)
		if err != nil || len(skipped) != 0 {
			t.Fatalf("Latest: %v (skipped %v)", err, skipped)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Latest returned\n%+v\nwant\n%+v", got, want)
		}
		checkStates(t, s.Reader(1), got)
		if id, err := s.NextID(ctx); err != nil || id != 2 {
			t.Fatalf("NextID = %d, %v; want 2", id, err)
		}
		if err := s.CommitMetadata(ctx, want); !errors.Is(err, checkpoint.ErrExists) {
			t.Fatalf("second commit: %v, want ErrExists", err)
		}
		if dir != "" {
			// The layout on disk is the documented one, without sidecar or temporary files.
			var files []string
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(dir, p)
					files = append(files, filepath.ToSlash(rel))
				}
				return nil
			})
			want := []string{"chk-1/_metadata", "chk-1/v0-0-a0-keyed", "chk-1/v0-0-a0-state", "chk-1/v1-0-a0-keyed", "chk-1/v1-0-a0-state"}
			if !slices.Equal(files, want) {
				t.Fatalf("files %v, want %v", files, want)
			}
		}
	})
}

// damage describes one way a stored checkpoint gets hurt, and how it must be reported.
type damage struct {
	name    string
	hurt    func(t *testing.T, b checkpoint.Bucket)
	is      error              // what the skipped error must wrap
	problem checkpoint.Problem // for ErrCorrupt
	not     []error            // what it must not wrap
}

var damages = []damage{
	{
		name: "flipped byte in a state blob",
		hurt: func(t *testing.T, b checkpoint.Bucket) {
			data := readAll(t, b, "chk-2/v1-0-a0-state")
			data[20] ^= 0x40
			put(t, b, "chk-2/v1-0-a0-state", data)
		},
		is: checkpoint.ErrCorrupt, problem: checkpoint.ProblemBadChecksum,
	},
	{
		name: "truncated state blob",
		hurt: func(t *testing.T, b checkpoint.Bucket) {
			data := readAll(t, b, "chk-2/v0-0-a0-state")
			put(t, b, "chk-2/v0-0-a0-state", data[:len(data)-7])
		},
		is: checkpoint.ErrCorrupt, problem: checkpoint.ProblemTruncated,
	},
	{
		name: "state blob replaced by a valid blob of other content",
		hurt: func(t *testing.T, b checkpoint.Bucket) {
			// Same size, valid envelope, but not the blob the metadata lists.
			put(t, b, "chk-2/v0-0-a0-state", readAll(t, b, "chk-2/v1-0-a0-state"))
		},
		is: checkpoint.ErrCorrupt, problem: checkpoint.ProblemBadChecksum,
	},
	{
		name: "deleted state blob",
		hurt: func(t *testing.T, b checkpoint.Bucket) {
			if err := b.Delete(context.Background(), "chk-2/v1-0-a0-keyed"); err != nil {
				t.Fatal(err)
			}
		},
		is: checkpoint.ErrCorrupt, problem: checkpoint.ProblemMissingBlob, not: []error{checkpoint.ErrNotFound},
	},
	{
		name: "deleted _metadata",
		hurt: func(t *testing.T, b checkpoint.Bucket) {
			if err := b.Delete(context.Background(), "chk-2/_metadata"); err != nil {
				t.Fatal(err)
			}
		},
		is: checkpoint.ErrIncomplete, not: []error{checkpoint.ErrCorrupt},
	},
	{
		name: "garbage _metadata",
		hurt: func(t *testing.T, b checkpoint.Bucket) {
			put(t, b, "chk-2/_metadata", []byte(`{"id": 2, "this is": "not a checkpoint"}`))
		},
		is: checkpoint.ErrCorrupt, problem: checkpoint.ProblemBadMagic,
	},
	{
		name: "empty _metadata",
		hurt: func(t *testing.T, b checkpoint.Bucket) { put(t, b, "chk-2/_metadata", nil) },
		is:   checkpoint.ErrCorrupt, problem: checkpoint.ProblemTruncated,
	},
	{
		name: "truncated _metadata",
		hurt: func(t *testing.T, b checkpoint.Bucket) {
			data := readAll(t, b, "chk-2/_metadata")
			put(t, b, "chk-2/_metadata", data[:len(data)/2])
		},
		is: checkpoint.ErrCorrupt, problem: checkpoint.ProblemTruncated,
	},
	{
		name: "flipped byte in _metadata",
		hurt: func(t *testing.T, b checkpoint.Bucket) {
			data := readAll(t, b, "chk-2/_metadata")
			data[40] ^= 1
			put(t, b, "chk-2/_metadata", data)
		},
		is: checkpoint.ErrCorrupt, problem: checkpoint.ProblemBadChecksum,
	},
	{
		name: "_metadata of another checkpoint",
		hurt: func(t *testing.T, b checkpoint.Bucket) {
			put(t, b, "chk-2/_metadata", readAll(t, b, "chk-1/_metadata"))
		},
		is: checkpoint.ErrCorrupt, problem: checkpoint.ProblemBadPayload,
	},
	{
		name: "_metadata from a newer format",
		hurt: func(t *testing.T, b checkpoint.Bucket) {
			data := readAll(t, b, "chk-2/_metadata")
			binary.LittleEndian.PutUint16(data[4:], 9)
			put(t, b, "chk-2/_metadata", data)
		},
		is: checkpoint.ErrUnsupportedVersion, not: []error{checkpoint.ErrCorrupt},
	},
}

func TestLatestSkipsDamagedCheckpoints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, d := range damages {
			t.Run(d.name, func(t *testing.T) {
				ctx := context.Background()
				b, _ := be.open(t)
				s := checkpoint.NewStorage(b, be.name)
				defer s.Close()
				first := writeCheckpoint(t, s, 1)
				writeCheckpoint(t, s, 2)
				d.hurt(t, b)

				got, skipped, err := s.Latest(ctx)
				if err != nil {
					t.Fatalf("Latest: %v", err)
				}
				if !reflect.DeepEqual(got, first) {
					t.Fatalf("Latest returned checkpoint %d, want the previous one", got.ID)
				}
				checkStates(t, s.Reader(got.ID), got)
				if len(skipped) != 1 || skipped[0].ID != 2 {
					t.Fatalf("skipped %v, want checkpoint 2", skipped)
				}
				checkDamageError(t, skipped[0].Err, d)
				if !strings.Contains(skipped[0].Err.Error(), "checkpoint 2") {
					t.Errorf("error does not name the checkpoint: %v", skipped[0].Err)
				}

				// Reading the damaged checkpoint directly reports the same thing.
				_, err = s.ReadCheckpoint(ctx, 2)
				checkDamageError(t, err, d)
			})
		}
	})
}

func checkDamageError(t *testing.T, err error, d damage) {
	t.Helper()
	if !errors.Is(err, d.is) {
		t.Fatalf("error %v does not wrap %v", err, d.is)
	}
	for _, not := range d.not {
		if errors.Is(err, not) {
			t.Fatalf("error %v wraps %v", err, not)
		}
	}
	if d.problem != 0 {
		var ce *checkpoint.CorruptError
		if !errors.As(err, &ce) || ce.Problem != d.problem {
			t.Fatalf("error %v: want a CorruptError with problem %q", err, d.problem)
		}
	}
}

func TestLatestWithoutValidCheckpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		b, _ := be.open(t)
		s := checkpoint.NewStorage(b, be.name)
		defer s.Close()

		_, skipped, err := s.Latest(ctx)
		if !errors.Is(err, checkpoint.ErrNotFound) || errors.Is(err, checkpoint.ErrCorrupt) || len(skipped) != 0 {
			t.Fatalf("empty storage: %v, skipped %v; want a clean ErrNotFound", err, skipped)
		}

		// Only an incomplete checkpoint: still nothing was ever committed.
		if _, err := s.WriteState(ctx, 1, att(0, 0, 0), "", []byte("x")); err != nil {
			t.Fatal(err)
		}
		_, skipped, err = s.Latest(ctx)
		if !errors.Is(err, checkpoint.ErrNotFound) || errors.Is(err, checkpoint.ErrCorrupt) || len(skipped) != 1 {
			t.Fatalf("incomplete only: %v, skipped %v; want ErrNotFound and one skipped", err, skipped)
		}
		if !errors.Is(skipped[0].Err, checkpoint.ErrIncomplete) {
			t.Fatalf("skipped %v, want ErrIncomplete", skipped[0].Err)
		}

		// Committed checkpoints that are all damaged: an error that says so, not "start fresh".
		writeCheckpoint(t, s, 2)
		put(t, b, "chk-2/_metadata", []byte("garbage"))
		_, skipped, err = s.Latest(ctx)
		if !errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("all damaged: %v; want ErrCorrupt and not ErrNotFound", err)
		}
		if len(skipped) != 2 {
			t.Fatalf("skipped %v, want 2", skipped)
		}
	})
}

func TestReadStateVerifies(t *testing.T) {
	ctx := context.Background()
	s := checkpoint.NewStorage(checkpoint.BlobBucket(memblob.OpenBucket(nil)), "mem")
	defer s.Close()
	cp := writeCheckpoint(t, s, 3)
	ref := cp.States[0].Blobs[0]

	bad := ref
	bad.CRC ^= 1
	if _, err := s.ReadState(ctx, 3, bad); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("wrong CRC in ref: %v", err)
	}
	bad = ref
	bad.Size++
	if _, err := s.ReadState(ctx, 3, bad); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("wrong size in ref: %v", err)
	}
	if _, err := s.ReadState(ctx, 4, ref); !errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("blob of a checkpoint that does not exist: %v", err)
	}
	bad = ref
	bad.Key = "../chk-2/x"
	if _, err := s.ReadState(ctx, 3, bad); err == nil {
		t.Fatal("a key leaving the checkpoint directory was read")
	}
	if _, err := s.ReadCheckpoint(ctx, 9); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("ReadCheckpoint of a missing id: %v, want ErrNotFound", err)
	}
}

func TestCommitMetadataChecks(t *testing.T) {
	ctx := context.Background()
	s := checkpoint.NewStorage(checkpoint.BlobBucket(memblob.OpenBucket(nil)), "mem")
	defer s.Close()
	a := att(0, 0, 0)
	ref, err := s.WriteState(ctx, 1, a, "", []byte("abc"))
	if err != nil {
		t.Fatal(err)
	}
	cp := &checkpoint.CompletedCheckpoint{
		ID:       1,
		Vertices: []checkpoint.Vertex{{ID: 0, Name: "gen", Parallelism: 1}},
		States:   []checkpoint.StateHandle{{Attempt: a, Blobs: []checkpoint.BlobRef{ref, {Key: "v0-0-a0-other", Size: 30, CRC: 1}}}},
	}
	err = s.CommitMetadata(ctx, cp)
	var ce *checkpoint.CorruptError
	if !errors.As(err, &ce) || ce.Problem != checkpoint.ProblemMissingBlob {
		t.Fatalf("commit with a blob never written: %v", err)
	}
	cp.States[0].Blobs[1] = checkpoint.BlobRef{Key: ref.Key, Size: ref.Size + 1, CRC: ref.CRC}
	if err := s.CommitMetadata(ctx, cp); !errors.As(err, &ce) || ce.Problem != checkpoint.ProblemSizeMismatch {
		t.Fatalf("commit with a wrong size: %v", err)
	}
	for name, edit := range map[string]func(*checkpoint.CompletedCheckpoint){
		"zero id":          func(cp *checkpoint.CompletedCheckpoint) { cp.ID = 0 },
		"missing subtask":  func(cp *checkpoint.CompletedCheckpoint) { cp.Vertices[0].Parallelism = 2 },
		"metadata as blob": func(cp *checkpoint.CompletedCheckpoint) { cp.States[0].Blobs[0].Key = "_metadata" },
		"nested key":       func(cp *checkpoint.CompletedCheckpoint) { cp.States[0].Blobs[0].Key = "a/b" },
		"unnamed vertex":   func(cp *checkpoint.CompletedCheckpoint) { cp.Vertices[0].Name = "" },
	} {
		c := *cp
		c.Vertices = slices.Clone(cp.Vertices)
		c.States = []checkpoint.StateHandle{{Attempt: a, Blobs: []checkpoint.BlobRef{ref}}}
		edit(&c)
		if err := s.CommitMetadata(ctx, &c); err == nil {
			t.Errorf("%s: committed", name)
		}
	}
	if ids, _ := s.IDs(ctx); len(ids) != 1 {
		t.Fatalf("ids %v", ids)
	}
	if _, _, err := s.Latest(ctx); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("a refused commit left a checkpoint: %v", err)
	}
}

func TestRetain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		b, dir := be.open(t)
		s := checkpoint.NewStorage(b, be.name)
		defer s.Close()
		if _, err := s.Retain(ctx, 0); err == nil {
			t.Fatal("Retain(0) accepted")
		}
		// 1 is incomplete (aborted), 2..5 committed, 6 in progress.
		if _, err := s.WriteState(ctx, 1, att(0, 0, 0), "", []byte("aborted")); err != nil {
			t.Fatal(err)
		}
		for id := int64(2); id <= 5; id++ {
			writeCheckpoint(t, s, id)
		}
		if _, err := s.WriteState(ctx, 6, att(0, 0, 0), "", []byte("in progress")); err != nil {
			t.Fatal(err)
		}
		// With fewer committed than retained, only the partial directory older than the newest committed
		// one goes.
		if deleted, err := s.Retain(ctx, 5); err != nil || !slices.Equal(deleted, []int64{1}) {
			t.Fatalf("Retain(5) with 4 committed deleted %v, %v; want [1]", deleted, err)
		}
		deleted, err := s.Retain(ctx, 2)
		if err != nil || !slices.Equal(deleted, []int64{2, 3}) {
			t.Fatalf("Retain(2) deleted %v, %v; want [2 3]", deleted, err)
		}
		ids, err := s.IDs(ctx)
		if err != nil || !slices.Equal(ids, []int64{4, 5, 6}) {
			t.Fatalf("ids after Retain(2): %v, %v", ids, err)
		}
		if dir != "" {
			for _, gone := range []string{"chk-1", "chk-2", "chk-3"} {
				if _, err := os.Stat(filepath.Join(dir, gone)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("directory %s left behind: %v", gone, err)
				}
			}
		}
		if err := s.Discard(ctx, 6); err != nil {
			t.Fatal(err)
		}
		if err := s.Discard(ctx, 66); err != nil {
			t.Fatalf("discarding nothing: %v", err)
		}
		if cp, _, err := s.Latest(ctx); err != nil || cp.ID != 5 {
			t.Fatalf("Latest after retention: %v", err)
		}
		if id, _ := s.NextID(ctx); id != 6 {
			t.Fatalf("NextID %d, want 6", id)
		}
	})
}

func TestSavepointRoundTrip(t *testing.T) {
	ctx := context.Background()
	base := filepath.Join(t.TempDir(), "checkpoints")
	s, err := checkpoint.Open(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cp := writeCheckpoint(t, s, 7)

	dir := filepath.Join(t.TempDir(), "savepoints", "sp-1")
	if err := s.WriteSavepoint(ctx, dir, cp); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteSavepoint(ctx, dir, cp); !errors.Is(err, checkpoint.ErrExists) {
		t.Fatalf("second savepoint into the same directory: %v, want ErrExists", err)
	}
	// Self-contained: the checkpoint storage can go away.
	if err := s.Discard(ctx, 7); err != nil {
		t.Fatal(err)
	}
	sp, err := checkpoint.ReadSavepoint(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if !reflect.DeepEqual(sp.Checkpoint, cp) {
		t.Fatalf("savepoint holds\n%+v\nwant\n%+v", sp.Checkpoint, cp)
	}
	checkStates(t, sp, sp.Checkpoint)

	// A retained checkpoint directory reads like a savepoint.
	writeCheckpoint(t, s, 8)
	sp8, err := checkpoint.ReadSavepoint(ctx, filepath.Join(base, "chk-8"))
	if err != nil {
		t.Fatal(err)
	}
	checkStates(t, sp8, sp8.Checkpoint)
	sp8.Close()

	// No savepoint there: a clean ErrNotFound, and nothing created.
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := checkpoint.ReadSavepoint(ctx, missing); !errors.Is(err, checkpoint.ErrNotFound) || errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("missing savepoint: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadSavepoint created %s", missing)
	}
	empty := t.TempDir()
	if _, err := checkpoint.ReadSavepoint(ctx, empty); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("empty savepoint directory: %v", err)
	}

	// Damage is detected on read.
	blob := filepath.Join(dir, cp.States[0].Blobs[0].Key)
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0xff
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.ReadSavepoint(ctx, dir); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("damaged savepoint: %v", err)
	}
}

func TestSavepointOfDamagedCheckpointFails(t *testing.T) {
	ctx := context.Background()
	b := checkpoint.BlobBucket(memblob.OpenBucket(nil))
	s := checkpoint.NewStorage(b, "mem")
	defer s.Close()
	cp := writeCheckpoint(t, s, 1)
	data := readAll(t, b, "chk-1/v0-0-a0-state")
	data[17] ^= 2
	put(t, b, "chk-1/v0-0-a0-state", data)
	dst := checkpoint.BlobBucket(memblob.OpenBucket(nil))
	defer dst.Close()
	if err := s.WriteSavepointTo(ctx, dst, cp); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("savepoint of a damaged checkpoint: %v", err)
	}
	if _, err := checkpoint.ReadSavepointFrom(ctx, dst, "mem"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("a failed savepoint left metadata behind: %v", err)
	}
}

func TestInjectedFaults(t *testing.T) {
	ctx := context.Background()
	eb := errorbucket.Wrap(checkpoint.BlobBucket(memblob.OpenBucket(nil)))
	s := checkpoint.NewStorage(eb, "mem://faulty")
	defer s.Close()
	writeCheckpoint(t, s, 1)

	// A failing state write names the checkpoint and the attempt, and wraps the cause.
	diskFull := errors.New("no space left on device")
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: "chk-2/", Err: diskFull, Times: 1})
	_, err := s.WriteState(ctx, 2, att(0, 1, 3), "", []byte("x"))
	if !errors.Is(err, diskFull) || !strings.Contains(err.Error(), "checkpoint 2") || !strings.Contains(err.Error(), "v0[1]#3") {
		t.Fatalf("failed write: %v", err)
	}

	// A failing metadata write leaves no committed checkpoint.
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: "chk-2/_metadata", Times: 1})
	_, err = commitQuietly(s, 2)
	if !errors.Is(err, errorbucket.ErrInjected) || !strings.Contains(err.Error(), "checkpoint 2") {
		t.Fatalf("failed commit: %v", err)
	}
	if cp, _, err := s.Latest(ctx); err != nil || cp.ID != 1 {
		t.Fatalf("Latest after a failed commit: %v", err)
	}

	// A torn metadata write (a crash halfway on a store without atomic writes) is detected and skipped.
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: "chk-3/_metadata", Times: 1, Torn: true})
	if _, err := commitQuietly(s, 3); !errors.Is(err, errorbucket.ErrInjected) {
		t.Fatalf("torn commit: %v", err)
	}
	cp, skipped, err := s.Latest(ctx)
	if err != nil || cp.ID != 1 || len(skipped) != 2 || !errors.Is(skipped[0].Err, checkpoint.ErrCorrupt) {
		t.Fatalf("Latest after a torn commit: %v, skipped %v", err, skipped)
	}

	// An unreachable store is not corruption: Latest stops instead of falling back.
	unreachable := errors.New("connection refused")
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpGet, KeyContains: "chk-1/", Err: unreachable, Times: 1})
	_, _, err = s.Latest(ctx)
	if !errors.Is(err, unreachable) || errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Latest with a failing read: %v", err)
	}
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpList, Err: unreachable, Times: 1})
	if _, _, err = s.Latest(ctx); !errors.Is(err, unreachable) {
		t.Fatalf("Latest with a failing list: %v", err)
	}
	if eb.Hits() != 5 {
		t.Fatalf("%d faults hit, want 5", eb.Hits())
	}
	if cp, _, err := s.Latest(ctx); err != nil || cp.ID != 1 {
		t.Fatalf("Latest once the faults are spent: %v", err)
	}

	// Retention that fails halfway leaves incomplete, not damaged, checkpoints.
	writeCheckpoint(t, s, 4)
	writeCheckpoint(t, s, 5)
	eb.Inject(errorbucket.Fault{Ops: errorbucket.OpDelete, KeyContains: "chk-1/v"})
	if _, err := s.Retain(ctx, 1); !errors.Is(err, errorbucket.ErrInjected) {
		t.Fatalf("failing retention: %v", err)
	}
	eb.Clear()
	if _, err := s.ReadCheckpoint(ctx, 1); !errors.Is(err, checkpoint.ErrIncomplete) {
		t.Fatalf("half-deleted checkpoint: %v, want ErrIncomplete", err)
	}
	if _, err := s.Retain(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if ids, _ := s.IDs(ctx); !slices.Equal(ids, []int64{5}) {
		t.Fatalf("ids %v after retention, want [5]", ids)
	}
}

// commitQuietly is writeCheckpoint returning the commit error instead of failing the test.
func commitQuietly(s *checkpoint.Storage, id int64) (*checkpoint.CompletedCheckpoint, error) {
	ctx := context.Background()
	a := att(0, 0, 0)
	ref, err := s.WriteState(ctx, id, a, "", stateOf(id, a))
	if err != nil {
		return nil, err
	}
	cp := &checkpoint.CompletedCheckpoint{
		ID:       id,
		Vertices: []checkpoint.Vertex{{ID: 0, Name: "gen", Parallelism: 2}, {ID: 1, Name: "sink", Parallelism: 1}},
		States: []checkpoint.StateHandle{
			{Attempt: a, Blobs: []checkpoint.BlobRef{ref}},
			{Attempt: att(0, 1, 0), Inline: []byte("x")},
			{Attempt: att(1, 0, 0), Finished: true},
		},
	}
	return cp, s.CommitMetadata(ctx, cp)
}

func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	s, err := checkpoint.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 16
	cp := &checkpoint.CompletedCheckpoint{ID: 1, Vertices: []checkpoint.Vertex{{ID: 3, Name: "op", Parallelism: n}}}
	cp.States = make([]checkpoint.StateHandle, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			a := att(3, int32(i), 0)
			ref, err := s.WriteState(ctx, 1, a, "", stateOf(1, a))
			cp.States[i] = checkpoint.StateHandle{Attempt: a, Blobs: []checkpoint.BlobRef{ref, ref}}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitMetadata(ctx, cp); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Latest(ctx)
	if err != nil || len(got.States) != n {
		t.Fatalf("Latest: %v", err)
	}
}

func TestOpenLocations(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, loc := range []string{dir + "/a", "file://" + dir + "/b", "mem://", "mem://bucket/jobs/job-1"} {
		s, err := checkpoint.Open(ctx, loc)
		if err != nil {
			t.Fatalf("Open(%q): %v", loc, err)
		}
		writeCheckpoint(t, s, 1)
		if cp, _, err := s.Latest(ctx); err != nil || cp.ID != 1 {
			t.Fatalf("%s: Latest: %v", loc, err)
		}
		s.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "b", "chk-1", "_metadata")); err != nil {
		t.Fatalf("file URL did not write under its path: %v", err)
	}
	for _, loc := range []string{"", "file://otherhost/x", "file:///x?metadata=skip", "nosuchscheme://x", "mem://b/x?prefix=y/"} {
		if _, err := checkpoint.Open(ctx, loc); err == nil {
			t.Errorf("Open(%q) succeeded", loc)
		}
	}
}

// TestOpenRefusesFileURLWithoutDirectory: a file URL that names no directory is refused, by every way in,
// and nothing is written into the current directory.
func TestOpenRefusesFileURLWithoutDirectory(t *testing.T) {
	ctx := context.Background()
	cwd := t.TempDir()
	t.Chdir(cwd)
	open := map[string]func(string) error{
		"Open":         func(loc string) error { s, err := checkpoint.Open(ctx, loc); closeIf(s, err); return err },
		"OpenExisting": func(loc string) error { s, err := checkpoint.OpenExisting(ctx, loc); closeIf(s, err); return err },
		"OpenBucket": func(loc string) error {
			b, err := checkpoint.OpenBucket(ctx, loc)
			if err == nil {
				b.Close()
			}
			return err
		},
	}
	for _, loc := range []string{"file://", "file://localhost"} {
		for name, f := range open {
			err := f(loc)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("checkpoint location %q names no directory", loc)) {
				t.Errorf("%s(%q): %v", name, loc, err)
			}
		}
	}
	if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
		t.Fatalf("the current directory got %v", entries)
	}
}

func closeIf(s *checkpoint.Storage, err error) {
	if err == nil {
		s.Close()
	}
}

// TestOpenExistingDoesNotCreate: reading a location (OpenExisting, ReadSavepoint) never creates a local
// directory; a missing one is ErrNotFound, named in the error. Open, which writes, creates it.
func TestOpenExistingDoesNotCreate(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	for _, tc := range []struct {
		name string
		loc  func(dir string) string
	}{
		{"path", func(dir string) string { return dir }},
		{"file URL", func(dir string) string { return "file://" + dir }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(root, tc.name, "nosuch")
			_, err := checkpoint.OpenExisting(ctx, tc.loc(dir))
			if !errors.Is(err, checkpoint.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("directory %q does not exist", dir)) {
				t.Fatalf("OpenExisting: %v", err)
			}
			if _, err := checkpoint.ReadSavepoint(ctx, tc.loc(dir)); !errors.Is(err, checkpoint.ErrNotFound) || !strings.Contains(err.Error(), "does not exist") {
				t.Fatalf("ReadSavepoint: %v", err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s was created: %v", dir, err)
			}
			s, err := checkpoint.Open(ctx, tc.loc(dir))
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			s, err = checkpoint.OpenExisting(ctx, tc.loc(dir))
			if err != nil {
				t.Fatalf("OpenExisting after Open: %v", err)
			}
			s.Close()
		})
	}
}

// TestCheckSavepointTarget: a savepoint target that WriteSavepoint could not use is refused up front, and
// a usable one is left as it was found (apart from being created).
func TestCheckSavepointTarget(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	file := filepath.Join(root, "plain-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	taken := filepath.Join(root, "taken")
	src, err := checkpoint.Open(ctx, filepath.Join(root, "storage"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.WriteSavepoint(ctx, taken, writeCheckpoint(t, src, 1)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		want string // error substring; empty: usable
	}{
		{filepath.Join(root, "new", "sp"), ""},
		{"file://" + filepath.Join(root, "new2"), ""},
		{"mem://", ""},
		{taken, "already holds a savepoint"},
		{filepath.Join(file, "sp"), "plain-file"},
		{"file://", "names no directory"},
	} {
		err := checkpoint.CheckSavepointTarget(ctx, tc.dir)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.dir, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.dir, err, tc.want)
		}
	}
	if !errors.Is(checkpoint.CheckSavepointTarget(ctx, taken), checkpoint.ErrExists) {
		t.Error("a taken target is not ErrExists")
	}
	// The probe is gone; WriteSavepoint then works.
	dir := filepath.Join(root, "new", "sp")
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("%s after the check: %v %v", dir, entries, err)
	}
	if err := src.WriteSavepoint(ctx, dir, writeCheckpoint(t, src, 2)); err != nil {
		t.Fatal(err)
	}
}

// TestLatestForVerifiesOnlyWhatIsRestored pins that a restart of some subtasks verifies their state and
// no other: damage in the state of a subtask that keeps running does not send the restart to an older
// checkpoint, damage in a restarted subtask's state does.
func TestLatestForVerifiesOnlyWhatIsRestored(t *testing.T) {
	ctx := context.Background()
	b, _ := backends[0].open(t)
	s := checkpoint.NewStorage(b, backends[0].name)
	defer s.Close()
	first := writeCheckpoint(t, s, 1)
	second := writeCheckpoint(t, s, 2)
	data := readAll(t, b, "chk-2/v0-0-a0-state") // the state of gen[0]
	put(t, b, "chk-2/v0-0-a0-state", data[:len(data)-7])
	for _, tc := range []struct {
		name      string
		restarted []ident.Subtask
		want      *checkpoint.CompletedCheckpoint
	}{
		{"sink only", []ident.Subtask{{Vertex: 1, Index: 0}}, second},
		{"gen[1] (inline state) and sink", []ident.Subtask{{Vertex: 0, Index: 1}, {Vertex: 1, Index: 0}}, second},
		{"gen[0]", []ident.Subtask{{Vertex: 0, Index: 0}}, first},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, skipped, err := s.LatestFor(ctx, func(st ident.Subtask) bool { return slices.Contains(tc.restarted, st) })
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tc.want.ID {
				t.Fatalf("restored checkpoint %d, want %d (skipped %v)", got.ID, tc.want.ID, skipped)
			}
		})
	}
	if got, _, err := s.Latest(ctx); err != nil || got.ID != first.ID {
		t.Fatalf("Latest (all subtasks): %v, %v; want checkpoint 1", got, err)
	}
}

// TestListWhileWriting lists a local directory while blobs are written into it: each write's temporary
// file, beside its target, is renamed away between the listing's read of the directory and its look at
// the file. A listing must not fail because of that (a commit listing shared/ while tasks write the next
// checkpoint's shared blobs), and must show every blob written before it started. The writers rewrite a
// few keys over and over, so the directory stays small while renames keep happening.
func TestListWhileWriting(t *testing.T) {
	ctx := context.Background()
	b, err := checkpoint.OpenBucket(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const writers, keys = 2, 8
	var written [writers * keys]atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i = (i + 1) % keys {
				select {
				case <-stop:
					return
				default:
				}
				if err := b.Put(ctx, fmt.Sprintf("shared/w%d-%d", w, i), make([]byte, 256)); err != nil {
					t.Error(err)
					return
				}
				written[w*keys+i].Store(true)
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	for range 2000 {
		before := 0
		for i := range written {
			if written[i].Load() {
				before++
			}
		}
		entries, err := b.List(ctx, "shared/")
		if err != nil {
			t.Fatalf("list while writing: %v", err)
		}
		if len(entries) < before {
			t.Fatalf("listed %d blobs, %d were written before the listing", len(entries), before)
		}
	}
}

// TestLocalListing lists a local directory as an object store would: a write's temporary file beside its
// target is no key, a directory without a file is no prefix, and the keys come sorted with their sizes.
func TestLocalListing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for path, size := range map[string]int{"shared/ck3-a": 5, "shared/ck3-b.18c2f0a9e1.tmp": 7, "chk-3/_metadata": 9, "chk-3/v1-0": 11, "chk-3/deep/x": 1, "top": 2} {
		p := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, empty := range []string{"chk-9", "chk-4/sub"} {
		if err := os.MkdirAll(filepath.Join(dir, empty), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := checkpoint.OpenBucket(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct{ prefix, want string }{
		{"", "chk-3/ shared/ top:2"},
		{"chk-", "chk-3/"},
		{"chk-3/", "chk-3/_metadata:9 chk-3/deep/ chk-3/v1-0:11"},
		{"shared/", "shared/ck3-a:5"},
		{"shared/ck3-b", ""},
		{"nothing/", ""},
	} {
		entries, err := b.List(ctx, tc.prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", tc.prefix, err)
		}
		var got []string
		for _, e := range entries {
			if e.Dir {
				got = append(got, e.Key)
			} else {
				got = append(got, fmt.Sprintf("%s:%d", e.Key, e.Size))
			}
		}
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, s, tc.want)
		}
	}
}

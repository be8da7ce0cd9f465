package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Savepoint is a completed checkpoint opened from a directory of its own: a savepoint written by
// WriteSavepoint, or a retained chk-<id>/ directory of checkpoint storage (same layout).
type Savepoint struct {
	// Checkpoint is the savepoint's metadata, verified together with every blob it lists.
	Checkpoint *CompletedCheckpoint
	b          Bucket
	// shared is the checkpoint storage whose shared/ holds the shared blobs of a retained incremental
	// checkpoint opened as a savepoint (nil for a savepoint, whose blobs are all its own).
	shared   Bucket
	location string
}

// ReadState reads and verifies one state blob of the savepoint.
func (sp *Savepoint) ReadState(ctx context.Context, ref BlobRef) ([]byte, error) {
	b := sp.b
	if ref.Shared && sp.shared != nil {
		b = sp.shared
	}
	_, payload, err := readBlob(ctx, b, "", ref)
	if err != nil {
		return nil, fmt.Errorf("savepoint %s: read state: %w", sp.location, err)
	}
	return payload, nil
}

// Close closes the savepoint's bucket.
func (sp *Savepoint) Close() error {
	err := sp.b.Close()
	if sp.shared != nil {
		err = errors.Join(err, sp.shared.Close())
	}
	return err
}

// WriteSavepoint copies completed checkpoint cp from s into dir (a path or URL, see OpenBucket), making a
// self-contained savepoint: every blob is read back and verified before it is copied, and _metadata is
// written last. The shared blobs of an incremental checkpoint are copied too, into the savepoint's own
// directory (its metadata lists them as its own blobs), so that a savepoint never refers to checkpoint
// storage. A directory that already holds a _metadata is not overwritten (ErrExists).
func (s *Storage) WriteSavepoint(ctx context.Context, dir string, cp *CompletedCheckpoint) error {
	dst, err := OpenBucket(ctx, dir)
	if err != nil {
		return fmt.Errorf("write savepoint of checkpoint %d: %w", cp.ID, err)
	}
	err = s.WriteSavepointTo(ctx, dst, cp)
	if cerr := dst.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("write savepoint of checkpoint %d to %s: close: %w", cp.ID, dir, cerr)
	}
	return err
}

// CheckSavepointTarget makes sure that WriteSavepoint into dir can succeed later: the location opens (a
// local directory is created, as WriteSavepoint would), holds no savepoint yet, and takes a write (a probe
// object is written and deleted again). A job that will write a savepoint when it stops runs this before it
// starts, so that a target it cannot use is reported at once instead of after the whole run.
func CheckSavepointTarget(ctx context.Context, dir string) error {
	b, err := OpenBucket(ctx, dir)
	if err != nil {
		return err
	}
	defer b.Close()
	r, _, err := b.Get(ctx, metadataKey)
	switch {
	case err == nil:
		r.Close()
		return fmt.Errorf("%s already holds a savepoint (a %s), which would not be overwritten: %w", dir, metadataKey, ErrExists)
	case !errors.Is(err, ErrNotFound):
		return fmt.Errorf("%s: %w", dir, err)
	}
	// A random name, so that two jobs checking the same target at once do not delete each other's probe.
	probe := fmt.Sprintf("_probe-%016x", rand.Uint64())
	if err := b.Put(ctx, probe, nil); err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	if err := b.Delete(ctx, probe); err != nil {
		return fmt.Errorf("%s: delete the probe object %s: %w", dir, probe, err)
	}
	return nil
}

// WriteSavepointTo is WriteSavepoint into an open bucket; dst stays open.
func (s *Storage) WriteSavepointTo(ctx context.Context, dst Bucket, cp *CompletedCheckpoint) error {
	own := *cp // the savepoint's metadata: every blob its own
	own.States = make([]StateHandle, len(cp.States))
	for i, h := range cp.States {
		h.Blobs = slices.Clone(h.Blobs)
		for j := range h.Blobs {
			h.Blobs[j].Shared = false
		}
		own.States[i] = h
	}
	meta, err := EncodeMetadata(&own)
	if err != nil {
		return fmt.Errorf("write savepoint: %w", err)
	}
	fail := func(err error) error { return fmt.Errorf("write savepoint of checkpoint %d: %w", cp.ID, err) }
	r, _, err := dst.Get(ctx, metadataKey)
	switch {
	case err == nil:
		r.Close()
		return fail(fmt.Errorf("target already holds a %s: %w", metadataKey, ErrExists))
	case !errors.Is(err, ErrNotFound):
		return fail(err)
	}
	src := checkpointDir(cp.ID)
	for _, h := range cp.States {
		for _, ref := range h.Blobs {
			obj, _, err := readBlob(ctx, s.b, src, ref)
			if err != nil {
				return fail(err)
			}
			if err := dst.Put(ctx, ref.Key, obj); err != nil {
				return fail(fmt.Errorf("write %s: %w", ref.Key, err))
			}
		}
	}
	if err := dst.Put(ctx, metadataKey, meta); err != nil {
		return fail(fmt.Errorf("write %s: %w", metadataKey, err))
	}
	return nil
}

// ReadSavepoint opens the savepoint in dir (a path or URL, see OpenBucket) and verifies its metadata and
// every blob. A directory without _metadata (or no directory) gives ErrNotFound; damage a *CorruptError.
// The caller closes the returned Savepoint.
func ReadSavepoint(ctx context.Context, dir string) (*Savepoint, error) {
	b, err := openBucket(ctx, dir, false)
	if err != nil {
		return nil, fmt.Errorf("read savepoint: %w", err)
	}
	sp, err := ReadSavepointFrom(ctx, b, dir)
	if err != nil {
		b.Close()
		return nil, err
	}
	return sp, nil
}

// ReadSavepointFrom is ReadSavepoint from an open bucket, which the returned Savepoint owns (on error the
// caller keeps it); location only names it in messages.
func ReadSavepointFrom(ctx context.Context, b Bucket, location string) (*Savepoint, error) {
	cp, err := readMetadata(ctx, b, "")
	if err != nil {
		return nil, fmt.Errorf("read savepoint %s: %w", location, err)
	}
	var shared Bucket
	if cp.HasShared() {
		// A retained incremental checkpoint, chk-<id>/ in checkpoint storage: its shared blobs are in the
		// storage's shared/, beside it.
		parent, ok := checkpointParent(location)
		if !ok {
			return nil, fmt.Errorf("read savepoint %s: %w", location, &CorruptError{Key: metadataKey, Problem: ProblemMissingBlob,
				Detail: "the metadata lists shared blobs of an incremental checkpoint, and this is not a chk-<id> directory of checkpoint storage"})
		}
		if shared, err = openBucket(ctx, parent, false); err != nil {
			return nil, fmt.Errorf("read savepoint %s: open the checkpoint storage of its shared blobs: %w", location, err)
		}
	}
	if _, err = loadShared(ctx, b, sharedOr(shared, b), "", cp.ID, nil); err != nil {
		if shared != nil {
			shared.Close()
		}
		return nil, fmt.Errorf("read savepoint %s: %w", location, err)
	}
	return &Savepoint{Checkpoint: cp, b: b, shared: shared, location: location}, nil
}

func sharedOr(shared, b Bucket) Bucket {
	if shared != nil {
		return shared
	}
	return b
}

// checkpointParent returns the location of the checkpoint storage that location, a chk-<id> directory in
// it, belongs to.
func checkpointParent(location string) (string, bool) {
	loc := strings.TrimSuffix(location, "/")
	i := strings.LastIndex(loc, "/")
	if i < 0 {
		return "", false
	}
	if _, ok := parseCheckpointDir(loc[i+1:] + "/"); !ok {
		return "", false
	}
	parent := loc[:i]
	if parent == "" {
		parent = "/"
	}
	return parent, true
}

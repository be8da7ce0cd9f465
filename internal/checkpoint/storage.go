package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/runnel-dev/runnel/internal/ident"
)

// Storage keeps the checkpoints of one job under one location: chk-<id>/ directories holding state blobs
// and, written last, _metadata. It is safe for concurrent use: tasks write state through it while the job
// master commits, restores and prunes.
type Storage struct {
	b        Bucket
	location string
}

// StateReader reads the state blobs of one checkpoint or savepoint, verifying each.
type StateReader interface {
	// ReadState returns the payload of the blob ref names, after checking its size and checksums.
	ReadState(ctx context.Context, ref BlobRef) ([]byte, error)
}

// SkippedCheckpoint is a checkpoint Latest passed over, and why.
type SkippedCheckpoint struct {
	ID int64
	// Err wraps ErrIncomplete (never committed: normal for one in progress or aborted), ErrCorrupt (a
	// *CorruptError naming the object and the problem) or ErrUnsupportedVersion.
	Err error
}

// Open opens the checkpoint storage at location (see OpenBucket for the forms it takes).
func Open(ctx context.Context, location string) (*Storage, error) {
	b, err := OpenBucket(ctx, location)
	if err != nil {
		return nil, err
	}
	return NewStorage(b, location), nil
}

// OpenExisting opens the checkpoint storage at location like Open, but never creates it: a local directory
// that does not exist is an error that names it and wraps ErrNotFound. Restoring opens storage this way, so
// that a mistyped directory is reported instead of created empty.
func OpenExisting(ctx context.Context, location string) (*Storage, error) {
	b, err := openBucket(ctx, location, false)
	if err != nil {
		return nil, err
	}
	return NewStorage(b, location), nil
}

// NewStorage returns a Storage on b; location only names it in messages. The Storage owns b.
func NewStorage(b Bucket, location string) *Storage { return &Storage{b: b, location: location} }

// Location returns the location the storage was opened with.
func (s *Storage) Location() string { return s.location }

// Close closes the underlying bucket.
func (s *Storage) Close() error { return s.b.Close() }

const dirPrefix = "chk-"

// sharedDir holds the shared blobs of incremental checkpoints, which several checkpoints may list.
const sharedDir = "shared/"

func checkpointDir(id int64) string { return dirPrefix + strconv.FormatInt(id, 10) + "/" }

// parseCheckpointDir returns the id of a "chk-<id>/" key; other keys (including "chk-007/") are not ours.
func parseCheckpointDir(key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, dirPrefix)
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, "/")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || id < 1 || strconv.FormatInt(id, 10) != rest {
		return 0, false
	}
	return id, true
}

// StateKey returns the key WriteState stores a blob under, relative to its checkpoint directory:
// "v<vertex>-<index>-a<attempt>-<name>".
func StateKey(from ident.Attempt, name string) string {
	return fmt.Sprintf("v%d-%d-a%d-%s", from.Vertex, from.Index, from.Number, name)
}

func validStateName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("state name %q: want 1 to 64 characters", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("state name %q: only letters, digits, '_' and '-' are allowed", name)
		}
	}
	return nil
}

// WriteState stores one state blob of attempt from for checkpoint id and returns the reference to put in
// the attempt's StateHandle. name distinguishes several blobs of one attempt ("keyed", "operator"); ""
// means "state". Writing the same name twice for one checkpoint replaces the first blob.
func (s *Storage) WriteState(ctx context.Context, id int64, from ident.Attempt, name string, data []byte) (BlobRef, error) {
	b := NewBlob(BlobMemory{b: make([]byte, 0, envelopeOverhead+len(data))})
	b.Write(data)
	return s.WriteBlob(ctx, id, from, name, b)
}

// WriteBlob is WriteState for a payload built in a Blob: the blob is sealed in place, without a copy of the
// payload. The blob's memory may be reused once WriteBlob returned.
func (s *Storage) WriteBlob(ctx context.Context, id int64, from ident.Attempt, name string, blob *Blob) (BlobRef, error) {
	if name == "" {
		name = "state"
	}
	if id < 1 {
		return BlobRef{}, fmt.Errorf("write state of %s: checkpoint id %d is not positive", from, id)
	}
	if err := validStateName(name); err != nil {
		return BlobRef{}, fmt.Errorf("checkpoint %d: write state of %s: %w", id, from, err)
	}
	key := StateKey(from, name)
	obj, sum := sealInPlace(magicState, blob)
	if err := s.b.Put(ctx, checkpointDir(id)+key, obj); err != nil {
		return BlobRef{}, fmt.Errorf("checkpoint %d: write state %q of %s to %s: %w", id, name, from, s.location, err)
	}
	return BlobRef{Key: key, Size: int64(len(obj)), CRC: sum}, nil
}

// SharedKey returns the key WriteSharedBlob stores a blob under, relative to shared/:
// "v<vertex>-<index>-a<attempt>-c<id>-<name>". The checkpoint id in it tells Retain which checkpoint wrote
// the blob.
func SharedKey(id int64, from ident.Attempt, name string) string {
	return fmt.Sprintf("v%d-%d-a%d-c%d-%s", from.Vertex, from.Index, from.Number, id, name)
}

// sharedCreator returns the checkpoint id in a SharedKey.
func sharedCreator(key string) (int64, bool) {
	parts := strings.SplitN(key, "-", 5)
	if len(parts) < 5 || !strings.HasPrefix(parts[3], "c") {
		return 0, false
	}
	id, err := strconv.ParseInt(parts[3][1:], 10, 64)
	return id, err == nil && id > 0
}

// WriteSharedBlob is WriteBlob for a blob of an incremental checkpoint: it is stored under shared/, so
// that later checkpoints can list it too, and the reference it returns is marked Shared. It stays until
// Retain finds no retained checkpoint that lists it.
func (s *Storage) WriteSharedBlob(ctx context.Context, id int64, from ident.Attempt, name string, blob *Blob) (BlobRef, error) {
	if name == "" {
		name = "state"
	}
	if id < 1 {
		return BlobRef{}, fmt.Errorf("write shared state of %s: checkpoint id %d is not positive", from, id)
	}
	if err := validStateName(name); err != nil {
		return BlobRef{}, fmt.Errorf("checkpoint %d: write shared state of %s: %w", id, from, err)
	}
	key := SharedKey(id, from, name)
	obj, sum := sealInPlace(magicState, blob)
	if err := s.b.Put(ctx, sharedDir+key, obj); err != nil {
		return BlobRef{}, fmt.Errorf("checkpoint %d: write shared state %q of %s to %s: %w", id, name, from, s.location, err)
	}
	return BlobRef{Key: key, Size: int64(len(obj)), CRC: sum, Shared: true}, nil
}

// ReadState reads and verifies one state blob of checkpoint id. Damage is a *CorruptError (a blob that is
// missing included); other errors come from the bucket.
func (s *Storage) ReadState(ctx context.Context, id int64, ref BlobRef) ([]byte, error) {
	_, payload, err := readBlob(ctx, s.b, checkpointDir(id), ref)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d: read state: %w", id, err)
	}
	return payload, nil
}

// Reader returns a StateReader for the blobs of checkpoint id.
func (s *Storage) Reader(id int64) StateReader { return checkpointReader{s: s, id: id} }

type checkpointReader struct {
	s  *Storage
	id int64
}

func (r checkpointReader) ReadState(ctx context.Context, ref BlobRef) ([]byte, error) {
	return r.s.ReadState(ctx, r.id, ref)
}

// readBlob reads the blob ref under prefix, checks it against ref and its own envelope, and returns the
// whole object and its payload.
func readBlob(ctx context.Context, b Bucket, prefix string, ref BlobRef) (obj, payload []byte, err error) {
	key := prefix + ref.Key
	if ref.Shared {
		key = sharedDir + ref.Key
	}
	if err := validBlobKey(ref.Key); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", key, err)
	}
	obj, err = readObject(ctx, b, key, ref.Size, ref.Size)
	if errors.Is(err, ErrNotFound) {
		return nil, nil, &CorruptError{Key: key, Problem: ProblemMissingBlob, Detail: "listed in metadata, not in storage"}
	}
	if err != nil {
		return nil, nil, err
	}
	payload, sum, err := open(key, magicState, obj)
	if err != nil {
		return nil, nil, err
	}
	if sum != ref.CRC {
		return nil, nil, &CorruptError{Key: key, Problem: ProblemBadChecksum,
			Detail: fmt.Sprintf("object's crc32c %08x, metadata says %08x", sum, ref.CRC)}
	}
	return obj, payload, nil
}

// readObject reads a whole object whose size must be within [minSize, maxSize]; the size is checked
// before anything is allocated. An absent object is ErrNotFound.
func readObject(ctx context.Context, b Bucket, key string, minSize, maxSize int64) ([]byte, error) {
	r, size, err := b.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	switch {
	case size < minSize:
		return nil, &CorruptError{Key: key, Problem: ProblemTruncated, Detail: fmt.Sprintf("%d bytes, want %d", size, minSize)}
	case size > maxSize:
		p := ProblemSizeMismatch
		if minSize != maxSize {
			p = ProblemTooLarge
		}
		return nil, &CorruptError{Key: key, Problem: p, Detail: fmt.Sprintf("%d bytes, want at most %d", size, maxSize)}
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, &CorruptError{Key: key, Problem: ProblemTruncated, Detail: "object ended early while reading"}
		}
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return buf, nil
}

// readMetadata reads and decodes prefix+_metadata. An absent object is ErrNotFound.
func readMetadata(ctx context.Context, b Bucket, prefix string) (*CompletedCheckpoint, error) {
	key := prefix + metadataKey
	obj, err := readObject(ctx, b, key, 0, MaxMetadataBytes)
	if err != nil {
		return nil, err
	}
	return DecodeMetadata(key, obj)
}

// loadFor reads the metadata under prefix (wantID 0 accepts any id) and verifies the blobs of the
// subtasks for which only returns true (nil: all).
func loadFor(ctx context.Context, b Bucket, prefix string, wantID int64, only func(ident.Subtask) bool) (*CompletedCheckpoint, error) {
	return loadShared(ctx, b, b, prefix, wantID, only)
}

// loadShared is loadFor reading shared blobs from shared (under shared/).
func loadShared(ctx context.Context, b, shared Bucket, prefix string, wantID int64, only func(ident.Subtask) bool) (*CompletedCheckpoint, error) {
	cp, err := readMetadata(ctx, b, prefix)
	if err != nil {
		return nil, err
	}
	if wantID != 0 && cp.ID != wantID {
		return nil, &CorruptError{Key: prefix + metadataKey, Problem: ProblemBadPayload,
			Detail: fmt.Sprintf("metadata is for checkpoint %d", cp.ID)}
	}
	for _, h := range cp.States {
		if only != nil && !only(h.Attempt.Subtask) {
			continue
		}
		for _, ref := range h.Blobs {
			from := b
			if ref.Shared {
				from = shared
			}
			if _, _, err := readBlob(ctx, from, prefix, ref); err != nil {
				return nil, err
			}
		}
	}
	return cp, nil
}

// CommitMetadata completes checkpoint cp in storage: it checks cp, checks that every blob it lists is
// stored with the listed size, and writes chk-<id>/_metadata. Until this returns nil the checkpoint does
// not exist for a restore. Committing a checkpoint twice fails with ErrExists.
func (s *Storage) CommitMetadata(ctx context.Context, cp *CompletedCheckpoint) error {
	obj, err := EncodeMetadata(cp)
	if err != nil {
		return fmt.Errorf("commit checkpoint: %w", err)
	}
	dir := checkpointDir(cp.ID)
	if err := checkRoundTrip(dir+metadataKey, obj); err != nil {
		return fmt.Errorf("commit checkpoint %d: %w", cp.ID, err)
	}
	if err := checkBlobsPresent(ctx, s.b, dir, cp); err != nil {
		return fmt.Errorf("commit checkpoint %d to %s: %w", cp.ID, s.location, err)
	}
	if err := s.b.Put(ctx, dir+metadataKey, obj); err != nil {
		return fmt.Errorf("commit checkpoint %d to %s: write %s: %w", cp.ID, s.location, metadataKey, err)
	}
	return nil
}

// checkRoundTrip decodes what is about to be written and re-encodes it: the bytes must not change.
func checkRoundTrip(key string, obj []byte) error {
	back, err := DecodeMetadata(key, obj)
	if err != nil {
		return fmt.Errorf("encoded metadata does not decode: %w", err)
	}
	again, err := EncodeMetadata(back)
	if err != nil || !bytes.Equal(again, obj) {
		return fmt.Errorf("encoded metadata does not survive a round trip (%v)", err)
	}
	return nil
}

// checkBlobsPresent lists dir and checks that it has no metadata yet and holds every blob of cp with the
// listed size.
func checkBlobsPresent(ctx context.Context, b Bucket, dir string, cp *CompletedCheckpoint) error {
	entries, err := b.List(ctx, dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	sizes := make(map[string]int64, len(entries))
	for _, e := range entries {
		sizes[strings.TrimPrefix(e.Key, dir)] = e.Size
	}
	if _, ok := sizes[metadataKey]; ok {
		return fmt.Errorf("%s%s: %w", dir, metadataKey, ErrExists)
	}
	var shared map[string]int64 // listed once, if some blob is shared
	for _, h := range cp.States {
		for _, ref := range h.Blobs {
			in, sz := dir, sizes
			if ref.Shared {
				if shared == nil {
					entries, err := b.List(ctx, sharedDir)
					if err != nil {
						return fmt.Errorf("list %s: %w", sharedDir, err)
					}
					shared = make(map[string]int64, len(entries))
					for _, e := range entries {
						shared[strings.TrimPrefix(e.Key, sharedDir)] = e.Size
					}
				}
				in, sz = sharedDir, shared
			}
			size, ok := sz[ref.Key]
			if !ok {
				return &CorruptError{Key: in + ref.Key, Problem: ProblemMissingBlob,
					Detail: fmt.Sprintf("state of %s not in storage", h.Attempt)}
			}
			if size != ref.Size {
				return &CorruptError{Key: in + ref.Key, Problem: ProblemSizeMismatch,
					Detail: fmt.Sprintf("stored %d bytes, handle of %s says %d", size, h.Attempt, ref.Size)}
			}
		}
	}
	return nil
}

// IDs returns the ids of all checkpoint directories, committed or not, in ascending order.
func (s *Storage) IDs(ctx context.Context) ([]int64, error) {
	entries, err := s.b.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", s.location, err)
	}
	var ids []int64
	for _, e := range entries {
		if !e.Dir {
			continue
		}
		if id, ok := parseCheckpointDir(e.Key); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// NextID returns the id a new coordinator for this location should start from: one above every
// checkpoint directory present, committed or not, so a new run never writes into an old run's directory.
func (s *Storage) NextID(ctx context.Context) (int64, error) {
	ids, err := s.IDs(ctx)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 1, nil
	}
	return ids[len(ids)-1] + 1, nil
}

// ReadCheckpoint reads the metadata of checkpoint id and verifies it and every blob it lists (each blob is
// read in full). It returns ErrNotFound if there is no chk-<id>/ directory, ErrIncomplete if the directory
// has no _metadata, and a *CorruptError or *VersionError for damage.
func (s *Storage) ReadCheckpoint(ctx context.Context, id int64) (*CompletedCheckpoint, error) {
	return s.readCheckpointFor(ctx, id, nil)
}

func (s *Storage) readCheckpointFor(ctx context.Context, id int64, only func(ident.Subtask) bool) (*CompletedCheckpoint, error) {
	dir := checkpointDir(id)
	cp, err := loadFor(ctx, s.b, dir, id, only)
	if errors.Is(err, ErrNotFound) {
		entries, lerr := s.b.List(ctx, dir)
		if lerr != nil {
			return nil, fmt.Errorf("checkpoint %d: list %s: %w", id, dir, lerr)
		}
		if len(entries) == 0 {
			return nil, fmt.Errorf("checkpoint %d in %s: %w", id, s.location, ErrNotFound)
		}
		return nil, fmt.Errorf("checkpoint %d in %s: %w", id, s.location, ErrIncomplete)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d in %s: %w", id, s.location, err)
	}
	return cp, nil
}

// Latest returns the newest valid checkpoint. It walks the checkpoint directories from the newest down,
// fully verifying each committed one (metadata and every blob, read in full), and returns the first that
// passes, together with every checkpoint it passed over on the way (incomplete ones included) so the
// caller can report them.
//
// Errors: ErrNotFound (wrapped) when no checkpoint was ever committed — start the job fresh; an error
// wrapping ErrCorrupt and/or ErrUnsupportedVersion (an errors.Join of the skipped checkpoints' errors) when
// checkpoints were committed but none is valid — the job must not silently start from scratch; any other
// error (bucket unreachable, ctx done) stops the walk at once rather than falling back to an older
// checkpoint.
func (s *Storage) Latest(ctx context.Context) (*CompletedCheckpoint, []SkippedCheckpoint, error) {
	return s.LatestFor(ctx, nil)
}

// LatestFor is Latest for a restart of some subtasks: of each checkpoint it verifies the metadata and the
// blobs of the subtasks for which only returns true (nil: all), the state the restart will read. A failover
// that restarts a few subtasks then reads a few subtasks' state, not the whole job's.
func (s *Storage) LatestFor(ctx context.Context, only func(ident.Subtask) bool) (*CompletedCheckpoint, []SkippedCheckpoint, error) {
	ids, err := s.IDs(ctx)
	if err != nil {
		return nil, nil, err
	}
	var skipped []SkippedCheckpoint
	var damaged []error
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		cp, err := s.readCheckpointFor(ctx, id, only)
		switch {
		case err == nil:
			return cp, skipped, nil
		case errors.Is(err, ErrIncomplete), errors.Is(err, ErrNotFound):
			// ErrNotFound: the directory vanished since the listing (retention); nothing to restore there.
			skipped = append(skipped, SkippedCheckpoint{ID: id, Err: err})
		case errors.Is(err, ErrCorrupt), errors.Is(err, ErrUnsupportedVersion):
			skipped = append(skipped, SkippedCheckpoint{ID: id, Err: err})
			damaged = append(damaged, err)
		default:
			return nil, skipped, fmt.Errorf("find latest checkpoint in %s: %w", s.location, err)
		}
	}
	if len(damaged) == 0 {
		return nil, skipped, fmt.Errorf("no completed checkpoint in %s: %w", s.location, ErrNotFound)
	}
	return nil, skipped, fmt.Errorf("none of the %d committed checkpoints in %s is valid: %w",
		len(damaged), s.location, errors.Join(damaged...))
}

// Retain keeps the newest n committed checkpoints and deletes every checkpoint directory older than the
// oldest of them, committed or not, and every partial directory (no _metadata: aborted, failed, or cut
// short) older than the newest committed one. Directories newer than the newest committed checkpoint (in
// progress) are kept. It returns the ids deleted. Committed means "has _metadata": Retain does not verify
// data, so keep n at least 2 if a damaged newest checkpoint should have a fallback.
//
// A partial directory older than the newest committed checkpoint belongs to a checkpoint that can no
// longer complete: the job master runs Retain after a completion, in the order of its storage ops, so
// every older checkpoint of the job has been committed or aborted (a completion subsumes the older ones
// in progress). Its data may still be written to by a task that had not yet heard of the abort; such a
// late blob is deleted by the next Retain, or by the sweep when the job ends (RemovePartialBetween).
//
// It then deletes the shared blobs (incremental checkpoints) that no kept checkpoint lists and that were
// written for a checkpoint no newer than the newest committed one: the blobs of checkpoints that were
// retained before, and of aborted ones that no later checkpoint builds on. A shared blob written for a
// newer checkpoint may belong to one in progress and is kept. This is safe because a task builds a
// delta only on its own previous blob, written before, and on one only while its writes succeed in
// order: once checkpoint N completed, what any task writes later lists N's blobs of that task and blobs
// of checkpoints after N, and N is kept. If the metadata of a kept checkpoint cannot be read, no shared
// blob is deleted (nothing could tell which it lists).
func (s *Storage) Retain(ctx context.Context, n int) ([]int64, error) {
	if n < 1 {
		return nil, fmt.Errorf("retain %d checkpoints: keep at least 1", n)
	}
	ids, err := s.dirIDs(ctx)
	if err != nil {
		return nil, err
	}
	var keptIDs []int64 // newest first
	var doomed []int64
	i := len(ids) - 1
	for ; i >= 0 && len(keptIDs) < n; i-- {
		ok, err := s.committed(ctx, ids[i])
		if err != nil {
			return nil, err
		}
		switch {
		case ok:
			keptIDs = append(keptIDs, ids[i])
		case len(keptIDs) > 0:
			doomed = append(doomed, ids[i]) // partial, older than the newest committed
		}
	}
	if len(keptIDs) == n {
		doomed = append(doomed, ids[:i+1]...) // older than the oldest kept
	}
	slices.Sort(doomed)
	deleted, errs := s.deleteDirs(ctx, doomed)
	if len(keptIDs) > 0 {
		newest := keptIDs[0]
		if err := s.pruneShared(ctx, keptIDs, func(creator int64) bool { return creator <= newest }); err != nil {
			errs = append(errs, err)
		}
	}
	return deleted, errors.Join(errs...)
}

// RemovePartial deletes the partial checkpoint directories (no _metadata: aborted, failed, or cut short by
// a crash or a full disk, empty ones included) that are older than the newest committed checkpoint, and
// returns their ids. A job runs it when it starts on the storage, before it triggers a checkpoint of its
// own. It leaves alone every committed checkpoint (the one being restored among them) and everything newer
// than the newest committed one, which another writer may still have in progress; with no committed
// checkpoint it deletes nothing. Older partial directories are safe to delete: a writer commits its
// checkpoints in id order and gives up the older ones in progress when one completes, so none of them can
// complete any more (a storage location serves one job at a time: two jobs would write the same ids).
func (s *Storage) RemovePartial(ctx context.Context) ([]int64, error) {
	ids, err := s.dirIDs(ctx)
	if err != nil {
		return nil, err
	}
	var newest int64
	var doomed []int64
	for i := len(ids) - 1; i >= 0; i-- {
		ok, err := s.committed(ctx, ids[i])
		if err != nil {
			return nil, err
		}
		switch {
		case ok:
			newest = max(newest, ids[i])
		case newest > 0:
			doomed = append(doomed, ids[i])
		}
	}
	slices.Sort(doomed)
	deleted, errs := s.deleteDirs(ctx, doomed)
	return deleted, errors.Join(errs...)
}

// RemovePartialBetween deletes the partial checkpoint directories (no _metadata, empty ones included) with
// ids from from to to, and the shared blobs written for those checkpoints that no committed checkpoint
// lists, and returns the ids of the directories deleted. A job runs it once it has ended, over the ids it
// triggered: every task has stopped and no checkpoint of the job is in progress any more, so what is left
// of an aborted checkpoint (a blob a task wrote after the abort's Discard had run, a directory a cancelled
// write made) is garbage. If the metadata of a committed checkpoint cannot be read, no shared blob is
// deleted.
func (s *Storage) RemovePartialBetween(ctx context.Context, from, to int64) ([]int64, error) {
	if from < 1 || to < from {
		return nil, nil
	}
	ids, err := s.dirIDs(ctx)
	if err != nil {
		return nil, err
	}
	var committed, doomed []int64
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		ok, err := s.committed(ctx, id)
		if err != nil {
			return nil, err
		}
		switch {
		case ok:
			committed = append(committed, id)
		case id >= from && id <= to:
			doomed = append(doomed, id)
		}
	}
	slices.Sort(doomed)
	deleted, errs := s.deleteDirs(ctx, doomed)
	if err := s.pruneShared(ctx, committed, func(creator int64) bool { return creator >= from && creator <= to }); err != nil {
		errs = append(errs, err)
	}
	return deleted, errors.Join(errs...)
}

// dirIDs returns the ids of every checkpoint directory, committed or not, in ascending order: those IDs
// returns, and the empty ones a local bucket holds (DirLister), which its listing does not show.
func (s *Storage) dirIDs(ctx context.Context) ([]int64, error) {
	ids, err := s.IDs(ctx)
	if err != nil {
		return nil, err
	}
	dl, ok := s.b.(DirLister)
	if !ok {
		return ids, nil
	}
	dirs, err := dl.ListDirs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list checkpoint directories in %s: %w", s.location, err)
	}
	for _, d := range dirs {
		if id, ok := parseCheckpointDir(d); ok && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// deleteDirs deletes the checkpoint directories ids, going on past failures, and returns those deleted
// and the errors.
func (s *Storage) deleteDirs(ctx context.Context, ids []int64) ([]int64, []error) {
	var deleted []int64
	var errs []error
	for _, id := range ids {
		if err := s.deleteDir(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, id)
	}
	return deleted, errs
}

// pruneShared deletes the shared blobs that none of the kept checkpoints lists and whose creating
// checkpoint deletable accepts.
func (s *Storage) pruneShared(ctx context.Context, kept []int64, deletable func(creator int64) bool) error {
	entries, err := s.b.List(ctx, sharedDir)
	if err != nil {
		return fmt.Errorf("list %s in %s: %w", sharedDir, s.location, err)
	}
	if len(entries) == 0 {
		return nil
	}
	listed := map[string]bool{}
	for _, id := range kept {
		cp, err := readMetadata(ctx, s.b, checkpointDir(id))
		if err != nil {
			return nil // which shared blobs it lists is unknown: delete none
		}
		for _, h := range cp.States {
			for _, ref := range h.Blobs {
				if ref.Shared {
					listed[ref.Key] = true
				}
			}
		}
	}
	var errs []error
	for _, e := range entries {
		if e.Dir {
			continue
		}
		key := strings.TrimPrefix(e.Key, sharedDir)
		if listed[key] {
			continue
		}
		if id, ok := sharedCreator(key); !ok || !deletable(id) {
			continue // not ours, or possibly of a checkpoint in progress
		}
		if err := s.b.Delete(ctx, e.Key); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("delete shared state %s in %s: %w", key, s.location, err))
		}
	}
	return errors.Join(errs...)
}

// SharedKeys returns the keys of the shared blobs in storage, sorted (for tests and tools).
func (s *Storage) SharedKeys(ctx context.Context) ([]string, error) {
	entries, err := s.b.List(ctx, sharedDir)
	if err != nil {
		return nil, fmt.Errorf("list %s in %s: %w", sharedDir, s.location, err)
	}
	var keys []string
	for _, e := range entries {
		if !e.Dir {
			keys = append(keys, strings.TrimPrefix(e.Key, sharedDir))
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func (s *Storage) committed(ctx context.Context, id int64) (bool, error) {
	dir := checkpointDir(id)
	entries, err := s.b.List(ctx, dir)
	if err != nil {
		return false, fmt.Errorf("list %s in %s: %w", dir, s.location, err)
	}
	for _, e := range entries {
		if e.Key == dir+metadataKey {
			return true, nil
		}
	}
	return false, nil
}

// Discard deletes everything under chk-<id>/, committed or not: the data of an aborted checkpoint.
// Deleting a directory that does not exist is not an error.
func (s *Storage) Discard(ctx context.Context, id int64) error {
	return s.deleteDir(ctx, id)
}

// deleteDir removes _metadata first, so that a deletion cut short leaves an incomplete checkpoint (which
// restores ignore) rather than a committed one with missing blobs (which they would report as corrupt).
func (s *Storage) deleteDir(ctx context.Context, id int64) error {
	dir := checkpointDir(id)
	entries, err := s.b.List(ctx, dir)
	if err != nil {
		return fmt.Errorf("delete checkpoint %d in %s: list: %w", id, s.location, err)
	}
	slices.SortStableFunc(entries, func(a, b Entry) int {
		am, bm := a.Key == dir+metadataKey, b.Key == dir+metadataKey
		switch {
		case am && !bm:
			return -1
		case bm && !am:
			return 1
		}
		return 0
	})
	for _, e := range entries {
		if e.Dir {
			continue // nothing of ours nests; leave foreign data alone
		}
		if err := s.b.Delete(ctx, e.Key); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("delete checkpoint %d in %s: %w", id, s.location, err)
		}
	}
	if r, ok := s.b.(DirRemover); ok {
		if err := r.RemoveDir(ctx, dir); err != nil {
			return fmt.Errorf("delete checkpoint %d in %s: %w", id, s.location, err)
		}
	}
	return nil
}

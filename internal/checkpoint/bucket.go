package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/gcerrors"

	// Drivers selectable by URL scheme: mem:// for tests and demos, s3:// for S3-compatible stores.
	_ "gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob"
)

// Bucket is the object-store surface Storage needs: pebble's FS idea for blobs. BlobBucket adapts a
// gocloud.dev/blob bucket; package errorbucket wraps any Bucket to inject failures. Implementations must be
// safe for concurrent use.
type Bucket interface {
	// Put stores data under key, replacing any object there. Readers see the old or the new object, never
	// a mix (fileblob renames a temporary file into place; object stores replace objects atomically). Put
	// does not keep data after it returns: the caller may reuse its memory.
	Put(ctx context.Context, key string, data []byte) error
	// Get opens the object under key and returns its size. An absent key gives an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
	// List returns the entries directly under prefix: objects, and "directories" (keys ending in "/")
	// standing for everything below them. prefix is "" or ends in "/".
	List(ctx context.Context, prefix string) ([]Entry, error)
	// Delete removes the object under key. An absent key gives an error wrapping ErrNotFound.
	Delete(ctx context.Context, key string) error
	// Close releases the bucket.
	Close() error
}

// Entry is one result of Bucket.List.
type Entry struct {
	// Key is the full key; directories end in "/".
	Key string
	// Size is the object's size; zero for directories.
	Size int64
	// Dir marks a directory.
	Dir bool
}

// DirRemover is implemented by buckets on a local file system, where deleting every object of a directory
// leaves the directory behind. Storage calls it after emptying a checkpoint directory.
type DirRemover interface {
	// RemoveDir removes the directory prefix ("chk-7/") if it is empty.
	RemoveDir(ctx context.Context, prefix string) error
}

// DirLister is implemented by buckets on a local file system, whose List shows a directory only while it
// holds an object: a write that made its checkpoint directory and then failed, or was cancelled, leaves an
// empty directory that List never shows. Storage's sweeps of partial checkpoints use it to find those.
type DirLister interface {
	// ListDirs returns the directories directly under the root, as keys ending in "/" ("chk-7/"), empty
	// ones included.
	ListDirs(ctx context.Context) ([]string, error)
}

// BlobBucket adapts a gocloud.dev/blob bucket to Bucket. The returned Bucket owns b and closes it.
func BlobBucket(b *blob.Bucket) Bucket { return &blobBucket{b: b} }

type blobBucket struct {
	b *blob.Bucket
	// dir is the bucket's root directory when it lives on the local file system.
	dir string
}

func (bb *blobBucket) Put(ctx context.Context, key string, data []byte) error {
	opts := &blob.WriterOptions{ContentType: "application/octet-stream"}
	if bb.dir == "" {
		// A remote store: WriteAll sends the data's MD5 along, and the store checks the upload against it.
		return bb.wrap(bb.b.WriteAll(ctx, key, data, opts), key)
	}
	// A local file: an MD5 would be computed twice over every blob (for the upload check and by WriteAll
	// to pass it) and protects nothing the blob's own CRC-32C does not; for a large state it was the most
	// expensive part of a checkpoint.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := bb.b.NewWriter(wctx, key, opts)
	if err != nil {
		return bb.wrap(err, key)
	}
	if _, err := w.Write(data); err != nil {
		// Closing a writer whose context is done removes its temporary file; closing it otherwise would
		// rename what it holds, the part written before the failure (a full disk), into place.
		cancel()
		_ = w.Close()
		return bb.wrap(err, key)
	}
	return bb.wrap(w.Close(), key)
}

func (bb *blobBucket) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	r, err := bb.b.NewReader(ctx, key, nil)
	if err != nil {
		return nil, 0, bb.wrap(err, key)
	}
	return r, r.Size(), nil
}

func (bb *blobBucket) List(ctx context.Context, prefix string) ([]Entry, error) {
	if bb.dir != "" {
		return bb.listLocal(prefix)
	}
	return bb.list(ctx, prefix)
}

// listLocal lists prefix in the local directory as an object store lists it with the delimiter "/",
// reading the directory itself rather than through fileblob, whose listing fails as a whole when a file
// goes between reading the directory and looking at the file (a write's temporary file renamed into place,
// a blob a sweep deleted) and lists the temporary files of writes in progress as keys. Here a file gone is
// left out, as an object store would, and so is a write's temporary file (KEY.HEX.tmp beside its target,
// NoTempDir): it is no key until renamed, and a sweep must not delete it from under its writer. Keys are
// the file names: those this package writes need no escaping.
func (bb *blobBucket) listLocal(prefix string) ([]Entry, error) {
	dir, name := "", prefix
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir, name = prefix[:i+1], prefix[i+1:]
	}
	files, err := os.ReadDir(filepath.Join(bb.dir, filepath.FromSlash(dir)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // nothing under prefix, as an object store says
	}
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	var out []Entry
	for _, f := range files {
		if !strings.HasPrefix(f.Name(), name) || isTempFile(f.Name()) {
			continue
		}
		key := dir + f.Name()
		if f.IsDir() {
			// A directory is a prefix of keys: one without a file is none (an emptied checkpoint's, say).
			if holdsFile(filepath.Join(bb.dir, filepath.FromSlash(key))) {
				out = append(out, Entry{Key: key + "/", Dir: true})
			}
			continue
		}
		info, err := f.Info()
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", prefix, err)
		}
		out = append(out, Entry{Key: key, Size: info.Size()})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// holdsFile reports whether the directory at path holds a file other than a temporary one, at any depth.
func holdsFile(path string) bool {
	found := false
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !isTempFile(d.Name()) {
			found = true
			return fs.SkipAll
		}
		return nil // a part gone or unreadable holds nothing to list
	})
	return found
}

// isTempFile reports whether name is a temporary file fileblob writes beside its target: NAME.HEX.tmp.
func isTempFile(name string) bool {
	rest, ok := strings.CutSuffix(name, ".tmp")
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 || i == len(rest)-1 {
		return false
	}
	for _, c := range rest[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (bb *blobBucket) list(ctx context.Context, prefix string) ([]Entry, error) {
	it := bb.b.List(&blob.ListOptions{Prefix: prefix, Delimiter: "/"})
	var out []Entry
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, bb.wrap(err, prefix)
		}
		out = append(out, Entry{Key: obj.Key, Size: obj.Size, Dir: obj.IsDir})
	}
}

func (bb *blobBucket) Delete(ctx context.Context, key string) error {
	return bb.wrap(bb.b.Delete(ctx, key), key)
}

func (bb *blobBucket) Close() error { return bb.b.Close() }

func (bb *blobBucket) RemoveDir(_ context.Context, prefix string) error {
	if bb.dir == "" {
		return nil
	}
	// A directory that is not empty (a late write landed in it) stays; the next retention pass removes it.
	err := os.Remove(filepath.Join(bb.dir, filepath.FromSlash(strings.TrimSuffix(prefix, "/"))))
	if err != nil && !errors.Is(err, os.ErrNotExist) && !isNotEmpty(err) {
		return err
	}
	return nil
}

func (bb *blobBucket) ListDirs(context.Context) ([]string, error) {
	if bb.dir == "" {
		return nil, nil // an object store has no directories of its own: List shows every prefix in use
	}
	entries, err := os.ReadDir(bb.dir)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name()+"/")
		}
	}
	return dirs, nil
}

func isNotEmpty(err error) bool {
	var pe *os.PathError
	return errors.As(err, &pe) && (errors.Is(pe.Err, syscall.ENOTEMPTY) || errors.Is(pe.Err, syscall.EEXIST))
}

// wrap turns gocloud's NotFound into ErrNotFound and names the key.
func (bb *blobBucket) wrap(err error, key string) error {
	if err == nil {
		return nil
	}
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("%q: %w", key, ErrNotFound)
	}
	return err
}

// OpenBucket opens the bucket at location, which is one of
//
//   - a local directory, as a plain path ("/var/runnel/checkpoints/job-1", "ckpt") or a file:// URL
//     ("file:///var/runnel/checkpoints/job-1"); it is created if missing;
//   - "s3://bucket/some/prefix?region=eu-west-1" (and the other s3blob URL parameters): the path becomes the
//     key prefix;
//   - any other scheme gocloud.dev/blob has a driver registered for ("mem://" keeps objects in memory; each
//     open is a new, empty bucket).
func OpenBucket(ctx context.Context, location string) (Bucket, error) {
	return openBucket(ctx, location, true)
}

// openBucket opens location; a local directory is created when create is set and otherwise must exist
// (ErrNotFound).
func openBucket(ctx context.Context, location string, create bool) (Bucket, error) {
	if location == "" {
		return nil, errors.New("checkpoint location is empty: set a directory or a file:// or s3:// URL")
	}
	if !strings.Contains(location, "://") {
		return openLocal(location, create)
	}
	u, err := url.Parse(location)
	if err != nil {
		return nil, fmt.Errorf("checkpoint location %q: %w", location, err)
	}
	if u.Scheme == fileblob.Scheme {
		if u.RawQuery != "" {
			return nil, fmt.Errorf("checkpoint location %q: file URLs take no parameters", location)
		}
		dir := u.Path
		switch u.Host {
		case "", "localhost":
			if dir == "" {
				// "file://" names no directory; taking it for the current one would scatter checkpoints
				// wherever the command happens to run.
				return nil, fmt.Errorf("checkpoint location %q names no directory: write file:///absolute/dir, file://./relative/dir or a plain path", location)
			}
		case ".":
			dir = "." + dir
		default:
			return nil, fmt.Errorf("checkpoint location %q: file URLs name a local path (file:///dir or file://./dir)", location)
		}
		return openLocal(dir, create)
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		q := u.Query()
		if q.Has("prefix") {
			return nil, fmt.Errorf("checkpoint location %q: give the prefix as the path or as ?prefix=, not both", location)
		}
		q.Set("prefix", p+"/")
		u.Path = ""
		u.RawPath = ""
		u.RawQuery = q.Encode()
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("open checkpoint location %q: %w", location, err)
	}
	return &blobBucket{b: b}, nil
}

func openLocal(dir string, create bool) (Bucket, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint directory %q: %w", dir, err)
	}
	if !create {
		if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
			return nil, missingDirError{dir: abs}
		}
	}
	b, err := fileblob.OpenBucket(abs, &fileblob.Options{
		CreateDir: create,
		// Metadata sidecar files would double the object count for nothing: this package frames its own data.
		Metadata: fileblob.MetadataDontWrite,
		// Temporary files beside their target: the rename into place then never crosses file systems.
		NoTempDir: true,
	})
	if err != nil {
		return nil, fmt.Errorf("open checkpoint directory %q: %w", abs, err)
	}
	return &blobBucket{b: b, dir: abs}, nil
}

// missingDirError is a local directory that was to be read and does not exist; it is an ErrNotFound.
type missingDirError struct{ dir string }

func (e missingDirError) Error() string { return fmt.Sprintf("directory %q does not exist", e.dir) }
func (e missingDirError) Unwrap() error { return ErrNotFound }

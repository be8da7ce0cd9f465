package errorbucket_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/checkpoint/errorbucket"
)

func TestFaults(t *testing.T) {
	ctx := context.Background()
	b := errorbucket.Wrap(checkpoint.BlobBucket(memblob.OpenBucket(nil)))
	defer b.Close()

	b.Inject(errorbucket.Fault{Ops: errorbucket.OpPut | errorbucket.OpDelete, KeyContains: "bad", Times: 2})
	if err := b.Put(ctx, "good", []byte("1")); err != nil {
		t.Fatalf("unmatched key failed: %v", err)
	}
	for i := range 2 {
		if err := b.Put(ctx, "bad", []byte("1")); !errors.Is(err, errorbucket.ErrInjected) {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if err := b.Put(ctx, "bad", []byte("1")); err != nil {
		t.Fatalf("spent fault still fails: %v", err)
	}

	custom := errors.New("quota exceeded")
	b.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, Err: custom, Torn: true})
	if err := b.Put(ctx, "torn", []byte("0123456789")); !errors.Is(err, custom) {
		t.Fatalf("torn put: %v", err)
	}
	b.Clear()
	r, size, err := b.Get(ctx, "torn")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r)
	r.Close()
	if size != 5 || string(data) != "01234" {
		t.Fatalf("torn write left %q", data)
	}

	b.Inject(errorbucket.Fault{Ops: errorbucket.OpAll})
	if _, err := b.List(ctx, ""); !errors.Is(err, errorbucket.ErrInjected) {
		t.Fatalf("list: %v", err)
	}
	if _, _, err := b.Get(ctx, "good"); !errors.Is(err, errorbucket.ErrInjected) {
		t.Fatalf("get: %v", err)
	}
	if b.Hits() != 5 {
		t.Fatalf("hits %d, want 5", b.Hits())
	}
	if got := (errorbucket.OpPut | errorbucket.OpList).String(); got != "put|list" {
		t.Fatalf("Op string %q", got)
	}
}

// TestSlowStore: a fault with Pass delays the operation and then lets it through (a slow store), and
// with Hang lets it through once its context is done; neither counts as a hit. Without Pass a delayed
// operation fails after the delay.
func TestSlowStore(t *testing.T) {
	ctx := context.Background()
	b := errorbucket.Wrap(checkpoint.BlobBucket(memblob.OpenBucket(nil)))
	defer b.Close()

	const delay = 30 * time.Millisecond
	b.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, KeyContains: "slow", Delay: delay, Pass: true, Times: 1})
	start := time.Now()
	if err := b.Put(ctx, "slow", []byte("1")); err != nil {
		t.Fatalf("slow put: %v", err)
	}
	if d := time.Since(start); d < delay {
		t.Fatalf("slow put took %s, want at least %s", d, delay)
	}
	if r, _, err := b.Get(ctx, "slow"); err != nil {
		t.Fatalf("the slow put stored nothing: %v", err)
	} else {
		r.Close()
	}

	b.Inject(errorbucket.Fault{Ops: errorbucket.OpDelete, Delay: time.Millisecond, Times: 1})
	if err := b.Delete(ctx, "slow"); !errors.Is(err, errorbucket.ErrInjected) {
		t.Fatalf("delayed delete: %v, want the injected error", err)
	}

	b.Inject(errorbucket.Fault{Ops: errorbucket.OpPut, Hang: true, Pass: true, Times: 1})
	hctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	// memblob refuses a write whose context is done: the write reached it.
	if err := b.Put(hctx, "late", []byte("1")); err == nil || errors.Is(err, errorbucket.ErrInjected) {
		t.Fatalf("hung put passed on with its done context: %v, want the store's own error", err)
	}
	if b.Hits() != 1 {
		t.Fatalf("hits %d, want 1 (passed operations do not count)", b.Hits())
	}
}

// TestListDirs: ListDirs passes through to a local bucket, showing empty directories, and fails like a
// List of "".
func TestListDirs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	inner, err := checkpoint.OpenBucket(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	b := errorbucket.Wrap(inner)
	defer b.Close()
	if err := os.Mkdir(filepath.Join(dir, "chk-3"), 0o755); err != nil {
		t.Fatal(err)
	}
	dirs, err := b.ListDirs(ctx)
	if err != nil || !slices.Equal(dirs, []string{"chk-3/"}) {
		t.Fatalf("ListDirs: %v, %v; want [chk-3/]", dirs, err)
	}
	b.Inject(errorbucket.Fault{Ops: errorbucket.OpList, Times: 1})
	if _, err := b.ListDirs(ctx); !errors.Is(err, errorbucket.ErrInjected) {
		t.Fatalf("ListDirs with a list fault: %v", err)
	}
	mem := errorbucket.Wrap(checkpoint.BlobBucket(memblob.OpenBucket(nil)))
	defer mem.Close()
	if dirs, err := mem.ListDirs(ctx); err != nil || len(dirs) != 0 {
		t.Fatalf("ListDirs of an object store: %v, %v; want nothing", dirs, err)
	}
}

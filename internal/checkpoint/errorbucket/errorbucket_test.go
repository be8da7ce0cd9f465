package errorbucket_test

import (
	"context"
	"errors"
	"io"
	"testing"

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

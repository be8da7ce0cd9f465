// Package errorbucket wraps a checkpoint.Bucket and makes chosen operations fail, in the spirit of pebble's
// errorfs: tests use it to turn "disk full", "object store unreachable" and "crash halfway through a write"
// into ordinary, repeatable cases.
//
// It owns fault injection only and imports nothing of Runnel but package checkpoint.
package errorbucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// ErrInjected is the error a Fault returns when it names none.
var ErrInjected = errors.New("injected fault")

// Op is a set of bucket operations.
type Op uint8

// Operations a Fault can match.
const (
	OpPut Op = 1 << iota
	OpGet
	OpList
	OpDelete
	OpAll = OpPut | OpGet | OpList | OpDelete
)

// String names the operations ("put|get").
func (o Op) String() string {
	var names []string
	for _, x := range []struct {
		op   Op
		name string
	}{{OpPut, "put"}, {OpGet, "get"}, {OpList, "list"}, {OpDelete, "delete"}} {
		if o&x.op != 0 {
			names = append(names, x.name)
		}
	}
	return strings.Join(names, "|")
}

// Fault makes matching operations fail.
type Fault struct {
	// Ops are the operations it applies to.
	Ops Op
	// KeyContains restricts it to keys (list prefixes) containing this string; "" matches every key.
	KeyContains string
	// Err is returned (wrapped with the operation and key); nil means ErrInjected.
	Err error
	// Times is how many operations fail before the fault is spent; 0 means every one.
	Times int
	// Torn makes a failing Put store the first half of the data before it fails, as a crash in the middle
	// of a non-atomic write would.
	Torn bool
	// Hang makes a matching operation block until its context is done, and then fail with the context's
	// error: a store that stopped answering.
	Hang bool
	// Delay makes a matching operation wait this long (less if its context is done first) before it
	// fails, or, with Pass, before it goes on.
	Delay time.Duration
	// Pass makes a matching operation go on to the wrapped bucket after its Delay, or with Hang once its
	// context is done (with that context: a write the store took after its caller gave up on it), instead
	// of failing: a slow store rather than a broken one. Passed operations are not counted by Hits.
	Pass bool
}

type fault struct {
	Fault
	left int
}

// Bucket is a checkpoint.Bucket that fails operations matching its faults and passes the rest to the
// wrapped bucket. It is safe for concurrent use.
type Bucket struct {
	inner checkpoint.Bucket

	mu     sync.Mutex
	faults []*fault
	hits   int
}

// Wrap returns a Bucket around inner, which it owns.
func Wrap(inner checkpoint.Bucket) *Bucket { return &Bucket{inner: inner} }

// Inject adds a fault; faults are checked in the order they were added.
func (b *Bucket) Inject(f Fault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = append(b.faults, &fault{Fault: f, left: f.Times})
}

// Clear removes every fault.
func (b *Bucket) Clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = nil
}

// Hits returns how many operations have failed by injection.
func (b *Bucket) Hits() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits
}

// check returns the fault that fails op on key, spending one of its failures, after the fault's delay
// or hang. A fault that passes the operation on returns a nil error.
func (b *Bucket) check(ctx context.Context, op Op, key string) (*Fault, error) {
	f, err := b.match(op, key)
	if f == nil {
		return nil, nil
	}
	switch {
	case f.Hang:
		<-ctx.Done()
		if !f.Pass {
			return f, fmt.Errorf("%w (hung until: %w)", err, ctx.Err())
		}
	case f.Delay > 0:
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if f.Pass {
		return f, nil
	}
	return f, err
}

// match finds the first fault that matches op on key and spends one of its operations.
func (b *Bucket) match(op Op, key string) (*Fault, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, f := range b.faults {
		if f.Ops&op == 0 || !strings.Contains(key, f.KeyContains) {
			continue
		}
		if f.Times > 0 {
			f.left--
			if f.left == 0 {
				b.faults = append(b.faults[:i:i], b.faults[i+1:]...)
			}
		}
		if !f.Pass {
			b.hits++
		}
		err := f.Err
		if err == nil {
			err = ErrInjected
		}
		spent := f.Fault
		return &spent, fmt.Errorf("%s %q: %w", op, key, err)
	}
	return nil, nil
}

// Put implements checkpoint.Bucket.
func (b *Bucket) Put(ctx context.Context, key string, data []byte) error {
	f, err := b.check(ctx, OpPut, key)
	if err != nil {
		if f.Torn && !f.Hang {
			if perr := b.inner.Put(ctx, key, data[:len(data)/2]); perr != nil {
				return errors.Join(err, perr)
			}
		}
		return err
	}
	return b.inner.Put(ctx, key, data)
}

// Get implements checkpoint.Bucket.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	if _, err := b.check(ctx, OpGet, key); err != nil {
		return nil, 0, err
	}
	return b.inner.Get(ctx, key)
}

// List implements checkpoint.Bucket.
func (b *Bucket) List(ctx context.Context, prefix string) ([]checkpoint.Entry, error) {
	if _, err := b.check(ctx, OpList, prefix); err != nil {
		return nil, err
	}
	return b.inner.List(ctx, prefix)
}

// Delete implements checkpoint.Bucket.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if _, err := b.check(ctx, OpDelete, key); err != nil {
		return err
	}
	return b.inner.Delete(ctx, key)
}

// ListDirs passes checkpoint.DirLister through when the wrapped bucket has it (nothing otherwise); it is
// a list of the prefix "" for the faults.
func (b *Bucket) ListDirs(ctx context.Context) ([]string, error) {
	if _, err := b.check(ctx, OpList, ""); err != nil {
		return nil, err
	}
	if l, ok := b.inner.(checkpoint.DirLister); ok {
		return l.ListDirs(ctx)
	}
	return nil, nil
}

// Close implements checkpoint.Bucket.
func (b *Bucket) Close() error { return b.inner.Close() }

// RemoveDir passes checkpoint.DirRemover through when the wrapped bucket has it.
func (b *Bucket) RemoveDir(ctx context.Context, prefix string) error {
	if r, ok := b.inner.(checkpoint.DirRemover); ok {
		return r.RemoveDir(ctx, prefix)
	}
	return nil
}

var (
	_ checkpoint.Bucket     = (*Bucket)(nil)
	_ checkpoint.DirRemover = (*Bucket)(nil)
	_ checkpoint.DirLister  = (*Bucket)(nil)
)

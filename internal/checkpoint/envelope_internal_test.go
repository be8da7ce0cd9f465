package checkpoint

import (
	"bytes"
	"hash/crc32"
	"math/rand"
	"testing"
	"unsafe"
)

// TestPiecewiseChecksumAndCopy pins that computing the checksum and copying piece by piece (so that the
// scheduler can preempt between pieces) gives what one call gives, at and around the piece boundaries.
func TestPiecewiseChecksumAndCopy(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, n := range []int{0, 1, piece - 1, piece, piece + 1, 3*piece + 17} {
		b := make([]byte, n)
		rng.Read(b)
		if got, want := checksum(b), crc32.Checksum(b, castagnoli); got != want {
			t.Errorf("%d bytes: checksum %08x, want %08x", n, got, want)
		}
		dst := make([]byte, n)
		copyInPieces(dst, b)
		if !bytes.Equal(dst, b) {
			t.Errorf("%d bytes: copy differs", n)
		}
	}
}

// TestBlobMemoryLeavesRoomToGrow checks that a blob in the memory of the last one does not copy its
// payload when it grows a little past the last one's size, as a task's state does from checkpoint to
// checkpoint.
func TestBlobMemoryLeavesRoomToGrow(t *testing.T) {
	var mem BlobMemory
	for round := range 5 {
		size := 100_000 + round*10_000 // a tenth more, then less
		b := NewBlob(mem)
		start := unsafe.SliceData(b.b)
		for range size / 1000 {
			b.Write(make([]byte, 1000))
		}
		if round > 0 && unsafe.SliceData(b.b) != start {
			t.Fatalf("round %d: a blob of %d bytes after one of %d moved its payload", round, size, size-10_000)
		}
		if b.Len() != size {
			t.Fatalf("round %d: payload of %d bytes, want %d", round, b.Len(), size)
		}
		mem = b.Memory()
	}
}

// TestBlobGrowsByDoubling checks that a blob that outgrows its memory keeps every byte written, pieces
// larger than a copy's piece too, and moves its payload once each time it doubles, not at every quarter
// it adds.
func TestBlobGrowsByDoubling(t *testing.T) {
	b := NewBlob(BlobMemory{b: make([]byte, 0, 64<<10)})
	var want []byte
	moves, start := 0, unsafe.SliceData(b.b)
	for i := range 300 {
		p := bytes.Repeat([]byte{byte(i)}, 3000+i%7)
		b.Write(p)
		want = append(want, p...)
		if s := unsafe.SliceData(b.b); s != start {
			moves, start = moves+1, s
		}
	}
	// 64 KiB to about 0.9 MiB: doubling moves the payload 4 times; growing by a quarter would move it 12.
	if moves > 4 {
		t.Fatalf("the payload moved %d times while the blob grew to %d bytes, want at most 4", moves, b.Len())
	}
	big := bytes.Repeat([]byte{7}, 3*piece+123) // more than the room left: grown, and copied in pieces
	b.Write(big)
	want = append(want, big...)
	if !bytes.Equal(b.Payload(), want) {
		t.Fatalf("payload of %d bytes differs from the %d written", b.Len(), len(want))
	}
}

// TestBlobMemoryLeavesRoomForSteadyGrowth checks that a blob whose state grows by the same amount at every
// checkpoint, more than a quarter of it (q5's state, from an empty one), stops copying its payload once
// its memory knows the growth: from the third blob on, each is written where it began.
func TestBlobMemoryLeavesRoomForSteadyGrowth(t *testing.T) {
	var mem BlobMemory
	for round := range 8 {
		size := 100_000 * (round + 1)
		b := NewBlob(mem)
		start := unsafe.SliceData(b.b)
		for range size / 1000 {
			b.Write(make([]byte, 1000))
		}
		if round >= 2 && unsafe.SliceData(b.b) != start {
			t.Fatalf("round %d: a blob of %d bytes after one of %d moved its payload", round, size, size-100_000)
		}
		mem = b.Memory()
		if round > 0 && cap(mem.b) > 3*size {
			t.Fatalf("round %d: a blob of %d bytes keeps %d bytes of memory", round, size, cap(mem.b))
		}
	}
}

// TestBlobLend checks that a blob's lent memory comes back with what the borrower appended, and that
// using the blob while it is lent, or returning memory it did not lend, panics rather than losing bytes.
func TestBlobLend(t *testing.T) {
	b := NewBlob(BlobMemory{})
	b.Write([]byte("head"))
	p := b.Lend()
	p = append(p, " and tail"...)
	b.Return(p)
	if got := string(b.Payload()); got != "head and tail" {
		t.Fatalf("payload %q after the lend, want %q", got, "head and tail")
	}
	for _, tc := range []struct {
		name string
		do   func(b *Blob)
	}{
		{"write while lent", func(b *Blob) { b.Lend(); b.Write([]byte("x")) }},
		{"lent twice", func(b *Blob) { b.Lend(); b.Lend() }},
		{"returned unlent", func(b *Blob) { b.Return(nil) }},
		{"returned shorter", func(b *Blob) { p := b.Lend(); b.Return(p[:len(p)-1]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			b := NewBlob(BlobMemory{})
			b.Write([]byte("head"))
			tc.do(b)
		})
	}
}

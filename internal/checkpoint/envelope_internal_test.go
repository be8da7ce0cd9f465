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
	var mem []byte
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

package checkpoint

import (
	"bytes"
	"hash/crc32"
	"math/rand"
	"testing"
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

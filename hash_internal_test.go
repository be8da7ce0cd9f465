package runnel

import (
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestKeyHashMatchesXXHash(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	values := []uint64{0, 1, 255, 256, 1 << 63, ^uint64(0)}
	for i := 0; i < 10000; i++ {
		values = append(values, rng.Uint64())
	}
	for _, x := range values {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], x)
		if got, want := xxhash64Uint64(x), xxhash.Sum64(b[:]); got != want {
			t.Fatalf("hash of %#x = %#x, xxhash says %#x", x, got, want)
		}
	}
}

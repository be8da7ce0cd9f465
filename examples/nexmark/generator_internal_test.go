package nexmark

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPutExact: the 13 characters of a draw are those of the definition, 'a' + (x div 26^k) mod 26 for
// k = 0 … 12, over the draws at the edges of the split at 26^6 and of the range, and random ones.
func TestPutExact(t *testing.T) {
	const d6 = 308_915_776 // 26^6
	xs := []uint64{0, 1, 25, 26, 675, 676, d6 - 1, d6, d6 + 1, d6*676 - 1, d6 * 676, d6*676*676 - 1,
		math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 / d6 * d6, math.MaxInt64/d6*d6 - 1}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		xs = append(xs, rng.Uint64()>>1)
	}
	var w [16]byte
	for _, x := range xs {
		putExact(w[:], x)
		v := x
		for k := range exactPerDraw {
			if want := byte('a' + v%26); w[k] != want {
				t.Fatalf("x = %d: character %d is %q, want %q (%q)", x, k, w[k], want, w[:13])
			}
			v /= 26
		}
	}
}

// TestAppendExactLengths: every length, within one draw, at its end and across draws, appends exactly
// that many characters after what the buffer held, from consecutive draws.
func TestAppendExactLengths(t *testing.T) {
	for l := range int64(60) {
		r := splitMix{uint64(l)}
		b := appendExact([]byte("xy"), &r, l)
		if int64(len(b)) != 2+l || string(b[:2]) != "xy" {
			t.Fatalf("length %d: %q", l, b)
		}
		r = splitMix{uint64(l)}
		var x uint64
		for i := range l {
			if i%exactPerDraw == 0 {
				x = r.next() >> 1
			}
			if want := byte('a' + x%26); b[2+i] != want {
				t.Fatalf("length %d: character %d is %q, want %q", l, i, b[2+i], want)
			}
			x /= 26
		}
	}
}

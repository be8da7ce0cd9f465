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

// TestRefillIsEvent: refilling one Event with the events of a stream (as the source reader does with its
// buffer) gives each event as Event makes it into a zero Event, through every change of kind; Event itself
// clears whatever a used Event held.
func TestRefillIsEvent(t *testing.T) {
	g, err := NewGenerator(GeneratorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var reused, dirty Event
	dirty = Event{Kind: KindBid, Person: Person{Name: "p"}, Auction: Auction{ItemName: "a"}, Bid: Bid{Extra: "b"}}
	for n := uint64(0); n < 3*proportionDenominator+7; n++ {
		var want Event
		g.Event(n, &want)
		g.refill(n, &reused)
		if reused != want {
			t.Fatalf("event %d refilled: %+v, want %+v", n, reused, want)
		}
		d := dirty
		if g.Event(n, &d); d != want {
			t.Fatalf("event %d into a used Event: %+v, want %+v", n, d, want)
		}
	}
}

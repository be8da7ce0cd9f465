package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/runnel-dev/runnel/codec"
)

// TestKeyOrderIsCanonical checks the key order updateOrder keeps against a comparison sort of the keys'
// canonical bytes (key group, then uvarint(len) ‖ key), as keys arrive over several writes: integer keys
// (little-endian, differing in their low bytes only, as a stream's ids, or in the last byte of the prefix), strings sharing prefixes longer
// than the 8 bytes an entry's prefix holds (ties broken by the bytes), and keys of mixed lengths.
func TestKeyOrderIsCanonical(t *testing.T) {
	const maxP = 128
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		keys func(round int) []string // the keys a round adds, encoded by the string codec
		ints func(round int) []int64  // or by the int64 codec
	}{
		{name: "rising ids", ints: func(r int) []int64 {
			var ks []int64
			for i := range 3000 {
				ks = append(ks, int64(r*3000+i))
			}
			return ks
		}},
		{name: "random ids", ints: func(int) []int64 {
			var ks []int64
			for range 3000 {
				ks = append(ks, rng.Int64())
			}
			return ks
		}},
		{name: "ids differing in their seventh byte", ints: func(r int) []int64 {
			// The last byte of an entry's prefix: uvarint(8), then the key's bytes 0 to 6.
			var ks []int64
			for i := range 3000 {
				ks = append(ks, int64(i&0xff)<<48|int64(r*16+i>>8))
			}
			rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
			return ks
		}},
		{name: "long shared prefixes", keys: func(r int) []string {
			var ks []string
			for i := range 2000 {
				ks = append(ks, fmt.Sprintf("customer-account-%d-%d", rng.IntN(7), r*2000+i))
			}
			return ks
		}},
		{name: "mixed lengths", keys: func(r int) []string {
			var ks []string
			for i := range 2000 {
				ks = append(ks, fmt.Sprintf("%012x", (r*2000+i)*7919)[:1+i%12])
			}
			return ks
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ints != nil {
				checkKeyOrder(t, codec.Int64(), maxP, tc.ints)
			} else {
				checkKeyOrder(t, codec.String(), maxP, tc.keys)
			}
		})
	}
}

func checkKeyOrder[K comparable](t *testing.T, kc codec.Codec[K], maxP int, round func(int) []K) {
	t.Helper()
	var o keyOrder
	var keys []K
	var gens []uint32
	seen := make(map[K]bool)
	for r := range 4 {
		for _, k := range round(r) {
			if !seen[k] {
				seen[k] = true
				keys, gens = append(keys, k), append(gens, 1)
			}
		}
		// A fresh array each round, as a capture after the state's slots were reallocated.
		if err := updateOrder(&o, keys, slices.Clone(gens), kc, maxP); err != nil {
			t.Fatal(err)
		}
		type canon struct {
			kg  int
			enc []byte
		}
		want := make([]canon, len(keys))
		for i, k := range keys {
			b, err := kc.Append(nil, k)
			if err != nil {
				t.Fatal(err)
			}
			want[i] = canon{kg: KeyGroup(b, maxP), enc: append(binary.AppendUvarint(nil, uint64(len(b))), b...)}
		}
		slices.SortFunc(want, func(a, b canon) int {
			if c := cmp.Compare(a.kg, b.kg); c != 0 {
				return c
			}
			return bytes.Compare(a.enc, b.enc)
		})
		if len(o.order) != len(want) {
			t.Fatalf("round %d: order holds %d keys, want %d", r, len(o.order), len(want))
		}
		for i, e := range o.order {
			if got := o.arena[e.at : e.at+int(e.n)]; int(e.kg) != want[i].kg || !bytes.Equal(got, want[i].enc) {
				t.Fatalf("round %d: key %d of the order is %x in group %d, want %x in group %d", r, i, got, e.kg, want[i].enc, want[i].kg)
			}
		}
	}
}

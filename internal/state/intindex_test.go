package state

import (
	"bytes"
	"io"
	"math/rand"
	"reflect"
	"testing"
)

// TestIntKeysManyAndNegative drives the int64 fast index through growth with keys of every sign and size.
func TestIntKeysManyAndNegative(t *testing.T) {
	b, err := NewHeap(Options[int64]{MaxParallelism: 1, KeyGroupStart: 0, KeyGroupEnd: 0})
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewValue[int64](b, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(3))
	want := map[int64]int64{}
	for i := 0; i < 50000; i++ {
		k := rng.Int63n(20000) - 10000
		if i%7 == 0 {
			k = rng.Int63() - rng.Int63()
		}
		b.SetCurrentKey(k)
		n, _ := v.Value()
		v.Update(n + 1)
		want[k]++
	}
	for k, w := range want {
		b.SetCurrentKey(k)
		if got, ok := v.Value(); !ok || got != w {
			t.Fatalf("key %d = %d, want %d", k, got, w)
		}
	}
}

// TestPairKeysAgainstAMap drives the heap backend with struct keys of two integers (the pair index)
// through growth and deletes (keys whose state is cleared free their slots) against a map.
func TestPairKeysAgainstAMap(t *testing.T) {
	type pair struct{ A, B int64 }
	b, err := NewHeap(Options[pair]{MaxParallelism: 1, KeyGroupStart: 0, KeyGroupEnd: 0})
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewValue[int64](b, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(5))
	want := map[pair]int64{}
	for i := 0; i < 200000; i++ {
		k := pair{rng.Int63n(300) - 150, rng.Int63n(100)}
		if i%5 == 0 {
			k = pair{rng.Int63() - rng.Int63(), -rng.Int63()}
		}
		b.SetCurrentKey(k)
		if i%3 == 0 {
			v.Clear()
			delete(want, k)
			continue
		}
		n, _ := v.Value()
		v.Update(n + 1)
		want[k]++
	}
	got := map[pair]int64{}
	if err := b.ForEachKey(func(k pair) error {
		got[k], _ = v.Value()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys with state, want %d", len(got), len(want))
	}
	for k, w := range want {
		b.SetCurrentKey(k)
		if n, ok := v.Value(); !ok || n != w || got[k] != w {
			t.Fatalf("key %v = %d (%d in ForEachKey), want %d", k, n, got[k], w)
		}
	}
}

// TestIntWords is how many integer words a key type is: keys of one get the int index, of two the pair
// index, whatever their type's name.
func TestIntWords(t *testing.T) {
	type id int64
	type pair struct{ A, B int64 }
	type nested struct {
		A uint64
		B struct{ C id }
	}
	type small struct {
		A int32
		B int64
	}
	type blank struct{ A, _ int64 }
	type float struct {
		A float64
		B int64
	}
	for _, tc := range []struct {
		t    reflect.Type
		want int
	}{
		{reflect.TypeFor[int64](), 1},
		{reflect.TypeFor[uint](), 1},
		{reflect.TypeFor[id](), 1},
		{reflect.TypeFor[struct{ A id }](), 1},
		{reflect.TypeFor[pair](), 2},
		{reflect.TypeFor[[2]uint64](), 2},
		{reflect.TypeFor[nested](), 2},
		{reflect.TypeFor[[3]int64](), 3},
		{reflect.TypeFor[int32](), 0},
		{reflect.TypeFor[small](), 0},
		{reflect.TypeFor[blank](), 0},
		{reflect.TypeFor[float](), 0},
		{reflect.TypeFor[float64](), 0},
		{reflect.TypeFor[string](), 0},
		{reflect.TypeFor[*int64](), 0},
		{reflect.TypeFor[struct{}](), 0},
	} {
		if got := intWords(tc.t); got != tc.want {
			t.Errorf("intWords(%v) = %d, want %d", tc.t, got, tc.want)
		}
	}
}

// TestNamedIntKeysAreIndexed: a key type defined on an integer, or a struct of one, gets the int index; a
// struct of two, the pair index.
func TestNamedIntKeysAreIndexed(t *testing.T) {
	type auctionID int64
	type wrapped struct{ ID uint64 }
	a, err := NewHeap(Options[auctionID]{MaxParallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewHeap(Options[wrapped]{MaxParallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewHeap(Options[struct{ A, B int64 }]{MaxParallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a.(*heapBackend[auctionID]).idx.ints == nil || w.(*heapBackend[wrapped]).idx.ints == nil {
		t.Fatal("a named integer key type is not in the int index")
	}
	if s.(*heapBackend[struct{ A, B int64 }]).idx.pairs == nil {
		t.Fatal("a key of two integers is not in the pair index")
	}
}

// TestPairIndexAgainstAMap drives the pair index through inserts, updates and deletes against a Go map,
// over key sets that split segments and double the directory many times: runs of consecutive first
// words, a grid of small pairs, and random pairs, each with half its keys deleted and put back.
func TestPairIndexAgainstAMap(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  func(i int, rng *rand.Rand) [2]uint64
	}{
		{"runs", func(i int, _ *rand.Rand) [2]uint64 { return [2]uint64{uint64(i), 20551} }},
		{"grid", func(i int, _ *rand.Rand) [2]uint64 { return [2]uint64{uint64(i % 150), uint64(i / 150)} }},
		{"random", func(_ int, rng *rand.Rand) [2]uint64 { return [2]uint64{rng.Uint64(), rng.Uint64() % 7} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(11))
			x := newPairIndex()
			want := map[[2]uint64]int32{}
			var keys [][2]uint64
			check := func(stage string) {
				t.Helper()
				if x.n != len(want) {
					t.Fatalf("%s: %d entries, want %d", stage, x.n, len(want))
				}
				for k, w := range want {
					if s, ok := x.get(k); !ok || s != w {
						t.Fatalf("%s: get(%v) = %d, %v; want %d", stage, k, s, ok, w)
					}
				}
				for _, k := range keys {
					_, in := want[k]
					if _, ok := x.get(k); ok != in {
						t.Fatalf("%s: get(%v) found %v, want %v", stage, k, ok, in)
					}
				}
			}
			for i := range 30000 {
				k := tc.key(i, rng)
				keys = append(keys, k)
				x.put(k, int32(i))
				want[k] = int32(i)
			}
			if x.depth < 4 {
				t.Fatalf("directory depth %d after 30,000 keys: the segments did not split", x.depth)
			}
			check("inserted")
			for i, k := range keys {
				if i%2 == 0 {
					x.del(k)
					delete(want, k)
				} else {
					x.put(k, int32(i)+1e6) // slots are never negative
					want[k] = int32(i) + 1e6
				}
			}
			check("half deleted")
			for i, k := range keys {
				if i%4 == 0 {
					x.put(k, int32(i))
					want[k] = int32(i)
				}
			}
			check("some put back")
			for _, s := range x.dir {
				if s.depth > x.depth || s.n > pairSegMax {
					t.Fatalf("segment of depth %d (directory %d) with %d entries", s.depth, x.depth, s.n)
				}
			}
		})
	}
}

// TestPairKeysRestore: a snapshot of a backend keyed by pairs restores, into heap and pebble backends, with
// every key found again through the restored pair index.
func TestPairKeysRestore(t *testing.T) {
	type pair struct{ A, B int64 }
	o := Options[pair]{MaxParallelism: 4, KeyGroupStart: 0, KeyGroupEnd: 3}
	b, err := NewHeap(o)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewValue[int64](b, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(5000) {
		b.SetCurrentKey(pair{i / 7, i % 7})
		v.Update(i)
	}
	write, err := b.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	for _, mk := range []func(Options[pair]) (KeyedBackend[pair], error){NewHeap[pair], NewPebble[pair]} {
		o2 := o
		o2.Dir = t.TempDir()
		b2, err := mk(o2)
		if err != nil {
			t.Fatal(err)
		}
		v2, err := NewValue[int64](b2, "v", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b2.Restore([]io.Reader{bytes.NewReader(buf.Bytes())}); err != nil {
			t.Fatal(err)
		}
		for i := range int64(5000) {
			b2.SetCurrentKey(pair{i / 7, i % 7})
			if got, ok := v2.Value(); !ok || got != i {
				t.Fatalf("%T: key %v = %d, %v after restore; want %d", b2, pair{i / 7, i % 7}, got, ok, i)
			}
		}
		if hb, ok := b2.(*heapBackend[pair]); ok && hb.idx.len() != 5000 {
			t.Fatalf("restored pair index holds %d keys, want 5000", hb.idx.len())
		}
		b2.Close()
	}
}

package state

import (
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

// TestPairKeysAgainstAMap drives the heap backend with struct keys of two integers through growth and
// deletes (keys whose state is cleared free their slots) against a map.
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

// TestIntWords is how many integer words a key type is: keys of one get the int index, whatever their
// type's name.
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

// TestNamedIntKeysAreIndexed: a key type defined on an integer, or a struct of one, gets the int index.
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
	if s.(*heapBackend[struct{ A, B int64 }]).idx.slots == nil {
		t.Fatal("a key of two integers is not in the Go map")
	}
}

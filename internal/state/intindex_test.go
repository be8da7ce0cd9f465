package state

import (
	"math/rand"
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

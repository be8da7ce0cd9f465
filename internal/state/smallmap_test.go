package state

import (
	"maps"
	"math/rand/v2"
	"testing"
)

// TestSmallMapAgainstAMap runs random sets, deletes and clones on a smallMap and a Go map over key ranges
// that stay in the slice, cross smallMapMax and stay beyond it: after every step both hold the same
// entries, and a clone taken earlier still holds what the map held then.
func TestSmallMapAgainstAMap(t *testing.T) {
	for _, keys := range []int{3, smallMapMax, smallMapMax + 1, 40} {
		rng := rand.New(rand.NewPCG(uint64(keys), 7))
		var s smallMap[int, int]
		model := map[int]int{}
		var frozen smallMap[int, int]
		var frozenModel map[int]int
		for step := range 5000 {
			k := rng.IntN(keys)
			switch op := rng.IntN(10); {
			case op < 6:
				s.set(k, step)
				model[k] = step
			case op < 9:
				_, had := model[k]
				if got := s.del(k); got != had {
					t.Fatalf("%d keys, step %d: del(%d) = %v, want %v", keys, step, k, got, had)
				}
				delete(model, k)
			default:
				frozen, frozenModel = s.clone(), maps.Clone(model)
			}
			if got := maps.Collect(s.all); !maps.Equal(got, model) || s.len() != len(model) {
				t.Fatalf("%d keys, step %d: holds %v (len %d), want %v", keys, step, got, s.len(), model)
			}
			for k := range keys {
				v, ok := s.get(k)
				if w, wok := model[k]; v != w || ok != wok {
					t.Fatalf("%d keys, step %d: get(%d) = %d, %v; want %d, %v", keys, step, k, v, ok, w, wok)
				}
			}
			if frozenModel != nil && !maps.Equal(maps.Collect(frozen.all), frozenModel) {
				t.Fatalf("%d keys, step %d: a clone changed with the map", keys, step)
			}
		}
	}
	var nilMap *smallMap[int, int]
	if _, ok := nilMap.get(1); ok || nilMap.len() != 0 || !nilMap.isNil() {
		t.Fatal("a nil smallMap does not read as empty")
	}
}

// BenchmarkMapGetPut is a map state's Get and Put on the heap backend: "windows", 1024 keys with 3 map
// keys each (a window operator's few windows per key); "distinct", one key whose map holds up to a
// million map keys (q16's distinct bidders of a day).
func BenchmarkMapGetPut(b *testing.B) {
	for _, tc := range []struct {
		name          string
		keys, mapKeys int64
	}{{"windows", 1024, 3}, {"distinct", 1, 1 << 20}} {
		b.Run(tc.name, func(b *testing.B) {
			kb, err := NewHeap[int64](Options[int64]{MaxParallelism: 128, KeyGroupEnd: 127})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { kb.Close() })
			m, err := NewMap[int64, int64](kb, "m", nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				kb.SetCurrentKey(int64(i) % tc.keys)
				mk := rng.Int64N(tc.mapKeys)
				v, _ := m.Get(mk)
				m.Put(mk, v+1)
			}
		})
	}
}

// TestSmallMapRangeWhileChanging changes the map from the function all calls, as a Go map's range allows:
// removing the entry in hand, one already yielded and one not reached yet, updating one not reached, and
// adding one. Every entry neither removed nor added is yielded once, with its value when reached; a
// removed one not reached is not yielded.
func TestSmallMapRangeWhileChanging(t *testing.T) {
	var s smallMap[int, int]
	for k := range 6 {
		s.set(k, k*10)
	}
	got := map[int]int{}
	for k, v := range s.all {
		if _, dup := got[k]; dup {
			t.Fatalf("key %d yielded twice", k)
		}
		got[k] = v
		if k == 2 {
			s.del(2) // in hand
			s.del(0) // yielded already
			s.del(4) // not reached
			s.set(5, 55)
			s.set(9, 90)
		}
	}
	delete(got, 9) // added during the range: either way
	if want := map[int]int{0: 0, 1: 10, 2: 20, 3: 30, 5: 55}; !maps.Equal(got, want) {
		t.Fatalf("yielded %v, want %v", got, want)
	}
}

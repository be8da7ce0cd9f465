package state

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
)

// TestSmallMapAgainstAMap runs random sets, deletes and clones on a smallMap and a Go map over key ranges
// that stay in the slice, cross smallMapMax and stay beyond it: after every step both hold the same
// entries, and a clone taken earlier still holds what the map held then. Integer keys grow into the flat
// table, others into a Go map.
func TestSmallMapAgainstAMap(t *testing.T) {
	for _, keys := range []int{3, smallMapMax, smallMapMax + 1, 40, 700} {
		t.Run(fmt.Sprintf("int/%d", keys), func(t *testing.T) {
			checkSmallMapAgainstAMap(t, keys, func(i int) int { return i*7919 - 3000 })
			var s smallMap[int, int]
			for k := range keys {
				s.set(k, k)
			}
			if (s.flat != nil) != (keys > smallMapMax) || s.m != nil {
				t.Fatalf("%d int keys: flat map %v, Go map %v", keys, s.flat != nil, s.m != nil)
			}
		})
		t.Run(fmt.Sprintf("string/%d", keys), func(t *testing.T) {
			checkSmallMapAgainstAMap(t, keys, strconv.Itoa)
		})
	}
	var nilMap *smallMap[int, int]
	if _, ok := nilMap.get(1); ok || nilMap.len() != 0 || !nilMap.isNil() {
		t.Fatal("a nil smallMap does not read as empty")
	}
}

// checkSmallMapAgainstAMap is TestSmallMapAgainstAMap over the keys key(0) … key(keys-1).
func checkSmallMapAgainstAMap[K comparable](t *testing.T, keys int, key func(int) K) {
	rng := rand.New(rand.NewPCG(uint64(keys), 7))
	var s smallMap[K, int]
	model := map[K]int{}
	var frozen smallMap[K, int]
	var frozenModel map[K]int
	steps := max(5000, 20*keys)
	for step := range steps {
		k := key(rng.IntN(keys))
		switch op := rng.IntN(10); {
		case op < 6:
			s.set(k, step)
			model[k] = step
		case op < 9:
			_, had := model[k]
			if got := s.del(k); got != had {
				t.Fatalf("step %d: del(%v) = %v, want %v", step, k, got, had)
			}
			delete(model, k)
		default:
			frozen, frozenModel = s.clone(), maps.Clone(model)
		}
		if step%max(1, keys/40) != 0 && step != steps-1 {
			continue // large ranges: check every so often, and at the end
		}
		if got := maps.Collect(s.all); !maps.Equal(got, model) || s.len() != len(model) {
			t.Fatalf("step %d: holds %v (len %d), want %v", step, got, s.len(), model)
		}
		for i := range keys {
			v, ok := s.get(key(i))
			if w, wok := model[key(i)]; v != w || ok != wok {
				t.Fatalf("step %d: get(%v) = %d, %v; want %d, %v", step, key(i), v, ok, w, wok)
			}
		}
		if frozenModel != nil && !maps.Equal(maps.Collect(frozen.all), frozenModel) {
			t.Fatalf("step %d: a clone changed with the map", step)
		}
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
// The flat table (more than smallMapMax integer keys) is ranged over in its own order, so the keys the
// function changes are chosen by the order of the range; the table's copy is checked by a nested range,
// which changes the map too, and by the table staying as it was after the ranges end.
func TestSmallMapRangeWhileChanging(t *testing.T) {
	for _, n := range []int{6, 3 * smallMapMax} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var s smallMap[int, int]
			for k := range n {
				s.set(k, k*10)
			}
			var order []int
			for k := range s.all {
				order = append(order, k)
			}
			hand, before, after, updated := order[2], order[0], order[4], order[5]
			added := []int{100, 101, 102, 103, 104, 105, 106, 107, 108} // enough to grow the flat table
			got := map[int]int{}
			for k, v := range s.all {
				if _, dup := got[k]; dup {
					t.Fatalf("key %d yielded twice", k)
				}
				got[k] = v
				if k == hand {
					s.del(hand)
					s.del(before)
					s.del(after)
					s.set(updated, -1)
					inner := 0
					for range s.all {
						inner++
						s.set(added[0], 1) // a change within the nested range, which must not disturb it
					}
					if inner != n-3 {
						t.Fatalf("the nested range yielded %d entries, want %d", inner, n-3)
					}
					for _, a := range added {
						s.set(a, a)
					}
				}
			}
			for _, a := range added {
				delete(got, a) // added during the range: either way
			}
			want := map[int]int{}
			for k := range n {
				want[k] = k * 10
			}
			delete(want, after)
			want[updated] = -1
			if !maps.Equal(got, want) {
				t.Fatalf("yielded %v, want %v", got, want)
			}
			if f := s.flat; f != nil && (f.shared || f.iters != 0) {
				t.Fatalf("after the ranges: shared %v, %d iterations", f.shared, f.iters)
			}
			if s.len() != n-3+len(added) {
				t.Fatalf("len %d after the range, want %d", s.len(), n-3+len(added))
			}
		})
	}
}

// TestLargeIntMapsInSnapshots: map state whose keys' maps grew into flat maps is written whole by a
// snapshot, byte for byte as the pebble backend writes the same entries, and ranges and changes made while
// the snapshot is written (in place, through growth, by deletes and clears) neither race with the writer
// nor leak into it.
func TestLargeIntMapsInSnapshots(t *testing.T) {
	fill := func(b KeyedBackend[string], m MapState[int64, int64]) {
		for k := range 5 {
			b.SetCurrentKey(fmt.Sprintf("key-%d", k))
			for i := range int64(10 + 40*k) {
				m.Put(i*3-20, i+int64(k))
			}
		}
	}
	dumpMaps := func(b KeyedBackend[string], m MapState[int64, int64]) map[string]map[int64]int64 {
		out := map[string]map[int64]int64{}
		for k := range 5 {
			key := fmt.Sprintf("key-%d", k)
			b.SetCurrentKey(key)
			got := map[int64]int64{}
			m.Range(func(mk, v int64) bool {
				got[mk] = v
				return true
			})
			out[key] = got
		}
		return out
	}
	var snaps [][]byte
	var want map[string]map[int64]int64
	for _, src := range backendKinds {
		b := open(t, src.make, fullRange(8))
		m, err := NewMap[int64, int64](b, "m", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		fill(b, m)
		if want = dumpMaps(b, m); len(want["key-4"]) != 170 {
			t.Fatalf("%s: %d entries under key-4, want 170", src.name, len(want["key-4"]))
		}
		write, err := b.Snapshot(3)
		if err != nil {
			t.Fatal(err)
		}
		buf, wait := writeConcurrently(t, write)
		for k := range 5 {
			b.SetCurrentKey(fmt.Sprintf("key-%d", k))
			// A range on the task goroutine while the writer ranges over the same maps (the race
			// detector watches: neither may write the map to range over it).
			m.Range(func(int64, int64) bool { return true })
			switch k {
			case 0, 1:
				m.Put(-20, -1) // in place
			case 2:
				for i := range int64(500) {
					m.Put(1000+i, i) // grows the table
				}
			case 3:
				for i := range int64(60) {
					m.Remove(i*3 - 20) // shifts entries back
				}
			case 4:
				m.Clear()
			}
		}
		wait()
		snaps = append(snaps, buf.Bytes())
		for _, dst := range backendKinds {
			b2 := open(t, dst.make, fullRange(8))
			m2, err := NewMap[int64, int64](b2, "m", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := restore(b2, buf.Bytes()); err != nil {
				t.Fatal(err)
			}
			if got := dumpMaps(b2, m2); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s restored into %s: the maps differ from what they held at Snapshot", src.name, dst.name)
			}
		}
	}
	if !bytes.Equal(snaps[0], snaps[1]) {
		t.Fatalf("heap and pebble snapshots of equal maps differ (%d and %d bytes)", len(snaps[0]), len(snaps[1]))
	}
}

package state

import (
	"bytes"
	"io"
	"math/rand"
	"reflect"
	"testing"
)

// heapOf returns the heap backend under b.
func heapOf[K comparable](t testing.TB, b KeyedBackend[K]) *heapBackend[K] {
	t.Helper()
	hb, ok := b.(*heapBackend[K])
	if !ok {
		t.Fatalf("%T is not the heap backend", b)
	}
	return hb
}

// liveSlots returns the heap backend's slots in use.
func liveSlots[K comparable](hb *heapBackend[K]) int { return len(hb.keys) - len(hb.free) }

// indexedKeys is the number of keys in hb's slot index.
func indexedKeys[K comparable](hb *heapBackend[K]) int { return hb.idx.len() }

// TestHeapSlotsFreed: a key's slot is freed once its last state of any kind, or its last timer, is gone,
// not before, and never while the key is current (a function may Clear and then Update the same key): at
// the latest when the next new key needs a slot, which then reuses it; freed slots are skipped by
// ForEachKey, and what they held is gone.
func TestHeapSlotsFreed(t *testing.T) {
	type handles struct {
		v  ValueState[int64]
		l  ListState[int64]
		m  MapState[int64, int64]
		lm ListMapState[int64, int64]
		tm Timers
	}
	cases := []struct {
		name  string
		set   func(h *handles)
		clear func(h *handles)
	}{
		{"value", func(h *handles) { h.v.Update(1) }, func(h *handles) { h.v.Clear() }},
		{"list add and clear", func(h *handles) { h.l.Add(1); h.l.Add(2) }, func(h *handles) { h.l.Clear() }},
		{"list update to empty", func(h *handles) { h.l.Update([]int64{1}) }, func(h *handles) { h.l.Update(nil) }},
		{"map remove last", func(h *handles) { h.m.Put(1, 1); h.m.Put(2, 2) }, func(h *handles) { h.m.Remove(1); h.m.Remove(2) }},
		{"map clear", func(h *handles) { h.m.Put(1, 1) }, func(h *handles) { h.m.Clear() }},
		{"list map", func(h *handles) { h.lm.Append(1, 1); h.lm.Append(2, 1) }, func(h *handles) { h.lm.Remove(1); h.lm.Clear() }},
		{"timer deleted", func(h *handles) { h.tm.Register(5, Namespace{}) }, func(h *handles) { h.tm.Delete(5, Namespace{}) }},
		{"every kind", func(h *handles) {
			h.v.Update(1)
			h.l.Add(1)
			h.m.Put(1, 1)
			h.lm.Append(1, 1)
			h.tm.Register(1, Namespace{})
			h.tm.Register(2, Namespace{})
		}, func(h *handles) {
			h.v.Clear()
			h.l.Clear()
			h.m.Clear()
			h.lm.Clear()
			h.tm.Delete(1, Namespace{})
			h.tm.Delete(2, Namespace{})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kb, err := NewHeap(Options[int64]{MaxParallelism: 8, KeyGroupEnd: 7})
			if err != nil {
				t.Fatal(err)
			}
			defer kb.Close()
			hb := heapOf(t, kb)
			var h handles
			h.v, _ = NewValue[int64](kb, "v", nil)
			h.l, _ = NewList[int64](kb, "l", nil)
			h.m, _ = NewMap[int64, int64](kb, "m", nil, nil)
			h.lm, _ = NewListMap[int64, int64](kb, "lm", nil, nil)
			if h.tm, err = NewTimers[int64](Engine(kb), "\x00timers/event"); err != nil {
				t.Fatal(err)
			}
			kb.SetCurrentKey(1)
			tc.set(&h)
			kb.SetCurrentKey(2)
			tc.set(&h)
			tc.clear(&h) // key 2 is current: its slot stays
			if liveSlots(hb) != 2 {
				t.Fatalf("%d live slots after clearing the current key, want 2", liveSlots(hb))
			}
			tc.set(&h) // Clear then Update the same key
			if got := keysOfInt(t, kb); !reflect.DeepEqual(got, []int64{1, 2}) {
				t.Fatalf("keys %v", got)
			}
			tc.clear(&h)
			kb.SetCurrentKey(1) // known keys cost no check: key 2's slot waits for the next new key
			if _, ok := hb.lookup(2); !ok || liveSlots(hb) != 2 {
				t.Fatalf("key 2 freed before a new key needed a slot: %d live slots", liveSlots(hb))
			}
			if got := keysOfInt(t, kb); !reflect.DeepEqual(got, []int64{1}) {
				t.Fatalf("keys %v after clearing 2", got)
			}
			kb.SetCurrentKey(3) // a new key: frees key 2's slot and reuses it, which holds nothing of key 2
			if _, ok := hb.lookup(2); ok {
				t.Fatal("cleared key 2 still has a slot")
			}
			if len(hb.keys) != 2 || len(hb.free) != 0 || liveSlots(hb) != 2 {
				t.Fatalf("slot not reused: %d slots, %d free", len(hb.keys), len(hb.free))
			}
			if _, ok := h.v.Value(); ok || h.l.Get() != nil || h.m.Len() != 0 || h.lm.Len() != 0 {
				t.Fatal("a reused slot shows its old key's state")
			}
			kb.SetCurrentKey(1)
			tc.clear(&h)
			kb.SetCurrentKey(4) // frees 1 (left without state) and 3 (only ever read)
			h.v.Value()
			kb.SetCurrentKey(5) // frees 4
			if liveSlots(hb) != 1 || hb.refs[hb.cur] != 0 || indexedKeys(hb) != 1 {
				t.Fatalf("%d live slots, %d indexed keys with only the current key, refs %d", liveSlots(hb), indexedKeys(hb), hb.refs[hb.cur])
			}
			if got := keysOfInt(t, kb); len(got) != 0 {
				t.Fatalf("keys %v with no state", got)
			}
		})
	}
}

func keysOfInt(t testing.TB, b KeyedBackend[int64]) []int64 {
	t.Helper()
	var keys []int64
	if err := b.ForEachKey(func(k int64) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestRollingKeysStayFlat drives many keys through both backends, each key set (value, map, list map and an
// event timer) and cleared when its timer fires a window later, with snapshots along the way: the heap
// never holds more slots (and its snapshot order cache no more entries) than the peak of live keys, the
// pebble store no more keys, and every snapshot restores to exactly the live keys of its moment.
func TestRollingKeysStayFlat(t *testing.T) {
	const live = 64
	for _, tc := range []struct {
		name string
		make func(Options[int64]) (KeyedBackend[int64], error)
		keys int
	}{
		{"heap", NewHeap[int64], 300_000},
		{"pebble", NewPebble[int64], 20_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() {
				tc.keys /= 10
			}
			kb, err := tc.make(Options[int64]{MaxParallelism: 128, KeyGroupEnd: 127, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer kb.Close()
			v, _ := NewValue[int64](kb, "v", nil)
			m, _ := NewMap[int64, int64](kb, "m", nil, nil)
			lm, _ := NewListMap[int64, int64](Engine(kb), "\x00window/elems", nil, nil)
			tm, err := NewTimers[int64](Engine(kb), "\x00timers/event")
			if err != nil {
				t.Fatal(err)
			}
			clearKey := func(int64, Namespace) error {
				v.Clear()
				m.Clear()
				lm.Clear()
				return nil
			}
			hb, _ := kb.(*heapBackend[int64])
			for i := range int64(tc.keys) {
				kb.SetCurrentKey(i)
				v.Update(i)
				if i%5 == 0 {
					m.Put(1, i)
				}
				if i%3 == 0 {
					lm.Append(i, i)
				}
				tm.Register(i+live, Namespace{})
				// Key i-live's timer is due: it clears that key.
				if err := tm.FireUpTo(i, clearKey); err != nil {
					t.Fatal(err)
				}
				if hb != nil && liveSlots(hb) > live+1 {
					t.Fatalf("key %d: %d live slots (%d allocated), live peak %d", i, liveSlots(hb), len(hb.keys), live+1)
				}
				if hb != nil && len(hb.keys) > live+2 {
					t.Fatalf("key %d: %d slots allocated for a live peak of %d", i, len(hb.keys), live+1)
				}
				if i%int64(tc.keys/6) == int64(tc.keys/12) {
					checkRollingSnapshot(t, kb, v, tm, i, live)
					if hb != nil && len(hb.order.order) > live+2 {
						t.Fatalf("snapshot order cache holds %d entries for %d live keys", len(hb.order.order), live+1)
					}
				}
			}
			if err := tm.FireUpTo(int64(tc.keys)+live, clearKey); err != nil {
				t.Fatal(err)
			}
			kb.SetCurrentKey(-1)
			if n := len(keysOfInt(t, kb)); n != 0 || tm.Len() != 0 {
				t.Fatalf("%d keys with state and %d timers after clearing every key", n, tm.Len())
			}
			if hb != nil && (liveSlots(hb) != 1 || indexedKeys(hb) != 1) {
				t.Fatalf("%d live slots, %d indexed keys after clearing every key (only the current one should be)", liveSlots(hb), indexedKeys(hb))
			}
		})
	}
}

// checkRollingSnapshot snapshots kb at key i and restores the snapshot into a fresh heap backend: it holds
// exactly the keys (i-live, i] with their values and timers.
func checkRollingSnapshot(t *testing.T, kb KeyedBackend[int64], v ValueState[int64], tm Timers, i int64, live int) {
	t.Helper()
	write, err := kb.Snapshot(i)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	r, err := NewHeap(Options[int64]{MaxParallelism: 128, KeyGroupEnd: 127})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rv, _ := NewValue[int64](r, "v", nil)
	rt, _ := NewTimers[int64](Engine(r), "\x00timers/event")
	if err := r.Restore([]io.Reader{&buf}); err != nil {
		t.Fatal(err)
	}
	keys := keysOfInt(t, r)
	if len(keys) != live {
		t.Fatalf("snapshot at key %d restored %d keys, want %d", i, len(keys), live)
	}
	for _, k := range keys {
		r.SetCurrentKey(k)
		if got, ok := rv.Value(); k <= i-int64(live) || k > i || !ok || got != k {
			t.Fatalf("snapshot at key %d restored key %d with value %d, %v", i, k, got, ok)
		}
	}
	if next, ok := rt.Next(); rt.Len() != live || !ok || next != i+1 {
		t.Fatalf("snapshot at key %d restored %d timers, the earliest at %d", i, rt.Len(), next)
	}
	if tm.Len() != live {
		t.Fatalf("%d timers live at key %d, want %d", tm.Len(), i, live)
	}
	_ = v
}

// TestIntIndexDelete drives the int64 index through inserts, updates and deletions (backward shift) in a
// table small enough for probe runs to wrap around, against a Go map.
func TestIntIndexDelete(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keys  uint64 // keys are drawn from [0, keys)
		steps int
	}{
		{"dense", 48, 20000},
		{"sparse", 1 << 40, 20000},
		{"few", 4, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(int64(tc.keys)))
			x := newIntIndex()
			want := map[uint64]int32{}
			for step := range tc.steps {
				k := rng.Uint64() % tc.keys
				if tc.keys == 1<<40 && step%2 == 0 && len(want) > 0 {
					for w := range want { // delete present keys often
						k = w
						break
					}
				}
				switch rng.Intn(3) {
				case 0, 1:
					if _, ok := want[k]; !ok || rng.Intn(2) == 0 {
						s := int32(step)
						x.put(k, s)
						want[k] = s
					}
				case 2:
					x.del(k)
					delete(want, k)
				}
				if x.n != len(want) {
					t.Fatalf("step %d: %d entries, want %d", step, x.n, len(want))
				}
				if step%97 == 0 {
					for wk, ws := range want {
						if s, ok := x.get(wk); !ok || s != ws {
							t.Fatalf("step %d: get(%d) = %d, %v; want %d", step, wk, s, ok, ws)
						}
					}
					for range 8 {
						k := rng.Uint64() % tc.keys
						_, in := want[k]
						if _, ok := x.get(k); ok != in {
							t.Fatalf("step %d: get(%d) found %v, want %v", step, k, ok, in)
						}
					}
				}
			}
		})
	}
}

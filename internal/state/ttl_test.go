package state

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/runnel-dev/runnel/codec"
)

// ttlHandle drives one TTL state of any kind the same way: write stores v (value: Update; list: Add; map:
// Put under mk), read returns what is live (value: [v]; list: the list; map: the values in map key order).
type ttlHandle struct {
	write func(mk string, v int64)
	read  func() []int64
}

// ttlKinds are the state kinds TestTTL runs; last says that the kind keeps only the last write (value
// state), so that its expectation is the last of the list's.
var ttlKinds = []struct {
	name    string
	last    bool
	declare func(b Backend, name string, ttl TTL) (ttlHandle, error)
}{
	{"value", true, func(b Backend, name string, ttl TTL) (ttlHandle, error) {
		s, err := NewValue[int64](WithTTL(b, ttl), name, nil)
		if err != nil {
			return ttlHandle{}, err
		}
		return ttlHandle{
			write: func(_ string, v int64) { s.Update(v) },
			read: func() []int64 {
				if v, ok := s.Value(); ok {
					return []int64{v}
				}
				return nil
			},
		}, nil
	}},
	{"list", false, func(b Backend, name string, ttl TTL) (ttlHandle, error) {
		s, err := NewList[int64](WithTTL(b, ttl), name, nil)
		if err != nil {
			return ttlHandle{}, err
		}
		return ttlHandle{
			write: func(_ string, v int64) { s.Add(v) },
			read:  func() []int64 { return slices.Clone(s.Get()) },
		}, nil
	}},
	{"map", false, func(b Backend, name string, ttl TTL) (ttlHandle, error) {
		s, err := NewMap[string, int64](WithTTL(b, ttl), name, nil, nil)
		if err != nil {
			return ttlHandle{}, err
		}
		return ttlHandle{
			write: func(mk string, v int64) { s.Put(mk, v) },
			read: func() []int64 {
				var mks []string
				s.Range(func(mk string, _ int64) bool { mks = append(mks, mk); return true })
				slices.Sort(mks)
				var out []int64
				for _, mk := range mks {
					// Get after Range: the two reads see the same entries (Range removed none that Get
					// would return), and both refresh under RefreshOnRead.
					v, ok := s.Get(mk)
					if !ok {
						panic(fmt.Sprintf("map entry %q ranged over but not found", mk))
					}
					out = append(out, v)
				}
				if n := s.Len(); n != len(out) {
					panic(fmt.Sprintf("Len %d, ranged over %d", n, len(out)))
				}
				return out
			},
		}, nil
	}},
}

// manualClock is a processing-time clock the test moves.
type manualClock struct{ ms int64 }

func (c *manualClock) now() int64 { return c.ms }

// openTTL opens a backend of kind bk on the clock and declares the TTL state "s" of kind sk.
func openTTL(t *testing.T, bk, sk int, clock *manualClock, ttl TTL) (KeyedBackend[string], ttlHandle) {
	t.Helper()
	o := fullRange(16)
	o.Now = clock.now
	b := open(t, backendKinds[bk].make, o)
	h, err := ttlKinds[sk].declare(b, "s", ttl)
	if err != nil {
		t.Fatal(err)
	}
	b.SealDeclarations()
	return b, h
}

// storeEntries counts a pebble backend's store keys.
func storeEntries(t *testing.T, b KeyedBackend[string]) int {
	t.Helper()
	pb := b.(*pebbleBackend[string])
	it, err := pb.db.NewIter(&pebble.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		t.Fatal(err)
	}
	return n
}

// live returns what the state holds: live heap slots, or pebble store keys.
func live(t *testing.T, b KeyedBackend[string]) int {
	if hb, ok := b.(*heapBackend[string]); ok {
		return liveSlots(hb)
	}
	return storeEntries(t, b)
}

// snapshotKeys returns the keys and TTL flags a snapshot holds.
func snapshotKeys(t *testing.T, snap []byte) (keys []string, flags byte) {
	t.Helper()
	g := keyGroups{maxP: 16, start: 0, end: 15}
	kc, err := codec.For[string]()
	if err != nil {
		t.Fatal(err)
	}
	err = readSnapshot(bytes.NewReader(snap), g, func(h *snapHeader) error {
		for _, s := range h.states {
			flags |= s.flags
		}
		return nil
	}, func(e *snapEntry) error {
		var k string
		if err := kc.Decode(e.key, &k); err != nil {
			return err
		}
		keys = append(keys, k)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys, flags
}

// TestTTL: on both backends, for value, list and map state, in both update modes: an entry is not
// returned once its time to live has passed since its last write (or read, under RefreshOnRead); a
// snapshot leaves expired entries out and marks the state; a restore onto either backend keeps each
// entry's remaining time to live (and drops entries that expired in between); a state restored with a
// different TTL setting fails, naming it; Sweep clears expired entries within its budget and frees
// their heap slots; states without TTL are unaffected by the clock.
func TestTTL(t *testing.T) {
	const ttlMs = 100
	for bk, bkind := range backendKinds {
		for sk, skind := range ttlKinds {
			for _, onRead := range []bool{false, true} {
				ttl := TTL{TTL: ttlMs * time.Millisecond, RefreshOnRead: onRead}
				t.Run(fmt.Sprintf("%s/%s/refreshOnRead=%v", bkind.name, skind.name, onRead), func(t *testing.T) {
					want := func(vs ...int64) []int64 {
						if skind.last && len(vs) > 0 {
							return vs[len(vs)-1:]
						}
						return vs
					}
					t.Run("expiry", func(t *testing.T) {
						clock := &manualClock{ms: 1000}
						b, h := openTTL(t, bk, sk, clock, ttl)
						b.SetCurrentKey("k")
						h.write("x", 1)
						clock.ms = 1060
						h.write("y", 2)
						steps := []struct {
							at           int64
							create, read []int64
						}{
							{1090, want(1, 2), want(1, 2)},
							{1120, want(2), want(1, 2)}, // x written at 1000; read at 1090 under RefreshOnRead
							{1200, nil, want(1, 2)},     // y written at 1060; read at 1120
							{1300, nil, nil},            // read at 1200, 100ms ago
						}
						for _, st := range steps {
							clock.ms = st.at
							exp := st.create
							if onRead {
								exp = st.read
							}
							if got := h.read(); !slices.Equal(got, exp) {
								t.Fatalf("at %d: read %v, want %v", st.at, got, exp)
							}
						}
						b.SetCurrentKey("other") // leaves "k", whose expired state the reads cleared
						if n := live(t, b); n > 1 {
							t.Errorf("%d slots or store keys live after the only key's state expired", n)
						}
					})

					t.Run("snapshot and restore", func(t *testing.T) {
						clock := &manualClock{ms: 1000}
						b, h := openTTL(t, bk, sk, clock, ttl)
						b.SetCurrentKey("a")
						h.write("x", 1)
						clock.ms = 1080
						b.SetCurrentKey("b")
						h.write("x", 2)
						clock.ms = 1150 // a expired at 1100; b has 30ms left
						snap := snapshot(t, b, 1)
						keys, flags := snapshotKeys(t, snap)
						if !slices.Equal(keys, []string{"b"}) || flags != flagTTL {
							t.Fatalf("snapshot holds keys %q with flags %#x, want [b] with %#x", keys, flags, flagTTL)
						}
						for rk, rkind := range backendKinds {
							for _, c := range []struct {
								restoreAt, readAt int64
								want              []int64
								slots             int
							}{
								{1150, 1179, want(2), 1}, // 1ms left
								{1150, 1180, nil, 1},     // the write time came along: no fresh TTL at restore
								{1180, 1180, nil, 0},     // expired before the restore: not restored
							} {
								rclock := &manualClock{ms: c.restoreAt}
								r, rh := openTTL(t, rk, sk, rclock, ttl)
								if err := restore(r, snap); err != nil {
									t.Fatalf("restore into %s: %v", rkind.name, err)
								}
								if n := live(t, r); n != c.slots {
									t.Errorf("restored into %s at %d: %d live slots or keys, want %d", rkind.name, c.restoreAt, n, c.slots)
								}
								rclock.ms = c.readAt
								r.SetCurrentKey("a")
								if got := rh.read(); got != nil {
									t.Errorf("restored into %s: expired key a reads %v", rkind.name, got)
								}
								r.SetCurrentKey("b")
								if got := rh.read(); !slices.Equal(got, c.want) {
									t.Errorf("restored into %s at %d, read at %d: %v, want %v", rkind.name, c.restoreAt, c.readAt, got, c.want)
								}
							}
							// A TTL state's entries restore only into a TTL state.
							o := fullRange(16)
							o.Now = clock.now
							plain := open(t, rkind.make, o)
							if _, err := NewValue[int64](plain, "s", nil); err == nil && sk == 0 {
								err = restore(plain, snap)
								if err == nil || !strings.Contains(err.Error(), "time to live") {
									t.Errorf("TTL snapshot restored into %s state without TTL: %v", rkind.name, err)
								}
							}
						}
					})

					t.Run("sweep", func(t *testing.T) {
						clock := &manualClock{ms: 1000}
						b, h := openTTL(t, bk, sk, clock, ttl)
						const old, fresh = 100, 5
						for i := range old {
							b.SetCurrentKey(fmt.Sprintf("old%03d", i))
							h.write("x", int64(i))
						}
						clock.ms = 1050 // the old keys are live still: the new keys' incremental sweep keeps them
						for i := range fresh {
							b.SetCurrentKey(fmt.Sprintf("new%d", i))
							h.write("x", int64(i))
						}
						b.SetCurrentKey("new0")
						clock.ms = 1120 // the old keys expired at 1100, the fresh expire at 1150
						more, err := b.Sweep(clock.ms, 10)
						if err != nil || !more {
							t.Fatalf("first sweep: more %v, err %v; want more", more, err)
						}
						// The heap sweeps in slot order (the old keys' first); pebble in store order, where the
						// fresh keys may come among the first ten.
						if n := live(t, b); n < old+fresh-10 || (bk == 0 && n != old+fresh-10) {
							t.Fatalf("after sweeping 10: %d live slots or store keys, want %d", n, old+fresh-10)
						}
						// The cursor is where the last sweep (the new keys' too) stopped, and more is false
						// at the end of the slots or keys: two ends make at least one full pass.
						calls, ends := 1, 0
						for ends < 2 {
							if more, err = b.Sweep(clock.ms, 10); err != nil {
								t.Fatal(err)
							}
							if !more {
								ends++
							}
							calls++
						}
						if calls > 2*((old+fresh)/10+1)+1 {
							t.Errorf("two passes took %d calls of budget 10 over %d keys", calls, old+fresh)
						}
						if n := live(t, b); n != fresh {
							t.Errorf("after a full sweep: %d live slots or store keys, want the %d fresh keys", n, fresh)
						}
						b.SetCurrentKey("old000")
						if got := h.read(); got != nil {
							t.Errorf("swept key reads %v", got)
						}
						b.SetCurrentKey("new4")
						if got := h.read(); !slices.Equal(got, []int64{4}) {
							t.Errorf("fresh key reads %v after the sweep, want [4]", got)
						}
					})
				})
			}
		}
	}
}

// TestTTLStatesBesidePlainStates: a backend with both keeps the plain state's entries regardless of the
// clock, through reads, snapshots and sweeps; a plain state's snapshot does not restore into a TTL state;
// a TTL below a millisecond is refused.
func TestTTLStatesBesidePlainStates(t *testing.T) {
	for _, bkind := range backendKinds {
		t.Run(bkind.name, func(t *testing.T) {
			clock := &manualClock{ms: 1000}
			o := fullRange(16)
			o.Now = clock.now
			b := open(t, bkind.make, o)
			plain, err := NewValue[int64](b, "plain", nil)
			if err != nil {
				t.Fatal(err)
			}
			ttl, err := NewValue[int64](WithTTL(b, TTL{TTL: time.Second}), "ttl", nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := NewList[int64](WithTTL(b, TTL{TTL: time.Microsecond}), "tiny", nil); err == nil || !strings.Contains(err.Error(), "resolution") {
				t.Errorf("TTL of 1µs: %v, want a refusal", err)
			}
			b.SealDeclarations()
			if !HasTTL(b) || HasTTL(open(t, bkind.make, o)) {
				t.Error("HasTTL is not true exactly for the backend with a TTL state")
			}
			b.SetCurrentKey("k")
			plain.Update(7)
			ttl.Update(8)
			clock.ms = 10_000
			if more, err := b.Sweep(clock.ms, 1000); more || err != nil {
				t.Fatalf("sweep: more %v, err %v", more, err)
			}
			if v, ok := plain.Value(); !ok || v != 7 {
				t.Errorf("plain value after the TTL passed: %v %v", v, ok)
			}
			if v, ok := ttl.Value(); ok {
				t.Errorf("TTL value after the TTL passed: %v", v)
			}
			snap := snapshot(t, b, 1)
			r := open(t, bkind.make, o)
			if _, err := NewValue[int64](WithTTL(r, TTL{TTL: time.Second}), "plain", nil); err != nil {
				t.Fatal(err)
			}
			if err := restore(r, snap); err == nil || !strings.Contains(err.Error(), "without a time to live") {
				t.Errorf("plain snapshot restored into a TTL state: %v", err)
			}
		})
	}
}

// TestTTLRollingKeysStayBounded: with a new key every millisecond, each written once and never read again,
// the heap's slots stay near the keys written within the TTL, without any call to Sweep (each new key
// sweeps a few slots); pebble's store keys shrink at each snapshot by its bounded sweep.
func TestTTLRollingKeysStayBounded(t *testing.T) {
	const ttlMs, keys = 100, 10_000
	for _, bkind := range backendKinds {
		t.Run(bkind.name, func(t *testing.T) {
			clock := &manualClock{ms: 1000}
			o := fullRange(16)
			o.Now = clock.now
			b := open(t, bkind.make, o)
			v, err := NewValue[int64](WithTTL(b, TTL{TTL: ttlMs * time.Millisecond}), "v", nil)
			if err != nil {
				t.Fatal(err)
			}
			b.SealDeclarations()
			n := keys
			if bkind.name == "pebble" {
				n = 2000
			}
			peak := 0
			for i := range n {
				clock.ms++
				b.SetCurrentKey(fmt.Sprint(i))
				v.Update(int64(i))
				if hb, ok := b.(*heapBackend[string]); ok {
					peak = max(peak, liveSlots(hb))
				}
			}
			if hb, ok := b.(*heapBackend[string]); ok {
				// About 4/3 of the 100 keys within the TTL; 2x leaves room.
				if peak > 2*ttlMs {
					t.Errorf("heap slots peaked at %d with %d keys within the TTL", peak, ttlMs)
				}
				t.Logf("heap: %d keys, slots peaked at %d, %d allocated", n, peak, len(hb.keys))
				return
			}
			before := storeEntries(t, b)
			clock.ms += ttlMs // all expired: the sweep deletes each key it examines
			snapshot(t, b, 1)
			if after := storeEntries(t, b); after != before-snapshotSweep {
				t.Errorf("snapshot swept %d of %d store keys, want %d", before-after, before, snapshotSweep)
			}
		})
	}
}

// BenchmarkValueUpdateTTL is BenchmarkValueUpdate on a TTL state (a clock read per access), for
// comparison.
func BenchmarkValueUpdateTTL(b *testing.B) {
	const keys = 1024
	for _, bk := range int64Backends {
		b.Run(bk.name, func(b *testing.B) {
			var now int64
			kb, err := bk.make(Options[int64]{MaxParallelism: 128, KeyGroupEnd: 127, Dir: b.TempDir(), Now: func() int64 { return now }})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { kb.Close() })
			v, err := NewValue[int64](WithTTL(kb, TTL{TTL: time.Hour}), "v", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				now++
				kb.SetCurrentKey(int64(i % keys))
				n, _ := v.Value()
				v.Update(n + 1)
			}
		})
	}
}

// TestTTLRescale: the snapshots of two subtasks, one per backend, each with keys written at different
// times, restore into one subtask of either backend owning all key groups, and into two again: each key
// is live exactly while its own write time is within the TTL.
func TestTTLRescale(t *testing.T) {
	const maxP, ttlMs, n = 16, 100, 60
	ttl := TTL{TTL: ttlMs * time.Millisecond}
	clock := &manualClock{ms: 1000}
	var snaps [][]byte
	for sub, bkind := range backendKinds {
		start, end := KeyGroupRange(maxP, 2, sub)
		b := open(t, bkind.make, Options[string]{MaxParallelism: maxP, KeyGroupStart: start, KeyGroupEnd: end, Now: clock.now})
		v, err := NewValue[int64](WithTTL(b, ttl), "v", nil)
		if err != nil {
			t.Fatal(err)
		}
		kc, err := codec.For[string]()
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			k := fmt.Sprint(i)
			enc, err := kc.Append(nil, k)
			if err != nil {
				t.Fatal(err)
			}
			if kg := KeyGroup(enc, maxP); kg < start || kg > end {
				continue
			}
			clock.ms = 1000 + int64(i) // key i written at 1000+i
			b.SetCurrentKey(k)
			v.Update(int64(i))
		}
		clock.ms = 1000 + n
		snaps = append(snaps, snapshot(t, b, 1))
	}
	for _, bkind := range backendKinds {
		for _, parallelism := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/p=%d", bkind.name, parallelism), func(t *testing.T) {
				rclock := &manualClock{ms: 1000 + ttlMs + n/2} // keys 0..n/2 have expired
				var got []int
				for sub := range parallelism {
					start, end := KeyGroupRange(maxP, parallelism, sub)
					r := open(t, bkind.make, Options[string]{MaxParallelism: maxP, KeyGroupStart: start, KeyGroupEnd: end, Now: rclock.now})
					v, err := NewValue[int64](WithTTL(r, ttl), "v", nil)
					if err != nil {
						t.Fatal(err)
					}
					if err := restore(r, snaps...); err != nil {
						t.Fatal(err)
					}
					if err := r.ForEachKey(func(k string) error {
						if x, ok := v.Value(); ok {
							got = append(got, int(x))
						}
						return nil
					}); err != nil {
						t.Fatal(err)
					}
				}
				slices.Sort(got)
				var want []int
				for i := n/2 + 1; i < n; i++ {
					want = append(want, i)
				}
				if !slices.Equal(got, want) {
					t.Errorf("live after rescale: %v, want %v", got, want)
				}
			})
		}
	}
}

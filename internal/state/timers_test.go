package state

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fired is one timer as FireUpTo delivered it, with the key that was current.
type fired struct {
	Key string
	Ts  int64
	NS  Namespace
}

func newTimers(t testing.TB, b KeyedBackend[string], name string) Timers {
	t.Helper()
	tm, err := NewTimers[string](Engine(b), name)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// fireAll fires every timer up to ts and returns them in firing order, checking that the timer's key is
// current in f.
func fireAll(t testing.TB, b KeyedBackend[string], tm Timers, ts int64) []fired {
	t.Helper()
	var out []fired
	err := tm.FireUpTo(ts, func(at int64, ns Namespace) error {
		out = append(out, fired{b.CurrentKey(), at, ns})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkTimeOrder fails unless fs is in time order.
func checkTimeOrder(t testing.TB, fs []fired) {
	t.Helper()
	for i := 1; i < len(fs); i++ {
		if fs[i].Ts < fs[i-1].Ts {
			t.Fatalf("timer %d (%+v) fired after %+v", i, fs[i], fs[i-1])
		}
	}
}

// sortFired sorts fs by time, key and namespace, for comparing sets.
func sortFired(fs []fired) []fired {
	fs = slices.Clone(fs)
	slices.SortFunc(fs, func(a, b fired) int {
		switch {
		case a.Ts != b.Ts:
			return compareInt(a.Ts, b.Ts)
		case a.Key != b.Key:
			return strings.Compare(a.Key, b.Key)
		case a.NS.A != b.NS.A:
			return compareInt(a.NS.A, b.NS.A)
		}
		return compareInt(a.NS.B, b.NS.B)
	})
	return fs
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// timerOp is one step of a timer script: register or delete (key, ts, ns), or fire up to ts.
type timerOp struct {
	op  string // "reg", "del", "fire"
	key string
	ts  int64
	ns  Namespace
	// for "fire": the timers expected, in order, and Next and Len afterwards.
	want     []fired
	wantNext int64
	wantOK   bool
	wantLen  int
}

func reg(key string, ts int64, ns ...int64) timerOp {
	return timerOp{op: "reg", key: key, ts: ts, ns: nsOf(ns)}
}
func del(key string, ts int64, ns ...int64) timerOp {
	return timerOp{op: "del", key: key, ts: ts, ns: nsOf(ns)}
}
func nsOf(ns []int64) Namespace {
	var n Namespace
	if len(ns) > 0 {
		n.A = ns[0]
	}
	if len(ns) > 1 {
		n.B = ns[1]
	}
	return n
}

func fire(ts int64, wantLen int, next int64, ok bool, want ...fired) timerOp {
	return timerOp{op: "fire", ts: ts, want: want, wantNext: next, wantOK: ok, wantLen: wantLen}
}

// TestTimersOrderDedupDelete runs timer scripts on both backends: time order across keys and key groups,
// de-duplication per (key, namespace, time), namespaces kept apart, deletion (of the earliest too), the
// whole int64 range, and firing nothing below the earliest time.
func TestTimersOrderDedupDelete(t *testing.T) {
	cases := []struct {
		name string
		ops  []timerOp
	}{
		{"time order across keys", []timerOp{
			reg("a", 30), reg("b", 10), reg("c", 20), reg("d", 40),
			fire(25, 2, 30, true, fired{"b", 10, Namespace{}}, fired{"c", 20, Namespace{}}),
			fire(100, 0, 0, false, fired{"a", 30, Namespace{}}, fired{"d", 40, Namespace{}}),
		}},
		{"registering twice keeps one", []timerOp{
			reg("a", 5), reg("a", 5), reg("a", 5, 0, 0),
			fire(5, 0, 0, false, fired{"a", 5, Namespace{}}),
			fire(5, 0, 0, false),
		}},
		{"namespaces and keys apart", []timerOp{
			reg("a", 7, 1, 2), reg("a", 7, 1, 3), reg("a", 7, 1, 2), reg("b", 7, 1, 2),
			fire(6, 3, 7, true),
			del("a", 7, 1, 3),
			fire(7, 0, 0, false, fired{"a", 7, Namespace{1, 2}}, fired{"b", 7, Namespace{1, 2}}),
		}},
		{"delete", []timerOp{
			reg("a", 1), reg("a", 2), reg("b", 3),
			del("a", 1), del("a", 9), del("zz", 1), del("b", 3, 5),
			fire(0, 2, 2, true),
			del("a", 2),
			fire(0, 1, 3, true),
			fire(10, 0, 0, false, fired{"b", 3, Namespace{}}),
		}},
		{"whole int64 range", []timerOp{
			reg("a", math.MaxInt64), reg("b", 0), reg("c", math.MinInt64, math.MinInt64, math.MaxInt64), reg("d", -1),
			fire(-1, 2, 0, true, fired{"c", math.MinInt64, Namespace{math.MinInt64, math.MaxInt64}}, fired{"d", -1, Namespace{}}),
			fire(math.MaxInt64, 0, 0, false, fired{"b", 0, Namespace{}}, fired{"a", math.MaxInt64, Namespace{}}),
		}},
		{"many keys in time order", manyKeysScript()},
	}
	for _, bk := range backendKinds {
		for _, tc := range cases {
			t.Run(bk.name+"/"+tc.name, func(t *testing.T) {
				b := open(t, bk.make, fullRange(32))
				tm := newTimers(t, b, "\x00timers/event")
				for i, op := range tc.ops {
					switch op.op {
					case "reg":
						b.SetCurrentKey(op.key)
						tm.Register(op.ts, op.ns)
					case "del":
						b.SetCurrentKey(op.key)
						tm.Delete(op.ts, op.ns)
					case "fire":
						got := fireAll(t, b, tm, op.ts)
						checkTimeOrder(t, got)
						if op.want != nil && !reflect.DeepEqual(sortFired(got), sortFired(op.want)) {
							t.Fatalf("step %d: fired %v, want %v", i, got, op.want)
						}
						if op.want == nil && len(got) > 0 && tc.name != "many keys in time order" {
							t.Fatalf("step %d: fired %v, want none", i, got)
						}
						next, ok := tm.Next()
						if ok != op.wantOK || (ok && next != op.wantNext) || tm.Len() != op.wantLen {
							t.Fatalf("step %d: Next = %d, %v; Len = %d; want %d, %v; %d", i, next, ok, tm.Len(), op.wantNext, op.wantOK, op.wantLen)
						}
					}
				}
			})
		}
	}
}

// TestTimersAgainstAModel runs random registrations, deletions and firings over a few keys, each holding
// zero to several timers at a time (so a key's first timer, indexed inline on the heap backend, is
// deleted, fired and replaced while others of the key remain), on both backends, against a set of
// (key, time, namespace) kept by the test: what fires, in time order, and what remains.
func TestTimersAgainstAModel(t *testing.T) {
	for _, bk := range backendKinds {
		for seed := range uint64(6) {
			t.Run(fmt.Sprintf("%s/seed%d", bk.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 34))
				b := open(t, bk.make, fullRange(32))
				tm := newTimers(t, b, "\x00timers/event")
				model := map[fired]bool{}
				now := int64(0)
				for step := range 3000 {
					key := fmt.Sprintf("k%d", rng.IntN(6))
					f := fired{key, now + rng.Int64N(20), Namespace{A: rng.Int64N(2)}}
					switch r := rng.IntN(10); {
					case r < 5:
						b.SetCurrentKey(key)
						tm.Register(f.Ts, f.NS)
						model[f] = true
					case r < 8:
						b.SetCurrentKey(key)
						tm.Delete(f.Ts, f.NS)
						delete(model, f)
					default:
						now += rng.Int64N(8)
						got := fireAll(t, b, tm, now)
						checkTimeOrder(t, got)
						var want []fired
						for m := range model {
							if m.Ts <= now {
								want = append(want, m)
								delete(model, m)
							}
						}
						if !reflect.DeepEqual(sortFired(got), sortFired(want)) {
							t.Fatalf("step %d: fired %v, want %v", step, got, want)
						}
					}
					if tm.Len() != len(model) {
						t.Fatalf("step %d: Len %d, the model holds %d", step, tm.Len(), len(model))
					}
				}
			})
		}
	}
}

// manyKeysScript registers 300 timers over 100 keys (many key groups) and fires them in three steps.
func manyKeysScript() []timerOp {
	var ops []timerOp
	var want [3][]fired
	for i := range 300 {
		k := fmt.Sprintf("k%d", i%100)
		ts := int64((i * 7919) % 1000)
		ops = append(ops, reg(k, ts, int64(i%3)))
		w := fired{k, ts, Namespace{A: int64(i % 3)}}
		switch {
		case ts <= 333:
			want[0] = append(want[0], w)
		case ts <= 666:
			want[1] = append(want[1], w)
		default:
			want[2] = append(want[2], w)
		}
	}
	earliest := func(ws []fired) int64 {
		return slices.MinFunc(ws, func(a, b fired) int { return compareInt(a.Ts, b.Ts) }).Ts
	}
	return append(ops,
		fire(333, 300-len(want[0]), earliest(want[1]), true, want[0]...),
		fire(666, len(want[2]), earliest(want[2]), true, want[1]...),
		fire(999, 0, 0, false, want[2]...))
}

// TestTimersFireUpToReentrancy: what f does during FireUpTo. Timers f registers at or below the firing time
// fire in the same call (same key, other keys, other key groups, at the time being fired), later ones do
// not; a timer f deletes does not fire; the key of each timer is current while f runs, and f's error
// stops the call and is returned.
func TestTimersFireUpToReentrancy(t *testing.T) {
	errStop := errors.New("stop")
	type step = func(b KeyedBackend[string], tm Timers, f fired) error
	cases := []struct {
		name    string
		setup   []timerOp
		upTo    int64
		f       step
		want    []fired // in order
		wantErr error
		wantLen int
	}{
		{
			name:  "registered at or below the time fire in the same call",
			setup: []timerOp{reg("a", 10)},
			upTo:  20,
			f: func(b KeyedBackend[string], tm Timers, f fired) error {
				if f == (fired{"a", 10, Namespace{}}) {
					tm.Register(15, Namespace{})       // same key, later, below upTo
					tm.Register(10, Namespace{A: 1})   // same key, the time being fired
					b.SetCurrentKey("other-key-group") // a key (most likely) in another key group
					tm.Register(12, Namespace{})
					tm.Register(21, Namespace{}) // above upTo: stays
				}
				return nil
			},
			want:    []fired{{"a", 10, Namespace{}}, {"a", 10, Namespace{A: 1}}, {"other-key-group", 12, Namespace{}}, {"a", 15, Namespace{}}},
			wantLen: 1,
		},
		{
			name:  "a chain of timers each registering the next",
			setup: []timerOp{reg("a", 0)},
			upTo:  100,
			f: func(b KeyedBackend[string], tm Timers, f fired) error {
				if f.Ts < 200 {
					b.SetCurrentKey(fmt.Sprintf("k%d", f.Ts+1))
					tm.Register(f.Ts+1, Namespace{})
				}
				return nil
			},
			want:    chain(101),
			wantLen: 1,
		},
		{
			name:  "deleted by f does not fire",
			setup: []timerOp{reg("a", 1), reg("b", 2), reg("c", 3)},
			upTo:  10,
			f: func(b KeyedBackend[string], tm Timers, f fired) error {
				if f.Key == "a" {
					b.SetCurrentKey("b")
					tm.Delete(2, Namespace{})
				}
				return nil
			},
			want: []fired{{"a", 1, Namespace{}}, {"c", 3, Namespace{}}},
		},
		{
			name:  "deleted and registered again in the same key group",
			setup: []timerOp{reg("a", 1), reg("a", 2), reg("a", 3)},
			upTo:  10,
			f: func(b KeyedBackend[string], tm Timers, f fired) error {
				if f.Ts == 1 {
					tm.Delete(2, Namespace{})
					tm.Register(2, Namespace{A: 9})
				}
				return nil
			},
			want: []fired{{"a", 1, Namespace{}}, {"a", 2, Namespace{A: 9}}, {"a", 3, Namespace{}}},
		},
		{
			name:  "error stops and is returned",
			setup: []timerOp{reg("a", 1), reg("b", 2), reg("c", 3)},
			upTo:  10,
			f: func(b KeyedBackend[string], tm Timers, f fired) error {
				if f.Key == "b" {
					return errStop
				}
				return nil
			},
			want:    []fired{{"a", 1, Namespace{}}, {"b", 2, Namespace{}}},
			wantErr: errStop,
			wantLen: 1,
		},
	}
	for _, bk := range backendKinds {
		for _, tc := range cases {
			t.Run(bk.name+"/"+tc.name, func(t *testing.T) {
				b := open(t, bk.make, fullRange(64))
				tm := newTimers(t, b, "\x00timers/event")
				for _, op := range tc.setup {
					b.SetCurrentKey(op.key)
					tm.Register(op.ts, op.ns)
				}
				var got []fired
				err := tm.FireUpTo(tc.upTo, func(ts int64, ns Namespace) error {
					f := fired{b.CurrentKey(), ts, ns}
					got = append(got, f)
					return tc.f(b, tm, f)
				})
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("FireUpTo = %v, want %v", err, tc.wantErr)
				}
				checkTimeOrder(t, got)
				if !reflect.DeepEqual(sortFired(got), sortFired(tc.want)) {
					t.Fatalf("fired %v\nwant %v", got, tc.want)
				}
				if tm.Len() != tc.wantLen {
					t.Fatalf("Len = %d after, want %d", tm.Len(), tc.wantLen)
				}
			})
		}
	}
}

func chain(n int) []fired {
	out := []fired{{"a", 0, Namespace{}}}
	for i := 1; i < n; i++ {
		out = append(out, fired{fmt.Sprintf("k%d", i), int64(i), Namespace{}})
	}
	return out
}

// timerSet is a deterministic set of timers over many keys, with the other kinds of state beside them.
func timerSet(n int) []fired {
	var out []fired
	for i := range n {
		k := fmt.Sprintf("key-%d", i%(n/3+1))
		out = append(out, fired{k, int64((i*104729)%5000) - 2500, Namespace{A: int64(i % 4), B: -int64(i % 5)}})
	}
	return out
}

// TestTimersRescale snapshots timers at parallelism 2 and restores them at parallelism 3 and 1: every timer
// fires exactly once, on the subtask that owns its key group, with no code for timers in the rescale
// (restore filters entries by key group, as for all state).
func TestTimersRescale(t *testing.T) {
	const maxP = 16
	all := timerSet(600)
	want := map[fired]bool{}
	for _, f := range all {
		want[f] = true
	}
	for _, src := range backendKinds {
		// Parallelism 2: each subtask registers the timers of its keys; a value state rides along.
		var snaps [][]byte
		for i := range 2 {
			start, end := KeyGroupRange(maxP, 2, i)
			b := open(t, src.make, Options[string]{MaxParallelism: maxP, KeyGroupStart: start, KeyGroupEnd: end})
			tm := newTimers(t, b, "\x00timers/event")
			v, err := NewValue[int64](b, "v", nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range all {
				if kg := KeyGroup([]byte(f.Key), maxP); kg >= start && kg <= end {
					b.SetCurrentKey(f.Key)
					tm.Register(f.Ts, f.NS)
					v.Update(1)
				}
			}
			snaps = append(snaps, snapshot(t, b, 1))
		}
		for _, dst := range backendKinds {
			for _, p := range []int{3, 1} {
				t.Run(fmt.Sprintf("%s to %s at parallelism %d", src.name, dst.name, p), func(t *testing.T) {
					seen := map[fired]int{}
					total := 0
					for i := range p {
						start, end := KeyGroupRange(maxP, p, i)
						b := open(t, dst.make, Options[string]{MaxParallelism: maxP, KeyGroupStart: start, KeyGroupEnd: end})
						if err := restore(b, snaps...); err != nil {
							t.Fatal(err)
						}
						tm := newTimers(t, b, "\x00timers/event") // registered after Restore
						n := tm.Len()
						got := fireAll(t, b, tm, math.MaxInt64)
						checkTimeOrder(t, got)
						if len(got) != n || tm.Len() != 0 {
							t.Fatalf("subtask %d: Len was %d, fired %d, %d left", i, n, len(got), tm.Len())
						}
						for _, f := range got {
							if kg := KeyGroup([]byte(f.Key), maxP); kg < start || kg > end {
								t.Errorf("subtask %d [%d, %d] fired %+v of key group %d", i, start, end, f, kg)
							}
							seen[f]++
						}
						total += len(got)
					}
					if total != len(want) || len(seen) != len(want) {
						t.Fatalf("fired %d timers (%d distinct), want %d", total, len(seen), len(want))
					}
					for f := range want {
						if seen[f] != 1 {
							t.Fatalf("timer %+v fired %d times", f, seen[f])
						}
					}
				})
			}
		}
	}
}

// TestTimersRoundTripAcrossBackends: heap and pebble write the same bytes for the same timers (beside a
// list map and a value state), each restores the other's snapshot (with the timers registered before or
// after Restore), writes those bytes again, and fires the same timers.
func TestTimersRoundTripAcrossBackends(t *testing.T) {
	const maxP = 8
	all := timerSet(300)
	var snaps [][]byte
	for _, src := range backendKinds {
		b := open(t, src.make, fullRange(maxP))
		tm := newTimers(t, b, "\x00timers/event")
		pt := newTimers(t, b, "\x00timers/processing")
		lm, err := NewListMap[int64, string](Engine(b), "\x00window/elems", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range all {
			b.SetCurrentKey(f.Key)
			tm.Register(f.Ts, f.NS)
			if i%5 == 0 {
				pt.Register(f.Ts+1, Namespace{})
				lm.Append(f.Ts, f.Key)
			}
		}
		// Deleted and fired timers must not reach the snapshot.
		b.SetCurrentKey(all[0].Key)
		tm.Delete(all[0].Ts, all[0].NS)
		fireAll(t, b, pt, -2000)
		snaps = append(snaps, snapshot(t, b, 3))
	}
	if !bytes.Equal(snaps[0], snaps[1]) {
		t.Fatalf("heap and pebble snapshots of the same timers differ (%d and %d bytes)", len(snaps[0]), len(snaps[1]))
	}
	want := sortFired(all[1:])
	for i, src := range backendKinds {
		for _, dst := range backendKinds {
			for _, first := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s to %s registered first %v", src.name, dst.name, first), func(t *testing.T) {
					b := open(t, dst.make, fullRange(maxP))
					var tm, pt Timers
					var lm ListMapState[int64, string]
					declare := func() {
						tm = newTimers(t, b, "\x00timers/event")
						pt = newTimers(t, b, "\x00timers/processing")
						var err error
						if lm, err = NewListMap[int64, string](Engine(b), "\x00window/elems", nil, nil); err != nil {
							t.Fatal(err)
						}
					}
					if first {
						declare()
					}
					if err := restore(b, snaps[i]); err != nil {
						t.Fatal(err)
					}
					if !first {
						declare()
					}
					if again := snapshot(t, b, 3); !bytes.Equal(again, snaps[i]) {
						t.Fatal("snapshot of the restored state differs from the original")
					}
					if pt.Len() == 0 || lm == nil {
						t.Fatal("processing timers not restored")
					}
					got := fireAll(t, b, tm, math.MaxInt64)
					checkTimeOrder(t, got)
					if !reflect.DeepEqual(sortFired(got), want) {
						t.Fatalf("fired %d timers, want %d", len(got), len(want))
					}
				})
			}
		}
	}
}

// TestReservedNames: names starting with NUL are the engine's. A user's state constructor refuses them,
// naming the rule; through Engine the engine declares them; timers check their backend's key type.
func TestReservedNames(t *testing.T) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b := open(t, bk.make, fullRange(8))
			user := []func() error{
				func() error { _, err := NewValue[int64](b, "\x00timers/event", nil); return err },
				func() error { _, err := NewList[int64](b, "\x00x", nil); return err },
				func() error { _, err := NewMap[int64, int64](b, "\x00window/acc", nil, nil); return err },
				func() error { _, err := NewListMap[int64, int64](b, "\x00window/elems", nil, nil); return err },
				func() error { _, err := NewTimers[string](b, "\x00timers/event"); return err },
			}
			for i, f := range user {
				if err := f(); err == nil || !strings.Contains(err.Error(), "reserved for the engine") {
					t.Fatalf("user declaration %d of a NUL name: %v", i, err)
				}
			}
			if _, err := NewValue[int64](Engine(b), "\x00timers/event", nil); err != nil {
				t.Fatalf("engine declaration after refused user ones: %v", err)
			}
			if _, err := NewTimers[string](Engine(Engine(b)), "\x00timers/processing"); err != nil {
				t.Fatal(err)
			}
			if _, err := NewTimers[int64](Engine(b), "\x00timers/other"); err == nil || !strings.Contains(err.Error(), "not keyed by") {
				t.Fatalf("timers of the wrong key type: %v", err)
			}
			if _, err := NewValue[int64](Engine(nil), "\x00v", nil); err == nil || !strings.Contains(err.Error(), "KeyBy") {
				t.Fatalf("engine state without a backend: %v", err)
			}
		})
	}
}

// benchTimers opens a backend over 128 key groups with an event timers state (closed when the benchmark
// ends).
func benchTimers(b *testing.B, mk func(Options[int64]) (KeyedBackend[int64], error)) (KeyedBackend[int64], Timers) {
	b.Helper()
	kb, err := mk(Options[int64]{MaxParallelism: 128, KeyGroupEnd: 127, Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { kb.Close() })
	tm, err := NewTimers[int64](Engine(kb), "\x00timers/event")
	if err != nil {
		b.Fatal(err)
	}
	return kb, tm
}

// BenchmarkTimerRegister registers a new timer per op over 1024 keys; every 65536 timers are fired
// (outside the timing), so the set stays the size of a busy operator's.
func BenchmarkTimerRegister(b *testing.B) {
	for _, bk := range int64Backends {
		b.Run(bk.name, func(b *testing.B) {
			kb, tm := benchTimers(b, bk.make)
			noop := func(int64, Namespace) error { return nil }
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				kb.SetCurrentKey(int64(i % 1024))
				tm.Register(int64(i), Namespace{})
				if i%65536 == 65535 {
					b.StopTimer()
					if err := tm.FireUpTo(int64(i), noop); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkTimerRegisterExisting registers a timer that exists, per op: what a window operator does for
// each record of a window (its end-of-window timer), the de-duplication path.
func BenchmarkTimerRegisterExisting(b *testing.B) {
	for _, bk := range int64Backends {
		b.Run(bk.name, func(b *testing.B) {
			kb, tm := benchTimers(b, bk.make)
			for k := range int64(1024) {
				kb.SetCurrentKey(k)
				tm.Register(1000+k%10, Namespace{A: 0, B: 1000})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k := int64(i % 1024)
				kb.SetCurrentKey(k)
				tm.Register(1000+k%10, Namespace{A: 0, B: 1000})
			}
		})
	}
}

// BenchmarkTimerFireUpTo measures firing, per timer: batches of 4096 timers over 1024 keys are registered
// outside the timing and fired by one FireUpTo.
func BenchmarkTimerFireUpTo(b *testing.B) {
	for _, bk := range int64Backends {
		b.Run(bk.name, func(b *testing.B) {
			kb, tm := benchTimers(b, bk.make)
			n := 0
			count := func(int64, Namespace) error { n++; return nil }
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; {
				batch := min(4096, b.N-i)
				b.StopTimer()
				for j := range batch {
					kb.SetCurrentKey(int64(j % 1024))
					tm.Register(int64(i+j), Namespace{})
				}
				b.StartTimer()
				if err := tm.FireUpTo(int64(i+batch), count); err != nil {
					b.Fatal(err)
				}
				i += batch
			}
			if n != b.N {
				b.Fatalf("fired %d of %d", n, b.N)
			}
		})
	}
}

// BenchmarkTimerSlidingLarge keeps about 500,000 timers, each of its own key, registered in time order and
// fired as time passes, as a keyed operator's cleanup timers over millions of keys are (q18's): per op one
// timer registered and the earliest one fired. The heap is far larger than the caches.
func BenchmarkTimerSlidingLarge(b *testing.B) {
	const live, keys = 500_000, 1 << 20
	kb, tm := benchTimers(b, int64Backends[0].make)
	for i := range int64(live) {
		kb.SetCurrentKey(i)
		tm.Register(i, Namespace{})
	}
	noop := func(int64, Namespace) error { return nil }
	b.ReportAllocs()
	b.ResetTimer()
	for i := range int64(b.N) {
		ts := live + i
		kb.SetCurrentKey(ts % keys)
		tm.Register(ts, Namespace{})
		if err := tm.FireUpTo(i, noop); err != nil {
			b.Fatal(err)
		}
	}
}

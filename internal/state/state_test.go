package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/runnel-dev/runnel/codec"
)

// backendKinds are the backends every table test runs against.
var backendKinds = []struct {
	name string
	make func(Options[string]) (KeyedBackend[string], error)
}{
	{"heap", NewHeap[string]},
	{"pebble", NewPebble[string]},
}

func fullRange(maxP int) Options[string] {
	return Options[string]{MaxParallelism: maxP, KeyGroupStart: 0, KeyGroupEnd: maxP - 1}
}

func open(t testing.TB, make func(Options[string]) (KeyedBackend[string], error), o Options[string]) KeyedBackend[string] {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	b, err := make(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// states is the set of states the scenarios use.
type states struct {
	count ValueState[int64]
	seen  ListState[string]
	attrs MapState[string, int64]
}

func register(t testing.TB, b Backend) *states {
	t.Helper()
	var s states
	var err error
	if s.count, err = NewValue[int64](b, "count", nil); err != nil {
		t.Fatal(err)
	}
	if s.seen, err = NewList[string](b, "seen", nil); err != nil {
		t.Fatal(err)
	}
	if s.attrs, err = NewMap[string, int64](b, "attrs", nil, nil); err != nil {
		t.Fatal(err)
	}
	return &s
}

// contents is everything a backend holds in the scenario states, keyed by key.
type contents map[string]keyContents

type keyContents struct {
	Count    int64
	HasCount bool
	Seen     []string
	Attrs    map[string]int64
}

func dump(t testing.TB, b KeyedBackend[string], s *states) contents {
	t.Helper()
	c := contents{}
	err := b.ForEachKey(func(k string) error {
		if _, dup := c[k]; dup {
			return fmt.Errorf("key %q visited twice", k)
		}
		var kc keyContents
		kc.Count, kc.HasCount = s.count.Value()
		kc.Seen = slices.Clone(s.seen.Get()) // the heap lends its own slice
		if s.attrs.Len() > 0 {
			kc.Attrs = map[string]int64{}
			s.attrs.Range(func(mk string, mv int64) bool { kc.Attrs[mk] = mv; return true })
		}
		c[k] = kc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// populate writes a deterministic mix of state for n keys; key i has i%3 == 0 → no list, etc.
func populate(b KeyedBackend[string], s *states, n int) {
	for i := range n {
		k := fmt.Sprintf("key-%d", i)
		b.SetCurrentKey(k)
		s.count.Update(int64(i))
		if i%3 != 0 {
			for j := range i % 4 {
				s.seen.Add(fmt.Sprintf("%s/%d", k, j))
			}
		}
		if i%2 == 0 {
			s.attrs.Put("a", int64(i))
			s.attrs.Put("bb", int64(i*2))
		}
	}
	// Keys that are prefixes of each other, and a long value, must stay apart.
	b.SetCurrentKey("p")
	s.count.Update(1)
	s.attrs.Put("x", 1)
	b.SetCurrentKey("pp")
	s.count.Update(2)
	s.attrs.Put("", 2)
	s.seen.Add(strings.Repeat("long", 100))
}

func TestKeyedStateIsolatesKeys(t *testing.T) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b := open(t, bk.make, fullRange(128))
			s := register(t, b)
			if _, err := NewValue[int](b, "count", nil); err == nil {
				t.Fatal("duplicate state name accepted")
			}
			for _, k := range []string{"a", "b", "a", "c", "a", "ab"} {
				b.SetCurrentKey(k)
				n, _ := s.count.Value()
				s.count.Update(n + 1)
				s.seen.Add(k)
				s.attrs.Put(k, n+1)
			}
			if got := b.CurrentKey(); got != "ab" {
				t.Errorf("current key = %q", got)
			}
			want := map[string]int64{"a": 3, "b": 1, "c": 1, "ab": 1}
			for k, w := range want {
				b.SetCurrentKey(k)
				if got, ok := s.count.Value(); !ok || got != w {
					t.Errorf("value[%s] = %d,%v want %d", k, got, ok, w)
				}
				if got := s.seen.Get(); int64(len(got)) != w || got[0] != k {
					t.Errorf("list[%s] = %v", k, got)
				}
				if got, _ := s.attrs.Get(k); got != w || s.attrs.Len() != 1 {
					t.Errorf("map[%s] = %d (len %d)", k, got, s.attrs.Len())
				}
			}
			b.SetCurrentKey("never")
			if _, ok := s.count.Value(); ok {
				t.Error("unset value reported present")
			}
			if s.seen.Get() != nil || s.attrs.Len() != 0 {
				t.Error("unset list or map not empty")
			}
		})
	}
	if _, err := NewValue[int](nil, "x", nil); err == nil || !strings.Contains(err.Error(), "KeyBy") {
		t.Fatalf("state without keyed backend: %v", err)
	}
}

func TestClearAndForEachKey(t *testing.T) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b := open(t, bk.make, fullRange(4))
			s := register(t, b)
			for _, k := range []string{"a", "b", "c", "d"} {
				b.SetCurrentKey(k)
				s.count.Update(1)
			}
			b.SetCurrentKey("b")
			s.seen.Add("x")
			s.attrs.Put("m", 1)
			s.count.Clear()
			if got := keysOf(t, b); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
				t.Fatalf("keys = %v (b still has list and map state)", got)
			}
			s.seen.Clear()
			s.attrs.Clear()
			if s.attrs.Len() != 0 || s.seen.Get() != nil {
				t.Fatal("clear left entries")
			}
			b.SetCurrentKey("c")
			s.count.Clear()
			if got := keysOf(t, b); !slices.Equal(got, []string{"a", "d"}) {
				t.Fatalf("keys with state = %v", got)
			}
			if b.CurrentKey() != "c" {
				t.Fatalf("current key after ForEachKey = %q", b.CurrentKey())
			}
			// f may change state; an error stops the walk and is returned.
			err := b.ForEachKey(func(k string) error {
				n, _ := s.count.Value()
				s.count.Update(n + 10)
				s.attrs.Put(k, n)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			b.SetCurrentKey("d")
			if n, _ := s.count.Value(); n != 11 {
				t.Fatalf("d = %d after ForEachKey update", n)
			}
			stop := errors.New("stop")
			calls := 0
			if err := b.ForEachKey(func(string) error { calls++; return stop }); err != stop || calls != 1 {
				t.Fatalf("ForEachKey = %v after %d calls", err, calls)
			}
		})
	}
}

func keysOf(t testing.TB, b KeyedBackend[string]) []string {
	t.Helper()
	var keys []string
	if err := b.ForEachKey(func(k string) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

func TestListAndMapSemantics(t *testing.T) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b := open(t, bk.make, fullRange(8))
			s := register(t, b)
			b.SetCurrentKey("k")
			long := strings.Repeat("z", 300) // a length prefix longer than one byte
			s.seen.Add("a")
			s.seen.Add(long)
			s.seen.Add("")
			if got := s.seen.Get(); !slices.Equal(got, []string{"a", long, ""}) {
				t.Fatalf("list = %q", got)
			}
			in := []string{"x", "y"}
			s.seen.Update(in)
			in[0] = "changed"
			if got := s.seen.Get(); !slices.Equal(got, []string{"x", "y"}) {
				t.Fatalf("after Update list = %q", got)
			}
			s.seen.Update(nil)
			if got := s.seen.Get(); len(got) != 0 {
				t.Fatalf("after Update(nil) list = %q", got)
			}
			if keysOf(t, b) != nil {
				t.Fatal("an emptied list still counts as state")
			}

			for i := range 5 {
				s.attrs.Put(fmt.Sprint(i), int64(i))
			}
			s.attrs.Put("3", 33)
			s.attrs.Remove("1")
			s.attrs.Remove("absent")
			if s.attrs.Len() != 4 {
				t.Fatalf("len = %d", s.attrs.Len())
			}
			if v, ok := s.attrs.Get("3"); !ok || v != 33 {
				t.Fatalf("get 3 = %d,%v", v, ok)
			}
			if _, ok := s.attrs.Get("1"); ok {
				t.Fatal("removed entry present")
			}
			n := 0
			s.attrs.Range(func(string, int64) bool { n++; return n < 2 })
			if n != 2 {
				t.Fatalf("range did not stop: %d calls", n)
			}
			for _, mk := range []string{"0", "2", "3", "4"} {
				s.attrs.Remove(mk)
			}
			if s.attrs.Len() != 0 || keysOf(t, b) != nil {
				t.Fatal("map emptied by Remove still has state")
			}
		})
	}
}

func TestMissingCodecNamesStateAndType(t *testing.T) {
	b := open(t, NewHeap[string], fullRange(8))
	_, err := NewValue[chan int](b, "pipes", nil)
	if err == nil || !strings.Contains(err.Error(), `"pipes"`) || !strings.Contains(err.Error(), "chan int") ||
		!errors.Is(err, codec.ErrUnsupported) {
		t.Fatalf("err = %v", err)
	}
	_, err = NewMap[string, map[int]int](b, "m", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "map[int]int") {
		t.Fatalf("err = %v", err)
	}
	// A failed registration does not take the name.
	if _, err := NewValue[int](b, "pipes", nil); err != nil {
		t.Fatal(err)
	}
}

func TestOptionsAreValidated(t *testing.T) {
	for _, o := range []Options[string]{
		{MaxParallelism: 0},
		{MaxParallelism: MaxKeyGroups + 1, KeyGroupEnd: 1},
		{MaxParallelism: 8, KeyGroupStart: 4, KeyGroupEnd: 3},
		{MaxParallelism: 8, KeyGroupStart: 0, KeyGroupEnd: 8},
	} {
		for _, bk := range backendKinds {
			if b, err := bk.make(o); err == nil {
				b.Close()
				t.Errorf("%s accepted %+v", bk.name, o)
			}
		}
	}
	if _, err := NewHeap(Options[chan int]{MaxParallelism: 1}); err == nil || !strings.Contains(err.Error(), "KeyCodec") {
		t.Errorf("key type without codec: %v", err)
	}
}

func TestKeyGroupMatchesRouting(t *testing.T) {
	for _, key := range [][]byte{nil, []byte("a"), []byte("key-12345"), {0, 1, 2, 3, 4, 5, 6, 7}} {
		for _, maxP := range []int{1, 7, 128, 32768, MaxKeyGroups} {
			if got, want := KeyGroup(key, maxP), int(xxhash.Sum64(key)%uint64(maxP)); got != want {
				t.Errorf("KeyGroup(%q, %d) = %d, want %d", key, maxP, got, want)
			}
		}
	}
}

func TestKeyGroupRangeIsOperatorIndexOf(t *testing.T) {
	for _, maxP := range []int{1, 2, 7, 128, 1000} {
		for p := 1; p <= maxP && p <= 40; p++ {
			next := 0
			for i := range p {
				start, end := KeyGroupRange(maxP, p, i)
				if start != next || end < start-1 {
					t.Fatalf("maxP %d p %d subtask %d: [%d, %d], want start %d", maxP, p, i, start, end, next)
				}
				for kg := start; kg <= end; kg++ {
					if kg*p/maxP != i { // graph.OperatorIndexOf
						t.Fatalf("maxP %d p %d: key group %d in subtask %d's range, routed to %d", maxP, p, kg, i, kg*p/maxP)
					}
				}
				next = end + 1
			}
			if next != maxP {
				t.Fatalf("maxP %d p %d: ranges end at %d", maxP, p, next)
			}
		}
	}
}

func TestKeyOutsideRangePanics(t *testing.T) {
	const maxP = 16
	var foreign string
	for i := 0; ; i++ {
		if k := fmt.Sprint(i); KeyGroup([]byte(k), maxP) >= maxP/2 {
			foreign = k
			break
		}
	}
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b := open(t, bk.make, Options[string]{MaxParallelism: maxP, KeyGroupStart: 0, KeyGroupEnd: maxP/2 - 1})
			defer func() {
				var ae *AccessError
				p := recover()
				if err, ok := p.(error); !ok || !errors.As(err, &ae) || !errors.Is(err, ErrKeyGroupOutOfRange) {
					t.Fatalf("panic = %v", p)
				}
			}()
			b.SetCurrentKey(foreign)
		})
	}
}

// snapshot returns the bytes of a snapshot of b.
func snapshot(t testing.TB, b KeyedBackend[string], id int64) []byte {
	t.Helper()
	write, err := b.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func restore(b KeyedBackend[string], snaps ...[]byte) error {
	rs := make([]io.Reader, len(snaps))
	for i, s := range snaps {
		rs[i] = bytes.NewReader(s)
	}
	return b.Restore(rs)
}

func TestSnapshotRoundTrip(t *testing.T) {
	const maxP = 32
	var snaps [][]byte
	var want contents
	for _, src := range backendKinds {
		b := open(t, src.make, fullRange(maxP))
		s := register(t, b)
		populate(b, s, 200)
		got := dump(t, b, s)
		if want == nil {
			want = got
		} else if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s holds different contents after the same updates", src.name)
		}
		snaps = append(snaps, snapshot(t, b, 7))
	}
	if !bytes.Equal(snaps[0], snaps[1]) {
		t.Fatalf("heap and pebble snapshots of equal state differ (%d and %d bytes)", len(snaps[0]), len(snaps[1]))
	}
	for i, src := range backendKinds {
		for _, dst := range backendKinds {
			for _, registerFirst := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s to %s register first %v", src.name, dst.name, registerFirst), func(t *testing.T) {
					b := open(t, dst.make, fullRange(maxP))
					var s *states
					if registerFirst {
						s = register(t, b)
					}
					if err := restore(b, snaps[i]); err != nil {
						t.Fatal(err)
					}
					if !registerFirst {
						s = register(t, b)
					}
					if got := dump(t, b, s); !reflect.DeepEqual(got, want) {
						t.Fatalf("restored contents differ:\n got %v\nwant %v", got, want)
					}
					if again := snapshot(t, b, 7); !bytes.Equal(again, snaps[i]) {
						t.Fatal("snapshot of restored state differs from the original")
					}
				})
			}
		}
	}
}

func TestUnregisteredStateIsKept(t *testing.T) {
	for _, src := range backendKinds {
		b := open(t, src.make, fullRange(8))
		s := register(t, b)
		populate(b, s, 20)
		snap := snapshot(t, b, 1)
		want := dump(t, b, s)
		for _, dst := range backendKinds {
			t.Run(src.name+" to "+dst.name, func(t *testing.T) {
				// Restore, register only "count", snapshot: the other states travel along unchanged.
				b := open(t, dst.make, fullRange(8))
				if err := restore(b, snap); err != nil {
					t.Fatal(err)
				}
				count, err := NewValue[int64](b, "count", nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := NewList[int64](b, "attrs", nil); err == nil || !strings.Contains(err.Error(), "map state") {
					t.Fatalf("registering a restored map state as a list: %v", err)
				}
				b.SetCurrentKey("key-3")
				count.Update(-3)
				later := snapshot(t, b, 2)

				b2 := open(t, dst.make, fullRange(8))
				if err := restore(b2, later); err != nil {
					t.Fatal(err)
				}
				s2 := register(t, b2)
				got := dump(t, b2, s2)
				w := want["key-3"]
				w.Count = -3
				want := copyContents(want)
				want["key-3"] = w
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("contents after a round without registration:\n got %v\nwant %v", got, want)
				}
			})
		}
	}
}

func copyContents(c contents) contents {
	out := contents{}
	for k, v := range c {
		out[k] = v
	}
	return out
}

// writeConcurrently runs write on a goroutine of its own, as a task's snapshot writer runs, into the
// buffer it returns; wait waits for the write to end.
func writeConcurrently(t *testing.T, write func(io.Writer) error) (buf *bytes.Buffer, wait func()) {
	buf = new(bytes.Buffer)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := write(buf); err != nil {
			t.Error(err)
		}
	}()
	return buf, wg.Wait
}

func TestRestoreMismatches(t *testing.T) {
	b := open(t, NewHeap[string], fullRange(8))
	s := register(t, b)
	populate(b, s, 5)
	snap := snapshot(t, b, 1)
	for _, dst := range backendKinds {
		t.Run(dst.name, func(t *testing.T) {
			other := open(t, dst.make, fullRange(16))
			if err := restore(other, snap); err == nil || errors.Is(err, ErrCorruptSnapshot) || !strings.Contains(err.Error(), "max parallelism") {
				t.Fatalf("restore into a different max parallelism: %v", err)
			}
			kinds := open(t, dst.make, fullRange(8))
			if _, err := NewList[int64](kinds, "count", nil); err != nil {
				t.Fatal(err)
			}
			if err := restore(kinds, snap); err == nil || !strings.Contains(err.Error(), `"count"`) {
				t.Fatalf("restore a value state into a list state: %v", err)
			}
		})
	}
}

func TestRescale(t *testing.T) {
	const maxP = 16
	for _, src := range backendKinds {
		b := open(t, src.make, fullRange(maxP))
		s := register(t, b)
		populate(b, s, 100)
		want := dump(t, b, s)
		whole := snapshot(t, b, 3)
		for _, dst := range backendKinds {
			t.Run(src.name+" to "+dst.name, func(t *testing.T) {
				// Scale out to 3 subtasks: each keeps exactly its key groups.
				var parts [][]byte
				union := contents{}
				for i := range 3 {
					start, end := KeyGroupRange(maxP, 3, i)
					o := Options[string]{MaxParallelism: maxP, KeyGroupStart: start, KeyGroupEnd: end}
					sub := open(t, dst.make, o)
					ss := register(t, sub)
					if err := restore(sub, whole); err != nil {
						t.Fatal(err)
					}
					for k, v := range dump(t, sub, ss) {
						if kg := KeyGroup([]byte(k), maxP); kg < start || kg > end {
							t.Errorf("subtask %d [%d, %d] restored key %q of key group %d", i, start, end, k, kg)
						}
						union[k] = v
					}
					parts = append(parts, snapshot(t, sub, 4))
				}
				if !reflect.DeepEqual(union, want) {
					t.Fatalf("subtasks together hold %d keys, want %d", len(union), len(want))
				}
				// Scale back in to one subtask from the three snapshots.
				one := open(t, dst.make, fullRange(maxP))
				ones := register(t, one)
				if err := restore(one, parts...); err != nil {
					t.Fatal(err)
				}
				if got := dump(t, one, ones); !reflect.DeepEqual(got, want) {
					t.Fatal("scaling in lost or changed state")
				}
			})
		}
	}
}

func TestSnapshotIsolation(t *testing.T) {
	for _, src := range backendKinds {
		t.Run(src.name, func(t *testing.T) {
			b := open(t, src.make, fullRange(8))
			s := register(t, b)
			populate(b, s, 60)
			want := dump(t, b, s)
			write, err := b.Snapshot(9)
			if err != nil {
				t.Fatal(err)
			}
			mutate := func(round int) {
				for i := range 80 {
					b.SetCurrentKey(fmt.Sprintf("key-%d", i))
					switch i % 5 {
					case 0:
						s.count.Update(int64(-round))
						s.seen.Update([]string{"replaced"}) // in place, if the list were not copied on write
					case 1:
						s.seen.Add("added")                 // into spare capacity of a shared array
						s.seen.Update([]string{"u1", "u2"}) // then in place, unless the array was left behind
						s.attrs.Put("a", -1)
					case 2:
						s.attrs.Remove("a")
						s.attrs.Remove("bb")
						s.count.Clear()
					case 3:
						s.seen.Clear()
						s.attrs.Clear()
					case 4:
						s.attrs.Put("new", int64(round))
						s.seen.Update(nil)
					}
				}
			}
			mutate(1)
			// Write while the task goroutine goes on changing state (the race detector watches).
			buf, wait := writeConcurrently(t, write)
			for r := 2; r < 6; r++ {
				mutate(r)
			}
			wait()
			for _, dst := range backendKinds {
				b2 := open(t, dst.make, fullRange(8))
				s2 := register(t, b2)
				if err := restore(b2, buf.Bytes()); err != nil {
					t.Fatal(err)
				}
				if got := dump(t, b2, s2); !reflect.DeepEqual(got, want) {
					t.Fatalf("restored into %s: changes made after Snapshot leaked into it", dst.name)
				}
			}
		})
	}
}

func TestCorruptSnapshotIsDetected(t *testing.T) {
	b := open(t, NewHeap[string], fullRange(8))
	s := register(t, b)
	populate(b, s, 6)
	snap := snapshot(t, b, 5)
	for _, dst := range backendKinds {
		t.Run(dst.name, func(t *testing.T) {
			// One backend takes every attempt: a failed Restore leaves it unspecified, but still usable here.
			b := open(t, dst.make, fullRange(8))
			try := func(what string, data []byte) {
				t.Helper()
				err := restore(b, data)
				if !errors.Is(err, ErrCorruptSnapshot) {
					t.Fatalf("%s: err = %v", what, err)
				}
			}
			for n := 0; n < len(snap); n++ {
				try(fmt.Sprintf("truncated to %d of %d bytes", n, len(snap)), snap[:n])
			}
			for i := range snap {
				bad := bytes.Clone(snap)
				bad[i] ^= 0x20
				try(fmt.Sprintf("byte %d flipped", i), bad)
			}
			try("trailing bytes", append(bytes.Clone(snap), 0))
			if err := restore(b, snap[:len(snap)/2]); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("truncation does not wrap io.ErrUnexpectedEOF: %v", err)
			}
		})
	}
}

func TestPebbleLifecycle(t *testing.T) {
	dir := t.TempDir()
	b, err := NewPebble(Options[string]{MaxParallelism: 4, KeyGroupEnd: 3, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := register(t, b)
	populate(b, s, 10)
	unwritten, err := b.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	written, err := b.Snapshot(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := written(io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := written(io.Discard); err == nil {
		t.Fatal("a capture was written twice")
	}
	if err := b.Close(); err != nil { // releases the unwritten capture
		t.Fatal(err)
	}
	if err := unwritten(io.Discard); err == nil {
		t.Fatal("a capture was written after Close")
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("working directory left behind: %v %v", entries, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestHeapStateAllocatesNothingPerRecord(t *testing.T) {
	b, err := NewHeap(Options[int64]{MaxParallelism: 128, KeyGroupEnd: 127})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := NewValue[int64](b, "sum", nil)
	m, _ := NewMap[int64, int64](b, "m", nil, nil)
	for k := int64(0); k < 100; k++ {
		b.SetCurrentKey(k)
		v.Update(0)
		m.Put(k, 0)
	}
	// A snapshot starts a new epoch: the first change of each map copies it, later ones do not.
	if _, err := b.Snapshot(1); err != nil {
		t.Fatal(err)
	}
	run := func() {
		for k := int64(0); k < 100; k++ {
			b.SetCurrentKey(k)
			n, _ := v.Value()
			v.Update(n + k)
			c, _ := m.Get(k)
			m.Put(k, c+1)
		}
	}
	run()
	if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
		t.Fatalf("%v allocs per run", allocs)
	}
}

// int64Backends are the backends the benchmarks run against.
var int64Backends = []struct {
	name string
	make func(Options[int64]) (KeyedBackend[int64], error)
}{{"heap", NewHeap[int64]}, {"pebble", NewPebble[int64]}}

// benchValue opens a backend owning key groups [0, lastKG] of 128 (closed when the benchmark ends) with an
// int64 value state.
func benchValue(b *testing.B, mk func(Options[int64]) (KeyedBackend[int64], error), lastKG int) (KeyedBackend[int64], ValueState[int64]) {
	b.Helper()
	kb, err := mk(Options[int64]{MaxParallelism: 128, KeyGroupEnd: lastKG, Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { kb.Close() })
	v, err := NewValue[int64](kb, "v", nil)
	if err != nil {
		b.Fatal(err)
	}
	return kb, v
}

func BenchmarkValueUpdate(b *testing.B) {
	const keys = 1024
	for _, bk := range int64Backends {
		b.Run(bk.name, func(b *testing.B) {
			kb, v := benchValue(b, bk.make, 127)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				kb.SetCurrentKey(int64(i % keys))
				n, _ := v.Value()
				v.Update(n + 1)
			}
		})
	}
}

// BenchmarkSnapshot measures what a checkpoint costs the task goroutine (capture, ns/op) and the writer
// goroutine (write-ns/op) for 100,000 keys of value state.
func BenchmarkSnapshot(b *testing.B) {
	const keys = 100_000
	for _, bk := range int64Backends {
		b.Run(bk.name, func(b *testing.B) {
			kb, v := benchValue(b, bk.make, 127)
			for k := range int64(keys) {
				kb.SetCurrentKey(k)
				v.Update(k)
			}
			var writeNs int64
			b.ResetTimer()
			for i := range b.N {
				writeNs += captureAndWrite(b, kb, int64(i))
				b.StartTimer()
			}
			b.ReportMetric(float64(writeNs)/float64(b.N), "write-ns/op")
		})
	}
}

// newSumReducer opens a backend (closed when the test ends) with an int64 value state and its Reducer.
func newSumReducer(t *testing.T, mk func(Options[string]) (KeyedBackend[string], error)) (KeyedBackend[string], ValueState[int64], Reducer[string, int64]) {
	t.Helper()
	b := open(t, mk, fullRange(8))
	t.Cleanup(func() { b.Close() })
	v, err := NewValue[int64](b, "sum", nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, v, NewReducer[string, int64](b, v)
}

// TestReducer checks the fused reduce step against the three calls it stands for, on both backends (the
// heap one takes its own path), including that a failing combine leaves the value as it was and that the
// result survives a snapshot.
func TestReducer(t *testing.T) {
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b, v, r := newSumReducer(t, bk.make)
			if _, isHeap := r.(*heapReducer[string, int64]); isHeap != (bk.name == "heap") {
				t.Fatalf("reducer %T on the %s backend", r, bk.name)
			}
			errOdd := errors.New("odd")
			add := func(acc, x int64) (int64, error) {
				if x == 13 {
					return 0, errOdd
				}
				return acc + x, nil
			}
			steps := []struct {
				key     string
				x, want int64
				err     error
			}{
				{"a", 1, 1, nil}, {"b", 5, 5, nil}, {"a", 2, 3, nil}, {"a", 13, 0, errOdd}, {"a", 4, 7, nil},
				{"c", 13, 13, nil}, // the first value of a key is stored without calling fn
				{"b", 13, 0, errOdd}, {"b", 1, 6, nil},
			}
			for i, s := range steps {
				got, err := r.Reduce(s.key, s.x, add)
				if !errors.Is(err, s.err) || (err == nil && got != s.want) {
					t.Fatalf("step %d %+v: got %d, %v", i, s, got, err)
				}
			}
			want := map[string]int64{"a": 7, "b": 6, "c": 13}
			for k, w := range want {
				b.SetCurrentKey(k)
				if got, ok := v.Value(); !ok || got != w {
					t.Fatalf("value of %s = %d, %v; want %d", k, got, ok, w)
				}
			}
			write, err := b.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			var snap bytes.Buffer
			if err := write(&snap); err != nil {
				t.Fatal(err)
			}
			b2 := open(t, bk.make, fullRange(8))
			defer b2.Close()
			v2, err := NewValue[int64](b2, "sum", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := b2.Restore([]io.Reader{bytes.NewReader(snap.Bytes())}); err != nil {
				t.Fatal(err)
			}
			if got, err := NewReducer[string, int64](b2, v2).Reduce("a", 10, add); err != nil || got != 17 {
				t.Fatalf("after restore: %d, %v", got, err)
			}
		})
	}
}

// BenchmarkReduce is the per-record state work of a keyed sum: 1024 int64 keys, half of them owned.
func BenchmarkReduce(b *testing.B) {
	kb, v := benchValue(b, NewHeap[int64], 63)
	var keys []int64
	for k := range int64(1024) {
		var enc [8]byte
		binary.LittleEndian.PutUint64(enc[:], uint64(k))
		if KeyGroup(enc[:], 128) < 64 {
			keys = append(keys, k)
		}
	}
	r := NewReducer[int64, int64](kb, v)
	add := func(a, x int64) (int64, error) { return a + x, nil }
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := r.Reduce(keys[i%len(keys)], 1, add); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReduceAll checks the batch step against Reduce, on both backends, including a combine that fails in
// the middle of a batch: the results before it are returned, the state after it untouched.
func TestReduceAll(t *testing.T) {
	errBad := errors.New("bad")
	add := func(acc, x int64) (int64, error) {
		if x < 0 {
			return 0, errBad
		}
		return acc + x, nil
	}
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			_, _, r := newSumReducer(t, bk.make)
			out, err := r.ReduceAll([]string{"a", "b", "a", "a", "c"}, []int64{1, 2, 3, 4, 5}, add, nil)
			if err != nil || !slices.Equal(out, []int64{1, 2, 4, 8, 5}) {
				t.Fatalf("ReduceAll: %v, %v", out, err)
			}
			out, err = r.ReduceAll([]string{"b", "a", "c"}, []int64{10, -1, 100}, add, out[:0])
			if !errors.Is(err, errBad) || !slices.Equal(out, []int64{12}) {
				t.Fatalf("ReduceAll with a failing combine: %v, %v", out, err)
			}
			for k, want := range map[string]int64{"a": 8, "b": 12, "c": 5} {
				if got, err := r.Reduce(k, 0, add); err != nil || got != want {
					t.Errorf("%s: %d, %v; want %d", k, got, err, want)
				}
			}
		})
	}
}

// TestHeapSnapshotOrderIsIncremental pins the cached canonical order of heap snapshots: a backend that grew
// over several snapshots writes the same bytes as a fresh one holding the same state, and a snapshot
// captured before keys were added but written after a newer snapshot leaves those keys out.
func TestHeapSnapshotOrderIsIncremental(t *testing.T) {
	write := func(w func(io.Writer) error) []byte {
		t.Helper()
		var buf bytes.Buffer
		if err := w(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	fill := func(b KeyedBackend[string], v ValueState[int64], keys []string) {
		for _, k := range keys {
			b.SetCurrentKey(k)
			v.Update(int64(len(k)))
		}
	}
	var all []string
	for i := range 300 {
		all = append(all, fmt.Sprintf("key-%d", (i*7919)%1000))
	}
	grown := open(t, NewHeap[string], fullRange(16))
	defer grown.Close()
	gv, err := NewValue[int64](grown, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	var early func(io.Writer) error
	for round, chunk := range [][]string{all[:100], all[100:101], all[101:250], all[250:]} {
		fill(grown, gv, chunk)
		w, err := grown.Snapshot(7)
		if err != nil {
			t.Fatal(err)
		}
		if round == 1 {
			early = w // written last, after later snapshots extended the order
			continue
		}
		write(w)
	}
	last, err := grown.Snapshot(7)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		keys []string
		w    func(io.Writer) error
	}{{all, last}, {all[:101], early}} {
		fresh := open(t, NewHeap[string], fullRange(16))
		fv, err := NewValue[int64](fresh, "v", nil)
		if err != nil {
			t.Fatal(err)
		}
		rev := slices.Clone(tc.keys)
		slices.Reverse(rev)
		fill(fresh, fv, rev)
		want, err := fresh.Snapshot(7)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := write(tc.w), write(want); !bytes.Equal(got, want) {
			t.Errorf("snapshot of %d keys: %d bytes differ from a fresh backend's %d", len(tc.keys), len(got), len(want))
		}
		fresh.Close()
	}
}

package state

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// segStates are the states of one backend of TestSegmentCacheMatchesFullEncoding: one of each kind the
// segment cache covers, a value state and a TTL map (which it must leave out).
type segStates struct {
	b      KeyedBackend[int64]
	m      MapState[benchWindow, int64]
	l      ListState[string]
	lm     ListMapState[int32, int64]
	timers Timers
	v      ValueState[int64]
	ttl    MapState[int64, int64]
}

func newSegStates(t *testing.T, now func() int64) *segStates {
	t.Helper()
	kb, err := NewHeap[int64](Options[int64]{MaxParallelism: 16, KeyGroupEnd: 15, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return declareSegStates(t, kb)
}

// declareSegStates declares the states of segStates on kb, which it closes at the end of the test.
func declareSegStates(t *testing.T, kb KeyedBackend[int64]) *segStates {
	t.Helper()
	t.Cleanup(func() { kb.Close() })
	s := &segStates{b: kb}
	eb := Engine(kb)
	errs := []error{}
	var e error
	s.m, e = NewMap[benchWindow, int64](eb, "\x00window/acc", codec.MustStruct[benchWindow](), nil)
	errs = append(errs, e)
	s.l, e = NewList[string](kb, "list", nil)
	errs = append(errs, e)
	s.lm, e = NewListMap[int32, int64](eb, "\x00window/elems", nil, nil)
	errs = append(errs, e)
	s.timers, e = NewTimers[int64](eb, "\x00timers/event")
	errs = append(errs, e)
	s.v, e = NewValue[int64](kb, "value", nil)
	errs = append(errs, e)
	s.ttl, e = NewMap[int64, int64](WithTTL(kb, TTL{TTL: 50 * time.Millisecond}), "ttl", nil, nil)
	errs = append(errs, e)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	kb.SealDeclarations()
	return s
}

// clearFrom clears every state of the keys from k on (below 1000) and fires every timer, so that those
// keys go.
func (s *segStates) clearFrom(k int64) {
	_ = s.timers.FireUpTo(1<<40, func(int64, Namespace) error { return nil })
	for ; k < 1000; k++ {
		s.b.SetCurrentKey(k)
		s.m.Clear()
		s.l.Clear()
		for mk := range int32(3) {
			s.lm.Remove(mk)
		}
		s.v.Clear()
		s.ttl.Clear()
	}
}

// apply performs operation op (drawn by the test) on key k.
func (s *segStates) apply(k int64, op, x int) {
	s.b.SetCurrentKey(k)
	w := benchWindow{Start: int64(x % 4), End: int64(x%4) + 10}
	switch op {
	case 0:
		n, _ := s.m.Get(w)
		s.m.Put(w, n+1)
	case 1:
		s.m.Remove(w)
	case 2:
		s.m.Clear()
	case 3:
		s.l.Add(fmt.Sprint(x))
	case 4:
		s.l.Update([]string{fmt.Sprint(x), "u"})
	case 5:
		s.l.Clear()
	case 6:
		s.lm.Append(int32(x%3), int64(x))
	case 7:
		s.lm.Remove(int32(x % 3))
	case 8:
		s.timers.Register(int64(x%50), Namespace{A: int64(x % 2)})
	case 9:
		s.timers.Delete(int64(x%50), Namespace{A: int64(x % 2)})
	case 10:
		_ = s.timers.FireUpTo(int64(x%10), func(int64, Namespace) error { return nil })
	case 11:
		s.v.Update(int64(x))
	case 12:
		s.v.Clear()
	case 13:
		s.ttl.Put(int64(x%3), int64(x))
	}
}

// failingWriter fails once after n bytes.
type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return w.n, errors.New("storage down")
	}
	w.n -= len(p)
	return len(p), nil
}

// TestSegmentCacheMatchesFullEncoding holds the segment cache to the encoding of every key: two heap
// backends take the same random operations (on few keys, so that keys are freed and their slots reused,
// and on most of them rarely, so that many keys stay unchanged between snapshots), and every snapshot of
// the cached one must be byte for byte the snapshot of the other. Some rounds write their snapshot after
// the next one (out of order), some hold on to a capture over several snapshots, and some writes of the
// cached backend fail halfway; half of them write into a checkpoint blob, which lends its memory.
func TestSegmentCacheMatchesFullEncoding(t *testing.T) {
	spare := segSpareBytes
	t.Cleanup(func() { segSpareBytes = spare })
	for _, tc := range []struct {
		seed  uint64
		spare int
	}{
		{seed: 1, spare: spare},
		{seed: 2, spare: spare},
		{seed: 3, spare: 0}, // the spare buffer let go at nearly every write
		{seed: 4, spare: 0},
	} {
		seed := tc.seed
		t.Run(fmt.Sprintf("seed=%d,spare=%d", seed, tc.spare), func(t *testing.T) {
			segSpareBytes = tc.spare
			clock := int64(1_000_000)
			now := func() int64 { return clock }
			cached, full := newSegStates(t, now), newReference(t, now)
			rng := rand.New(rand.NewPCG(seed, 7))
			type pending struct {
				id   int64
				a, f func(io.Writer) error
			}
			var held []*pending
			var mem checkpoint.BlobMemory
			write := func(p *pending, fail bool) {
				t.Helper()
				if fail {
					if err := p.a(&failingWriter{n: rng.IntN(200)}); err == nil {
						// A small snapshot may fit; it is then checked like any other.
						t.Logf("snapshot %d fit before the failure", p.id)
					}
					return
				}
				var a, f bytes.Buffer
				if p.id%2 == 0 {
					if err := p.a(&a); err != nil {
						t.Fatal(err)
					}
				} else {
					// Into a blob, which lends the writer its memory, after what another operator wrote.
					blob := checkpoint.NewBlob(mem)
					blob.Write([]byte("another operator's state"))
					if err := p.a(blob); err != nil {
						t.Fatal(err)
					}
					a.Write(blob.Payload()[len("another operator's state"):])
					mem = blob.Memory()
				}
				if err := p.f(&f); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a.Bytes(), f.Bytes()) {
					logEntryDiff(t, a.Bytes(), f.Bytes())
					t.Fatalf("snapshot %d: the cached writer wrote %d bytes, the full encoding %d, and they differ", p.id, a.Len(), f.Len())
				}
			}
			for round := range 60 {
				// Most rounds touch a few hot keys; some touch many.
				ops, keys := 20, int64(8)
				if round%7 == 0 {
					ops, keys = 300, 120
				}
				clock += int64(rng.IntN(30))
				id := int64(round)
				a, f := applyBoth(t, rng, cached, full, ops, keys, id)
				p := &pending{id: id, a: a, f: f}
				switch r := rng.IntN(10); {
				case r < 2: // written after a later one
					held = append(held, p)
				case r < 3:
					write(p, true)
				default:
					write(p, false)
					for _, h := range held {
						write(h, false)
					}
					held = held[:0]
				}
			}
			for _, h := range held {
				write(h, false)
			}
			// The test means something only if each covered state copied segments.
			for name, sc := range map[string]*segCache{
				"map": cached.m.(*heapMap[benchWindow, int64]).sc, "list": cached.l.(*heapList[string]).sc,
				"list map": cached.lm.(*heapListMap[int32, int64]).sc, "timers": cached.timers.(*heapTimers).sc,
			} {
				if sc == nil || sc.reused == 0 {
					t.Errorf("%s state: no segment reused", name)
				}
			}
		})
	}
}

// applyBoth applies ops random operations on keys [0, keys) to both backends (the cached one and the one
// that encodes every key) and captures both for checkpoint id.
func applyBoth(t *testing.T, rng *rand.Rand, cached, full *segStates, ops int, keys, id int64) (a, f func(io.Writer) error) {
	t.Helper()
	for range ops {
		k, op, x := rng.Int64N(keys), rng.IntN(14), rng.IntN(1000)
		cached.apply(k, op, x)
		full.apply(k, op, x)
	}
	a, err := cached.b.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	f, err = full.b.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	return a, f
}

// logEntryDiff logs the first entries in which snapshots a (cached) and f (full encoding) differ.
func logEntryDiff(t *testing.T, a, f []byte) {
	t.Helper()
	dump := func(b []byte) (out []string) {
		err := readSnapshot(bytes.NewReader(b), keyGroups{maxP: 16, end: 15}, func(*snapHeader) error { return nil }, func(e *snapEntry) error {
			out = append(out, fmt.Sprintf("key group %d state %d key %x map key %x value %x", e.kg, e.state, e.key, e.mapKey, e.value))
			return nil
		})
		if err != nil {
			out = append(out, err.Error())
		}
		return out
	}
	da, df := dump(a), dump(f)
	shown := 0
	for i := 0; i < max(len(da), len(df)) && shown < 5; i++ {
		var x, y string
		if i < len(da) {
			x = da[i]
		}
		if i < len(df) {
			y = df[i]
		}
		if x != y {
			t.Logf("entry %d: cached %q, full %q", i, x, y)
			shown++
		}
	}
}

// TestSegmentsFollowTheLiveKeys checks that the segments of keys that went are let go: after most keys
// clear their state, the next snapshots leave the segment bytes at about what the remaining keys need.
func TestSegmentsFollowTheLiveKeys(t *testing.T) {
	spare := segSpareBytes
	t.Cleanup(func() { segSpareBytes = spare })
	segSpareBytes = 0
	s := newSegStates(t, func() int64 { return 0 })
	const keys, kept = 2000, 100
	for k := range int64(keys) {
		for x := range 4 {
			s.apply(k, 0, x) // four map entries
		}
		s.apply(k, 8, int(k)) // a timer
	}
	snapshot := func() *segCache {
		t.Helper()
		write, err := s.b.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(io.Discard); err != nil {
			t.Fatal(err)
		}
		return s.m.(*heapMap[benchWindow, int64]).sc
	}
	full := len(snapshot().data)
	for k := int64(kept); k < keys; k++ {
		s.apply(k, 2, 0)      // clear the map
		s.apply(k, 9, int(k)) // delete the timer
	}
	snapshot()
	sc := snapshot()
	if want := full * kept / keys; len(sc.data) != want {
		t.Fatalf("%d bytes of data after %d of %d keys kept their state, want %d (%d for all)", len(sc.data), kept, keys, want, full)
	}
	if held := cap(sc.data) + cap(sc.next); held > 4*len(sc.data) {
		t.Fatalf("%d bytes held for %d bytes of data", held, len(sc.data))
	}
}

// TestSizesFromTheList pins how a delta finds the sizes a full write not asked for one left in its list:
// set per slot from the list, also for slots past the capture's (a list of a newer capture, with more
// slots, than the one written next), and only once.
func TestSizesFromTheList(t *testing.T) {
	c := &segCache{}
	c.begin(0, 4, 0, false)
	// What a full write builds: its list becomes the cache's when it finishes.
	c.nextList, c.caching = []segKey{{slot: 1, gen: 1, n: 7, count: 1}, {slot: 5, gen: 1, n: 9, count: 2}}, true
	c.finish(3, true, false, nil, nil)
	if !c.sizesInList || c.sizesAt != 3 {
		t.Fatalf("after a full write not asked for a delta: sizes in the list %v, of epoch %d", c.sizesInList, c.sizesAt)
	}
	if ok := c.begin(0, 4, 3, true); !ok {
		t.Fatal("a delta on the full write finds its sizes unknown")
	}
	if want := []int32{0, 7, 0, 0, 0, 9}; !slices.Equal(c.sizes, want) || c.sizesInList {
		t.Fatalf("sizes %v (in the list %v), want %v from the list", c.sizes, c.sizesInList, want)
	}
}

// TestSegmentCacheReusesAroundGoneAndNewKeys pins how much a full write reuses when keys went and new ones
// came since the last: every key left unchanged, whether the keys next to it in the order went or are
// new. (A miss costs no correctness, the key is encoded instead, so the snapshot tests cannot see it.)
// Each case takes a second write too, after the first wrote with the keys of the last one gone.
func TestSegmentCacheReusesAroundGoneAndNewKeys(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		goEvery, changeEvery int64 // of the first 1000 keys, those that go and those that change
		added                int64 // new keys
	}{
		{name: "new keys only", added: 300},
		{name: "keys gone only", goEvery: 3},
		{name: "gone and new", goEvery: 4, added: 200},
		{name: "gone, changed and new", goEvery: 5, changeEvery: 7, added: 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kb, err := NewHeap[int64](Options[int64]{MaxParallelism: 16, KeyGroupEnd: 15})
			if err != nil {
				t.Fatal(err)
			}
			defer kb.Close()
			m, err := NewMap[int64, int64](kb, "m", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			write := func(id int64) {
				t.Helper()
				w, err := kb.Snapshot(id)
				if err != nil {
					t.Fatal(err)
				}
				if err := w(io.Discard); err != nil {
					t.Fatal(err)
				}
			}
			for k := range int64(1000) {
				kb.SetCurrentKey(k)
				m.Put(k, k)
			}
			write(1)
			sc := m.(*heapMap[int64, int64]).sc
			want := 0
			for k := range int64(1000) {
				kb.SetCurrentKey(k)
				switch {
				case tc.goEvery > 0 && k%tc.goEvery == 0:
					m.Clear()
				case tc.changeEvery > 0 && k%tc.changeEvery == 0:
					m.Put(k, -k)
				default:
					want++
				}
			}
			for k := range tc.added {
				kb.SetCurrentKey(1_000_000 + k*31)
				m.Put(k, k)
			}
			before := sc.reused
			write(2)
			if got := sc.reused - before; got != want {
				t.Errorf("the first write reused %d keys, want %d", got, want)
			}
			before = sc.reused
			write(3) // every key unchanged since the last write (a cleared key's slot, not yet freed, too)
			if got, live := sc.reused-before, len(heapOf(t, kb).order.order); got != live {
				t.Errorf("the second write reused %d keys, want all %d", got, live)
			}
		})
	}
}

// TestLentBlobMatchesFullEncoding writes states of a few megabytes into checkpoint blobs of a pool, as a
// task does, and holds them byte for byte to a full encoding written through a buffer into a
// bytes.Buffer. The writer appends into a blob's memory in place (grown as it goes, checksummed a
// buffer's worth at a time) and keeps those bytes as its data, copying the unchanged keys' from them into
// the next blob: which must then be in other memory, while the blob before last's is reused once let go
// (when it has room).
func TestLentBlobMatchesFullEncoding(t *testing.T) {
	clock := int64(1_000_000)
	now := func() int64 { return clock }
	cached, full := newSegStates(t, now), newReference(t, now)
	rng := rand.New(rand.NewPCG(5, 9))
	pool := checkpoint.NewBlobPool()
	var mems []*byte
	reused, recycled := 0, 0
	for round := range 8 {
		id := int64(round + 1)
		a, f := applyBoth(t, rng, cached, full, 40_000, 20_000+int64(round)*10_000, id)
		blob := pool.Blob()
		blob.Write([]byte("another operator's state"))
		if err := a(blob); err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := f(&want); err != nil {
			t.Fatal(err)
		}
		if got := blob.Payload()[len("another operator's state"):]; !bytes.Equal(got, want.Bytes()) {
			logEntryDiff(t, got, want.Bytes())
			t.Fatalf("round %d: the blob holds %d bytes, the full encoding %d, and they differ", round, len(got), want.Len())
		}
		if want.Len() < 4*snapBufferBytes {
			t.Fatalf("round %d: a snapshot of %d bytes, too small to be checksummed in pieces", round, want.Len())
		}
		sc := cached.m.(*heapMap[benchWindow, int64]).sc
		if round > 0 && sc.reused == reused {
			t.Fatalf("round %d: no key's bytes copied from the last blob", round)
		}
		reused = sc.reused
		mems = append(mems, unsafe.SliceData(blob.Payload()))
		if round > 0 && mems[round] == mems[round-1] {
			t.Fatalf("round %d: the blob is in the memory of the last one, which the writer holds", round)
		}
		if round >= 2 && mems[round] == mems[round-2] {
			recycled++
		}
		blob.Done()
	}
	if recycled == 0 {
		t.Error("no blob was written in the memory of the one before last, let go")
	}
}

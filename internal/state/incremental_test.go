package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/runnel-dev/runnel/codec"
)

// TestDeltaChainsRestoreExactly takes random operations on a heap backend (the states of
// TestSegmentCacheMatchesFullEncoding: every kind, a value and a TTL state), snapshots it after each
// round as a delta of the previous write or, every so often and after a failed write, as a full
// snapshot, and restores every chain (the full snapshot and the deltas up to that round) into a fresh
// heap and a fresh pebble backend: each must hold exactly the state of that round, which a full snapshot
// of the restored backend shows byte for byte against the reference's (and a full snapshot of the live
// one, after deltas, must be the reference's byte for byte). A delta must also be smaller
// than the full snapshot of the same round once the state is large and changes little.
func TestDeltaChainsRestoreExactly(t *testing.T) {
	for _, tc := range []struct {
		name      string
		seed      uint64
		fullEvery int // a full snapshot every so many rounds (0: only the first and after failures)
		failEvery int // a write fails halfway every so many rounds (0: never)
		skipEvery int // a capture is not written every so many rounds (0: never)
		// deltaAfterFail writes a delta after a failed write too: it builds on the last stored piece, and
		// must then hold every state whole (the failed write left the key sizes behind).
		deltaAfterFail bool
		clearEvery     int // most keys go every so many rounds (0: never); the delta then holds every state whole
	}{
		{name: "one chain", seed: 1},
		{name: "full every 5", seed: 2, fullEvery: 5},
		{name: "failing writes", seed: 3, failEvery: 4},
		{name: "both", seed: 4, fullEvery: 7, failEvery: 3},
		{name: "skipped captures", seed: 5, skipEvery: 3},
		{name: "delta after a failed write", seed: 6, failEvery: 4, deltaAfterFail: true},
		{name: "most keys go", seed: 7, clearEvery: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := int64(1_000_000)
			now := func() int64 { return clock }
			live, ref := newSegStates(t, now), newReference(t, now)
			rng := rand.New(rand.NewPCG(tc.seed, 11))
			var chain [][]byte // the pieces the next restore needs
			full := true       // the next write must be a full one
			smaller := false
			var base []byte // the reference's snapshot of the state the last stored piece holds
			failed := false // the last write failed
			for round := 1; round <= 40; round++ {
				ops, keys := 15, int64(10)
				if round%6 == 1 {
					ops, keys = 400, 300 // a large round: many keys, most left alone afterwards
				}
				for range ops {
					k, op, x := rng.Int64N(keys), rng.IntN(14), rng.IntN(1000)
					live.apply(k, op, x)
					ref.apply(k, op, x)
				}
				clock += int64(rng.IntN(20))
				cleared := tc.clearEvery > 0 && round%tc.clearEvery == 3
				if cleared {
					live.clearFrom(5)
					ref.clearFrom(5)
				}
				id := int64(round)
				fw, dw, err := SnapshotIncremental(live.b, id)
				if err != nil {
					t.Fatal(err)
				}
				if tc.skipEvery > 0 && round%tc.skipEvery == 0 {
					continue // captured, never written (a checkpoint declined): the next delta holds its changes
				}
				if tc.failEvery > 0 && round%tc.failEvery == 0 {
					if _, err := dw(&failingWriter{n: rng.IntN(100)}); err == nil {
						t.Logf("round %d: the delta fit before the failure", round)
					}
					if !tc.deltaAfterFail {
						full = true // not stored: the next one cannot build on it
					}
					failed = true
					continue
				}
				var piece bytes.Buffer
				var superseded int64
				if full || (tc.fullEvery > 0 && round%tc.fullEvery == 0) {
					if err := fw(&piece); err != nil {
						t.Fatal(err)
					}
					chain = chain[:0]
				} else if superseded, err = dw(&piece); err != nil {
					t.Fatal(err)
				}
				full = false
				chain = append(chain, bytes.Clone(piece.Bytes()))
				rw, err := ref.b.Snapshot(id)
				if err != nil {
					t.Fatal(err)
				}
				var want bytes.Buffer
				if err := rw(&want); err != nil {
					t.Fatal(err)
				}
				if IsDelta(piece.Bytes()) {
					if (failed || cleared) && !wholeStates(t, piece.Bytes()) {
						t.Fatalf("round %d: a delta after a failed write or after most keys went holds a state as changes", round)
					}
					if exp := supersededBytes(t, base, piece.Bytes(), failed); superseded != exp {
						t.Fatalf("round %d: the delta supersedes %d bytes, want %d", round, superseded, exp)
					}
				}
				base, failed = bytes.Clone(want.Bytes()), false
				if IsDelta(piece.Bytes()) && piece.Len() < want.Len()/2 {
					smaller = true
				}
				if !IsDelta(piece.Bytes()) && !bytes.Equal(piece.Bytes(), want.Bytes()) {
					// A full write after deltas copies the segments that the deltas kept.
					logEntryDiff(t, piece.Bytes(), want.Bytes())
					t.Fatalf("round %d: the full snapshot differs from the reference's (%d bytes, want %d)", round, piece.Len(), want.Len())
				}
				if got := ChainStart(chain); got != 0 {
					t.Fatalf("round %d: the chain starts at piece %d, want 0", round, got)
				}
				for _, backend := range []string{"heap", "pebble"} {
					var kb KeyedBackend[int64]
					opts := Options[int64]{MaxParallelism: 16, KeyGroupEnd: 15, Now: now}
					if backend == "heap" {
						kb, err = NewHeap(opts)
					} else {
						opts.Dir = t.TempDir()
						kb, err = NewPebble(opts)
					}
					if err != nil {
						t.Fatal(err)
					}
					back := declareSegStates(t, kb)
					if err := back.b.Restore(readers(chain)); err != nil {
						t.Fatalf("round %d, %s: restore a chain of %d: %v", round, backend, len(chain), err)
					}
					bw, err := back.b.Snapshot(id)
					if err != nil {
						t.Fatal(err)
					}
					var got bytes.Buffer
					if err := bw(&got); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got.Bytes(), want.Bytes()) {
						logEntryDiff(t, got.Bytes(), want.Bytes())
						t.Fatalf("round %d, %s: the restored chain of %d differs from the state (%d bytes, want %d)",
							round, backend, len(chain), got.Len(), want.Len())
					}
					back.b.Close()
				}
			}
			if !smaller {
				t.Fatal("no delta was less than half its round's full snapshot")
			}
		})
	}
}

// supersededBytes computes what delta supersedes of base (a full snapshot of the state delta builds
// on): for each state the delta holds as changes, the base's entry bytes of every key it names (with
// entries or a deletion); for each state it holds whole, the bytes of its entries in the base if the
// writer knew them (a state of the segment cache, unless the write before failed), else in the delta.
func supersededBytes(t *testing.T, base, delta []byte, failed bool) int64 {
	t.Helper()
	type stateKey struct{ state, key string }
	entryBytes := func(h *snapHeader, e *snapEntry) int64 {
		n := 3 + uvarintLen(e.state) + uvarintLen(len(e.key)) + len(e.key) + uvarintLen(len(e.value)) + len(e.value)
		if h.states[e.state].kind.hasMapKey() {
			n += uvarintLen(len(e.mapKey)) + len(e.mapKey)
		}
		return int64(n)
	}
	g := keyGroups{maxP: 16, end: 15}
	held := make(map[stateKey]int64)
	stateBytes := make(map[string]int64)
	var h *snapHeader
	onHeader := func(hd *snapHeader) error { h = hd; return nil }
	if err := readSnapshot(bytes.NewReader(base), g, onHeader, func(e *snapEntry) error {
		n := entryBytes(h, e)
		held[stateKey{h.states[e.state].name, string(e.key)}] += n
		stateBytes[h.states[e.state].name] += n
		return nil
	}); err != nil {
		t.Fatalf("read the base: %v", err)
	}
	var sum int64
	named := make(map[stateKey]bool)
	if err := readSnapshot(bytes.NewReader(delta), g, func(hd *snapHeader) error {
		h = hd
		for _, st := range h.states {
			if !st.delta && !failed && st.flags&flagTTL == 0 && st.kind != kindValue {
				sum += stateBytes[st.name]
			}
		}
		return nil
	}, func(e *snapEntry) error {
		st := h.states[e.state]
		if !st.delta {
			if failed || st.flags&flagTTL != 0 || st.kind == kindValue {
				sum += entryBytes(h, e)
			}
			return nil
		}
		if k := (stateKey{st.name, string(e.key)}); !named[k] {
			named[k] = true
			sum += held[k]
		}
		return nil
	}); err != nil {
		t.Fatalf("read the delta: %v", err)
	}
	return sum
}

// wholeStates reports whether a delta holds every state whole.
func wholeStates(t *testing.T, delta []byte) bool {
	t.Helper()
	whole := true
	if err := readSnapshot(bytes.NewReader(delta), keyGroups{maxP: 16, end: 15}, func(h *snapHeader) error {
		for _, st := range h.states {
			whole = whole && !st.delta
		}
		return nil
	}, func(*snapEntry) error { return nil }); err != nil {
		t.Fatalf("read the delta: %v", err)
	}
	return whole
}

func uvarintLen(n int) int { return len(binary.AppendUvarint(nil, uint64(n))) }

// chainPiece captures kb for checkpoint id and writes the capture as a full snapshot or as a delta.
func chainPiece(t *testing.T, kb KeyedBackend[int64], id int64, full bool) []byte {
	t.Helper()
	fw, dw, err := SnapshotIncremental(kb, id)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if full {
		err = fw(&b)
	} else {
		_, err = dw(&b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func readers(pieces [][]byte) []io.Reader {
	rs := make([]io.Reader, len(pieces))
	for i, p := range pieces {
		rs[i] = bytes.NewReader(p)
	}
	return rs
}

// TestDeltaChainsRescale splits the state of one backend over key groups: two backends own halves of the
// key groups and each takes snapshots as a chain; a backend owning all key groups restores both chains
// at once (the rescale from two subtasks to one) and one owning a quarter restores them too (from two to
// four): each holds exactly the entries of its key groups.
func TestDeltaChainsRescale(t *testing.T) {
	now := func() int64 { return 0 }
	halves := [2]*segStates{}
	var chains [2][][]byte
	all, err := NewHeap(Options[int64]{MaxParallelism: 16, KeyGroupEnd: 15, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ref := declareSegStates(t, all)
	for i := range halves {
		kb, err := NewHeap(Options[int64]{MaxParallelism: 16, KeyGroupStart: 8 * i, KeyGroupEnd: 8*i + 7, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		halves[i] = declareSegStates(t, kb)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	enc := func(k int64) int {
		b, _ := codec.Int64().Append(nil, k)
		return KeyGroup(b, 16) / 8
	}
	for round := 1; round <= 8; round++ {
		for range 200 {
			// Neither firing timers (it would fire in one half only) nor TTL (no clock here).
			k, op, x := rng.Int64N(60), rng.IntN(12), rng.IntN(1000)
			if op >= 10 {
				op++
			}
			halves[enc(k)].apply(k, op, x)
			ref.apply(k, op, x)
		}
		for i, h := range halves {
			chains[i] = append(chains[i], chainPiece(t, h.b, int64(round), round == 1))
		}
	}
	rw, err := ref.b.Snapshot(8)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := rw(&want); err != nil {
		t.Fatal(err)
	}
	// Restored from both chains at once, one owner of every key group holds the whole state.
	one, err := NewHeap(Options[int64]{MaxParallelism: 16, KeyGroupEnd: 15, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	back := declareSegStates(t, one)
	if err := back.b.Restore(append(readers(chains[0]), readers(chains[1])...)); err != nil {
		t.Fatal(err)
	}
	bw, _ := back.b.Snapshot(8)
	var got bytes.Buffer
	if err := bw(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		logEntryDiff(t, got.Bytes(), want.Bytes())
		t.Fatalf("rescaled 2 to 1: %d bytes, want %d", got.Len(), want.Len())
	}
	// Four owners of a quarter each, restored from both chains, hold the whole state together.
	entries := 0
	for q := range 4 {
		kb, err := NewHeap(Options[int64]{MaxParallelism: 16, KeyGroupStart: 4 * q, KeyGroupEnd: 4*q + 3, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		s := declareSegStates(t, kb)
		if err := s.b.Restore(append(readers(chains[0]), readers(chains[1])...)); err != nil {
			t.Fatal(err)
		}
		w, _ := s.b.Snapshot(8)
		var b bytes.Buffer
		if err := w(&b); err != nil {
			t.Fatal(err)
		}
		err = readSnapshot(bytes.NewReader(b.Bytes()), keyGroups{maxP: 16, start: 4 * q, end: 4*q + 3},
			func(*snapHeader) error { return nil }, func(*snapEntry) error { entries++; return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	wantEntries := 0
	err = readSnapshot(bytes.NewReader(want.Bytes()), keyGroups{maxP: 16, end: 15},
		func(*snapHeader) error { return nil }, func(*snapEntry) error { wantEntries++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if entries != wantEntries {
		t.Fatalf("rescaled 2 to 4: %d entries over the four, want %d", entries, wantEntries)
	}
}

// TestDeltaDamage: a delta that is cut short or altered is refused like any snapshot, naming which of
// the chain it is.
func TestDeltaDamage(t *testing.T) {
	s := newSegStates(t, func() int64 { return 0 })
	var chain [][]byte
	for round := 1; round <= 3; round++ {
		for k := range int64(20) {
			s.apply(k*int64(round), 0, round)
			s.apply(k, 1, round-1)
		}
		chain = append(chain, chainPiece(t, s.b, int64(round), round == 1))
	}
	if !IsDelta(chain[2]) || IsDelta(chain[0]) {
		t.Fatal("pieces 2 and 3 should be deltas, 1 not")
	}
	for _, damage := range []func([]byte) []byte{
		func(b []byte) []byte { return b[:len(b)/2] },
		func(b []byte) []byte { c := bytes.Clone(b); c[len(c)/2] ^= 0x40; return c },
	} {
		bad := [][]byte{chain[0], chain[1], damage(chain[2])}
		back := newSegStates(t, func() int64 { return 0 })
		err := back.b.Restore(readers(bad))
		if !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("damaged delta: %v, want ErrCorruptSnapshot", err)
		}
		if want := "snapshot 3 of 3"; !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Fatalf("damaged delta: %v does not say %q", err, want)
		}
	}
}

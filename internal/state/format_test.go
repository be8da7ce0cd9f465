package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestFormatV1StillRestores restores testdata/keyed-v1.snap, written by the version 1 writer (the build
// before format 2) from populate(20) at 8 key groups, into both backends: the contents are populate's, and
// a new snapshot is version 2, byte for byte what a backend that did the updates itself writes.
func TestFormatV1StillRestores(t *testing.T) {
	v1, err := os.ReadFile("testdata/keyed-v1.snap")
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint16(v1[len(snapMagic):]); got != 1 {
		t.Fatalf("fixture is version %d", got)
	}
	fresh := open(t, NewHeap[string], fullRange(8))
	fs := register(t, fresh)
	populate(fresh, fs, 20)
	want, wantSnap := dump(t, fresh, fs), snapshot(t, fresh, 42)
	if got := binary.BigEndian.Uint16(wantSnap[len(snapMagic):]); got != snapVersion {
		t.Fatalf("new snapshots are version %d", got)
	}
	for _, dst := range backendKinds {
		for _, first := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s registered first %v", dst.name, first), func(t *testing.T) {
				b := open(t, dst.make, fullRange(8))
				var s *states
				if first {
					s = register(t, b)
				}
				if err := restore(b, v1); err != nil {
					t.Fatal(err)
				}
				if !first {
					s = register(t, b)
				}
				if got := dump(t, b, s); !reflect.DeepEqual(got, want) {
					t.Fatalf("restored from version 1:\n got %v\nwant %v", got, want)
				}
				if got := snapshot(t, b, 42); !bytes.Equal(got, wantSnap) {
					t.Fatal("the version 2 snapshot of restored version 1 state differs from a fresh backend's")
				}
			})
		}
	}
}

// rawState and rawEntry describe a snapshot for buildSnapshot.
type rawState struct {
	name        string
	kind, flags byte
}

type rawEntry struct {
	kg, state          int
	key, mapKey, value []byte
}

// buildSnapshot writes a snapshot of either version from its parts, with correct checksums and count, so
// that a test can make bytes that are well-sealed but wrong inside (or a version 1 snapshot). Entries of
// states whose kind has map keys get their map key written.
func buildSnapshot(version uint16, maxP int, states []rawState, entries []rawEntry) []byte {
	b := append([]byte(snapMagic), byte(version>>8), byte(version))
	b = binary.BigEndian.AppendUint64(b, 9)
	b = binary.BigEndian.AppendUint32(b, uint32(maxP))
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(maxP-1))
	b = binary.AppendUvarint(b, uint64(len(states)))
	for _, s := range states {
		b = binary.AppendUvarint(b, uint64(len(s.name)))
		b = append(append(b, s.name...), s.kind)
		if version >= 2 {
			b = append(b, s.flags)
		}
	}
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	for _, e := range entries {
		b = append(b, tagEntry, byte(e.kg>>8), byte(e.kg))
		b = binary.AppendUvarint(b, uint64(e.state))
		b = binary.AppendUvarint(b, uint64(len(e.key)))
		b = append(b, e.key...)
		if kind(states[e.state].kind).hasMapKey() {
			b = binary.AppendUvarint(b, uint64(len(e.mapKey)))
			b = append(b, e.mapKey...)
		}
		b = binary.AppendUvarint(b, uint64(len(e.value)))
		b = append(b, e.value...)
	}
	b = append(b, tagEnd)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// TestDamagedV2SnapshotIsRefused: snapshots whose checksums hold but whose contents break format 2's rules
// are refused with an error wrapping ErrCorruptSnapshot that names the problem; the well-formed ones the
// same builder writes (version 1 and 2) restore.
func TestDamagedV2SnapshotIsRefused(t *testing.T) {
	const maxP = 4
	key := []byte("k")
	kg := KeyGroup(key, maxP)
	tk := appendTimerKey(nil, 5, Namespace{1, 2})
	timers := []rawState{{name: "\x00timers/event", kind: byte(kindTimers)}}
	cases := []struct {
		name    string
		snap    []byte
		wantErr string // "" for a snapshot that restores
	}{
		{"version 2 timer", buildSnapshot(2, maxP, timers, []rawEntry{{kg: kg, key: key, mapKey: tk}}), ""},
		{"version 1 value", buildSnapshot(1, maxP, []rawState{{name: "v", kind: byte(kindValue)}},
			[]rawEntry{{kg: kg, key: key, value: []byte{2}}}), ""},
		{"timer map key too short", buildSnapshot(2, maxP, timers, []rawEntry{{kg: kg, key: key, mapKey: tk[:23]}}),
			"timer entry at offset"},
		{"timer with a value", buildSnapshot(2, maxP, timers, []rawEntry{{kg: kg, key: key, mapKey: tk, value: []byte("x")}}),
			"timer entry at offset"},
		{"unknown state flags", buildSnapshot(2, maxP, []rawState{{name: "v", kind: byte(kindValue), flags: 4}}, nil),
			`state "v" has flags 0x4`},
		{"TTL value", buildSnapshot(2, maxP, []rawState{{name: "v", kind: byte(kindValue), flags: flagTTL}},
			[]rawEntry{{kg: kg, key: key, value: []byte{0, 0, 0, 0, 0, 0, 0, 1, 2}}}), ""},
		{"TTL timers", buildSnapshot(2, maxP, []rawState{{name: "\x00timers/event", kind: byte(kindTimers), flags: flagTTL}}, nil),
			"marked with a time to live"},
		{"timers in a version 1 snapshot", buildSnapshot(1, maxP, timers, nil), "unknown kind 4 (version 1 snapshot)"},
		{"unknown kind in version 2", buildSnapshot(2, maxP, []rawState{{name: "v", kind: 6}}, nil), "unknown kind 6"},
		{"version 4", buildSnapshot(4, maxP, nil, nil), "unsupported snapshot version 4"},
		{"timers out of time order", buildSnapshot(2, maxP, timers, []rawEntry{
			{kg: kg, key: key, mapKey: appendTimerKey(nil, 6, Namespace{})},
			{kg: kg, key: key, mapKey: appendTimerKey(nil, 5, Namespace{})}}), "out of order or repeated"},
		{"timer of a key in another key group", buildSnapshot(2, maxP, timers, []rawEntry{{kg: (kg + 1) % maxP, key: key, mapKey: tk}}),
			"is not the key's"},
	}
	for _, bk := range backendKinds {
		for _, tc := range cases {
			t.Run(bk.name+"/"+tc.name, func(t *testing.T) {
				b := open(t, bk.make, fullRange(maxP))
				err := restore(b, tc.snap)
				if tc.wantErr == "" {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				if !errors.Is(err, ErrCorruptSnapshot) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrCorruptSnapshot naming %q", err, tc.wantErr)
				}
			})
		}
	}
}

// v2Snapshot is a small snapshot with every kind of state, timers and list maps included.
func v2Snapshot(t testing.TB) []byte {
	b := open(t, NewHeap[string], fullRange(8))
	s := register(t, b)
	populate(b, s, 4)
	tm := newTimers(t, b, "\x00timers/event")
	lm, err := NewListMap[string, int64](Engine(b), "\x00window/elems", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []string{"a", "b", "key-1"} {
		b.SetCurrentKey(k)
		tm.Register(int64(i), Namespace{A: int64(-i)})
		lm.Append(k, int64(i))
		lm.Append("w", 7)
	}
	return snapshot(t, b, 5)
}

// TestCorruptV2SnapshotIsDetected cuts and flips every byte of a format 2 snapshot with timers and a list
// map: every damaged copy is refused with ErrCorruptSnapshot, on both backends.
func TestCorruptV2SnapshotIsDetected(t *testing.T) {
	snap := v2Snapshot(t)
	for _, dst := range backendKinds {
		t.Run(dst.name, func(t *testing.T) {
			b := open(t, dst.make, fullRange(8))
			for n := 0; n < len(snap); n++ {
				if err := restore(b, snap[:n]); !errors.Is(err, ErrCorruptSnapshot) {
					t.Fatalf("truncated to %d of %d bytes: %v", n, len(snap), err)
				}
			}
			for i := range snap {
				bad := bytes.Clone(snap)
				bad[i] ^= 0x10
				if err := restore(b, bad); !errors.Is(err, ErrCorruptSnapshot) {
					t.Fatalf("byte %d flipped: %v", i, err)
				}
			}
		})
	}
}

// FuzzRestore feeds arbitrary bytes to Restore: it never panics, and refuses anything but a well-formed
// snapshot with an error (ErrCorruptSnapshot for damage). Seeds: a version 1 and a version 2 snapshot.
func FuzzRestore(f *testing.F) {
	v1, err := os.ReadFile("testdata/keyed-v1.snap")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v1)
	f.Add(v2Snapshot(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := NewHeap(fullRange(8))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		tm, err := NewTimers[string](Engine(b), "\x00timers/event")
		if err != nil {
			t.Fatal(err)
		}
		if err := restore(b, data); err != nil {
			if !errors.Is(err, ErrCorruptSnapshot) && !strings.Contains(err.Error(), "max parallelism") &&
				!strings.Contains(err.Error(), "registered as") {
				t.Fatalf("not a corrupt snapshot error: %v", err)
			}
			return
		}
		// A snapshot that restores fires its timers in time order and writes again.
		fireAll(t, b, tm, 1<<62)
		snapshot(t, b, 1)
	})
}

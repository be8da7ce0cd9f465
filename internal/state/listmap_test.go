package state

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// listMapContents is what a list map holds for the current key.
func listMapContents(lm ListMapState[string, string]) map[string][]string {
	out := map[string][]string{}
	lm.Range(func(mk string, l []string) bool { out[mk] = slices.Clone(l); return true })
	return out
}

// TestListMapSemantics runs list map scripts on both backends: appends keep their order per map key,
// map keys and keys stay apart, Remove and Clear drop lists, Range stops when told, and a key whose lists
// are all gone has no state.
func TestListMapSemantics(t *testing.T) {
	long := strings.Repeat("x", 300)
	type op struct {
		key, do, mk, v string
	}
	cases := []struct {
		name string
		ops  []op
		want map[string]map[string][]string // per key, after the ops
	}{
		{"appends in order", []op{{"a", "append", "w1", "1"}, {"a", "append", "w1", "2"}, {"a", "append", "w1", long}, {"a", "append", "w2", ""}},
			map[string]map[string][]string{"a": {"w1": {"1", "2", long}, "w2": {""}}}},
		{"keys apart", []op{{"a", "append", "w", "1"}, {"ab", "append", "w", "2"}, {"b", "append", "", "3"}},
			map[string]map[string][]string{"a": {"w": {"1"}}, "ab": {"w": {"2"}}, "b": {"": {"3"}}}},
		{"remove", []op{{"a", "append", "w1", "1"}, {"a", "append", "w2", "2"}, {"a", "remove", "w1", ""}, {"a", "remove", "absent", ""},
			{"b", "append", "w", "1"}, {"b", "remove", "w", ""}, {"b", "append", "w", "again"}},
			map[string]map[string][]string{"a": {"w2": {"2"}}, "b": {"w": {"again"}}}},
		{"clear", []op{{"a", "append", "w1", "1"}, {"a", "append", "w2", "2"}, {"a", "clear", "", ""}, {"c", "clear", "", ""}},
			map[string]map[string][]string{}},
	}
	for _, bk := range backendKinds {
		for _, tc := range cases {
			t.Run(bk.name+"/"+tc.name, func(t *testing.T) {
				b := open(t, bk.make, fullRange(16))
				lm, err := NewListMap[string, string](b, "elems", nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range tc.ops {
					b.SetCurrentKey(o.key)
					switch o.do {
					case "append":
						lm.Append(o.mk, o.v)
					case "remove":
						lm.Remove(o.mk)
					case "clear":
						lm.Clear()
					}
				}
				got := map[string]map[string][]string{}
				err = b.ForEachKey(func(k string) error {
					got[k] = listMapContents(lm)
					if lm.Len() != len(got[k]) {
						return fmt.Errorf("key %s: Len %d, Range saw %d", k, lm.Len(), len(got[k]))
					}
					for mk, l := range got[k] {
						if g := lm.Get(mk); !slices.Equal(g, l) {
							return fmt.Errorf("key %s: Get(%q) = %q, Range gave %q", k, mk, g, l)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("contents %q, want %q", got, tc.want)
				}
				b.SetCurrentKey("never")
				if lm.Get("w") != nil || lm.Len() != 0 {
					t.Fatal("a key without lists has some")
				}
				if len(tc.want) > 0 {
					for k := range tc.want {
						b.SetCurrentKey(k)
						n := 0
						lm.Range(func(string, []string) bool { n++; return false })
						if n != 1 {
							t.Fatalf("Range went on after false: %d calls", n)
						}
						break
					}
				}
			})
		}
	}
}

// TestListMapSnapshotIsolationAndRoundTrip: a snapshot holds the lists as they were at Snapshot although
// appends (in place on the heap), removes and clears go on while it is written; heap and pebble write the
// same bytes and restore each other's.
func TestListMapSnapshotIsolationAndRoundTrip(t *testing.T) {
	var snaps [][]byte
	var want map[string]map[string][]string
	for _, bk := range backendKinds {
		t.Run(bk.name, func(t *testing.T) {
			b := open(t, bk.make, fullRange(8))
			lm, err := NewListMap[string, string](b, "elems", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			all := func() map[string]map[string][]string {
				out := map[string]map[string][]string{}
				if err := b.ForEachKey(func(k string) error { out[k] = listMapContents(lm); return nil }); err != nil {
					t.Fatal(err)
				}
				return out
			}
			for i := range 40 {
				b.SetCurrentKey(fmt.Sprintf("k%d", i%10))
				lm.Append(fmt.Sprintf("w%d", i%3), fmt.Sprint(i))
			}
			before := all()
			write, err := b.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			buf, wait := writeConcurrently(t, write)
			for i := range 200 {
				b.SetCurrentKey(fmt.Sprintf("k%d", i%12))
				switch i % 4 {
				case 0, 1:
					lm.Append(fmt.Sprintf("w%d", i%3), "after") // into spare capacity of a captured list
				case 2:
					lm.Remove("w1")
				case 3:
					lm.Clear()
				}
			}
			wait()
			snaps = append(snaps, buf.Bytes())
			if want == nil {
				want = before
			}
			if !maps.EqualFunc(before, want, func(a, b map[string][]string) bool { return reflect.DeepEqual(a, b) }) {
				t.Fatal("backends hold different lists after the same appends")
			}
		})
	}
	if len(snaps) == 2 && !bytes.Equal(snaps[0], snaps[1]) {
		t.Fatalf("heap and pebble list map snapshots differ (%d and %d bytes)", len(snaps[0]), len(snaps[1]))
	}
	for i, src := range backendKinds {
		for _, dst := range backendKinds {
			t.Run(src.name+" to "+dst.name, func(t *testing.T) {
				b := open(t, dst.make, fullRange(8))
				if err := restore(b, snaps[i]); err != nil {
					t.Fatal(err)
				}
				lm, err := NewListMap[string, string](b, "elems", nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]map[string][]string{}
				if err := b.ForEachKey(func(k string) error { got[k] = listMapContents(lm); return nil }); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("restored %v\nwant %v", got, want)
				}
			})
		}
	}
}

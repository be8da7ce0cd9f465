package run

import (
	"encoding/binary"
	"maps"
	"strings"
	"testing"
)

// version is a value of a key with a strict total order: the higher Version is newer, ties broken by Note.
type version struct {
	Key     int64
	Version int64
	Note    string
}

func newerVersion(a, b version) bool {
	if a.Version != b.Version {
		return a.Version > b.Version
	}
	return a.Note > b.Note
}

func sinkOf(t *testing.T, vs []version) *LatestSink[int64, version] {
	t.Helper()
	s := NewLatestSink(func(v version) int64 { return v.Key }, newerVersion)
	w, err := s.CreateWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if err := w.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return s
}

func encode(t *testing.T, s *LatestSink[int64, version]) []byte {
	t.Helper()
	b, err := s.EncodeAccumulator()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// merged returns a fresh sink holding the merge of the given sinks' encodings, in the order given.
func merged(t *testing.T, sinks ...*LatestSink[int64, version]) *LatestSink[int64, version] {
	t.Helper()
	out := sinkOf(t, nil)
	for _, s := range sinks {
		if err := out.MergeAccumulator(encode(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestLatestSinkMergeIsAJoin: merging is commutative, associative and idempotent, and the merge of what
// several writers saw is what one sink seeing everything keeps.
func TestLatestSinkMergeIsAJoin(t *testing.T) {
	cases := []struct {
		name    string
		a, b, c []version
	}{
		{"empty", nil, nil, nil},
		{"disjoint keys", []version{{1, 1, ""}}, []version{{2, 1, ""}}, []version{{3, 5, "x"}}},
		{"same key, newer elsewhere", []version{{1, 1, ""}, {1, 2, ""}}, []version{{1, 3, ""}}, []version{{1, 2, "b"}}},
		{"ties broken by the order", []version{{1, 2, "a"}}, []version{{1, 2, "b"}}, []version{{1, 2, "c"}}},
		{"replays of older values", []version{{1, 5, ""}, {2, 7, ""}}, []version{{1, 4, ""}, {2, 8, ""}}, []version{{1, 5, ""}, {2, 1, ""}}},
		{"one side empty", []version{{1, 1, "x"}, {2, 2, "y"}}, nil, []version{{2, 3, ""}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b, c := sinkOf(t, tc.a), sinkOf(t, tc.b), sinkOf(t, tc.c)
			all := sinkOf(t, append(append(append([]version(nil), tc.a...), tc.b...), tc.c...))
			same := func(what string, x, y *LatestSink[int64, version]) {
				t.Helper()
				if !maps.Equal(x.Latest(), y.Latest()) {
					t.Fatalf("%s: %v != %v", what, x.Latest(), y.Latest())
				}
				if string(encode(t, x)) != string(encode(t, y)) {
					t.Fatalf("%s: equal contents, different encodings", what)
				}
			}
			same("commutative", merged(t, a, b), merged(t, b, a))
			same("associative", merged(t, merged(t, a, b), c), merged(t, a, merged(t, b, c)))
			same("idempotent", merged(t, a, a), a)
			same("idempotent after a merge", merged(t, a, b, b, a), merged(t, a, b))
			same("the merge of the parts is the whole", merged(t, c, a, b), all)
			// Merging into a sink that has values of its own is the same join.
			into := sinkOf(t, tc.a)
			if err := into.MergeAccumulator(encode(t, b)); err != nil {
				t.Fatal(err)
			}
			same("into a live sink", into, merged(t, a, b))
		})
	}
}

// TestLatestSinkRefusesBadBytes: a corrupt encoding is an error that says what is wrong, and the sink
// keeps what it had.
func TestLatestSinkRefusesBadBytes(t *testing.T) {
	good := encode(t, sinkOf(t, []version{{1, 1, "one"}, {2, 2, "two"}}))
	uv := func(x uint64) []byte { return binary.AppendUvarint(nil, x) }
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "empty"},
		{"another format", cat([]byte{2}, good[1:]), "format 2, want 1"},
		{"no count", []byte{latestFormat}, "bad value count"},
		{"a count too large for the bytes", cat([]byte{latestFormat}, uv(1<<40), []byte{0}), "values cannot fit in 1 bytes"},
		{"a length past the end", cat([]byte{latestFormat}, uv(1), uv(50), []byte{1, 2}), "value 0 of 1: length runs past the end"},
		{"truncated", good[:len(good)-1], "value 1 of 2"},
		{"a value its codec refuses", cat([]byte{latestFormat}, uv(1), uv(3), []byte{1, 2, 3}), "value 0 of 1: codec"},
		{"bytes after the last value", cat(good, []byte{0}), "1 bytes after the last value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := sinkOf(t, []version{{9, 9, "kept"}})
			before := s.Latest()
			err := s.MergeAccumulator(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "LatestSink: accumulator of ") {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
			if !maps.Equal(s.Latest(), before) {
				t.Fatalf("a refused merge changed the sink: %v", s.Latest())
			}
		})
	}
}

// TestLatestSinkWithoutCodec: a value type no codec can encode still works as a sink in one process, and
// the accumulator methods say why they cannot.
func TestLatestSinkWithoutCodec(t *testing.T) {
	type withFunc struct {
		Key int64
		F   func()
	}
	s := NewLatestSink(func(v withFunc) int64 { return v.Key }, func(a, b withFunc) bool { return false })
	if _, err := s.EncodeAccumulator(); err == nil || !strings.Contains(err.Error(), "LatestSink: no codec for its values") {
		t.Fatalf("EncodeAccumulator: err = %v", err)
	}
	if err := s.MergeAccumulator([]byte{latestFormat, 0}); err == nil || !strings.Contains(err.Error(), "no codec") {
		t.Fatalf("MergeAccumulator: err = %v", err)
	}
}

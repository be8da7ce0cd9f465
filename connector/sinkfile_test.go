package connector

import (
	"encoding/binary"
	"slices"
	"testing"
)

func TestCommitQueue(t *testing.T) {
	var q commitQueue[string]
	q.add(2, "a")
	q.add(2, "b")
	q.add(5, "c")
	for _, tc := range []struct {
		complete int64
		want     []string
	}{
		{1, nil},
		{3, []string{"a", "b"}},
		{3, nil},
		{7, []string{"c"}},
		{9, nil},
	} {
		if got := q.due(tc.complete); !slices.Equal(got, tc.want) {
			t.Fatalf("due(%d) = %q, want %q", tc.complete, got, tc.want)
		}
	}
	q.add(10, "d")
	if got := q.due(10); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("after draining, due(10) = %q", got)
	}
}

func TestStateReader(t *testing.T) {
	good := appendString([]byte{7}, "run")
	good = binary.AppendUvarint(good, 300)
	good = binary.AppendVarint(good, -4)
	good = append(good, 1)
	for _, tc := range []struct {
		name  string
		b     []byte
		limit int
		ok    bool
	}{
		{"whole", good, 8, true},
		{"other version", append([]byte{6}, good[1:]...), 8, false},
		{"empty", nil, 8, false},
		{"string over its limit", good, 2, false},
		{"cut in the uvarint", good[:len(good)-3], 8, false},
		{"a byte left over", append(slices.Clone(good), 0), 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStateReader(tc.b, 7)
			s, u, v, f := r.str(tc.limit), r.uvarint(), r.varint(), r.flag()
			if r.done() != tc.ok {
				t.Fatalf("done() = %v, want %v", r.done(), tc.ok)
			}
			if tc.ok && (s != "run" || u != 300 || v != -4 || f != 1) {
				t.Fatalf("read %q %d %d %d", s, u, v, f)
			}
		})
	}
}

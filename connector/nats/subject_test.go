package nats

import "testing"

func TestSubjects(t *testing.T) {
	for _, tc := range []struct {
		f     string
		valid bool
	}{{"a", true}, {"a.b.*", true}, {"a.>", true}, {">", true}, {"*.b", true},
		{"", false}, {"a..b", false}, {"a.>.b", false}, {"a*", false}, {"a b", false}, {".a", false}} {
		if got := validSubject(tc.f); got != tc.valid {
			t.Errorf("validSubject(%q) = %v", tc.f, got)
		}
	}
	for _, tc := range []struct {
		f, s  string
		match bool
	}{{"a.b", "a.b", true}, {"a.*", "a.b", true}, {"a.*", "a.b.c", false}, {"a.>", "a.b.c", true},
		{"a.>", "a", false}, {"*", "a", true}, {"a.b", "a.c", false}, {">", "x.y", true}} {
		if got := subjectMatches(tc.f, tc.s); got != tc.match {
			t.Errorf("subjectMatches(%q, %q) = %v", tc.f, tc.s, got)
		}
	}
	for _, tc := range []struct {
		a, b    string
		overlap bool
	}{{"a.*", "a.b", true}, {"a.b", "a.c", false}, {"a.>", "a.b.c", true}, {"a.>", "a", false},
		{"a.*", "*.b", true}, {"a.*", "a.*.c", false}, {"a.*.c", "a.>", true}, {">", "x", true}, {"in.0", "in.1", false}} {
		if got, rev := subjectsOverlap(tc.a, tc.b), subjectsOverlap(tc.b, tc.a); got != tc.overlap || rev != tc.overlap {
			t.Errorf("subjectsOverlap(%q, %q) = %v, reversed %v", tc.a, tc.b, got, rev)
		}
	}
}

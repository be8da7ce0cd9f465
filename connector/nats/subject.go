package nats

import "strings"

// validSubject reports whether f is a subject filter: non-empty dot-separated tokens without white space,
// where "*" is a whole token and ">" a whole last token.
func validSubject(f string) bool {
	if f == "" || strings.ContainsAny(f, " \t\r\n") {
		return false
	}
	toks := strings.Split(f, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return false
		case t == ">":
			if i != len(toks)-1 {
				return false
			}
		case t != "*" && strings.ContainsAny(t, "*>"):
			return false
		}
	}
	return true
}

// subjectMatches reports whether the literal subject s matches filter f.
func subjectMatches(f, s string) bool {
	ft, st := strings.Split(f, "."), strings.Split(s, ".")
	for i, t := range ft {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) || t != "*" && t != st[i] {
			return false
		}
	}
	return len(ft) == len(st)
}

// subjectsOverlap reports whether some subject matches both filters a and b.
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		aEnd, bEnd := i >= len(at), i >= len(bt)
		switch {
		case aEnd && bEnd:
			return true
		case aEnd:
			return false // b needs more tokens (">" needs at least one)
		case bEnd:
			return false
		case at[i] == ">" || bt[i] == ">":
			return true
		case at[i] != "*" && bt[i] != "*" && at[i] != bt[i]:
			return false
		}
	}
}

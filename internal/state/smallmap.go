package state

import (
	"maps"
	"slices"
)

// smallMapMax is the most entries a key's map keeps in a slice before it becomes a Go map.
const smallMapMax = 8

// smallMap is one key's map of map or list map state on the heap. Up to smallMapMax entries sit in a
// slice, searched in order: a window operator's key is in a few windows, and comparing a few keys costs
// less than hashing one, while a Go map of one entry is an allocation of a whole group of eight. Beyond
// that it is a Go map. The zero value is an empty map; a nil *smallMap reads as one.
type smallMap[K comparable, V any] struct {
	es []smallEntry[K, V] // nil once m is made
	m  map[K]V
	// changes counts sets and deletes, so that all can tell that a function it calls changed the map.
	changes uint32
}

type smallEntry[K comparable, V any] struct {
	k K
	v V
}

// isNil reports whether the map was never written (or was dropped).
func (s *smallMap[K, V]) isNil() bool { return s == nil || (s.es == nil && s.m == nil) }

func (s *smallMap[K, V]) len() int {
	switch {
	case s == nil:
		return 0
	case s.m != nil:
		return len(s.m)
	}
	return len(s.es)
}

func (s *smallMap[K, V]) get(k K) (V, bool) {
	if s != nil {
		if s.m != nil {
			v, ok := s.m[k]
			return v, ok
		}
		for i := range s.es {
			if s.es[i].k == k {
				return s.es[i].v, true
			}
		}
	}
	var zero V
	return zero, false
}

// set stores v under k; the map must be writable (heapMaps.writableAt).
func (s *smallMap[K, V]) set(k K, v V) {
	s.changes++
	if s.m != nil {
		s.m[k] = v
		return
	}
	for i := range s.es {
		if s.es[i].k == k {
			s.es[i].v = v
			return
		}
	}
	if len(s.es) < smallMapMax {
		s.es = append(s.es, smallEntry[K, V]{k, v})
		return
	}
	s.m = make(map[K]V)
	for _, e := range s.es {
		s.m[e.k] = e.v
	}
	s.m[k] = v
	s.es = nil
}

// del removes k and reports whether it was there; the map must be writable.
func (s *smallMap[K, V]) del(k K) bool {
	s.changes++
	if s.m != nil {
		if _, ok := s.m[k]; !ok {
			return false
		}
		delete(s.m, k)
		return true
	}
	for i := range s.es {
		if s.es[i].k == k {
			last := len(s.es) - 1
			s.es[i] = s.es[last]
			s.es[last] = smallEntry[K, V]{}
			s.es = s.es[:last]
			return true
		}
	}
	return false
}

// clone returns a copy that shares nothing the copy may change in place.
func (s *smallMap[K, V]) clone() smallMap[K, V] {
	if s.m != nil {
		return smallMap[K, V]{m: maps.Clone(s.m)}
	}
	return smallMap[K, V]{es: slices.Clone(s.es)}
}

// all yields every entry, in no particular order. yield may change the map, with a Go map's range
// semantics: an entry removed before it is reached is not yielded, every entry neither removed nor added
// is yielded once (with its value when reached), and one added may or may not be.
func (s *smallMap[K, V]) all(yield func(K, V) bool) {
	switch {
	case s == nil:
	case s.m != nil:
		for k, v := range s.m {
			if !yield(k, v) {
				return
			}
		}
	default:
		// A copy, since a delete moves entries within the slice; once the map changed, each entry is looked
		// up again before it is yielded.
		var buf [smallMapMax]smallEntry[K, V]
		es, at := buf[:copy(buf[:], s.es)], s.changes
		for _, e := range es {
			v := e.v
			if s.changes != at {
				var ok bool
				if v, ok = s.get(e.k); !ok {
					continue
				}
			}
			if !yield(e.k, v) {
				return
			}
		}
	}
}

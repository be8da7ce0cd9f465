package state

import (
	"maps"
	"reflect"
	"slices"
	"unsafe"
)

// smallMapMax is the most entries a key's map keeps in a slice before it becomes a flatMap or a Go map.
const smallMapMax = 8

// smallMap is one key's map of map or list map state on the heap. Up to smallMapMax entries sit in a
// slice, searched in order: a window operator's key is in a few windows, and comparing a few keys costs
// less than hashing one, while a Go map of one entry is an allocation of a whole group of eight. Beyond
// that, a map keyed by an 8-byte integer becomes a flatMap, any other a Go map. The zero value is an
// empty map; a nil *smallMap reads as one.
type smallMap[K comparable, V any] struct {
	es   []smallEntry[K, V] // nil once m or flat is made
	m    map[K]V
	flat *flatMap[K, V]
	// changes counts sets and deletes, so that all can tell that a function it calls changed the map.
	changes uint32
}

// flatMap is a map keyed by an 8-byte integer: open addressing with linear probing, at most half full,
// so that a probe ends within a few entries. A lookup goes from the key's smallMap to the flatMap and
// to the entry, where a Go map adds its directory and table; over many keys each with a map of its own
// (q16's distinct bidders per channel), every step is a cache miss. Deletes shift later entries of the
// probe run back (no tombstones), so lookups do not slow down as keys come and go.
type flatMap[K comparable, V any] struct {
	tab []flatEntry[K, V]
	n   int
	// shared says that an iteration (all) may hold tab: a change then writes a copy, so that the iteration
	// goes on over the table as it was. iters counts the iterations under way; the last to end clears
	// shared.
	shared bool
	iters  int
}

// flatEntry is an entry of a flatMap's table.
type flatEntry[K comparable, V any] struct {
	k    K
	v    V
	used bool
}

// flatKeyed reports whether maps keyed by K grow into a flatMap: K is one 8-byte integer word (intWords,
// as the key index decides), whose bits are its identity.
func flatKeyed[K comparable]() bool { return intWords(reflect.TypeFor[K]()) == 1 }

// flatHome is k's first position in a table of mask+1 entries; k is an 8-byte integer (flatKeyed). The
// hash keeps runs of consecutive keys together (runHash), as the key index does.
func flatHome[K comparable](k K, mask int) int {
	return int(runHash(*(*uint64)(unsafe.Pointer(&k))) & uint64(mask))
}

// newFlatMap returns a flatMap holding es.
func newFlatMap[K comparable, V any](es []smallEntry[K, V]) *flatMap[K, V] {
	f := &flatMap[K, V]{tab: make([]flatEntry[K, V], 4*smallMapMax)}
	for _, e := range es {
		f.set(e.k, e.v)
	}
	return f
}

// find returns the position of k in tab, or of the empty entry where it would go.
func (f *flatMap[K, V]) find(k K) (int, bool) {
	tab := f.tab
	mask := len(tab) - 1
	for i := flatHome(k, mask); ; i = (i + 1) & mask {
		e := &tab[i]
		if !e.used {
			return i, false
		}
		if e.k == k {
			return i, true
		}
	}
}

func (f *flatMap[K, V]) get(k K) (V, bool) {
	if i, ok := f.find(k); ok {
		return f.tab[i].v, true
	}
	var zero V
	return zero, false
}

// own makes tab safe to change in place: a copy when an iteration holds it.
func (f *flatMap[K, V]) own() {
	if f.shared {
		f.tab = slices.Clone(f.tab)
		f.shared = false
	}
}

// set stores v under k, doubling the table first if that would make it more than half full.
func (f *flatMap[K, V]) set(k K, v V) {
	i, ok := f.find(k)
	if ok {
		f.own()
		f.tab[i].v = v
		return
	}
	if 2*(f.n+1) > len(f.tab) {
		old := f.tab
		f.tab, f.shared = make([]flatEntry[K, V], 2*len(old)), false
		for j := range old {
			if old[j].used {
				at, _ := f.find(old[j].k)
				f.tab[at] = old[j]
			}
		}
		i, _ = f.find(k)
	} else {
		f.own()
	}
	f.tab[i] = flatEntry[K, V]{k: k, v: v, used: true}
	f.n++
}

// del removes k, if there, shifting later entries of its probe run back into the hole.
func (f *flatMap[K, V]) del(k K) bool {
	i, ok := f.find(k)
	if !ok {
		return false
	}
	f.own()
	tab, mask := f.tab, len(f.tab)-1
	for j := (i + 1) & mask; tab[j].used; j = (j + 1) & mask {
		// The entry at j may move into the hole at i only if its home is not in (i, j] (cyclically):
		// otherwise a lookup starting at its home would stop at the hole before reaching it.
		if h := flatHome(tab[j].k, mask); (j-h)&mask >= (j-i)&mask {
			tab[i] = tab[j]
			i = j
		}
	}
	tab[i] = flatEntry[K, V]{}
	f.n--
	return true
}

// all yields every entry, with smallMap.all's semantics. It ranges over the table as it is now: a change
// from yield writes a copy (own), so this one stays as it was; once the map changed, each entry is looked
// up again before it is yielded.
func (f *flatMap[K, V]) all(yield func(K, V) bool, changes *uint32) {
	tab, at := f.tab, *changes
	f.shared = true
	f.iters++
	defer f.endIteration()
	for i := range tab {
		e := &tab[i]
		if !e.used {
			continue
		}
		v := e.v
		if *changes != at {
			var ok bool
			if v, ok = f.get(e.k); !ok {
				continue
			}
		}
		if !yield(e.k, v) {
			return
		}
	}
}

// endIteration ends an iteration: after the last, none holds a table.
func (f *flatMap[K, V]) endIteration() {
	if f.iters--; f.iters == 0 {
		f.shared = false
	}
}

type smallEntry[K comparable, V any] struct {
	k K
	v V
}

// isNil reports whether the map was never written (or was dropped).
func (s *smallMap[K, V]) isNil() bool {
	return s == nil || (s.es == nil && s.m == nil && s.flat == nil)
}

func (s *smallMap[K, V]) len() int {
	switch {
	case s == nil:
		return 0
	case s.flat != nil:
		return s.flat.n
	case s.m != nil:
		return len(s.m)
	}
	return len(s.es)
}

func (s *smallMap[K, V]) get(k K) (V, bool) {
	if s != nil {
		if s.flat != nil {
			return s.flat.get(k)
		}
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
	if s.flat != nil {
		s.flat.set(k, v)
		return
	}
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
	if flatKeyed[K]() {
		s.flat = newFlatMap(s.es)
		s.flat.set(k, v)
		s.es = nil
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
	if s.flat != nil {
		return s.flat.del(k)
	}
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
	if s.flat != nil {
		return smallMap[K, V]{flat: &flatMap[K, V]{tab: slices.Clone(s.flat.tab), n: s.flat.n}}
	}
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
	case s.flat != nil:
		s.flat.all(yield, &s.changes)
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

// each yields every entry, in no particular order, and writes nothing: yield must not change the map. It
// is the iteration of a map a checkpoint capture shares, which the snapshot writer ranges over on its own
// goroutine while the task's may range over the same map (all keeps its bookkeeping in the map).
func (s *smallMap[K, V]) each(yield func(K, V) bool) {
	switch {
	case s == nil:
	case s.flat != nil:
		for i := range s.flat.tab {
			if e := &s.flat.tab[i]; e.used && !yield(e.k, e.v) {
				return
			}
		}
	case s.m != nil:
		for k, v := range s.m {
			if !yield(k, v) {
				return
			}
		}
	default:
		for _, e := range s.es {
			if !yield(e.k, e.v) {
				return
			}
		}
	}
}

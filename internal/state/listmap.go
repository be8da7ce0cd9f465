package state

import (
	"fmt"

	"github.com/cockroachdb/pebble"

	"github.com/runnel-dev/runnel/codec"
)

// ListMapState holds per key a map from a map key to an append-only list of values: the elements of each
// window of a process window function.
type ListMapState[MK comparable, V any] interface {
	// Append appends v to the list under mk of the current key.
	Append(mk MK, v V)
	// Get returns the list under mk of the current key; the slice is owned by the state and valid until
	// the next change (do not change it).
	Get(mk MK) []V
	// Remove deletes the list under mk of the current key.
	Remove(mk MK)
	// Len returns the number of lists of the current key.
	Len() int
	// Range calls f for each list of the current key until f returns false; the slices are as Get's.
	Range(f func(MK, []V) bool)
	// Clear removes every list of the current key.
	Clear()
}

// NewListMap registers a list map state named name. Nil codecs mean codec.For of the map key and element
// types.
func NewListMap[MK comparable, V any](b Backend, name string, mk codec.Codec[MK], v codec.Codec[V]) (ListMapState[MK, V], error) {
	store, _, err := storeOf(b, kindListMap, name)
	if err != nil {
		return nil, err
	}
	if mk, err = codecOr(mk, kindListMap, name, "map key"); err != nil {
		return nil, err
	}
	if v, err = codecOr(v, kindListMap, name, "element"); err != nil {
		return nil, err
	}
	switch st := store.(type) {
	case *heapStore:
		s := &heapListMap[MK, V]{heapMaps: heapMaps[MK, []V]{st: st, name: name, k: kindListMap, kc: mk}, vc: v}
		if err := st.register(name, s); err != nil {
			return nil, err
		}
		return s, nil
	case *pebbleStore:
		id, err := st.register(name, kindListMap)
		if err != nil {
			return nil, err
		}
		return &pebbleListMap[MK, V]{pebbleMapKeys: pebbleMapKeys[MK]{st: st, name: name, id: id, kc: mk}, vc: v}, nil
	}
	return nil, fmt.Errorf("list map state %q: unknown backend %T", name, b)
}

// heapListMap is a ListMapState on the heap. Lists are appended to in place: a capture shares a list's
// array but never reads past the length it captured, and no list element is ever overwritten. The maps
// themselves are copied on their first change in an epoch, as for map state.
type heapListMap[MK comparable, V any] struct {
	heapMaps[MK, []V]
	vc codec.Codec[V]
}

func (s *heapListMap[MK, V]) Append(mk MK, v V) {
	slot := s.currentSlot()
	m := s.writableAt(int(slot))
	if m.len() == 0 {
		s.st.incRef(slot)
	}
	l, _ := m.get(mk)
	m.set(mk, append(l, v))
}

func (s *heapListMap[MK, V]) Get(mk MK) []V {
	l, _ := s.current().get(mk)
	return l
}

func (s *heapListMap[MK, V]) capture(n int) heapCapture {
	return &listMapCapture[MK, V]{s.frozen(n, s.appendValue)}
}

func (s *heapListMap[MK, V]) appendValue(dst []byte, l []V) ([]byte, error) {
	return appendList(dst, s.vc, l)
}

func (s *heapListMap[MK, V]) restore(slot int32, mapKey, value []byte) error {
	mk, err := s.restoreKey(mapKey)
	if err != nil {
		return err
	}
	l, err := decodeList(s.vc, value, nil)
	if err != nil {
		return err
	}
	if len(l) > 0 {
		s.put(slot, mk, l)
	}
	return nil
}

// listMapCapture is a frozen view of a heapListMap.
type listMapCapture[MK comparable, V any] struct{ mapsCapture[MK, []V] }

func (c *listMapCapture[MK, V]) kind() kind { return kindListMap }

// pebbleListMap is a ListMapState in pebble: one store key per list, holding the list encoding, to which
// Append merges (appends) one element.
type pebbleListMap[MK comparable, V any] struct {
	pebbleMapKeys[MK]
	vc  codec.Codec[V]
	buf []byte
}

func (s *pebbleListMap[MK, V]) Append(mk MK, v V) {
	k := s.entryKey(mk, "append")
	var err error
	s.buf, err = appendElement(s.buf[:0], s.vc, v)
	s.st.check(err, s.name, "append")
	s.st.check(s.st.db.Merge(k, s.buf, pebble.NoSync), s.name, "append")
}

func (s *pebbleListMap[MK, V]) Get(mk MK) []V {
	return getList(s.st, s.entryKey(mk, "get"), s.vc, s.name)
}

func (s *pebbleListMap[MK, V]) Range(f func(MK, []V) bool) {
	s.each(func(mk MK, raw []byte) bool {
		l, err := decodeList(s.vc, raw, nil)
		s.st.check(err, s.name, "decode list")
		return f(mk, l)
	})
}

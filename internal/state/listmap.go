package state

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"

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
		s := &heapListMap[MK, V]{st: st, name: name, kc: mk, vc: v}
		if err := st.register(name, s); err != nil {
			return nil, err
		}
		return s, nil
	case *pebbleStore:
		id, err := st.register(name, kindListMap)
		if err != nil {
			return nil, err
		}
		return &pebbleListMap[MK, V]{st: st, name: name, id: id, kc: mk, vc: v}, nil
	}
	return nil, fmt.Errorf("list map state %q: unknown backend %T", name, b)
}

// heapListMap is a ListMapState on the heap. Lists are appended to in place: a capture shares a list's
// array but never reads past the length it captured, and no list element is ever overwritten. The maps
// themselves are copied on their first change in an epoch, as for map state.
type heapListMap[MK comparable, V any] struct {
	st    *heapStore
	name  string
	kc    codec.Codec[MK]
	vc    codec.Codec[V]
	maps  []map[MK][]V
	epoch []uint32 // as heapMap's
	sc    *segCache
}

func (s *heapListMap[MK, V]) kind() kind { return kindListMap }

func (s *heapListMap[MK, V]) current() map[MK][]V {
	slot := int(s.st.cur)
	if slot < 0 {
		panic("state: list map state used without a current key")
	}
	if slot >= len(s.maps) {
		return nil
	}
	return s.maps[slot]
}

func (s *heapListMap[MK, V]) writableAt(slot int) map[MK][]V {
	for len(s.maps) <= slot {
		s.maps = append(s.maps, nil)
		s.epoch = append(s.epoch, 0)
	}
	m := s.maps[slot]
	switch {
	case m == nil:
		m = make(map[MK][]V)
	case s.epoch[slot] != s.st.epoch:
		m = maps.Clone(m) // a capture may hold m
	default:
		return m
	}
	s.maps[slot] = m
	s.epoch[slot] = s.st.epoch
	return m
}

func (s *heapListMap[MK, V]) Append(mk MK, v V) {
	slot := s.st.cur
	if slot < 0 {
		panic("state: list map state used without a current key")
	}
	m := s.writableAt(int(slot))
	if len(m) == 0 {
		s.st.incRef(slot)
	}
	m[mk] = append(m[mk], v)
}

func (s *heapListMap[MK, V]) Get(mk MK) []V { return s.current()[mk] }

func (s *heapListMap[MK, V]) Remove(mk MK) {
	m := s.current()
	if _, ok := m[mk]; !ok {
		return
	}
	slot := s.st.cur
	if len(m) == 1 {
		s.maps[slot], s.epoch[slot] = nil, s.st.epoch
		s.st.decRef(slot)
		return
	}
	delete(s.writableAt(int(slot)), mk)
}

func (s *heapListMap[MK, V]) Len() int { return len(s.current()) }

func (s *heapListMap[MK, V]) Range(f func(MK, []V) bool) {
	for k, l := range s.current() {
		if !f(k, l) {
			return
		}
	}
}

func (s *heapListMap[MK, V]) Clear() {
	if slot := s.st.cur; slot >= 0 && int(slot) < len(s.maps) && len(s.maps[slot]) > 0 {
		s.maps[slot], s.epoch[slot] = nil, s.st.epoch
		s.st.decRef(slot)
	}
}

func (s *heapListMap[MK, V]) hasSlot(slot int) bool {
	return slot < len(s.maps) && len(s.maps[slot]) > 0
}

func (s *heapListMap[MK, V]) capture(n int) heapCapture {
	if s.sc == nil {
		s.sc = &segCache{}
	}
	return &listMapCapture[MK, V]{kc: s.kc, vc: s.vc, maps: slices.Clone(s.maps[:min(n, len(s.maps))]),
		epochs: slices.Clone(s.epoch[:min(n, len(s.epoch))]), sc: s.sc}
}

func (s *heapListMap[MK, V]) restore(slot int32, mapKey, value []byte) error {
	var mk MK
	if err := s.kc.Decode(mapKey, &mk); err != nil {
		return fmt.Errorf("map key: %w", err)
	}
	l, err := decodeList(s.vc, value, nil)
	if err != nil {
		return err
	}
	if len(l) == 0 {
		return nil
	}
	m := s.writableAt(int(slot))
	if len(m) == 0 {
		s.st.incRef(slot)
	}
	m[mk] = l
	return nil
}

type listMapCapture[MK comparable, V any] struct {
	kc     codec.Codec[MK]
	vc     codec.Codec[V]
	maps   []map[MK][]V
	epochs []uint32
	sc     *segCache
	arena  []byte
	spans  []entrySpan
	sorted []mapEntry
}

func (c *listMapCapture[MK, V]) kind() kind { return kindListMap }

func (c *listMapCapture[MK, V]) changedEpochs() []uint32 { return c.epochs }

func (c *listMapCapture[MK, V]) segments() *segCache { return c.sc }

func (c *listMapCapture[MK, V]) entries(slot int, out *slotEmitter) error {
	if slot >= len(c.maps) || len(c.maps[slot]) == 0 {
		return nil
	}
	c.arena, c.spans = c.arena[:0], c.spans[:0]
	for mk, l := range c.maps[slot] {
		var err error
		k0 := len(c.arena)
		if c.arena, err = c.kc.Append(c.arena, mk); err != nil {
			return fmt.Errorf("snapshot keyed state: encode map key: %w", err)
		}
		k1 := len(c.arena)
		if c.arena, err = appendList(c.arena, c.vc, l); err != nil {
			return fmt.Errorf("snapshot keyed state: %w", err)
		}
		c.spans = append(c.spans, entrySpan{k0, k1, len(c.arena)})
	}
	c.sorted = sortEntries(c.sorted[:0], c.arena, c.spans)
	for _, e := range c.sorted {
		if err := out.emit(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// pebbleListMap is a ListMapState in pebble: one store key per list, the key's store key followed by the
// map key's encoding, holding the list encoding, to which Append merges (appends) one element.
type pebbleListMap[MK comparable, V any] struct {
	st   *pebbleStore
	name string
	id   uint16
	kc   codec.Codec[MK]
	vc   codec.Codec[V]
	buf  []byte
}

func (s *pebbleListMap[MK, V]) entryKey(mk MK, op string) []byte {
	k := s.st.mustKeyFor(s.id, s.name, op)
	var err error
	s.st.mkey, err = s.kc.Append(append(s.st.mkey[:0], k...), mk)
	s.st.check(err, s.name, "encode map key")
	return s.st.mkey
}

func (s *pebbleListMap[MK, V]) Append(mk MK, v V) {
	k := s.entryKey(mk, "append")
	var err error
	s.buf, err = appendElement(s.buf[:0], s.vc, v)
	s.st.check(err, s.name, "append")
	s.st.check(s.st.db.Merge(k, s.buf, pebble.NoSync), s.name, "append")
}

func (s *pebbleListMap[MK, V]) Get(mk MK) []V {
	raw, closer, ok := s.st.get(s.entryKey(mk, "get"), s.name)
	if !ok {
		return nil
	}
	l, err := decodeList(s.vc, raw, nil)
	_ = closer.Close()
	s.st.check(err, s.name, "decode list")
	return l
}

func (s *pebbleListMap[MK, V]) Remove(mk MK) {
	s.st.check(s.st.db.Delete(s.entryKey(mk, "remove"), pebble.NoSync), s.name, "remove")
}

func (s *pebbleListMap[MK, V]) iter(op string) (*pebble.Iterator, int) {
	prefix := bytes.Clone(s.st.mustKeyFor(s.id, s.name, op))
	it, err := s.st.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	s.st.check(err, s.name, op)
	return it, len(prefix)
}

func (s *pebbleListMap[MK, V]) Len() int {
	it, _ := s.iter("len")
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	s.st.check(errors.Join(it.Error(), it.Close()), s.name, "len")
	return n
}

func (s *pebbleListMap[MK, V]) Range(f func(MK, []V) bool) {
	it, n := s.iter("range")
	defer func() { s.st.check(it.Close(), s.name, "range") }()
	for valid := it.First(); valid; valid = it.Next() {
		var mk MK
		s.st.check(s.kc.Decode(it.Key()[n:], &mk), s.name, "decode map key")
		raw, err := it.ValueAndErr()
		s.st.check(err, s.name, "range")
		l, err := decodeList(s.vc, raw, nil)
		s.st.check(err, s.name, "decode list")
		if !f(mk, l) {
			return
		}
	}
	s.st.check(it.Error(), s.name, "range")
}

func (s *pebbleListMap[MK, V]) Clear() { s.st.clearPrefix(s.id, s.name) }

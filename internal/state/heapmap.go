package state

import (
	"bytes"
	"fmt"
	"maps"
	"slices"

	"github.com/runnel-dev/runnel/codec"
)

// heapMap is a MapState on the heap.
type heapMap[MK comparable, MV any] struct {
	st   *heapStore
	name string
	kc   codec.Codec[MK]
	vc   codec.Codec[MV]
	maps []map[MK]MV
	// epoch is the epoch in which each map was made (or emptied) by this table: a map changes in place
	// only in that epoch, so it is also the epoch of the map's last change (for the segment cache).
	epoch []uint32
	sc    *segCache
}

func (s *heapMap[MK, MV]) kind() kind { return kindMap }

func (s *heapMap[MK, MV]) current() map[MK]MV {
	slot := int(s.st.cur)
	if slot < 0 {
		panic("state: map state used without a current key")
	}
	if slot >= len(s.maps) {
		return nil
	}
	return s.maps[slot]
}

// writable returns the current key's map, made or copied so that it may be changed in place.
func (s *heapMap[MK, MV]) writable() map[MK]MV {
	slot := int(s.st.cur)
	if slot < 0 {
		panic("state: map state used without a current key")
	}
	return s.writableAt(slot)
}

func (s *heapMap[MK, MV]) writableAt(slot int) map[MK]MV {
	for len(s.maps) <= slot {
		s.maps = append(s.maps, nil)
		s.epoch = append(s.epoch, 0)
	}
	m := s.maps[slot]
	switch {
	case m == nil:
		m = make(map[MK]MV)
	case s.epoch[slot] != s.st.epoch:
		m = maps.Clone(m) // a capture may hold m
	default:
		return m
	}
	s.maps[slot] = m
	s.epoch[slot] = s.st.epoch
	return m
}

func (s *heapMap[MK, MV]) Get(mk MK) (MV, bool) {
	v, ok := s.current()[mk]
	return v, ok
}

func (s *heapMap[MK, MV]) Put(mk MK, mv MV) {
	m := s.writable()
	if len(m) == 0 {
		s.st.incRef(s.st.cur)
	}
	m[mk] = mv
}

func (s *heapMap[MK, MV]) Remove(mk MK) {
	m := s.current()
	if _, ok := m[mk]; !ok {
		return
	}
	if len(m) == 1 {
		s.maps[s.st.cur], s.epoch[s.st.cur] = nil, s.st.epoch
		s.st.decRef(s.st.cur)
		return
	}
	delete(s.writable(), mk)
}

func (s *heapMap[MK, MV]) Len() int { return len(s.current()) }

func (s *heapMap[MK, MV]) Range(f func(MK, MV) bool) {
	for k, v := range s.current() {
		if !f(k, v) {
			return
		}
	}
}

func (s *heapMap[MK, MV]) Clear() {
	if slot := int(s.st.cur); slot >= 0 && slot < len(s.maps) && len(s.maps[slot]) > 0 {
		s.maps[slot], s.epoch[slot] = nil, s.st.epoch
		s.st.decRef(int32(slot))
	}
}

func (s *heapMap[MK, MV]) hasSlot(slot int) bool { return slot < len(s.maps) && len(s.maps[slot]) > 0 }

func (s *heapMap[MK, MV]) capture(n int) heapCapture {
	if s.sc == nil {
		s.sc = &segCache{}
	}
	return &mapCapture[MK, MV]{kc: s.kc, vc: s.vc, maps: slices.Clone(s.maps[:min(n, len(s.maps))]),
		epochs: slices.Clone(s.epoch[:min(n, len(s.epoch))]), sc: s.sc}
}

func (s *heapMap[MK, MV]) restore(slot int32, mapKey, value []byte) error {
	var mk MK
	var mv MV
	if err := s.kc.Decode(mapKey, &mk); err != nil {
		return fmt.Errorf("map key: %w", err)
	}
	if err := s.vc.Decode(value, &mv); err != nil {
		return fmt.Errorf("map value: %w", err)
	}
	m := s.writableAt(int(slot))
	if len(m) == 0 {
		s.st.incRef(slot)
	}
	m[mk] = mv
	return nil
}

type mapCapture[MK comparable, MV any] struct {
	kc     codec.Codec[MK]
	vc     codec.Codec[MV]
	maps   []map[MK]MV
	epochs []uint32
	sc     *segCache
	arena  []byte
	spans  []entrySpan
	sorted []mapEntry
}

type mapEntry struct{ k, v []byte }

// entrySpan locates one encoded map entry in an arena: the key is [k0, k1), the value [k1, v1).
type entrySpan struct{ k0, k1, v1 int }

func (c *mapCapture[MK, MV]) kind() kind { return kindMap }

func (c *mapCapture[MK, MV]) changedEpochs() []uint32 { return c.epochs }

func (c *mapCapture[MK, MV]) holdsNothing(slot int) bool {
	return slot >= len(c.maps) || c.maps[slot] == nil
}

func (c *mapCapture[MK, MV]) segments() *segCache { return c.sc }

func (c *mapCapture[MK, MV]) entries(slot int, out *slotEmitter) error {
	if slot >= len(c.maps) || len(c.maps[slot]) == 0 {
		return nil
	}
	// Encode every entry into one arena, then slice it: the arena does not move once filled.
	c.arena, c.spans = c.arena[:0], c.spans[:0]
	for mk, mv := range c.maps[slot] {
		var err error
		k0 := len(c.arena)
		if c.arena, err = c.kc.Append(c.arena, mk); err != nil {
			return fmt.Errorf("snapshot keyed state: encode map key: %w", err)
		}
		k1 := len(c.arena)
		if c.arena, err = c.vc.Append(c.arena, mv); err != nil {
			return fmt.Errorf("snapshot keyed state: encode map value: %w", err)
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

// sortEntries appends the entries of spans in arena to dst in key byte order. A key's map is small as a
// rule (a window operator's: the few windows a key is in), so small ones are insertion sorted.
func sortEntries(dst []mapEntry, arena []byte, spans []entrySpan) []mapEntry {
	for _, s := range spans {
		dst = append(dst, mapEntry{k: arena[s.k0:s.k1], v: arena[s.k1:s.v1]})
	}
	if len(dst) > 16 {
		slices.SortFunc(dst, func(a, b mapEntry) int { return bytes.Compare(a.k, b.k) })
		return dst
	}
	for i := 1; i < len(dst); i++ {
		for j := i; j > 0 && bytes.Compare(dst[j].k, dst[j-1].k) < 0; j-- {
			dst[j], dst[j-1] = dst[j-1], dst[j]
		}
	}
	return dst
}

package state

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/codec"
)

// heapMaps is the table of map and list map state on the heap: per slot, a map from the map key to V (a
// value, or a list of elements). A map is copied on its first change in an epoch, since a capture may
// hold it.
type heapMaps[MK comparable, V any] struct {
	st   *heapStore
	name string
	k    kind
	kc   codec.Codec[MK]
	maps []smallMap[MK, V]
	// epoch is the epoch in which each map was made (or emptied) by this table: a map changes in place
	// only in that epoch, so it is also the epoch of the map's last change (for the segment cache).
	epoch []uint32
	sc    *segCache
}

func (s *heapMaps[MK, V]) kind() kind { return s.k }

// currentSlot returns the current key's slot; there must be one.
func (s *heapMaps[MK, V]) currentSlot() int32 {
	slot := s.st.cur
	if slot < 0 {
		panic("state: " + s.k.String() + " state used without a current key")
	}
	return slot
}

// current returns the current key's map (nil: none).
func (s *heapMaps[MK, V]) current() *smallMap[MK, V] {
	slot := int(s.currentSlot())
	if slot >= len(s.maps) {
		return nil
	}
	return &s.maps[slot]
}

// writableAt returns slot's map, copied if need be so that it may be changed in place. The pointer is
// good until the table grows.
func (s *heapMaps[MK, V]) writableAt(slot int) *smallMap[MK, V] {
	for len(s.maps) <= slot {
		s.maps = append(s.maps, smallMap[MK, V]{})
		s.epoch = append(s.epoch, 0)
	}
	m := &s.maps[slot]
	if s.epoch[slot] != s.st.epoch {
		if !m.isNil() {
			*m = m.clone() // a capture may hold m's entries
		}
		s.epoch[slot] = s.st.epoch
	}
	return m
}

// put stores v under mk in slot's map.
func (s *heapMaps[MK, V]) put(slot int32, mk MK, v V) {
	m := s.writableAt(int(slot))
	if m.len() == 0 {
		s.st.incRef(slot)
	}
	m.set(mk, v)
}

// drop empties slot's map, which holds entries.
func (s *heapMaps[MK, V]) drop(slot int32) {
	s.maps[slot], s.epoch[slot] = smallMap[MK, V]{}, s.st.epoch
	s.st.decRef(slot)
}

func (s *heapMaps[MK, V]) Remove(mk MK) {
	m := s.current()
	if _, ok := m.get(mk); !ok {
		return
	}
	slot := s.st.cur
	if m.len() == 1 {
		s.drop(slot)
		return
	}
	s.writableAt(int(slot)).del(mk)
}

func (s *heapMaps[MK, V]) Len() int { return s.current().len() }

func (s *heapMaps[MK, V]) Range(f func(MK, V) bool) { s.current().all(f) }

func (s *heapMaps[MK, V]) Clear() {
	if slot := s.st.cur; slot >= 0 && int(slot) < len(s.maps) && s.maps[slot].len() > 0 {
		s.drop(slot)
	}
}

func (s *heapMaps[MK, V]) hasSlot(slot int) bool { return slot < len(s.maps) && s.maps[slot].len() > 0 }

// frozen returns the capture of slots [0, n) of the table, whose values appendValue encodes.
func (s *heapMaps[MK, V]) frozen(n int, appendValue func(dst []byte, v V) ([]byte, error)) mapsCapture[MK, V] {
	if s.sc == nil {
		s.sc = &segCache{}
	}
	return mapsCapture[MK, V]{kc: s.kc, appendValue: appendValue, maps: slices.Clone(s.maps[:min(n, len(s.maps))]),
		epochs: slices.Clone(s.epoch[:min(n, len(s.epoch))]), sc: s.sc}
}

// restoreKey decodes a restored entry's map key.
func (s *heapMaps[MK, V]) restoreKey(mapKey []byte) (MK, error) {
	var mk MK
	if err := s.kc.Decode(mapKey, &mk); err != nil {
		return mk, fmt.Errorf("map key: %w", err)
	}
	return mk, nil
}

// heapMap is a MapState on the heap.
type heapMap[MK comparable, MV any] struct {
	heapMaps[MK, MV]
	vc codec.Codec[MV]
}

func newHeapMap[MK comparable, MV any](st *heapStore, name string, kc codec.Codec[MK], vc codec.Codec[MV]) *heapMap[MK, MV] {
	return &heapMap[MK, MV]{heapMaps: heapMaps[MK, MV]{st: st, name: name, k: kindMap, kc: kc}, vc: vc}
}

func (s *heapMap[MK, MV]) Get(mk MK) (MV, bool) { return s.current().get(mk) }

func (s *heapMap[MK, MV]) Put(mk MK, mv MV) { s.put(s.currentSlot(), mk, mv) }

func (s *heapMap[MK, MV]) capture(n int) heapCapture {
	return &mapCapture[MK, MV]{s.frozen(n, s.appendValue)}
}

func (s *heapMap[MK, MV]) appendValue(dst []byte, mv MV) ([]byte, error) {
	dst, err := s.vc.Append(dst, mv)
	if err != nil {
		return dst, fmt.Errorf("encode map value: %w", err)
	}
	return dst, nil
}

func (s *heapMap[MK, MV]) restore(slot int32, mapKey, value []byte) error {
	mk, err := s.restoreKey(mapKey)
	if err != nil {
		return err
	}
	var mv MV
	if err := s.vc.Decode(value, &mv); err != nil {
		return fmt.Errorf("map value: %w", err)
	}
	s.put(slot, mk, mv)
	return nil
}

// mapsCapture is a frozen view of a heapMaps table.
type mapsCapture[MK comparable, V any] struct {
	kc          codec.Codec[MK]
	appendValue func(dst []byte, v V) ([]byte, error)
	maps        []smallMap[MK, V]
	epochs      []uint32
	sc          *segCache
	arena       []byte
	spans       []entrySpan
	sorted      []mapEntry
}

func (c *mapsCapture[MK, V]) changedEpochs() []uint32 { return c.epochs }

func (c *mapsCapture[MK, V]) segments() *segCache { return c.sc }

func (c *mapsCapture[MK, V]) entries(slot int, out *slotEmitter) error {
	if slot >= len(c.maps) || c.maps[slot].len() == 0 {
		return nil
	}
	// Encode every entry into one arena, then slice it: the arena does not move once filled.
	c.arena, c.spans = c.arena[:0], c.spans[:0]
	for mk, v := range c.maps[slot].each {
		var err error
		k0 := len(c.arena)
		if c.arena, err = c.kc.Append(c.arena, mk); err != nil {
			return fmt.Errorf("snapshot keyed state: encode map key: %w", err)
		}
		k1 := len(c.arena)
		if c.arena, err = c.appendValue(c.arena, v); err != nil {
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

// mapCapture is a frozen view of a heapMap.
type mapCapture[MK comparable, MV any] struct{ mapsCapture[MK, MV] }

func (c *mapCapture[MK, MV]) kind() kind { return kindMap }

func (c *mapCapture[MK, MV]) holdsNothing(slot int) bool {
	return slot >= len(c.maps) || c.maps[slot].isNil()
}

type mapEntry struct{ k, v []byte }

// entrySpan locates one encoded map entry in an arena: the key is [k0, k1), the value [k1, v1).
type entrySpan struct{ k0, k1, v1 int }

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

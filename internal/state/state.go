// Package state owns keyed state: the per-key values, lists and maps that keyed operators read and write for
// the key of the record being processed. Keys are mapped to dense slots once per record (one hash-map lookup);
// every state of the operator is then a slice indexed by slot, so reading or updating a value costs no
// further lookup and no allocation.
//
// This is the in-memory (heap) backend. Its state handles are interfaces so that an on-disk backend can serve
// the same operators; key groups are computed from the key's hash when state is snapshotted, so snapshots can
// be split and redistributed by key group.
//
// The package knows nothing of tasks, networks or graphs; it must not import them.
package state

import (
	"fmt"
)

// ValueState holds one value per key.
type ValueState[V any] interface {
	// Value returns the value for the current key and whether one is set.
	Value() (V, bool)
	// Update sets the value for the current key.
	Update(v V)
	// Clear removes the value for the current key.
	Clear()
}

// ListState holds a list of values per key.
type ListState[V any] interface {
	// Get returns the list for the current key; the slice is owned by the state and valid until the next
	// change.
	Get() []V
	// Add appends v to the current key's list.
	Add(v V)
	// Update replaces the current key's list with a copy of vs.
	Update(vs []V)
	// Clear empties the current key's list.
	Clear()
}

// MapState holds a map per key.
type MapState[MK comparable, MV any] interface {
	// Get returns the value under mk for the current key.
	Get(mk MK) (MV, bool)
	// Put sets mk to mv for the current key.
	Put(mk MK, mv MV)
	// Remove deletes mk for the current key.
	Remove(mk MK)
	// Len returns the number of entries for the current key.
	Len() int
	// Range calls f for each entry of the current key until f returns false.
	Range(f func(MK, MV) bool)
	// Clear removes all entries of the current key.
	Clear()
}

// Backend is the non-generic face of a keyed backend that state constructors need.
type Backend interface {
	// Slot returns the dense slot of the current key, or -1 when no key is set.
	Slot() int
	// register adds a named state table.
	register(name string, t table) error
}

// table is one registered state.
type table interface {
	clearSlot(slot int)
	hasSlot(slot int) bool
}

// Keyed is the heap keyed backend of one operator subtask.
type Keyed[K comparable] struct {
	slots  map[K]int32
	keys   []K
	cur    int32
	tables map[string]table
	order  []string
}

// NewKeyed makes an empty backend.
func NewKeyed[K comparable]() *Keyed[K] {
	return &Keyed[K]{slots: make(map[K]int32), cur: -1, tables: make(map[string]table)}
}

// SetCurrentKey makes k the key that state handles read and write.
func (b *Keyed[K]) SetCurrentKey(k K) {
	s, ok := b.slots[k]
	if !ok {
		s = int32(len(b.keys))
		b.slots[k] = s
		b.keys = append(b.keys, k)
	}
	b.cur = s
}

// CurrentKey returns the current key.
func (b *Keyed[K]) CurrentKey() K {
	if b.cur < 0 {
		var zero K
		return zero
	}
	return b.keys[b.cur]
}

// Slot implements Backend.
func (b *Keyed[K]) Slot() int { return int(b.cur) }

// NumKeys returns the number of keys ever seen.
func (b *Keyed[K]) NumKeys() int { return len(b.keys) }

// ForEachKey makes each key that has state in any table current in turn and calls f; it restores the
// previous current key afterwards.
func (b *Keyed[K]) ForEachKey(f func(k K) error) error {
	prev := b.cur
	defer func() { b.cur = prev }()
	for i, k := range b.keys {
		has := false
		for _, t := range b.tables {
			if t.hasSlot(i) {
				has = true
				break
			}
		}
		if !has {
			continue
		}
		b.cur = int32(i)
		if err := f(k); err != nil {
			return err
		}
	}
	return nil
}

func (b *Keyed[K]) register(name string, t table) error {
	if _, dup := b.tables[name]; dup {
		return fmt.Errorf("keyed state %q is registered twice in the same operator", name)
	}
	b.tables[name] = t
	b.order = append(b.order, name)
	return nil
}

// NewValue registers a value state named name.
func NewValue[V any](b Backend, name string) (ValueState[V], error) {
	if b == nil {
		return nil, fmt.Errorf("value state %q: keyed state is only available on a keyed stream (after KeyBy)", name)
	}
	s := &heapValue[V]{b: b}
	if err := b.register(name, s); err != nil {
		return nil, err
	}
	return s, nil
}

type heapValue[V any] struct {
	b       Backend
	values  []V
	present []bool
}

func (s *heapValue[V]) grow(slot int) {
	for len(s.values) <= slot {
		var zero V
		s.values = append(s.values, zero)
		s.present = append(s.present, false)
	}
}

func (s *heapValue[V]) Value() (V, bool) {
	slot := s.b.Slot()
	if slot < 0 || slot >= len(s.values) || !s.present[slot] {
		var zero V
		return zero, false
	}
	return s.values[slot], true
}

func (s *heapValue[V]) Update(v V) {
	slot := s.b.Slot()
	if slot < 0 {
		panic("state: Update without a current key")
	}
	if slot >= len(s.values) {
		s.grow(slot)
	}
	s.values[slot] = v
	s.present[slot] = true
}

func (s *heapValue[V]) Clear() { s.clearSlot(s.b.Slot()) }

func (s *heapValue[V]) clearSlot(slot int) {
	if slot >= 0 && slot < len(s.values) {
		var zero V
		s.values[slot] = zero
		s.present[slot] = false
	}
}

func (s *heapValue[V]) hasSlot(slot int) bool { return slot < len(s.present) && s.present[slot] }

// NewList registers a list state named name.
func NewList[V any](b Backend, name string) (ListState[V], error) {
	if b == nil {
		return nil, fmt.Errorf("list state %q: keyed state is only available on a keyed stream (after KeyBy)", name)
	}
	s := &heapList[V]{b: b}
	if err := b.register(name, s); err != nil {
		return nil, err
	}
	return s, nil
}

type heapList[V any] struct {
	b     Backend
	lists [][]V
}

func (s *heapList[V]) slot() int {
	slot := s.b.Slot()
	if slot < 0 {
		panic("state: list state used without a current key")
	}
	for len(s.lists) <= slot {
		s.lists = append(s.lists, nil)
	}
	return slot
}

func (s *heapList[V]) Get() []V {
	slot := s.b.Slot()
	if slot < 0 || slot >= len(s.lists) {
		return nil
	}
	return s.lists[slot]
}

func (s *heapList[V]) Add(v V) {
	slot := s.slot()
	s.lists[slot] = append(s.lists[slot], v)
}

func (s *heapList[V]) Update(vs []V) {
	slot := s.slot()
	s.lists[slot] = append(s.lists[slot][:0], vs...)
}

func (s *heapList[V]) Clear() { s.clearSlot(s.b.Slot()) }

func (s *heapList[V]) clearSlot(slot int) {
	if slot >= 0 && slot < len(s.lists) {
		s.lists[slot] = nil
	}
}

func (s *heapList[V]) hasSlot(slot int) bool { return slot < len(s.lists) && len(s.lists[slot]) > 0 }

// NewMap registers a map state named name.
func NewMap[MK comparable, MV any](b Backend, name string) (MapState[MK, MV], error) {
	if b == nil {
		return nil, fmt.Errorf("map state %q: keyed state is only available on a keyed stream (after KeyBy)", name)
	}
	s := &heapMap[MK, MV]{b: b}
	if err := b.register(name, s); err != nil {
		return nil, err
	}
	return s, nil
}

type heapMap[MK comparable, MV any] struct {
	b    Backend
	maps []map[MK]MV
}

func (s *heapMap[MK, MV]) current(create bool) map[MK]MV {
	slot := s.b.Slot()
	if slot < 0 {
		panic("state: map state used without a current key")
	}
	if slot >= len(s.maps) {
		if !create {
			return nil
		}
		for len(s.maps) <= slot {
			s.maps = append(s.maps, nil)
		}
	}
	if s.maps[slot] == nil && create {
		s.maps[slot] = make(map[MK]MV)
	}
	return s.maps[slot]
}

func (s *heapMap[MK, MV]) Get(mk MK) (MV, bool) {
	v, ok := s.current(false)[mk]
	return v, ok
}

func (s *heapMap[MK, MV]) Put(mk MK, mv MV) { s.current(true)[mk] = mv }

func (s *heapMap[MK, MV]) Remove(mk MK) {
	if m := s.current(false); m != nil {
		delete(m, mk)
	}
}

func (s *heapMap[MK, MV]) Len() int { return len(s.current(false)) }

func (s *heapMap[MK, MV]) Range(f func(MK, MV) bool) {
	for k, v := range s.current(false) {
		if !f(k, v) {
			return
		}
	}
}

func (s *heapMap[MK, MV]) Clear() { s.clearSlot(s.b.Slot()) }

func (s *heapMap[MK, MV]) clearSlot(slot int) {
	if slot >= 0 && slot < len(s.maps) {
		s.maps[slot] = nil
	}
}

func (s *heapMap[MK, MV]) hasSlot(slot int) bool { return slot < len(s.maps) && len(s.maps[slot]) > 0 }

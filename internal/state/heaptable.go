package state

import (
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/codec"
)

// heapTable is one registered heap state.
type heapTable interface {
	kind() kind
	// hasSlot reports whether the table holds state for slot. A table holds nothing for a slot it does
	// not reference: every operation that removes a slot's last state also zeroes what the table kept
	// for it, so freeing a slot needs no call into the tables.
	hasSlot(slot int) bool
	// capture freezes the state of slots [0, n) for a snapshot; the task goroutine calls it, and the
	// backend then starts a new epoch.
	capture(n int) heapCapture
	// restore decodes one snapshot entry into slot.
	restore(slot int32, mapKey, value []byte) error
}

// heapCapture is a frozen view of one state, serialized by the snapshot's write function.
type heapCapture interface {
	kind() kind
	// entries calls out.emit for slot's entries, map entries in map key byte order.
	entries(slot int, out *slotEmitter) error
}

// heapValue is a ValueState on the heap.
type heapValue[V any] struct {
	st      *heapStore
	name    string
	c       codec.Codec[V]
	values  []V
	present []bool
}

func (s *heapValue[V]) kind() kind { return kindValue }

func (s *heapValue[V]) grow(slot int) {
	for len(s.values) <= slot {
		var zero V
		s.values = append(s.values, zero)
		s.present = append(s.present, false)
	}
}

func (s *heapValue[V]) Value() (V, bool) {
	slot := int(s.st.cur)
	if slot < 0 || slot >= len(s.values) || !s.present[slot] {
		var zero V
		return zero, false
	}
	return s.values[slot], true
}

func (s *heapValue[V]) Update(v V) {
	slot := int(s.st.cur)
	if slot < 0 {
		panic("state: Update without a current key")
	}
	if slot >= len(s.values) {
		s.grow(slot)
	}
	s.values[slot] = v
	s.present[slot] = true
}

// fold stores fn(value, x) in slot, or x when slot has no value, and returns what it stored; an error of
// fn leaves the slot as it was.
func (s *heapValue[V]) fold(slot int, x V, fn func(acc, x V) (V, error)) (V, error) {
	if slot < len(s.values) && s.present[slot] {
		var err error
		if x, err = fn(s.values[slot], x); err != nil {
			return x, err
		}
	} else if slot >= len(s.values) {
		s.grow(slot)
	}
	s.values[slot] = x
	s.present[slot] = true
	return x, nil
}

func (s *heapValue[V]) Clear() {
	if slot := int(s.st.cur); slot >= 0 && slot < len(s.values) && s.present[slot] {
		var zero V
		s.values[slot] = zero
		s.present[slot] = false
		s.st.released(int32(slot))
	}
}

func (s *heapValue[V]) hasSlot(slot int) bool { return slot < len(s.present) && s.present[slot] }

func (s *heapValue[V]) capture(n int) heapCapture {
	n = min(n, len(s.values))
	return &valueCapture[V]{c: s.c, values: slices.Clone(s.values[:n]), present: slices.Clone(s.present[:n])}
}

func (s *heapValue[V]) restore(slot int32, _, value []byte) error {
	s.grow(int(slot))
	if err := s.c.Decode(value, &s.values[slot]); err != nil {
		return err
	}
	s.present[slot] = true
	return nil
}

type valueCapture[V any] struct {
	c       codec.Codec[V]
	values  []V
	present []bool
	buf     []byte
}

func (c *valueCapture[V]) kind() kind { return kindValue }

func (c *valueCapture[V]) entries(slot int, out *slotEmitter) error {
	if slot >= len(c.present) || !c.present[slot] {
		return nil
	}
	var err error
	if c.buf, err = c.c.Append(c.buf[:0], c.values[slot]); err != nil {
		return fmt.Errorf("snapshot keyed state: encode value: %w", err)
	}
	return out.emit(nil, c.buf)
}

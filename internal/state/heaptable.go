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

// heapValue is a ValueState on the heap: a value per slot, in pages. A table that grows by pages never
// copies the values it holds (a slice that doubles copies them all, with a write barrier per pointer
// while the collector marks), and a value's presence is a bit of its page.
type heapValue[V any] struct {
	st    *heapStore
	name  string
	c     codec.Codec[V]
	pages []*valuePage[V] // slot s is in pages[s>>valuePageBits] at s&valuePageMask; none is nil
}

// valuePage holds the values of up to 4096 slots: the first page's values grow as a slice does, up to
// that, so a table of few keys stays small, and later pages are made whole; present has a bit per slot,
// set only below len(values).
type valuePage[V any] struct {
	values  []V
	present [valuePageSlots / 64]uint64
}

const (
	valuePageBits  = 12
	valuePageSlots = 1 << valuePageBits
	valuePageMask  = valuePageSlots - 1
)

func (s *heapValue[V]) kind() kind { return kindValue }

// get returns slot's value and whether it has one.
func (s *heapValue[V]) get(slot int) (V, bool) {
	if p := slot >> valuePageBits; uint(p) < uint(len(s.pages)) {
		pg, i := s.pages[p], uint(slot)&valuePageMask
		if pg.present[i>>6]&(1<<(i&63)) != 0 {
			return pg.values[i], true
		}
	}
	var zero V
	return zero, false
}

// set stores v as slot's value (slot >= 0).
func (s *heapValue[V]) set(slot int, v V) {
	p, i := slot>>valuePageBits, slot&valuePageMask
	if p >= len(s.pages) || i >= len(s.pages[p].values) {
		s.grow(slot)
	}
	pg := s.pages[p]
	pg.values[i] = v
	pg.present[i>>6] |= 1 << (i & 63)
}

// grow makes room for slot.
func (s *heapValue[V]) grow(slot int) {
	p, i := slot>>valuePageBits, slot&valuePageMask
	for len(s.pages) <= p {
		s.pages = append(s.pages, &valuePage[V]{})
	}
	pg := s.pages[p]
	if i < len(pg.values) {
		return
	}
	if i < cap(pg.values) {
		pg.values = pg.values[:i+1]
		return
	}
	// The first page grows as a slice does, so that a table of few keys stays small; a table that
	// outgrew it makes its later pages whole, since growing a page copies its values (and a large
	// value's copies, with their write barriers, cost as much as its updates).
	c := valuePageSlots
	if p == 0 {
		c = min(max(i+1, 2*cap(pg.values), 8), valuePageSlots)
	}
	grown := make([]V, i+1, c)
	copy(grown, pg.values)
	pg.values = grown
}

// clearSlot drops slot's value, if it has one, and reports whether it had.
func (s *heapValue[V]) clearSlot(slot int) bool {
	if p := slot >> valuePageBits; uint(p) < uint(len(s.pages)) {
		pg, i := s.pages[p], slot&valuePageMask
		if pg.present[i>>6]&(1<<(i&63)) != 0 {
			var zero V
			pg.values[i] = zero
			pg.present[i>>6] &^= 1 << (i & 63)
			return true
		}
	}
	return false
}

func (s *heapValue[V]) Value() (V, bool) { return s.get(int(s.st.cur)) }

func (s *heapValue[V]) Update(v V) {
	slot := int(s.st.cur)
	if slot < 0 {
		panic("state: Update without a current key")
	}
	s.set(slot, v)
}

// fold stores fn(value, x) in slot, or x when slot has no value, and returns what it stored; an error of
// fn leaves the slot as it was. One page lookup: it is a reducer's whole step.
func (s *heapValue[V]) fold(slot int, x V, fn func(acc, x V) (V, error)) (V, error) {
	p, i := slot>>valuePageBits, slot&valuePageMask
	if p >= len(s.pages) || i >= len(s.pages[p].values) {
		s.grow(slot)
	}
	pg := s.pages[p]
	w, bit := &pg.present[i>>6], uint64(1)<<(i&63)
	if *w&bit != 0 {
		var err error
		if x, err = fn(pg.values[i], x); err != nil {
			return x, err
		}
	}
	pg.values[i] = x
	*w |= bit
	return x, nil
}

func (s *heapValue[V]) Clear() {
	if slot := int(s.st.cur); s.clearSlot(slot) {
		s.st.released(int32(slot))
	}
}

func (s *heapValue[V]) hasSlot(slot int) bool {
	if p := slot >> valuePageBits; uint(p) < uint(len(s.pages)) {
		i := uint(slot) & valuePageMask
		return s.pages[p].present[i>>6]&(1<<(i&63)) != 0
	}
	return false
}

// capture copies the pages of slots [0, n).
func (s *heapValue[V]) capture(n int) heapCapture {
	c := &valueCapture[V]{c: s.c, pages: make([]*valuePage[V], 0, len(s.pages))}
	for p, pg := range s.pages {
		from := p << valuePageBits
		if from >= n {
			break
		}
		k := min(len(pg.values), n-from)
		cp := &valuePage[V]{values: slices.Clone(pg.values[:k]), present: pg.present}
		for i := k; i < len(pg.values); i++ { // slots at or above n are not the capture's
			cp.present[i>>6] &^= 1 << (i & 63)
		}
		c.pages = append(c.pages, cp)
	}
	return c
}

func (s *heapValue[V]) restore(slot int32, _, value []byte) error {
	var v V
	if err := s.c.Decode(value, &v); err != nil {
		return err
	}
	s.set(int(slot), v)
	return nil
}

type valueCapture[V any] struct {
	c     codec.Codec[V]
	pages []*valuePage[V]
	buf   []byte
}

func (c *valueCapture[V]) kind() kind { return kindValue }

func (c *valueCapture[V]) entries(slot int, out *slotEmitter) error {
	p, i := slot>>valuePageBits, slot&valuePageMask
	if p >= len(c.pages) || c.pages[p].present[i>>6]&(1<<(i&63)) == 0 {
		return nil
	}
	var err error
	if c.buf, err = c.c.Append(c.buf[:0], c.pages[p].values[i]); err != nil {
		return fmt.Errorf("snapshot keyed state: encode value: %w", err)
	}
	return out.emit(nil, c.buf)
}

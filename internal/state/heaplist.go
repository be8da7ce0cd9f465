package state

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/codec"
)

// heapList is a ListState on the heap.
type heapList[V any] struct {
	st    *heapStore
	name  string
	c     codec.Codec[V]
	lists [][]V
	// epoch is the epoch in which each list's array was made (or the list emptied) by this table: a list
	// changes in place only in that epoch, so it is also the epoch of the list's last change (for the
	// segment cache).
	epoch []uint32
	sc    *segCache
}

func (s *heapList[V]) kind() kind { return kindList }

func (s *heapList[V]) slot() int {
	slot := int(s.st.cur)
	if slot < 0 {
		panic("state: list state used without a current key")
	}
	s.grow(slot)
	return slot
}

func (s *heapList[V]) grow(slot int) {
	for len(s.lists) <= slot {
		s.lists = append(s.lists, nil)
		s.epoch = append(s.epoch, 0)
	}
}

func (s *heapList[V]) Get() []V {
	slot := int(s.st.cur)
	if slot < 0 || slot >= len(s.lists) {
		return nil
	}
	return s.lists[slot]
}

func (s *heapList[V]) Add(v V) {
	slot := s.slot()
	l := s.lists[slot]
	if len(l) == 0 {
		s.st.incRef(int32(slot))
	}
	if s.epoch[slot] != s.st.epoch {
		// A capture may share l's array up to len(l): appending is safe, but only to a fresh array is it
		// safe to then Update in place, so the next append reallocates.
		l = l[:len(l):len(l)]
		s.epoch[slot] = s.st.epoch
	}
	s.lists[slot] = append(l, v)
}

func (s *heapList[V]) Update(vs []V) {
	slot := s.slot()
	switch had := len(s.lists[slot]) > 0; {
	case len(vs) == 0:
		s.lists[slot], s.epoch[slot] = nil, s.st.epoch
		if had {
			s.st.decRef(int32(slot))
		}
		return
	case !had:
		s.st.incRef(int32(slot))
	}
	if s.epoch[slot] != s.st.epoch {
		s.lists[slot] = append([]V(nil), vs...)
		s.epoch[slot] = s.st.epoch
		return
	}
	s.lists[slot] = append(s.lists[slot][:0], vs...)
}

func (s *heapList[V]) Clear() {
	if slot := int(s.st.cur); slot >= 0 && slot < len(s.lists) && len(s.lists[slot]) > 0 {
		s.lists[slot], s.epoch[slot] = nil, s.st.epoch
		s.st.decRef(int32(slot))
	}
}

func (s *heapList[V]) hasSlot(slot int) bool { return slot < len(s.lists) && len(s.lists[slot]) > 0 }

func (s *heapList[V]) capture(n int) heapCapture {
	if s.sc == nil {
		s.sc = &segCache{}
	}
	return &listCapture[V]{c: s.c, lists: slices.Clone(s.lists[:min(n, len(s.lists))]),
		epochs: slices.Clone(s.epoch[:min(n, len(s.epoch))]), sc: s.sc}
}

func (s *heapList[V]) restore(slot int32, _, value []byte) error {
	l, err := decodeList(s.c, value, nil)
	if err != nil {
		return err
	}
	s.grow(int(slot))
	if len(l) == 0 {
		return nil
	}
	if len(s.lists[slot]) == 0 {
		s.st.incRef(slot)
	}
	s.lists[slot] = l
	s.epoch[slot] = s.st.epoch
	return nil
}

type listCapture[V any] struct {
	c      codec.Codec[V]
	lists  [][]V
	epochs []uint32
	sc     *segCache
	buf    []byte
}

func (c *listCapture[V]) kind() kind { return kindList }

func (c *listCapture[V]) changedEpochs() []uint32 { return c.epochs }

func (c *listCapture[V]) holdsNothing(slot int) bool {
	return slot >= len(c.lists) || len(c.lists[slot]) == 0
}

func (c *listCapture[V]) segments() *segCache { return c.sc }

func (c *listCapture[V]) entries(slot int, out *slotEmitter) error {
	if slot >= len(c.lists) || len(c.lists[slot]) == 0 {
		return nil
	}
	var err error
	if c.buf, err = appendList(c.buf[:0], c.c, c.lists[slot]); err != nil {
		return fmt.Errorf("snapshot keyed state: %w", err)
	}
	return out.emit(nil, c.buf)
}

// appendList appends the list encoding: each element's encoding preceded by its uvarint length.
func appendList[V any](dst []byte, c codec.Codec[V], vs []V) ([]byte, error) {
	for i := range vs {
		var err error
		if dst, err = appendElement(dst, c, vs[i]); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// appendElement appends one list element: uvarint length, then the encoding. The length is reserved as one
// byte and widened only for elements of 128 bytes or more.
func appendElement[V any](dst []byte, c codec.Codec[V], v V) ([]byte, error) {
	at := len(dst)
	dst = append(dst, 0)
	dst, err := c.Append(dst, v)
	if err != nil {
		return dst[:at], fmt.Errorf("encode list element: %w", err)
	}
	n := len(dst) - at - 1
	if n < 0x80 {
		dst[at] = byte(n)
		return dst, nil
	}
	var lb [binary.MaxVarintLen64]byte
	ln := binary.PutUvarint(lb[:], uint64(n))
	dst = append(dst, lb[:ln-1]...)
	copy(dst[at+ln:], dst[at+1:at+1+n])
	copy(dst[at:], lb[:ln])
	return dst, nil
}

// decodeList decodes a list encoding, appending the elements to dst.
func decodeList[V any](c codec.Codec[V], src []byte, dst []V) ([]V, error) {
	for len(src) > 0 {
		n, ln := binary.Uvarint(src)
		if ln <= 0 || n > uint64(len(src)-ln) {
			return dst, fmt.Errorf("list element: bad length prefix (%d bytes left)", len(src))
		}
		var v V
		if err := c.Decode(src[ln:ln+int(n)], &v); err != nil {
			return dst, fmt.Errorf("list element %d: %w", len(dst), err)
		}
		dst = append(dst, v)
		src = src[ln+int(n):]
	}
	return dst, nil
}

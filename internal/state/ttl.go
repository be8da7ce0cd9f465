package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/codec"
)

// TTL makes the states declared through WithTTL expire: an entry written (or, with RefreshOnRead, read)
// longer than TTL ago in processing time is gone.
type TTL struct {
	// TTL is how long an entry lives after its last write (or read); at least a millisecond.
	TTL time.Duration
	// RefreshOnRead makes reads restart an entry's time to live as writes do (Flink's OnReadAndWrite).
	RefreshOnRead bool
}

// WithTTL returns b for declaring states that expire per ttl: NewValue, NewList and NewMap on the result
// make TTL states; other constructors ignore it.
//
// A TTL state stores each entry's write time (epoch ms of Options.Now) with it: on the heap in the table
// next to the value (value state), per list element (list state: elements expire one by one, as in
// Flink), per map entry (map state); in pebble as 8 bytes big-endian before the value's (element's,
// map value's) encoding; in snapshots the same, with the state's header flags marking it, so that the
// remaining time to live survives restore and rescale onto either backend. An expired entry is never
// returned: a read clears it (heap: freeing the key's slot if it held nothing else), the snapshot writer
// and Restore leave it out, and Sweep clears those never read again. A snapshot's TTL state restores only
// into a TTL state, and a state without TTL only into one without, since their encodings differ.
func WithTTL(b Backend, ttl TTL) Backend {
	if b == nil {
		return nil
	}
	return ttlBackend{b: b, ttl: ttl}
}

// ttlBackend marks a backend for declaring TTL states: see WithTTL.
type ttlBackend struct {
	b   Backend
	ttl TTL
}

func (t ttlBackend) store() any { return t.b.store() }

// ttlOf returns the TTL that b was wrapped in, under any Engine wrapper.
func ttlOf(b Backend) (TTL, bool) {
	for {
		switch w := b.(type) {
		case ttlBackend:
			return w.ttl, true
		case engineBackend:
			b = w.b
		default:
			return TTL{}, false
		}
	}
}

// clockOr returns now, or the system clock in epoch ms.
func clockOr(now func() int64) func() int64 {
	if now != nil {
		return now
	}
	return func() int64 { return time.Now().UnixMilli() }
}

// ttlMillis validates ttl for state name of kind k and returns it in ms.
func ttlMillis(ttl TTL, k kind, name string) (int64, error) {
	if ttl.TTL < time.Millisecond {
		return 0, fmt.Errorf("%s state %q: time to live %v is below the 1ms resolution of processing time", k, name, ttl.TTL)
	}
	return ttl.TTL.Milliseconds(), nil
}

// expired reports whether an entry written at t has outlived ttl at now (all ms).
func expired(t, ttl, now int64) bool { return now-t >= ttl }

// stamped is a value with its write time, as TTL states hold it.
type stamped[V any] struct {
	v V
	t int64 // epoch ms
}

// stampedCodec encodes a stamped value as its time, 8 bytes big-endian, then the value's encoding.
type stampedCodec[V any] struct{ c codec.Codec[V] }

func (c stampedCodec[V]) Append(dst []byte, v stamped[V]) ([]byte, error) {
	return c.c.Append(binary.BigEndian.AppendUint64(dst, uint64(v.t)), v.v)
}

func (c stampedCodec[V]) Decode(src []byte, v *stamped[V]) error {
	if len(src) < 8 {
		return fmt.Errorf("%w: TTL state entry of %d bytes has no 8-byte write time", codec.ErrMalformed, len(src))
	}
	v.t = int64(binary.BigEndian.Uint64(src))
	return c.c.Decode(src[8:], &v.v)
}

var errNoWriteTime = errors.New("entry of a TTL state is shorter than its 8-byte write time")

// liveTTL filters the stored bytes v of an entry of a TTL state of kind k: for value and map state it
// returns v and whether it is live at now; for list state the live elements (appended to dst, or v itself
// when all are live) and whether any is.
func liveTTL(k kind, v []byte, ttl, now int64, dst []byte) ([]byte, bool, error) {
	if k != kindList {
		if len(v) < 8 {
			return nil, false, errNoWriteTime
		}
		return v, !expired(int64(binary.BigEndian.Uint64(v)), ttl, now), nil
	}
	dead := false
	for rest := v; len(rest) > 0; {
		n, ln := binary.Uvarint(rest)
		if ln <= 0 || n > uint64(len(rest)-ln) {
			return nil, false, fmt.Errorf("list element: bad length prefix (%d bytes left)", len(rest))
		}
		el := rest[:ln+int(n)]
		rest = rest[ln+int(n):]
		if n < 8 {
			return nil, false, errNoWriteTime
		}
		if expired(int64(binary.BigEndian.Uint64(el[ln:])), ttl, now) {
			if !dead {
				dead = true
				dst = append(dst, v[:len(v)-len(rest)-len(el)]...) // the live elements before it
			}
			continue
		}
		if dead {
			dst = append(dst, el...)
		}
	}
	if !dead {
		return v, len(v) > 0, nil
	}
	return dst, len(dst) > 0, nil
}

// ttlClock is what every TTL handle shares: the clock, the time to live and the update mode.
type ttlClock struct {
	now    func() int64
	ttl    int64 // ms
	onRead bool
}

// ttlValue is a ValueState with a time to live over a value state of stamped values (either backend).
type ttlValue[V any] struct {
	ttlClock
	in ValueState[stamped[V]]
}

func (s *ttlValue[V]) Value() (V, bool) {
	var zero V
	e, ok := s.in.Value()
	if !ok {
		return zero, false
	}
	now := s.now()
	if expired(e.t, s.ttl, now) {
		s.in.Clear()
		return zero, false
	}
	if s.onRead && e.t != now {
		s.in.Update(stamped[V]{v: e.v, t: now})
	}
	return e.v, true
}

func (s *ttlValue[V]) Update(v V) { s.in.Update(stamped[V]{v: v, t: s.now()}) }

func (s *ttlValue[V]) Clear() { s.in.Clear() }

// ttlList is a ListState with a time to live per element over a list state of stamped elements.
type ttlList[V any] struct {
	ttlClock
	in  ListState[stamped[V]]
	buf []stamped[V] // scratch for the stamped elements written back
	out []V          // the slice Get returns, reused: valid until the next change, as ListState says
}

func (s *ttlList[V]) Get() []V {
	l := s.in.Get()
	if len(l) == 0 {
		return nil
	}
	now := s.now()
	s.buf, s.out = s.buf[:0], s.out[:0]
	rewrite := false
	for _, e := range l {
		if expired(e.t, s.ttl, now) {
			rewrite = true
			continue
		}
		if s.onRead && e.t != now {
			e.t, rewrite = now, true
		}
		s.buf = append(s.buf, e)
		s.out = append(s.out, e.v)
	}
	switch {
	case len(s.buf) == 0:
		s.in.Clear()
		return nil
	case rewrite:
		s.in.Update(s.buf)
	}
	clear(s.buf) // drop references; Update copied
	return s.out
}

func (s *ttlList[V]) Add(v V) { s.in.Add(stamped[V]{v: v, t: s.now()}) }

func (s *ttlList[V]) Update(vs []V) {
	now := s.now()
	s.buf = s.buf[:0]
	for _, v := range vs {
		s.buf = append(s.buf, stamped[V]{v: v, t: now})
	}
	s.in.Update(s.buf)
	clear(s.buf)
}

func (s *ttlList[V]) Clear() { s.in.Clear() }

// ttlMap is a MapState with a time to live per entry over a map state of stamped values.
type ttlMap[MK comparable, MV any] struct {
	ttlClock
	in   MapState[MK, stamped[MV]]
	dead []MK // scratch: expired entries found by Range, removed after it
	seen []MK // scratch: entries read by Range, refreshed after it (RefreshOnRead)
}

func (s *ttlMap[MK, MV]) Get(mk MK) (MV, bool) {
	var zero MV
	e, ok := s.in.Get(mk)
	if !ok {
		return zero, false
	}
	now := s.now()
	if expired(e.t, s.ttl, now) {
		s.in.Remove(mk)
		return zero, false
	}
	if s.onRead && e.t != now {
		s.in.Put(mk, stamped[MV]{v: e.v, t: now})
	}
	return e.v, true
}

func (s *ttlMap[MK, MV]) Put(mk MK, mv MV) { s.in.Put(mk, stamped[MV]{v: mv, t: s.now()}) }

func (s *ttlMap[MK, MV]) Remove(mk MK) { s.in.Remove(mk) }

// Len counts the live entries (and clears the expired ones); it does not count as a read.
func (s *ttlMap[MK, MV]) Len() int {
	now := s.now()
	n := 0
	s.dead = s.dead[:0]
	s.in.Range(func(mk MK, e stamped[MV]) bool {
		if expired(e.t, s.ttl, now) {
			s.dead = append(s.dead, mk)
		} else {
			n++
		}
		return true
	})
	s.removeDead()
	return n
}

// Range calls f for the live entries; the entries are changed (expired ones removed, read ones
// refreshed) after the iteration, so that no backend's iteration sees its own changes.
func (s *ttlMap[MK, MV]) Range(f func(MK, MV) bool) {
	now := s.now()
	s.dead, s.seen = s.dead[:0], s.seen[:0]
	var refresh []MV
	s.in.Range(func(mk MK, e stamped[MV]) bool {
		if expired(e.t, s.ttl, now) {
			s.dead = append(s.dead, mk)
			return true
		}
		if s.onRead && e.t != now {
			s.seen = append(s.seen, mk)
			refresh = append(refresh, e.v)
		}
		return f(mk, e.v)
	})
	for i, mk := range s.seen {
		s.in.Put(mk, stamped[MV]{v: refresh[i], t: now})
	}
	clear(s.seen)
	s.removeDead()
}

func (s *ttlMap[MK, MV]) removeDead() {
	for _, mk := range s.dead {
		s.in.Remove(mk)
	}
	clear(s.dead)
	s.dead = s.dead[:0]
}

func (s *ttlMap[MK, MV]) Clear() { s.in.Clear() }

// newTTLValue registers a TTL value state on store.
func newTTLValue[V any](store any, name string, c codec.Codec[V], ttl TTL) (ValueState[V], error) {
	ms, err := ttlMillis(ttl, kindValue, name)
	if err != nil {
		return nil, err
	}
	sc := stampedCodec[V]{c: c}
	switch st := store.(type) {
	case *heapStore:
		in := &heapValue[stamped[V]]{st: st, name: name, c: sc}
		if err := st.registerTTL(name, in, ms, func(slot int, now int64) {
			if v, ok := in.get(slot); ok && expired(v.t, ms, now) && in.clearSlot(slot) {
				st.released(int32(slot))
			}
		}); err != nil {
			return nil, err
		}
		return &ttlValue[V]{ttlClock: ttlClock{now: st.now, ttl: ms, onRead: ttl.RefreshOnRead}, in: in}, nil
	case *pebbleStore:
		id, err := st.registerTTL(name, kindValue, ms)
		if err != nil {
			return nil, err
		}
		in := &pebbleValue[stamped[V]]{pebbleKey: pebbleKey{st: st, name: name, id: id}, c: sc}
		return &ttlValue[V]{ttlClock: ttlClock{now: st.now, ttl: ms, onRead: ttl.RefreshOnRead}, in: in}, nil
	}
	return nil, fmt.Errorf("value state %q: unknown backend %T", name, store)
}

// newTTLList registers a TTL list state on store.
func newTTLList[V any](store any, name string, c codec.Codec[V], ttl TTL) (ListState[V], error) {
	ms, err := ttlMillis(ttl, kindList, name)
	if err != nil {
		return nil, err
	}
	sc := stampedCodec[V]{c: c}
	switch st := store.(type) {
	case *heapStore:
		in := &heapList[stamped[V]]{st: st, name: name, c: sc}
		if err := st.registerTTL(name, in, ms, func(slot int, now int64) {
			if slot >= len(in.lists) {
				return
			}
			l := in.lists[slot]
			live := 0
			for _, e := range l {
				if !expired(e.t, ms, now) {
					live++
				}
			}
			switch {
			case live == len(l):
			case live == 0:
				in.lists[slot], in.epoch[slot] = nil, st.epoch
				st.decRef(int32(slot))
			default:
				// A fresh array: a capture may share the old one.
				kept := make([]stamped[V], 0, live)
				for _, e := range l {
					if !expired(e.t, ms, now) {
						kept = append(kept, e)
					}
				}
				in.lists[slot], in.epoch[slot] = kept, st.epoch
			}
		}); err != nil {
			return nil, err
		}
		return &ttlList[V]{ttlClock: ttlClock{now: st.now, ttl: ms, onRead: ttl.RefreshOnRead}, in: in}, nil
	case *pebbleStore:
		id, err := st.registerTTL(name, kindList, ms)
		if err != nil {
			return nil, err
		}
		in := &pebbleList[stamped[V]]{pebbleKey: pebbleKey{st: st, name: name, id: id}, c: sc}
		return &ttlList[V]{ttlClock: ttlClock{now: st.now, ttl: ms, onRead: ttl.RefreshOnRead}, in: in}, nil
	}
	return nil, fmt.Errorf("list state %q: unknown backend %T", name, store)
}

// newTTLMap registers a TTL map state on store.
func newTTLMap[MK comparable, MV any](store any, name string, mk codec.Codec[MK], mv codec.Codec[MV], ttl TTL) (MapState[MK, MV], error) {
	ms, err := ttlMillis(ttl, kindMap, name)
	if err != nil {
		return nil, err
	}
	sc := stampedCodec[MV]{c: mv}
	switch st := store.(type) {
	case *heapStore:
		in := newHeapMap[MK, stamped[MV]](st, name, mk, sc)
		var dead []MK
		if err := st.registerTTL(name, in, ms, func(slot int, now int64) {
			if slot >= len(in.maps) {
				return
			}
			m := &in.maps[slot]
			dead = dead[:0]
			for k, e := range m.each {
				if expired(e.t, ms, now) {
					dead = append(dead, k)
				}
			}
			switch {
			case len(dead) == 0:
			case len(dead) == m.len():
				in.drop(int32(slot))
			default:
				w := in.writableAt(slot)
				for _, k := range dead {
					w.del(k)
				}
			}
			clear(dead)
		}); err != nil {
			return nil, err
		}
		return &ttlMap[MK, MV]{ttlClock: ttlClock{now: st.now, ttl: ms, onRead: ttl.RefreshOnRead}, in: in}, nil
	case *pebbleStore:
		id, err := st.registerTTL(name, kindMap, ms)
		if err != nil {
			return nil, err
		}
		in := &pebbleMap[MK, stamped[MV]]{pebbleMapKeys: pebbleMapKeys[MK]{st: st, name: name, id: id, kc: mk}, vc: sc}
		return &ttlMap[MK, MV]{ttlClock: ttlClock{now: st.now, ttl: ms, onRead: ttl.RefreshOnRead}, in: in}, nil
	}
	return nil, fmt.Errorf("map state %q: unknown backend %T", name, store)
}

// flagsMismatch returns the error for a state declared with or without TTL whose stored entries say the
// other.
func flagsMismatch(name string, declared, stored byte) error {
	has := func(f byte) string {
		if f&flagTTL != 0 {
			return "with a time to live"
		}
		return "without a time to live"
	}
	return fmt.Errorf("keyed state %q is declared %s but was checkpointed %s: its entries are encoded differently; "+
		"keep the state's TTL setting or give it a new name", name, has(declared), has(stored))
}

// HasTTL reports whether a state with a time to live is registered on b, for an operator deciding whether
// to put Sweep on a processing-time deadline (it can only tell after Open).
func HasTTL(b Backend) bool {
	switch st := b.store().(type) {
	case *heapStore:
		return len(st.ttl) > 0
	case *pebbleStore:
		return st.ttls > 0
	}
	return false
}

package state

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
)

// Restore implements KeyedBackend. Entries of registered states are decoded into them; entries of other
// states wait as bytes until the state is registered.
func (b *heapBackend[K]) Restore(snapshots []io.Reader) error {
	var now int64 // the clock is read only for TTL states (a task's clock is not needed otherwise)
	if len(b.ttl) > 0 {
		now = b.now()
	}
	var states []snapState
	{
		err := readSnapshots(snapshots, b.groups, func(h *snapHeader) error {
			states = h.states
			for _, s := range states {
				if t, ok := b.tables[s.name]; ok && t.kind() != s.kind {
					return fmt.Errorf("keyed state %q is registered as %s state but the snapshot holds %s state", s.name, t.kind(), s.kind)
				}
				if _, ok := b.tables[s.name]; ok {
					if _, ttl := b.ttl[s.name]; ttl != (s.flags&flagTTL != 0) {
						return flagsMismatch(s.name, s.flags^flagTTL, s.flags)
					}
				}
				if t, ok := b.pending[s.name]; ok && (t.kind != s.kind || t.flags != s.flags) {
					return fmt.Errorf("keyed state %q is %s state (flags %#x) in one snapshot and %s state (flags %#x) in another",
						s.name, t.kind, t.flags, s.kind, s.flags)
				}
			}
			return nil
		}, func(e *snapEntry) error {
			s := states[e.state]
			if ms, ok := b.ttl[s.name]; ok {
				// An entry that expired since the snapshot is not restored (and takes no slot).
				live, keep, err := liveTTL(s.kind, e.value, ms, now, e.value[:0:0])
				if err != nil {
					return fmt.Errorf("restore %s state %q: %w", s.kind, s.name, err)
				}
				if !keep {
					return nil
				}
				e.value = live
			}
			slot, err := b.slotOf(e.key)
			if err != nil {
				return fmt.Errorf("keyed state %q: %w", s.name, err)
			}
			if t, ok := b.tables[s.name]; ok {
				if err := t.restore(slot, e.mapKey, e.value); err != nil {
					return fmt.Errorf("restore %s state %q: %w", s.kind, s.name, err)
				}
				return nil
			}
			raw := b.pending[s.name]
			if raw == nil {
				if len(b.tables)+len(b.pending) >= maxStates {
					return fmt.Errorf("keyed state %q: more than %d states in one operator", s.name, maxStates)
				}
				raw = &rawTable{kind: s.kind, flags: s.flags, slots: make(map[int32]map[string][]byte)}
				b.pending[s.name] = raw
			}
			raw.restore(&b.heapStore, slot, e.mapKey, e.value)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// rawTable holds the restored entries of a state that is not registered: per slot, map key → value (the
// map key is empty for value and list state).
type rawTable struct {
	kind  kind
	flags byte
	slots map[int32]map[string][]byte
}

// restore keeps one entry; the table holds one reference on each slot it has entries for.
func (t *rawTable) restore(st *heapStore, slot int32, mapKey, value []byte) {
	m := t.slots[slot]
	if m == nil {
		st.incRef(slot)
	}
	if m == nil || !t.kind.hasMapKey() {
		m = make(map[string][]byte, 1)
		t.slots[slot] = m
	}
	m[string(mapKey)] = bytes.Clone(value)
}

func (t *rawTable) capture(int) heapCapture {
	c := &rawCapture{k: t.kind, slots: make(map[int32]map[string][]byte, len(t.slots))}
	for s, m := range t.slots {
		c.slots[s] = maps.Clone(m)
	}
	return c
}

type rawCapture struct {
	k     kind
	slots map[int32]map[string][]byte
}

func (c *rawCapture) kind() kind { return c.k }

func (c *rawCapture) entries(slot int, out *slotEmitter) error {
	m := c.slots[int32(slot)]
	for _, mk := range slices.Sorted(maps.Keys(m)) {
		if err := out.emit([]byte(mk), m[mk]); err != nil {
			return err
		}
	}
	return nil
}

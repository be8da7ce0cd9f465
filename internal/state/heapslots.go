package state

import (
	"fmt"
	"slices"
)

// incRef records that one more table (or timer) holds state for slot.
func (st *heapStore) incRef(slot int32) { st.refs[slot]++ }

// decRef records that a table (or timer) no longer holds state for slot, freeing the slot at zero.
func (st *heapStore) decRef(slot int32) {
	n := st.refs[slot] - 1
	st.refs[slot] = n
	switch {
	case n > 0:
	case n < 0:
		panic(fmt.Sprintf("state: reference count of slot %d below zero", slot))
	default:
		st.released(slot)
	}
}

// released is called when slot may have lost its last state: the current key's slot becomes a candidate,
// another is freed if unreferenced.
func (st *heapStore) released(slot int32) {
	if slot == st.cur {
		st.candidate(slot)
	} else if st.unreferenced(slot) {
		st.freeSlot(slot)
	}
}

// unreferenced reports whether no table and no timer holds state for slot.
func (st *heapStore) unreferenced(slot int32) bool {
	if st.refs[slot] != 0 {
		return false
	}
	for _, t := range st.values {
		if t.hasSlot(int(slot)) {
			return false
		}
	}
	return true
}

// candidate records that slot may be left without references.
func (st *heapStore) candidate(slot int32) {
	if !st.marked[slot] {
		st.marked[slot] = true
		st.candidates = append(st.candidates, slot)
	}
}

// moveTo makes slot (a live slot, or -1) current.
func (st *heapStore) moveTo(slot int32) { st.cur = slot }

func (b *heapBackend[K]) newSlot(k K) int32 {
	if len(b.candidates) > 0 {
		b.cur = -1 // the current key is being left
		b.freeCandidates()
	}
	if len(b.sweepers) > 0 {
		// Incremental cleanup: each new key examines a few slots first, so that keys whose TTL state
		// expired unread are freed as fast as new keys come, whether or not the operator sweeps.
		_, _ = b.Sweep(b.now(), newKeySweep)
	}
	enc, err := b.kc.Append(b.enc[:0], k)
	b.enc = enc
	if err != nil {
		panic(&AccessError{Op: "set current key", Err: fmt.Errorf("encode key %v: %w", k, err)})
	}
	if kg := KeyGroup(enc, b.groups.maxP); !b.groups.owns(kg) {
		panic(&AccessError{Op: "set current key", Err: fmt.Errorf("key %v is in key group %d, not in [%d, %d]: %w",
			k, kg, b.groups.start, b.groups.end, ErrKeyGroupOutOfRange)})
	}
	s := b.addSlot(k)
	// The new key holds no state yet: unless a state takes it, it is freed when another new key comes.
	b.candidate(s)
	return s
}

// freeCandidates frees the candidate slots that are live, not current and without references.
func (b *heapBackend[K]) freeCandidates() {
	for _, s := range b.candidates {
		b.marked[s] = false
		if b.gens[s]&1 == 1 && s != b.cur && b.unreferenced(s) {
			b.freeSlotAt(s)
		}
	}
	b.candidates = b.candidates[:0]
}

// newKeySweep is how many slots a new key's SetCurrentKey sweeps in a backend with TTL states: a pass
// over n slots takes n/newKeySweep new keys, so slots stay within about newKeySweep/(newKeySweep-1) times
// the keys written within the TTL.
const newKeySweep = 4

// maxSlots bounds the live keys of a heap backend: slots are int32.
const maxSlots = 1<<31 - 1

// addSlot gives k a slot: a free one if there is one, else a new one at the end.
func (b *heapBackend[K]) addSlot(k K) int32 {
	var s int32
	if n := len(b.free); n > 0 {
		s, b.free = b.free[n-1], b.free[:n-1]
		b.ownKeys()
		b.keys[s] = k
		b.gens[s]++
	} else {
		if len(b.keys) >= maxSlots {
			panic(&AccessError{Op: "set current key", Err: fmt.Errorf("more than %d live keys in one heap backend", maxSlots)})
		}
		s = int32(len(b.keys))
		b.keys = append(b.keys, k)
		b.gens = append(b.gens, 1)
		b.refs = append(b.refs, 0)
		b.marked = append(b.marked, false)
	}
	b.idx.index(k, s)
	return s
}

// ownKeys copies keys and gens if a snapshot of this epoch may share them, before a slot changes in place.
func (b *heapBackend[K]) ownKeys() {
	if b.keysEpoch != b.epoch {
		b.keys = slices.Clone(b.keys)
		b.gens = slices.Clone(b.gens)
		b.keysEpoch = b.epoch
	}
}

// freeSlotAt frees a slot that no table and no timer references: the key leaves the indexes, the slot is
// zeroed (so that the key can be collected) and goes on the free list.
func (b *heapBackend[K]) freeSlotAt(s int32) {
	k := b.keys[s]
	b.idx.unindex(k)
	b.ownKeys()
	var zero K
	b.keys[s] = zero
	b.gens[s]++
	b.free = append(b.free, s)
}

// slotOfEncoded decodes a restored key and returns its slot, adding it if new.
func (b *heapBackend[K]) slotOfEncoded(enc []byte) (int32, error) {
	if err := b.kc.Decode(enc, &b.dec); err != nil {
		return 0, fmt.Errorf("decode key: %w", err)
	}
	if s, ok := b.lookup(b.dec); ok {
		return s, nil
	}
	if len(b.free) == 0 && len(b.keys) >= maxSlots {
		return 0, fmt.Errorf("more than %d live keys in one heap backend", maxSlots)
	}
	// The restored entry takes a reference right after; a slot of a failed restore may stay unreferenced,
	// but a failed Restore leaves the backend unusable anyway.
	return b.addSlot(b.dec), nil
}

package state

import (
	"fmt"
	"io"
	"sort"

	"github.com/runnel-dev/runnel/codec"
)

// heapStore is the non-generic part of the heap backend: the current slot and the registered states.
type heapStore struct {
	declarations
	cur    int32 // slot of the current key, -1 before the first
	groups keyGroups
	tables map[string]heapTable
	// pending holds restored entries of states not registered yet, by name.
	pending map[string]*rawTable
	// epoch counts snapshots. A list or map created in an earlier epoch may be shared with a snapshot's
	// capture, so it is copied before it is changed in place (copy on write).
	epoch uint32
	// slotOf finds or adds the slot of an encoded key; set by the generic backend.
	slotOf func(encodedKey []byte) (int32, error)

	// refs counts, per slot, the list, map and list map tables that hold state for the slot's key, plus
	// its timers and restored entries of unregistered states. Value tables are not counted: whether a slot
	// has a value is one load of their present flags, checked when a slot might be freed (unreferenced),
	// so that Update of a value, the per-record write, pays nothing for the freeing of slots.
	// A slot left unreferenced is freed at once, unless it is the current key's: that one becomes a
	// candidate (so that a function may Clear and then Update the same key), and candidates still
	// unreferenced are freed when the next new key needs a slot. So setting a known key checks nothing,
	// and slots never outgrow the peak of live keys by more than the current one. len(refs) is the number
	// of slots.
	refs []int32
	// values are the registered value tables, for unreferenced.
	values []heapTable
	// candidates are slots whose count reached zero while current, and new keys' slots; marked[s] says s
	// is in it, so it holds each slot at most once (at most one entry per slot).
	candidates []int32
	marked     []bool
	// freeSlot frees a slot with no references; set by the generic backend.
	freeSlot func(slot int32)

	// now is the processing-time clock (epoch ms) of TTL states.
	now func() int64
	// ttl holds the time to live (ms) of each registered TTL state, by name.
	ttl map[string]int64
	// sweepers clear one slot's expired entries of one TTL state each; sweepAt is the slot the next Sweep
	// starts at.
	sweepers []func(slot int, now int64)
	sweepAt  int

	// checks is what tests ask of the backend in builds with the invariants tag (invariants.go).
	checks heapChecks
}

func (st *heapStore) register(name string, t heapTable) error { return st.registerFlags(name, t, 0) }

// registerTTL registers TTL state t with its time to live (ms) and the function that sweeps one slot.
func (st *heapStore) registerTTL(name string, t heapTable, ms int64, sweep func(slot int, now int64)) error {
	if err := st.registerFlags(name, t, flagTTL); err != nil {
		return err
	}
	st.ttl[name] = ms
	st.sweepers = append(st.sweepers, sweep)
	return nil
}

func (st *heapStore) registerFlags(name string, t heapTable, flags byte) error {
	_, dup := st.tables[name]
	if err := st.checkDeclare(t.kind(), name, dup); err != nil {
		return err
	}
	if len(st.tables)+len(st.pending) >= maxStates {
		return fmt.Errorf("keyed state %q: more than %d states in one operator", name, maxStates)
	}
	if raw, ok := st.pending[name]; ok {
		if raw.kind != t.kind() {
			return fmt.Errorf("keyed state %q is registered as %s state but was restored as %s state", name, t.kind(), raw.kind)
		}
		if raw.flags != flags {
			return flagsMismatch(name, flags, raw.flags)
		}
		for slot, entries := range raw.slots {
			for mk, v := range entries {
				if err := t.restore(slot, []byte(mk), v); err != nil {
					return fmt.Errorf("restore %s state %q: %w", t.kind(), name, err)
				}
			}
		}
	}
	st.tables[name] = t
	if t.kind() == kindValue {
		st.values = append(st.values, t)
	}
	if raw, ok := st.pending[name]; ok {
		delete(st.pending, name)
		// The table holds the raw entries now (registered, so that unreferenced sees a value table's).
		for slot := range raw.slots {
			st.decRef(slot)
		}
	}
	return nil
}

// heapBackend is the heap KeyedBackend.
type heapBackend[K comparable] struct {
	heapStore
	kc codec.Codec[K]
	// idx holds the live keys' slots.
	idx keyIndex[K]
	// keys and gens hold, per slot, the key and its generation: odd while the slot is live, even while it
	// is free; allocating or freeing a slot increments it. Snapshots share both slices (the keys are
	// what a capture's slots mean, the generations tell the key order cache which of its entries still
	// hold), so changing a slot in place copies them first, once per epoch (keysEpoch).
	keys      []K
	gens      []uint32
	keysEpoch uint32
	free      []int32 // free slots, taken by newSlot before the slices grow; at most len(keys)
	enc       []byte  // scratch for encoding a new key
	dec       K
	// order is the canonical order of the keys as the last snapshot writer left it, for the next one.
	order keyOrder
}

// NewHeap makes an empty heap (in-memory) backend.
func NewHeap[K comparable](o Options[K]) (KeyedBackend[K], error) {
	kc, g, err := o.validate()
	if err != nil {
		return nil, err
	}
	b := &heapBackend[K]{
		heapStore: heapStore{declarations: declarations{owner: o.Owner}, cur: -1, groups: g, tables: make(map[string]heapTable),
			pending: make(map[string]*rawTable), epoch: 1, now: clockOr(o.Now), ttl: make(map[string]int64)},
		kc:        kc,
		keysEpoch: 1,
	}
	b.slotOf = b.slotOfEncoded
	b.freeSlot = b.freeSlotAt
	b.idx = newKeyIndex[K]()
	return b, nil
}

// lookup returns k's slot, and false when k has none.
func (b *heapBackend[K]) lookup(k K) (int32, bool) { return b.idx.lookup(k) }

func (b *heapBackend[K]) store() any { return &b.heapStore }

// SetCurrentKey implements KeyedBackend. A known key costs one lookup; a new key is encoded once to
// check its key group, and first frees the slots left without state (the previous current key's among
// them).
func (b *heapBackend[K]) SetCurrentKey(k K) {
	s, ok := b.lookup(k)
	if !ok {
		s = b.newSlot(k)
	}
	b.cur = s
}

// CurrentKey implements KeyedBackend.
func (b *heapBackend[K]) CurrentKey() K {
	if b.cur < 0 {
		var zero K
		return zero
	}
	return b.keys[b.cur]
}

// ForEachKey implements KeyedBackend; keys come in slot order. Free slots are skipped, and so are keys whose
// state is only in unregistered states.
func (b *heapBackend[K]) ForEachKey(f func(k K) error) error {
	prev, prevKey := b.cur, b.CurrentKey()
	var prevGen uint32
	if prev >= 0 {
		prevGen = b.gens[prev]
	}
	defer func() {
		switch {
		case prev < 0:
			b.moveTo(-1)
		case b.gens[prev] == prevGen: // still the same key's slot
			b.moveTo(prev)
			b.candidate(prev) // f may have cleared it; freeCandidates checks
		default: // f made a new key current, which freed the previous key's slot
			b.SetCurrentKey(prevKey)
		}
	}()
	n := len(b.keys)
	for i := range n {
		if b.gens[i]&1 == 0 {
			continue // free
		}
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
		b.moveTo(int32(i))
		if err := f(b.keys[i]); err != nil {
			return err
		}
	}
	return nil
}

// Snapshot implements KeyedBackend: it copies the value tables and the outer slices of list and map tables
// (lists and maps themselves are copied on their next change), then starts a new epoch.
func (b *heapBackend[K]) Snapshot(checkpointID int64) (func(w io.Writer) error, error) {
	return b.capture(checkpointID).writeFull, nil
}

// SnapshotIncremental implements IncrementalSnapshotter: the writers of one capture, full and delta.
func (b *heapBackend[K]) SnapshotIncremental(checkpointID int64) (full func(w io.Writer) error, delta func(w io.Writer) (int64, error), err error) {
	s := b.capture(checkpointID)
	return s.writeFull, s.writeDelta, nil
}

// capture captures the state, for its writers (heapwriter.go).
func (b *heapBackend[K]) capture(checkpointID int64) *heapSnapshot[K] {
	n := len(b.keys)
	// Shared with the capture: a slot changed in place copies both first (ownKeys), and appends go past n.
	keys, gens := b.keys[:n:n], b.gens[:n:n]
	h := &snapHeader{checkpointID: checkpointID, groups: b.groups}
	var caps []heapCapture
	for name, t := range b.tables {
		ss := snapState{name: name, kind: t.kind()}
		if ms, ok := b.ttl[name]; ok {
			ss.flags, ss.ttl = flagTTL, ms
			h.now = b.now()
		}
		h.states = append(h.states, ss)
		caps = append(caps, t.capture(n))
	}
	for name, t := range b.pending {
		h.states = append(h.states, snapState{name: name, kind: t.kind, flags: t.flags})
		caps = append(caps, t.capture(n))
	}
	epoch := b.epoch
	b.epoch++
	idx := make([]int, len(h.states))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(i, j int) bool { return h.states[idx[i]].name < h.states[idx[j]].name })
	states := make([]snapState, len(idx))
	sorted := make([]heapCapture, len(idx))
	for i, j := range idx {
		states[i], sorted[i] = h.states[j], caps[j]
	}
	h.states = states
	return &heapSnapshot[K]{header: h, caps: sorted, keys: keys, gens: gens, kc: b.kc, maxP: b.groups.maxP, order: &b.order,
		epoch: epoch, checks: b.checks}
}

// Sweep implements KeyedBackend: it examines the next budget slots in slot order.
func (b *heapBackend[K]) Sweep(now int64, budget int) (bool, error) {
	if len(b.sweepers) == 0 {
		return false, nil
	}
	n := len(b.keys)
	for i := 0; i < budget && b.sweepAt < n; i++ {
		slot := b.sweepAt
		b.sweepAt++
		for _, f := range b.sweepers {
			if b.gens[slot]&1 == 0 {
				break // free, or freed by the previous state's sweep
			}
			f(slot, now)
		}
	}
	if b.sweepAt < n {
		return true, nil
	}
	b.sweepAt = 0
	return false, nil
}

// Close implements KeyedBackend.
func (b *heapBackend[K]) Close() error {
	b.idx, b.keys, b.gens, b.refs, b.free, b.tables, b.pending = keyIndex[K]{}, nil, nil, nil, nil, nil, nil
	b.candidates, b.marked = nil, nil
	b.cur = -1
	return nil
}

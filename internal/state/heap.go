package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"sync"
	"unsafe"

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

	// encodeAll makes the snapshot writer encode every key, without the segment cache: the reference
	// that tests hold the cache to.
	encodeAll bool
}

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

// slotEmitter writes the entries of one key of one state: the snapshot writer sets its fields for each
// key and hands it to the capture, so that no closure is made per key.
type slotEmitter struct {
	sw    *snapWriter
	kg    int
	state int
	// key is the current key's encoding, read from arena (of hk) by the first entry: a key without entries
	// in the state (all of them, once every window fired) costs no read of its bytes, each a cache miss.
	key      []byte
	hk       *heapKey
	arena    []byte
	keyKnown bool
	isMap    bool
	// rec, when set, receives the entries instead of sw: encodeDirty records those of slot in its segment
	// cache's pre, with the key keyOf encodes, and counts them.
	rec   *segCache
	slot  int
	keyOf func(slot int) ([]byte, int, error)
	count int32
}

// emit writes one entry of the current key.
func (e *slotEmitter) emit(mapKey, value []byte) error {
	if e.rec != nil {
		if !e.keyKnown {
			key, kg, err := e.keyOf(e.slot)
			if err != nil {
				return err
			}
			e.key, e.kg, e.keyKnown = key, kg, true
		}
		c := e.rec
		c.pre = grown(c.pre, 3+3*binary.MaxVarintLen64+len(e.key)+len(mapKey)+len(value))
		c.pre = appendEntry(c.pre, e.kg, e.state, e.key, e.isMap, mapKey, value)
		e.count++
		return nil
	}
	if !e.keyKnown {
		e.key, e.keyKnown = e.hk.key(e.arena), true
	}
	return e.sw.entry(e.kg, e.state, e.key, e.isMap, mapKey, value)
}

// heapBackend is the heap KeyedBackend.
type heapBackend[K comparable] struct {
	heapStore
	kc    codec.Codec[K]
	slots map[K]int32 // the live keys' slots
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
	// ints caches slots for 8-byte integer keys in a flat open-addressing table, in front of slots: the
	// per-record lookup of the common int64 key then costs a multiply and a probe or two.
	ints *intIndex
	// order is the canonical order of the keys as the last snapshot writer left it, for the next one.
	order keyOrder
}

// keyOrder caches the canonical snapshot order (key group, then encoded key) of the live keys of a
// capture, so that a snapshot sorts only the keys that are new since the last one and merges them in,
// instead of encoding, hashing and sorting every key each time. Every entry names a slot and the slot's
// generation; an entry whose slot has since been freed or reused (its generation in the capture differs)
// is dropped by the next write, and a reused slot is merged in like a new key. The arena is compacted
// when a quarter of it belongs to dropped entries. Snapshot writers (off the task goroutine) share it
// under mu.
type keyOrder struct {
	mu      sync.Mutex
	covered []uint32  // per slot, the generation that order holds an entry for; 0 for none
	arena   []byte    // uvarint(len) ‖ key, for every entry (and dropped ones, until compaction)
	stale   int       // arena bytes of dropped entries
	order   []heapKey // the entries, sorted
	spare   []heapKey // the previous order's memory, reused by the next merge
	// base and n are the generations array and length of the capture the order was last brought to. A
	// captured array never changes (a slot changed after a capture copies the array first), so a capture
	// with the same array and at least as many slots differs only by slots appended after n.
	base *uint32
	n    int
	// written is the checkpoint id of the last snapshot written completely (0 before the first): what a
	// delta builds on; writtenEpoch is the epoch of its capture.
	written      int64
	writtenEpoch uint32
	// gone holds the entries the last update dropped (their bytes stay in the arena until the write that
	// made it is done with them): keys that held state in earlier writes and went.
	gone []heapKey
	// orderedAt is the epoch of the capture the order was last brought to (0: unknown), and went marks
	// the slots of gone, never nil once a write began. A segment cache's list written from the capture
	// of orderedAt, before this write's update, holds the keys the order held then: one of its keys went
	// if and only if went marks its slot (segCache.lives), a bit of a small bitmap where the capture's
	// generation of the slot was a read at random.
	orderedAt uint32
	went      []uint64
	// added, deletes and delKeys are scratch that writes reuse (a write of q5 adds and deletes tens of
	// thousands of keys: growing them afresh each time costs more than filling them).
	added   []heapKey
	grouped []heapKey // added in key group order (merge)
	ends    []int32   // per key group of the added keys, where its keys end in grouped (merge)
	radix   []heapKey // scratch of merge's radix sort
	deletes []deletion
	delKeys []byte
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
		slots:     make(map[K]int32),
		keysEpoch: 1,
	}
	b.slotOf = b.slotOfEncoded
	b.freeSlot = b.freeSlotAt
	switch any(*new(K)).(type) {
	case int64, uint64, int, uint:
		if unsafe.Sizeof(*new(K)) == 8 {
			b.ints = newIntIndex()
		}
	}
	return b, nil
}

func (b *heapBackend[K]) store() any { return &b.heapStore }

// SetCurrentKey implements KeyedBackend. A known key costs one map lookup; a new key is encoded once to
// check its key group, and first frees the slots left without state (the previous current key's among
// them).
func (b *heapBackend[K]) SetCurrentKey(k K) {
	if b.ints != nil {
		x := *(*uint64)(unsafe.Pointer(&k))
		if s, ok := b.ints.get(x); ok {
			b.cur = s
			return
		}
		s, ok := b.slots[k]
		if !ok {
			s = b.newSlot(k)
		}
		b.ints.put(x, s)
		b.cur = s
		return
	}
	s, ok := b.slots[k]
	if !ok {
		s = b.newSlot(k)
	}
	b.cur = s
}

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
	b.slots[k] = s
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
	delete(b.slots, k)
	if b.ints != nil {
		b.ints.del(*(*uint64)(unsafe.Pointer(&k)))
	}
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
	if s, ok := b.slots[b.dec]; ok {
		return s, nil
	}
	if len(b.free) == 0 && len(b.keys) >= maxSlots {
		return 0, fmt.Errorf("more than %d live keys in one heap backend", maxSlots)
	}
	// The restored entry takes a reference right after; a slot of a failed restore may stay unreferenced,
	// but a failed Restore leaves the backend unusable anyway.
	return b.addSlot(b.dec), nil
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
	full, _ := b.capture(checkpointID)
	return full, nil
}

// SnapshotIncremental implements IncrementalSnapshotter: the writers of one capture, full and delta.
func (b *heapBackend[K]) SnapshotIncremental(checkpointID int64) (full func(w io.Writer) error, delta func(w io.Writer) (int64, error), err error) {
	full, delta = b.capture(checkpointID)
	return full, delta, nil
}

// capture captures the state and returns its full and delta writers.
func (b *heapBackend[K]) capture(checkpointID int64) (full func(w io.Writer) error, delta func(w io.Writer) (int64, error)) {
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
	kc, maxP, ord, encodeAll := b.kc, b.groups.maxP, &b.order, b.encodeAll
	full = func(w io.Writer) error {
		_, err := writeHeap(w, h, sorted, keys, gens, kc, maxP, ord, epoch, encodeAll, false)
		return err
	}
	delta = func(w io.Writer) (int64, error) {
		return writeHeap(w, h, sorted, keys, gens, kc, maxP, ord, epoch, encodeAll, true)
	}
	return full, delta
}

// heapKey is one key of a heap snapshot in write order.
type heapKey struct {
	at int // offset of uvarint(len(key)) ‖ key in the arena
	// prefix is the first 8 bytes of that (zero-padded), big-endian: keys compare by it first, without
	// reading the arena (which sorting and merging would read at random), and by the bytes only on a tie
	// (an 8-byte key, little-endian as the integer codecs write it, ties only with keys that share its
	// first 7 bytes).
	prefix uint64
	slot   int32
	gen    uint32
	n      int32 // length of uvarint(len(key)) ‖ key
	kg     uint16
}

// sortPrefix returns the prefix of sortKey, uvarint(len(key)) ‖ key.
func sortPrefix(sortKey []byte) uint64 {
	if len(sortKey) >= 8 {
		return binary.BigEndian.Uint64(sortKey)
	}
	var b [8]byte
	copy(b[:], sortKey)
	return binary.BigEndian.Uint64(b[:])
}

// key returns the encoded key of k, held in arena.
func (k *heapKey) key(arena []byte) []byte {
	sortKey := arena[k.at : k.at+int(k.n)]
	_, ln := binary.Uvarint(sortKey)
	return sortKey[ln:]
}

// writeHeap writes a capture of epoch epoch. A full snapshot copies, for each cached state, the entries
// of the keys that did not change since the state's last full write, from that write's bytes and a run of
// consecutive keys at a time (segcache.go), and encodes the others; the bytes it writes of the state are
// the next write's to copy from. A delta (see incremental.go) encodes, for each
// cached state it can build on the base, only the keys that changed since the base, and writes every
// other state whole as a full snapshot does. A delta returns how many bytes of the snapshots it builds on
// it supersedes: the base's entries of the keys it replaces or deletes and, for each state it writes
// whole, the base's bytes of the state if the writer knows them (a cached state's sizes), else as many
// bytes as it writes of it (about what the state took before).
func writeHeap[K comparable](w io.Writer, h *snapHeader, caps []heapCapture, keys []K, gens []uint32, kc codec.Codec[K], maxP int, ord *keyOrder, epoch uint32, encodeAll, delta bool) (superseded int64, err error) {
	ord.mu.Lock()
	defer ord.mu.Unlock()
	prior := ord.orderedAt
	ord.orderedAt = 0
	if err := updateOrder(ord, keys, gens, kc, maxP); err != nil {
		// The keys that went are not accounted for in the states' sizes: the next write is a full one.
		ord.written, ord.writtenEpoch = 0, 0
		return 0, err
	}
	ord.orderedAt = epoch
	ord.markWent()
	// The arena keeps the bytes of the keys that went until they are deleted below.
	defer ord.maybeCompact()
	arena, order := ord.arena, ord.order
	since := ord.writtenEpoch
	asked := delta
	if delta && (ord.written == 0 || since >= epoch) {
		delta = false // nothing to build on (or a capture older than the base): a full snapshot
	}
	if delta {
		// A delta: the header says which states are written whole (copied, so that the capture's own
		// header stays as it was).
		dh := *h
		dh.base = ord.written
		dh.states = slices.Clone(h.states)
		h = &dh
	}
	// A delta deletes every key that went. Once more keys went than are left, writing each state whole
	// costs less (it encodes or copies only what is left) and replaces the base's entries all the same:
	// at the end of a bounded input, when every window fires, nearly every key goes.
	shrunk := len(ord.gone) > len(order)
	cached := make([]cachedCapture, len(caps))
	// A write into a checkpoint blob appends to the blob's memory in place (snapWriter.lend) and keeps what
	// it wrote there as the next data of its cached states.
	_, intoBlob := w.(lender)
	// known marks the whole states of a delta whose base's bytes are known (superseded counts them);
	// reusing the whole states that copy the bytes of unchanged keys from their segment cache.
	known, reusing := make([]bool, len(caps)), make([]bool, len(caps))
	var keyBuf []byte
	keyOf := func(slot int) ([]byte, int, error) {
		var err error
		if keyBuf, err = kc.Append(keyBuf[:0], keys[slot]); err != nil {
			return nil, 0, fmt.Errorf("snapshot keyed state: encode key %v: %w", keys[slot], err)
		}
		return keyBuf, KeyGroup(keyBuf, maxP), nil
	}
	for si, c := range caps {
		cc, ok := c.(cachedCapture)
		if !ok || h.states[si].flags&flagTTL != 0 || encodeAll {
			continue
		}
		cached[si] = cc
		sc := cc.segments()
		switch ok := sc.begin(si, len(gens), since, asked); {
		case delta && ok && shrunk:
			known[si] = true
			for _, n := range sc.sizes {
				superseded += int64(n)
			}
		case delta && ok:
			h.states[si].delta = true
			sc.markChanged(cc.changedEpochs(), since, len(gens))
		}
		if !h.states[si].delta {
			reusing[si] = sc.beginFull(epoch, len(gens), cc.changedEpochs(), intoBlob)
			sc.went = nil
			if reusing[si] && prior != 0 && sc.dataAt == prior {
				sc.went = ord.went
			}
		}
		if p, ok := c.(changedOnly); ok && (h.states[si].delta || reusing[si]) {
			p.onlyChanged()
		}
		if h.states[si].delta || reusing[si] {
			if err := sc.encodeDirty(c, len(gens), order, si, c.kind().hasMapKey(), keyOf); err != nil {
				return 0, err
			}
		}
	}
	sw := newSnapWriter(w, h)
	sw.hold = true
	sw.lend()
	defer sw.giveBack()
	for si, cc := range cached {
		// Data held in a blob is never in the memory written into (the blob's pool reuses a blob's memory
		// only once nothing holds it); should it be, it is not read.
		if cc != nil && reusing[si] && overlaps(cc.segments().data, sw.buf) {
			reusing[si] = false
		}
	}
	sw.deletes, sw.delKeys = ord.deletes[:0], ord.delKeys[:0]
	defer func() { ord.deletes, ord.delKeys = sw.deletes[:0], sw.delKeys[:0] }()
	// The keys that went since the last write held nothing in any state by then; a delta deletes those
	// that held entries in the base. (A write not asked for a delta keeps no sizes: its list has them.)
	for si, cc := range cached {
		if cc == nil || !asked {
			continue
		}
		sc := cc.segments()
		for _, k := range ord.gone {
			if int(k.slot) >= len(sc.sizes) || sc.sizes[k.slot] == 0 {
				continue
			}
			n := sc.sizes[k.slot]
			sc.sizes[k.slot] = 0
			if h.states[si].delta {
				sw.delete(int(k.kg), si, k.key(arena))
				superseded += int64(n)
			}
		}
	}
	out := &slotEmitter{sw: sw, arena: arena}
	for lo := 0; lo < len(order); {
		hi := lo + 1
		for hi < len(order) && order[hi].kg == order[lo].kg {
			hi++
		}
		out.kg = int(order[lo].kg)
		for si, c := range caps {
			out.state, out.isMap = si, c.kind().hasMapKey()
			var sc *segCache
			if cc := cached[si]; cc != nil {
				sc = cc.segments()
			}
			isDelta, reuse := h.states[si].delta, reusing[si]
			var sizes []int32 // the sizes this write keeps, if any
			if sc != nil && asked {
				sizes = sc.sizes
			}
			if sc != nil && !isDelta {
				sc.section(len(sw.buf))
			}
			for i := lo; i < hi; i++ {
				if reuse {
					taken, n, err := sc.reuseRun(order[i:hi], gens, sizes, sw)
					if err != nil {
						return 0, err
					}
					if delta && !known[si] {
						superseded += n
					}
					if i += taken; i == hi {
						break
					}
					// order[i] is not in the data as it is now: the run ends before its entries.
					if err := sc.flushRun(sw); err != nil {
						return 0, err
					}
				}
				k := order[i]
				slot := int(k.slot)
				if isDelta && !sc.isDirty(slot) {
					continue // unchanged since the base: the delta leaves it out
				}
				mark, count := len(sw.buf), sw.count
				switch {
				case (isDelta || reuse) && sc.isNone(slot):
					// It holds nothing now.
				case (isDelta || reuse) && sc.encoded && sc.isDirty(slot):
					b, entries, err := sc.encodedEntries(slot)
					if err != nil {
						return 0, err
					}
					if err := sw.encoded(b, entries); err != nil {
						return 0, err
					}
				default:
					out.hk, out.keyKnown = &order[i], false
					if err := c.entries(slot, out); err != nil {
						return 0, err
					}
				}
				n := len(sw.buf) - mark
				switch {
				case isDelta:
					old := sc.sizes[slot]
					superseded += int64(old)
					if sw.count == count && old > 0 {
						sw.delete(out.kg, si, k.key(arena)) // it had entries in the base, it has none now
					}
				case delta && !known[si]:
					superseded += int64(n)
				}
				if sc != nil {
					if sizes != nil {
						sizes[slot] = int32(n)
					}
					if !isDelta && sw.err == nil {
						sc.store(k.slot, k.gen, sw.buf[mark:], int(sw.count-count))
					}
				}
				if err := sw.maybeFlush(); err != nil {
					return 0, err
				}
			}
			if reuse {
				// The next state's entries come next: the run ends here.
				if err := sc.flushRun(sw); err != nil {
					return 0, err
				}
			}
		}
		lo = hi
	}
	if err := sw.finish(); err != nil {
		return 0, err
	}
	var hold func() func()
	if sw.lender != nil {
		hold = sw.lender.Hold
	}
	for si, cc := range cached {
		if cc != nil {
			cc.segments().finish(epoch, !h.states[si].delta, asked, sw.gave, hold)
		}
	}
	ord.written, ord.writtenEpoch = h.checkpointID, epoch
	return superseded, nil
}

// overlaps reports whether a's and b's memory (to their capacities) overlap.
func overlaps(a, b []byte) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(cap(b)) && b0 < a0+uintptr(cap(a))
}

// holds reports whether a capture whose slots have generations gens holds slot at generation gen: the
// key an entry of the key order or of a segment cache's list names is still live there.
func holds(gens []uint32, slot int32, gen uint32) bool {
	return int(slot) < len(gens) && gens[slot] == gen
}

// updateOrder makes o hold exactly the live slots of a capture (keys and gens): entries of slots freed or
// reused since are dropped (into o.gone), and live slots without an entry of their generation are encoded
// once, as uvarint(len) ‖ key (the bytes the canonical order sorts by), sorted and merged in. A capture
// written after a newer one brings the order back to itself; the next write moves it forward again.
func updateOrder[K comparable](o *keyOrder, keys []K, gens []uint32, kc codec.Codec[K], maxP int) error {
	o.gone = o.gone[:0]
	if len(o.covered) < len(gens) {
		o.covered = append(o.covered, make([]uint32, len(gens)-len(o.covered))...)
	}
	from := 0
	if len(gens) > 0 && &gens[0] == o.base && len(gens) >= o.n {
		from = o.n // only slots appended since can be new; every entry still holds
	} else {
		// Drop entries the capture does not hold (freed, reused, or past its slots).
		kept := o.order[:0]
		for _, e := range o.order {
			if holds(gens, e.slot, e.gen) {
				kept = append(kept, e)
				continue
			}
			if o.covered[e.slot] == e.gen {
				o.covered[e.slot] = 0
			}
			o.stale += int(e.n)
			o.gone = append(o.gone, e)
		}
		o.order = kept
	}
	if len(gens) == 0 {
		o.base, o.n = nil, 0
		return nil
	}
	o.base, o.n = &gens[0], len(gens)
	var enc []byte
	added := o.added[:0]
	for i := from; i < len(gens); i++ {
		g := gens[i]
		if g&1 == 0 || o.covered[i] == g {
			continue // free, or in the order already
		}
		var err error
		if enc, err = kc.Append(enc[:0], keys[i]); err != nil {
			return fmt.Errorf("snapshot keyed state: encode key %v: %w", keys[i], err)
		}
		at := len(o.arena)
		o.arena = grown(o.arena, binary.MaxVarintLen64+len(enc))
		o.arena = binary.AppendUvarint(o.arena, uint64(len(enc)))
		o.arena = append(o.arena, enc...)
		added = append(grown(added, 1), heapKey{slot: int32(i), gen: g, kg: uint16(KeyGroup(enc, maxP)), at: at, n: int32(len(o.arena) - at),
			prefix: sortPrefix(o.arena[at:])})
		o.covered[i] = g
	}
	if len(added) > 0 {
		o.merge(added)
	}
	o.added = added[:0]
	return nil
}

// markWent sets went to the slots of gone.
func (o *keyOrder) markWent() {
	words := 0
	for _, k := range o.gone {
		words = max(words, int(k.slot)>>6+1)
	}
	if o.went == nil {
		o.went = make([]uint64, 0, 64) // not nil: segment caches take nil for unknown
	}
	o.went = slices.Grow(o.went[:0], words)[:words]
	clear(o.went)
	for _, k := range o.gone {
		o.went[k.slot>>6] |= 1 << (k.slot & 63)
	}
}

// maybeCompact compacts the arena when a quarter of it belongs to dropped entries.
func (o *keyOrder) maybeCompact() {
	o.gone = o.gone[:0]
	if o.stale > 0 && 4*o.stale >= len(o.arena) {
		o.compact()
	}
}

// merge sorts added and merges it into the order. The added keys are sorted by prefix with a radix sort
// (sortByPrefix), then put in key group order by counting, which keeps that order within a group: no
// comparisons, since a comparison sort of each group's keys costs a function call a comparison, on every
// write that adds keys. Keys of equal prefixes, rare, are then sorted by their bytes. Each group's
// keys are merged with the order's run of that group; a group's new keys that all come after its old ones
// (keys that rise in byte order, as big-endian ids or timestamps do) are appended without a comparison
// each.
func (o *keyOrder) merge(added []heapKey) {
	arena := o.arena
	byKey := func(a, b heapKey) int {
		if c := cmp.Compare(a.prefix, b.prefix); c != 0 {
			return c
		}
		return bytes.Compare(arena[a.at:a.at+int(a.n)], arena[b.at:b.at+int(b.n)])
	}
	o.radix = slices.Grow(o.radix[:0], len(added))[:len(added)]
	added = sortByPrefix(added, o.radix)
	first, last := added[0].kg, added[0].kg
	for _, k := range added {
		first, last = min(first, k.kg), max(last, k.kg)
	}
	// ends[g] ends up as the end of group first+g's keys in grouped.
	ends := slices.Grow(o.ends[:0], int(last-first)+1)[:int(last-first)+1]
	clear(ends)
	for _, k := range added {
		ends[k.kg-first]++
	}
	at := int32(0)
	for g, n := range ends {
		ends[g] = at
		at += n
	}
	grouped := slices.Grow(o.grouped[:0], len(added))[:len(added)]
	for _, k := range added {
		grouped[ends[k.kg-first]] = k
		ends[k.kg-first]++
	}
	merged := o.spare[:0]
	if need := len(o.order) + len(added); cap(merged) < need {
		merged = make([]heapKey, 0, need+need/4) // headroom: the order of a growing state grows again
	}
	old := o.order
	for from := 0; from < len(grouped); {
		kg := grouped[from].kg
		news := grouped[from:ends[kg-first]]
		from += len(news)
		for i := 1; i < len(news); i++ {
			if news[i].prefix != news[i-1].prefix {
				continue
			}
			j := i + 1 // news[i-1:j] share a prefix
			for j < len(news) && news[j].prefix == news[i].prefix {
				j++
			}
			slices.SortFunc(news[i-1:j], byKey)
			i = j
		}
		// The old keys of earlier groups, then the merge with this group's.
		i := sort.Search(len(old), func(i int) bool { return old[i].kg >= kg })
		merged, old = append(merged, old[:i]...), old[i:]
		j := sort.Search(len(old), func(i int) bool { return old[i].kg > kg })
		run := old[:j]
		old = old[j:]
		if len(run) > 0 && byKey(run[len(run)-1], news[0]) > 0 {
			for len(run) > 0 && len(news) > 0 {
				if byKey(run[0], news[0]) <= 0 {
					merged, run = append(merged, run[0]), run[1:]
				} else {
					merged, news = append(merged, news[0]), news[1:]
				}
			}
		}
		merged = append(append(merged, run...), news...)
	}
	merged = append(merged, old...)
	o.ends, o.grouped = ends, grouped[:0]
	o.spare, o.order = o.order, merged
}

// sortByPrefix sorts keys by prefix, stably, with a least-significant-digit radix sort, using tmp (as long
// as keys) for its passes, and returns the sorted keys (in keys' or tmp's memory). It passes over the
// prefix's bytes that all keys share: the keys of a stream differ in a few bytes (q5's auction ids, little
// endian, in their three low ones), so a sort takes a pass or three over the keys, not eight.
func sortByPrefix(keys, tmp []heapKey) []heapKey {
	if len(keys) < 2 {
		return keys
	}
	var differ uint64
	for _, k := range keys {
		differ |= k.prefix ^ keys[0].prefix
	}
	src, dst := keys, tmp[:len(keys)]
	var at [256]int
	for shift := 0; shift < 64; shift += 8 {
		if byte(differ>>shift) == 0 {
			continue
		}
		clear(at[:])
		for _, k := range src {
			at[byte(k.prefix>>shift)]++
		}
		sum := 0
		for d, n := range at {
			at[d] = sum
			sum += n
		}
		for _, k := range src {
			d := byte(k.prefix >> shift)
			dst[at[d]] = k
			at[d]++
		}
		src, dst = dst, src
	}
	return src
}

// compact rewrites the arena with the bytes of the current entries only.
func (o *keyOrder) compact() {
	arena := make([]byte, 0, len(o.arena)-o.stale)
	for i := range o.order {
		e := &o.order[i]
		at := len(arena)
		arena = append(arena, o.arena[e.at:e.at+int(e.n)]...)
		e.at = at
	}
	o.arena, o.stale = arena, 0
}

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
	b.slots, b.keys, b.gens, b.refs, b.free, b.tables, b.pending, b.ints = nil, nil, nil, nil, nil, nil, nil, nil
	b.candidates, b.marked = nil, nil
	b.cur = -1
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

// intIndex maps 8-byte integer keys to slots: open addressing with linear probing, at most half full, so a
// probe ends within a few entries. A freed key is deleted by backward shift (the entries after it that
// would no longer be found move back), so there are no tombstones and lookups never slow down with rolling
// keys. A key and its slot share an entry, so a lookup touches one cache line. It grows by doubling at half
// full and never shrinks: its size follows the peak of live keys.
type intIndex struct {
	entries []intEntry
	mask    uint64
	n       int
}

type intEntry struct {
	key  uint64
	slot int32 // slot+1; 0 marks an empty entry
}

func newIntIndex() *intIndex {
	const size = 64
	return &intIndex{entries: make([]intEntry, size), mask: size - 1}
}

func (x *intIndex) home(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k & x.mask
}

func (x *intIndex) get(k uint64) (int32, bool) {
	for i := x.home(k); ; i = (i + 1) & x.mask {
		e := &x.entries[i]
		if e.key == k && e.slot != 0 {
			return e.slot - 1, true
		}
		if e.slot == 0 {
			return 0, false
		}
	}
}

func (x *intIndex) put(k uint64, slot int32) {
	if 2*(x.n+1) > len(x.entries) {
		old := x.entries
		size := 2 * len(old)
		*x = intIndex{entries: make([]intEntry, size), mask: uint64(size - 1)}
		for _, e := range old {
			if e.slot != 0 {
				x.put(e.key, e.slot-1)
			}
		}
	}
	i := x.home(k)
	for ; x.entries[i].slot != 0; i = (i + 1) & x.mask {
		if x.entries[i].key == k {
			x.entries[i].slot = slot + 1
			return
		}
	}
	x.entries[i] = intEntry{key: k, slot: slot + 1}
	x.n++
}

// del removes k, if present, shifting later entries of its probe run back into the hole.
func (x *intIndex) del(k uint64) {
	i := x.home(k)
	for {
		e := &x.entries[i]
		if e.slot == 0 {
			return
		}
		if e.key == k {
			break
		}
		i = (i + 1) & x.mask
	}
	x.n--
	for j := (i + 1) & x.mask; ; j = (j + 1) & x.mask {
		e := x.entries[j]
		if e.slot == 0 {
			break
		}
		// e may move into the hole at i only if its home is not in (i, j] (cyclically): otherwise a lookup
		// starting at its home would stop at the hole before reaching it.
		if h := x.home(e.key); (j-h)&x.mask >= (j-i)&x.mask {
			x.entries[i] = e
			i = j
		}
	}
	x.entries[i] = intEntry{}
}

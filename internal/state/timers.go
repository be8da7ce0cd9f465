package state

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble"
)

// Namespace tells apart timers of one key at one time: a window's bounds for the window operator, zero for
// process functions (Flink's timer namespace, fixed to two int64s so that a timer is a fixed-size value).
type Namespace struct{ A, B int64 }

// Timers holds the timers of one time domain of a keyed operator: per key, a set of (time, namespace)
// pairs, fired in time order. It is keyed state: checkpointed, restored and rescaled with the other states
// of the backend. Times are int64 milliseconds; the whole range is allowed.
type Timers interface {
	// Register adds a timer for the current key; registering an existing (key, ns, ts) does nothing.
	Register(ts int64, ns Namespace)
	// Delete removes the current key's timer (ts, ns), if there is one.
	Delete(ts int64, ns Namespace)
	// Next returns the earliest time of any timer, of any key, and false when there is none.
	Next() (int64, bool)
	// FireUpTo makes the key of each timer with time <= ts current in turn (as SetCurrentKey does), in time
	// order (ties in an order fixed per backend), removes the timer and calls f with it; timers
	// registered by f at or below ts fire in the same call. f's first error stops it and is returned (the
	// timer f failed on is removed). The last fired timer's key stays current.
	FireUpTo(ts int64, f func(ts int64, ns Namespace) error) error
	// Len returns the number of timers.
	Len() int
}

// NewTimers registers a timers state named name on b, a backend keyed by K. The engine declares its
// timers under reserved names ("\x00timers/event", "\x00timers/processing"), through Engine(b).
func NewTimers[K comparable](b Backend, name string) (Timers, error) {
	store, inner, err := storeOf(b, kindTimers, name)
	if err != nil {
		return nil, err
	}
	if _, ok := inner.(KeyedBackend[K]); !ok {
		return nil, fmt.Errorf("timers state %q: the backend %T is not keyed by the timers' key type", name, inner)
	}
	switch st := store.(type) {
	case *heapStore:
		t := &heapTimers{st: st, name: name, pos: make(map[timerKey]int32)}
		if err := st.register(name, t); err != nil {
			return nil, err
		}
		return t, nil
	case *pebbleStore:
		id, err := st.register(name, kindTimers)
		if err != nil {
			return nil, err
		}
		t := newPebbleTimers(st, name, id)
		if err := t.load(); err != nil {
			return nil, err
		}
		st.timers = append(st.timers, t)
		return t, nil
	}
	return nil, fmt.Errorf("timers state %q: unknown backend %T", name, b)
}

// flip maps int64 to uint64 so that big-endian byte order is numeric order.
func flip(x int64) uint64 { return uint64(x) ^ 1<<63 }

func unflip(u uint64) int64 { return int64(u ^ 1<<63) }

// appendTimerKey appends a timer's snapshot map key: time, namespace A, namespace B, each sign-flipped
// big-endian.
func appendTimerKey(dst []byte, ts int64, ns Namespace) []byte {
	dst = binary.BigEndian.AppendUint64(dst, flip(ts))
	dst = binary.BigEndian.AppendUint64(dst, flip(ns.A))
	return binary.BigEndian.AppendUint64(dst, flip(ns.B))
}

// decodeTimerKey decodes a timer's snapshot map key (timerKeyBytes long; the reader checks).
func decodeTimerKey(b []byte) (int64, Namespace) {
	return unflip(binary.BigEndian.Uint64(b)), Namespace{unflip(binary.BigEndian.Uint64(b[8:])), unflip(binary.BigEndian.Uint64(b[16:]))}
}

// heapTimer is one timer of a heap backend: 32 bytes.
type heapTimer struct {
	ts   int64
	ns   Namespace
	slot int32
	id   int32 // the timer's index in heapTimers.where, fixed while it lives
}

func (x *heapTimer) key() timerKey { return timerKey{ts: x.ts, ns: x.ns, slot: x.slot} }

// timerKey identifies a timer for de-duplication and deletion.
type timerKey struct {
	ts   int64
	ns   Namespace
	slot int32
}

// lessTimer orders the heap: by time, then slot, then namespace (a total order, so firing is
// deterministic for equal operations).
func lessTimer(a, b *heapTimer) bool {
	if a.ts != b.ts {
		return a.ts < b.ts
	}
	if a.slot != b.slot {
		return a.slot < b.slot
	}
	if a.ns.A != b.ns.A {
		return a.ns.A < b.ns.A
	}
	return a.ns.B < b.ns.B
}

// maxHeapTimers bounds the timers of one heap timers state: positions are int32.
const maxHeapTimers = math.MaxInt32

// heapTimers is Timers on the heap: a four-ary min-heap (timerArity) and a position index. The index maps
// a timer to a fixed id, and where maps the id to the timer's place in the heap, so moving a timer in the
// heap writes an array, not the map. Each timer holds a reference on its key's slot, so a key with timers
// keeps its slot.
//
// A slot's first timer is indexed by the slot itself (inline), the others by the map: most keys hold one
// timer at a time (a process function's cleanup timer, a window's end), and a lookup by slot reads an
// array next to the state the operator just touched, where the map costs a hash and a probe of a table as
// large as the timers, most of it out of cache.
type heapTimers struct {
	st      *heapStore
	name    string
	h       []heapTimer
	pos     map[timerKey]int32 // id of every timer that is not its slot's inline one
	where   []int32            // heap index by id
	freeIDs []int32            // ids of removed timers, for reuse; at most len(where)
	count   []int32            // timers per slot, for hasSlot
	inline  []int32            // per slot: 1 + the id of its inline timer, 0 for none
	// changed is the epoch of the last timer added or removed per slot, for the segment cache.
	changed []uint32
	sc      *segCache
}

func (t *heapTimers) kind() kind { return kindTimers }

func (t *heapTimers) hasSlot(slot int) bool { return slot < len(t.count) && t.count[slot] > 0 }

func (t *heapTimers) Len() int { return len(t.h) }

func (t *heapTimers) Next() (int64, bool) {
	if len(t.h) == 0 {
		return 0, false
	}
	return t.h[0].ts, true
}

func (t *heapTimers) Register(ts int64, ns Namespace) {
	slot := t.st.cur
	if slot < 0 {
		panic(&AccessError{State: t.name, Op: "register timer", Err: errNoCurrentKey})
	}
	t.add(slot, ts, ns)
}

// find returns the id of timer (slot, ts, ns), and false when there is none.
func (t *heapTimers) find(slot int32, ts int64, ns Namespace) (int32, bool) {
	if int(slot) >= len(t.count) || t.count[slot] == 0 {
		return 0, false
	}
	n := t.count[slot]
	if in := t.inline[slot]; in != 0 {
		if x := &t.h[t.where[in-1]]; x.ts == ts && x.ns == ns {
			return in - 1, true
		}
		n--
	}
	if n == 0 {
		return 0, false
	}
	id, ok := t.pos[timerKey{ts: ts, ns: ns, slot: slot}]
	return id, ok
}

// add adds timer (slot, ts, ns) unless it exists.
func (t *heapTimers) add(slot int32, ts int64, ns Namespace) {
	if _, ok := t.find(slot, ts, ns); ok {
		return
	}
	if len(t.h) >= maxHeapTimers {
		panic(&AccessError{State: t.name, Op: "register timer", Err: fmt.Errorf("more than %d timers", maxHeapTimers)})
	}
	var id int32
	if n := len(t.freeIDs); n > 0 {
		id, t.freeIDs = t.freeIDs[n-1], t.freeIDs[:n-1]
	} else {
		id = int32(len(t.where))
		t.where = append(t.where, 0)
	}
	i := len(t.h)
	t.h = append(t.h, heapTimer{ts: ts, ns: ns, slot: slot, id: id})
	t.where[id] = int32(i)
	t.up(i)
	for len(t.count) <= int(slot) {
		t.count = append(t.count, 0)
		t.changed = append(t.changed, 0)
		t.inline = append(t.inline, 0)
	}
	if t.inline[slot] == 0 {
		t.inline[slot] = id + 1
	} else {
		t.pos[timerKey{ts: ts, ns: ns, slot: slot}] = id
	}
	t.count[slot]++
	t.changed[slot] = t.st.epoch
	t.st.incRef(slot)
}

func (t *heapTimers) Delete(ts int64, ns Namespace) {
	slot := t.st.cur
	if slot < 0 {
		return
	}
	id, ok := t.find(slot, ts, ns)
	if !ok {
		return
	}
	t.removeAt(int(t.where[id]))
}

// removeAt removes the timer at index i and releases its slot reference.
func (t *heapTimers) removeAt(i int) {
	x := t.h[i]
	last := len(t.h) - 1
	if i != last {
		t.h[i] = t.h[last]
		t.where[t.h[i].id] = int32(i)
	}
	t.h = t.h[:last]
	if t.inline[x.slot] == x.id+1 {
		t.inline[x.slot] = 0
	} else {
		delete(t.pos, x.key())
	}
	t.freeIDs = append(t.freeIDs, x.id)
	if i < last && !t.down(i) {
		t.up(i)
	}
	t.count[x.slot]--
	t.changed[x.slot] = t.st.epoch
	t.st.decRef(x.slot)
}

func (t *heapTimers) FireUpTo(ts int64, f func(ts int64, ns Namespace) error) error {
	for len(t.h) > 0 && t.h[0].ts <= ts {
		x := t.h[0]
		// Current first, so that the timer's reference, released next, leaves the slot a candidate, not
		// freed: f runs with its key.
		t.st.moveTo(x.slot)
		t.removeAt(0)
		if err := f(x.ts, x.ns); err != nil {
			return err
		}
	}
	return nil
}

// timerArity is the heap's fan-out: the children of i are timerArity*i+1 … timerArity*i+timerArity. Four
// children of 32 bytes lie in two cache lines, and a heap of four halves the levels of a binary one, each
// a cache miss once the heap outgrows the caches (a keyed operator's cleanup timers over millions of
// keys); firing the earliest timer sifts through every level.
const timerArity = 4

// up sifts i up: the timers it passes move down a level each, and it is written once, where it stops.
func (t *heapTimers) up(i int) {
	x := t.h[i]
	for i > 0 {
		p := (i - 1) / timerArity
		if !lessTimer(&x, &t.h[p]) {
			break
		}
		t.h[i] = t.h[p]
		t.where[t.h[i].id] = int32(i)
		i = p
	}
	t.h[i] = x
	t.where[x.id] = int32(i)
}

// down sifts i down, as up does, and reports whether it moved.
func (t *heapTimers) down(i int) bool {
	start, n := i, len(t.h)
	x := t.h[i]
	for {
		c := timerArity*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < min(c+timerArity, n); j++ {
			if lessTimer(&t.h[j], &t.h[m]) {
				m = j
			}
		}
		if !lessTimer(&t.h[m], &x) {
			break
		}
		t.h[i] = t.h[m]
		t.where[t.h[i].id] = int32(i)
		i = m
	}
	if i == start {
		return false
	}
	t.h[i] = x
	t.where[x.id] = int32(i)
	return true
}

// capture copies the heap array (32 bytes a timer); the writer groups the copy by slot.
func (t *heapTimers) capture(n int) heapCapture {
	if t.sc == nil {
		t.sc = &segCache{}
	}
	return &timersCapture{timers: slices.Clone(t.h), slots: n, changed: slices.Clone(t.changed[:min(n, len(t.changed))]), sc: t.sc}
}

func (t *heapTimers) restore(slot int32, mapKey, _ []byte) error {
	if len(mapKey) != timerKeyBytes {
		return fmt.Errorf("timer of %d bytes, want %d", len(mapKey), timerKeyBytes)
	}
	ts, ns := decodeTimerKey(mapKey)
	t.add(slot, ts, ns)
	return nil
}

// timersCapture is a copy of a heap timers array, grouped on first use by slot (a counting sort: one pass
// to count, one to place, linear in the timers), each slot's timers then sorted by time and namespace (byte
// order of the map keys) when the writer reaches the slot.
type timersCapture struct {
	timers []heapTimer
	slots  int         // the slots of the capture; every timer's slot is below it
	by     []heapTimer // timers grouped by slot, after the first use
	start  []int32     // by[start[s]:start[s+1]] are slot s's timers
	buf    [timerKeyBytes]byte
	// changed is the heap timers' per slot, as of the capture.
	changed []uint32
	sc      *segCache
	// changedOnly limits group to the slots the segment cache marked dirty.
	changedOnly bool
}

func (c *timersCapture) kind() kind { return kindTimers }

func (c *timersCapture) changedEpochs() []uint32 { return c.changed }

func (c *timersCapture) segments() *segCache { return c.sc }

func (c *timersCapture) onlyChanged() { c.changedOnly = true }

func (c *timersCapture) holdsNothing(slot int) bool {
	if c.start == nil {
		c.group()
	}
	return slot >= c.slots || c.start[slot] == c.start[slot+1]
}

// group fills by and start, with the timers of every slot or, after onlyChanged, of the slots marked
// dirty (a write that copies or leaves out the timers of unchanged slots asks for few: grouping all would
// cost the most).
func (c *timersCapture) group() {
	c.start = make([]int32, c.slots+1)
	all, sc := !c.changedOnly, c.sc
	n := 0
	for i := range c.timers {
		if s := c.timers[i].slot; all || sc.isDirty(int(s)) {
			c.start[s+1]++
			n++
		}
	}
	for s := 1; s <= c.slots; s++ {
		c.start[s] += c.start[s-1]
	}
	c.by = make([]heapTimer, n)
	next := slices.Clone(c.start[:c.slots])
	for i := range c.timers {
		if s := c.timers[i].slot; all || sc.isDirty(int(s)) {
			c.by[next[s]] = c.timers[i]
			next[s]++
		}
	}
	c.timers = nil
}

func (c *timersCapture) entries(slot int, out *slotEmitter) error {
	if c.start == nil {
		c.group()
	}
	if slot >= c.slots {
		return nil
	}
	ts := c.by[c.start[slot]:c.start[slot+1]]
	// A key holds few timers as a rule (a window operator's: one or two per window), so insertion sort.
	if len(ts) > 16 {
		slices.SortFunc(ts, cmpTimerKey)
	} else {
		for i := 1; i < len(ts); i++ {
			for j := i; j > 0 && cmpTimerKey(ts[j], ts[j-1]) < 0; j-- {
				ts[j], ts[j-1] = ts[j-1], ts[j]
			}
		}
	}
	for i := range ts {
		if err := out.emit(appendTimerKey(c.buf[:0], ts[i].ts, ts[i].ns), nil); err != nil {
			return err
		}
	}
	return nil
}

// cmpTimerKey orders one slot's timers as their snapshot map keys: by time, then namespace.
func cmpTimerKey(a, b heapTimer) int {
	return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.ns.A, b.ns.A), cmp.Compare(a.ns.B, b.ns.B))
}

// pebbleTimers is Timers in pebble: one store entry per timer, [key group][state id][time, 8 bytes
// sign-flipped big-endian][uvarint key length][key][namespace, 16 bytes], with an empty value, so that a
// key group's timers are one range in time order. In memory it keeps only the earliest time of each owned
// key group that has timers and a min-heap of those key groups by it (Flink's per-key-group priority queue
// cache): memory bounded by the key groups, not by the timers.
type pebbleTimers struct {
	st    *pebbleStore
	name  string
	id    uint16
	start int // first owned key group; key groups are indexed from it
	// earliest[i] is the earliest time of key group start+i, valid while pos[i] >= 0.
	earliest []int64
	heap     []int32 // indexes of key groups with timers, a min-heap by (earliest, index)
	pos      []int32 // index in heap of each key group, -1 for one without timers
	n        int
	key      []byte // scratch store key
	lenKey   []byte // scratch: the fired timer's uvarint(length) ‖ key
	// itKG is the key group whose timers FireUpTo iterates (-1 outside FireUpTo); a change to its timers
	// while f runs makes the iterator's view stale, and it is opened again.
	itKG  int
	stale bool
}

func newPebbleTimers(st *pebbleStore, name string, id uint16) *pebbleTimers {
	n := st.groups.end - st.groups.start + 1
	t := &pebbleTimers{st: st, name: name, id: id, start: st.groups.start, earliest: make([]int64, n), pos: make([]int32, n), itKG: -1}
	for i := range t.pos {
		t.pos[i] = -1
	}
	return t
}

// bounds returns the store key range of key group kg's timers.
func (t *pebbleTimers) bounds(kg int) (lo, hi []byte) {
	lo = []byte{byte(kg >> 8), byte(kg), byte(t.id >> 8), byte(t.id)}
	return lo, prefixEnd(lo)
}

// boundsFrom returns the store key range of key group kg's timers at or after time from. Fired and deleted
// timers stay in the store as tombstones until compaction; seeking from the earliest live time, not from
// the start of the key group, steps over them instead of through them.
func (t *pebbleTimers) boundsFrom(kg int, from int64) (lo, hi []byte) {
	lo, hi = t.bounds(kg)
	return binary.BigEndian.AppendUint64(lo, flip(from)), hi
}

// splitTimerKey splits a timers store key into key group, time, the key's uvarint(length) ‖ key, the key
// and the namespace.
func splitTimerKey(k []byte) (kg int, ts int64, lenKey, key []byte, ns Namespace, err error) {
	if len(k) < 4+8+1+16 {
		return 0, 0, nil, nil, ns, fmt.Errorf("timer store key %x is too short", k)
	}
	n, ln := binary.Uvarint(k[12:])
	if ln <= 0 || n != uint64(len(k)-12-ln-16) {
		return 0, 0, nil, nil, ns, fmt.Errorf("timer store key %x has a bad key length", k)
	}
	end := 12 + ln + int(n)
	ts = unflip(binary.BigEndian.Uint64(k[4:]))
	ns = Namespace{unflip(binary.BigEndian.Uint64(k[end:])), unflip(binary.BigEndian.Uint64(k[end+8:]))}
	return int(binary.BigEndian.Uint16(k)), ts, k[12:end], k[12+ln : end], ns, nil
}

// appendTimerStoreKey appends the store key of timer (ts, ns) of the key with store prefix kg ‖ id
// (kgID, 4 bytes) and uvarint(length) ‖ key (lenKey).
func appendTimerStoreKey(dst, kgID []byte, ts int64, lenKey []byte, ns Namespace) []byte {
	dst = append(dst, kgID[:4]...)
	dst = binary.BigEndian.AppendUint64(dst, flip(ts))
	dst = append(dst, lenKey...)
	dst = binary.BigEndian.AppendUint64(dst, flip(ns.A))
	return binary.BigEndian.AppendUint64(dst, flip(ns.B))
}

// storeKey returns the store key of the current key's timer (ts, ns) and its key group.
func (t *pebbleTimers) storeKey(ts int64, ns Namespace, op string) ([]byte, int) {
	k := t.st.mustKeyFor(t.id, t.name, op)
	t.key = appendTimerStoreKey(t.key[:0], k, ts, k[4:], ns)
	return t.key, int(binary.BigEndian.Uint16(k))
}

func (t *pebbleTimers) exists(k []byte, op string) bool {
	_, closer, ok := t.st.get(k, t.name)
	if ok {
		t.st.check(closer.Close(), t.name, op)
	}
	return ok
}

func (t *pebbleTimers) Len() int { return t.n }

func (t *pebbleTimers) Next() (int64, bool) {
	if len(t.heap) == 0 {
		return 0, false
	}
	return t.earliest[t.heap[0]], true
}

// Register implements Timers: a read for de-duplication (so that Len stays exact and a timer registered
// once per record costs no write), a write if new, and a cache update.
func (t *pebbleTimers) Register(ts int64, ns Namespace) {
	k, kg := t.storeKey(ts, ns, "register timer")
	if t.exists(k, "register timer") {
		return
	}
	t.st.check(t.st.db.Set(k, nil, pebble.NoSync), t.name, "register timer")
	t.n++
	i := int32(kg - t.start)
	switch {
	case t.pos[i] < 0:
		t.earliest[i] = ts
		t.push(i)
	case ts < t.earliest[i]:
		t.earliest[i] = ts
		t.up(int(t.pos[i]))
	}
	if kg == t.itKG {
		t.stale = true
	}
}

func (t *pebbleTimers) Delete(ts int64, ns Namespace) {
	if _, ok := t.st.keyFor(t.id); !ok {
		return
	}
	k, kg := t.storeKey(ts, ns, "delete timer")
	if !t.exists(k, "delete timer") {
		return
	}
	t.st.check(t.st.db.Delete(k, pebble.NoSync), t.name, "delete timer")
	t.n--
	if i := int32(kg - t.start); t.earliest[i] == ts {
		t.recompute(i, ts)
	}
	if kg == t.itKG {
		t.stale = true
	}
}

// recompute reads key group i's earliest time, which is at least from, from the store.
func (t *pebbleTimers) recompute(i int32, from int64) {
	lo, hi := t.boundsFrom(t.start+int(i), from)
	it, err := t.st.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	t.st.check(err, t.name, "timers")
	if it.First() {
		t.earliest[i] = unflip(binary.BigEndian.Uint64(it.Key()[4:]))
		t.fix(i)
	} else {
		t.remove(i)
	}
	t.st.check(errors.Join(it.Error(), it.Close()), t.name, "timers")
}

// load rebuilds the count and the per-key-group cache from the store (after registration or Restore).
func (t *pebbleTimers) load() error {
	t.heap, t.n = t.heap[:0], 0
	for i := range t.pos {
		t.pos[i] = -1
	}
	it, err := t.st.db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("timers state %q: load: %w", t.name, err)
	}
	for i := range t.pos {
		lo, hi := t.bounds(t.start + i)
		it.SetBounds(lo, hi)
		for valid := it.First(); valid; valid = it.Next() {
			if t.pos[i] < 0 {
				t.earliest[i] = unflip(binary.BigEndian.Uint64(it.Key()[4:]))
				t.push(int32(i))
			}
			t.n++
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("timers state %q: load: %w", t.name, err)
	}
	return nil
}

// FireUpTo implements Timers. It keeps one iterator over the head key group's timers while the head stays
// there and f does not change that key group's timers; otherwise it opens a new one (an iterator sees the
// store as it was when opened).
func (t *pebbleTimers) FireUpTo(upTo int64, f func(ts int64, ns Namespace) error) (err error) {
	var it *pebble.Iterator
	defer func() {
		t.itKG = -1
		if it != nil {
			if cerr := errors.Join(it.Error(), it.Close()); cerr != nil && err == nil {
				err = fmt.Errorf("timers state %q: fire: %w", t.name, cerr)
			}
		}
	}()
	for len(t.heap) > 0 {
		i := t.heap[0]
		if t.earliest[i] > upTo {
			return nil
		}
		kg := t.start + int(i)
		if it == nil || t.itKG != kg || t.stale {
			if it != nil {
				if err := errors.Join(it.Error(), it.Close()); err != nil {
					it = nil
					return fmt.Errorf("timers state %q: fire: %w", t.name, err)
				}
			}
			lo, hi := t.boundsFrom(kg, t.earliest[i])
			if it, err = t.st.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi}); err != nil {
				it = nil
				return fmt.Errorf("timers state %q: fire: %w", t.name, err)
			}
			t.itKG, t.stale = kg, false
			if !it.First() {
				return fmt.Errorf("timers state %q: key group %d has no timers in the store, but its cache has one at %d", t.name, kg, t.earliest[i])
			}
		}
		// The iterator is at key group kg's earliest timer.
		_, ts, lenKey, _, ns, err := splitTimerKey(it.Key())
		if err != nil {
			return fmt.Errorf("timers state %q: %w", t.name, err)
		}
		if ts != t.earliest[i] {
			return fmt.Errorf("timers state %q: key group %d's earliest timer is at %d, its cache says %d", t.name, kg, ts, t.earliest[i])
		}
		t.lenKey = append(t.lenKey[:0], lenKey...)
		t.st.check(t.st.db.Delete(it.Key(), pebble.NoSync), t.name, "fire timer")
		t.n--
		if it.Next() {
			t.earliest[i] = unflip(binary.BigEndian.Uint64(it.Key()[4:]))
			t.fix(i)
		} else {
			t.remove(i)
		}
		if err := t.st.setCur(kg, t.lenKey); err != nil {
			return fmt.Errorf("timers state %q: fire: %w", t.name, err)
		}
		if err := f(ts, ns); err != nil {
			return err
		}
	}
	return nil
}

// The key group heap: indexes ordered by (earliest, index).

func (t *pebbleTimers) less(a, b int32) bool {
	ea, eb := t.earliest[a], t.earliest[b]
	return ea < eb || ea == eb && a < b
}

func (t *pebbleTimers) push(i int32) {
	t.pos[i] = int32(len(t.heap))
	t.heap = append(t.heap, i)
	t.up(len(t.heap) - 1)
}

func (t *pebbleTimers) remove(i int32) {
	p := int(t.pos[i])
	if p < 0 {
		return
	}
	last := len(t.heap) - 1
	t.swapKG(p, last)
	t.heap = t.heap[:last]
	t.pos[i] = -1
	if p < last {
		t.fixAt(p)
	}
}

func (t *pebbleTimers) fix(i int32) { t.fixAt(int(t.pos[i])) }

func (t *pebbleTimers) fixAt(p int) {
	if !t.downKG(p) {
		t.up(p)
	}
}

func (t *pebbleTimers) swapKG(a, b int) {
	t.heap[a], t.heap[b] = t.heap[b], t.heap[a]
	t.pos[t.heap[a]], t.pos[t.heap[b]] = int32(a), int32(b)
}

func (t *pebbleTimers) up(p int) {
	for p > 0 {
		q := (p - 1) / 2
		if !t.less(t.heap[p], t.heap[q]) {
			return
		}
		t.swapKG(p, q)
		p = q
	}
}

func (t *pebbleTimers) downKG(p int) bool {
	start := p
	for {
		l := 2*p + 1
		if l >= len(t.heap) {
			break
		}
		m := l
		if r := l + 1; r < len(t.heap) && t.less(t.heap[r], t.heap[l]) {
			m = r
		}
		if !t.less(t.heap[m], t.heap[p]) {
			break
		}
		t.swapKG(p, m)
		p = m
	}
	return p > start
}

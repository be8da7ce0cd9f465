package state

import "slices"

// Incremental snapshot encoding of the heap backend.
//
// A heap snapshot is a full snapshot: every entry of every key, so that a checkpoint restores on its own
// and rescales by key group. Encoding every entry again at every checkpoint, though, costs the writer
// time in proportion to the whole state, while between two checkpoints a stream usually changes a small
// part of it (q5's windows of auctions whose bids have stopped stay as they were until they fire). So
// the writer keeps, per state and key, the bytes it wrote for the key's entries last time (a segment),
// and copies them instead of encoding again when the key's state has not changed since: what the
// snapshot holds stays exactly what a fresh encoding would write (the format is canonical), only
// unchanged keys cost a copy instead of an encoding.
//
// Whether a key's state changed is told by epochs, which the tables keep anyway for copy on write: a
// map, list map or list table records per slot the epoch in which it last changed (or emptied) the slot's
// map or list (it makes a fresh one on the first change of an epoch, so a captured one is never changed
// again), and the timers table records the epoch of each slot's last added or removed timer. A segment
// records the epoch of the capture it was encoded from and the slot's generation (so a freed or reused
// slot never matches). A capture of epoch F reuses the segment of epoch E if E <= F, the slot's
// generation is the same and the slot's state last changed in an epoch <= E: nothing changed in epochs
// E+1..F, so the entries of capture F are those of capture E.
//
// The segments are kept in the order the last write wrote them, the snapshot's canonical key order, and
// the next write walks them with a cursor as it walks its keys in the same order: no lookup by slot, and
// the segments (and mostly their bytes) are read in sequence. A segment under the cursor whose slot does
// not hold the key any more is dropped; one whose key is still live belongs to a key further on, so the
// key being written has none. Each full write builds the next list from the segments it reused and those
// it encoded, and takes it only if it completes, so a write that fails halfway leaves the last list as it
// was; captures written out of order find their segments too new (E > F) and encode.
//
// A delta (incremental.go) needs no segments: it writes only the keys changed since its base, which the
// same epochs tell without a lookup, so it leaves the list as the last full write left it (still right
// for the next full write: each segment tells by its epoch and generation whether it holds). What a
// delta needs instead is, per slot, the size of the key's entries in the base (sizes): a key that held
// entries there and holds none now gets a deletion, and the sizes are what the delta supersedes. Every
// complete write, full or delta, leaves the sizes of its own capture.
//
// TTL states are not cached (the writer drops expired entries, which depends on the time of the
// snapshot), nor are value states (a value is one entry, encoded about as fast as it is copied) nor the
// restored entries of unregistered states. The cost is memory: a cached state's segments are about as
// large as its part of the snapshot, kept from one write to the next (garbage, the segments no longer
// used, is compacted away when it reaches a quarter of the bytes).

// cachedCapture is a capture whose slots can be told unchanged since an epoch.
type cachedCapture interface {
	heapCapture
	// changedEpochs returns, per slot, the epoch in which the slot's entries last changed, as of the
	// capture (slots past its end never changed: epochAt).
	changedEpochs() []uint32
	// segments returns the table's segment cache (shared by all its captures; writers use it one at a
	// time, under the backend's keyOrder lock).
	segments() *segCache
}

// changedOnly is a cached capture that can prepare less for a delta: after onlyChanged, the writer asks
// it only for the entries of the slots its segment cache marked dirty (markChanged).
type changedOnly interface {
	onlyChanged()
}

// segCache holds the segments of one state: the snapshot bytes of each key's entries.
type segCache struct {
	// state is the index of the state in the snapshots the segments were written for: an entry holds
	// it, so segments of another index are of no use.
	state int
	list  []segment // the segments of the last complete write that encoded or copied every key
	next  []segment // the current write's
	cur   int       // the cursor in list
	// chunks hold the segments' bytes. They are filled in turn and never grow, so that storing a segment
	// never copies the others; the last one is being filled.
	chunks [][]byte
	size   int // bytes in chunks
	// reused counts the segments copied into snapshots (tests check that the cache is used).
	reused int
	// sizes holds, per slot, the bytes of the slot's entries in the write of epoch sizesAt, the last
	// complete one (0 while a write is under way, or before the first): 0 for a slot that held nothing
	// in the state then (or was free). A delta needs them to tell which keys held entries in its base
	// (a deletion is written for those that hold none now) and how many bytes it supersedes.
	sizes   []int32
	sizesAt uint32
	// dirty marks, in a delta, the slots whose entries changed since its base (markChanged).
	dirty []uint64
}

// segChunkBytes is the size of a segment chunk (a larger segment gets a chunk of its own), and
// segCompactBytes the garbage below which chunks are not compacted. Variables for tests, which make both
// small so that their few keys fill several chunks and compact.
var segChunkBytes, segCompactBytes = 1 << 20, 1 << 20

// segment is the encoding of one key's entries.
type segment struct {
	slot  int32
	gen   uint32 // the slot's generation
	epoch uint32 // of the capture the segment was encoded from
	count int32  // entries
	chunk int32  // index in chunks
	at    int32  // offset in the chunk
	n     int32  // bytes
}

func (s *segment) bytes(chunks [][]byte) []byte { return chunks[s.chunk][s.at : s.at+s.n] }

// begin prepares the cache for a write of the state at index state, of a capture of n slots, by a writer
// whose last complete write (the base of a delta) was of epoch since (0 for none). It reports whether
// sizes are those of that write, which a delta of the state needs.
func (c *segCache) begin(state, n int, since uint32) bool {
	ok := since != 0 && c.state == state && c.sizesAt == since
	if c.state != state {
		c.list, c.chunks, c.size = c.list[:0], nil, 0
		c.state = state
	}
	if len(c.sizes) < n {
		c.sizes = append(c.sizes, make([]int32, n-len(c.sizes))...)
	}
	c.next, c.cur, c.sizesAt = c.next[:0], 0, 0
	return ok
}

// markChanged sets dirty to the slots of [0, n) whose entries changed after epoch since (changed as
// changedEpochs returns it). One pass in slot order reads the epochs in sequence; the delta's walk in key
// order then tests a bit, in a bitmap small enough to stay in cache where the epochs would not.
func (c *segCache) markChanged(changed []uint32, since uint32, n int) {
	words := (n + 63) / 64
	c.dirty = slices.Grow(c.dirty[:0], words)[:words]
	clear(c.dirty)
	for s, e := range changed[:min(n, len(changed))] {
		if e > since {
			c.dirty[s>>6] |= 1 << (s & 63)
		}
	}
}

// isDirty reports whether markChanged marked slot.
func (c *segCache) isDirty(slot int) bool { return c.dirty[slot>>6]&(1<<(slot&63)) != 0 }

// lookup returns the segment of the key in slot (generation gen) of a capture of epoch whose slots have
// generations gens, if it holds the key's entries: changed tells when they last changed (changedEpochs).
// Keys must come in the canonical order.
func (c *segCache) lookup(slot int32, gen uint32, gens []uint32, epoch uint32, changed []uint32) ([]byte, int, bool) {
	for c.cur < len(c.list) {
		s := &c.list[c.cur]
		if s.slot == slot && s.gen == gen {
			c.cur++
			if s.epoch > epoch || epochAt(changed, int(slot)) > s.epoch {
				return nil, 0, false // changed since
			}
			c.next = append(c.next, *s)
			c.reused++
			return s.bytes(c.chunks), int(s.count), true
		}
		if int(s.slot) < len(gens) && gens[s.slot] == s.gen {
			return nil, 0, false // a live key further on: this one has no segment
		}
		c.cur++ // the key is gone
	}
	return nil, 0, false
}

// store records b, the count entries of the key in slot (generation gen) of a capture of epoch.
func (c *segCache) store(slot int32, gen, epoch uint32, b []byte, count int) {
	if count == 0 {
		return
	}
	chunk, at := c.place(b)
	c.next = append(c.next, segment{slot: slot, gen: gen, epoch: epoch, count: int32(count), chunk: chunk, at: at, n: int32(len(b))})
}

// place copies b into the chunks and returns where.
func (c *segCache) place(b []byte) (int32, int32) {
	last := len(c.chunks) - 1
	if last < 0 || len(c.chunks[last])+len(b) > cap(c.chunks[last]) {
		c.chunks = append(c.chunks, make([]byte, 0, max(segChunkBytes, len(b))))
		last++
	}
	at := len(c.chunks[last])
	c.chunks[last] = append(c.chunks[last], b...)
	c.size += len(b)
	return int32(last), int32(at)
}

// finish records that the write of a capture of epoch completed. If the write looked up every key
// (segmented), its segments become the list, and the chunks are compacted when a quarter of their bytes
// is garbage (segments of keys that changed or went); a delta of the state leaves the list as it was,
// which later lookups still find right (a segment tells by its epoch and generation whether it holds).
func (c *segCache) finish(epoch uint32, segmented bool) {
	c.sizesAt = epoch
	if !segmented {
		return
	}
	c.list, c.next = c.next, c.list[:0]
	live := 0
	for i := range c.list {
		live += int(c.list[i].n)
	}
	if garbage := c.size - live; 4*garbage < c.size || garbage < segCompactBytes {
		return
	}
	old := c.chunks
	c.chunks, c.size = nil, 0
	for i := range c.list {
		s := &c.list[i]
		s.chunk, s.at = c.place(s.bytes(old))
	}
}

// epochAt returns epochs[slot], 0 past its end (a slot the table never changed).
func epochAt(epochs []uint32, slot int) uint32 {
	if slot < len(epochs) {
		return epochs[slot]
	}
	return 0
}

package state

import "encoding/binary"

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
// key being written has none. Each write builds the next list from the segments it reused and those it
// encoded, and takes it only if it completes, so a write that fails halfway leaves the last list as it
// was; captures written out of order find their segments too new (E > F) and encode.
//
// TTL states are not cached (the writer drops expired entries, which depends on the time of the
// snapshot), nor are value states (a value is one entry, encoded about as fast as it is copied) nor the
// restored entries of unregistered states. The cost is memory: a cached state's segments are about as
// large as its part of the snapshot, kept from one write to the next (garbage, the segments no longer
// used, is compacted away when it reaches a quarter of the bytes).

// cachedCapture is a capture whose slots can be told unchanged since an epoch.
type cachedCapture interface {
	heapCapture
	// changedAt returns the epoch in which slot's entries last changed, as of the capture.
	changedAt(slot int) uint32
	// segments returns the table's segment cache (shared by all its captures; writers use it one at a
	// time, under the backend's keyOrder lock).
	segments() *segCache
}

// segCache holds the segments of one state: the snapshot bytes of each key's entries.
type segCache struct {
	// state is the index of the state in the snapshots the segments were written for: an entry holds
	// it, so segments of another index are of no use.
	state int
	list  []segment // the last complete write's segments, in its order
	next  []segment // the current write's
	cur   int       // the cursor in list
	// chunks hold the segments' bytes. They are filled in turn and never grow, so that storing a segment
	// never copies the others; the last one is being filled.
	chunks [][]byte
	size   int // bytes in chunks
	// reused counts the segments copied into snapshots (tests check that the cache is used).
	reused int
	// valid says that list is the complete write of the state at index state that finished last.
	valid bool
	// deleting and gone: while a delta snapshot is written, the segments of keys that went.
	deleting bool
	gone     []segment
	// stale counts the bytes of segments of keys that changed, in this write.
	stale int64
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

// begin prepares the cache for a write of the state at index state. It reports whether the cache holds
// the segments of the previous write of the state at that index, complete: only then can a delta
// snapshot be made of it (a key without a reused segment then changed, a segment not reused is of a key
// that changed or went). deleting makes lookup collect the segments of keys that went (gone).
func (c *segCache) begin(state int, deleting bool) bool {
	ok := c.state == state && c.valid
	if c.state != state {
		c.list, c.chunks, c.size = c.list[:0], nil, 0
		c.state = state
	}
	c.next, c.cur, c.valid = c.next[:0], 0, false
	c.deleting, c.gone, c.stale = deleting, c.gone[:0], 0
	return ok
}

// What lookup found for a key.
const (
	segNone   = iota // no segment: the key had no entries in the previous write
	segReused        // the segment holds the key's entries
	segStale         // the key had entries in the previous write, which changed since
)

// lookup returns the segment of the key in slot (generation gen) of a capture of epoch whose slots have
// generations gens, if it holds the key's entries: cc tells when they last changed. Keys must come in
// the canonical order.
func (c *segCache) lookup(slot int32, gen uint32, gens []uint32, epoch uint32, cc cachedCapture) ([]byte, int, int) {
	for c.cur < len(c.list) {
		s := &c.list[c.cur]
		if s.slot == slot && s.gen == gen {
			c.cur++
			if s.epoch > epoch || cc.changedAt(int(slot)) > s.epoch {
				c.stale += int64(s.n)
				return nil, 0, segStale
			}
			c.next = append(c.next, *s)
			c.reused++
			return s.bytes(c.chunks), int(s.count), segReused
		}
		if int(s.slot) < len(gens) && gens[s.slot] == s.gen {
			return nil, 0, segNone // a live key further on: this one has no segment
		}
		if c.deleting {
			c.gone = append(c.gone, *s)
		}
		c.cur++ // the key is gone
	}
	return nil, 0, segNone
}

// rest collects the segments after the cursor, once every key was looked up: their keys are gone.
func (c *segCache) rest() {
	if c.deleting {
		c.gone = append(c.gone, c.list[c.cur:]...)
	}
	c.cur = len(c.list)
}

// goneKey returns the key group and key of a gone segment, from its first entry.
func (c *segCache) goneKey(s *segment) (int, []byte) {
	b := s.bytes(c.chunks)
	kg := int(b[1])<<8 | int(b[2])
	b = b[3:]
	_, n := binary.Uvarint(b) // the state index
	b = b[n:]
	l, n := binary.Uvarint(b)
	return kg, b[n : n+int(l)]
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

// finish takes the segments of a completed write as the list, and compacts the chunks when a quarter
// of their bytes is garbage (segments of keys that changed or went).
func (c *segCache) finish() {
	c.list, c.next, c.valid = c.next, c.list[:0], true
	c.gone = c.gone[:0]
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

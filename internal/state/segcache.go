package state

// Incremental snapshot encoding of the heap backend.
//
// A heap snapshot is a full snapshot: every entry of every key, so that a checkpoint restores on its own
// and rescales by key group. Encoding every entry again at every checkpoint, though, costs the writer
// time in proportion to the whole state, while between two checkpoints a stream usually changes a small
// part of it (q5's windows of auctions whose bids have stopped stay as they were until they fire). So
// the writer keeps, per state and slot, the bytes it wrote for that key's entries last time (a segment),
// and copies them instead of encoding again when the key's state has not changed since: what the
// snapshot holds stays exactly what a fresh encoding would write (the format is canonical), only
// unchanged keys cost a copy instead of an encoding.
//
// Whether a key's state changed is told by epochs, which the tables keep anyway for copy on write: a
// map, list map or list table records per slot the epoch in which it last changed the slot's map or list
// (it makes a fresh one on the first change of an epoch, so a captured one is never changed again), and
// the timers table records the epoch of each slot's last added or removed timer. A segment records the
// epoch of the capture it was encoded from and the slot's generation (so a freed or reused slot never
// matches). A capture of epoch F reuses the segment of epoch E if E <= F, the slot's generation is the
// same and the slot's state last changed in an epoch <= E: nothing changed in epochs E+1..F, so the
// entries of capture F are those of capture E. Each segment carries its own epoch, so that a write that
// fails halfway, or captures written out of order, leave only segments that are true of their epoch.
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

// segCache holds the segments of one state: per slot, the snapshot bytes of the slot's entries.
type segCache struct {
	// state is the index of the state in the snapshots the segments were written for: an entry holds
	// it, so segments of another index are of no use.
	state int
	segs  []segment // by slot
	// chunks hold the segments' bytes. They are filled in turn and never grow, so that storing a segment
	// never copies the others; the last one is being filled.
	chunks [][]byte
	size   int    // bytes in chunks
	live   int    // bytes of the segments in segs
	write  uint64 // counts writes, for used
	// reused counts the segments copied into snapshots (tests check that the cache is used).
	reused int
}

// segChunkBytes is the size of a segment chunk (a larger segment gets a chunk of its own), and
// segCompactBytes the garbage below which chunks are not compacted. Variables for tests, which make both
// small so that their few keys fill several chunks and compact.
var segChunkBytes, segCompactBytes = 1 << 20, 1 << 20

// segment is the encoding of one slot's entries.
type segment struct {
	chunk int32  // index in chunks
	at    int32  // offset in the chunk
	n     int32  // bytes
	count int32  // entries
	gen   uint32 // the slot's generation; 0 for no segment
	epoch uint32 // of the capture the segment was encoded from
	used  uint64 // the last write that wrote it
}

func (s *segment) bytes(chunks [][]byte) []byte { return chunks[s.chunk][s.at : s.at+s.n] }

// begin prepares the cache for a write of the state at index state.
func (c *segCache) begin(state int) {
	if c.state != state {
		clear(c.segs)
		c.chunks, c.size, c.live = nil, 0, 0
		c.state = state
	}
	c.write++
}

// lookup returns slot's segment if it holds the slot's entries in a capture of epoch with the slot's
// generation gen and last change changed.
func (c *segCache) lookup(slot int, gen, epoch, changed uint32) ([]byte, int, bool) {
	if slot >= len(c.segs) {
		return nil, 0, false
	}
	s := &c.segs[slot]
	if s.gen != gen || s.epoch > epoch || changed > s.epoch {
		return nil, 0, false
	}
	s.used = c.write
	c.reused++
	return s.bytes(c.chunks), int(s.count), true
}

// store records b, the count entries of slot in a capture of epoch, with the slot's generation gen.
func (c *segCache) store(slot int, gen, epoch uint32, b []byte, count int) {
	if slot >= len(c.segs) {
		c.segs = append(c.segs, make([]segment, slot+1-len(c.segs))...)
	}
	s := &c.segs[slot]
	if s.gen != 0 {
		c.live -= int(s.n)
	}
	if count == 0 {
		*s = segment{}
		return
	}
	chunk, at := c.place(b)
	*s = segment{chunk: chunk, at: at, n: int32(len(b)), count: int32(count), gen: gen, epoch: epoch, used: c.write}
	c.live += len(b)
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

// finish drops the segments the write did not use (keys gone, or without state) and compacts the chunks
// when a quarter of their bytes is garbage.
func (c *segCache) finish() {
	for i := range c.segs {
		if s := &c.segs[i]; s.gen != 0 && s.used != c.write {
			c.live -= int(s.n)
			*s = segment{}
		}
	}
	if garbage := c.size - c.live; 4*garbage < c.size || garbage < segCompactBytes {
		return
	}
	old := c.chunks
	c.chunks, c.size = nil, 0
	for i := range c.segs {
		if s := &c.segs[i]; s.gen != 0 {
			s.chunk, s.at = c.place(s.bytes(old))
		}
	}
}

// epochAt returns epochs[slot], 0 past its end (a slot the table never changed).
func epochAt(epochs []uint32, slot int) uint32 {
	if slot < len(epochs) {
		return epochs[slot]
	}
	return 0
}

package state

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Incremental snapshot encoding of the heap backend.
//
// A heap snapshot is a full snapshot: every entry of every key, so that a checkpoint restores on its own
// and rescales by key group. Encoding every entry again at every checkpoint, though, costs the writer
// time in proportion to the whole state, while between two checkpoints a stream usually changes a small
// part of it (q5's windows of auctions whose bids have stopped stay as they were until they fire). So
// the writer keeps, per state, the bytes its last full write wrote of the state (data: every key's
// entries, one key after the other in the snapshot's canonical key order) and a list of those keys in the
// same order with the size of each one's bytes, and copies a key's bytes instead of encoding them again
// when its state has not changed since: what the snapshot holds stays exactly what a fresh encoding would
// write (the format is canonical), only unchanged keys cost a copy instead of an encoding.
//
// Whether a key's state changed is told by epochs, which the tables keep anyway for copy on write: a
// map, list map or list table records per slot the epoch in which it last changed (or emptied) the slot's
// map or list (it makes a fresh one on the first change of an epoch, so a captured one is never changed
// again), and the timers table records the epoch of each slot's last added or removed timer. The data
// records the epoch of the capture it was written from (dataAt); a capture of epoch F reuses a key's
// bytes of epoch E if E <= F, the key is the one the list has (same slot and generation, so a freed or
// reused slot never matches) and the key's state last changed in an epoch <= E: nothing changed in epochs
// E+1..F, so the entries of capture F are those of capture E.
//
// Before a full write walks its keys, one pass in slot order marks in a bitmap (dirty) the slots changed
// since dataAt. The walk, in key order, moves a cursor through the list in step (the list is in the same
// order: a key under the cursor that no longer lives is passed over, one that lives comes further on, so
// the key being written is new), tests a bit per key, and copies the bytes of consecutive unchanged keys,
// which lie one after the other in the data, as one run: the list and the data are read in sequence, and
// there is a copy per run, not per key (reuseRun takes a run's keys in one loop, not a call per key).
// Dirty keys that hold nothing now (once every window fired, every key) are told in slot order too, from
// their states' per-slot tables (markNone), and written without reading anything of theirs. The keys it
// encodes (a delta's too), when at most half the keys are, are not encoded in the walk: met in key order,
// their slots come at random, and each one's map or list, an object of its own, is a cache miss or
// several. encodeDirty encodes them in slot order first, as whole entries (with the key and its key
// group, encoded from the capture's keys, also in slot order), which reads those objects about in the
// order they were made and lie in memory, then copies them into key order in a loop that does nothing
// else, so that the processor overlaps its random reads; the walk copies them in sequence (reading them
// from the slot-order buffer in the walk would be a random read per key again). The
// write builds the next data and list from the runs it
// copied and the keys it encoded, and takes them only if it completes, so a write that fails halfway
// leaves the last ones as they were; captures written out of order find the data too new (E > F) and
// encode.
//
// A delta (incremental.go) needs no bytes of the base: it writes only the keys changed since its base,
// which the same epochs tell, so it leaves the data as the last full write left it (still right for the
// next full write, which checks each key's epoch against the data's). What a delta needs instead is, per
// slot, the size of the key's entries in the base (sizes): a key that held entries there and holds none
// now gets a deletion, and the sizes are what the delta supersedes. Every complete write, full or delta,
// leaves the sizes of its own capture: a writer asked for a delta (even one that writes a full snapshot,
// having nothing to build on) writes them per slot as it goes; a full writer not asked for one leaves them
// in its list (each key's size), and the first delta after it sets them per slot from the list. A job
// without incremental checkpoints never needs them, and writing them costs a store per key, at random.
//
// A write into a checkpoint blob (checkpoint.Blob, which lends the writer its memory: snapWriter.lend)
// appends its bytes to the blob's memory in place and keeps them there as its data, where a write into
// any other writer copies each key's bytes into next as well: the bytes of an unchanged key are then
// copied once a write, from the last blob into the next, not twice. The data is then a state's sections
// of the blob, one per key group (other states' sections lie between), and the cursor jumps from one to
// the next (secs). The blob's memory is held (Blob.Hold) until the next full write of the state
// completes: the task's blob pool reuses a blob's memory only once nothing holds it, so the next blob is
// in other memory, and the one after in this one's.
//
// TTL states are not cached (the writer drops expired entries, which depends on the time of the
// snapshot), nor are value states (a value is one entry, encoded about as fast as it is copied) nor the
// restored entries of unregistered states. The cost is memory: a cached state's data is as large as its
// part of the snapshot, twice over while a write builds the next (the spare is kept for the next write
// unless it is far larger than the data, as after most keys went), and 16 bytes a key for the list, twice;
// and, while a write encodes them, the dirty keys' entries twice (in slot order and in key order), kept
// for the next write unless their memory is larger than the data.

// cachedCapture is a capture whose slots can be told unchanged since an epoch.
type cachedCapture interface {
	heapCapture
	// changedEpochs returns, per slot, the epoch in which the slot's entries last changed, as of the
	// capture (slots past its end never changed).
	changedEpochs() []uint32
	// segments returns the table's segment cache (shared by all its captures; writers use it one at a
	// time, under the backend's keyOrder lock).
	segments() *segCache
}

// changedOnly is a cached capture that can prepare less for a write that mostly copies or leaves out
// unchanged keys: after onlyChanged, the writer asks it only for the entries of the slots its segment
// cache marked dirty (markChanged). A slot left clean holds what it held at the epoch marked from: a new
// key in it has entries only if it changed the slot since.
type changedOnly interface {
	onlyChanged()
}

// emptiable is a cached capture that can tell a slot that holds no entries from its own per-slot table
// (a nil map, an empty list, no timers), without reading the slot's objects. markNone asks it for each
// dirty slot, in slot order, so that the walk in key order, which would read each one at random, need
// not: once every window fired, every key is dirty and holds nothing.
type emptiable interface {
	// holdsNothing reports whether slot surely holds no entries in the capture (false if it may).
	holdsNothing(slot int) bool
}

// segCache holds the bytes of one state's entries in the last full write, key by key.
type segCache struct {
	// state is the index of the state in the snapshots the data was written for: an entry holds it, so
	// data of another index is of no use.
	state int
	// data holds the entries of every key of the state as the last complete full write wrote them, of the
	// capture of epoch dataAt (0: no data); list has an element per key of that write, in its order (the
	// canonical key order), each key's bytes following the previous key's in data.
	data   []byte
	list   []segKey
	dataAt uint32
	// next and nextList are what the current full write builds; caching is false while no full write is
	// under way or after it met a key larger than a segKey counts (its data is then not taken).
	next     []byte
	nextList []segKey
	caching  bool
	// grewBytes and grewKeys are how much the data and the list grew in the last full write that took
	// them (0 if they shrank), for the next to make room.
	grewBytes, grewKeys int
	// cur is the walk's cursor in list, at is where its key's bytes start in data.
	cur, at int
	// run is the pending copy: data[runFrom:runTo], runCount entries.
	runFrom, runTo, runCount int
	// reused counts the keys whose bytes were copied into snapshots (tests check that the cache is used).
	reused int
	// sizes holds, per slot, the bytes of the slot's entries in the write of epoch sizesAt, the last
	// complete one (0 while a write is under way, or before the first): 0 for a slot that held nothing
	// in the state then (or was free). A delta needs them to tell which keys held entries in its base
	// (a deletion is written for those that hold none now) and how many bytes it supersedes.
	sizes   []int32
	sizesAt uint32
	// sizesInList says that sizes are those the list holds (each key's n), not yet written per slot: a
	// write that was not asked for a delta leaves them there, since a job without incremental
	// checkpoints never reads them, and writing them costs a store per key at random (by slot) in every
	// write; the first delta after such a write sets them from the list (begin).
	sizesInList bool
	// dirty marks the slots whose entries changed after an epoch (markChanged); none those of them that
	// hold nothing now (markNone).
	dirty, none []uint64
	// pre holds the entries of the dirty slots, encoded in slot order by encodeDirty as the snapshot's
	// entries; preEnds[r] is where those of the r-th dirty slot (none left out) end (preEnds[-1] being 0),
	// preCounts[r] how many they are, and ranks[w] counts the dirty slots before word w of dirty.
	pre       []byte
	preEnds   []int
	preCounts []int32
	ranks     []int32
	// inOrder holds the same entries in key order as the snapshot's entries, the i-th dirty key's ending
	// at inOrderEnds[i], inOrderCounts[i] of them, its slot inOrderSlots[i]; nextDirty is the next the
	// walk asks for.
	inOrder       []byte
	inOrderEnds   []int
	inOrderSlots  []int32
	inOrderCounts []int32
	nextDirty     int
	// encoded tells whether encodeDirty encoded this write's dirty keys.
	encoded bool
	// went, unless nil, marks by slot the keys of list that went since its write (keyOrder.went): its
	// keys that are not marked are live.
	went []uint64
	// size is how many bytes of data are the state's.
	size int
	// held, when set, releases the memory of the checkpoint blob that data is the bytes of: a full write
	// into a blob that lends its memory (checkpoint.Blob) keeps the bytes it wrote there as its data,
	// where it copied them into next as well. Each key group's keys of the state then lie apart from the
	// next group's (the other states' come between), secs telling where: a section per key group, the
	// index in list of its first key and where its bytes start; no secs, data is contiguous. sec is the
	// section the cursor comes to next.
	held func()
	secs []segSec
	sec  int
	// intoBlob says that the current full write's next data is the bytes it writes into a lent blob
	// (nextSecs), not next; nextBytes counts the bytes of its keys.
	intoBlob  bool
	nextSecs  []segSec
	nextBytes int
}

// segSec is where a key group's keys of a state start in data held in a blob: the index of the first in
// the list, and where its bytes are.
type segSec struct {
	from int
	at   int
}

// segKey is one key of a full write: its slot and the slot's generation, and the bytes and entries
// of the key in the state.
type segKey struct {
	slot     int32
	gen      uint32
	n, count uint32
}

// segSpareBytes is how much larger than the data the spare buffer may stay for the next write before it
// is let go (a variable for tests).
var segSpareBytes = 1 << 20

// begin prepares the cache for a write of the state at index state, of a capture of n slots, by a writer
// whose last complete write (the base of a delta) was of epoch since (0 for none), asked for a delta or
// not (a writer asked for one keeps the sizes of its write, which the next delta needs). It reports
// whether sizes are those of the write of epoch since.
func (c *segCache) begin(state, n int, since uint32, delta bool) bool {
	ok := since != 0 && c.state == state && c.sizesAt == since
	if c.state != state {
		c.dropData()
		c.state = state
	}
	if delta {
		if len(c.sizes) < n {
			c.sizes = append(c.sizes, make([]int32, n-len(c.sizes))...)
		}
		if c.sizesInList {
			clear(c.sizes)
			for _, e := range c.list {
				if int(e.slot) >= len(c.sizes) {
					// The list's write was of a capture with more slots (this one is older).
					c.sizes = append(c.sizes, make([]int32, int(e.slot)+1-len(c.sizes))...)
				}
				c.sizes[e.slot] = int32(e.n)
			}
			c.sizesInList = false
		}
	}
	c.sizesAt, c.caching, c.encoded = 0, false, false
	return ok
}

// beginFull starts a full write of the state, of a capture of epoch (changed as changedEpochs returns
// it), after begin. It reports whether the write can reuse bytes of the data; dirty then marks the
// slots changed since the data's capture, whose bytes it cannot.
func (c *segCache) beginFull(epoch uint32, n int, changed []uint32, intoBlob bool) bool {
	c.next, c.nextList, c.caching = c.next[:0], c.nextList[:0], true
	c.intoBlob, c.nextSecs, c.nextBytes = intoBlob, c.nextSecs[:0], 0
	// About what this write will take: as much as the last, plus a quarter or twice as much as the state
	// grew from the write before (q5's state grows by a third a checkpoint), room made once; keep and
	// store double it if it is short all the same.
	if want := c.size + max(c.size/4, 2*c.grewBytes); !intoBlob && cap(c.next) < want {
		c.next = make([]byte, 0, want)
	}
	if want := len(c.list) + max(len(c.list)/4, 2*c.grewKeys); cap(c.nextList) < want {
		c.nextList = make([]segKey, 0, want)
	}
	c.cur, c.at, c.sec = 0, 0, 0
	for c.sec < len(c.secs) && c.secs[c.sec].from == 0 {
		c.at = c.secs[c.sec].at
		c.sec++
	}
	c.runFrom, c.runTo, c.runCount = 0, 0, 0
	if c.dataAt == 0 || c.dataAt > epoch {
		return false // no data, or data of a newer capture
	}
	c.markChanged(changed, c.dataAt, n)
	return true
}

// dropData lets go of the data (and the blob it is held in).
func (c *segCache) dropData() {
	if c.held != nil {
		c.held()
		c.held, c.next = nil, nil // next may have been the data, held; it is not the cache's to reuse
		c.data = nil
	}
	c.data, c.list, c.secs, c.dataAt, c.size = c.data[:0], c.list[:0], c.secs[:0], 0, 0
}

// section records, in a write into a blob, that the state's entries of a key group start at pos of the
// blob's memory.
func (c *segCache) section(pos int) {
	if c.intoBlob && c.caching {
		c.nextSecs = append(c.nextSecs, segSec{from: len(c.nextList), at: pos})
	}
}

// markChanged sets dirty to the slots of [0, n) whose entries changed after epoch since (changed as
// changedEpochs returns it). One pass in slot order reads the epochs in sequence; the walk in key order
// then tests a bit, in a bitmap small enough to stay in cache where the epochs would not.
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

// markNone sets none to the dirty slots of [0, n) that capt (if emptiable) tells hold nothing.
func (c *segCache) markNone(capt heapCapture, n int) {
	words := (n + 63) / 64
	c.none = slices.Grow(c.none[:0], words)[:words]
	clear(c.none)
	e, ok := capt.(emptiable)
	if !ok {
		return
	}
	for w, word := range c.dirty[:words] {
		for ; word != 0; word &= word - 1 {
			if slot := w<<6 + bits.TrailingZeros64(word); e.holdsNothing(slot) {
				c.none[w] |= 1 << (slot & 63)
			}
		}
	}
}

// isNone reports whether markNone marked slot.
func (c *segCache) isNone(slot int) bool { return c.none[slot>>6]&(1<<(slot&63)) != 0 }

// isDirty reports whether markChanged marked slot.
func (c *segCache) isDirty(slot int) bool { return c.dirty[slot>>6]&(1<<(slot&63)) != 0 }

// reuseRun is called in a full write that can reuse the data, with the rest of one key group's keys in the
// canonical order and the generations of the capture's slots. While the next key is in the data and
// unchanged since, it adds the key's bytes to the pending run (written by flushRun before anything else
// is written; sizes, unless nil, gets their size). It returns how many keys it took so and their bytes;
// the key after them, if any, the caller encodes (and stores). Most keys of a write are unchanged: a
// loop here costs less than a call per key.
func (c *segCache) reuseRun(keys []heapKey, gens []uint32, sizes []int32, sw *snapWriter) (taken int, bytes int64, err error) {
	list, cur, at, secs, sec := c.list, c.cur, c.at, c.secs, c.sec
	next := grown(c.nextList, len(keys))
	for taken < len(keys) && cur < len(list) {
		k, e := &keys[taken], list[cur]
		from := at
		// Past e: the cursor moves on, into the next key group's bytes if e was its group's last.
		passed := e.slot != k.slot || e.gen != k.gen
		if passed && c.lives(gens, e) {
			break // a live key further on: this one is not in the data
		}
		cur++
		at += int(e.n)
		for sec < len(secs) && secs[sec].from == cur {
			at = secs[sec].at
			sec++
		}
		if passed {
			continue // the key went
		}
		if c.isDirty(int(k.slot)) {
			break // changed since
		}
		if from != c.runTo {
			if err = c.flushRun(sw); err != nil {
				break
			}
			c.runFrom, c.runTo = from, from
		}
		c.runTo += int(e.n)
		c.runCount += int(e.count)
		next = append(next, e)
		if sizes != nil {
			sizes[k.slot] = int32(e.n)
		}
		bytes += int64(e.n)
		taken++
	}
	c.cur, c.at, c.sec, c.nextList = cur, at, sec, next
	c.reused += taken
	return taken, bytes, err
}

// lives reports whether the key of e, an element of list, is live in the capture being written, whose
// slots have generations gens: a new key comes before it in the order when the walk's key is not e's.
// In q5 that is every new key, as many as a fifth of the keys, and a read of gens at random each.
func (c *segCache) lives(gens []uint32, e segKey) bool {
	if c.went == nil {
		return holds(gens, e.slot, e.gen)
	}
	w := int(e.slot) >> 6
	return w >= len(c.went) || c.went[w]&(1<<(e.slot&63)) == 0
}

// flushRun writes the pending run to the snapshot and the next data.
func (c *segCache) flushRun(sw *snapWriter) error {
	if c.runTo == c.runFrom {
		return nil
	}
	b := c.data[c.runFrom:c.runTo]
	c.keep(b)
	err := sw.raw(b, c.runCount)
	c.runFrom, c.runTo, c.runCount = 0, 0, 0
	return err
}

// store records b, the count entries just encoded of the key in slot (generation gen).
func (c *segCache) store(slot int32, gen uint32, b []byte, count int) {
	if len(b) > math.MaxUint32 || count > math.MaxUint32 {
		// More than a segKey counts: the next data is given up (the write leaves the data as it was).
		c.caching, c.next, c.nextList = false, nil, nil
	}
	if c.keep(b) {
		c.nextList = append(grown(c.nextList, 1), segKey{slot: slot, gen: gen, n: uint32(len(b)), count: uint32(count)})
	}
}

// keep appends b to the next data and reports whether it is being built. A write into a blob keeps the
// bytes it writes there instead (intoBlob).
func (c *segCache) keep(b []byte) bool {
	if c.caching {
		if !c.intoBlob {
			c.next = append(grown(c.next, len(b)), b...)
		}
		c.nextBytes += len(b)
	}
	return c.caching
}

// grown returns s with room for n more, doubling its capacity when it must grow: a buffer of a state
// that grew much since the last write is copied once, where append would copy it each time it added a
// quarter.
func grown[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	g := make([]T, len(s), max(2*cap(s), len(s)+n))
	copy(g, s)
	return g
}

// finish records that the write of a capture of epoch completed, sized if it kept the sizes of its keys
// (else they are in the data's list, or unknown if it took none). A full write's data becomes the cache's
// (the previous data's memory is kept for the next, unless it is far larger, or held in a blob): the
// bytes it wrote into blob, when it wrote into a blob's lent memory, which hold then keeps (and the blob
// of the previous data, if any, is let go). A delta of the state leaves the data as it was, which later
// full writes still find right (each key's epoch tells whether its bytes hold).
func (c *segCache) finish(epoch uint32, full, sized bool, blob []byte, hold func() func()) {
	switch {
	case sized:
		c.sizesAt, c.sizesInList = epoch, false
	case full && c.caching:
		c.sizesAt, c.sizesInList = epoch, true // in the list this write takes
	default:
		c.sizesAt, c.sizesInList = 0, false // unknown
	}
	// The dirty keys' encoded entries keep their memory for the next write, unless they took more than
	// the whole data (a write that changed every key, with room to spare).
	data := c.size
	if full && c.caching {
		data = c.nextBytes // the data from now on
	}
	if limit := data + segSpareBytes; cap(c.pre) > limit || cap(c.inOrder) > limit {
		c.pre, c.preEnds, c.preCounts, c.inOrder, c.inOrderEnds, c.inOrderSlots, c.inOrderCounts = nil, nil, nil, nil, nil, nil, nil
	}
	if !full || !c.caching || (c.intoBlob && (blob == nil || hold == nil)) {
		c.caching = false
		return
	}
	c.grewBytes, c.grewKeys = max(c.nextBytes-c.size, 0), max(len(c.nextList)-len(c.list), 0)
	if c.intoBlob {
		if c.held != nil {
			c.held()
		} else if cap(c.data) > 0 {
			c.next = c.data[:0] // its own memory, for a write not into a blob
		}
		c.data, c.held = blob, hold()
		c.secs, c.nextSecs = c.nextSecs, c.secs[:0]
	} else {
		old := c.data[:0]
		if c.held != nil {
			c.held()
			c.held, old = nil, nil // the blob's memory is not the cache's to write into
		}
		c.data, c.next = c.next, old
		c.secs = c.secs[:0]
	}
	c.list, c.nextList = c.nextList, c.list[:0]
	c.size = c.nextBytes
	c.dataAt, c.caching = epoch, false
	if cap(c.next) > 2*c.size+segSpareBytes {
		c.next, c.nextList = nil, nil
	}
}

// encodeDirty encodes the entries of c's dirty slots (of a capture of n slots), as entries of the
// state at index state (isMap: its kind has map keys), before a write that encodes only those walks its
// keys (order) in key order. The walk meets the slots at random, and a slot's entries lie in objects of
// their own (a map, a list) made about when the slot was: read in slot order they are read about in the
// order they lie in memory, where in key order nearly every one of them is a cache miss. So the entries
// are encoded in slot order into pre first, as the snapshot's entries, with the key and its key group
// (keyOf encodes a slot's key, from the capture's keys, read in slot order too); then a loop over the key
// order that does nothing else copies each dirty key's into key order into inOrder, one copy a key, so
// that the processor overlaps its reads at random (in the walk, with all its work between two of them, it
// could not); the walk copies each key's from inOrder, in sequence (encodedEntries).
//
// It also sets none to the dirty slots that hold nothing now (as markNone does): when at most half the keys
// are dirty, each slot is asked as its turn comes, just before its entries are read (a pass of its own would read
// each slot's map or list once more, a cache miss a key); else in a pass of its own first. When more than
// half the keys are dirty and hold something, it leaves them to the walk (encoded is false): encoding them
// twice over and copying them twice more then costs more than the misses it saves.
func (c *segCache) encodeDirty(capt heapCapture, n int, order []heapKey, state int, isMap bool, keyOf func(slot int) ([]byte, int, error)) error {
	words := (n + 63) / 64
	count := 0
	for _, word := range c.dirty[:words] {
		count += bits.OnesCount64(word)
	}
	empty, fused := capt.(emptiable)
	if 2*count > len(order) {
		// Most keys changed: those that hold nothing now are told first, in a pass of their own (at the end
		// of a bounded input that is every key, and nothing is left to encode).
		c.markNone(capt, n)
		count = 0
		for w, word := range c.dirty[:words] {
			count += bits.OnesCount64(word &^ c.none[w])
		}
		if c.encoded = 2*count <= len(order); !c.encoded {
			return nil
		}
		fused = false
	} else {
		// At most half changed: each dirty slot is asked whether it holds nothing as it is encoded, which
		// reads its map or list once where a pass of its own read them twice.
		c.encoded = true
		c.none = slices.Grow(c.none[:0], words)[:words]
		clear(c.none)
	}
	c.pre, c.preEnds = c.pre[:0], slices.Grow(c.preEnds[:0], count)
	c.preCounts = slices.Grow(c.preCounts[:0], count)
	c.ranks = slices.Grow(c.ranks[:0], words)[:words]
	rec := &slotEmitter{rec: c, state: state, isMap: isMap, keyOf: keyOf}
	dirty := int32(0)
	for w, word := range c.dirty[:words] {
		c.ranks[w] = dirty
		for word &^= c.none[w]; word != 0; word &= word - 1 {
			rec.slot, rec.keyKnown, rec.count = w<<6+bits.TrailingZeros64(word), false, 0
			if fused && empty.holdsNothing(rec.slot) {
				c.none[w] |= 1 << (rec.slot & 63)
				continue
			}
			if err := capt.entries(rec.slot, rec); err != nil {
				return err
			}
			c.preEnds = append(c.preEnds, len(c.pre))
			c.preCounts = append(c.preCounts, rec.count)
			dirty++
		}
	}
	c.inOrder = grown(c.inOrder[:0], len(c.pre))
	c.inOrderEnds = slices.Grow(c.inOrderEnds[:0], count)
	c.inOrderSlots = slices.Grow(c.inOrderSlots[:0], count)
	c.inOrderCounts = slices.Grow(c.inOrderCounts[:0], count)
	c.nextDirty = 0
	for i := range order {
		slot := int(order[i].slot)
		if slot >= n || !c.isDirty(slot) || c.isNone(slot) {
			continue
		}
		r := int(c.ranks[slot>>6]) + bits.OnesCount64(c.dirty[slot>>6]&^c.none[slot>>6]&(1<<(slot&63)-1))
		from := 0
		if r > 0 {
			from = c.preEnds[r-1]
		}
		c.inOrder = append(c.inOrder, c.pre[from:c.preEnds[r]]...)
		c.inOrderEnds = append(c.inOrderEnds, len(c.inOrder))
		c.inOrderSlots = append(c.inOrderSlots, int32(slot))
		c.inOrderCounts = append(c.inOrderCounts, c.preCounts[r])
	}
	return nil
}

// encodedEntries returns the entries of dirty slot, encoded by encodeDirty for this write (whose walk asks
// for the dirty slots in the order they are in inOrder), and how many they are.
func (c *segCache) encodedEntries(slot int) ([]byte, int, error) {
	i := c.nextDirty
	if i >= len(c.inOrderSlots) || c.inOrderSlots[i] != int32(slot) {
		return nil, 0, fmt.Errorf("snapshot keyed state: slot %d written out of the order its entries were encoded in", slot)
	}
	c.nextDirty++
	from := 0
	if i > 0 {
		from = c.inOrderEnds[i-1]
	}
	return c.inOrder[from:c.inOrderEnds[i]], int(c.inOrderCounts[i]), nil
}

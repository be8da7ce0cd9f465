package state

import "fmt"

// pairIndex maps keys of two 8-byte integer words (structs or arrays of two integers) to slots. It is an
// extendible hash table: a directory, indexed by the top bits of a key's hash, of segments of
// pairSegSize entries, each an open-addressing table with linear probing, indexed by the hash's low bits.
// A segment that fills to pairSegMax splits in two by its next hash bit (the directory doubles when that
// bit is new to it), so the table grows a segment at a time: a flat table doubled whole moves millions
// of entries into fresh memory at once, which cost q18 (millions of new (bidder, auction) keys) a third of
// its insert time, where the Go map it replaces splits its own small tables. A lookup reads the directory
// (small, cached) and one entry of a segment, where a Go map reads its directory, table and group.
// Deletes shift later entries of the probe run back (no tombstones). Segments never merge: the table
// follows the peak of live keys.
type pairIndex struct {
	dir   []*pairSeg
	depth uint // the directory has 1<<depth entries
	n     int
}

const (
	pairSegBits = 9
	pairSegSize = 1 << pairSegBits
	pairSegMask = pairSegSize - 1
	// pairSegMax is the most entries a segment holds before it splits: five eighths, so that probe runs
	// stay short while segments, half full after a split, use their memory.
	pairSegMax = pairSegSize * 5 / 8
	// pairMaxDepth bounds the directory: the hash is 32 bits, the low pairSegBits of which place an entry
	// in its segment. 1<<pairMaxDepth segments hold more keys than a backend's int32 slots.
	pairMaxDepth = 32 - pairSegBits
)

// pairSeg is one segment: pairSegSize entries of 24 bytes, apart from the header, so that the header (read
// for every lookup: its entries and, for an insert, how many) stays in cache over many segments while an
// entry is a miss.
type pairSeg struct {
	e     []pairEntry // pairSegSize
	depth uint        // the hash bits that all its keys share: its directory entries are 1<<(dir depth-depth)
	n     int
}

func newPairSeg(depth uint) *pairSeg {
	return &pairSeg{e: make([]pairEntry, pairSegSize), depth: depth}
}

type pairEntry struct {
	key  [2]uint64
	hash uint32
	slot int32 // slot+1; 0 marks an empty entry
}

// pairStride weighs a key's second word in its hash: large and odd, so that keys whose first words are
// consecutive (an auction id beside a fixed day) form runs (runHash), and no plausible family of keys
// (a grid of small pairs, pairs with a fixed sum or difference) falls on one place.
const pairStride = 0x9e3779b97f4a7c15

// hashPair is a key's 32-bit hash: runHash's low bits, the run's offset lowest.
func hashPair(k [2]uint64) uint32 { return uint32(runHash(k[0] + pairStride*k[1])) }

func newPairIndex() *pairIndex { return &pairIndex{dir: []*pairSeg{newPairSeg(0)}} }

func (x *pairIndex) seg(h uint32) *pairSeg { return x.dir[uint64(h)>>(32-x.depth)] }

func (x *pairIndex) get(k [2]uint64) (int32, bool) {
	h := hashPair(k)
	es := x.seg(h).e[:pairSegSize]
	for i := h & pairSegMask; ; i = (i + 1) & pairSegMask {
		e := &es[i]
		if e.slot == 0 {
			return 0, false
		}
		if e.key == k {
			return e.slot - 1, true
		}
	}
}

// put sets k's slot.
func (x *pairIndex) put(k [2]uint64, slot int32) {
	h := hashPair(k)
	for {
		s := x.seg(h)
		i := h & pairSegMask
		for ; s.e[i].slot != 0; i = (i + 1) & pairSegMask {
			if s.e[i].key == k {
				s.e[i].slot = slot + 1
				return
			}
		}
		if s.n < pairSegMax || (s.depth == pairMaxDepth && s.n < pairSegSize-1) {
			s.e[i] = pairEntry{key: k, hash: h, slot: slot + 1}
			s.n++
			x.n++
			return
		}
		if s.depth == pairMaxDepth {
			panic(&AccessError{Op: "set current key", Err: fmt.Errorf("more than %d keys of one hash prefix", pairSegSize-1)})
		}
		x.split(s)
	}
}

// split replaces s by two segments, told apart by the hash bit after the s.depth it shares.
func (x *pairIndex) split(s *pairSeg) {
	if s.depth == x.depth {
		dir := make([]*pairSeg, 2*len(x.dir))
		for i, d := range x.dir {
			dir[2*i], dir[2*i+1] = d, d
		}
		x.dir, x.depth = dir, x.depth+1
	}
	lo, hi := newPairSeg(s.depth+1), newPairSeg(s.depth+1)
	bit := uint32(1) << (31 - s.depth)
	for i := range s.e {
		e := &s.e[i]
		if e.slot == 0 {
			continue
		}
		to := lo
		if e.hash&bit != 0 {
			to = hi
		}
		j := e.hash & pairSegMask
		for to.e[j].slot != 0 {
			j = (j + 1) & pairSegMask
		}
		to.e[j] = *e
		to.n++
	}
	// s's directory entries are the 1<<(x.depth-s.depth) from its prefix on: the first half goes to lo.
	// s splits only when full, so its first key gives the prefix.
	span := 1 << (x.depth - s.depth)
	first := 0
	for i := range s.e {
		if s.e[i].slot != 0 {
			first = int(uint64(s.e[i].hash)>>(32-x.depth)) &^ (span - 1)
			break
		}
	}
	for i := first; i < first+span/2; i++ {
		x.dir[i] = lo
	}
	for i := first + span/2; i < first+span; i++ {
		x.dir[i] = hi
	}
}

// del removes k, if present, shifting later entries of its probe run back into the hole.
func (x *pairIndex) del(k [2]uint64) {
	h := hashPair(k)
	s := x.seg(h)
	i := h & pairSegMask
	for {
		e := &s.e[i]
		if e.slot == 0 {
			return
		}
		if e.key == k {
			break
		}
		i = (i + 1) & pairSegMask
	}
	s.n--
	x.n--
	for j := (i + 1) & pairSegMask; ; j = (j + 1) & pairSegMask {
		e := s.e[j]
		if e.slot == 0 {
			break
		}
		// e may move into the hole at i only if its home is not in (i, j] (cyclically): otherwise a lookup
		// starting at its home would stop at the hole before reaching it.
		if home := e.hash & pairSegMask; (j-home)&pairSegMask >= (j-i)&pairSegMask {
			s.e[i] = e
			i = j
		}
	}
	s.e[i] = pairEntry{}
}

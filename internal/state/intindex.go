package state

// intIndex maps 8-byte integer keys to slots: open addressing with linear probing, at most half full, so a
// probe ends within a few entries. A freed key is deleted by backward shift (the entries after it that
// would no longer be found move back), so there are no tombstones and lookups never slow down with rolling
// keys. A key and its slot share an entry, so a lookup touches one cache line. It grows by doubling at half
// full and never shrinks: its size follows the peak of live keys. Its home positions keep runs of
// consecutive keys together, as flatHome's do: keyed streams of sequential ids (auctions, persons) mostly
// touch the newest, whose entries then share cache lines.
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
	run := k >> flatRunBits
	run ^= run >> 33
	run *= 0xff51afd7ed558ccd
	run ^= run >> 33
	return (run<<flatRunBits | k&(1<<flatRunBits-1)) & x.mask
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

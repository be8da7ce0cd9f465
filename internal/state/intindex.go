package state

import (
	"reflect"
	"unsafe"
)

// intIndex maps 8-byte integer keys to slots: open addressing with linear probing, at most half full, so a
// probe ends within a few entries. A freed key is deleted by backward shift (the entries after it that
// would no longer be found move back), so there are no tombstones and lookups never slow down with rolling
// keys. A key and its slot share an entry, so a lookup touches one cache line. It grows by doubling at half
// full and never shrinks: its size follows the peak of live keys. Its homes keep runs of consecutive keys
// together (runHash): keyed streams of sequential ids (auctions, persons) mostly touch the newest, whose
// entries then share cache lines.
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

func (x *intIndex) home(k uint64) uint64 { return runHash(k) & x.mask }

// runBits sets the runs of consecutive keys that runHash keeps together: 16.
const runBits = 4

// runHash hashes x so that runs of 1<<runBits consecutive values keep their order in as many consecutive
// homes, at a place hashed from the run; values with a common stride still spread over the table.
func runHash(x uint64) uint64 {
	run := x >> runBits
	run ^= run >> 33
	run *= 0xff51afd7ed558ccd
	run ^= run >> 33
	return run<<runBits | x&(1<<runBits-1)
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

// intWords returns how many 8-byte words a key of type t is when its == is the equality of those words'
// bits: 1 for an integer of 8 bytes or a struct or array holding one, 2 for two of them without padding or
// blank fields, and so on; 0 for anything else (floats, whose == is not bitwise, strings, pointers,
// smaller integers).
func intWords(t reflect.Type) int {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64, reflect.Uintptr:
		if t.Size() == 8 {
			return 1
		}
	case reflect.Struct:
		n := 0
		for i := range t.NumField() {
			f := t.Field(i)
			w := intWords(f.Type)
			if w == 0 || f.Name == "_" {
				return 0
			}
			n += w
		}
		if t.Size() == uintptr(8*n) {
			return n
		}
	case reflect.Array:
		return intWords(t.Elem()) * t.Len()
	}
	return 0
}

// keyIndex is the heap backend's index of live keys: an intIndex for keys of one integer word (intWords:
// named integer types and structs of one integer too), a pairIndex for keys of two, a Go map for every
// other key type. Exactly one of the three is set.
type keyIndex[K comparable] struct {
	ints  *intIndex
	pairs *pairIndex
	slots map[K]int32
}

func newKeyIndex[K comparable]() keyIndex[K] {
	switch intWords(reflect.TypeFor[K]()) {
	case 1:
		return keyIndex[K]{ints: newIntIndex()}
	case 2:
		return keyIndex[K]{pairs: newPairIndex()}
	}
	return keyIndex[K]{slots: make(map[K]int32)}
}

// lookup returns k's slot, and false when k has none.
func (x *keyIndex[K]) lookup(k K) (int32, bool) {
	switch {
	case x.ints != nil:
		return x.ints.get(*(*uint64)(unsafe.Pointer(&k)))
	case x.pairs != nil:
		return x.pairs.get(*(*[2]uint64)(unsafe.Pointer(&k)))
	}
	s, ok := x.slots[k]
	return s, ok
}

// index records s as k's slot.
func (x *keyIndex[K]) index(k K, s int32) {
	switch {
	case x.ints != nil:
		x.ints.put(*(*uint64)(unsafe.Pointer(&k)), s)
	case x.pairs != nil:
		x.pairs.put(*(*[2]uint64)(unsafe.Pointer(&k)), s)
	default:
		x.slots[k] = s
	}
}

// unindex removes k's slot.
func (x *keyIndex[K]) unindex(k K) {
	switch {
	case x.ints != nil:
		x.ints.del(*(*uint64)(unsafe.Pointer(&k)))
	case x.pairs != nil:
		x.pairs.del(*(*[2]uint64)(unsafe.Pointer(&k)))
	default:
		delete(x.slots, k)
	}
}

// len returns the number of indexed keys.
func (x *keyIndex[K]) len() int {
	switch {
	case x.ints != nil:
		return x.ints.n
	case x.pairs != nil:
		return x.pairs.n
	}
	return len(x.slots)
}

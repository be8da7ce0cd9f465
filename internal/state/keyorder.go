package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/runnel-dev/runnel/codec"
)

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

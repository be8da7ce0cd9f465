package state

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"unsafe"

	"github.com/runnel-dev/runnel/codec"
)

// heapSnapshot is a capture of a heap backend, what its full and delta writers write (off the task
// goroutine): the header, a frozen view of each state in the header's order, and the keys of the slots.
type heapSnapshot[K comparable] struct {
	header *snapHeader
	caps   []heapCapture
	// keys and gens are the backend's, shared: a slot changed in place after the capture copies both first
	// (ownKeys), and slots added go past their ends.
	keys  []K
	gens  []uint32
	kc    codec.Codec[K]
	maxP  int
	order *keyOrder
	epoch uint32
	// checks is what the backend asks of its writes in builds with the invariants tag (invariants.go).
	checks heapChecks
}

// writeFull writes the capture as a full snapshot.
func (s *heapSnapshot[K]) writeFull(w io.Writer) error {
	_, err := s.write(w, writeOptions{checks: s.checks})
	return err
}

// writeDelta writes the capture as a delta of the last complete write, or as a full snapshot when there is
// none to build on, and returns how many bytes of the snapshots it builds on it supersedes.
func (s *heapSnapshot[K]) writeDelta(w io.Writer) (int64, error) {
	return s.write(w, writeOptions{delta: true, checks: s.checks})
}

// writeOptions are what one write of a capture is asked for.
type writeOptions struct {
	// delta asks for a delta (incremental.go). A write asked for one keeps, per slot, the size of the
	// key's entries in each cached state, which the next delta needs, even when it writes a full snapshot.
	delta  bool
	checks heapChecks
}

// write writes the capture. A full snapshot copies, for each cached state, the entries of the keys that
// did not change since the state's last full write, from that write's bytes and a run of consecutive keys
// at a time (segcache.go), and encodes the others; the bytes it writes of the state are the next write's
// to copy from. A delta (see incremental.go) encodes, for each cached state it can build on the base, only
// the keys that changed since the base, and writes every other state whole as a full snapshot does. A
// delta returns how many bytes of the snapshots it builds on it supersedes: the base's entries of the keys
// it replaces or deletes and, for each state it writes whole, the base's bytes of the state if the writer
// knows them (a cached state's sizes), else as many bytes as it writes of it (about what the state took
// before).
func (s *heapSnapshot[K]) write(w io.Writer, o writeOptions) (int64, error) {
	ord := s.order
	ord.mu.Lock()
	defer ord.mu.Unlock()
	prior := ord.orderedAt
	ord.orderedAt = 0
	if err := updateOrder(ord, s.keys, s.gens, s.kc, s.maxP); err != nil {
		// The keys that went are not accounted for in the states' sizes: the next write is a full one.
		ord.written, ord.writtenEpoch = 0, 0
		return 0, err
	}
	ord.orderedAt = s.epoch
	ord.markWent()
	// The arena keeps the bytes of the keys that went until the write has deleted them (stateWriter.gone).
	defer ord.maybeCompact()
	var keyBuf []byte
	keyOf := func(slot int) ([]byte, int, error) {
		var err error
		if keyBuf, err = s.kc.Append(keyBuf[:0], s.keys[slot]); err != nil {
			return nil, 0, fmt.Errorf("snapshot keyed state: encode key %v: %w", s.keys[slot], err)
		}
		return keyBuf, KeyGroup(keyBuf, s.maxP), nil
	}
	wr := &heapWrite{header: s.header, caps: s.caps, gens: s.gens, order: ord.order, arena: ord.arena, epoch: s.epoch,
		sizing: o.delta}
	if err := wr.plan(w, o, ord, prior, keyOf); err != nil {
		return 0, err
	}
	return wr.write(w, ord)
}

// heapWrite is one write of a capture: what it writes of each state (a stateWriter each, which plan
// picks) and what the states' writers share.
type heapWrite struct {
	header *snapHeader // a delta's own copy, which marks the states it holds as changes
	caps   []heapCapture
	gens   []uint32
	order  []heapKey
	arena  []byte
	epoch  uint32
	// sizing says the write keeps the sizes of its keys' entries (it was asked for a delta).
	sizing bool
	states []stateWriter
	sw     *snapWriter
	// out is the emitter of the key group and state being written.
	out slotEmitter
	// superseded counts what a delta supersedes of the snapshots it builds on.
	superseded int64
}

// plan decides how the write writes each state, prepares the states' segment caches for it (encoding
// the changed keys' entries ahead of the walk, segCache.encodeDirty) and makes the snapshot writer.
func (wr *heapWrite) plan(w io.Writer, o writeOptions, ord *keyOrder, prior uint32, keyOf func(slot int) ([]byte, int, error)) error {
	since, n := ord.writtenEpoch, len(wr.gens)
	delta := o.delta && ord.written != 0 && since < wr.epoch // else nothing to build on (or a capture older than the base)
	if delta {
		// The header says which states are written whole (copied, so that the capture's own header stays
		// as it was).
		dh := *wr.header
		dh.base = ord.written
		dh.states = slices.Clone(wr.header.states)
		wr.header = &dh
	}
	// A delta deletes every key that went. Once more keys went than are left, writing each state whole
	// costs less (it encodes or copies only what is left) and replaces the base's entries all the same:
	// at the end of a bounded input, when every window fires, nearly every key goes.
	shrunk := len(ord.gone) > len(wr.order)
	// A write into a checkpoint blob appends to the blob's memory in place (snapWriter.lend) and keeps what
	// it wrote there as the next data of its cached states.
	_, intoBlob := w.(lender)
	wr.states = make([]stateWriter, len(wr.caps))
	for si, c := range wr.caps {
		st := stateWrite{c: c, countWritten: delta}
		cc, ok := c.(cachedCapture)
		if !ok || wr.header.states[si].flags&flagTTL != 0 || o.checks.encodeEveryKey() {
			wr.states[si] = &encodeState{st}
			continue
		}
		sc := cc.segments()
		st.sc = sc
		switch ok := sc.begin(si, n, since, o.delta); {
		case delta && ok && shrunk:
			// The base's bytes of the state are known: the delta supersedes them all.
			st.countWritten = false
			for _, size := range sc.sizes {
				wr.superseded += int64(size)
			}
		case delta && ok:
			wr.header.states[si].delta = true
			sc.markChanged(cc.changedEpochs(), since, n)
			if err := wr.encodeChanged(si, sc, keyOf); err != nil {
				return err
			}
			wr.states[si] = &deltaState{st}
			continue
		}
		if o.delta {
			st.sizes = sc.sizes
		}
		reuse := sc.beginFull(wr.epoch, n, cc.changedEpochs(), intoBlob)
		sc.went = nil
		if !reuse {
			wr.states[si] = &encodeState{st}
			continue
		}
		if prior != 0 && sc.dataAt == prior {
			sc.went = ord.went
		}
		if err := wr.encodeChanged(si, sc, keyOf); err != nil {
			return err
		}
		wr.states[si] = &reuseState{st}
	}
	wr.sw = newSnapWriter(w, wr.header)
	wr.sw.hold = true
	wr.sw.lend()
	for si, st := range wr.states {
		// Data held in a blob is never in the memory written into (the blob's pool reuses a blob's memory
		// only once nothing holds it); should it be, it is not read.
		if r, ok := st.(*reuseState); ok && overlaps(r.sc.data, wr.sw.buf) {
			wr.states[si] = &encodeState{r.stateWrite}
		}
	}
	wr.out = slotEmitter{sw: wr.sw, arena: wr.arena}
	return nil
}

// encodeChanged prepares state si for a write that asks it only for the keys its segment cache marked
// changed: it encodes their entries ahead of the walk.
func (wr *heapWrite) encodeChanged(si int, sc *segCache, keyOf func(slot int) ([]byte, int, error)) error {
	c := wr.caps[si]
	if p, ok := c.(changedOnly); ok {
		p.onlyChanged()
	}
	return sc.encodeDirty(c, len(wr.gens), wr.order, si, c.kind().hasMapKey(), keyOf)
}

// write writes what plan prepared: the deletions of the keys that went, every key group's keys state by
// state, and the trailer; then it hands each cached state the bytes it wrote.
func (wr *heapWrite) write(w io.Writer, ord *keyOrder) (int64, error) {
	sw := wr.sw
	defer sw.giveBack()
	sw.deletes, sw.delKeys = ord.deletes[:0], ord.delKeys[:0]
	defer func() { ord.deletes, ord.delKeys = sw.deletes[:0], sw.delKeys[:0] }()
	if wr.sizing {
		// The keys that went since the last write held nothing in any state by then. (A write not asked for
		// a delta keeps no sizes: its list has them.)
		for si, st := range wr.states {
			wr.out.state = si
			st.gone(wr, ord.gone)
		}
	}
	for lo := 0; lo < len(wr.order); {
		hi := lo + 1
		for hi < len(wr.order) && wr.order[hi].kg == wr.order[lo].kg {
			hi++
		}
		wr.out.kg = int(wr.order[lo].kg)
		for si, st := range wr.states {
			wr.out.state, wr.out.isMap = si, wr.caps[si].kind().hasMapKey()
			if err := st.writeKeys(wr, wr.order[lo:hi]); err != nil {
				return 0, err
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
	for _, st := range wr.states {
		st.done(wr, hold)
	}
	ord.written, ord.writtenEpoch = wr.header.checkpointID, wr.epoch
	return wr.superseded, nil
}

// encode writes k's entries of the capture c, asking c for them.
func (wr *heapWrite) encode(c heapCapture, k *heapKey) error {
	wr.out.hk, wr.out.keyKnown = k, false
	return c.entries(int(k.slot), &wr.out)
}

// changed writes the entries of k, a key whose state may have changed, of a state whose segment cache
// told its changed slots (and those that hold nothing now) and may have encoded their entries.
func (wr *heapWrite) changed(c heapCapture, sc *segCache, k *heapKey) error {
	slot := int(k.slot)
	switch {
	case sc.isNone(slot):
		return nil
	case sc.encoded && sc.isDirty(slot):
		b, entries, err := sc.encodedEntries(slot)
		if err != nil {
			return err
		}
		return wr.sw.encoded(b, entries)
	default:
		return wr.encode(c, k)
	}
}

// stateWriter writes one state's part of a write.
type stateWriter interface {
	// gone is told, before the walk, the keys that went since the last write, in a write that keeps sizes.
	gone(wr *heapWrite, keys []heapKey)
	// writeKeys writes the entries of keys, one key group's in key order.
	writeKeys(wr *heapWrite, keys []heapKey) error
	// done is told that the write completed; hold holds the memory the write was lent (nil if none).
	done(wr *heapWrite, hold func() func())
}

// stateWrite is what the writers of one state share.
type stateWrite struct {
	c  heapCapture
	sc *segCache // nil for a state the segment cache does not cover
	// sizes, unless nil, takes the size of each key's entries as written (the cache's sizes, in a write
	// that keeps them).
	sizes []int32
	// countWritten says the write is a delta that writes the state whole without knowing the base's bytes
	// of it: it supersedes as many bytes as it writes.
	countWritten bool
}

// gone forgets the sizes of the keys that went.
func (s *stateWrite) gone(_ *heapWrite, keys []heapKey) {
	if s.sc == nil {
		return
	}
	sizes := s.sc.sizes
	for _, k := range keys {
		if int(k.slot) < len(sizes) {
			sizes[k.slot] = 0
		}
	}
}

// wrote accounts for the entries of k just written whole, from buf[mark:], after count entries, and
// checks whether the buffer is due to be written out.
func (s *stateWrite) wrote(wr *heapWrite, k *heapKey, mark int, count uint64) error {
	sw := wr.sw
	n := len(sw.buf) - mark
	if s.countWritten {
		wr.superseded += int64(n)
	}
	if s.sc != nil {
		if s.sizes != nil {
			s.sizes[k.slot] = int32(n)
		}
		if sw.err == nil {
			s.sc.store(k.slot, k.gen, sw.buf[mark:], int(sw.count-count))
		}
	}
	return sw.maybeFlush()
}

// done records a complete write of the state whole.
func (s *stateWrite) done(wr *heapWrite, hold func() func()) {
	if s.sc != nil {
		s.sc.finish(wr.epoch, true, wr.sizing, wr.sw.gave, hold)
	}
}

// encodeState writes a state whole, encoding every key: a state the segment cache does not cover, or
// one whose cache has no bytes to reuse (it then keeps what it writes, for the next write to reuse).
type encodeState struct{ stateWrite }

func (s *encodeState) writeKeys(wr *heapWrite, keys []heapKey) error {
	if s.sc != nil {
		s.sc.section(len(wr.sw.buf))
	}
	for i := range keys {
		mark, count := len(wr.sw.buf), wr.sw.count
		if err := wr.encode(s.c, &keys[i]); err != nil {
			return err
		}
		if err := s.wrote(wr, &keys[i], mark, count); err != nil {
			return err
		}
	}
	return nil
}

// reuseState writes a state whole, copying the bytes of the keys unchanged since its segment cache's data
// was written, a run of them at a time, and writing the others' entries.
type reuseState struct{ stateWrite }

func (s *reuseState) writeKeys(wr *heapWrite, keys []heapKey) error {
	sc, sw := s.sc, wr.sw
	sc.section(len(sw.buf))
	for i := 0; i < len(keys); i++ {
		taken, n, err := sc.reuseRun(keys[i:], wr.gens, s.sizes, sw)
		if err != nil {
			return err
		}
		if s.countWritten {
			wr.superseded += n
		}
		if i += taken; i == len(keys) {
			break
		}
		// keys[i] is not in the data as it is now: the run ends before its entries.
		if err := sc.flushRun(sw); err != nil {
			return err
		}
		mark, count := len(sw.buf), sw.count
		if err := wr.changed(s.c, sc, &keys[i]); err != nil {
			return err
		}
		if err := s.wrote(wr, &keys[i], mark, count); err != nil {
			return err
		}
	}
	// The next state's entries come next: the run ends here.
	return sc.flushRun(sw)
}

// deltaState writes, in a delta, the entries of the keys that changed since the base, and a deletion for
// each key that held entries in the base and holds none now.
type deltaState struct{ stateWrite }

// gone deletes the keys that went and held entries in the base.
func (s *deltaState) gone(wr *heapWrite, keys []heapKey) {
	sizes := s.sc.sizes
	for _, k := range keys {
		if int(k.slot) >= len(sizes) || sizes[k.slot] == 0 {
			continue
		}
		wr.superseded += int64(sizes[k.slot])
		sizes[k.slot] = 0
		wr.sw.delete(int(k.kg), wr.out.state, k.key(wr.arena))
	}
}

func (s *deltaState) writeKeys(wr *heapWrite, keys []heapKey) error {
	sc, sw := s.sc, wr.sw
	for i := range keys {
		k := &keys[i]
		slot := int(k.slot)
		if !sc.isDirty(slot) {
			continue // unchanged since the base: the delta leaves it out
		}
		mark, count := len(sw.buf), sw.count
		if err := wr.changed(s.c, sc, k); err != nil {
			return err
		}
		old := sc.sizes[slot]
		wr.superseded += int64(old)
		if sw.count == count && old > 0 {
			sw.delete(wr.out.kg, wr.out.state, k.key(wr.arena)) // it had entries in the base, it has none now
		}
		sc.sizes[slot] = int32(len(sw.buf) - mark)
		if err := sw.maybeFlush(); err != nil {
			return err
		}
	}
	return nil
}

// done records a complete delta of the state: its data stays as it was.
func (s *deltaState) done(wr *heapWrite, hold func() func()) {
	s.sc.finish(wr.epoch, false, wr.sizing, wr.sw.gave, hold)
}

// overlaps reports whether a's and b's memory (to their capacities) overlap.
func overlaps(a, b []byte) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(cap(b)) && b0 < a0+uintptr(cap(a))
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

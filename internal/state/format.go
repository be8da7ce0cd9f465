package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// The snapshot format; the package doc describes it.
const (
	snapMagic = "RNLKEYED"
	// snapVersion is the version written; readers also take snapVersion1 (no per-state flags, kinds
	// value, list and map only).
	snapVersion  = 2
	snapVersion1 = 1
	// snapVersionDelta is the version of a delta snapshot (incremental.go): version 2 plus the id of the
	// checkpoint it builds on, a mode byte per state, and deletions after the entries.
	snapVersionDelta = 3

	// timerKeyBytes is the map key of a timer in a snapshot: its time and namespace, sign-flipped
	// big-endian, so that byte order is numeric order.
	timerKeyBytes = 8 + 16

	tagEnd    = 0
	tagEntry  = 1
	tagDelete = 2 // delta snapshots only: the key holds nothing in the state any more

	// maxStates bounds the states of one backend: pebble stores a state id in two bytes.
	maxStates = 1<<16 - 1
	// maxNameBytes bounds a state name in a snapshot.
	maxNameBytes = 1 << 16
	// maxEntryBytes bounds one key, map key or value in a snapshot. Lengths are read before the bytes, and
	// the bytes are read in chunks, so a corrupt length costs at most the bytes actually present.
	maxEntryBytes = 1 << 30

	// snapBufferBytes is the size of the write and read buffers.
	snapBufferBytes = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapState describes one state in a snapshot header.
type snapState struct {
	name  string
	kind  kind
	flags byte // flagTTL or 0
	// ttl is the time to live in ms of a registered TTL state, for the writer to drop expired entries and
	// the restorer to skip them; 0 for no filtering (a state without TTL, or a TTL state not registered,
	// whose entries are carried as they are). It is not written.
	ttl int64
	// delta marks, in a delta snapshot, a state of which only the keys that changed since the base are
	// written (their entries replace the base's; deleted keys follow the entries); a state without it is
	// written whole and replaces every earlier snapshot's entries of the state.
	delta bool
}

// flagTTL in a state's header flags marks a state with a time to live: each value (value state), element
// (list state) or map value (map state) starts with its write time, 8 bytes big-endian epoch ms.
const flagTTL = 1

// snapHeader is what precedes the entries.
type snapHeader struct {
	checkpointID int64
	groups       keyGroups
	states       []snapState // sorted by name
	// base is, in a delta snapshot (version 3), the checkpoint of the snapshot it builds on; 0 in a full one.
	base int64
	// now is the processing time (epoch ms) at Snapshot, before which TTL states' entries must have been
	// written within their ttl to be kept. It is not written.
	now int64
}

// snapWriter writes one snapshot: the header, then entries in order, then the trailer.
type snapWriter struct {
	h     *snapHeader
	live  []byte // scratch for the live elements of a TTL list
	w     io.Writer
	buf   []byte
	crc   uint32
	count uint64
	err   error
	// hold keeps entry from flushing: the heap writer flushes between keys (maybeFlush), so that the bytes
	// of one key's entries are contiguous in buf for its segment cache.
	hold bool
	// deletes are the deletions of a delta snapshot, written after the entries in order; their keys are
	// in delKeys (one arena, not an allocation per deletion: a delta of q5 at the end of its input
	// deletes every key).
	deletes []deletion
	delKeys []byte
	// lender, when set (lend), lent buf: the memory of the writer itself, which the snapshot's bytes are
	// appended to in place instead of being copied into it from a buffer; they start at from, and done
	// is where the checksum has got to (0 and the buffer's start when not lent).
	lender     lender
	from, done int
	// gave is the lent memory as it was given back, what the snapshot's bytes are positions in.
	gave []byte
}

// lender is a writer that lends its memory to be appended to (checkpoint.Blob): Lend returns it, with
// what was written so far, and the writer must not be used until Return gives it back, longer. Hold keeps
// the memory from being reused for a later writer's bytes until release is called.
type lender interface {
	Lend() []byte
	Return([]byte)
	Hold() (release func())
}

// deletion is a key that holds nothing in a delta state any more.
type deletion struct {
	kg, state int
	at, n     int // uvarint(len) ‖ key, the bytes entries are ordered by, in delKeys
}

func newSnapWriter(w io.Writer, h *snapHeader) *snapWriter {
	s := &snapWriter{h: h, w: w, buf: make([]byte, 0, snapBufferBytes)}
	s.buf = append(s.buf, snapMagic...)
	if h.base > 0 {
		s.buf = binary.BigEndian.AppendUint16(s.buf, snapVersionDelta)
	} else {
		s.buf = binary.BigEndian.AppendUint16(s.buf, snapVersion)
	}
	s.buf = binary.BigEndian.AppendUint64(s.buf, uint64(h.checkpointID))
	if h.base > 0 {
		s.buf = binary.BigEndian.AppendUint64(s.buf, uint64(h.base))
	}
	s.buf = binary.BigEndian.AppendUint32(s.buf, uint32(h.groups.maxP))
	s.buf = binary.BigEndian.AppendUint32(s.buf, uint32(h.groups.start))
	s.buf = binary.BigEndian.AppendUint32(s.buf, uint32(h.groups.end))
	s.buf = binary.AppendUvarint(s.buf, uint64(len(h.states)))
	for _, st := range h.states {
		s.buf = binary.AppendUvarint(s.buf, uint64(len(st.name)))
		s.buf = append(s.buf, st.name...)
		s.buf = append(s.buf, byte(st.kind), st.flags)
		if h.base > 0 {
			mode := byte(0)
			if st.delta {
				mode = 1
			}
			s.buf = append(s.buf, mode)
		}
	}
	s.buf = binary.BigEndian.AppendUint32(s.buf, crc32.Checksum(s.buf, castagnoli))
	return s
}

// lend makes s append to the memory of its writer, if that is a lender, from here on: what a snapshot
// copies from an earlier one (raw) and what it encodes is then copied once, into the writer's memory,
// where it was copied into a buffer and then into the writer. The memory grows by doubling (room). The
// caller must call giveBack when done with s, whether or not the write completed.
func (s *snapWriter) lend() {
	l, ok := s.w.(lender)
	if !ok || s.lender != nil {
		return
	}
	buf := l.Lend()
	s.from, s.done = len(buf), len(buf)
	s.buf, s.lender = append(grown(buf, len(s.buf)), s.buf...), l
}

// giveBack returns lent memory to the writer (see lend), once; it is a no-op when nothing is lent.
func (s *snapWriter) giveBack() {
	if s.lender != nil && s.gave == nil {
		s.lender.Return(s.buf)
		s.gave, s.buf = s.buf, nil
	}
}

// room makes room for n more bytes in lent memory, doubling it (append would grow a large one by a
// quarter, copying it every time); a buffer of s's own grows as append grows it.
func (s *snapWriter) room(n int) {
	if s.lender != nil {
		s.buf = grown(s.buf, n)
	}
}

// pending is how many bytes of buf are not yet checksummed (and, unless lent, not written).
func (s *snapWriter) pending() int { return len(s.buf) - s.done }

// entry appends one entry; mapKey is written only when isMap (the state's kind has map keys). An expired
// entry of a TTL state is left out (and a TTL list's expired elements).
func (s *snapWriter) entry(kg, state int, key []byte, isMap bool, mapKey, value []byte) error {
	if s.err != nil {
		return s.err
	}
	if st := &s.h.states[state]; st.ttl > 0 {
		live, keep, err := liveTTL(st.kind, value, st.ttl, s.h.now, s.live[:0])
		if err != nil {
			return fmt.Errorf("snapshot keyed state %q: %w", st.name, err)
		}
		if !keep {
			return nil
		}
		if len(live) != len(value) {
			s.live = live // the scratch, grown; not value's own bytes
		}
		value = live
	}
	// The bytes appendEntry writes, appended here in place rather than by a call: entry is the writer's
	// step per entry, where a call more is a sizable part of what encoding an entry costs.
	s.room(3 + 3*binary.MaxVarintLen64 + len(key) + len(mapKey) + len(value))
	s.buf = append(s.buf, tagEntry, byte(kg>>8), byte(kg))
	s.buf = binary.AppendUvarint(s.buf, uint64(state))
	s.buf = binary.AppendUvarint(s.buf, uint64(len(key)))
	s.buf = append(s.buf, key...)
	if isMap {
		s.buf = binary.AppendUvarint(s.buf, uint64(len(mapKey)))
		s.buf = append(s.buf, mapKey...)
	}
	s.buf = binary.AppendUvarint(s.buf, uint64(len(value)))
	s.buf = append(s.buf, value...)
	s.count++
	if s.pending() >= snapBufferBytes && !s.hold {
		s.flush()
	}
	return s.err
}

// appendEntry appends the bytes of one entry (no TTL filtering) to dst, as entry does.
func appendEntry(dst []byte, kg, state int, key []byte, isMap bool, mapKey, value []byte) []byte {
	dst = append(dst, tagEntry, byte(kg>>8), byte(kg))
	dst = binary.AppendUvarint(dst, uint64(state))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	if isMap {
		dst = binary.AppendUvarint(dst, uint64(len(mapKey)))
		dst = append(dst, mapKey...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	return append(dst, value...)
}

// encoded appends count entries that appendEntry encoded (a segment cache's, of a state without TTL)
// as they are. Like entry under hold, it does not flush: the caller is between a key's mark and its end.
func (s *snapWriter) encoded(b []byte, count int) error {
	if s.err != nil {
		return s.err
	}
	s.room(len(b))
	s.buf = append(s.buf, b...)
	s.count += uint64(count)
	return nil
}

// raw appends count entries already encoded (bytes of an earlier snapshot) as they are. It is called
// between keys, where the buffer may be flushed: bytes too many for the buffer go to the writer directly,
// after the buffer, instead of through it.
func (s *snapWriter) raw(b []byte, count int) error {
	if s.err != nil {
		return s.err
	}
	s.count += uint64(count)
	if s.lender != nil {
		s.room(len(b))
		s.buf = append(s.buf, b...)
		return s.maybeFlush()
	}
	if len(s.buf)+len(b) <= snapBufferBytes {
		s.buf = append(s.buf, b...)
		return nil
	}
	s.flush()
	if s.err != nil {
		return s.err
	}
	s.crc = crc32.Update(s.crc, castagnoli, b)
	if _, err := s.w.Write(b); err != nil {
		s.err = fmt.Errorf("write keyed state snapshot: %w", err)
	}
	return s.err
}

// maybeFlush flushes the buffer once it is full.
func (s *snapWriter) maybeFlush() error {
	if s.pending() >= snapBufferBytes {
		s.flush()
	}
	return s.err
}

// flush checksums the pending bytes and, unless the memory is lent (the bytes are in the writer
// already), writes them.
func (s *snapWriter) flush() {
	if s.err != nil || s.pending() == 0 {
		return
	}
	s.crc = crc32.Update(s.crc, castagnoli, s.buf[s.done:])
	if s.lender != nil {
		s.done = len(s.buf)
		return
	}
	_, s.err = s.w.Write(s.buf)
	if s.err != nil {
		s.err = fmt.Errorf("write keyed state snapshot: %w", s.err)
	}
	s.buf = s.buf[:0]
}

// delete records that key (of key group kg) holds nothing in delta state any more; finish writes the
// deletions in order.
func (s *snapWriter) delete(kg, state int, key []byte) {
	at := len(s.delKeys)
	s.delKeys = binary.AppendUvarint(s.delKeys, uint64(len(key)))
	s.delKeys = append(s.delKeys, key...)
	s.deletes = append(s.deletes, deletion{kg: kg, state: state, at: at, n: len(s.delKeys) - at})
}

// finish writes the deletions and the trailer.
func (s *snapWriter) finish() error {
	if s.err != nil {
		return s.err
	}
	keys := s.delKeys
	slices.SortFunc(s.deletes, func(a, b deletion) int {
		if c := cmp.Compare(a.kg, b.kg); c != 0 {
			return c
		}
		if c := cmp.Compare(a.state, b.state); c != 0 {
			return c
		}
		return bytes.Compare(keys[a.at:a.at+a.n], keys[b.at:b.at+b.n])
	})
	for _, d := range s.deletes {
		s.room(3 + binary.MaxVarintLen64 + d.n)
		s.buf = append(s.buf, tagDelete, byte(d.kg>>8), byte(d.kg))
		s.buf = binary.AppendUvarint(s.buf, uint64(d.state))
		s.buf = append(s.buf, keys[d.at:d.at+d.n]...)
		s.count++
		if s.pending() >= snapBufferBytes {
			s.flush()
		}
	}
	s.room(1 + binary.MaxVarintLen64 + 4)
	s.buf = append(s.buf, tagEnd)
	s.buf = binary.AppendUvarint(s.buf, s.count)
	s.flush()
	if s.err != nil {
		return s.err
	}
	s.buf = binary.BigEndian.AppendUint32(s.buf, s.crc)
	if s.lender != nil {
		s.giveBack()
		return nil
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return fmt.Errorf("write keyed state snapshot: %w", err)
	}
	return nil
}

// snapEntry is one entry read from a snapshot. Its slices are valid until the next entry.
type snapEntry struct {
	kg     int
	state  int // index into the header's states
	key    []byte
	mapKey []byte // nil unless the state is a map state
	value  []byte
	// deleted marks a deletion of a delta snapshot: the key holds nothing in the state (no map key, no
	// value).
	deleted bool
}

// corrupt returns an error wrapping ErrCorruptSnapshot.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
}

// errTruncated is returned when the input ends early.
var errTruncated = fmt.Errorf("%w: truncated (%w)", ErrCorruptSnapshot, io.ErrUnexpectedEOF)

// snapReader reads a snapshot with its own buffer, so that it can checksum exactly the bytes it consumes.
type snapReader struct {
	src     io.Reader
	buf     []byte
	pos     int // next unread byte
	end     int // end of the buffered bytes
	crcFrom int // buf[crcFrom:pos] is consumed but not yet in crc
	crc     uint32
	total   int64 // bytes consumed before buf[0]
}

// fill makes at least need (<= len(buf)) bytes available from pos.
func (r *snapReader) fill(need int) error {
	if r.end-r.pos >= need {
		return nil
	}
	r.crc = crc32.Update(r.crc, castagnoli, r.buf[r.crcFrom:r.pos])
	r.total += int64(r.pos)
	r.end = copy(r.buf, r.buf[r.pos:r.end])
	r.pos, r.crcFrom = 0, 0
	for r.end < need {
		n, err := r.src.Read(r.buf[r.end:])
		r.end += n
		if err == io.EOF {
			if r.end < need {
				return errTruncated
			}
			break
		}
		if err != nil {
			return fmt.Errorf("read keyed state snapshot: %w", err)
		}
	}
	return nil
}

// checksum reads a CRC-32C and compares it with that of every byte consumed before it (and leaves it in the
// running checksum, as the writer does).
func (r *snapReader) checksum(what string) error {
	r.crc = crc32.Update(r.crc, castagnoli, r.buf[r.crcFrom:r.pos])
	r.crcFrom = r.pos
	sum := r.crc
	b, err := r.fixed(4)
	if err != nil {
		return err
	}
	if got := binary.BigEndian.Uint32(b); got != sum {
		return corrupt("%s checksum mismatch: stored %08x, computed %08x", what, got, sum)
	}
	return nil
}

// offset is the position of the next unread byte, for error messages.
func (r *snapReader) offset() int64 { return r.total + int64(r.pos) }

func (r *snapReader) fixed(n int) ([]byte, error) {
	if err := r.fill(n); err != nil {
		return nil, err
	}
	b := r.buf[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

func (r *snapReader) byte() (byte, error) {
	if err := r.fill(1); err != nil {
		return 0, err
	}
	b := r.buf[r.pos]
	r.pos++
	return b, nil
}

func (r *snapReader) uvarint() (uint64, error) {
	var x uint64
	for i := 0; i < binary.MaxVarintLen64; i++ {
		b, err := r.byte()
		if err != nil {
			return 0, err
		}
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				break
			}
			return x | uint64(b)<<(7*i), nil
		}
		x |= uint64(b&0x7f) << (7 * i)
	}
	return 0, corrupt("uvarint overflows at offset %d", r.offset())
}

// bytes reads a uvarint length (at most limit) and that many bytes into dst[:0], growing dst only as the
// bytes arrive.
func (r *snapReader) bytes(dst []byte, limit uint64, what string) ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return dst, err
	}
	if n > limit {
		return dst, corrupt("%s of %d bytes at offset %d exceeds the limit of %d", what, n, r.offset(), limit)
	}
	dst = dst[:0]
	for n > 0 {
		if err := r.fill(1); err != nil {
			return dst, err
		}
		c := min(uint64(r.end-r.pos), n)
		dst = append(dst, r.buf[r.pos:r.pos+int(c)]...)
		r.pos += int(c)
		n -= c
	}
	return dst, nil
}

// readSnapshot reads one snapshot from src, checking it throughout. It calls onHeader once, then onEntry for
// each entry of a key group in g (g.maxP must equal the snapshot's). Entries reach onEntry before the
// checksum at the end has been checked: a caller that must not act on corrupt data has to wait for the
// result.
func readSnapshot(src io.Reader, g keyGroups, onHeader func(*snapHeader) error, onEntry func(*snapEntry) error) error {
	r := &snapReader{src: src, buf: make([]byte, snapBufferBytes)}
	b, err := r.fixed(len(snapMagic) + 2)
	if err != nil {
		return err
	}
	if string(b[:len(snapMagic)]) != snapMagic {
		return corrupt("not a keyed state snapshot (magic %q)", b[:len(snapMagic)])
	}
	version := binary.BigEndian.Uint16(b[len(snapMagic):])
	if version != snapVersion && version != snapVersion1 && version != snapVersionDelta {
		return corrupt("unsupported snapshot version %d (this build reads versions %d to %d)", version, snapVersion1, snapVersionDelta)
	}
	maxK := maxKind
	if version == snapVersion1 {
		maxK = maxKindV1
	}
	if b, err = r.fixed(8 + 4 + 4 + 4); err != nil {
		return err
	}
	h := &snapHeader{
		checkpointID: int64(binary.BigEndian.Uint64(b)),
		groups: keyGroups{
			maxP:  int(binary.BigEndian.Uint32(b[8:])),
			start: int(binary.BigEndian.Uint32(b[12:])),
			end:   int(binary.BigEndian.Uint32(b[16:])),
		},
	}
	if version == snapVersionDelta {
		// The base follows the checkpoint id: read the range again after it.
		h.groups = keyGroups{}
		h.base = int64(binary.BigEndian.Uint64(b[8:]))
		rest, err := r.fixed(8)
		if err != nil {
			return err
		}
		h.groups.maxP = int(binary.BigEndian.Uint32(b[16:]))
		h.groups.start = int(binary.BigEndian.Uint32(rest))
		h.groups.end = int(binary.BigEndian.Uint32(rest[4:]))
		if h.base < 1 {
			return corrupt("delta snapshot of checkpoint %d builds on checkpoint %d", h.checkpointID, h.base)
		}
	}
	n, err := r.uvarint()
	if err != nil {
		return err
	}
	if n > maxStates {
		return corrupt("%d states (at most %d)", n, maxStates)
	}
	var name []byte
	for i := uint64(0); i < n; i++ {
		if name, err = r.bytes(name, maxNameBytes, "state name"); err != nil {
			return err
		}
		k, err := r.byte()
		if err != nil {
			return err
		}
		var fl byte
		if k < byte(kindValue) || k > byte(maxK) {
			return corrupt("state %q has unknown kind %d (version %d snapshot)", name, k, version)
		}
		if version >= snapVersion {
			flags, err := r.byte()
			if err != nil {
				return err
			}
			if flags&^flagTTL != 0 {
				return corrupt("state %q has flags %#x that this build does not know", name, flags)
			}
			if flags&flagTTL != 0 && kind(k) != kindValue && kind(k) != kindList && kind(k) != kindMap {
				return corrupt("%s state %q is marked with a time to live, which only value, list and map state have", kind(k), name)
			}
			fl = flags
		}
		if i > 0 && string(name) <= h.states[i-1].name {
			return corrupt("state names out of order: %q after %q", name, h.states[i-1].name)
		}
		delta := false
		if version == snapVersionDelta {
			mode, err := r.byte()
			if err != nil {
				return err
			}
			if mode > 1 {
				return corrupt("state %q has unknown mode %d in a delta snapshot", name, mode)
			}
			delta = mode == 1
		}
		h.states = append(h.states, snapState{name: string(name), kind: kind(k), flags: fl, delta: delta})
	}
	if err := r.checksum("header"); err != nil {
		return err
	}
	hg := h.groups
	if hg.maxP < 1 || hg.maxP > MaxKeyGroups || hg.start > hg.end || hg.end >= hg.maxP {
		return corrupt("key group range [%d, %d] of %d key groups", hg.start, hg.end, hg.maxP)
	}
	if hg.maxP != g.maxP {
		return fmt.Errorf("keyed state snapshot of checkpoint %d has %d key groups, the backend %d: "+
			"state cannot move to a different max parallelism", h.checkpointID, hg.maxP, g.maxP)
	}
	if err := onHeader(h); err != nil {
		return err
	}

	var (
		e        snapEntry
		count    uint64
		prev     []byte // sort key of the previous entry: kg, state, uvarint(len(key)), key, map key
		cur      []byte
		deleting bool // in the deletions of a delta snapshot, which follow its entries
	)
	for {
		tag, err := r.byte()
		if err != nil {
			return err
		}
		if tag == tagEnd {
			break
		}
		if tag == tagDelete && version == snapVersionDelta {
			if !deleting {
				deleting = true // the deletions are in order among themselves
				prev = prev[:0]
			}
			if err := readDeletion(r, h, g, &e, &prev, &cur, onEntry); err != nil {
				return err
			}
			count++
			continue
		}
		if tag != tagEntry || deleting {
			return corrupt("unknown entry tag %d at offset %d", tag, r.offset()-1)
		}
		at := r.offset() - 1
		b, err := r.fixed(2)
		if err != nil {
			return err
		}
		e.kg = int(binary.BigEndian.Uint16(b))
		if !hg.owns(e.kg) {
			return corrupt("entry at offset %d has key group %d outside the writer's range [%d, %d]", at, e.kg, hg.start, hg.end)
		}
		si, err := r.uvarint()
		if err != nil {
			return err
		}
		if si >= uint64(len(h.states)) {
			return corrupt("entry at offset %d names state %d of %d", at, si, len(h.states))
		}
		e.state = int(si)
		if e.key, err = r.bytes(e.key, maxEntryBytes, "key"); err != nil {
			return err
		}
		e.mapKey = e.mapKey[:0]
		sk := h.states[e.state].kind
		isMap := sk.hasMapKey()
		if isMap {
			if e.mapKey, err = r.bytes(e.mapKey, maxEntryBytes, "map key"); err != nil {
				return err
			}
		}
		if e.value, err = r.bytes(e.value, maxEntryBytes, "value"); err != nil {
			return err
		}
		if sk == kindTimers && (len(e.mapKey) != timerKeyBytes || len(e.value) != 0) {
			return corrupt("timer entry at offset %d has a %d-byte time and namespace (want %d) and a %d-byte value (want 0)",
				at, len(e.mapKey), timerKeyBytes, len(e.value))
		}
		if KeyGroup(e.key, hg.maxP) != e.kg {
			return corrupt("entry at offset %d: key group %d is not the key's (%d)", at, e.kg, KeyGroup(e.key, hg.maxP))
		}
		cur = append(cur[:0], byte(e.kg>>8), byte(e.kg), byte(e.state>>8), byte(e.state))
		cur = binary.AppendUvarint(cur, uint64(len(e.key)))
		cur = append(cur, e.key...)
		cur = append(cur, e.mapKey...)
		if count > 0 && bytes.Compare(prev, cur) >= 0 {
			return corrupt("entry at offset %d is out of order or repeated", at)
		}
		prev, cur = cur, prev
		count++
		if g.owns(e.kg) {
			mk := e.mapKey
			if !isMap {
				mk = nil
			}
			ent := snapEntry{kg: e.kg, state: e.state, key: e.key, mapKey: mk, value: e.value}
			if err := onEntry(&ent); err != nil {
				return err
			}
		}
	}
	want, err := r.uvarint()
	if err != nil {
		return err
	}
	if want != count {
		return corrupt("trailer counts %d entries, read %d", want, count)
	}
	if err := r.checksum("snapshot"); err != nil {
		return err
	}
	switch err := r.fill(1); {
	case err == nil:
		return corrupt("unexpected bytes after the checksum at offset %d", r.offset())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil
	default:
		return err
	}
}

// readDeletion reads a deletion of a delta snapshot (its tag read) and hands it to onEntry if its key
// group is in g. prev and cur are the order check's scratch, as for entries; an empty prev is the first.
func readDeletion(r *snapReader, h *snapHeader, g keyGroups, e *snapEntry, prev, cur *[]byte, onEntry func(*snapEntry) error) error {
	at := r.offset() - 1
	b, err := r.fixed(2)
	if err != nil {
		return err
	}
	e.kg = int(binary.BigEndian.Uint16(b))
	if !h.groups.owns(e.kg) {
		return corrupt("deletion at offset %d has key group %d outside the writer's range [%d, %d]", at, e.kg, h.groups.start, h.groups.end)
	}
	si, err := r.uvarint()
	if err != nil {
		return err
	}
	if si >= uint64(len(h.states)) || !h.states[si].delta {
		return corrupt("deletion at offset %d names state %d, which is not a delta state of the %d", at, si, len(h.states))
	}
	e.state = int(si)
	if e.key, err = r.bytes(e.key, maxEntryBytes, "key"); err != nil {
		return err
	}
	if KeyGroup(e.key, h.groups.maxP) != e.kg {
		return corrupt("deletion at offset %d: key group %d is not the key's (%d)", at, e.kg, KeyGroup(e.key, h.groups.maxP))
	}
	c := append((*cur)[:0], byte(e.kg>>8), byte(e.kg), byte(e.state>>8), byte(e.state))
	c = binary.AppendUvarint(c, uint64(len(e.key)))
	c = append(c, e.key...)
	if len(*prev) > 0 && bytes.Compare(*prev, c) >= 0 {
		return corrupt("deletion at offset %d is out of order or repeated", at)
	}
	*prev, *cur = c, *prev
	if !g.owns(e.kg) {
		return nil
	}
	return onEntry(&snapEntry{kg: e.kg, state: e.state, key: e.key, deleted: true})
}

// IsDelta reports whether b is a delta snapshot of the heap backend (SnapshotIncremental): one that holds
// only what changed since an earlier snapshot and is restored on top of it (after the full snapshot it
// builds on and the deltas between, in order, all given to Restore).
func IsDelta(b []byte) bool {
	return len(b) >= len(snapMagic)+2 && string(b[:len(snapMagic)]) == snapMagic &&
		binary.BigEndian.Uint16(b[len(snapMagic):]) == snapVersionDelta
}

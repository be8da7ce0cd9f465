package checkpoint

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
)

// The envelope every stored object is framed in:
//
//	offset 0   magic    [4]byte
//	offset 4   version  uint16 LE  (the layout of bytes 0..5 never changes, so any version can be recognised)
//	offset 6   flags    uint16 LE  (zero in version 1)
//	offset 8   length   uint64 LE  (payload bytes)
//	offset 16  payload  [length]byte
//	then       crc      uint32 LE  CRC-32C of every byte before it
const (
	envelopeHeader   = 16
	envelopeTrailer  = 4
	envelopeOverhead = envelopeHeader + envelopeTrailer

	// formatVersion is the highest envelope and payload version this build reads. Version 2 (metadata
	// with operator uids) reads version 1 objects as well; state blobs did not change. Version 3 is
	// metadata that refers to shared blobs (incremental checkpoints); it is written only by such
	// checkpoints, everything else is still written as version 2 (writeVersion).
	formatVersion uint16 = 3
	writeVersion  uint16 = 2
)

var (
	magicState    = [4]byte{'R', 'N', 'S', 'T'}
	magicMetadata = [4]byte{'R', 'N', 'M', 'D'}

	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// seal frames payload in an envelope of version writeVersion and returns the object and its checksum.
func seal(magic [4]byte, payload []byte) ([]byte, uint32) {
	return sealVersion(magic, payload, writeVersion)
}

// sealVersion is seal with the given version.
func sealVersion(magic [4]byte, payload []byte, version uint16) ([]byte, uint32) {
	out := make([]byte, envelopeHeader+len(payload)+envelopeTrailer)
	copy(out, magic[:])
	binary.LittleEndian.PutUint16(out[4:], version)
	binary.LittleEndian.PutUint16(out[6:], 0)
	binary.LittleEndian.PutUint64(out[8:], uint64(len(payload)))
	copyInPieces(out[envelopeHeader:], payload)
	end := envelopeHeader + len(payload)
	sum := checksum(out[:end])
	binary.LittleEndian.PutUint32(out[end:], sum)
	return out, sum
}

// open verifies an object read from key and returns its payload (a subslice of obj) and checksum. Checks run
// in this order: magic, version, length against the object's size, checksum.
func open(key string, magic [4]byte, obj []byte) ([]byte, uint32, error) {
	if len(obj) < 4 {
		if len(obj) == 0 || string(obj) == string(magic[:len(obj)]) {
			return nil, 0, &CorruptError{Key: key, Problem: ProblemTruncated,
				Detail: fmt.Sprintf("%d bytes, shorter than the %d-byte header", len(obj), envelopeHeader)}
		}
		return nil, 0, &CorruptError{Key: key, Problem: ProblemBadMagic, Detail: fmt.Sprintf("starts with %q", obj)}
	}
	if [4]byte(obj[:4]) != magic {
		return nil, 0, &CorruptError{Key: key, Problem: ProblemBadMagic,
			Detail: fmt.Sprintf("want %q, have %q", magic[:], obj[:4])}
	}
	if len(obj) < envelopeOverhead {
		return nil, 0, &CorruptError{Key: key, Problem: ProblemTruncated,
			Detail: fmt.Sprintf("%d bytes, shorter than the %d-byte envelope", len(obj), envelopeOverhead)}
	}
	if v := binary.LittleEndian.Uint16(obj[4:]); v == 0 || v > formatVersion {
		if v == 0 {
			return nil, 0, &CorruptError{Key: key, Problem: ProblemBadPayload, Detail: "format version 0"}
		}
		return nil, 0, &VersionError{Key: key, Version: v, Supported: formatVersion}
	}
	n := binary.LittleEndian.Uint64(obj[8:])
	have := uint64(len(obj) - envelopeOverhead)
	switch {
	case n > have:
		return nil, 0, &CorruptError{Key: key, Problem: ProblemTruncated,
			Detail: fmt.Sprintf("header says %d payload bytes, object holds %d", n, have)}
	case n < have:
		return nil, 0, &CorruptError{Key: key, Problem: ProblemSizeMismatch,
			Detail: fmt.Sprintf("header says %d payload bytes, object holds %d", n, have)}
	}
	end := envelopeHeader + int(n)
	want := binary.LittleEndian.Uint32(obj[end:])
	got := checksum(obj[:end])
	if got != want {
		return nil, 0, &CorruptError{Key: key, Problem: ProblemBadChecksum,
			Detail: fmt.Sprintf("stored crc32c %08x, computed %08x", want, got)}
	}
	if flags := binary.LittleEndian.Uint16(obj[6:]); flags != 0 {
		return nil, 0, &CorruptError{Key: key, Problem: ProblemBadPayload, Detail: fmt.Sprintf("unknown flags %#x", flags)}
	}
	return obj[envelopeHeader:end], want, nil
}

// Blob is a state blob being built: its payload is written after room for the envelope's header, so that
// storing it seals it in place, without copying the payload. Its memory may be reused for the next blob.
type Blob struct {
	b []byte
	// last is the length of the blob whose memory this one took (0 for none).
	last int
	// lent is set while the memory is lent (Lend).
	lent bool
	// refs counts the blob's owner (until Done or Memory) and the holds on its memory (Hold); once it is
	// 0 the memory goes back to pool, if the blob came from one.
	refs atomic.Int32
	pool *BlobPool
}

// BlobPool keeps the memory of a task's last state blob for its next one: a large state is then written
// without allocating its memory anew (and collecting it) at every checkpoint. It keeps one blob's memory;
// more given back is left to the collector.
type BlobPool struct {
	free chan BlobMemory
}

// NewBlobPool returns an empty pool.
func NewBlobPool() *BlobPool { return &BlobPool{free: make(chan BlobMemory, 1)} }

// Blob starts an empty blob in the pool's memory, if it holds any; its memory comes back to the pool
// when the owner is done with it (Done) and nothing holds it.
func (p *BlobPool) Blob() *Blob {
	var m BlobMemory
	select {
	case m = <-p.free:
	default:
	}
	b := NewBlob(m)
	b.pool = p
	return b
}

// BlobMemory is the memory a blob leaves for the next one (Blob.Memory): its bytes, and how much the blob
// grew over the one whose memory it took. The zero value is no memory.
type BlobMemory struct {
	b    []byte
	grew int
}

// NewBlob starts an empty blob in reuse's memory (the zero BlobMemory: new memory). The new blob is
// expected to be about as large as the one that left the memory, or larger by about as much as that one
// grew (a task's state grows from one checkpoint to the next, q5's by the same amount each time): room
// for a quarter more, or for twice the last growth (at most as much again), is made at once, so that the
// payload is not copied into memory twice its size as it outgrows the last one; memory made anew has room
// for twice that.
func NewBlob(reuse BlobMemory) *Blob {
	n := len(reuse.b)
	if want := n + max(n/4, min(2*reuse.grew, n)); cap(reuse.b) < want {
		// Room for as much growth again: memory held while the next blob is written (Hold) comes back for
		// the one after, two growths on.
		reuse.b = make([]byte, 0, n+max(n/4, min(4*reuse.grew, 2*n)))
	}
	var hdr [envelopeHeader]byte
	b := &Blob{b: append(reuse.b[:0], hdr[:]...), last: n}
	b.refs.Store(1)
	return b
}

// Hold keeps the blob's memory from being reused while the caller reads what it wrote there after the
// blob is stored (the heap backend's snapshot writer keeps its bytes so, and copies those of unchanged
// keys from them into its next snapshot), until it calls release (once; later calls do nothing).
func (b *Blob) Hold() (release func()) {
	b.refs.Add(1)
	var once sync.Once
	return func() { once.Do(b.unref) }
}

// Done tells that the owner is done with the blob (it was stored or given up): its memory goes back to
// its pool once nothing holds it. The blob must not be used after.
func (b *Blob) Done() { b.unref() }

func (b *Blob) unref() {
	if b.refs.Add(-1) == 0 && b.pool != nil {
		select {
		case b.pool.free <- b.memory():
		default:
		}
	}
}

// Lend lends the blob's memory, holding what was written so far, to a writer that appends to it in place
// (the heap backend's snapshot writer, which so copies its bytes once, into the blob, where it copied them
// into a buffer of its own and then into the blob). The blob must not be used until Return gives the
// memory back, with the bytes appended.
func (b *Blob) Lend() []byte {
	if b.lent {
		panic("checkpoint: a blob's memory lent twice")
	}
	b.lent = true
	return b.b
}

// Return gives back the memory Lend lent, p being it (or memory it was copied into as it grew) with bytes
// appended after what it held.
func (b *Blob) Return(p []byte) {
	if !b.lent || len(p) < len(b.b) {
		panic("checkpoint: a blob's memory returned that was not lent, or shorter than lent")
	}
	b.b, b.lent = p, false
}

// Write appends p to the payload. A blob that outgrows its memory doubles it, so that a state that grew
// much since the last checkpoint is copied once, not each time append would add a quarter; large copies
// go piece by piece.
func (b *Blob) Write(p []byte) (int, error) {
	if b.lent {
		panic("checkpoint: a blob written while its memory is lent")
	}
	n := len(b.b)
	if cap(b.b)-n < len(p) {
		grown := make([]byte, n, max(2*cap(b.b), n+len(p)))
		copyInPieces(grown, b.b)
		b.b = grown
	}
	if len(p) <= piece {
		b.b = append(b.b, p...)
		return len(p), nil
	}
	b.b = b.b[:n+len(p)]
	copyInPieces(b.b[n:], p)
	return len(p), nil
}

// WriteString appends s to the payload.
func (b *Blob) WriteString(s string) (int, error) {
	b.b = append(b.b, s...)
	return len(s), nil
}

// Len returns the length of the payload.
func (b *Blob) Len() int { return len(b.b) - envelopeHeader }

// Payload returns the payload written so far; writing into it changes the blob.
func (b *Blob) Payload() []byte { return b.b[envelopeHeader:] }

// Memory ends the owner's use of the blob, as Done, and returns its memory for a later NewBlob, with the
// blob's length and growth (which tell NewBlob how large the next one may be), or no memory if something
// holds it (Hold). The blob must not be used after.
func (b *Blob) Memory() BlobMemory {
	if b.refs.Add(-1) > 0 {
		return BlobMemory{}
	}
	return b.memory()
}

func (b *Blob) memory() BlobMemory { return BlobMemory{b: b.b, grew: max(len(b.b)-b.last, 0)} }

// sealInPlace turns b into a stored object, as seal would, and returns it and its checksum.
func sealInPlace(magic [4]byte, b *Blob) ([]byte, uint32) {
	out := b.b
	n := len(out) - envelopeHeader
	copy(out, magic[:])
	binary.LittleEndian.PutUint16(out[4:], writeVersion)
	binary.LittleEndian.PutUint16(out[6:], 0)
	binary.LittleEndian.PutUint64(out[8:], uint64(n))
	sum := checksum(out)
	out = binary.LittleEndian.AppendUint32(out, sum)
	b.b = out
	return out, sum
}

// piece bounds the bytes one copy or checksum call handles. Those calls are assembly loops the Go scheduler
// cannot preempt, and a garbage collection stops every goroutine before it starts: one call over a state
// blob of tens of megabytes held every task of the process still for tens of milliseconds.
const piece = 256 << 10

// checksum is the CRC-32C of b, computed piece by piece.
func checksum(b []byte) uint32 {
	var sum uint32
	for len(b) > 0 {
		n := min(len(b), piece)
		sum = crc32.Update(sum, castagnoli, b[:n])
		b = b[n:]
	}
	return sum
}

// copyInPieces copies src to dst piece by piece.
func copyInPieces(dst, src []byte) {
	for len(src) > 0 {
		n := copy(dst, src[:min(len(src), piece)])
		dst, src = dst[n:], src[n:]
	}
}

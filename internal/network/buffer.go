package network

import (
	"encoding/binary"
	"fmt"
)

// HeaderSize is the number of bytes of framing at the start of every buffer.
const HeaderSize = 20

// DefaultBufferSize is the default size of a network buffer including its header (Flink's default segment
// size).
const DefaultBufferSize = 32 * 1024

// MinBufferSize is the smallest buffer size accepted: an event must fit in one buffer. Tests use it to
// force records across many buffers.
const MinBufferSize = 64

// lengthPrefixSize is the size of the per-record length prefix.
const lengthPrefixSize = 4

// Kind says whether a buffer carries record bytes or one event.
type Kind uint8

const (
	// KindData buffers carry length-prefixed record bytes.
	KindData Kind = 1
	// KindEvent buffers carry exactly one encoded Event.
	KindEvent Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindEvent:
		return "event"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Header is the framing at the start of every buffer. Its encoding is identical in memory and on the wire.
//
//	offset 0  kind          uint8
//	offset 1  reserved      [3]byte (zero)
//	offset 4  continuation  uint32  leading payload bytes that continue a record begun earlier
//	offset 8  starts        uint32  records that start in this buffer
//	offset 12 firstSeq      uint64  channel sequence number of the first record starting here (or of the
//	                                next record to start, when none starts here)
type Header struct {
	Kind         Kind
	Continuation uint32
	Starts       uint32
	FirstSeq     uint64
}

// encode writes h into b[:HeaderSize].
func (h *Header) encode(b []byte) {
	_ = b[HeaderSize-1]
	b[0] = byte(h.Kind)
	b[1], b[2], b[3] = 0, 0, 0
	binary.LittleEndian.PutUint32(b[4:], h.Continuation)
	binary.LittleEndian.PutUint32(b[8:], h.Starts)
	binary.LittleEndian.PutUint64(b[12:], h.FirstSeq)
}

// DecodeHeader parses and validates the header of a buffer of total length n (header included).
func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%w: buffer of %d bytes is shorter than its %d-byte header", ErrCorrupt, len(b), HeaderSize)
	}
	h.Kind = Kind(b[0])
	if b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return h, fmt.Errorf("%w: reserved header bytes are not zero (% x)", ErrCorrupt, b[1:4])
	}
	h.Continuation = binary.LittleEndian.Uint32(b[4:])
	h.Starts = binary.LittleEndian.Uint32(b[8:])
	h.FirstSeq = binary.LittleEndian.Uint64(b[12:])
	payload := len(b) - HeaderSize
	switch h.Kind {
	case KindData:
		if int64(h.Continuation) > int64(payload) {
			return h, fmt.Errorf("%w: continuation of %d bytes exceeds payload of %d bytes", ErrCorrupt, h.Continuation, payload)
		}
		// Each record that starts needs at least its length prefix... except the last, which may have only
		// part of it here. A cheap bound that still stops absurd counts:
		if int64(h.Starts) > int64(payload-int(h.Continuation)) {
			return h, fmt.Errorf("%w: %d record starts cannot fit in %d bytes", ErrCorrupt, h.Starts, payload-int(h.Continuation))
		}
	case KindEvent:
		if h.Continuation != 0 || h.Starts != 0 {
			return h, fmt.Errorf("%w: event buffer with continuation %d and starts %d", ErrCorrupt, h.Continuation, h.Starts)
		}
	default:
		return h, fmt.Errorf("%w: unknown buffer kind %d", ErrCorrupt, b[0])
	}
	return h, nil
}

// Buffer is one fixed-capacity network buffer. Its bytes hold the Header followed by the payload. A buffer
// belongs to the pool it came from and must be recycled exactly once by whoever holds it last.
type Buffer struct {
	Header
	data []byte // data[:HeaderSize] is the encoded header once sealed; len(data) is header + payload
	pool *BufferPool
	free bool // in the pool; catches double recycling
	// logAt is the buffer's entry in its subpartition's in-flight log, if it has one: where an unaligned
	// checkpoint's barrier that overtakes it jumps to (overtake.go).
	logAt int64
}

// Payload returns the bytes after the header.
func (b *Buffer) Payload() []byte { return b.data[HeaderSize:] }

// Bytes returns the whole buffer, header included, as sent on the wire. Valid after Seal.
func (b *Buffer) Bytes() []byte { return b.data }

// Len returns the total length of the buffer (header and payload).
func (b *Buffer) Len() int { return len(b.data) }

// Cap returns the capacity of the buffer, header included.
func (b *Buffer) Cap() int { return cap(b.data) }

// free returns the number of payload bytes that can still be appended.
func (b *Buffer) freeBytes() int { return cap(b.data) - len(b.data) }

// reset prepares a buffer for writing.
func (b *Buffer) reset(kind Kind, firstSeq uint64) {
	b.Header = Header{Kind: kind, FirstSeq: firstSeq}
	b.data = b.data[:HeaderSize]
}

// Seal encodes the header into the buffer's bytes; a sealed buffer is ready to be read or sent.
func (b *Buffer) Seal() { b.Header.encode(b.data) }

// Recycle returns the buffer to its pool. The caller must not touch it afterwards.
func (b *Buffer) Recycle() {
	if b.pool != nil {
		b.pool.put(b)
	}
}

package network

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// RecordDecoder cuts the records of one channel out of its buffers. Records that lie wholly in one buffer
// are returned as slices of it (no copy); records spanning buffers are assembled in a reusable scratch slice
// bounded by the maximum record size.
//
// A decoder that starts mid-stream (a fresh reader of a reconnectable subpartition) skips the leading
// continuation bytes of its first buffer: they belong to a record whose start it never saw. It counts such
// skips; it never returns a partial record.
type RecordDecoder struct {
	maxRecordSize int

	payload []byte
	pos     int
	hdr     Header
	started uint32 // records started in the current buffer

	// spanning record state
	inRecord bool
	lenBuf   [lengthPrefixSize]byte
	lenHave  int
	need     int // payload bytes of the record, once known (lenHave == 4)
	partial  []byte
	contEnd  int // where the continuation must end in the current buffer, -1 if it runs to the end

	synced   bool
	skipping bool // joining: skipping the rest of a record whose start was never seen
	nextSeq  uint64
	// dropBelow, set by Rejoin, is the first record a rejoined decoder returns: records before it, which
	// a restarted producer regenerates and the consumer has had already, are dropped as they are decoded.
	dropBelow uint64
	// gapAllowed, set by SkipTo, lets the first buffer start after dropBelow: a restored consumer that
	// reconnects without an in-flight log (approximate recovery) may have lost records, which its task
	// counts, but must still not take again what its state holds.
	gapAllowed bool

	// pause, if set, makes Paused report true: the reader of the decoder's records stops between two of
	// its batches and leaves the rest of the buffer for later (SetPause).
	pause *atomic.Bool

	// PartialRecordsSkipped counts records whose start was never seen by this decoder.
	PartialRecordsSkipped uint64
	// DuplicatesDropped counts records a rejoined decoder dropped (Rejoin).
	DuplicatesDropped uint64
}

// NewRecordDecoder makes a decoder that rejects records over maxRecordSize bytes (0 means the default).
func NewRecordDecoder(maxRecordSize int) *RecordDecoder {
	if maxRecordSize <= 0 {
		maxRecordSize = DefaultMaxRecordSize
	}
	return &RecordDecoder{maxRecordSize: maxRecordSize}
}

// Reset forgets all state, as for a new view that joins the stream at an unknown point.
func (d *RecordDecoder) Reset() {
	skipped := d.PartialRecordsSkipped
	*d = RecordDecoder{maxRecordSize: d.maxRecordSize, partial: d.partial[:0], PartialRecordsSkipped: skipped, pause: d.pause}
}

// Rejoin prepares the decoder for a channel whose producer was restarted and regenerates its output from an
// earlier record on (exactly-once local recovery, docs/taskfailover.md §5): it forgets its state like Reset,
// joins the regenerated stream at its first buffer, and drops every record before dropBelow (the next record
// the consumer had not had yet: Resume before the call), counting them in DuplicatesDropped. A record that
// spans buffers is dropped whole. The per-record path is unchanged: the dropping is done in SetBuffer.
func (d *RecordDecoder) Rejoin(dropBelow uint64) {
	skipped, dups := d.PartialRecordsSkipped, d.DuplicatesDropped
	*d = RecordDecoder{maxRecordSize: d.maxRecordSize, partial: d.partial[:0], PartialRecordsSkipped: skipped,
		DuplicatesDropped: dups, dropBelow: dropBelow, pause: d.pause}
}

// SkipTo prepares a fresh decoder of a restored consumer whose state holds every record of the channel
// before seq (the position its checkpoint recorded). The channel may deliver some of them again: a reader
// served from an in-flight log starts at the checkpoint's barrier, which lies before seq when the consumer
// took the checkpoint while it still dropped what a restarted producer regenerated. They are dropped as
// Rejoin drops them, and counted in DuplicatesDropped. Unlike Rejoin, a channel whose first record comes
// after seq is not refused: without a log, what the consumer missed is approximate recovery's counted loss.
func (d *RecordDecoder) SkipTo(seq uint64) {
	if seq == 0 {
		return
	}
	d.Rejoin(seq)
	d.gapAllowed = true
}

// Resume returns the sequence number of the first record the consumer has not had: what a Rejoin drops up
// to. It is NextSeq, except while a rejoined decoder still drops regenerated records, when it is the bound
// that Rejoin was given (NextSeq is then below it: those records were had, before the producer restarted).
func (d *RecordDecoder) Resume() uint64 {
	if d.dropBelow != 0 {
		return d.dropBelow
	}
	return d.nextSeq
}

// Rejoining reports whether a rejoined decoder still drops regenerated records (Rejoin): false once it
// returned or passed the first record the consumer had not had.
func (d *RecordDecoder) Rejoining() bool { return d.dropBelow != 0 }

// Synced reports whether the decoder has seen a record boundary with a known sequence number.
func (d *RecordDecoder) Synced() bool { return d.synced }

// NextSeq returns the channel sequence number of the next record the decoder will return. Valid once
// Synced.
func (d *RecordDecoder) NextSeq() uint64 { return d.nextSeq }

// InRecord reports whether the decoder holds the first part of a record that spans buffers.
func (d *RecordDecoder) InRecord() bool { return d.inRecord }

// SetBuffer begins decoding a data buffer. The buffer's bytes must stay valid until Next returns nil.
// It returns the sequence number of the first record that starts in the buffer, and whether the decoder
// synchronised on this buffer (its first buffer, for a decoder that joined mid-stream).
func (d *RecordDecoder) SetBuffer(b *Buffer) (joined bool, err error) {
	joined, err = d.setBuffer(b)
	if err != nil || d.dropBelow == 0 {
		return joined, err
	}
	if joined && d.nextSeq > d.dropBelow {
		if d.gapAllowed {
			d.dropBelow, d.gapAllowed = 0, false
			return joined, nil
		}
		return joined, fmt.Errorf("%w: the regenerated stream starts at record %d, after record %d that the consumer has not had", ErrCorrupt, d.nextSeq, d.dropBelow)
	}
	return joined, d.dropDuplicates()
}

// dropDuplicates decodes and drops the records of the current buffer before dropBelow; once past it the
// decoder is an ordinary one again.
func (d *RecordDecoder) dropDuplicates() error {
	for d.synced && d.nextSeq < d.dropBelow {
		rec, err := d.Next()
		if err != nil {
			return err
		}
		if rec == nil {
			return nil // the buffer is used up; the next one goes on dropping
		}
		d.DuplicatesDropped++
	}
	if d.synced {
		d.dropBelow, d.gapAllowed = 0, false
	}
	return nil
}

func (d *RecordDecoder) setBuffer(b *Buffer) (joined bool, err error) {
	if b.Kind != KindData {
		return false, fmt.Errorf("%w: decoder given a %s buffer", ErrCorrupt, b.Kind)
	}
	d.payload, d.pos, d.hdr, d.started = b.Payload(), 0, b.Header, 0
	cont := int(b.Continuation)
	if cont > len(d.payload) {
		return false, fmt.Errorf("%w: continuation %d exceeds payload %d", ErrCorrupt, cont, len(d.payload))
	}
	if !d.synced {
		// Join: skip the tail of a record we never saw the start of.
		if d.inRecord {
			return false, fmt.Errorf("%w: unsynchronised decoder inside a record", ErrCorrupt)
		}
		if cont > 0 {
			if !d.skipping {
				d.PartialRecordsSkipped++
				d.skipping = true
			}
			d.pos = cont
			if cont == len(d.payload) {
				// The record we joined in the middle of goes on in the next buffer: still joining.
				return false, nil
			}
		}
		d.skipping = false
		d.synced = true
		d.nextSeq = b.FirstSeq
		return true, nil
	}
	if d.inRecord {
		if cont == 0 {
			return false, fmt.Errorf("%w: buffer does not continue the record begun in the previous buffer (record %d)", ErrCorrupt, d.nextSeq)
		}
		if cont == len(d.payload) {
			d.contEnd = -1
		} else {
			d.contEnd = cont
		}
	} else if cont != 0 {
		return false, fmt.Errorf("%w: buffer continues a record (%d bytes) but none was begun", ErrCorrupt, cont)
	}
	if b.Starts > 0 || !d.inRecord {
		want := d.nextSeq
		if d.inRecord {
			want++ // the spanning record has not been counted yet
		}
		if b.FirstSeq != want {
			return false, fmt.Errorf("%w: buffer's first record is %d, expected %d", ErrCorrupt, b.FirstSeq, want)
		}
	}
	return false, nil
}

// Next returns the next whole record of the current buffer, or nil when the buffer holds no more. The slice
// is valid until the next call to Next or SetBuffer.
func (d *RecordDecoder) Next() ([]byte, error) {
	// The common case, small enough to be inlined into the reader's loop: a whole record that starts here.
	if !d.inRecord && d.started < d.hdr.Starts {
		pos := d.pos
		if rest := len(d.payload) - pos; rest >= lengthPrefixSize {
			n := int(binary.LittleEndian.Uint32(d.payload[pos:]))
			if n <= d.maxRecordSize && n <= rest-lengthPrefixSize {
				d.started++
				d.nextSeq++
				d.pos = pos + lengthPrefixSize + n
				return d.payload[pos+lengthPrefixSize : d.pos : d.pos], nil
			}
		}
	}
	return d.next()
}

// next is Next for everything but the common case: record ends and continuations, the end of the buffer,
// and the errors.
func (d *RecordDecoder) next() ([]byte, error) {
	if d.inRecord {
		rec, err := d.continueRecord()
		if rec != nil || err != nil {
			return rec, err
		}
		if d.inRecord {
			return nil, nil // buffer exhausted inside the record
		}
	}
	rest := len(d.payload) - d.pos
	if rest == 0 {
		if d.started != d.hdr.Starts {
			return nil, fmt.Errorf("%w: buffer says %d records start in it, found %d", ErrCorrupt, d.hdr.Starts, d.started)
		}
		return nil, nil
	}
	d.started++
	if d.started > d.hdr.Starts {
		return nil, fmt.Errorf("%w: more records start in the buffer than its header's %d", ErrCorrupt, d.hdr.Starts)
	}
	if rest >= lengthPrefixSize {
		n := int(binary.LittleEndian.Uint32(d.payload[d.pos:]))
		if n > d.maxRecordSize || n < 0 {
			return nil, fmt.Errorf("%w: record %d of %d bytes exceeds the maximum record size of %d bytes", ErrRecordTooLarge, d.nextSeq, n, d.maxRecordSize)
		}
		if rest-lengthPrefixSize >= n {
			start := d.pos + lengthPrefixSize
			d.pos = start + n
			d.nextSeq++
			return d.payload[start:d.pos:d.pos], nil
		}
	}
	// The record continues in later buffers.
	d.inRecord = true
	d.lenHave = 0
	d.need = 0
	d.partial = d.partial[:0]
	d.contEnd = -1
	return d.continueRecord()
}

// continueRecord consumes the current buffer's bytes for the record being assembled.
func (d *RecordDecoder) continueRecord() ([]byte, error) {
	for d.lenHave < lengthPrefixSize && d.pos < len(d.payload) {
		d.lenBuf[d.lenHave] = d.payload[d.pos]
		d.lenHave++
		d.pos++
		if d.lenHave == lengthPrefixSize {
			n := int(binary.LittleEndian.Uint32(d.lenBuf[:]))
			if n > d.maxRecordSize || n < 0 {
				return nil, fmt.Errorf("%w: record %d of %d bytes exceeds the maximum record size of %d bytes", ErrRecordTooLarge, d.nextSeq, n, d.maxRecordSize)
			}
			d.need = n
			if cap(d.partial) < n {
				d.partial = make([]byte, 0, n)
			}
		}
	}
	if d.lenHave == lengthPrefixSize {
		k := d.need - len(d.partial)
		if avail := len(d.payload) - d.pos; k > avail {
			k = avail
		}
		d.partial = append(d.partial, d.payload[d.pos:d.pos+k]...)
		d.pos += k
		if len(d.partial) == d.need {
			if d.contEnd >= 0 && d.pos != d.contEnd {
				return nil, fmt.Errorf("%w: record %d ends at byte %d, buffer header says the continuation ends at %d", ErrCorrupt, d.nextSeq, d.pos, d.contEnd)
			}
			d.inRecord = false
			d.contEnd = -1
			d.nextSeq++
			return d.partial, nil
		}
	}
	if d.pos != len(d.payload) {
		return nil, fmt.Errorf("%w: record %d assembly stopped inside the buffer", ErrCorrupt, d.nextSeq)
	}
	if d.contEnd >= 0 {
		return nil, fmt.Errorf("%w: record %d runs past the continuation of %d bytes", ErrCorrupt, d.nextSeq, d.contEnd)
	}
	return nil, nil
}

// SetPause makes Paused follow p (nil: never paused). A task sets it on every decoder of its input, to stop
// between batches of records when it has something more urgent to do than the rest of a buffer.
func (d *RecordDecoder) SetPause(p *atomic.Bool) { d.pause = p }

// Paused reports whether the reader of the decoder's records should stop after its current batch. The
// rest of the buffer stays in the decoder, for a later call (More).
func (d *RecordDecoder) Paused() bool { return d.pause != nil && d.pause.Load() }

// More reports whether the current buffer holds bytes the decoder has not decoded.
func (d *RecordDecoder) More() bool { return d.pos < len(d.payload) }

// Unconsumed returns a sealed data buffer, outside any pool, of the rest of the current buffer when the
// decoder stopped inside it (More), from a record's start; nil otherwise. A decoder that takes it first,
// and then the buffers that follow, returns the same records: an unaligned checkpoint stores it in a
// channel's state.
func (d *RecordDecoder) Unconsumed() []byte {
	if !d.More() || d.inRecord || d.skipping {
		return nil
	}
	rest := d.payload[d.pos:]
	b := &Buffer{data: make([]byte, HeaderSize, HeaderSize+len(rest))}
	b.reset(KindData, d.nextSeq)
	b.Starts = d.hdr.Starts - d.started
	b.data = append(b.data, rest...)
	b.Seal()
	return b.data
}

// PartialRecord returns, while the decoder is inside a record that spans buffers (InRecord), a sealed data
// buffer, outside any pool, that holds what it has of the record: its length prefix, or as much of it as
// came, and the bytes after it. A decoder that takes it first and then the buffers that continue the record
// returns the record whole: an unaligned checkpoint stores it in a channel's state, since the rest of the
// record comes after the barrier. It returns nil outside a record.
func (d *RecordDecoder) PartialRecord() []byte {
	if !d.inRecord {
		return nil
	}
	b := &Buffer{data: make([]byte, HeaderSize, HeaderSize+d.lenHave+len(d.partial))}
	b.reset(KindData, d.nextSeq)
	b.Starts = 1
	b.data = append(b.data, d.lenBuf[:d.lenHave]...)
	if d.lenHave == lengthPrefixSize {
		b.data = append(b.data, d.partial...)
	}
	b.Seal()
	return b.data
}

package network

// This file holds BLOCKING result partitions (Flink's batch exchange): the producer writes every sealed buffer
// of a subpartition to that subpartition's spill file and recycles it at once, so it never waits for a
// consumer and holds no more memory than its buffer pool and one write buffer per subpartition. Once the
// producer has finished (every subpartition's end-of-partition is on disk) the partition is consumable, and
// each subpartition can be read any number of times, by successive consumer attempts, one view at a time.
//
// Spill file format (one file per subpartition, created on the first buffer, in PartitionOptions.SpillDir):
//
//	repeated: length uint32 LE, CRC-32C of the buffer uint32 LE, then length bytes: one sealed buffer
//	exactly as in memory (Buffer.Bytes)
//
// the last frame being the end-of-partition event. A reader checks every length against the buffer size,
// every buffer against its checksum and every header with DecodeHeader, and checks that the file ends right after end-of-partition, where the
// producer said it would; anything else fails the view with ErrCorrupt, naming the file and the offset.
//
// A view of a blocking subpartition reads its file from the beginning in its own Poll (no goroutine), into
// buffers from a small pool owned by the view (at most min(initial credit, maxSpillViewBuffers) buffers, at
// least one), and only against credit: one buffer per credit, as for in-memory subpartitions. Consumers
// recycle those buffers as usual; they go back to the view's pool.
//
// Lock order: spillReader.mu, then Subpartition.mu. The writer's state is guarded by Subpartition.mu (no view
// exists while it is written, so nothing waits for the disk but the producer).

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"
)

const (
	// spillWriteBufferBytes sizes the buffered writer of each subpartition of a blocking partition while its
	// producer runs; it is dropped when the subpartition is finished.
	spillWriteBufferBytes = 32 << 10
	// spillReadBufferBytes sizes the buffered reader of a blocking subpartition's view.
	spillReadBufferBytes = 32 << 10
	// maxSpillViewBuffers bounds the pool of buffers a view of a blocking subpartition reads into.
	maxSpillViewBuffers = 16
	// spillFrameHeaderSize is the length and checksum in front of each buffer in a spill file.
	spillFrameHeaderSize = 8
)

// notReadyError is the type of ErrPartitionNotReady: it unwraps to ErrPartitionNotFound, so that every path
// that waits for a producer not deployed yet also waits for a blocking producer that has not finished.
type notReadyError struct{}

func (*notReadyError) Error() string {
	return "network: partition not ready (blocking partition whose producer has not finished)"
}

func (*notReadyError) Unwrap() error { return ErrPartitionNotFound }

// spillWriter is the producer side of one blocking subpartition. Guarded by Subpartition.mu.
type spillWriter struct {
	path   string // set once the file was created
	f      *os.File
	w      *bufio.Writer
	lenBuf [spillFrameHeaderSize]byte
	size   int64  // bytes written (the file's length once finished)
	frames uint64 // buffers written
	err    error  // first write error, returned again by every later write
	closed bool   // the producer closed the partition without finishing this subpartition
}

// enqueue hands a sealed buffer of subpartition sub to its queue, or to its spill file for a blocking
// partition. isEnd marks end-of-partition.
func (p *ResultPartition) enqueue(sub int, b *Buffer, isEnd bool) error {
	s := p.subs[sub]
	if s.spill == nil {
		return s.add(b, isEnd)
	}
	s.mu.Lock()
	err := s.spillLocked(b, isEnd)
	ended := isEnd && s.finished
	s.mu.Unlock()
	b.Recycle()
	if ended {
		p.unfinishedSpills.Add(-1)
	}
	return err
}

// spillLocked appends b to the subpartition's spill file, creating the file first if needed; with isEnd it
// flushes and closes the file, which makes the subpartition readable. A released subpartition drops b.
func (s *Subpartition) spillLocked(b *Buffer, isEnd bool) error {
	w := s.spill
	p := s.partition
	switch {
	case s.released:
		return nil // nobody will ever read it; like an in-memory subpartition, drop it
	case w.err != nil:
		return w.err
	case s.finished:
		return fmt.Errorf("partition %s: subpartition %d: %s buffer after end of partition", p.id, s.index, b.Kind)
	case w.closed:
		return fmt.Errorf("partition %s: subpartition %d: write after Close", p.id, s.index)
	}
	if w.f == nil {
		pattern := fmt.Sprintf("runnel-r%d-v%d-%d-a%d-sub%d-*.spill", p.id.Result, p.id.Producer.Vertex,
			p.id.Producer.Index, p.id.Producer.Number, s.index)
		f, err := os.CreateTemp(p.opts.SpillDir, pattern)
		if err != nil {
			w.err = fmt.Errorf("partition %s: create spill file of subpartition %d in %s: %w", p.id, s.index, p.opts.SpillDir, err)
			return w.err
		}
		w.f, w.path = f, f.Name()
		w.w = bufio.NewWriterSize(f, spillWriteBufferBytes)
	}
	n := b.Len()
	binary.LittleEndian.PutUint32(w.lenBuf[:], uint32(n))
	binary.LittleEndian.PutUint32(w.lenBuf[4:], crc32.Checksum(b.Bytes(), spillCRC))
	if _, err := w.w.Write(w.lenBuf[:]); err != nil {
		return w.fail(s, err)
	}
	if _, err := w.w.Write(b.Bytes()); err != nil {
		return w.fail(s, err)
	}
	w.size += int64(spillFrameHeaderSize + n)
	w.frames++
	s.stats.BuffersAdded++
	s.stats.BytesSpilled += uint64(spillFrameHeaderSize + n)
	if !isEnd {
		return nil
	}
	if err := w.w.Flush(); err != nil {
		return w.fail(s, err)
	}
	err := w.f.Close()
	w.f, w.w = nil, nil
	if err != nil {
		return w.fail(s, err)
	}
	s.finished = true
	return nil
}

// fail records a write error, closes the file and returns the error, naming the file.
func (w *spillWriter) fail(s *Subpartition, err error) error {
	w.err = fmt.Errorf("partition %s: write spill file %s of subpartition %d: %w", s.partition.id, w.path, s.index, err)
	if w.f != nil {
		_ = w.f.Close()
		w.f, w.w = nil, nil
	}
	return w.err
}

// closeSpill closes the spill file of an unfinished subpartition (the producer stopped writing for good);
// the file stays until the partition is released.
func (s *Subpartition) closeSpill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.spill
	w.closed = true
	if w.f != nil {
		_ = w.f.Close()
		w.f, w.w = nil, nil
	}
}

// removeSpillLocked closes and deletes the spill file (partition release).
func (s *Subpartition) removeSpillLocked() {
	w := s.spill
	if w.f != nil {
		_ = w.f.Close()
		w.f, w.w = nil, nil
	}
	if w.path != "" {
		_ = os.Remove(w.path)
	}
}

// SpillFiles returns the paths of the spill files a blocking partition has created so far, in subpartition
// order (nil for other partitions). The files are deleted when the partition is released.
func (p *ResultPartition) SpillFiles() []string {
	if !p.opts.Blocking {
		return nil
	}
	var paths []string
	for _, s := range p.subs {
		s.mu.Lock()
		if s.spill.path != "" {
			paths = append(paths, s.spill.path)
		}
		s.mu.Unlock()
	}
	return paths
}

// spillReader is a view's reader of a finished spill file. It is used by the view's poller only, under mu.
type spillReader struct {
	mu     sync.Mutex
	path   string
	size   int64  // file length written by the producer
	frames uint64 // buffers written by the producer
	pool   *BufferPool
	f      *os.File
	br     *bufio.Reader
	off    int64  // bytes consumed
	read   uint64 // buffers read
	lenBuf [spillFrameHeaderSize]byte
	err    error // sticky read failure
	closed bool
}

// newSpillReaderLocked makes the reader of a new view of the finished subpartition s.
func (s *Subpartition) newSpillReaderLocked(v *View, credit int) *spillReader {
	p := s.partition
	n := min(max(credit, 1), maxSpillViewBuffers)
	return &spillReader{
		path:   s.spill.path,
		size:   s.spill.size,
		frames: s.spill.frames,
		pool:   NewBufferPool(fmt.Sprintf("view of %s/%d for %s", p.id, s.index, v.owner), p.bufferSize(), n),
	}
}

// closeLocked closes the file; the reader cannot be used afterwards.
func (r *spillReader) closeLocked() {
	r.closed = true
	r.br = nil
	if r.f != nil {
		_ = r.f.Close()
		r.f = nil
	}
}

// close closes the reader, waiting for a Poll in progress.
func (r *spillReader) close() {
	r.mu.Lock()
	r.closeLocked()
	r.mu.Unlock()
}

// corrupt makes an ErrCorrupt error that names the file and the position.
func (r *spillReader) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: spill file %s, buffer %d at offset %d: %s", ErrCorrupt, r.path, r.read, r.off, fmt.Sprintf(format, args...))
}

// readErr classifies an error from reading what the producer wrote: a short file is corrupt.
func (r *spillReader) readErr(what string, err error) error {
	if errors.Is(err, io.EOF) && what == frameLengthWhat {
		return r.corrupt("file ends without end of partition (the producer wrote %d buffers, %d bytes)", r.frames, r.size)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return r.corrupt("file ends inside the %s (the producer wrote %d buffers, %d bytes)", what, r.frames, r.size)
	}
	return fmt.Errorf("read spill file %s, buffer %d at offset %d: %w", r.path, r.read, r.off, err)
}

const frameLengthWhat = "length of a buffer"

// readFrame reads the next buffer of the file into b and validates it. It reports whether b is the
// end-of-partition event.
func (r *spillReader) readFrame(b *Buffer) (bool, error) {
	if r.closed {
		return false, fmt.Errorf("spill file %s: reader closed", r.path)
	}
	if r.f == nil {
		f, err := os.Open(r.path)
		if err != nil {
			return false, fmt.Errorf("open spill file: %w", err)
		}
		r.f = f
		r.br = bufio.NewReaderSize(f, spillReadBufferBytes)
	}
	if r.read == r.frames {
		return false, r.corrupt("no end of partition after the %d buffers the producer wrote", r.frames)
	}
	if _, err := io.ReadFull(r.br, r.lenBuf[:]); err != nil {
		return false, r.readErr(frameLengthWhat, err)
	}
	n := int(binary.LittleEndian.Uint32(r.lenBuf[:]))
	if n < HeaderSize || n > b.Cap() {
		return false, r.corrupt("buffer length %d, want %d to %d", n, HeaderSize, b.Cap())
	}
	b.data = b.data[:n]
	if _, err := io.ReadFull(r.br, b.data); err != nil {
		return false, r.readErr("buffer", err)
	}
	if want, got := binary.LittleEndian.Uint32(r.lenBuf[4:]), crc32.Checksum(b.data, spillCRC); got != want {
		return false, r.corrupt("checksum mismatch: stored crc32c %08x, computed %08x", want, got)
	}
	h, err := DecodeHeader(b.data)
	if err != nil {
		return false, r.corrupt("%v", err)
	}
	b.Header = h
	end := false
	if h.Kind == KindEvent {
		e, err := DecodeEvent(b.Payload())
		if err != nil {
			return false, r.corrupt("%v", err)
		}
		end = e.Type == EventEndOfPartition
	}
	r.off += int64(spillFrameHeaderSize + n)
	r.read++
	if end {
		if r.read != r.frames || r.off != r.size {
			return false, r.corrupt("end of partition after %d buffers and %d bytes, the producer wrote %d buffers and %d bytes",
				r.read, r.off, r.frames, r.size)
		}
		if _, err := r.br.ReadByte(); !errors.Is(err, io.EOF) {
			return false, r.corrupt("bytes after end of partition (the producer wrote %d buffers, %d bytes)", r.frames, r.size)
		}
	}
	return end, nil
}

// pollSpill is View.Poll for a blocking subpartition: it reads the next buffer of the spill file if the view
// has credit.
func (v *View) pollSpill() (*Buffer, error) {
	r := v.spill
	s := v.sub
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := v.spillState(); err != nil || v.credit == 0 || v.drained {
		s.mu.Unlock()
		if err != nil {
			r.closeLocked()
		}
		return nil, err
	}
	s.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	b := r.pool.TryRequest()
	if b == nil {
		// The consumer holds every buffer of the view's pool. Say so before looking again, so that the
		// AddCredit that follows the next Recycle wakes the consumer.
		s.mu.Lock()
		v.starved = true
		s.mu.Unlock()
		if b = r.pool.TryRequest(); b == nil {
			return nil, nil
		}
	}
	end, err := r.readFrame(b)
	if err != nil {
		b.Recycle()
		r.err = fmt.Errorf("subpartition %s/%d, reader %s: %w", s.partition.id, s.index, v.owner, err)
		r.closeLocked()
		return nil, r.err
	}
	err = v.spillState()
	if err == nil {
		v.starved = false
		v.credit--
		v.drained = end
	}
	s.mu.Unlock()
	if err != nil || end {
		r.closeLocked()
	}
	if err != nil {
		b.Recycle()
		return nil, err
	}
	return b, nil
}

// spillState locks the subpartition and returns the error a released view or partition reports. The
// caller unlocks.
func (v *View) spillState() error {
	s := v.sub
	s.mu.Lock()
	if v.released {
		return fmt.Errorf("subpartition %s/%d, reader %s: %w", s.partition.id, s.index, v.owner, ErrViewReleased)
	}
	if s.released {
		return fmt.Errorf("subpartition %s/%d: %w", s.partition.id, s.index, ErrPartitionReleased)
	}
	return nil
}

// spillCRC is the CRC-32C table of spill file checksums.
var spillCRC = crc32.MakeTable(crc32.Castagnoli)

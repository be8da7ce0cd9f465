package network

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
)

// This file holds the in-flight log of exactly-once local recovery (docs/taskfailover.md §2): a copy of
// every buffer a subpartition was given since the barrier of the last completed checkpoint, so that a
// restarted consumer can read its input again from that barrier. Subpartitions of partitions made with
// PartitionOptions.Log keep one.

// LogBudget is the memory a TaskManager lends its in-flight logs, shared by all of them: logs take it in
// chunks of logChunkSize and give a chunk back when truncation frees every buffer in it. Freed chunks are
// kept for reuse (up to the budget), so logs that truncate at every checkpoint allocate nothing in steady
// state. Safe for concurrent use.
type LogBudget struct {
	max  int64
	used atomic.Int64
	mu   sync.Mutex
	free [][]byte
	// Spilling (Spill): a log that needs memory the budget does not have writes its chunks to a file of
	// its own in dir, up to maxDisk bytes over all logs.
	dir      string
	maxDisk  int64
	diskUsed atomic.Int64
	files    atomic.Int64 // names the logs' spill files
}

// logChunkSize is the unit in which logs take memory; a buffer larger than it takes a chunk of its own size.
const logChunkSize = 1 << 20

// NewLogBudget returns a budget of maxBytes (at least one chunk).
func NewLogBudget(maxBytes int64) (*LogBudget, error) {
	if maxBytes < logChunkSize {
		return nil, fmt.Errorf("in-flight log budget of %d bytes is below the %d-byte chunk logs take memory in", maxBytes, logChunkSize)
	}
	return &LogBudget{max: maxBytes}, nil
}

// Spill lets logs that run out of memory write their oldest chunks to files in dir (which must exist), up to
// maxDisk bytes in all; past that they drop what they hold as without spilling. Call it before the budget
// is used.
func (b *LogBudget) Spill(dir string, maxDisk int64) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("in-flight log spill directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("in-flight log spill directory %s is not a directory", dir)
	}
	if maxDisk < logChunkSize {
		return fmt.Errorf("in-flight log disk budget of %d bytes is below one %d-byte chunk", maxDisk, logChunkSize)
	}
	b.dir, b.maxDisk = dir, maxDisk
	return nil
}

// DiskUsed returns the bytes the logs' spill files hold.
func (b *LogBudget) DiskUsed() int64 { return b.diskUsed.Load() }

// Used returns the bytes lent out.
func (b *LogBudget) Used() int64 { return b.used.Load() }

// take lends a chunk of at least n bytes, or returns nil when the budget is spent.
func (b *LogBudget) take(n int) []byte {
	size := max(n, logChunkSize)
	if b.used.Add(int64(size)) > b.max {
		b.used.Add(-int64(size))
		return nil
	}
	if size == logChunkSize {
		b.mu.Lock()
		if k := len(b.free); k > 0 {
			c := b.free[k-1]
			b.free = b.free[:k-1]
			b.mu.Unlock()
			return c[:0]
		}
		b.mu.Unlock()
	}
	return make([]byte, 0, size)
}

// give returns a chunk.
func (b *LogBudget) give(c []byte) {
	b.used.Add(-int64(cap(c)))
	if cap(c) == logChunkSize {
		b.mu.Lock()
		b.free = append(b.free, c)
		b.mu.Unlock()
	}
}

// inflightLog is one subpartition's log. Not safe for concurrent use: the subpartition's lock guards it.
//
// Positions are absolute entry indexes since the log began (entries[0] is at base); chunks are numbered
// likewise (chunks[0] is at chunkBase), and an entry's bytes lie in one chunk.
type inflightLog struct {
	budget    *LogBudget
	entries   []loggedBuffer
	base      int64
	chunks    []logChunk // oldest first; the last is appended to
	chunkBase int64
	marks     []logMark
	// validFrom is the absolute index from which the log is complete: when the budget ran out, everything
	// before the buffer that did not fit was dropped, and that buffer too.
	validFrom int64
	bytes     int64 // of the buffers held
	// file holds the chunks spilled to disk (LogBudget.Spill), fileSize bytes of them; it is emptied when
	// the last spilled chunk goes.
	file     *os.File
	fileSize int64
	scratch  []byte // a spilled buffer read back
}

type loggedBuffer struct {
	hdr   Header
	chunk int64 // absolute index of its chunk
	off   int   // where its bytes start in the chunk
	n     int   // its length
}

// logChunk is a chunk of the log's buffers, in memory (mem) or, spilled, at fileOff in the log's file.
type logChunk struct {
	mem     []byte
	spilled bool
	fileOff int64
}

type logMark struct {
	checkpoint int64
	at         int64  // absolute index of the first entry after the barrier
	seq        uint64 // the sequence number of the first record after the barrier
}

// newInflightLog returns an empty log with the mark of checkpoint 0 at its start: a consumer that restored
// no checkpoint reads from there.
func newInflightLog(budget *LogBudget) *inflightLog {
	return &inflightLog{budget: budget, marks: []logMark{{checkpoint: 0, at: 0}}}
}

// end is the absolute index after the last entry.
func (l *inflightLog) end() int64 { return l.base + int64(len(l.entries)) }

// add copies b (sealed) into the log; barrier, when not zero, says b is the barrier of that checkpoint,
// after which a consumer restored from it reads again. When the budget is spent the log drops what it
// holds and b, and is complete again only from the next buffer (validFrom): it never blocks the producer.
func (l *inflightLog) add(b *Buffer, barrier int64) {
	data := b.Bytes()
	n := len(l.chunks)
	if n == 0 || l.chunks[n-1].spilled || cap(l.chunks[n-1].mem)-len(l.chunks[n-1].mem) < len(data) {
		mem := l.budget.take(len(data))
		if mem == nil && l.spill() {
			mem = l.budget.take(len(data))
		}
		if mem == nil {
			l.dropBefore(l.end())
			l.base++ // b's place: it is not kept
			l.validFrom = l.end()
			l.marks = l.marks[:0] // every mark points into what was dropped, or at b
			return
		}
		l.chunks = append(l.chunks, logChunk{mem: mem})
		n++
	}
	c := &l.chunks[n-1]
	off := len(c.mem)
	c.mem = append(c.mem, data...)
	l.entries = append(l.entries, loggedBuffer{hdr: b.Header, chunk: l.chunkBase + int64(n-1), off: off, n: len(data)})
	l.bytes += int64(len(data))
	if barrier != 0 {
		l.marks = append(l.marks, logMark{checkpoint: barrier, at: l.end(), seq: b.FirstSeq})
	}
}

// dropBefore drops the entries before absolute index at and gives back every chunk none of whose entries
// is left.
func (l *inflightLog) dropBefore(at int64) {
	n := int(min(at, l.end()) - l.base)
	if n <= 0 {
		return
	}
	for i := range n {
		l.bytes -= int64(l.entries[i].n)
		l.entries[i] = loggedBuffer{}
	}
	l.entries = l.entries[n:]
	l.base += int64(n)
	for len(l.chunks) > 0 && (len(l.entries) == 0 || l.entries[0].chunk > l.chunkBase) {
		l.freeChunk(&l.chunks[0])
		l.chunks = l.chunks[1:]
		l.chunkBase++
	}
	l.emptyFile()
}

// freeChunk gives a chunk's memory back; a spilled chunk's bytes stay in the file until emptyFile.
func (l *inflightLog) freeChunk(c *logChunk) {
	if !c.spilled {
		l.budget.give(c.mem)
	}
	*c = logChunk{}
}

// emptyFile truncates the spill file once no spilled chunk is left: appends and drops go front to back, so
// that happens whenever a checkpoint's truncation reaches past what was spilled.
func (l *inflightLog) emptyFile() {
	if l.file == nil || l.fileSize == 0 {
		return
	}
	for i := range l.chunks {
		if l.chunks[i].spilled {
			return
		}
	}
	if err := l.file.Truncate(0); err == nil {
		l.budget.diskUsed.Add(-l.fileSize)
		l.fileSize = 0
	}
}

// spill writes the log's chunks in memory to its file, oldest first, and gives their memory back; it
// reports whether it freed any. It stops at the disk budget, and does nothing without one.
func (l *inflightLog) spill() bool {
	b := l.budget
	if b.dir == "" {
		return false
	}
	if l.file == nil {
		f, err := os.CreateTemp(b.dir, fmt.Sprintf("runnel-inflight-%d-*.log", b.files.Add(1)))
		if err != nil {
			return false
		}
		l.file = f
	}
	freed := false
	for i := range l.chunks {
		c := &l.chunks[i]
		if c.spilled || len(c.mem) == 0 {
			continue
		}
		if b.diskUsed.Add(int64(len(c.mem))) > b.maxDisk {
			b.diskUsed.Add(-int64(len(c.mem)))
			break
		}
		if _, err := l.file.WriteAt(c.mem, l.fileSize); err != nil {
			b.diskUsed.Add(-int64(len(c.mem)))
			break
		}
		c.fileOff, c.spilled = l.fileSize, true
		l.fileSize += int64(len(c.mem))
		b.give(c.mem)
		c.mem = nil
		freed = true
	}
	return freed
}

// entryBytes returns the bytes of entry e: a slice of its chunk in memory, or, spilled, read back into the
// log's scratch (valid until the next call).
func (l *inflightLog) entryBytes(e loggedBuffer) ([]byte, error) {
	c := &l.chunks[e.chunk-l.chunkBase]
	if !c.spilled {
		return c.mem[e.off : e.off+e.n : e.off+e.n], nil
	}
	if cap(l.scratch) < e.n {
		l.scratch = make([]byte, e.n)
	}
	buf := l.scratch[:e.n]
	if _, err := l.file.ReadAt(buf, c.fileOff+int64(e.off)); err != nil {
		return nil, fmt.Errorf("in-flight log: read a spilled buffer back: %w", err)
	}
	return buf, nil
}

// close removes the log's spill file and gives everything back.
func (l *inflightLog) close() error {
	l.dropBefore(l.end())
	if l.file == nil {
		return nil
	}
	l.budget.diskUsed.Add(-l.fileSize)
	l.fileSize = 0
	err := errors.Join(l.file.Close(), os.Remove(l.file.Name()))
	l.file = nil
	return err
}

// truncate drops what came before the barrier of checkpoint id, which completed: no consumer is restored
// from an older one. The marks of older checkpoints go too; id's stays, for consumers that restore it.
func (l *inflightLog) truncate(id int64) {
	i := 0
	for i < len(l.marks) && l.marks[i].checkpoint < id {
		i++
	}
	l.marks = append(l.marks[:0], l.marks[i:]...)
	if len(l.marks) > 0 && l.marks[0].checkpoint == id {
		l.dropBefore(l.marks[0].at)
	}
}

// markOf returns the mark of checkpoint id, if the log has it and is complete from there.
func (l *inflightLog) markOf(id int64) (logMark, int, bool) {
	for i, m := range l.marks {
		if m.checkpoint == id {
			return m, i, m.at >= l.validFrom
		}
	}
	return logMark{}, -1, false
}

// cutBack drops what came after the barrier of checkpoint id: a new attempt of the producer restored id
// and regenerates it. It reports false when the log has no mark of id (nothing is dropped then).
func (l *inflightLog) cutBack(id int64) bool {
	_, i, ok := l.markOf(id)
	if !ok {
		return false
	}
	at := l.marks[i].at
	for j := int(at - l.base); j < len(l.entries); j++ {
		l.bytes -= int64(l.entries[j].n)
		l.entries[j] = loggedBuffer{}
	}
	l.entries = l.entries[:at-l.base]
	l.marks = l.marks[:i+1]
	keep := 0 // chunks up to the last kept entry's
	if k := len(l.entries); k > 0 {
		keep = int(l.entries[k-1].chunk-l.chunkBase) + 1
	}
	for j := keep; j < len(l.chunks); j++ {
		l.freeChunk(&l.chunks[j])
	}
	l.chunks = l.chunks[:keep]
	if keep > 0 && !l.chunks[keep-1].spilled {
		// Appends go on right after the last entry kept (after a spilled chunk, in a new one).
		last := l.entries[len(l.entries)-1]
		c := &l.chunks[keep-1]
		c.mem = c.mem[:last.off+last.n]
	}
	l.emptyFile()
	return true
}

// inflightReader reads a log from a mark on, while the log grows.
type inflightReader struct {
	l  *inflightLog
	at int64
	// until bounds what a view replays: the log's end when the view was made.
	until int64
}

// readerAt returns a reader from the barrier of checkpoint id, or an error saying why the log cannot give
// one: no mark of id (truncated, or never taken), or the log is not complete that far back.
func (l *inflightLog) readerAt(id int64) (*inflightReader, error) {
	for _, m := range l.marks {
		if m.checkpoint == id {
			if m.at < l.validFrom {
				return nil, fmt.Errorf("in-flight log: incomplete before entry %d, and checkpoint %d's barrier is at %d", l.validFrom, id, m.at)
			}
			return &inflightReader{l: l, at: m.at, until: math.MaxInt64}, nil
		}
	}
	return nil, fmt.Errorf("in-flight log: no barrier of checkpoint %d (the log was complete from entry %d, and truncated to %d)", id, l.validFrom, l.base)
}

// next returns the next logged buffer's header and bytes (valid until the log drops them), or ok false at
// the end of what was logged so far.
func (r *inflightReader) next() (h Header, data []byte, ok bool, err error) {
	l := r.l
	if r.at < l.base {
		return Header{}, nil, false, fmt.Errorf("in-flight log: reader at entry %d, dropped (the log starts at %d)", r.at, l.base)
	}
	if r.at >= l.end() {
		return Header{}, nil, false, nil
	}
	e := l.entries[r.at-l.base]
	data, err = l.entryBytes(e)
	if err != nil {
		return Header{}, nil, false, err
	}
	r.at++
	return e.hdr, data, true, nil
}

package network

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
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
//
// With Spill, a goroutine of the budget's own (the spiller) writes the logs' oldest chunks to disk once
// more than three quarters of the memory is lent, until half of it is free again: a producer never writes
// to disk, never waits for the spiller, and finds memory free as long as the spiller keeps up. When it
// does not (the disk is slower than the producers, its budget is spent, or a write failed), a log that
// finds no memory drops what it holds, as without spilling, and the job master falls back to region
// failover for a failure that needs it (docs/taskfailover.md §7).
type LogBudget struct {
	max  int64
	used atomic.Int64
	mu   sync.Mutex
	free [][]byte
	// Spilling (Spill): logs' chunks go to a file per log in dir, up to maxDisk bytes over all logs.
	dir      string
	maxDisk  int64
	diskUsed atomic.Int64
	files    atomic.Int64 // names the logs' spill files
	// high and low are the spiller's marks: it is woken when a chunk is taken past high and spills down to
	// low.
	high, low int64
	// diskFull is set when the spiller found no room on disk for a chunk, and cleared when a log gives disk
	// back: until then waking it is pointless.
	diskFull atomic.Bool
	wake     chan struct{} // capacity 1: a pending wake-up
	stop     chan struct{}
	done     chan struct{} // closed when the spiller has returned
	stopOnce sync.Once
	// writeAt writes a chunk to a spill file ((*os.File).WriteAt; tests slow it down or fail it).
	writeAt func(f *os.File, p []byte, off int64) (int, error)

	// logsMu guards logs and truncs. Lock order: a log's lock (its subpartition's), then logsMu.
	logsMu sync.Mutex
	logs   map[*inflightLog]struct{} // the open logs, for the spiller to choose from
	truncs []*inflightLog            // logs whose spill file emptied, for the spiller to truncate

	spilled     atomic.Int64 // bytes written to spill files, ever
	spillErrors atomic.Int64 // chunk writes that failed
	drops       atomic.Int64 // times a log found no memory and dropped what it held
}

// logChunkSize is the unit in which logs take memory; a buffer larger than it takes a chunk of its own size.
const logChunkSize = 1 << 20

// NewLogBudget returns a budget of maxBytes (at least one chunk).
func NewLogBudget(maxBytes int64) (*LogBudget, error) {
	if maxBytes < logChunkSize {
		return nil, fmt.Errorf("in-flight log budget of %d bytes is below the %d-byte chunk logs take memory in", maxBytes, logChunkSize)
	}
	return &LogBudget{max: maxBytes, logs: make(map[*inflightLog]struct{})}, nil
}

// Spill lets logs spill their chunks to files in dir (which must exist), up to maxDisk bytes in all, and
// starts the spiller goroutine; past maxDisk they drop what they hold as without spilling. Call it once,
// before the budget is used, and Close when the budget's logs are done with.
func (b *LogBudget) Spill(dir string, maxDisk int64) error {
	if err := b.configureSpill(dir, maxDisk); err != nil {
		return err
	}
	b.stop, b.done = make(chan struct{}), make(chan struct{})
	go b.runSpiller()
	return nil
}

// configureSpill sets the spill directory and disk budget without starting the spiller (tests drive it
// with spillDown).
func (b *LogBudget) configureSpill(dir string, maxDisk int64) error {
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
	if b.dir != "" {
		return fmt.Errorf("in-flight log budget: Spill called twice (spilling to %s already)", b.dir)
	}
	b.dir, b.maxDisk = dir, maxDisk
	b.high, b.low = b.max/4*3, b.max/2
	b.wake = make(chan struct{}, 1)
	if b.writeAt == nil {
		b.writeAt = (*os.File).WriteAt
	}
	return nil
}

// Close stops the spiller and waits for it: for at most the chunk it is writing (a chunk is 1 MiB, or one
// buffer larger than that) and the spill files it was asked to truncate. Logs still open keep working
// after it, without spilling; their files go when they close. Idempotent; a no-op without Spill.
func (b *LogBudget) Close() {
	if b.stop == nil {
		return
	}
	b.stopOnce.Do(func() { close(b.stop) })
	<-b.done
}

// DiskUsed returns the bytes the logs' spill files hold.
func (b *LogBudget) DiskUsed() int64 { return b.diskUsed.Load() }

// Used returns the bytes lent out.
func (b *LogBudget) Used() int64 { return b.used.Load() }

// Max returns the memory of the budget.
func (b *LogBudget) Max() int64 { return b.max }

// MaxDisk returns the bytes the logs may spill to disk in all (0 without Spill).
func (b *LogBudget) MaxDisk() int64 { return b.maxDisk }

// LogBudgetStats counts what a budget's logs did over its life.
type LogBudgetStats struct {
	// BytesSpilled counts the bytes the spiller wrote to spill files.
	BytesSpilled int64
	// SpillErrors counts chunk writes that failed (the log they were for spills no more).
	SpillErrors int64
	// Drops counts the times a log found no memory and dropped what it held, becoming incomplete.
	Drops int64
	// Logs is the number of open logs.
	Logs int
}

// Stats returns the budget's counters.
func (b *LogBudget) Stats() LogBudgetStats {
	b.logsMu.Lock()
	n := len(b.logs)
	b.logsMu.Unlock()
	return LogBudgetStats{BytesSpilled: b.spilled.Load(), SpillErrors: b.spillErrors.Load(), Drops: b.drops.Load(), Logs: n}
}

// take lends a chunk of at least n bytes, or returns nil when the budget is spent. Past the high mark it
// wakes the spiller, without waiting for it.
func (b *LogBudget) take(n int) []byte {
	size := max(n, logChunkSize)
	used := b.used.Add(int64(size))
	if used > b.high {
		b.poke()
	}
	if used > b.max {
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

// poke wakes the spiller if there is one and the disk has room; it never blocks.
func (b *LogBudget) poke() {
	if b.wake == nil || b.diskFull.Load() {
		return
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// gaveDisk notes that a log gave n bytes of disk back.
func (b *LogBudget) gaveDisk(n int64) {
	b.diskUsed.Add(-n)
	b.diskFull.Store(false)
}

func (b *LogBudget) register(l *inflightLog) {
	b.logsMu.Lock()
	b.logs[l] = struct{}{}
	b.logsMu.Unlock()
}

func (b *LogBudget) unregister(l *inflightLog) {
	b.logsMu.Lock()
	delete(b.logs, l)
	b.logsMu.Unlock()
}

// runSpiller is the spiller goroutine: woken past the high mark, it truncates the files that emptied and
// spills down to the low mark.
func (b *LogBudget) runSpiller() {
	defer close(b.done)
	for {
		select {
		case <-b.stop:
			b.truncateFiles()
			return
		case <-b.wake:
		}
		b.truncateFiles()
		b.spillDown(b.low, b.stop)
	}
}

// spillDown spills chunks, the oldest of the log with the most memory first, until at most target bytes
// are lent, stop closes, or nothing more can be spilled. The spiller's loop; tests call it directly.
func (b *LogBudget) spillDown(target int64, stop <-chan struct{}) {
	for b.used.Load() > target && !b.diskFull.Load() {
		select {
		case <-stop:
			return
		default:
		}
		l := b.fullest()
		if l == nil || !l.spillOne() {
			return
		}
	}
}

// fullest returns the open log with the most memory it could spill, or nil.
func (b *LogBudget) fullest() *inflightLog {
	b.logsMu.Lock()
	defer b.logsMu.Unlock()
	var best *inflightLog
	var most int64
	for l := range b.logs {
		if n := l.inMemory.Load(); n > most && !l.broken.Load() {
			best, most = l, n
		}
	}
	return best
}

// truncateFiles truncates the spill files that emptied (inflightLog.emptyFile) to what they hold now.
func (b *LogBudget) truncateFiles() {
	b.logsMu.Lock()
	ts := b.truncs
	b.truncs = nil
	b.logsMu.Unlock()
	for _, l := range ts {
		l.mu.Lock()
		if !l.truncPending || l.closed || l.file == nil {
			l.mu.Unlock()
			continue
		}
		l.truncPending = false
		// Only this goroutine writes to the file, so its size cannot change before the truncation.
		f, size := l.file, l.fileSize
		l.mu.Unlock()
		// A file closed meanwhile (its log closed) fails here, and is gone anyway.
		_ = f.Truncate(size)
	}
}

// inflightLog is one subpartition's log. Not safe for concurrent use: the subpartition's lock (mu) guards
// it, and the budget's spiller takes that lock too.
//
// Positions are absolute entry indexes since the log began (entries[0] is at base); chunks are numbered
// likewise (chunks[0] is at chunkBase), and an entry's bytes lie in one chunk.
type inflightLog struct {
	budget    *LogBudget
	mu        *sync.Mutex
	entries   []loggedBuffer
	base      int64
	chunks    []logChunk // oldest first; the last is appended to
	chunkBase int64
	marks     []logMark
	// jumps are the marks of barriers that overtook entries (logMark.jumps), oldest first, as long as
	// their own entries are held: a reader passes over the entries of those it has had where it started,
	// or hands them on where they jumped to. A completed checkpoint drops its older marks from marks, not
	// from here: their barriers' entries may still lie ahead of a reader.
	jumps []logMark
	// validFrom is the absolute index from which the log is complete: when the budget ran out, everything
	// before the buffer that did not fit was dropped, and that buffer too.
	validFrom int64
	bytes     int64 // of the buffers held
	// file holds the chunks spilled to disk (LogBudget.Spill), fileSize bytes of them (with the chunk being
	// written); it is emptied when the last spilled chunk goes, and truncated by the spiller.
	file     *os.File
	fileSize int64
	scratch  []byte // a spilled buffer read back
	// writing is the chunk the spiller is writing, or nil: the spiller writes one chunk at a time, without
	// the lock, so the log neither appends to it nor gives its memory back meanwhile.
	writing      *spillWrite
	truncPending bool // the file emptied: the spiller is to truncate it
	closed       bool
	// inMemory is the memory of the chunks the spiller could take (in memory, not being written); written
	// under mu, read by the spiller to choose a log.
	inMemory atomic.Int64
	broken   atomic.Bool // a write to the file failed: the log spills no more
}

// spillWrite is a chunk on its way to the file.
type spillWrite struct {
	chunk   int64  // absolute index
	mem     []byte // the chunk's memory, as it was when the spiller took it
	off     int64  // where it goes in the file
	dropped bool   // the log dropped the chunk meanwhile: its memory is the spiller's to give back
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
	writing bool // the spiller is writing mem to the file (inflightLog.writing)
	fileOff int64
}

type logMark struct {
	checkpoint int64
	at         int64  // absolute index of the first entry after the barrier
	seq        uint64 // the sequence number of the first record after the barrier
	// jumpTo is where the barrier stands in the reader's order: the absolute index of the first entry it
	// overtook (an unaligned checkpoint's barrier, overtake.go), or its own entry, at-1.
	jumpTo int64
}

// jumps reports whether the barrier overtook entries before its own.
func (m logMark) jumps() bool { return m.jumpTo < m.at-1 }

// from is where a consumer restored from the mark's checkpoint reads on: after the barrier in the reader's
// order.
func (m logMark) from() int64 {
	if m.jumps() {
		return m.jumpTo
	}
	return m.at
}

// newInflightLog returns an empty log, guarded by mu, with the mark of checkpoint 0 at its start: a
// consumer that restored no checkpoint reads from there. It is the budget's until close.
func newInflightLog(budget *LogBudget, mu *sync.Mutex) *inflightLog {
	l := &inflightLog{budget: budget, mu: mu, marks: []logMark{{checkpoint: 0, at: 0, jumpTo: -1}}}
	budget.register(l)
	return l
}

// end is the absolute index after the last entry.
func (l *inflightLog) end() int64 { return l.base + int64(len(l.entries)) }

// add copies b (sealed) into the log; barrier, when not zero, says b is the barrier of that checkpoint,
// after which a consumer restored from it reads again. When the budget is spent the log drops what it
// holds and b, and is complete again only from the next buffer (validFrom): it never blocks the producer,
// and never touches the disk (the spiller does, LogBudget).
func (l *inflightLog) add(b *Buffer, barrier int64) {
	data := b.Bytes()
	n := len(l.chunks)
	if n == 0 || l.chunks[n-1].spilled || l.chunks[n-1].writing || cap(l.chunks[n-1].mem)-len(l.chunks[n-1].mem) < len(data) {
		mem := l.budget.take(len(data))
		if mem == nil {
			l.budget.drops.Add(1)
			l.dropBefore(l.end())
			l.base++ // b's place: it is not kept
			l.validFrom = l.end()
			l.marks = l.marks[:0] // every mark points into what was dropped, or at b
			return
		}
		l.chunks = append(l.chunks, logChunk{mem: mem})
		l.inMemory.Add(int64(cap(mem)))
		n++
	}
	c := &l.chunks[n-1]
	off := len(c.mem)
	c.mem = append(c.mem, data...)
	l.entries = append(l.entries, loggedBuffer{hdr: b.Header, chunk: l.chunkBase + int64(n-1), off: off, n: len(data)})
	l.bytes += int64(len(data))
	if barrier != 0 {
		l.marks = append(l.marks, logMark{checkpoint: barrier, at: l.end(), seq: b.FirstSeq, jumpTo: l.end() - 1})
	}
}

// addJumping adds b, the barrier of checkpoint id that overtook the entries from absolute index jumpTo on
// (overtake.go); seq is the producer's next record, where a takeover from id numbers on. A jump into what
// the log dropped is kept as the barrier's own place: no reader can start there.
func (l *inflightLog) addJumping(b *Buffer, id int64, seq uint64, jumpTo int64) {
	l.add(b, 0)
	if len(l.entries) == 0 || l.end() <= l.validFrom {
		return // b itself was dropped for the budget
	}
	at := l.end()
	if jumpTo < l.base || jumpTo < l.validFrom || jumpTo > at-1 {
		jumpTo = at - 1
	}
	m := logMark{checkpoint: id, at: at, seq: seq, jumpTo: jumpTo}
	l.marks = append(l.marks, m)
	if m.jumps() {
		l.jumps = append(l.jumps, m)
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
	k := 0
	for k < len(l.jumps) && l.jumps[k].at-1 < l.base {
		k++
	}
	l.jumps = append(l.jumps[:0], l.jumps[k:]...)
	for len(l.chunks) > 0 && (len(l.entries) == 0 || l.entries[0].chunk > l.chunkBase) {
		l.freeChunk(&l.chunks[0])
		l.chunks = l.chunks[1:]
		l.chunkBase++
	}
	l.emptyFile()
}

// freeChunk gives a chunk's memory back; a spilled chunk's bytes stay in the file until emptyFile, and a
// chunk being written is left to the spiller, which gives its memory back when the write is done.
func (l *inflightLog) freeChunk(c *logChunk) {
	switch {
	case c.writing:
		l.writing.dropped = true
	case !c.spilled:
		l.inMemory.Add(-int64(cap(c.mem)))
		l.budget.give(c.mem)
	}
	*c = logChunk{}
}

// emptyFile empties the spill file's account once no spilled chunk is left (appends and drops go front to
// back, so that happens whenever a checkpoint's truncation reaches past what was spilled), and asks the
// spiller to truncate the file: no disk call is made here, on the producer's goroutine.
func (l *inflightLog) emptyFile() {
	if l.file == nil || l.fileSize == 0 || l.writing != nil {
		return
	}
	for i := range l.chunks {
		if l.chunks[i].spilled {
			return
		}
	}
	l.budget.gaveDisk(l.fileSize)
	l.fileSize = 0
	if !l.truncPending && !l.closed {
		l.truncPending = true
		b := l.budget
		b.logsMu.Lock()
		b.truncs = append(b.truncs, l)
		b.logsMu.Unlock()
		b.poke()
	}
}

// spillOne writes the log's oldest chunk in memory to its file and gives its memory back; the spiller's
// step. It takes the log's lock only to choose the chunk and to account for it, never across the write. It
// reports whether it freed memory.
func (l *inflightLog) spillOne() bool {
	b := l.budget
	l.mu.Lock()
	if l.closed || l.broken.Load() || l.writing != nil {
		l.mu.Unlock()
		return false
	}
	if l.file == nil {
		l.mu.Unlock()
		f, err := os.CreateTemp(b.dir, fmt.Sprintf("runnel-inflight-%d-*.log", b.files.Add(1)))
		if err != nil {
			b.spillErrors.Add(1)
			l.broken.Store(true)
			return false
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = errors.Join(f.Close(), os.Remove(f.Name()))
			return false
		}
		l.file = f
	}
	i := 0
	for i < len(l.chunks) && (l.chunks[i].spilled || len(l.chunks[i].mem) == 0) {
		i++
	}
	if i == len(l.chunks) {
		l.mu.Unlock()
		return false
	}
	c := &l.chunks[i]
	size := int64(len(c.mem))
	if b.diskUsed.Add(size) > b.maxDisk {
		b.diskUsed.Add(-size)
		b.diskFull.Store(true)
		if b.diskUsed.Load()+size <= b.maxDisk { // disk given back meanwhile
			b.diskFull.Store(false)
		}
		l.mu.Unlock()
		return false
	}
	w := &spillWrite{chunk: l.chunkBase + int64(i), mem: c.mem, off: l.fileSize}
	c.writing = true
	l.writing = w
	l.fileSize += size
	l.inMemory.Add(-int64(cap(c.mem)))
	f := l.file
	l.mu.Unlock()

	_, err := b.writeAt(f, w.mem, w.off)

	l.mu.Lock()
	l.writing = nil
	switch {
	case err != nil:
		l.fileSize -= size // the write was the file's last
		b.gaveDisk(size)
		b.spillErrors.Add(1)
		l.broken.Store(true)
		if w.dropped {
			b.give(w.mem)
		} else {
			c := &l.chunks[w.chunk-l.chunkBase]
			c.writing = false
			l.inMemory.Add(int64(cap(c.mem)))
		}
	case w.dropped:
		b.give(w.mem)
	default:
		c := &l.chunks[w.chunk-l.chunkBase]
		c.writing, c.spilled, c.fileOff, c.mem = false, true, w.off, nil
		b.give(w.mem)
		b.spilled.Add(size)
	}
	if l.closed {
		// close left the file to this write.
		b.gaveDisk(l.fileSize)
		l.fileSize = 0
		l.file = nil
		l.mu.Unlock()
		_ = errors.Join(f.Close(), os.Remove(f.Name()))
		return err == nil
	}
	l.emptyFile()
	l.mu.Unlock()
	return err == nil
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

// close removes the log's spill file and gives everything back; a chunk being written is given back, and
// the file removed, by the spiller when its write is done. A log that cannot remove its file leaves it for
// the TaskManager's spill directory to take with it.
func (l *inflightLog) close() error {
	l.dropBefore(l.end())
	if l.closed {
		return nil
	}
	l.closed = true
	l.budget.unregister(l)
	if l.file == nil || l.writing != nil {
		return nil
	}
	l.budget.gaveDisk(l.fileSize)
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
		l.dropBefore(l.marks[0].from())
	}
}

// markOf returns the mark of checkpoint id, if the log has it and is complete from there.
func (l *inflightLog) markOf(id int64) (logMark, int, bool) {
	for i, m := range l.marks {
		if m.checkpoint == id {
			return m, i, m.from() >= l.validFrom
		}
	}
	return logMark{}, -1, false
}

// inflightReader reads a log from a mark on, while the log grows. It hands a barrier that overtook
// entries (logMark.jumps) where it jumped to, and passes over its own entry.
type inflightReader struct {
	l  *inflightLog
	at int64
	// until bounds what a view replays: the log's end when the view was made.
	until int64
	// jumped is the newest checkpoint whose jumping barrier the reader has handed on (or passed: the
	// one it started after), and skip the entries of such barriers still ahead, to pass over.
	jumped int64
	skip   []int64
}

// newReader returns a reader from mark m on: after its barrier, in the reader's order. The entries of
// barriers that stand before that place in the reader's order (m's own, and those of older checkpoints
// that jumped there or before) are passed over where they lie.
func (l *inflightLog) newReader(m logMark) *inflightReader {
	start := m.from()
	r := &inflightReader{l: l, at: start, until: math.MaxInt64, jumped: m.checkpoint}
	for _, o := range l.jumps {
		before := o.jumpTo < start || (o.jumpTo == start && o.checkpoint <= m.checkpoint)
		if before && o.at-1 >= start {
			r.skip = append(r.skip, o.at-1)
		}
	}
	slices.Sort(r.skip)
	return r
}

// readerAt returns a reader from the barrier of checkpoint id, or an error saying why the log cannot give
// one: no mark of id (truncated, or never taken), or the log is not complete that far back.
func (l *inflightLog) readerAt(id int64) (*inflightReader, error) {
	for _, m := range l.marks {
		if m.checkpoint == id {
			if m.from() < l.validFrom {
				return nil, fmt.Errorf("in-flight log: checkpoint %d's barrier is at entry %d, but the log dropped what it held before entry %d: it went past its memory and disk budget", id, m.from(), l.validFrom)
			}
			return l.newReader(m), nil
		}
	}
	held := make([]int64, 0, len(l.marks))
	for _, m := range l.marks {
		held = append(held, m.checkpoint)
	}
	if l.validFrom > 0 {
		// Only a drop past the budget moves validFrom, and it takes the marks with what it drops.
		return nil, fmt.Errorf("in-flight log: no barrier of checkpoint %d: the log dropped what it held before entry %d, past its memory and disk budget (it holds the barriers of checkpoints %v)", id, l.validFrom, held)
	}
	return nil, fmt.Errorf("in-flight log: no barrier of checkpoint %d: it holds the barriers of checkpoints %v, from entry %d (what came before was truncated when a checkpoint completed), and dropped nothing for its budget", id, held, l.base)
}

// readerEnded returns, for a log whose stream ended before any barrier of checkpoint id went into it (its
// producer finished first), a reader from the newest barrier before id: what follows it is all there is.
func (l *inflightLog) readerEnded(id int64) (*inflightReader, bool) {
	best := -1
	for i, m := range l.marks {
		if m.checkpoint < id {
			best = i
		}
	}
	if best < 0 || l.marks[best].from() < l.validFrom {
		return nil, false
	}
	return l.newReader(l.marks[best]), true
}

// next returns the next logged buffer's header and bytes (valid until the log drops them), or ok false at
// the end of what was logged so far.
func (r *inflightReader) next() (h Header, data []byte, ok bool, err error) {
	l := r.l
	if r.at < l.base {
		return Header{}, nil, false, fmt.Errorf("in-flight log: reader at entry %d, dropped (the log starts at %d)", r.at, l.base)
	}
	for len(r.skip) > 0 && r.at == r.skip[0] {
		r.skip = r.skip[1:]
		r.at++
	}
	if r.at >= l.end() || r.at >= r.until {
		return Header{}, nil, false, nil
	}
	idx := r.at
	if m, ok := r.jumpHere(); ok {
		// The barrier stands here in the reader's order; its own entry is passed over when reached.
		r.jumped = m.checkpoint
		r.skip = append(r.skip, m.at-1)
		idx = m.at - 1
	} else {
		r.at++
	}
	if idx < l.base {
		return Header{}, nil, false, fmt.Errorf("in-flight log: reader at entry %d, dropped (the log starts at %d)", idx, l.base)
	}
	e := l.entries[idx-l.base]
	data, err = l.entryBytes(e)
	if err != nil {
		return Header{}, nil, false, err
	}
	return e.hdr, data, true, nil
}

// jumpHere returns the mark of the next checkpoint after r.jumped whose barrier jumped to r.at.
func (r *inflightReader) jumpHere() (logMark, bool) {
	for _, m := range r.l.jumps {
		if m.checkpoint > r.jumped && m.jumpTo == r.at {
			return m, true
		}
	}
	return logMark{}, false
}

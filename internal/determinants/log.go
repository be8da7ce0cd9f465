// Package determinants owns a subtask's determinant log for exactly-once local recovery (docs/taskfailover.md
// §3): the record of every step the subtask took that its inputs alone do not decide (which input channel it
// took each buffer or event from, the processing time it read, when its timers ran, how many records each
// source poll emitted, when a source's periodic watermark went out), in the order it took them, so that a
// new attempt can take the same steps again. The log is a value: no goroutines, clocks or I/O. Its owner (the
// TaskManager, which outlives a failed attempt) serializes every call; it must not be shared by two attempts
// at once.
//
// The log is bounded (Config.MaxBytes); an append past the bound breaks the log rather than grow it or block
// the task: a broken log cannot be replayed, and the job master falls back to region failover for the failed
// subtask. Nothing is silently lost.
package determinants

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind says what a step was.
type Kind uint8

// The kinds of steps (docs/taskfailover.md §3.1).
const (
	// Buffer: the task took a data buffer from input channel Channel.
	Buffer Kind = iota + 1
	// Event: the task took an event (barrier, watermark, status, end of partition) from input channel Channel.
	Event
	// Time: the task's processing time, as its operators see it, became Value (epoch ms).
	Time
	// Timers: processing-time timers ran at Value (epoch ms).
	Timers
	// Poll: a source poll emitted Value records.
	Poll
	// Watermark: a source's periodic watermark generator ran at this point and emitted Value.
	Watermark
	maxKind = Watermark
)

// String names the kind as the design does.
func (k Kind) String() string {
	switch k {
	case Buffer:
		return "buffer"
	case Event:
		return "event"
	case Time:
		return "time"
	case Timers:
		return "timers"
	case Poll:
		return "poll"
	case Watermark:
		return "watermark"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Entry is one step. Channel is meaningful for Buffer and Event. Value, for Buffer and Event, is the
// number of records the task emitted since its previous Buffer or Event step (never negative): a replay
// that emits another number has diverged (docs/taskfailover.md §8); for the other kinds it is as they say.
type Entry struct {
	Kind    Kind
	Channel int
	Value   int64
}

// String formats the entry for tests and logs: "buffer(3)", "time(1700000000000)".
func (e Entry) String() string {
	if e.Kind == Buffer || e.Kind == Event {
		return fmt.Sprintf("%s(%d)", e.Kind, e.Channel)
	}
	return fmt.Sprintf("%s(%d)", e.Kind, e.Value)
}

// Config bounds a log.
type Config struct {
	// MaxBytes bounds the encoded entries the log keeps (after truncation); an append past it breaks the log.
	MaxBytes int
	// MaxMarks bounds the checkpoint marks kept (checkpoints whose barrier the task took and that neither
	// completed nor were forgotten yet); a mark past it breaks the log.
	MaxMarks int
}

// DefaultConfig is 16 MiB of entries (about half a million buffers of input, 16 GiB of data at 32 KiB
// buffers, between two completed checkpoints) and 64 marks (the coordinator's concurrent checkpoints are
// far fewer).
func DefaultConfig() Config { return Config{MaxBytes: 16 << 20, MaxMarks: 64} }

// ErrBroken is wrapped by the error of a log that went past its bound.
var ErrBroken = errors.New("determinant log broken")

// ErrNoMark is wrapped by the error of ReaderAt for a checkpoint the log has no mark of: it does not reach
// back to where the new attempt restored, so there is nothing to replay from.
var ErrNoMark = errors.New("determinant log has no mark")

// segmentSize is the size of the chunks the log keeps its bytes in: truncation frees whole segments, so no
// append copies what came before.
const segmentSize = 64 << 10

// Log is a subtask's determinant log since the last completed checkpoint. The zero value is not usable:
// call New.
type Log struct {
	cfg Config
	// segments hold the encoded entries, each segment at most segmentSize bytes and never an entry split
	// over two; segments[0][head:] is the oldest kept byte, and the last segment is the one appended to.
	// Positions are absolute: segment i starts at start + i·segmentSize (a segment's unused tail is skipped
	// by readers), so marks stay valid across truncations.
	segments [][]byte
	start    int64 // absolute position of segments[0][0]
	head     int   // offset in segments[0] of the oldest kept entry
	end      int64 // absolute position after the last entry
	// appended and appendedBytes count entries and their bytes since the log began; dropped and
	// droppedBytes those truncated.
	appended, appendedBytes int64
	dropped, droppedBytes   int64
	marks                   []mark
	broken                  error
	spare                   [][]byte // freed segments, reused
}

type mark struct {
	checkpoint int64
	at         int64 // absolute position of the first entry after the barrier
	entries    int64 // appended before it
	bytes      int64 // appendedBytes before it
}

// New returns an empty log.
func New(cfg Config) (*Log, error) {
	if cfg.MaxBytes < 1 || cfg.MaxMarks < 1 {
		return nil, fmt.Errorf("determinant log: MaxBytes and MaxMarks must be positive, got %d and %d", cfg.MaxBytes, cfg.MaxMarks)
	}
	return &Log{cfg: cfg, marks: []mark{{checkpoint: 0}}}, nil
}

// Broken returns the error that broke the log, or nil.
func (l *Log) Broken() error { return l.broken }

// Bytes returns the encoded size of the entries kept.
func (l *Log) Bytes() int { return int(l.appendedBytes - l.droppedBytes) }

// Len returns the number of entries kept.
func (l *Log) Len() int64 { return l.appended - l.dropped }

// Append records one step. It allocates only when a new segment is needed (every 64 KiB of entries, and not
// at all once truncation has freed segments). Past the bound the log breaks: the entry is not kept, and
// Append returns an error wrapping ErrBroken (so does every later call until Reset).
func (l *Log) Append(e Entry) error {
	if l.broken != nil {
		return l.broken
	}
	if e.Kind < Buffer || e.Kind > maxKind {
		return fmt.Errorf("determinant log: append of an entry of %s", e.Kind)
	}
	var tmp [1 + 2*binary.MaxVarintLen64]byte
	tmp[0] = byte(e.Kind)
	var n int
	if e.Kind == Buffer || e.Kind == Event {
		if e.Channel < 0 {
			return fmt.Errorf("determinant log: %s of channel %d", e.Kind, e.Channel)
		}
		if e.Value < 0 {
			return fmt.Errorf("determinant log: %s of channel %d after %d records", e.Kind, e.Channel, e.Value)
		}
		n = 1 + binary.PutUvarint(tmp[1:], uint64(e.Channel))
		n += binary.PutUvarint(tmp[n:], uint64(e.Value))
	} else {
		n = 1 + binary.PutVarint(tmp[1:], e.Value)
	}
	if l.Bytes()+n > l.cfg.MaxBytes {
		l.broken = fmt.Errorf("%w: %d bytes of entries since the last completed checkpoint, above the bound of %d",
			ErrBroken, l.Bytes()+n, l.cfg.MaxBytes)
		return l.broken
	}
	last := len(l.segments) - 1
	if last < 0 || len(l.segments[last])+n > segmentSize {
		if last >= 0 {
			l.end = l.start + int64(last+1)*segmentSize // skip the full segment's unused tail
		}
		var seg []byte
		if k := len(l.spare); k > 0 {
			seg, l.spare = l.spare[k-1][:0], l.spare[:k-1]
		} else {
			seg = make([]byte, 0, segmentSize)
		}
		l.segments = append(l.segments, seg)
		last++
	}
	l.segments[last] = append(l.segments[last], tmp[:n]...)
	l.end += int64(n)
	l.appended++
	l.appendedBytes += int64(n)
	return nil
}

// Mark records that the task took the barrier of checkpoint id here: a Truncate(id) drops every entry before
// this point. Marks must come in increasing id order.
func (l *Log) Mark(id int64) error {
	if l.broken != nil {
		return l.broken
	}
	if n := len(l.marks); n > 0 && l.marks[n-1].checkpoint >= id {
		return fmt.Errorf("determinant log: mark of checkpoint %d after checkpoint %d", id, l.marks[n-1].checkpoint)
	}
	n := len(l.marks) // marks of checkpoints, not the log's start
	if n > 0 && l.marks[0].checkpoint == 0 {
		n--
	}
	if n >= l.cfg.MaxMarks {
		l.broken = fmt.Errorf("%w: %d checkpoints taken and not completed, above the bound of %d", ErrBroken, n+1, l.cfg.MaxMarks)
		return l.broken
	}
	l.marks = append(l.marks, mark{checkpoint: id, at: l.end, entries: l.appended, bytes: l.appendedBytes})
	return nil
}

// Truncate drops every entry before the mark of checkpoint id, which completed, and the marks of older
// checkpoints: no restore will go back further. Id's mark stays, for ReaderAt(id). A checkpoint the task
// took no mark for (it was not part of it) drops the marks of older ones only.
func (l *Log) Truncate(id int64) {
	i := 0
	for i < len(l.marks) && l.marks[i].checkpoint < id {
		i++
	}
	l.marks = append(l.marks[:0], l.marks[i:]...)
	if len(l.marks) == 0 || l.marks[0].checkpoint != id {
		return
	}
	m := l.marks[0]
	l.dropped, l.droppedBytes = m.entries, m.bytes
	// Free the segments wholly before the mark (never the one appended to), then move head within the
	// first one left.
	for len(l.segments) > 1 && l.start+segmentSize <= m.at {
		l.spare = append(l.spare, l.segments[0])
		l.segments[0] = nil
		l.segments = l.segments[1:]
		l.start += segmentSize
	}
	if len(l.segments) == 0 {
		return
	}
	l.head = int(m.at - l.start)
	if len(l.segments) == 1 && m.at == l.end {
		// Everything was dropped: the one segment starts afresh.
		l.segments[0] = l.segments[0][:0]
		l.start, l.head = l.end, 0
	}
}

// ReaderAt returns a cursor from the mark of checkpoint id (0: the log's start, while nothing was
// truncated): the steps a new attempt that restored id replays. It fails when the log has no such mark.
func (l *Log) ReaderAt(id int64) (*Reader, error) {
	if l.broken != nil {
		return nil, l.broken
	}
	for _, m := range l.marks {
		if m.checkpoint == id {
			return &Reader{l: l, at: m.at}, nil
		}
	}
	return nil, fmt.Errorf("%w of checkpoint %d", ErrNoMark, id)
}

// Reader returns a cursor over the kept entries, oldest first, for a new attempt's replay. Entries appended
// after the call are read too (the replay reads to the end of what the failed attempt and, if it failed
// during a replay, its successors recorded). A broken log has no reader.
func (l *Log) Reader() (*Reader, error) {
	if l.broken != nil {
		return nil, l.broken
	}
	return &Reader{l: l, at: l.start + int64(l.head)}, nil
}

// Reader reads a Log from a position.
type Reader struct {
	l  *Log
	at int64
}

// Next returns the next entry; ok is false at the end of the log. A reader whose position was truncated
// away (the log's owner truncated it while the reader was in use, which replay never does) fails.
func (r *Reader) Next() (e Entry, ok bool, err error) {
	l := r.l
	if r.at < l.start+int64(l.head) {
		return Entry{}, false, fmt.Errorf("determinant log: reader at %d, behind the log's start %d", r.at, l.start+int64(l.head))
	}
	if r.at >= l.end {
		return Entry{}, false, nil
	}
	seg := int((r.at - l.start) / segmentSize)
	off := int((r.at - l.start) % segmentSize)
	b := l.segments[seg]
	if off >= len(b) {
		// The unused tail of a full segment: go on in the next.
		r.at = l.start + int64(seg+1)*segmentSize
		return r.Next()
	}
	b = b[off:]
	kind := Kind(b[0])
	var k int
	switch kind {
	case Buffer, Event:
		c, kc := binary.Uvarint(b[1:])
		var out uint64
		if kc > 0 {
			out, k = binary.Uvarint(b[1+kc:])
			if k > 0 {
				k += kc
			}
		}
		e = Entry{Kind: kind, Channel: int(c), Value: int64(out)}
	case Time, Timers, Poll, Watermark:
		e.Kind = kind
		e.Value, k = binary.Varint(b[1:])
	default:
		return Entry{}, false, fmt.Errorf("determinant log: corrupt entry of %s at %d", kind, r.at)
	}
	if k <= 0 {
		return Entry{}, false, fmt.Errorf("determinant log: corrupt %s entry at %d", kind, r.at)
	}
	r.at += int64(1 + k)
	return e, true, nil
}

// Reset empties the log and clears a break: after a fallback, the subtask's new attempts start a new
// history from the checkpoint they restore.
func (l *Log) Reset() {
	for _, s := range l.segments {
		l.spare = append(l.spare, s[:0])
	}
	l.segments = l.segments[:0]
	l.start, l.head, l.end = 0, 0, 0
	l.appended, l.appendedBytes, l.dropped, l.droppedBytes = 0, 0, 0, 0
	l.marks = append(l.marks[:0], mark{checkpoint: 0})
	l.broken = nil
}

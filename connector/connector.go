// Package connector holds Runnel's built-in sources and sinks: a deterministic data generator, a collection
// source, a line-based text file source and sink, a print sink, a collect sink for tests, and a discard sink
// for benchmarks.
//
// Connectors are written against the public runnel API only, like a user's own would be; they must not
// import Runnel's internal packages.
package connector

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/runnel-dev/runnel"
)

// batch is how many records a reader emits per poll; the task handles control messages between polls.
const batch = 512

// Collection returns a source over items. With parallelism p, subtask i emits the items whose index is i
// modulo p, in order.
func Collection[T any](items []T) runnel.Source[T] { return &collection[T]{items: items} }

type collection[T any] struct{ items []T }

func (c *collection[T]) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[T], error) {
	return &collectionReader[T]{items: c.items, next: ctx.SubtaskIndex(), step: ctx.Parallelism()}, nil
}

type collectionReader[T any] struct {
	items      []T
	next, step int
}

func (r *collectionReader[T]) PollNext(out runnel.Collector[T]) (runnel.InputStatus, error) {
	for i := 0; i < batch && r.next < len(r.items); i++ {
		out.Collect(r.items[r.next])
		r.next += r.step
	}
	if r.next >= len(r.items) {
		return runnel.EndOfInput, nil
	}
	return runnel.MoreAvailable, nil
}

func (r *collectionReader[T]) Available() <-chan struct{} { return nil }

// ReplaysDeterministically implements runnel.DeterministicReader: the items come in index order.
func (r *collectionReader[T]) ReplaysDeterministically() bool { return true }

// SnapshotState implements runnel.CheckpointedReader: the index of the next item.
func (r *collectionReader[T]) SnapshotState(int64) ([]byte, error) {
	return binary.AppendUvarint(nil, uint64(r.next)), nil
}

// RestoreState implements runnel.CheckpointedReader.
func (r *collectionReader[T]) RestoreState(b []byte) error {
	v, n := binary.Uvarint(b)
	if n != len(b) || n <= 0 || v > uint64(len(r.items)+r.step) || (v%uint64(r.step)) != uint64(r.next%r.step) {
		return fmt.Errorf("collection source: bad checkpointed position % x", b)
	}
	r.next = int(v)
	return nil
}
func (r *collectionReader[T]) Close() error { return nil }

// GeneratorOptions configure a Generator.
type GeneratorOptions struct {
	// RecordsPerSubtask bounds the records each subtask emits; 0 means unbounded.
	RecordsPerSubtask uint64
	// TotalRecords, if set, is split over the subtasks (the first TotalRecords % p get one more); it
	// overrides RecordsPerSubtask.
	TotalRecords uint64
	// RatePerSubtask limits records per second per subtask; 0 means as fast as possible.
	RatePerSubtask float64
}

// Generator returns a deterministic source: subtask i calls fn(i, seq) for seq = 0, 1, 2, ... and emits the
// results, so a consumer can see gaps and duplicates per subtask.
func Generator[T any](fn func(subtask int, seq uint64) T, opts GeneratorOptions) runnel.Source[T] {
	return &generator[T]{fn: fn, opts: opts}
}

type generator[T any] struct {
	fn   func(int, uint64) T
	opts GeneratorOptions
}

func (g *generator[T]) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[T], error) {
	if g.fn == nil {
		return nil, errors.New("generator: nil function")
	}
	if g.opts.RatePerSubtask < 0 {
		return nil, fmt.Errorf("generator: negative rate %v", g.opts.RatePerSubtask)
	}
	r := &generatorReader[T]{fn: g.fn, subtask: ctx.SubtaskIndex(), limit: g.opts.RecordsPerSubtask, pace: NewPacer(g.opts.RatePerSubtask, 0)}
	r.bounded = r.limit > 0
	if t := g.opts.TotalRecords; t > 0 {
		r.bounded = true
		p := uint64(ctx.Parallelism())
		r.limit = t / p
		if uint64(ctx.SubtaskIndex()) < t%p {
			r.limit++
		}
		if r.limit == 0 {
			r.done = true
		}
	}
	return r, nil
}

type generatorReader[T any] struct {
	fn      func(int, uint64) T
	subtask int
	seq     uint64
	limit   uint64
	bounded bool // limit applies; a TotalRecords split may give a subtask a limit of 0
	done    bool
	pace    *Pacer
	buf     []T // the records of one poll, for a BatchCollector
}

func (r *generatorReader[T]) PollNext(out runnel.Collector[T]) (runnel.InputStatus, error) {
	if r.done {
		return runnel.EndOfInput, nil
	}
	due := r.pace.Due()
	if due <= r.seq {
		r.pace.Wait(r.seq)
		return runnel.NothingAvailable, nil
	}
	n := min(uint64(batch), due-r.seq)
	if r.limit > 0 {
		n = min(n, r.limit-r.seq)
	}
	if bc, ok := out.(runnel.BatchCollector[T]); ok {
		buf := r.buf[:0]
		for i := uint64(0); i < n; i++ {
			buf = append(buf, r.fn(r.subtask, r.seq))
			r.seq++
		}
		r.buf = buf
		bc.CollectBatch(buf)
	} else {
		for i := uint64(0); i < n; i++ {
			out.Collect(r.fn(r.subtask, r.seq))
			r.seq++
		}
	}
	if r.limit > 0 && r.seq >= r.limit {
		r.done = true
		return runnel.EndOfInput, nil
	}
	return runnel.MoreAvailable, nil
}

func (r *generatorReader[T]) Available() <-chan struct{} { return r.pace.Available() }

// ReplaysDeterministically implements runnel.DeterministicReader: record n is a function of n, whatever the
// rate lets a poll emit.
func (r *generatorReader[T]) ReplaysDeterministically() bool { return true }

// SnapshotState implements runnel.CheckpointedReader: the next sequence number.
func (r *generatorReader[T]) SnapshotState(int64) ([]byte, error) {
	return binary.AppendUvarint(nil, r.seq), nil
}

// RestoreState implements runnel.CheckpointedReader. A rate-limited generator keeps its rate from the
// restart on.
func (r *generatorReader[T]) RestoreState(b []byte) error {
	v, n := binary.Uvarint(b)
	if n != len(b) || n <= 0 {
		return fmt.Errorf("generator: bad checkpointed position % x", b)
	}
	if r.bounded && v > r.limit {
		return fmt.Errorf("generator: the checkpoint was taken at record %d of this subtask, past the %d records it now generates (RecordsPerSubtask): restore with at least as many records, or unbounded", v, r.limit)
	}
	r.seq = v
	r.pace.Restart(v)
	r.done = r.bounded && v >= r.limit
	return nil
}

func (r *generatorReader[T]) Close() error {
	r.pace.Close()
	return nil
}

// TextFile returns a source of the lines of a UTF-8 text file (without line terminators). The file is split
// into byte ranges, one per subtask; a line belongs to the subtask whose range holds its first byte.
func TextFile(path string) runnel.Source[string] { return &textFile{path: path} }

type textFile struct{ path string }

func (s *textFile) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[string], error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, fmt.Errorf("text file source: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("text file source: %w", err)
	}
	p, i := int64(ctx.Parallelism()), int64(ctx.SubtaskIndex())
	start, end := st.Size()*i/p, st.Size()*(i+1)/p
	r := &textReader{f: f, end: end, pos: start, size: st.Size()}
	if start > 0 {
		// The line that began in the previous range belongs to it: resume after the first newline at or
		// after start-1.
		if _, err := f.Seek(start-1, io.SeekStart); err != nil {
			f.Close()
			return nil, fmt.Errorf("text file source: %w", err)
		}
		r.pos = start - 1
	}
	r.br = bufio.NewReaderSize(f, 64<<10)
	for start > 0 {
		chunk, err := r.br.ReadSlice('\n')
		r.pos += int64(len(chunk))
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF {
			r.pos = end
		} else if err != nil {
			f.Close()
			return nil, fmt.Errorf("text file source: %w", err)
		}
		break
	}
	return r, nil
}

type textReader struct {
	f        *os.File
	br       *bufio.Reader
	pos, end int64
	size     int64 // of the file when the reader was created
}

func (r *textReader) PollNext(out runnel.Collector[string]) (runnel.InputStatus, error) {
	for i := 0; i < batch; i++ {
		if r.pos >= r.end {
			return runnel.EndOfInput, nil
		}
		line, err := r.br.ReadString('\n')
		if len(line) > 0 {
			r.pos += int64(len(line))
			n := len(line)
			if line[n-1] == '\n' {
				n--
				if n > 0 && line[n-1] == '\r' {
					n--
				}
			}
			out.Collect(line[:n])
		}
		if err == io.EOF {
			r.pos = r.end
			return runnel.EndOfInput, nil
		}
		if err != nil {
			return runnel.EndOfInput, fmt.Errorf("text file source: %w", err)
		}
	}
	return runnel.MoreAvailable, nil
}

func (r *textReader) Available() <-chan struct{} { return nil }

// ReplaysDeterministically implements runnel.DeterministicReader: the lines of its range, in file order (of
// a file that does not change under it).
func (r *textReader) ReplaysDeterministically() bool { return true }

// SnapshotState implements runnel.CheckpointedReader: the byte offset of the next line.
func (r *textReader) SnapshotState(int64) ([]byte, error) {
	return binary.AppendVarint(nil, r.pos), nil
}

// RestoreState implements runnel.CheckpointedReader.
func (r *textReader) RestoreState(b []byte) error {
	v, n := binary.Varint(b)
	if n != len(b) || n <= 0 || v < 0 || v > r.size {
		return fmt.Errorf("text file source: bad checkpointed position % x", b)
	}
	if v >= r.end {
		// The split is done: its last line ran past its end, or no line starts in it.
		r.pos = v
		return nil
	}
	if _, err := r.f.Seek(v, io.SeekStart); err != nil {
		return fmt.Errorf("text file source: %w", err)
	}
	r.br.Reset(r.f)
	r.pos = v
	return nil
}
func (r *textReader) Close() error { return r.f.Close() }

// Print returns a sink that writes each record to standard output as "subtask> record", like Flink's
// print().
func Print[T any]() runnel.Sink[T] { return &printSink[T]{w: os.Stdout} }

// PrintTo is Print writing to w (shared by all subtasks, which take turns).
func PrintTo[T any](w io.Writer) runnel.Sink[T] { return &printSink[T]{w: w} }

type printSink[T any] struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *printSink[T]) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[T], error) {
	prefix := ""
	if ctx.Parallelism() > 1 {
		prefix = fmt.Sprintf("%d> ", ctx.SubtaskIndex()+1)
	}
	return &printWriter[T]{s: s, prefix: prefix}, nil
}

type printWriter[T any] struct {
	s      *printSink[T]
	prefix string
}

func (w *printWriter[T]) Write(v T) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	_, err := fmt.Fprintf(w.s.w, "%s%v\n", w.prefix, v)
	return err
}

func (w *printWriter[T]) Flush() error { return nil }
func (w *printWriter[T]) Close() error { return nil }

// Collect is a sink that keeps every record in memory, for tests and small results. It is at least once:
// with checkpoints, a record a checkpoint covers is never lost, and one written after the restored
// checkpoint comes again after a failover.
type Collect[T any] struct {
	mu      sync.Mutex
	records []T
}

// NewCollect makes an empty collect sink.
func NewCollect[T any]() *Collect[T] { return &Collect[T]{} }

// Records returns a copy of the records collected so far, in arrival order.
func (c *Collect[T]) Records() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]T(nil), c.records...)
}

// CreateWriter implements runnel.Sink.
func (c *Collect[T]) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[T], error) {
	return &collectWriter[T]{c: c}, nil
}

type collectWriter[T any] struct {
	c   *Collect[T]
	buf []T
}

func (w *collectWriter[T]) Write(v T) error {
	w.buf = append(w.buf, v)
	if len(w.buf) >= 1024 {
		w.flush()
	}
	return nil
}

// WriteBatch implements runnel.BatchWriter.
func (w *collectWriter[T]) WriteBatch(vs []T) error {
	w.buf = append(w.buf, vs...)
	if len(w.buf) >= 1024 {
		w.flush()
	}
	return nil
}

func (w *collectWriter[T]) flush() {
	w.c.mu.Lock()
	w.c.records = append(w.c.records, w.buf...)
	w.c.mu.Unlock()
	w.buf = w.buf[:0]
}

func (w *collectWriter[T]) Flush() error { w.flush(); return nil }
func (w *collectWriter[T]) Close() error { return nil }

// SnapshotState implements runnel.CheckpointedWriter: the records written before the barrier join the
// sink's records, since a failure after the checkpoint would drop the writer's buffer and the restored job
// does not emit them again. The writer keeps no state.
func (w *collectWriter[T]) SnapshotState(int64) ([]byte, error) { w.flush(); return nil, nil }

// RestoreState implements runnel.CheckpointedWriter.
func (w *collectWriter[T]) RestoreState([]byte) error { return nil }

// Discard is a sink that drops every record (benchmarks).
func Discard[T any]() runnel.Sink[T] { return discard[T]{} }

type discard[T any] struct{}

func (discard[T]) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[T], error) {
	return discard[T]{}, nil
}
func (discard[T]) Write(T) error { return nil }

// WriteBatch implements runnel.BatchWriter.
func (discard[T]) WriteBatch([]T) error { return nil }
func (discard[T]) Flush() error         { return nil }
func (discard[T]) Close() error         { return nil }

package connector

// The two exactly-once file sinks share one two-phase protocol: write into a hidden in-progress file,
// make it durable when a checkpoint covers it, and make it visible by a rename when that checkpoint
// completes (or, on a restore, when the restored checkpoint lists it). What they stage differs, and so
// does what a restore does with the file a failure left open:
//
//   - FileSink rolls a new part file at every checkpoint. A checkpoint closes the part (pending) and the
//     part is committed under its own name when the checkpoint completes; a restore drops the parts begun
//     after the checkpoint, whose records come again. Readers see whole parts as the job runs.
//   - TextFileSink keeps one file per subtask for the whole job, as a plain text file's reader expects: a
//     checkpoint records how far the file is durable, a restore cuts the file back to that length (a
//     resumable file, as Flink's RecoverableWriter), and the file replaces the target once, at the
//     checkpoint after the end of input.
//
// One rolls, the other resumes, so they are two writers over the pieces below: the buffered line file,
// the commits waiting for a checkpoint, the checkpointed state's encoding, and the durable renames.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// lineSink is what both file sinks are made of: where they write (FileSink's directory, TextFileSink's
// target path) and how a record becomes a line.
type lineSink[T any] struct {
	where  string
	format func(T) string
}

// check refuses a sink without a format before it writes anything; name is the sink's in the error.
func (s *lineSink[T]) check(name string) error {
	if s.format == nil {
		return fmt.Errorf("%s: format is nil", name)
	}
	return nil
}

// lineFile writes records as lines into one file through a 64 KiB buffer, kept across files.
type lineFile struct {
	f   *os.File
	buf *bufio.Writer
}

// use makes f the file written.
func (l *lineFile) use(f *os.File) {
	l.f = f
	if l.buf == nil {
		l.buf = bufio.NewWriterSize(f, 64<<10)
	} else {
		l.buf.Reset(f)
	}
}

// writeLine writes s and a newline.
func (l *lineFile) writeLine(s string) error {
	if _, err := l.buf.WriteString(s); err != nil {
		return err
	}
	return l.buf.WriteByte('\n')
}

// sync makes every line written so far durable.
func (l *lineFile) sync() error {
	if err := l.buf.Flush(); err != nil {
		return err
	}
	return l.f.Sync()
}

// commitQueue holds what waits for a checkpoint to complete, by ascending checkpoint id.
type commitQueue[T any] struct {
	ids   []int64
	items []T
}

// add makes item wait for checkpoint id, which is at least every id added before.
func (q *commitQueue[T]) add(id int64, item T) {
	q.ids = append(q.ids, id)
	q.items = append(q.items, item)
}

// due removes and returns the items of the checkpoints up to id: its completion covers them.
func (q *commitQueue[T]) due(id int64) []T {
	i := 0
	for i < len(q.ids) && q.ids[i] <= id {
		i++
	}
	out := q.items[:i:i]
	q.ids, q.items = q.ids[i:], q.items[i:]
	return out
}

// stateReader reads a writer's checkpointed state: a version byte, then uvarints, varints and strings
// (a uvarint length and the bytes). The first error sticks; ok reports whether every read succeeded.
type stateReader struct {
	b   []byte
	bad bool
}

// newStateReader reads b, whose first byte must be version.
func newStateReader(b []byte, version byte) *stateReader {
	if len(b) == 0 || b[0] != version {
		return &stateReader{bad: true}
	}
	return &stateReader{b: b[1:]}
}

// take consumes k bytes of a read that used them, or marks the state malformed when the read failed
// (k <= 0); it reports whether the read succeeded.
func (r *stateReader) take(k int) bool {
	if r.bad || k <= 0 {
		r.bad = true
		return false
	}
	r.b = r.b[k:]
	return true
}

func (r *stateReader) uvarint() uint64 {
	v, k := binary.Uvarint(r.b)
	if !r.take(k) {
		return 0
	}
	return v
}

func (r *stateReader) varint() int64 {
	v, k := binary.Varint(r.b)
	if !r.take(k) {
		return 0
	}
	return v
}

// flag reads one byte.
func (r *stateReader) flag() byte {
	if r.bad || len(r.b) == 0 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// done reports whether every read succeeded and nothing is left.
func (r *stateReader) done() bool { return !r.bad && len(r.b) == 0 }

// str reads a string of at most limit bytes.
func (r *stateReader) str(limit int) string {
	l := r.uvarint()
	if r.bad || l > uint64(len(r.b)) || l > uint64(limit) {
		r.bad = true
		return ""
	}
	s := string(r.b[:l])
	r.b = r.b[l:]
	return s
}

// ok reports whether every read succeeded.
func (r *stateReader) ok() bool { return !r.bad }

// appendString appends s as stateReader.str reads it.
func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// removeFiles removes the files in dir whose names match; a file gone already is no error.
func removeFiles(dir string, match func(name string) bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if match(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// syncDir makes renames in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

package connector

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/runnel-dev/runnel"
)

// TextFileSink writes one line per record, formatted by format, to path (parallelism 1) or to path-N for
// subtask N (parallelism > 1). Lines go to an in-progress file beside the target (path.inprogress.A for
// attempt A) that replaces the target once the output is complete, so a failed job never leaves a
// half-written target behind.
//
// Without checkpointing the output is complete at the subtask's end of input, and a failed attempt's file
// is removed: a restarted job writes everything again. With checkpointing the sink is exactly once: a
// checkpoint makes the lines before its barrier durable (flushed and synced) and records the file and its
// length; a restored subtask copies that many bytes into its own file (a copy, so that an attempt still
// running elsewhere cannot write into it) and goes on from there; and the output replaces the target when
// the job's checkpoint after the end of input completes. The in-progress files of a job that failed for
// good stay, for a restore from its checkpoints. Rescaling the sink from a savepoint is not supported.
func TextFileSink[T any](path string, format func(T) string) runnel.Sink[T] {
	return &textSink[T]{lineSink[T]{where: path, format: format}}
}

// textSink's where is the target file's path.
type textSink[T any] struct{ lineSink[T] }

func (s *textSink[T]) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[T], error) {
	if err := s.check("TextFileSink"); err != nil {
		return nil, err
	}
	target := s.where
	if ctx.Parallelism() > 1 {
		target = fmt.Sprintf("%s-%d", s.where, ctx.SubtaskIndex())
	}
	tmp := fmt.Sprintf("%s.inprogress.%d", target, ctx.Attempt())
	// Not truncated here: a restore may name this very file (a new job restoring a checkpoint its own
	// attempt 0 wrote), and it decides where the file starts.
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("text file sink: %w", err)
	}
	w := &textWriter[T]{tmp: tmp, target: target, format: s.format, checkpointing: ctx.Checkpointing()}
	w.out.use(f)
	return w, nil
}

// textCommit is what a textWriter does when a checkpoint completes.
type textCommit uint8

const (
	// removeRestored removes the file of an earlier attempt that the restore copied: no checkpoint that
	// may still be restored names it once a checkpoint of this attempt completed.
	removeRestored textCommit = iota
	// commitOutput replaces the target with the file: the checkpoint covers the end of input.
	commitOutput
)

type textWriter[T any] struct {
	out           lineFile // out.f is nil once a restore committed the output
	tmp, target   string
	format        func(T) string
	checkpointing bool

	ready     bool // the file was cut to where this attempt starts writing: empty, or what a restore kept
	ended     bool // the end of input came
	committed bool // the file replaced the target
	// referenced says a checkpoint may name tmp: this attempt snapshotted it, or restored into it.
	referenced bool
	// restoredFrom is the file of an earlier attempt that the restore copied (removeRestored).
	restoredFrom string
	snapshotted  bool // this attempt took a checkpoint
	endCovered   bool // a checkpoint taken after the end of input waits to commit the output
	commits      commitQueue[textCommit]
}

func (w *textWriter[T]) Write(v T) error {
	if !w.ready {
		if err := w.start(); err != nil {
			return err
		}
	}
	return w.out.writeLine(w.format(v))
}

// start empties the file of an attempt that restored nothing.
func (w *textWriter[T]) start() error {
	w.ready = true
	if err := w.out.f.Truncate(0); err != nil {
		return fmt.Errorf("text file sink %s: %w", w.target, err)
	}
	return nil
}

// sync makes every line written so far durable and returns the file's length.
func (w *textWriter[T]) sync() (int64, error) {
	if !w.ready {
		if err := w.start(); err != nil {
			return 0, err
		}
	}
	if err := w.out.sync(); err != nil {
		return 0, fmt.Errorf("text file sink %s: %w", w.target, err)
	}
	n, err := w.out.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, fmt.Errorf("text file sink %s: %w", w.target, err)
	}
	return n, nil
}

// Flush ends the input: without checkpointing the output is complete now; with, the checkpoint after the
// end of input commits it.
func (w *textWriter[T]) Flush() error {
	if w.committed {
		return nil // a restore committed the output already
	}
	if !w.checkpointing {
		return w.commit()
	}
	w.ended = true
	return nil
}

// commit replaces the target with the file, and removes the in-progress files of earlier attempts.
func (w *textWriter[T]) commit() error {
	if w.committed {
		return nil
	}
	if _, err := w.sync(); err != nil {
		return err
	}
	if err := os.Rename(w.tmp, w.target); err != nil {
		return fmt.Errorf("text file sink: %w", err)
	}
	w.committed = true
	return w.removeStale()
}

// removeStale removes every in-progress file of the target: what earlier attempts left, for restores
// that no longer come once the output is committed.
func (w *textWriter[T]) removeStale() error {
	dir, base := filepath.Split(w.target)
	if dir == "" {
		dir = "."
	}
	if err := removeFiles(dir, func(name string) bool { return strings.HasPrefix(name, base+".inprogress.") }); err != nil {
		return fmt.Errorf("text file sink: %w", err)
	}
	return nil
}

func (w *textWriter[T]) Close() error {
	var err error
	if w.out.f != nil {
		err = w.out.f.Close()
	}
	if !w.committed && !w.referenced {
		os.Remove(w.tmp)
	}
	return err
}

// textSinkStateVersion starts the writer's checkpointed state.
const textSinkStateVersion = 1

// SnapshotState implements runnel.CheckpointedWriter: the in-progress file, durable up to the length it
// records, and whether the input had ended.
func (w *textWriter[T]) SnapshotState(id int64) ([]byte, error) {
	var n int64
	if !w.committed {
		var err error
		if n, err = w.sync(); err != nil {
			return nil, err
		}
	}
	w.referenced = true
	if !w.snapshotted {
		w.snapshotted = true
		if w.restoredFrom != "" {
			w.commits.add(id, removeRestored)
		}
	}
	if w.ended && !w.endCovered {
		w.endCovered = true
		w.commits.add(id, commitOutput)
	}
	b := appendString([]byte{textSinkStateVersion}, filepath.Base(w.tmp))
	b = binary.AppendUvarint(b, uint64(n))
	if w.ended {
		return append(b, 1), nil
	}
	return append(b, 0), nil
}

// NotifyCheckpointComplete implements runnel.CheckpointListener: the file an earlier attempt left goes,
// and the checkpoint after the end of input commits the output.
func (w *textWriter[T]) NotifyCheckpointComplete(id int64) error {
	for _, c := range w.commits.due(id) {
		switch c {
		case removeRestored:
			if err := os.Remove(w.restoredFrom); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("text file sink: %w", err)
			}
			w.restoredFrom = ""
		case commitOutput:
			if err := w.commit(); err != nil {
				return err
			}
		}
	}
	return nil
}

// RestoreState implements runnel.CheckpointedWriter: the subtask goes on from the checkpointed length of the
// file it names, or, when the input had ended then, commits that file if it was not committed yet.
func (w *textWriter[T]) RestoreState(b []byte) error {
	bad := fmt.Errorf("text file sink %s: malformed checkpointed state % x", w.target, b)
	r := newStateReader(b, textSinkStateVersion)
	name := r.str(len(b))
	size := r.uvarint()
	flag := r.flag()
	if !r.done() || flag > 1 || name != filepath.Base(name) {
		return bad
	}
	ended := flag == 1
	if !strings.HasPrefix(name, filepath.Base(w.target)+".inprogress.") {
		return fmt.Errorf("text file sink %s: the checkpoint's in-progress file %s is another target's (the sink's path or parallelism changed)", w.target, name)
	}
	old := filepath.Join(filepath.Dir(w.target), name)
	w.ready, w.referenced = true, true
	if ended {
		return w.commitRestored(old, int64(size))
	}
	src, err := os.Open(old)
	if err != nil {
		return fmt.Errorf("text file sink: restore: the checkpoint's in-progress file: %w", err)
	}
	defer src.Close()
	if st, err := src.Stat(); err != nil {
		return fmt.Errorf("text file sink: restore: %w", err)
	} else if st.Size() < int64(size) {
		return fmt.Errorf("text file sink: restore: %s holds %d bytes, fewer than the %d its checkpoint covers", old, st.Size(), size)
	}
	if old == w.tmp {
		if err := w.out.f.Truncate(int64(size)); err != nil {
			return fmt.Errorf("text file sink: restore: %w", err)
		}
		if _, err := w.out.f.Seek(int64(size), io.SeekStart); err != nil {
			return fmt.Errorf("text file sink: restore: %w", err)
		}
		return nil
	}
	if err := w.out.f.Truncate(0); err != nil {
		return fmt.Errorf("text file sink: restore: %w", err)
	}
	if _, err := io.CopyN(w.out.f, src, int64(size)); err != nil {
		return fmt.Errorf("text file sink: restore: copy %s: %w", old, err)
	}
	w.restoredFrom = old
	return nil
}

// commitRestored commits the file of a checkpoint taken after the end of input, cut to its length; the
// target holds it already if the commit happened before the failure.
func (w *textWriter[T]) commitRestored(old string, size int64) error {
	w.ended, w.committed = true, true
	if err := w.out.f.Close(); err != nil {
		return fmt.Errorf("text file sink: restore: %w", err)
	}
	w.out.f = nil
	if old != w.tmp {
		os.Remove(w.tmp)
	}
	if err := os.Truncate(old, size); errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(w.target); serr == nil {
			return nil
		}
		return fmt.Errorf("text file sink: restore: neither the in-progress file %s nor the target %s exists", old, w.target)
	} else if err != nil {
		return fmt.Errorf("text file sink: restore: %w", err)
	}
	if err := os.Rename(old, w.target); err != nil {
		return fmt.Errorf("text file sink: restore: %w", err)
	}
	return w.removeStale()
}

package connector

import (
	cryptorand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/runnel-dev/runnel"
)

// FileSink writes every record as a line (format's result and a newline) into part files in dir, exactly
// once when the job takes checkpoints: each subtask writes a hidden in-progress file; the checkpoint that
// covers it closes it (pending), and it becomes visible under its final name, part-RUN-SUBTASK-N, when that
// checkpoint completes. A restarted subtask commits what its restored checkpoint left pending and deletes
// the part files it had begun after that checkpoint, whose records are replayed (committed ones too, when
// the job falls back to an older checkpoint than the newest: a reader may have seen those already). The last records of a
// bounded job are committed by the job's final checkpoint. Without checkpointing a subtask's file is
// committed at its end of input (a failure leaves hidden in-progress files behind, and the job's records
// are then at least once across restarts).
//
// RUN is random per job run and kept in the checkpoints, so runs never overwrite each other's parts.
// Readers see whole files only: ignore names that start with a dot. dir must exist, and be shared by every
// TaskManager in a cluster. Rescaling the sink's parallelism from a savepoint is not supported.
func FileSink[T any](dir string, format func(T) string) runnel.Sink[T] {
	return &fileSink[T]{lineSink[T]{where: dir, format: format}}
}

// fileSink's where is the directory of the part files.
type fileSink[T any] struct{ lineSink[T] }

func (s *fileSink[T]) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[T], error) {
	if err := s.check("FileSink"); err != nil {
		return nil, err
	}
	if st, err := os.Stat(s.where); err != nil || !st.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("FileSink: %s: %w", s.where, err)
	}
	return &fileWriter[T]{s: s, sub: ctx.SubtaskIndex(), checkpointing: ctx.Checkpointing()}, nil
}

type fileWriter[T any] struct {
	s             *fileSink[T]
	sub           int
	checkpointing bool
	run           string // the job run's id in the part names; "" until the first part or a restore
	next          uint64 // the number of the next part
	out           lineFile
	writing       bool   // out holds a part in progress
	curN          uint64 // the number of the part in progress
	pending       commitQueue[uint64]
}

func (w *fileWriter[T]) name(n uint64, suffix string) string {
	base := fmt.Sprintf("part-%s-%d-%d", w.run, w.sub, n)
	if suffix == "" {
		return filepath.Join(w.s.where, base)
	}
	return filepath.Join(w.s.where, "."+base+suffix)
}

func (w *fileWriter[T]) ensureRun() error {
	if w.run != "" {
		return nil
	}
	b := make([]byte, 6)
	if _, err := cryptorand.Read(b); err != nil {
		return fmt.Errorf("FileSink: run id: %w", err)
	}
	w.run = hex.EncodeToString(b)
	return nil
}

func (w *fileWriter[T]) Write(v T) error {
	if !w.writing {
		if err := w.ensureRun(); err != nil {
			return err
		}
		f, err := os.OpenFile(w.name(w.next, ".inprogress"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("FileSink: %w", err)
		}
		w.out.use(f)
		w.writing, w.curN = true, w.next
		w.next++
	}
	if err := w.out.writeLine(w.s.format(v)); err != nil {
		return fmt.Errorf("FileSink: %w", err)
	}
	return nil
}

// closePart makes the part being written durable and renames it to suffix ("" commits it).
func (w *fileWriter[T]) closePart(suffix string) error {
	if !w.writing {
		return nil
	}
	n := w.curN
	w.writing = false
	err := w.out.sync()
	if cerr := w.out.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.name(n, ".inprogress"), w.name(n, suffix))
	}
	if err != nil {
		return fmt.Errorf("FileSink: part %d: %w", n, err)
	}
	if suffix == ".pending" {
		return nil
	}
	return w.syncDir()
}

func (w *fileWriter[T]) syncDir() error {
	if err := syncDir(w.s.where); err != nil {
		return fmt.Errorf("FileSink: %w", err)
	}
	return nil
}

// Flush ends the input: with checkpointing the final checkpoint covers what was written; without, the part
// is committed now.
func (w *fileWriter[T]) Flush() error {
	if w.checkpointing {
		if w.writing {
			if err := w.out.buf.Flush(); err != nil {
				return fmt.Errorf("FileSink: %w", err)
			}
		}
		return nil
	}
	return w.closePart("")
}

// Close releases the part being written; it stays in progress, for a restore to delete.
func (w *fileWriter[T]) Close() error {
	if !w.writing {
		return nil
	}
	w.writing = false
	return w.out.f.Close()
}

// fileSinkStateVersion starts the writer's checkpointed state.
const fileSinkStateVersion = 1

// SnapshotState closes the part being written as pending for checkpoint id and records what is pending.
func (w *fileWriter[T]) SnapshotState(id int64) ([]byte, error) {
	if w.writing {
		n := w.curN
		if err := w.closePart(".pending"); err != nil {
			return nil, err
		}
		w.pending.add(id, n)
	}
	if err := w.ensureRun(); err != nil {
		return nil, err
	}
	b := appendString([]byte{fileSinkStateVersion}, w.run)
	b = binary.AppendUvarint(b, w.next)
	b = binary.AppendUvarint(b, uint64(len(w.pending.ids)))
	for i, id := range w.pending.ids {
		b = binary.AppendVarint(b, id)
		b = binary.AppendUvarint(b, w.pending.items[i])
	}
	return b, nil
}

// NotifyCheckpointComplete commits every part pending for a checkpoint up to id.
func (w *fileWriter[T]) NotifyCheckpointComplete(id int64) error {
	parts := w.pending.due(id)
	for _, n := range parts {
		if err := w.commit(n); err != nil {
			return err
		}
	}
	if len(parts) > 0 {
		return w.syncDir()
	}
	return nil
}

// commit makes pending part n visible; a part committed already (a notification before a failure) is done.
func (w *fileWriter[T]) commit(n uint64) error {
	err := os.Rename(w.name(n, ".pending"), w.name(n, ""))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(w.name(n, "")); serr == nil {
			return nil
		}
		return fmt.Errorf("FileSink: part %d of subtask %d is neither pending nor committed in %s: it was removed", n, w.sub, w.s.where)
	}
	if err != nil {
		return fmt.Errorf("FileSink: commit part %d: %w", n, err)
	}
	return nil
}

// RestoreState commits what the restored checkpoint (which completed) left pending, and deletes the parts
// this subtask began after it: their records come again.
func (w *fileWriter[T]) RestoreState(b []byte) error {
	bad := errors.New("FileSink: malformed checkpointed state")
	r := newStateReader(b, fileSinkStateVersion)
	if !r.ok() {
		return fmt.Errorf("%w: unknown version", bad)
	}
	w.run = r.str(64)
	w.next = r.uvarint()
	np := r.uvarint()
	if !r.ok() || np > uint64(len(b)) {
		return bad
	}
	var pending []uint64
	for range np {
		r.varint() // the checkpoint the part was pending for: the restored one completed
		pending = append(pending, r.uvarint())
	}
	if !r.ok() {
		return bad
	}
	for _, n := range pending {
		if err := w.commit(n); err != nil {
			return err
		}
	}
	w.pending = commitQueue[uint64]{}
	if err := w.deleteAfter(w.next); err != nil {
		return err
	}
	return w.syncDir()
}

// deleteAfter removes this subtask's parts numbered from next on, begun after the restored checkpoint: in
// progress, pending, and also committed ones, which a restore from an older checkpoint than the newest
// (the newest was damaged and passed over) finds: their records come again.
func (w *fileWriter[T]) deleteAfter(next uint64) error {
	prefix := fmt.Sprintf("part-%s-%d-", w.run, w.sub)
	err := removeFiles(w.s.where, func(name string) bool {
		rest, ok := strings.CutPrefix(strings.TrimPrefix(name, "."), prefix)
		if !ok {
			return false
		}
		num, _, _ := strings.Cut(rest, ".")
		n, err := strconv.ParseUint(num, 10, 64)
		return err == nil && n >= next
	})
	if err != nil {
		return fmt.Errorf("FileSink: %w", err)
	}
	return nil
}

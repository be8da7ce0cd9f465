package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/operator"
	"github.com/runnel-dev/runnel/internal/report"
	"github.com/runnel-dev/runnel/internal/task"
)

// alreadyFinished reports whether every subtask of the savepoint had finished, or its input had ended, when
// it was taken: the job had already finished in it. A subtask that finished holds no state; one whose
// input ended says so in the last blob of its handle (task.InputEndedInState). The subtasks of the job's
// sources are read first: in a savepoint of a running job they had not ended, and their state is small, so
// that the answer "no" costs little.
func alreadyFinished(ctx context.Context, sp *checkpoint.Savepoint, jg *graph.JobGraph) (bool, error) {
	cp := sp.Checkpoint
	if len(cp.States) == 0 {
		return false, nil
	}
	sources := map[string]bool{}
	for _, v := range jg.Vertices {
		if v.IsSource() {
			sources[v.UIDs()[0]] = true
		}
	}
	isSource := func(h checkpoint.StateHandle) bool {
		v, ok := cp.VertexByID(h.Attempt.Vertex)
		return ok && slices.ContainsFunc(v.Operators, func(uid string) bool { return sources[uid] })
	}
	handles := slices.Clone(cp.States)
	slices.SortStableFunc(handles, func(a, b checkpoint.StateHandle) int {
		switch as, bs := isSource(a), isSource(b); {
		case as && !bs:
			return -1
		case bs && !as:
			return 1
		}
		return 0
	})
	for _, h := range handles {
		if h.Finished {
			continue
		}
		if len(h.Blobs) == 0 {
			return false, nil
		}
		payload, err := sp.ReadState(ctx, h.Blobs[len(h.Blobs)-1])
		if err != nil {
			return false, err
		}
		ended, err := task.InputEndedInState(payload)
		if err != nil {
			return false, fmt.Errorf("state of %s: %w", h.Attempt, err)
		}
		if !ended {
			return false, nil
		}
	}
	return true, nil
}

// openRestore opens a savepoint directory, or, for a checkpoint storage directory, its newest valid
// retained checkpoint. Newer checkpoints it passes over are listed in the result and logged: a damaged one
// (corrupt, truncated, of an unknown format) at WARN, one that was never committed at INFO. Nothing is
// created: a directory that does not exist is an error naming it.
func openRestore(ctx context.Context, dir string, lg *slog.Logger) (*checkpoint.Savepoint, *report.RestoreResult, error) {
	info := &report.RestoreResult{Location: dir, Skipped: []string{}}
	sp, err := checkpoint.ReadSavepoint(ctx, dir)
	if err == nil {
		info.CheckpointID = sp.Checkpoint.ID
		return sp, info, nil
	}
	if !errors.Is(err, checkpoint.ErrNotFound) {
		return nil, nil, err
	}
	st, oerr := checkpoint.OpenExisting(ctx, dir)
	if oerr != nil {
		return nil, nil, oerr
	}
	defer st.Close()
	cp, skipped, lerr := st.Latest(ctx)
	for _, sk := range skipped {
		info.Skipped = append(info.Skipped, fmt.Sprintf("chk-%d: %v", sk.ID, sk.Err))
		attrs := []any{"location", dir, "skipped", fmt.Sprintf("chk-%d", sk.ID), "problem", sk.Err.Error()}
		if cp != nil {
			attrs = append(attrs, "restoring", fmt.Sprintf("chk-%d", cp.ID))
		}
		if errors.Is(sk.Err, checkpoint.ErrIncomplete) {
			lg.Info("restore: passing over a checkpoint that was never committed", attrs...)
		} else {
			lg.Warn("restore: passing over a damaged checkpoint", attrs...)
		}
	}
	if lerr != nil {
		return nil, nil, fmt.Errorf("no savepoint here, and no valid retained checkpoint: %w", lerr)
	}
	sp, err = checkpoint.ReadSavepoint(ctx, strings.TrimSuffix(dir, "/")+fmt.Sprintf("/chk-%d", cp.ID))
	if err != nil {
		return nil, nil, err
	}
	info.CheckpointID = cp.ID
	return sp, info, nil
}

// restore opens the state job starts from (Recovery.RestoreFrom) and checks it against the job: every
// operator's state must find its operator (or be dropped when allowed), and a source's state its
// parallelism. It says whether the job had already finished in it. The caller closes the savepoint.
func (j *Job) restore(ctx context.Context) (*checkpoint.Savepoint, *report.RestoreResult, error) {
	lg, from := j.Settings.logger(), j.Recovery.RestoreFrom
	sp, info, err := openRestore(ctx, from, lg)
	if err != nil {
		return nil, nil, err
	}
	dropped, err := jobcore.CheckRestore(sp.Checkpoint, jobcore.RestoreCheck{
		Vertices: j.Graph.Vertices,
		// A source's position cannot be split over another parallelism, unless it keeps it in operator
		// list state (RescalableSource).
		Fixed:                 func(v *graph.JobVertex) bool { return v.IsSource() && !operator.SourceRescalable(v.Nodes[0].Payload) },
		AllowNonRestoredState: j.Recovery.AllowDropped,
	})
	if err == nil && len(dropped) > 0 {
		lg.Warn("restore: dropping the state of operators the job no longer has (allow-non-restored-state)",
			"job", j.Name, "location", from, "uids", dropped)
	}
	if err == nil {
		info.Finished, err = alreadyFinished(ctx, sp, j.Graph)
	}
	if err != nil {
		_ = sp.Close()
		return nil, nil, err
	}
	if info.Finished {
		lg.Info("restore: the job had already finished in this checkpoint: every task had ended its input; they finish at once, reading and emitting nothing",
			"job", j.Name, "location", from, "checkpoint", info.CheckpointID)
	}
	return sp, info, nil
}

// HasRestorable reports whether the checkpoint storage dir holds a valid retained checkpoint that
// Recovery.RestoreFrom could name (a storage that does not exist, or holds none, does not).
func HasRestorable(ctx context.Context, dir string) bool {
	st, err := checkpoint.OpenExisting(ctx, dir)
	if err != nil {
		return false
	}
	defer st.Close()
	cp, _, err := st.Latest(ctx)
	return err == nil && cp != nil
}

// restorePoint reads the checkpoint a run taken over restores on a later restart: the newest this run
// completed, in its checkpoint storage, or else the one it started from (nil: none).
func (t *Takeover) restorePoint(ctx context.Context, storage string) (*checkpoint.Savepoint, error) {
	loc, id := storage, t.ThisRun
	if id == 0 {
		loc, id = t.Savepoint, t.Restored
	}
	if id == 0 {
		return nil, nil
	}
	if loc == "" {
		return nil, fmt.Errorf("checkpoint %d: no location", id)
	}
	sp, err := checkpoint.ReadSavepoint(ctx, loc)
	if errors.Is(err, checkpoint.ErrNotFound) {
		// A checkpoint storage: the checkpoint is one of its directories.
		sp, err = checkpoint.ReadSavepoint(ctx, strings.TrimSuffix(loc, "/")+fmt.Sprintf("/chk-%d", id))
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d at %s: %w", id, loc, err)
	}
	if sp.Checkpoint.ID != id {
		_ = sp.Close()
		return nil, fmt.Errorf("%s holds checkpoint %d, the run's tasks name %d", loc, sp.Checkpoint.ID, id)
	}
	return sp, nil
}

package executor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/operator"
	"github.com/runnel-dev/runnel/internal/task"
)

// Settling: when a job ends failed or cancelled, no restore follows, so what a sink subtask staged for
// checkpoints whose fate it never heard (it failed, its TaskManager was lost, or it was cancelled before
// its restart restored it) would stay staged. The process that ran the job settles every sink subtask of
// a Settler that had not finished, as a restore from the job's restore point would (operator.Settler).

const (
	// settleTimeout bounds the settling of one ended job, all subtasks together.
	settleTimeout = 2 * time.Minute
	// settleConcurrency bounds the subtasks settled at once.
	settleConcurrency = 4
)

// settleTarget is one sink subtask to settle.
type settleTarget struct {
	node    *graph.StreamNode
	settler operator.Settler
	subtask ident.Subtask // in the job's graph
	par     int
}

// settleTargets returns the subtasks that a job which ended as snap says leaves to settle: none unless it
// failed or was cancelled; else every subtask of a Settler sink that had not finished.
func settleTargets(snap jobcore.Snapshot) []settleTarget {
	if snap.Status != jobcore.StatusFailed && snap.Status != jobcore.StatusCanceled {
		return nil
	}
	var out []settleTarget
	for _, vs := range snap.Vertices {
		for _, n := range vs.Vertex.Nodes {
			spec, ok := n.Payload.(operator.SettlerSpec)
			if !ok || spec.Settler() == nil {
				continue
			}
			for _, st := range vs.Subtasks {
				if st.Finished() {
					continue
				}
				out = append(out, settleTarget{node: n, settler: spec.Settler(), par: vs.Vertex.Parallelism,
					subtask: ident.Subtask{Vertex: vs.Vertex.ID, Index: int32(st.Index)}})
			}
		}
	}
	return out
}

// settle settles the subtasks settleTargets names, from the restore point rp (nil: none) whose blobs
// read reads, concurrently and bounded by settleTimeout, even when ctx (the job's) is done. Each error is
// logged: the job has ended, and what stays staged is left to the next run or the sink's own timeout.
func settle(ctx context.Context, targets []settleTarget, rp *checkpoint.CompletedCheckpoint, read task.BlobReader, lg *slog.Logger) {
	if len(targets) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var rpID int64
	if rp != nil {
		rpID = rp.ID
	}
	sem := make(chan struct{}, settleConcurrency)
	var wg sync.WaitGroup
	var settled atomic.Int64
	for _, t := range targets {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			l := lg.With("operator", t.node.Name, "subtask", t.subtask.Index, "checkpoint", rpID)
			s := operator.Settlement{Subtask: int(t.subtask.Index), Parallelism: t.par, CheckpointID: rpID, Logger: l}
			state, skip, err := settledState(ctx, rp, read, t)
			if err == nil && !skip {
				s.State = state
				err = t.settler.Settle(ctx, s)
			}
			if err != nil {
				l.Error("a sink subtask of the ended job could not be settled: what it staged stays until the job runs again or the sink's own timeout", "err", err)
				return
			}
			if !skip {
				settled.Add(1)
			}
		})
	}
	wg.Wait()
	if n := settled.Load(); n > 0 {
		lg.Info("settled the sink subtasks of the ended job", "subtasks", n, "checkpoint", rpID)
	}
}

// settledState returns the writer state of t's subtask in rp (nil when rp holds none), or skip when it
// had finished in rp (it staged nothing).
func settledState(ctx context.Context, rp *checkpoint.CompletedCheckpoint, read task.BlobReader, t settleTarget) (state []byte, skip bool, err error) {
	if rp == nil {
		return nil, false, nil
	}
	uid := t.node.UID()
	old, ok := vertexHolding(rp, uid, t.subtask.Vertex)
	if !ok {
		return nil, false, nil // the sink is new since rp
	}
	if int(old.Parallelism) != t.par {
		return nil, false, fmt.Errorf("checkpoint %d holds the sink at parallelism %d, the job ran it at %d", rp.ID, old.Parallelism, t.par)
	}
	h, ok := rp.State(ident.Subtask{Vertex: old.ID, Index: t.subtask.Index})
	switch {
	case !ok:
		return nil, false, nil
	case h.Finished:
		return nil, true, nil
	case len(h.Blobs) == 0:
		return nil, false, nil
	}
	entries, err := task.ReadEntries(ctx, rp.ID, read, h.Blobs)
	if err != nil {
		return nil, false, err
	}
	entry, ok := entries[uid]
	if !ok {
		return nil, false, nil
	}
	own, err := operator.OwnState(entry)
	if err != nil {
		return nil, false, fmt.Errorf("checkpoint %d, operator %q: %w", rp.ID, uid, err)
	}
	return own, false, nil
}

// vertexHolding returns the vertex of cp that held the operator uid; in a checkpoint that records no
// operator uids (format 1), the vertex with the id the operator's vertex has now.
func vertexHolding(cp *checkpoint.CompletedCheckpoint, uid string, now ident.VertexID) (checkpoint.Vertex, bool) {
	for _, v := range cp.Vertices {
		if slices.Contains(v.Operators, uid) {
			return v, true
		}
	}
	for _, v := range cp.Vertices {
		if len(v.Operators) > 0 {
			return checkpoint.Vertex{}, false
		}
	}
	return cp.VertexByID(now)
}

// blobReader reads the blobs of rp: from the savepoint the job started from, when rp is it, else from
// the job's checkpoint storage.
func blobReader(rp *checkpoint.CompletedCheckpoint, st *checkpoint.Storage, sp *checkpoint.Savepoint) task.BlobReader {
	switch {
	case rp == nil:
		return nil
	case sp != nil && sp.Checkpoint == rp:
		return sp.ReadState
	}
	return func(ctx context.Context, ref checkpoint.BlobRef) ([]byte, error) {
		return st.ReadState(ctx, rp.ID, ref)
	}
}

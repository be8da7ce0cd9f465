package jobcore

import (
	"slices"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
)

// Snapshot returns the job's observable state; nothing in it that the core changes is shared with it (the
// job graph and the restore point are, and neither changes).
func (c *Core) Snapshot() Snapshot {
	snap := Snapshot{Status: c.status, Err: c.err, Started: c.started, Ended: c.ended, Waiting: c.waiting,
		FiredInjections: slices.Clone(c.fired), RestorePoint: c.restorePoint()}
	for _, f := range c.history.Events() {
		snap.Failovers = append(snap.Failovers, f.Report())
	}
	snap.FailoverTotals = c.history.Totals()
	if c.coord != nil {
		counts := c.coord.Counts()
		snap.Checkpoints, snap.CheckpointsInProgress = &counts, len(c.coord.InProgress())
		snap.CheckpointHistory = c.coord.History()
	}
	if sp := c.savepoint; sp != nil {
		snap.Savepoint, snap.SavepointErr = sp.written, sp.err
	}
	switch snap.Status {
	case StatusFailing, StatusCanceling:
		snap.Status = StatusRunning
	}
	for _, v := range c.cfg.Job.Vertices {
		vs := VertexStatus{Vertex: v}
		for i := 0; i < v.Parallelism; i++ {
			ex := c.execs[ident.Subtask{Vertex: v.ID, Index: int32(i)}]
			st := SubtaskStatus{Index: i, Attempt: int(ex.attempt.Number), State: ex.state, RecordsIn: ex.in, RecordsOut: ex.out,
				Watermark: ex.watermark, HasWatermark: ex.hasWatermark, Metrics: ex.metrics}
			if ex.state == deploy.Running {
				st.Times, st.InflightLogBytes = ex.times, ex.logBytes
			}
			switch {
			case ex.tm != 0:
				st.TaskManager = c.tms[ex.tm].name
			case c.slots[ex.slot] != nil:
				st.TaskManager = c.slots[ex.slot].Name
			}
			vs.RecordsIn += st.RecordsIn
			vs.RecordsOut += st.RecordsOut
			vs.Subtasks = append(vs.Subtasks, st)
		}
		snap.Vertices = append(snap.Vertices, vs)
	}
	return snap
}

package jobmaster

import (
	"fmt"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/scheduler"
	"github.com/runnel-dev/runnel/internal/task"
)

// placeSubtask returns the TaskManager of subtask s: with slot sharing that of slot s.Index; without, the
// subtasks fill the TaskManagers round-robin in vertex order.
func (jm *JobMaster) placeSubtask(s ident.Subtask) TaskManager {
	if !jm.cfg.NoSlotSharing {
		return jm.placement(int(s.Index))
	}
	k := int(s.Index)
	for _, v := range jm.cfg.Job.Vertices {
		if v.ID == s.Vertex {
			break
		}
		k += v.Parallelism
	}
	return jm.placement(k)
}

// placement returns the TaskManager of slot i.
func (jm *JobMaster) placement(i int) TaskManager {
	return jm.cfg.TaskManagers[i%len(jm.cfg.TaskManagers)]
}

// restorePoint is the checkpoint that subtasks deployed now restore: the latest completed one that is
// known to be valid (see verifiedLatest), or the savepoint the job started from, or nil.
func (jm *JobMaster) restorePoint() *checkpoint.CompletedCheckpoint {
	if jm.coord != nil && jm.coord.LatestCompleted() != nil {
		return jm.coord.LatestCompleted()
	}
	return jm.initial
}

// deployRegions deploys every not yet deployed subtask of the regions, restoring state from restore (a
// failover passes the checkpoint it verified and reports; other deployments pass restorePoint()).
func (jm *JobMaster) deployRegions(regions []scheduler.RegionID, restore *checkpoint.CompletedCheckpoint) {
	for _, r := range regions {
		for _, s := range jm.topo.Members(r) {
			jm.mu.Lock()
			ex := jm.execs[s]
			fresh := ex.state == task.Created
			jm.mu.Unlock()
			if !fresh {
				continue
			}
			if err := jm.deploy(s, restore); err != nil {
				jm.fail(fmt.Errorf("deploy %s: %w", jm.name(s), err))
				return
			}
		}
	}
}

// allRunning reports whether every subtask is running or finished. Checkpoints are triggered only then: a
// subtask still connecting its inputs (a restarted consumer of an approximate partition, in particular)
// would miss the barriers its producers send meanwhile, and every other task would wait for it in alignment.
func (jm *JobMaster) allRunning() bool {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, ex := range jm.execs {
		if ex.state != task.Running && ex.state != task.Finished {
			return false
		}
	}
	return true
}

// deploy builds the descriptor of the current attempt of s and submits it; restore is the checkpoint its
// state comes from, if any.
func (jm *JobMaster) deploy(s ident.Subtask, restore *checkpoint.CompletedCheckpoint) error {
	jm.mu.Lock()
	ex := jm.execs[s]
	ex.state = task.Deploying
	jm.mu.Unlock()
	cfg, err := jm.descriptor(ex)
	if err == nil && jm.cfg.Checkpoint != nil {
		mode := jm.cfg.Checkpoint.Mode
		cfg.Checkpoints = &task.CheckpointSetup{
			Store:       jm.cfg.Storage,
			AtLeastOnce: mode == checkpoint.AtLeastOnce,
			// With periodic checkpoints a task whose input ended waits for one covering its end (the
			// coordinator triggers it at once when every input ended); without, nothing would come.
			FinalCheckpoint: jm.cfg.Checkpoint.IntervalMillis > 0,
			Ack: func(id int64, from ident.Attempt, h checkpoint.StateHandle) {
				jm.sendAck(ackMsg{id: id, from: from, handle: h})
			},
			Decline: func(id int64, from ident.Attempt, err error) {
				jm.sendAck(ackMsg{id: id, from: from, err: err})
			},
		}
	}
	if restore != nil {
		id := restore.ID
		ex.restoredFrom = &id
	} else {
		ex.restoredFrom = nil
	}
	ex.skipUpTo = cfg.SkipCheckpointsUpTo
	if err == nil && restore != nil {
		cfg.Restore = jm.restoreSpec(s, restore)
		if cfg.Restore != nil {
			cfg.Restore.SameRun = jm.coord != nil && restore.ID >= jm.firstCheckpointID
			if sp := jm.cfg.Savepoint; sp != nil && sp.Checkpoint.ID == restore.ID {
				cfg.Restore.Read = sp.ReadState
			}
		}
	}
	if err == nil {
		err = ex.tm.Submit(cfg, jm.report)
	}
	if err != nil {
		jm.mu.Lock()
		ex.state = task.Failed
		jm.mu.Unlock()
	}
	return err
}

func (jm *JobMaster) descriptor(ex *execution) (task.Config, error) {
	v := jm.cfg.Job.Vertex(ex.attempt.Vertex)
	idx := int(ex.attempt.Index)
	cfg := task.Config{
		Info: task.Info{JobName: jm.cfg.Job.Name, VertexName: v.Name, Attempt: ex.attempt,
			Parallelism: v.Parallelism, MaxParallelism: v.MaxParallelism, TaskManager: ex.tm.Name()},
		Chain:               jm.cfg.ChainFor(v),
		SkipCheckpointsUpTo: jm.lastTriggered,
		BufferTimeout:       jm.cfg.BufferTimeout,
		MaxRecordSize:       jm.cfg.MaxRecordSize,
		CreditsPerChannel:   jm.cfg.CreditsPerChannel,
		StateBackend:        jm.cfg.StateBackend,
	}
	for _, e := range v.Outputs {
		cfg.Outputs = append(cfg.Outputs, task.OutputSpec{
			Result: e.Result, Subpartitions: len(graph.ConsumersOf(e, idx)), Reconnectable: e.PartitionType.Reconnectable(),
			Blocking: e.PartitionType == graph.Blocking,
		})
	}
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, e := range v.Inputs {
		var in task.InputSpec
		for _, p := range graph.ProducersOf(e, idx) {
			prod := jm.execs[ident.Subtask{Vertex: e.Source.ID, Index: int32(p)}]
			sub := graph.SubpartitionIndex(e, p, idx)
			if sub < 0 {
				return cfg, fmt.Errorf("edge %s -> %s: producer %d does not feed consumer %d", e.Source.Name, v.Name, p, idx)
			}
			spec := task.ChannelSpec{
				Partition:    ident.PartitionID{Result: e.Result, Producer: prod.attempt},
				Subpartition: sub,
				Local:        prod.tm == ex.tm,
				Address:      prod.tm.DataAddress(),
			}
			if !spec.Local {
				// For this consumer attempt only: a later attempt, or anyone claiming to be one, needs its own.
				spec.Job = jm.jobID
				spec.Credential = network.PartitionCredential(jm.secret, jm.jobID, spec.Partition, sub, ex.attempt)
			}
			in.Channels = append(in.Channels, spec)
		}
		cfg.Inputs = append(cfg.Inputs, in)
	}
	return cfg, nil
}

// restoreSpec returns the state subtask s starts from in checkpoint cp (nil: none).
func (jm *JobMaster) restoreSpec(s ident.Subtask, cp *checkpoint.CompletedCheckpoint) *task.RestoreSpec {
	return jobcore.RestoreSpecOf(jm.cfg.Job.Vertex(s.Vertex), s, cp)
}

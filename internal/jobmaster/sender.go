package jobmaster

import (
	"errors"
	"sync"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/scheduler"
	"github.com/runnel-dev/runnel/internal/task"
)

// pollCounters is the loop's own message to a sender: ask the TaskManager for these attempts' counters.
type pollCounters struct{ attempts []ident.Attempt }

// sender delivers the messages of one TaskManager in the order the core asked for them, on a goroutine of
// its own, so that a TaskManager that is slow to answer holds up its own messages only. Its queue is not
// bounded here: what the core asks of one TaskManager is bounded by the job's subtasks on it (a deploy, a
// cancel and a release per attempt, a few checkpoint messages per checkpoint), and the loop must never wait
// for a sender, which waits for the loop's inbox.
type sender struct {
	d  *Driver
	id jobcore.TaskManagerID
	tm TaskManager

	mu     sync.Mutex
	queue  []any // jobcore.MessageBody or pollCounters
	closed bool
	wake   chan struct{} // one token: the queue changed
}

func newSender(d *Driver, id jobcore.TaskManagerID, tm TaskManager) *sender {
	return &sender{d: d, id: id, tm: tm, wake: make(chan struct{}, 1)}
}

func (s *sender) enqueue(m any) {
	s.mu.Lock()
	s.queue = append(s.queue, m)
	s.mu.Unlock()
	s.signal()
}

// close lets the sender deliver what is queued and end.
func (s *sender) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
}

func (s *sender) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sender) run() {
	defer s.d.workers.Done()
	for {
		s.mu.Lock()
		batch, closed := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		for _, m := range batch {
			s.deliver(m)
		}
		if len(batch) == 0 {
			if closed {
				return
			}
			<-s.wake
		}
	}
}

// deliver carries out one message by calling the TaskManager; answers go to the loop's inbox.
func (s *sender) deliver(m any) {
	d := s.d
	switch m := m.(type) {
	case jobcore.SetupJob:
		s.tm.SetupJob(d.jobID, d.secret)
		d.post(jobcore.JobSetUp{TaskManager: s.id})
	case jobcore.Deploy:
		cfg := d.taskConfig(m.Deployment)
		if err := s.tm.Submit(cfg, d.report); err != nil {
			d.post(jobcore.TaskUpdate{Attempt: cfg.Info.Attempt, State: task.Failed,
				Failure: &jobcore.Failure{Message: err.Error(), Kind: jobcore.FailureDeploy, Cause: err}})
		}
	case jobcore.CancelTask:
		s.tm.Cancel(m.Attempt)
	case jobcore.ReleasePartitions:
		s.tm.ReleasePartitions(m.Attempt)
	case jobcore.SampleSubpartitions:
		ans := jobcore.SubpartitionsSampled{Token: m.Token}
		for _, ch := range m.Channels {
			if st, ok := s.tm.SubpartitionStats(ch.Partition, ch.Subpartition); ok {
				ans.Samples = append(ans.Samples, jobcore.ChannelCounters{Channel: ch,
					Counters: jobcore.SubpartitionCounters{RecordsDropped: st.RecordsDropped, BuffersDropped: st.BuffersDropped}})
			}
		}
		d.post(ans)
	case jobcore.Probe:
		// An in-process TaskManager is there as long as the process is.
		d.post(jobcore.TaskManagerAlive{TaskManager: s.id})
	case jobcore.TriggerCheckpoint:
		var flags uint32
		if m.Mode == checkpoint.AtLeastOnce {
			flags = BarrierFlagAtLeastOnce
		}
		if !s.tm.TriggerCheckpoint(m.Attempt, m.ID, m.TimestampMillis, flags) {
			d.post(jobcore.CheckpointDecline{ID: m.ID, Attempt: m.Attempt, Err: checkpoint.ErrTaskNotReady, NotReady: true})
		}
	case jobcore.AbortCheckpoint:
		s.tm.AbortCheckpoint(m.Attempt, m.ID)
	case jobcore.NotifyCheckpointComplete:
		s.tm.NotifyCheckpointComplete(m.Attempt, m.ID)
	case pollCounters:
		var c jobcore.Counters
		for _, a := range m.attempts {
			if in, out, ok := s.tm.Counters(a); ok {
				c.Counts = append(c.Counts, jobcore.AttemptCounters{Attempt: a, In: in, Out: out})
			}
		}
		if len(c.Counts) > 0 {
			d.post(c)
		}
	default:
		d.log.Error("job master: a message of no known kind", "message", m)
	}
}

// report takes a task's updates to the loop. Called from the task's goroutine.
func (d *Driver) report(u task.Update) {
	if o := u.Observation; o != nil {
		// The task's clock is this process's: the same one the job's start was read from.
		d.post(jobcore.Observation{Attempt: u.Attempt, Kind: o.Kind,
			Channel: jobcore.Channel{Partition: o.Channel.Partition, Subpartition: o.Channel.Subpartition},
			Lost:    o.Lost, PartialSkipped: o.PartialSkipped, At: max(o.At.Sub(d.started), 0)})
		return
	}
	tu := jobcore.TaskUpdate{Attempt: u.Attempt, State: u.State, RecordsIn: u.RecordsIn, RecordsOut: u.RecordsOut}
	if u.Err != nil {
		tu.Failure = &jobcore.Failure{Message: u.Err.Error(), NonRecoverable: errors.Is(u.Err, scheduler.ErrNonRecoverable), Cause: u.Err}
	}
	d.post(tu)
}

// taskConfig turns the core's deployment into the task's configuration: the operator chain from this
// process's build of the job, the checkpoint storage and acknowledgement callbacks, the savepoint's reader
// for a restore from it, and a credential on every remote channel for this consumer attempt only.
func (d *Driver) taskConfig(dep jobcore.Deployment) task.Config {
	v := d.cfg.Job.Vertex(dep.Info.Attempt.Vertex)
	cfg := task.Config{Info: dep.Info, Outputs: dep.Outputs, Chain: d.cfg.ChainFor(v), BufferTimeout: dep.BufferTimeout,
		MaxRecordSize: dep.MaxRecordSize, CreditsPerChannel: dep.CreditsPerChannel, StateBackend: dep.StateBackend,
		SkipCheckpointsUpTo: dep.SkipCheckpointsUpTo, Restore: dep.Restore}
	if cs := dep.Checkpoints; cs != nil {
		cfg.Checkpoints = &task.CheckpointSetup{Store: d.cfg.Storage, AtLeastOnce: cs.AtLeastOnce, FinalCheckpoint: cs.FinalCheckpoint,
			Ack: func(id int64, from ident.Attempt, h checkpoint.StateHandle) {
				d.post(jobcore.CheckpointAck{ID: id, Attempt: from, Handle: h})
			},
			Decline: func(id int64, from ident.Attempt, err error) {
				d.post(jobcore.CheckpointDecline{ID: id, Attempt: from, Err: err})
			}}
	}
	if r := cfg.Restore; r != nil {
		if sp := d.cfg.Savepoint; sp != nil && sp.Checkpoint.ID == r.CheckpointID {
			rr := *r
			rr.Read = sp.ReadState
			cfg.Restore = &rr
		}
	}
	for _, in := range dep.Inputs {
		out := task.InputSpec{Channels: make([]task.ChannelSpec, len(in.Channels))}
		copy(out.Channels, in.Channels)
		for i := range out.Channels {
			spec := &out.Channels[i]
			if !spec.Local {
				spec.Job = d.jobID
				spec.Credential = network.PartitionCredential(d.secret, d.jobID, spec.Partition, spec.Subpartition, dep.Info.Attempt)
			}
		}
		cfg.Inputs = append(cfg.Inputs, out)
	}
	return cfg
}

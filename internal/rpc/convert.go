package rpc

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc/pb"
)

// The conversions below map every field of every body both ways. What does not cross, by design:
//   - jobcore.Failure.Cause (the error itself stays in its process; its text is Message),
//   - deploy.RestoreSpec.Read (a function: the TaskManager supplies its own reader),
//   - the TaskManager fields of jobcore.JobSetUp and jobcore.TaskManagerAlive (the JobManager's session
//     layer knows which session a message came from and fills them in),
//   - error values, which cross as their text (JobSetUp.Err, CheckpointDecline.Err); a decline's error
//     still satisfies errors.Is(err, checkpoint.ErrTaskNotReady) after the trip when it did before.
//
// Empty slices, maps and byte strings come back nil. Every []byte is copied on the way out, so a message
// handed to a transport never shares memory with the caller's value, which the caller may reuse at once.
// Enumerations are checked both ways: a value outside its Go type's constants is an error, not a number
// carried blindly into the other process.

// encodeToTaskManager converts an envelope a JobManager sends.
func encodeToTaskManager(env protocol.Envelope) (*pb.ToTaskManager, error) {
	m := &pb.ToTaskManager{Job: jobBytes(env.Job)}
	switch b := env.Body.(type) {
	case protocol.Registered:
		m.Body = &pb.ToTaskManager_Registered{Registered: &pb.Registered{TaskManager: b.TaskManager,
			HeartbeatIntervalNanos: int64(b.HeartbeatInterval), HeartbeatTimeoutNanos: int64(b.HeartbeatTimeout), Epoch: b.Epoch}}
	case protocol.Refused:
		m.Body = &pb.ToTaskManager_Refused{Refused: &pb.Refused{Reason: b.Reason, Permanent: b.Permanent}}
	case protocol.Heartbeat:
		m.Body = &pb.ToTaskManager_Heartbeat{Heartbeat: &pb.Heartbeat{HeapBytes: b.HeapBytes, MemoryBytes: b.MemoryBytes}}
	case protocol.SetupJob:
		m.Body = &pb.ToTaskManager_SetupJob{SetupJob: encodeSetup(b)}
	case protocol.ReleaseJob:
		m.Body = &pb.ToTaskManager_ReleaseJob{ReleaseJob: &pb.ReleaseJob{}}
	case protocol.AdoptJob:
		m.Body = &pb.ToTaskManager_AdoptJob{AdoptJob: &pb.AdoptJob{}}
	case protocol.DropJob:
		m.Body = &pb.ToTaskManager_DropJob{DropJob: &pb.DropJob{Reason: b.Reason}}
	case jobcore.Deploy:
		m.Body = &pb.ToTaskManager_Deploy{Deploy: encodeDeployment(b.Deployment)}
	case jobcore.CancelTask:
		m.Body = &pb.ToTaskManager_CancelTask{CancelTask: &pb.CancelTask{Attempt: encodeAttempt(b.Attempt)}}
	case jobcore.ReleasePartitions:
		m.Body = &pb.ToTaskManager_ReleasePartitions{ReleasePartitions: &pb.ReleasePartitions{Attempt: encodeAttempt(b.Attempt)}}
	case jobcore.TriggerCheckpoint:
		if !b.Mode.Valid() {
			return nil, fmt.Errorf("TriggerCheckpoint %d: unknown checkpoint mode %d", b.ID, b.Mode)
		}
		m.Body = &pb.ToTaskManager_TriggerCheckpoint{TriggerCheckpoint: &pb.TriggerCheckpoint{Attempt: encodeAttempt(b.Attempt),
			Id: b.ID, TimestampMillis: b.TimestampMillis, Mode: pb.CheckpointMode(b.Mode)}}
	case jobcore.AbortCheckpoint:
		m.Body = &pb.ToTaskManager_AbortCheckpoint{AbortCheckpoint: &pb.AbortCheckpoint{Attempt: encodeAttempt(b.Attempt), Id: b.ID}}
	case jobcore.NotifyCheckpointComplete:
		m.Body = &pb.ToTaskManager_NotifyCheckpointComplete{NotifyCheckpointComplete: &pb.NotifyCheckpointComplete{
			Attempt: encodeAttempt(b.Attempt), Id: b.ID}}
	case jobcore.SampleSubpartitions:
		s := &pb.SampleSubpartitions{Token: b.Token}
		for _, ch := range b.Channels {
			s.Channels = append(s.Channels, encodeChannel(ch))
		}
		m.Body = &pb.ToTaskManager_SampleSubpartitions{SampleSubpartitions: s}
	case jobcore.Probe:
		m.Body = &pb.ToTaskManager_Probe{Probe: &pb.Probe{}}
	default:
		return nil, fmt.Errorf("a message of type %T cannot be sent to a TaskManager", env.Body)
	}
	return m, nil
}

// decodeToTaskManager converts what a TaskManager received back into an envelope. A Goodbye is not an
// envelope: it comes back as bye, with the reason it carries.
func decodeToTaskManager(m *pb.ToTaskManager) (env protocol.Envelope, bye *pb.Goodbye, err error) {
	if env.Job, err = decodeJob(m.GetJob()); err != nil {
		return env, nil, err
	}
	switch b := m.GetBody().(type) {
	case *pb.ToTaskManager_Registered:
		r := b.Registered
		env.Body = protocol.Registered{TaskManager: r.GetTaskManager(), HeartbeatInterval: time.Duration(r.GetHeartbeatIntervalNanos()),
			HeartbeatTimeout: time.Duration(r.GetHeartbeatTimeoutNanos()), Epoch: r.GetEpoch()}
	case *pb.ToTaskManager_Refused:
		env.Body = protocol.Refused{Reason: b.Refused.GetReason(), Permanent: b.Refused.GetPermanent()}
	case *pb.ToTaskManager_Heartbeat:
		env.Body = protocol.Heartbeat{HeapBytes: b.Heartbeat.GetHeapBytes(), MemoryBytes: b.Heartbeat.GetMemoryBytes()}
	case *pb.ToTaskManager_SetupJob:
		sj, err := decodeSetup(b.SetupJob)
		if err != nil {
			return env, nil, err
		}
		env.Body = sj
	case *pb.ToTaskManager_ReleaseJob:
		env.Body = protocol.ReleaseJob{}
	case *pb.ToTaskManager_AdoptJob:
		env.Body = protocol.AdoptJob{}
	case *pb.ToTaskManager_DropJob:
		env.Body = protocol.DropJob{Reason: b.DropJob.GetReason()}
	case *pb.ToTaskManager_Deploy:
		d, err := decodeDeployment(b.Deploy)
		if err != nil {
			return env, nil, err
		}
		env.Body = jobcore.Deploy{Deployment: d}
	case *pb.ToTaskManager_CancelTask:
		env.Body = jobcore.CancelTask{Attempt: decodeAttempt(b.CancelTask.GetAttempt())}
	case *pb.ToTaskManager_ReleasePartitions:
		env.Body = jobcore.ReleasePartitions{Attempt: decodeAttempt(b.ReleasePartitions.GetAttempt())}
	case *pb.ToTaskManager_TriggerCheckpoint:
		t := b.TriggerCheckpoint
		mode := barrier.Mode(t.GetMode())
		if !mode.Valid() {
			return env, nil, fmt.Errorf("TriggerCheckpoint %d: unknown checkpoint mode %d", t.GetId(), t.GetMode())
		}
		env.Body = jobcore.TriggerCheckpoint{Attempt: decodeAttempt(t.GetAttempt()), ID: t.GetId(),
			TimestampMillis: t.GetTimestampMillis(), Mode: mode}
	case *pb.ToTaskManager_AbortCheckpoint:
		env.Body = jobcore.AbortCheckpoint{Attempt: decodeAttempt(b.AbortCheckpoint.GetAttempt()), ID: b.AbortCheckpoint.GetId()}
	case *pb.ToTaskManager_NotifyCheckpointComplete:
		n := b.NotifyCheckpointComplete
		env.Body = jobcore.NotifyCheckpointComplete{Attempt: decodeAttempt(n.GetAttempt()), ID: n.GetId()}
	case *pb.ToTaskManager_SampleSubpartitions:
		s := jobcore.SampleSubpartitions{Token: b.SampleSubpartitions.GetToken()}
		for _, ch := range b.SampleSubpartitions.GetChannels() {
			s.Channels = append(s.Channels, decodeChannel(ch))
		}
		env.Body = s
	case *pb.ToTaskManager_Probe:
		env.Body = jobcore.Probe{}
	case *pb.ToTaskManager_Goodbye:
		return env, b.Goodbye, nil
	default:
		return env, nil, fmt.Errorf("a message to a TaskManager with body %T, which this build does not know", m.GetBody())
	}
	return env, nil, nil
}

// encodeFromTaskManager converts an envelope a TaskManager sends.
func encodeFromTaskManager(env protocol.Envelope) (*pb.FromTaskManager, error) {
	m := &pb.FromTaskManager{Job: jobBytes(env.Job)}
	switch b := env.Body.(type) {
	case protocol.Register:
		r := &pb.Register{Version: int64(b.Version), Name: b.Name, Slots: int64(b.Slots),
			DataAddress: b.DataAddress, BufferSize: int64(b.BufferSize), Build: encodeBuild(b.Build)}
		for _, k := range b.Kept {
			kj := &pb.KeptJob{Job: jobBytes(k.Job), Setup: encodeSetup(k.Setup), Checkpoint: k.Checkpoint, Restored: k.Restored}
			for _, t := range k.Tasks {
				if err := checkState(t.State); err != nil {
					return nil, fmt.Errorf("Register: kept task %s: %w", t.Attempt, err)
				}
				kj.Tasks = append(kj.Tasks, &pb.KeptTask{Attempt: encodeAttempt(t.Attempt), PartitionAttempt: t.PartitionAttempt,
					State: pb.TaskState(t.State), Failure: t.Failure, Replaying: t.Replaying})
			}
			r.Kept = append(r.Kept, kj)
		}
		m.Body = &pb.FromTaskManager_Register{Register: r}
	case protocol.Heartbeat:
		m.Body = &pb.FromTaskManager_Heartbeat{Heartbeat: &pb.Heartbeat{HeapBytes: b.HeapBytes, MemoryBytes: b.MemoryBytes}}
	case protocol.Leaving:
		m.Body = &pb.FromTaskManager_Leaving{Leaving: &pb.Leaving{Reason: b.Reason}}
	case protocol.NewLeader:
		m.Body = &pb.FromTaskManager_NewLeader{NewLeader: &pb.NewLeader{Epoch: b.Epoch}}
	case jobcore.JobSetUp:
		m.Body = &pb.FromTaskManager_JobSetUp{JobSetUp: &pb.JobSetUp{Err: errText(b.Err)}}
	case jobcore.TaskUpdate:
		if err := checkState(b.State); err != nil {
			return nil, fmt.Errorf("TaskUpdate of %s: %w", b.Attempt, err)
		}
		u := &pb.TaskUpdate{Attempt: encodeAttempt(b.Attempt), State: pb.TaskState(b.State), RecordsIn: b.RecordsIn, RecordsOut: b.RecordsOut, Watermark: b.Watermark,
			Metrics: encodeMetrics(b.Metrics)}
		if f := b.Failure; f != nil {
			if f.Kind != jobcore.FailureTask && f.Kind != jobcore.FailureDeploy {
				return nil, fmt.Errorf("TaskUpdate of %s: unknown failure kind %d", b.Attempt, f.Kind)
			}
			if f.Replay > jobcore.MaxReplayFailure {
				return nil, fmt.Errorf("TaskUpdate of %s: unknown replay failure %d", b.Attempt, f.Replay)
			}
			u.Failure = &pb.Failure{Message: f.Message, Kind: pb.FailureKind(f.Kind), NonRecoverable: f.NonRecoverable,
				PeerDataAddress: f.PeerDataAddress, Injected: f.Injected, Injection: int64(f.Injection), Replay: pb.ReplayFailure(f.Replay), Stack: f.Stack}
		}
		m.Body = &pb.FromTaskManager_TaskUpdate{TaskUpdate: u}
	case jobcore.Observation:
		if b.Kind > deploy.DuplicatesDropped {
			return nil, fmt.Errorf("an Observation of %s: unknown kind %d", b.Attempt, b.Kind)
		}
		m.Body = &pb.FromTaskManager_Observation{Observation: &pb.Observation{Attempt: encodeAttempt(b.Attempt), Kind: pb.ObservationKind(b.Kind),
			Channel: encodeChannel(b.Channel), Lost: b.Lost, PartialSkipped: b.PartialSkipped, AtNanos: int64(b.At), Records: b.Records, SnapshotBefore: b.SnapshotBefore}}
	case jobcore.CheckpointAck:
		m.Body = &pb.FromTaskManager_CheckpointAck{CheckpointAck: &pb.CheckpointAck{Id: b.ID, Attempt: encodeAttempt(b.Attempt),
			Handle: encodeHandle(b.Handle), AlignmentNanos: int64(b.Alignment), ChannelStateBytes: b.ChannelStateBytes}}
	case jobcore.CheckpointDecline:
		m.Body = &pb.FromTaskManager_CheckpointDecline{CheckpointDecline: &pb.CheckpointDecline{Id: b.ID, Attempt: encodeAttempt(b.Attempt),
			Err: errText(b.Err), ErrNotReady: errors.Is(b.Err, checkpoint.ErrTaskNotReady), NotReady: b.NotReady}}
	case jobcore.Counters:
		c := &pb.Counters{}
		for _, a := range b.Counts {
			c.Counts = append(c.Counts, &pb.AttemptCounters{Attempt: encodeAttempt(a.Attempt), In: a.In, Out: a.Out, Watermark: a.Watermark,
				Metrics: encodeMetrics(a.Metrics), BusyMsPerSecond: a.Times.BusyMsPerSecond,
				BackpressuredMsPerSecond: a.Times.BackpressuredMsPerSecond, IdleMsPerSecond: a.Times.IdleMsPerSecond,
				InflightLogBytes: a.InflightLogBytes})
		}
		m.Body = &pb.FromTaskManager_Counters{Counters: c}
	case jobcore.SubpartitionsSampled:
		s := &pb.SubpartitionsSampled{Token: b.Token, Missing: b.Missing}
		for _, c := range b.Samples {
			s.Samples = append(s.Samples, &pb.ChannelCounters{Channel: encodeChannel(c.Channel),
				RecordsDropped: c.Counters.RecordsDropped, BuffersDropped: c.Counters.BuffersDropped})
		}
		m.Body = &pb.FromTaskManager_SubpartitionsSampled{SubpartitionsSampled: s}
	case protocol.Accumulators:
		m.Body = &pb.FromTaskManager_Accumulators{Accumulators: &pb.Accumulators{Values: cloneValues(b.Values), Final: b.Final}}
	case jobcore.TaskManagerAlive:
		m.Body = &pb.FromTaskManager_TaskManagerAlive{TaskManagerAlive: &pb.TaskManagerAlive{}}
	default:
		return nil, fmt.Errorf("a message of type %T cannot be sent to a JobManager", env.Body)
	}
	return m, nil
}

// decodeFromTaskManager converts what a JobManager received back into an envelope (a Goodbye as bye).
func decodeFromTaskManager(m *pb.FromTaskManager) (env protocol.Envelope, bye *pb.Goodbye, err error) {
	if env.Job, err = decodeJob(m.GetJob()); err != nil {
		return env, nil, err
	}
	switch b := m.GetBody().(type) {
	case *pb.FromTaskManager_Register:
		r := b.Register
		build, err := decodeBuild(r.GetBuild())
		if err != nil {
			return env, nil, err
		}
		reg := protocol.Register{Version: int(r.GetVersion()), Name: r.GetName(), Slots: int(r.GetSlots()), DataAddress: r.GetDataAddress(),
			BufferSize: int(r.GetBufferSize()), Build: build}
		for _, k := range r.GetKept() {
			kj := protocol.KeptJob{Checkpoint: k.GetCheckpoint(), Restored: k.GetRestored()}
			if kj.Job, err = decodeJob(k.GetJob()); err != nil {
				return env, nil, fmt.Errorf("Register: kept job: %w", err)
			}
			if kj.Setup, err = decodeSetup(k.GetSetup()); err != nil {
				return env, nil, fmt.Errorf("Register: kept job %s: %w", kj.Job, err)
			}
			for _, t := range k.GetTasks() {
				st := deploy.State(t.GetState())
				if err := checkState(st); err != nil {
					return env, nil, fmt.Errorf("Register: kept job %s: %w", kj.Job, err)
				}
				kj.Tasks = append(kj.Tasks, protocol.KeptTask{Attempt: decodeAttempt(t.GetAttempt()), PartitionAttempt: t.GetPartitionAttempt(),
					State: st, Failure: t.GetFailure(), Replaying: t.GetReplaying()})
			}
			reg.Kept = append(reg.Kept, kj)
		}
		env.Body = reg
	case *pb.FromTaskManager_Heartbeat:
		env.Body = protocol.Heartbeat{HeapBytes: b.Heartbeat.GetHeapBytes(), MemoryBytes: b.Heartbeat.GetMemoryBytes()}
	case *pb.FromTaskManager_Leaving:
		env.Body = protocol.Leaving{Reason: b.Leaving.GetReason()}
	case *pb.FromTaskManager_NewLeader:
		env.Body = protocol.NewLeader{Epoch: b.NewLeader.GetEpoch()}
	case *pb.FromTaskManager_JobSetUp:
		env.Body = jobcore.JobSetUp{Err: textErr(b.JobSetUp.Err, false)}
	case *pb.FromTaskManager_TaskUpdate:
		u := b.TaskUpdate
		st := deploy.State(u.GetState())
		if err := checkState(st); err != nil {
			return env, nil, fmt.Errorf("TaskUpdate: %w", err)
		}
		tu := jobcore.TaskUpdate{Attempt: decodeAttempt(u.GetAttempt()), State: st, RecordsIn: u.GetRecordsIn(), RecordsOut: u.GetRecordsOut(), Watermark: u.GetWatermark(),
			Metrics: decodeMetrics(u.GetMetrics())}
		if f := u.GetFailure(); f != nil {
			kind := jobcore.FailureKind(f.GetKind())
			if f.GetKind() != pb.FailureKind_FAILURE_KIND_TASK && f.GetKind() != pb.FailureKind_FAILURE_KIND_DEPLOY {
				return env, nil, fmt.Errorf("TaskUpdate of %s: unknown failure kind %d", tu.Attempt, f.GetKind())
			}
			// Like an unknown kind: read as none, it would have the job master try the same replay again.
			if r := f.GetReplay(); r < 0 || r > pb.ReplayFailure(jobcore.MaxReplayFailure) {
				return env, nil, fmt.Errorf("TaskUpdate of %s: unknown replay failure %d", tu.Attempt, r)
			}
			tu.Failure = &jobcore.Failure{Message: f.GetMessage(), Kind: kind, NonRecoverable: f.GetNonRecoverable(),
				PeerDataAddress: f.GetPeerDataAddress(), Injected: f.GetInjected(), Injection: int(f.GetInjection()),
				Replay: jobcore.ReplayFailure(f.GetReplay()), Stack: f.GetStack()}
		}
		env.Body = tu
	case *pb.FromTaskManager_Observation:
		o := b.Observation
		if o.GetKind() < 0 || o.GetKind() > pb.ObservationKind_OBSERVATION_KIND_DUPLICATES_DROPPED {
			return env, nil, fmt.Errorf("an Observation: unknown kind %d", o.GetKind())
		}
		env.Body = jobcore.Observation{Attempt: decodeAttempt(o.GetAttempt()), Kind: deploy.ObservationKind(o.GetKind()),
			Channel: decodeChannel(o.GetChannel()), Lost: o.GetLost(), PartialSkipped: o.GetPartialSkipped(), At: time.Duration(o.GetAtNanos()), Records: o.GetRecords(), SnapshotBefore: o.GetSnapshotBefore()}
	case *pb.FromTaskManager_CheckpointAck:
		a := b.CheckpointAck
		env.Body = jobcore.CheckpointAck{ID: a.GetId(), Attempt: decodeAttempt(a.GetAttempt()), Handle: decodeHandle(a.GetHandle()),
			Alignment: time.Duration(a.GetAlignmentNanos()), ChannelStateBytes: a.GetChannelStateBytes()}
	case *pb.FromTaskManager_CheckpointDecline:
		d := b.CheckpointDecline
		env.Body = jobcore.CheckpointDecline{ID: d.GetId(), Attempt: decodeAttempt(d.GetAttempt()), Err: textErr(d.Err, d.GetErrNotReady()),
			NotReady: d.GetNotReady()}
	case *pb.FromTaskManager_Counters:
		var c jobcore.Counters
		for _, a := range b.Counters.GetCounts() {
			c.Counts = append(c.Counts, jobcore.AttemptCounters{Attempt: decodeAttempt(a.GetAttempt()), In: a.GetIn(), Out: a.GetOut(), Watermark: a.GetWatermark(),
				Metrics: decodeMetrics(a.GetMetrics()), Times: jobcore.TimeRates{BusyMsPerSecond: a.GetBusyMsPerSecond(),
					BackpressuredMsPerSecond: a.GetBackpressuredMsPerSecond(), IdleMsPerSecond: a.GetIdleMsPerSecond()},
				InflightLogBytes: a.GetInflightLogBytes()})
		}
		env.Body = c
	case *pb.FromTaskManager_SubpartitionsSampled:
		s := b.SubpartitionsSampled
		out := jobcore.SubpartitionsSampled{Token: s.GetToken(), Missing: s.GetMissing()}
		for _, c := range s.GetSamples() {
			out.Samples = append(out.Samples, jobcore.ChannelCounters{Channel: decodeChannel(c.GetChannel()),
				Counters: jobcore.SubpartitionCounters{RecordsDropped: c.GetRecordsDropped(), BuffersDropped: c.GetBuffersDropped()}})
		}
		env.Body = out
	case *pb.FromTaskManager_Accumulators:
		env.Body = protocol.Accumulators{Values: decodeValues(b.Accumulators.GetValues()), Final: b.Accumulators.GetFinal()}
	case *pb.FromTaskManager_TaskManagerAlive:
		env.Body = jobcore.TaskManagerAlive{}
	case *pb.FromTaskManager_Goodbye:
		return env, b.Goodbye, nil
	default:
		return env, nil, fmt.Errorf("a message from a TaskManager with body %T, which this build does not know", m.GetBody())
	}
	return env, nil, nil
}

func encodeDeployment(d jobcore.Deployment) *pb.Deploy {
	out := &pb.Deploy{
		Info: &pb.TaskInfo{JobName: d.Info.JobName, VertexName: d.Info.VertexName, Attempt: encodeAttempt(d.Info.Attempt),
			Parallelism: int64(d.Info.Parallelism), MaxParallelism: int64(d.Info.MaxParallelism), TaskManager: d.Info.TaskManager},
		BufferTimeoutNanos:  int64(d.BufferTimeout),
		MaxRecordSize:       int64(d.MaxRecordSize),
		CreditsPerChannel:   int64(d.CreditsPerChannel),
		StateBackend:        d.StateBackend,
		SkipCheckpointsUpTo: d.SkipCheckpointsUpTo,
		Determinants:        d.Determinants,
		Replay:              d.Replay,
		TakeOver:            d.TakeOver,
		PartitionAttempt:    d.PartitionAttempt,
	}
	for _, o := range d.Outputs {
		out.Outputs = append(out.Outputs, &pb.OutputSpec{Result: int32(o.Result), Subpartitions: int64(o.Subpartitions),
			Reconnectable: o.Reconnectable, Blocking: o.Blocking, Logged: o.Logged})
	}
	for _, in := range d.Inputs {
		spec := &pb.InputSpec{}
		for _, ch := range in.Channels {
			spec.Channels = append(spec.Channels, &pb.ChannelSpec{Partition: encodePartition(ch.Partition), Subpartition: int64(ch.Subpartition),
				Local: ch.Local, Address: ch.Address, Job: fixedBytes(ch.Job[:]), Credential: fixedBytes(ch.Credential[:])})
		}
		out.Inputs = append(out.Inputs, spec)
	}
	if c := d.Checkpoints; c != nil {
		out.Checkpoints = &pb.CheckpointSettings{AtLeastOnce: c.Mode == barrier.AtLeastOnce, FinalCheckpoint: c.FinalCheckpoint,
			Unaligned: c.Mode == barrier.Unaligned, AlignedTimeoutMillis: c.AlignedTimeoutMillis}
	}
	if r := d.Restore; r != nil {
		rs := &pb.RestoreSpec{CheckpointId: r.CheckpointID, Handle: encodeHandle(r.Handle), RescaledFrom: int64(r.RescaledFrom),
			SameRun: r.SameRun}
		for _, h := range r.Parts {
			rs.Parts = append(rs.Parts, encodeHandle(h))
		}
		for _, sr := range r.Reads {
			rs.Reads = append(rs.Reads, &pb.StateRead{Handle: encodeHandle(sr.Handle), Operators: slices.Clone(sr.Operators),
				RescaledFrom: int64(sr.RescaledFrom)})
		}
		out.Restore = rs
	}
	for _, i := range d.FiredInjections {
		out.FiredInjections = append(out.FiredInjections, int64(i))
	}
	return out
}

func decodeDeployment(p *pb.Deploy) (jobcore.Deployment, error) {
	info := p.GetInfo()
	d := jobcore.Deployment{
		Info: deploy.Info{JobName: info.GetJobName(), VertexName: info.GetVertexName(), Attempt: decodeAttempt(info.GetAttempt()),
			Parallelism: int(info.GetParallelism()), MaxParallelism: int(info.GetMaxParallelism()), TaskManager: info.GetTaskManager()},
		BufferTimeout:       time.Duration(p.GetBufferTimeoutNanos()),
		MaxRecordSize:       int(p.GetMaxRecordSize()),
		CreditsPerChannel:   int(p.GetCreditsPerChannel()),
		StateBackend:        p.GetStateBackend(),
		SkipCheckpointsUpTo: p.GetSkipCheckpointsUpTo(),
		Determinants:        p.GetDeterminants(),
		Replay:              p.GetReplay(),
		TakeOver:            p.GetTakeOver(),
		PartitionAttempt:    p.GetPartitionAttempt(),
	}
	for _, o := range p.GetOutputs() {
		d.Outputs = append(d.Outputs, deploy.OutputSpec{Result: ident.ResultID(o.GetResult()), Subpartitions: int(o.GetSubpartitions()),
			Reconnectable: o.GetReconnectable(), Blocking: o.GetBlocking(), Logged: o.GetLogged()})
	}
	for _, in := range p.GetInputs() {
		var spec deploy.InputSpec
		for _, ch := range in.GetChannels() {
			cs := deploy.ChannelSpec{Partition: decodePartition(ch.GetPartition()), Subpartition: int(ch.GetSubpartition()),
				Local: ch.GetLocal(), Address: ch.GetAddress()}
			if err := decodeFixed(cs.Job[:], ch.GetJob(), "Deploy channel job id"); err != nil {
				return d, err
			}
			if err := decodeFixed(cs.Credential[:], ch.GetCredential(), "Deploy channel credential"); err != nil {
				return d, err
			}
			spec.Channels = append(spec.Channels, cs)
		}
		d.Inputs = append(d.Inputs, spec)
	}
	if c := p.GetCheckpoints(); c != nil {
		d.Checkpoints = &jobcore.CheckpointSettings{Mode: barrier.ExactlyOnce, FinalCheckpoint: c.GetFinalCheckpoint()}
		switch {
		case c.GetAtLeastOnce() && c.GetUnaligned():
			return d, fmt.Errorf("deployment of %s: checkpoint settings are both at least once and unaligned", p.GetInfo().GetVertexName())
		case c.GetAtLeastOnce():
			d.Checkpoints.Mode = barrier.AtLeastOnce
		case c.GetUnaligned():
			d.Checkpoints.Mode = barrier.Unaligned
		}
		d.Checkpoints.AlignedTimeoutMillis = c.GetAlignedTimeoutMillis()
	}
	if r := p.GetRestore(); r != nil {
		rs := &deploy.RestoreSpec{CheckpointID: r.GetCheckpointId(), Handle: decodeHandle(r.GetHandle()),
			RescaledFrom: int(r.GetRescaledFrom()), SameRun: r.GetSameRun()}
		for _, h := range r.GetParts() {
			rs.Parts = append(rs.Parts, decodeHandle(h))
		}
		for _, sr := range r.GetReads() {
			rs.Reads = append(rs.Reads, deploy.StateRead{Handle: decodeHandle(sr.GetHandle()), Operators: nilIfEmpty(sr.GetOperators()),
				RescaledFrom: int(sr.GetRescaledFrom())})
		}
		d.Restore = rs
	}
	for _, i := range p.GetFiredInjections() {
		d.FiredInjections = append(d.FiredInjections, int(i))
	}
	return d, nil
}

func encodeAttempt(a ident.Attempt) *pb.Attempt {
	return &pb.Attempt{Vertex: int32(a.Vertex), Index: a.Index, Number: a.Number}
}

// decodeAttempt takes an absent attempt as the zero one, as an encoder that left it out meant.
func decodeAttempt(a *pb.Attempt) ident.Attempt {
	return ident.Attempt{Subtask: ident.Subtask{Vertex: ident.VertexID(a.GetVertex()), Index: a.GetIndex()}, Number: a.GetNumber()}
}

func encodePartition(p ident.PartitionID) *pb.PartitionId {
	return &pb.PartitionId{Result: int32(p.Result), Producer: encodeAttempt(p.Producer)}
}

func decodePartition(p *pb.PartitionId) ident.PartitionID {
	return ident.PartitionID{Result: ident.ResultID(p.GetResult()), Producer: decodeAttempt(p.GetProducer())}
}

func encodeChannel(c jobcore.Channel) *pb.Channel {
	return &pb.Channel{Partition: encodePartition(c.Partition), Subpartition: int64(c.Subpartition)}
}

func decodeChannel(c *pb.Channel) jobcore.Channel {
	return jobcore.Channel{Partition: decodePartition(c.GetPartition()), Subpartition: int(c.GetSubpartition())}
}

func encodeHandle(h checkpoint.StateHandle) *pb.StateHandle {
	out := &pb.StateHandle{Attempt: encodeAttempt(h.Attempt), Finished: h.Finished, Inline: cloneBytes(h.Inline),
		Operators: slices.Clone(h.Operators)}
	for _, b := range h.Blobs {
		out.Blobs = append(out.Blobs, &pb.BlobRef{Key: b.Key, Size: b.Size, Crc: b.CRC, Shared: b.Shared})
	}
	return out
}

func decodeHandle(h *pb.StateHandle) checkpoint.StateHandle {
	out := checkpoint.StateHandle{Attempt: decodeAttempt(h.GetAttempt()), Finished: h.GetFinished(), Inline: nilIfEmpty(h.GetInline()),
		Operators: nilIfEmpty(h.GetOperators())}
	for _, b := range h.GetBlobs() {
		out.Blobs = append(out.Blobs, checkpoint.BlobRef{Key: b.GetKey(), Size: b.GetSize(), CRC: b.GetCrc(), Shared: b.GetShared()})
	}
	return out
}

func encodeSetup(b protocol.SetupJob) *pb.SetupJob {
	return &pb.SetupJob{Name: b.Name, Args: cloneStrings(b.Args),
		Graph: fixedBytes(b.Graph[:]), Secret: cloneBytes(b.Secret), CheckpointStorage: b.CheckpointStorage,
		Savepoint: b.Savepoint, StartUnixNanos: b.Start, Probe: b.Probe, ProbeNonce: cloneBytes(b.ProbeNonce)}
}

func decodeSetup(s *pb.SetupJob) (protocol.SetupJob, error) {
	sj := protocol.SetupJob{Name: s.GetName(), Args: nilIfEmpty(s.GetArgs()), Secret: nilIfEmpty(s.GetSecret()),
		CheckpointStorage: s.GetCheckpointStorage(), Savepoint: s.GetSavepoint(), Start: s.GetStartUnixNanos(),
		Probe: s.GetProbe(), ProbeNonce: nilIfEmpty(s.GetProbeNonce())}
	if err := decodeFixed(sj.Graph[:], s.GetGraph(), "SetupJob graph fingerprint"); err != nil {
		return sj, err
	}
	return sj, nil
}

func encodeBuild(b protocol.Build) *pb.Build {
	return &pb.Build{Sum: fixedBytes(b.Sum[:]), Describe: b.Describe}
}

func decodeBuild(p *pb.Build) (protocol.Build, error) {
	b := protocol.Build{Describe: p.GetDescribe()}
	return b, decodeFixed(b.Sum[:], p.GetSum(), "build sum")
}

// checkState accepts the states task defines.
func checkState(s deploy.State) error {
	if s < deploy.Created || s > deploy.Failed {
		return fmt.Errorf("unknown task state %d", int32(s))
	}
	return nil
}

// jobBytes encodes a job id; the zero id (the session's own messages) is left out.
func jobBytes(j protocol.JobID) []byte {
	if j == (protocol.JobID{}) {
		return nil
	}
	return bytes.Clone(j[:])
}

func decodeJob(b []byte) (protocol.JobID, error) {
	var j protocol.JobID
	return j, decodeFixed(j[:], b, "job id")
}

// fixedBytes encodes a fixed-size array given as a slice of it: all zero is left out.
func fixedBytes(b []byte) []byte {
	for _, c := range b {
		if c != 0 {
			return bytes.Clone(b)
		}
	}
	return nil
}

// decodeFixed fills dst (an array's slice) from b, which is empty (zero) or exactly as long.
func decodeFixed(dst, b []byte, what string) error {
	if len(b) != 0 && len(b) != len(dst) {
		return fmt.Errorf("%s of %d bytes, want %d", what, len(b), len(dst))
	}
	copy(dst, b)
	return nil
}

func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

func cloneStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}

func cloneValues(m map[string][]byte) map[string][]byte {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = cloneBytes(v)
	}
	return out
}

// decodeValues normalizes a decoded map as cloneValues does: empty values and an empty map are nil.
func decodeValues(m map[string][]byte) map[string][]byte {
	if len(m) == 0 {
		return nil
	}
	out := maps.Clone(m)
	for k, v := range out {
		out[k] = nilIfEmpty(v)
	}
	return out
}

func nilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

// errText is an error's text for the wire; nil stays absent.
func errText(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}

// textErr is the error a peer's text stands for; absent is nil. notReady restores errors.Is(err,
// checkpoint.ErrTaskNotReady).
func textErr(s *string, notReady bool) error {
	if s == nil {
		return nil
	}
	return &remoteError{text: *s, notReady: notReady}
}

// remoteError is an error that arose in another process: its text, and whether it was a
// checkpoint.ErrTaskNotReady there.
type remoteError struct {
	text     string
	notReady bool
}

func (e *remoteError) Error() string { return e.text }

func (e *remoteError) Is(target error) bool {
	return e.notReady && target == checkpoint.ErrTaskNotReady
}

func encodeMetrics(ms []deploy.Metric) []*pb.Metric {
	if len(ms) == 0 {
		return nil
	}
	out := make([]*pb.Metric, len(ms))
	for i, m := range ms {
		out[i] = &pb.Metric{Name: m.Name, Value: m.Value}
	}
	return out
}

func decodeMetrics(ms []*pb.Metric) []deploy.Metric {
	if len(ms) == 0 {
		return nil
	}
	out := make([]deploy.Metric, len(ms))
	for i, m := range ms {
		out[i] = deploy.Metric{Name: m.GetName(), Value: m.GetValue()}
	}
	return out
}

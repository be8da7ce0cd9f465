package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/determinants"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/scheduler"
	"github.com/runnel-dev/runnel/internal/task"
)

// Catalog builds the jobs a TaskManager is asked to run: the binary's registry of jobs in a cluster, the
// jobs Execute built in the mini-cluster.
type Catalog interface {
	// Open builds the job a SetupJob describes. It may do I/O (open the checkpoint storage, read the
	// savepoint) under ctx; an error is the TaskManager's answer to the setup ("cannot run this job").
	Open(ctx context.Context, job protocol.JobID, setup protocol.SetupJob) (*JobBuild, error)
}

// JobBuild is what a TaskManager holds of one job: what the deployments of the job need that is not data.
type JobBuild struct {
	// ChainFor builds the operator chain factory of a vertex from this process's build of the job.
	ChainFor func(v ident.VertexID) (task.ChainFactory, error)
	// Store is the job's checkpoint storage (nil when checkpointing is off).
	Store task.StateStore
	// Incremental makes the job's checkpoints incremental (task.CheckpointSetup.Incremental).
	Incremental bool
	// Savepoint is the savepoint the job started from (nil none): a restore of its checkpoint reads it.
	Savepoint *checkpoint.Savepoint
	// SyncInjections, when set, makes the failure injections of one subtask of vertex v in this build
	// agree with the job master's fired set before an attempt of it is built: those in fired are fired (in
	// another process, or in an attempt this process ran before), the others are not, also one that fired
	// here in an attempt a failover was stopping already (the job master left it out: it fires again).
	SyncInjections func(v ident.VertexID, subtask int, fired []int)
	// Accumulators, when set, encodes the values of the job's accumulators as this process's tasks built
	// them; they are sent to the JobManager every second while they change, and last when the job is released.
	Accumulators func() (map[string][]byte, error)
	// Close releases what Open opened (nil: nothing).
	Close func() error
}

// leaveWait bounds how long a TaskManager that leaves waits for the JobManager to answer its Leaving (by
// ending the session, once every job heard of the loss) before it stops its tasks anyway: the JobManager
// must take the leave as one loss before the consumers of the partitions the stopping tasks release fail,
// and a JobManager that does not answer must not hold up the shutdown.
const leaveWait = time.Second

// ErrEndSessionOnly, as the cause of the end of the context Serve was given (context.WithCancelCause),
// ends the session without the notice that the TaskManager leaves: the TaskManager does not shut down, it
// only leaves this JobManager (a deposed leader) to register with another.
var ErrEndSessionOnly = errors.New("the session ends; the TaskManager stays")

// LeaderChanged, as the cause of the end of the context Serve was given, ends the session as
// ErrEndSessionOnly does, after telling the JobManager which term leads now (protocol.NewLeader).
type LeaderChanged struct{ Epoch int64 }

func (e *LeaderChanged) Error() string {
	return fmt.Sprintf("another JobManager leads (epoch %d): %v", e.Epoch, ErrEndSessionOnly)
}

// Is makes a LeaderChanged an ErrEndSessionOnly.
func (e *LeaderChanged) Is(target error) bool { return target == ErrEndSessionOnly }

// LeaveReason is the reason a TaskManager that shuts down gives in its protocol.Leaving.
const LeaveReason = "shutting down"

// setupTimeout bounds a Catalog's Open: a storage that does not answer must not keep the session's
// messages waiting for ever.
const setupTimeout = 30 * time.Second

// countersInterval is how often the record counters of the running attempts are sent to the JobManager.
const countersInterval = 200 * time.Millisecond

// accumulatorInterval is how often changed accumulator values are sent to the JobManager.
const accumulatorInterval = time.Second

// tmJob is one job set up on a TaskManager.
type tmJob struct {
	id    protocol.JobID
	setup protocol.SetupJob
	build *JobBuild
	start time.Time
	// pm holds the job's result partitions: one manager per job, so that the small partition ids of two
	// jobs never meet, and a partition request is served only from the job its credential names.
	pm *network.PartitionManager
	// dets holds the determinant logs of the job's subtasks that ran here under task failover: they outlive
	// a failed attempt, whose successor replays them; bounded by the job's subtasks, each log by its
	// determinants.Config.
	detsMu sync.Mutex
	dets   map[ident.Subtask]*determinants.Log
	// state is what a report of the job as kept says (keep.go); guarded by the TaskManager's outMu.
	state jobState
}

// determinants returns subtask s's determinant log, made on first use.
func (j *tmJob) determinants(s ident.Subtask) (*determinants.Log, error) {
	j.detsMu.Lock()
	defer j.detsMu.Unlock()
	if d, ok := j.dets[s]; ok {
		return d, nil
	}
	d, err := determinants.New(determinants.DefaultConfig())
	if err != nil {
		return nil, err
	}
	if j.dets == nil {
		j.dets = make(map[ident.Subtask]*determinants.Log)
	}
	j.dets[s] = d
	return d, nil
}

// taskKey names a task attempt on a TaskManager that may run several jobs.
type taskKey struct {
	job     protocol.JobID
	attempt ident.Attempt
}

// session is one registration of the TaskManager with a JobManager, from Serve's call to its return.
type session struct {
	tm  *TaskManager
	s   protocol.Session
	cat Catalog
	id  uint64 // the JobManager's id of this registration
	// heard is the last time a message arrived (Unix nanoseconds), for the JobManager's liveness; busy is
	// set while the reader carries out a message (a job's setup may wait for its storage), which counts as
	// hearing from the JobManager: its messages wait for us, not the other way round.
	heard atomic.Int64
	busy  atomic.Bool
	// times holds the readings of the running attempts' wait clocks (times.go); owned by the goroutine
	// that sends the counters, bounded by the attempts that run here.
	times map[taskKey]*timeReadings
}

// send sends a message of a job; a session that ended drops it (the JobManager that would read it is gone
// or has declared this TaskManager lost, and Serve cancels every task).
func (ss *session) send(job protocol.JobID, body any) {
	if err := ss.s.Send(protocol.Envelope{Job: job, Body: body}); err != nil {
		ss.tm.log.Debug("message not sent: the session ended", "message", fmt.Sprintf("%T", body), "err", err)
	}
}

// Serve registers the TaskManager with the JobManager at the other end of s and carries out what it asks
// until the session ends (ctx done, the JobManager gone or silent past the heartbeat timeout, a refusal).
// Then it cancels every task it runs, waits for them and releases every job, so that a TaskManager that
// lost its JobManager holds nothing; it returns the reason the session ended. With KeepTasks the tasks
// keep running instead, unless the TaskManager shuts down, and the next registration reports them
// (keep.go). When ctx ends (the process shuts down) it first tells the JobManager it is leaving
// (protocol.Leaving) and waits, at most leaveWait, for the JobManager to end the session in answer before
// it cancels the tasks; unless ctx ended with the cause ErrEndSessionOnly, which ends the session at once,
// without the notice. A TaskManager serves one session at a time; calling Serve again registers it anew.
func (tm *TaskManager) Serve(ctx context.Context, s protocol.Session, cat Catalog) error {
	return tm.ServeLeader(ctx, s, cat, 0)
}

// ServeLeader is Serve with a JobManager that must lead in term epoch (high availability: the TaskManager
// found it on etcd): a session the JobManager accepts under another epoch is ended at once (0: any).
func (tm *TaskManager) ServeLeader(ctx context.Context, s protocol.Session, cat Catalog, epoch int64) error {
	reg := protocol.Register{Version: protocol.Version, Name: tm.cfg.Name, Slots: tm.cfg.Slots,
		DataAddress: tm.DataAddress(), BufferSize: tm.cfg.BufferSize, Build: tm.cfg.Build, Kept: tm.keptReport()}
	if err := s.Send(protocol.Envelope{Body: reg}); err != nil {
		s.Close(nil)
		return fmt.Errorf("TaskManager %s: register: %w", tm.cfg.Name, err)
	}
	first, err := s.Recv()
	if err != nil {
		s.Close(nil)
		return fmt.Errorf("TaskManager %s: register: %w", tm.cfg.Name, err)
	}
	var ok protocol.Registered
	switch m := first.Body.(type) {
	case protocol.Registered:
		ok = m
	case protocol.Refused:
		s.Close(nil)
		return &RefusedError{Reason: m.Reason, Permanent: m.Permanent}
	default:
		s.Close(nil)
		return fmt.Errorf("TaskManager %s: the JobManager answered the registration with %T", tm.cfg.Name, first.Body)
	}
	if epoch != 0 && ok.Epoch != epoch {
		err := fmt.Errorf("TaskManager %s: the JobManager accepted the registration in leadership epoch %d, etcd names epoch %d: not the leader", tm.cfg.Name, ok.Epoch, epoch)
		s.Close(err)
		return err
	}
	ss := &session{tm: tm, s: s, cat: cat, id: ok.TaskManager}
	tm.attach(s)
	ss.heard.Store(time.Now().UnixNano())
	tm.log.Log(context.Background(), sessionLevel(ok), "registered with the JobManager", "session", ok.TaskManager, "heartbeat_interval", ok.HeartbeatInterval,
		"heartbeat_timeout", ok.HeartbeatTimeout)

	if tm.cfg.Registered != nil {
		tm.cfg.Registered()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by Serve: ends with stop
		defer wg.Done()
		ss.tick(ctx, stop, ok)
	}()
	var reason error
	for {
		env, err := s.Recv()
		if err != nil {
			reason = err
			break
		}
		ss.heard.Store(time.Now().UnixNano())
		ss.busy.Store(true)
		ss.handle(env)
		ss.busy.Store(false)
		ss.heard.Store(time.Now().UnixNano())
	}
	close(stop)
	wg.Wait()
	s.Close(reason)
	tm.detach(s)
	shuttingDown := ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrEndSessionOnly)
	if tm.cfg.KeepTasks && !shuttingDown {
		n := tm.keepJobs()
		tm.log.Log(context.Background(), sessionLevel(ok), "the session with the JobManager ended: the tasks keep running for the next leader",
			"jobs", n, "reason", reason)
		return reason
	}
	tm.cancelAll()
	tm.log.Log(context.Background(), sessionLevel(ok), "the session with the JobManager ended: every task cancelled, every job released", "reason", reason)
	return reason
}

// sessionLevel is the level of a session's log lines: INFO in a cluster, DEBUG in the mini-cluster (no
// heartbeat timeout), where every job would otherwise begin and end with them.
func sessionLevel(r protocol.Registered) slog.Level {
	if r.HeartbeatTimeout == 0 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// RefusedError is a JobManager's refusal of a registration.
type RefusedError struct {
	Reason    string
	Permanent bool
}

func (e *RefusedError) Error() string { return "the JobManager refused the registration: " + e.Reason }

// tick sends heartbeats and the running attempts' counters, ends the session of a JobManager silent for
// the heartbeat timeout, and ends it when ctx is done. The accumulators go from a goroutine of their own,
// which tick owns: encoding a large one (a sink's latest value per key, say) takes long enough to hold
// back the heartbeats until the JobManager declares this TaskManager lost.
func (ss *session) tick(ctx context.Context, stop <-chan struct{}, reg protocol.Registered) {
	counters := time.NewTicker(countersInterval)
	defer counters.Stop()
	var accumulators sync.WaitGroup
	accsDone := make(chan struct{})
	accumulators.Go(func() { ss.sendAccumulatorsEvery(accumulatorInterval, accsDone) })
	defer func() {
		close(accsDone)
		accumulators.Wait()
	}()
	var beat <-chan time.Time
	if reg.HeartbeatInterval > 0 {
		t := time.NewTicker(reg.HeartbeatInterval)
		defer t.Stop()
		beat = t.C
	}
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			// Shutting down (SIGTERM): the JobManager hears it first and fails the tasks over at once. Its
			// answer is the end of the session, after every job took the leave as the loss of this
			// TaskManager: only then do the tasks stop (Serve), so that the failures of the consumers
			// whose partitions they release reach the jobs after it, not as failovers of their own.
			if errors.Is(context.Cause(ctx), ErrEndSessionOnly) {
				if lc := (*LeaderChanged)(nil); errors.As(context.Cause(ctx), &lc) {
					ss.send(protocol.JobID{}, protocol.NewLeader{Epoch: lc.Epoch})
				}
				ss.s.Close(fmt.Errorf("TaskManager %s ended the session: %w", ss.tm.cfg.Name, context.Cause(ctx)))
				return
			}
			ss.tm.log.Log(context.Background(), sessionLevel(reg), "shutting down: telling the JobManager this TaskManager is leaving")
			ss.send(protocol.JobID{}, protocol.Leaving{Reason: LeaveReason})
			t := time.NewTimer(leaveWait)
			select {
			case <-stop:
			case <-t.C:
				ss.tm.log.Warn("the JobManager did not answer the notice that this TaskManager leaves; stopping the tasks anyway", "waited", leaveWait)
			}
			t.Stop()
			ss.s.Close(fmt.Errorf("TaskManager %s stopped: %w", ss.tm.cfg.Name, ctx.Err()))
			return
		case <-beat:
			ss.send(protocol.JobID{}, heartbeat())
			if to := reg.HeartbeatTimeout; to > 0 && !ss.busy.Load() {
				if silent := time.Since(time.Unix(0, ss.heard.Load())); silent > to {
					ss.s.Close(fmt.Errorf("no message from the JobManager for %v (timeout %v)", silent.Round(time.Millisecond), to))
				}
			}
		case <-counters.C:
			ss.sendCounters()
		}
	}
}

// sendAccumulatorsEvery sends the accumulator values that changed every interval until done is closed.
func (ss *session) sendAccumulatorsEvery(interval time.Duration, done <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	sent := map[protocol.JobID]map[string][]byte{}
	for {
		select {
		case <-done:
			return
		case <-t.C:
			ss.sendAccumulators(sent)
		}
	}
}

// sendCounters sends, per job, the published record counters of the attempts that run here, and where
// their time went over the last second.
func (ss *session) sendCounters() {
	tm := ss.tm
	byJob := map[protocol.JobID]*jobcore.Counters{}
	if ss.times == nil {
		ss.times = map[taskKey]*timeReadings{}
	}
	tm.mu.Lock()
	for k := range ss.times {
		if _, ok := tm.tasks[k]; !ok {
			delete(ss.times, k)
		}
	}
	for k, t := range tm.tasks {
		c := byJob[k.job]
		if c == nil {
			c = &jobcore.Counters{}
			byJob[k.job] = c
		}
		in, out := t.Counters().Snapshot()
		ac := jobcore.AttemptCounters{Attempt: k.attempt, In: in, Out: out, Watermark: t.Counters().PublishedWatermark(),
			Metrics: t.Counters().PublishedMetrics(), InflightLogBytes: t.Counters().InflightLogBytes()}
		if now, began, ok := t.Counters().Times(); ok {
			w := ss.times[k]
			if w == nil {
				w = &timeReadings{}
				ss.times[k] = w
			}
			ac.Times = w.rates(now, began)
		}
		c.Counts = append(c.Counts, ac)
	}
	tm.mu.Unlock()
	for job, c := range byJob {
		ss.send(job, *c)
	}
}

// handle carries out one message of the JobManager. Nothing here waits for a task: the session's
// messages keep their order and a slow task holds up nobody.
func (ss *session) handle(env protocol.Envelope) {
	tm := ss.tm
	switch m := env.Body.(type) {
	case protocol.Heartbeat:
	case protocol.SetupJob:
		ss.send(env.Job, jobcore.JobSetUp{Err: tm.setupJob(ss.cat, env.Job, m)})
	case protocol.ReleaseJob:
		var values map[string][]byte
		if j := tm.job(env.Job); j != nil {
			values = tm.accumulators(j)
		}
		tm.releaseJob(env.Job)
		ss.send(env.Job, protocol.Accumulators{Values: values, Final: true})
	case protocol.AdoptJob:
		tm.adopt(env.Job)
	case protocol.DropJob:
		tm.dropKept(env.Job, m.Reason)
	case jobcore.Deploy:
		if err := ss.deploy(env.Job, m.Deployment); err != nil {
			u := jobcore.TaskUpdate{Attempt: m.Deployment.Info.Attempt, State: deploy.Failed,
				Failure: &jobcore.Failure{Message: err.Error(), Kind: jobcore.FailureDeploy, Cause: err}}
			if j := tm.job(env.Job); j != nil {
				tm.emit(j, u)
			} else {
				ss.send(env.Job, u)
			}
		}
	case jobcore.CancelTask:
		if t := tm.task(env.Job, m.Attempt); t != nil {
			t.Cancel()
		}
	case jobcore.ReleasePartitions:
		if j := tm.job(env.Job); j != nil {
			j.pm.ReleaseProducedBy(m.Attempt)
		}
	case jobcore.TriggerCheckpoint:
		var flags uint32
		switch m.Mode {
		case barrier.AtLeastOnce:
			flags = BarrierFlagAtLeastOnce
		case barrier.Unaligned:
			flags = task.FlagUnaligned
		}
		if j := tm.job(env.Job); j != nil {
			tm.heard(j, m.ID)
		}
		if t := tm.task(env.Job, m.Attempt); t == nil || !t.TriggerCheckpoint(m.ID, m.TimestampMillis, flags) {
			ss.send(env.Job, jobcore.CheckpointDecline{ID: m.ID, Attempt: m.Attempt, Err: checkpoint.ErrTaskNotReady, NotReady: true})
		}
	case jobcore.AbortCheckpoint:
		if j := tm.job(env.Job); j != nil {
			tm.heard(j, m.ID)
		}
		if t := tm.task(env.Job, m.Attempt); t != nil {
			t.AbortCheckpoint(m.ID)
		}
	case jobcore.NotifyCheckpointComplete:
		if j := tm.job(env.Job); j != nil {
			tm.heard(j, m.ID)
		}
		if t := tm.task(env.Job, m.Attempt); t != nil {
			t.NotifyCheckpointComplete(m.ID)
		}
	case jobcore.SampleSubpartitions:
		ans := jobcore.SubpartitionsSampled{Token: m.Token}
		j := tm.job(env.Job)
		for _, ch := range m.Channels {
			if j == nil {
				break
			}
			if st, ok := subpartitionStats(j.pm, ch.Partition, ch.Subpartition); ok {
				ans.Samples = append(ans.Samples, jobcore.ChannelCounters{Channel: ch,
					Counters: jobcore.SubpartitionCounters{RecordsDropped: st.RecordsDropped, BuffersDropped: st.BuffersDropped}})
			}
		}
		ans.Missing = j == nil
		ss.send(env.Job, ans)
	case jobcore.Probe:
		ss.send(env.Job, jobcore.TaskManagerAlive{})
	default:
		tm.log.Error("a message of no known kind from the JobManager", "message", fmt.Sprintf("%T", env.Body))
	}
}

// accumulators encodes a job's accumulator values; an encoding that fails is logged and sent as none.
func (tm *TaskManager) accumulators(j *tmJob) map[string][]byte {
	if j.build.Accumulators == nil {
		return nil
	}
	values, err := j.build.Accumulators()
	if err != nil {
		tm.log.Error("accumulators of a job cannot be encoded", "job", j.setup.Name, "err", err)
		return nil
	}
	return values
}

// sendAccumulators sends the accumulator values of every job whose values changed since they were sent.
func (ss *session) sendAccumulators(sent map[protocol.JobID]map[string][]byte) {
	tm := ss.tm
	tm.mu.Lock()
	jobs := make([]*tmJob, 0, len(tm.jobs))
	for _, j := range tm.jobs {
		if j.build.Accumulators != nil {
			jobs = append(jobs, j)
		}
	}
	tm.mu.Unlock()
	for id := range sent {
		if tm.job(id) == nil {
			delete(sent, id) // released: bounded by the jobs set up here
		}
	}
	for _, j := range jobs {
		values := tm.accumulators(j)
		if len(values) == 0 || maps.EqualFunc(values, sent[j.id], bytes.Equal) {
			continue
		}
		sent[j.id] = values
		ss.send(j.id, protocol.Accumulators{Values: values})
	}
}

// BarrierFlagAtLeastOnce marks the barriers of an at-least-once checkpoint.
const BarrierFlagAtLeastOnce uint32 = 1

// setupJob builds a job through the catalog; setting up a job that is set up already is no change.
func (tm *TaskManager) setupJob(cat Catalog, id protocol.JobID, setup protocol.SetupJob) error {
	if tm.job(id) != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if cat == nil {
		return fmt.Errorf("TaskManager %s has no catalog of jobs", tm.cfg.Name)
	}
	b, err := cat.Open(ctx, id, setup)
	if err != nil {
		return err // the job master names the TaskManager and the job
	}
	j := &tmJob{id: id, setup: setup, build: b, start: time.Unix(0, setup.Start), pm: network.NewPartitionManager()}
	tm.mu.Lock()
	tm.jobs[id] = j
	tm.mu.Unlock()
	return nil
}

// releaseJob forgets a job that ended: its partitions, its secret, its build.
func (tm *TaskManager) releaseJob(id protocol.JobID) {
	tm.mu.Lock()
	j := tm.jobs[id]
	delete(tm.jobs, id)
	tm.mu.Unlock()
	if j != nil {
		tm.release(j)
	}
}

// release releases what job j holds: its partitions and its build.
func (tm *TaskManager) release(j *tmJob) {
	j.pm.ReleaseAll()
	if j.build.Close != nil {
		if err := j.build.Close(); err != nil {
			tm.log.Warn("release job", "job", j.setup.Name, "err", err)
		}
	}
}

// cancelAll cancels every task, waits for them and releases every job: what a TaskManager does when it
// loses its JobManager (without KeepTasks) or shuts down.
func (tm *TaskManager) cancelAll() {
	tm.outMu.Lock()
	clear(tm.kept)
	tm.outMu.Unlock()
	tm.mu.Lock()
	for _, t := range tm.tasks {
		t.Cancel()
	}
	ids := make([]protocol.JobID, 0, len(tm.jobs))
	for id := range tm.jobs {
		ids = append(ids, id)
	}
	tm.mu.Unlock()
	tm.wg.Wait()
	for _, id := range ids {
		tm.releaseJob(id)
	}
}

func (tm *TaskManager) job(id protocol.JobID) *tmJob {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.jobs[id]
}

func (tm *TaskManager) task(job protocol.JobID, a ident.Attempt) *task.Task {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.tasks[taskKey{job, a}]
}

// deploy turns a deployment into a task and starts it on a goroutine the TaskManager owns.
func (ss *session) deploy(job protocol.JobID, dep jobcore.Deployment) error {
	tm := ss.tm
	j := tm.job(job)
	if j == nil {
		return fmt.Errorf("job %s is not set up on TaskManager %s", job, tm.cfg.Name)
	}
	if sync := j.build.SyncInjections; sync != nil {
		sync(dep.Info.Attempt.Vertex, int(dep.Info.Attempt.Index), dep.FiredInjections)
	}
	chain, err := j.build.ChainFor(dep.Info.Attempt.Vertex)
	if err != nil {
		return fmt.Errorf("TaskManager %s: %w", tm.cfg.Name, err)
	}
	cfg := task.Config{Info: dep.Info, Outputs: dep.Outputs, Inputs: dep.Inputs, Chain: chain, BufferTimeout: dep.BufferTimeout,
		MaxRecordSize: dep.MaxRecordSize, CreditsPerChannel: dep.CreditsPerChannel, StateBackend: dep.StateBackend,
		SkipCheckpointsUpTo: dep.SkipCheckpointsUpTo, Restore: dep.Restore,
		Replay: dep.Replay, TakeOver: dep.TakeOver, PartitionAttempt: dep.PartitionAttempt}
	cfg.Info.TaskManager = tm.cfg.Name
	if dep.Determinants {
		if cfg.Determinants, err = j.determinants(dep.Info.Attempt.Subtask); err != nil {
			return fmt.Errorf("TaskManager %s: %w", tm.cfg.Name, err)
		}
		if !dep.Replay {
			// A first attempt, or one a region fallback restarted: its history starts at the checkpoint
			// it restores, not after its predecessor's.
			cfg.Determinants.Reset()
			if r := dep.Restore; r != nil {
				if err := cfg.Determinants.Mark(r.CheckpointID); err != nil {
					return fmt.Errorf("TaskManager %s: %w", tm.cfg.Name, err)
				}
			}
		}
	}
	if cs := dep.Checkpoints; cs != nil {
		cfg.Checkpoints = &task.CheckpointSetup{Store: j.build.Store, Mode: cs.Mode, FinalCheckpoint: cs.FinalCheckpoint,
			Incremental: j.build.Incremental, AlignedTimeout: time.Duration(cs.AlignedTimeoutMillis) * time.Millisecond,
			Ack: func(id int64, from ident.Attempt, h checkpoint.StateHandle, st task.AckStats) {
				tm.emit(j, jobcore.CheckpointAck{ID: id, Attempt: from, Handle: h, Alignment: st.Alignment, ChannelStateBytes: st.ChannelStateBytes})
			},
			Decline: func(id int64, from ident.Attempt, err error) {
				tm.emit(j, jobcore.CheckpointDecline{ID: id, Attempt: from, Err: err})
			}}
	}
	if r := cfg.Restore; r != nil {
		if sp := j.build.Savepoint; sp != nil && sp.Checkpoint.ID == r.CheckpointID {
			rr := *r
			rr.Read = sp.ReadState
			cfg.Restore = &rr
		}
	}
	report := func(u deploy.Update) { tm.report(j, u) }
	tm.outMu.Lock()
	j.state.deployed(dep)
	tm.outMu.Unlock()
	return tm.start(job, j.pm, cfg, report)
}

// report takes a task's update to the JobManager. Called from the task's goroutine.
func (tm *TaskManager) report(j *tmJob, u deploy.Update) {
	if o := u.Observation; o != nil {
		tm.emit(j, jobcore.Observation{Attempt: u.Attempt, Kind: o.Kind,
			Channel: jobcore.Channel{Partition: o.Channel.Partition, Subpartition: o.Channel.Subpartition},
			Lost:    o.Lost, PartialSkipped: o.PartialSkipped, Records: o.Records, SnapshotBefore: o.SnapshotBefore, At: max(o.At.Sub(j.start), 0)})
		return
	}
	tu := jobcore.TaskUpdate{Attempt: u.Attempt, State: u.State, RecordsIn: u.RecordsIn, RecordsOut: u.RecordsOut, Watermark: u.Watermark,
		Metrics: u.Metrics}
	if u.Err != nil {
		f := &jobcore.Failure{Message: u.Err.Error(), NonRecoverable: errors.Is(u.Err, scheduler.ErrNonRecoverable),
			Replay: replayFailure(u.Err), Cause: u.Err}
		if pe := (*network.PeerError)(nil); errors.As(u.Err, &pe) {
			f.PeerDataAddress = pe.Address
		}
		var inj interface{ InjectionIndex() int }
		if errors.As(u.Err, &inj) {
			f.Injected, f.Injection = true, inj.InjectionIndex()
		}
		if pe := (*task.PanicError)(nil); errors.As(u.Err, &pe) {
			f.Stack = pe.Stack
			if len(f.Stack) > jobcore.MaxFailureStack {
				f.Stack = f.Stack[:jobcore.MaxFailureStack] + "\n… (cut)"
			}
		}
		tu.Failure = f
	}
	tm.emit(j, tu)
}

// replayFailure tells from a task's error why its replay under task failover could not hold, for the job
// master's fallback decision (jobcore.ReplayFailure): here the error still has its types, which the job
// master, across a process boundary, no longer sees. An error that wraps more than one of them counts as
// an incomplete log, the reason that restarts the most (the producers too).
func replayFailure(err error) jobcore.ReplayFailure {
	switch {
	case errors.Is(err, network.ErrLogIncomplete):
		return jobcore.ReplayLogIncomplete
	case errors.Is(err, deploy.ErrReplayDiverged), errors.Is(err, network.ErrRegeneratedOther):
		return jobcore.ReplayDiverged
	case errors.Is(err, deploy.ErrCannotReplay):
		return jobcore.ReplaySourceCannotReplay
	case errors.Is(err, determinants.ErrBroken), errors.Is(err, determinants.ErrNoMark):
		return jobcore.ReplayDeterminantsBroken
	}
	return jobcore.ReplayFine
}

func subpartitionStats(pm *network.PartitionManager, p ident.PartitionID, sub int) (network.SubpartitionStats, bool) {
	rp, err := pm.Lookup(p)
	if err != nil || sub < 0 || sub >= rp.NumSubpartitions() {
		return network.SubpartitionStats{}, false
	}
	return rp.Subpartition(sub).Stats(), true
}

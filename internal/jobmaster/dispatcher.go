package jobmaster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/buildinfo"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	Logger *slog.Logger
	// HeartbeatInterval is how often the dispatcher and its TaskManagers send each other a heartbeat;
	// HeartbeatTimeout is the silence after which either side declares the other lost. Zero turns both off
	// (the in-process mini-cluster, whose TaskManagers cannot die alone).
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// BufferSize, when set, is the network buffer size every TaskManager must use: a consumer's buffers
	// must hold what a producer of another TaskManager writes.
	BufferSize int
	// Build, when its Sum is set, is the binary every TaskManager must run.
	Build protocol.Build
	// RegisterTimeout bounds the wait for a new session's Register (default 10 s).
	RegisterTimeout time.Duration
	// Epoch, when set, gives the leadership epoch a registration is accepted in (protocol.Registered).
	Epoch func() int64
	// Kept, when set, is offered each job a registering TaskManager kept running after its leader was
	// lost (task continuity); it returns whether it takes the offer, to answer it later with AdoptJob or
	// DropJob (Adopt, Drop). An offer it does not take, or every offer without Kept, is dropped at once:
	// the TaskManager cancels the job's tasks.
	Kept func(KeptOffer) bool
	// Deposed, when set, hears the epoch a TaskManager says leads now (protocol.NewLeader); when it
	// answers true (a later term leads), the dispatcher ends every session at once: a deposed leader
	// commands no TaskManager, also none that has not noticed yet.
	Deposed func(epoch int64) bool
}

// KeptOffer is a job a registering TaskManager kept running after its leader was lost.
type KeptOffer struct {
	TaskManager       jobcore.TaskManagerID
	Name, DataAddress string
	Job               protocol.KeptJob
}

// Dispatcher is the JobManager's side of its TaskManagers' sessions: it registers them, pools their
// slots, detects their loss, and routes their messages to the drivers of the jobs they concern.
//
// Goroutines, and who owns them (Close stops all of them): one reader per session (Attach), which ends
// with its session; one ticker that sends heartbeats and checks liveness, when heartbeats are on.
//
// Its tables (sessions, slot pool, liveness, jobs) are guarded by mu, which is held only to read or
// change them: nothing done under it waits (a Session's Send only queues), and posting to a driver's
// inbox, which may wait, happens after it is released.
type Dispatcher struct {
	cfg DispatcherConfig
	log *slog.Logger

	mu       sync.Mutex
	sessions map[jobcore.TaskManagerID]*tmSession
	// departed lists the TaskManagers that were lost (their session ended, or they went silent) or left
	// (they said they shut down), oldest first, at most MaxDepartedTaskManagers.
	departed []TaskManagerInfo
	order    []jobcore.TaskManagerID // registration order, for the REST table
	pool     *jobcore.SlotPool[protocol.JobID]
	live     *jobcore.Liveness
	jobs     map[protocol.JobID]*Driver
	nextID   jobcore.TaskManagerID
	closed   bool
	started  time.Time
	// registered is signalled (one token) whenever a TaskManager registers, for WaitTaskManagers.
	registered chan struct{}

	stop chan struct{}
	wg   sync.WaitGroup
}

// tmSession is one registered TaskManager.
type tmSession struct {
	id          jobcore.TaskManagerID
	s           protocol.Session
	name        string
	dataAddress string
	slots       int
	heard       time.Time
	// memory is what its last heartbeat said of its memory.
	memory protocol.Heartbeat
}

// MaxDepartedTaskManagers bounds the TaskManagers whose loss or leave the table keeps listing (Flink's
// UI forgets them at once; an operator looking for what went wrong wants them). Past it the oldest is
// dropped.
const MaxDepartedTaskManagers = 64

// NewDispatcher starts a dispatcher with no TaskManagers.
func NewDispatcher(cfg DispatcherConfig) *Dispatcher {
	lg := cmp.Or(cfg.Logger, slog.Default())
	if cfg.RegisterTimeout <= 0 {
		cfg.RegisterTimeout = 10 * time.Second
	}
	d := &Dispatcher{cfg: cfg, log: lg, sessions: map[jobcore.TaskManagerID]*tmSession{},
		pool: jobcore.NewSlotPool[protocol.JobID](), live: jobcore.NewLiveness(cfg.HeartbeatTimeout),
		jobs: map[protocol.JobID]*Driver{}, started: time.Now(), registered: make(chan struct{}, 1), stop: make(chan struct{})}
	if cfg.HeartbeatInterval > 0 {
		d.wg.Add(1)
		go d.ticker()
	}
	return d
}

// Attach takes a new session of a TaskManager: its first message must register it. The session is served
// on a goroutine of the dispatcher until it ends.
func (d *Dispatcher) Attach(s protocol.Session) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		s.Close(errors.New("the JobManager is shutting down"))
		return
	}
	d.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		d.serve(s)
	}()
}

// Close ends every session and waits for the dispatcher's goroutines. The jobs' drivers are their
// callers': stop them first.
func (d *Dispatcher) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	ss := make([]*tmSession, 0, len(d.sessions))
	for _, s := range d.sessions {
		ss = append(ss, s)
	}
	d.mu.Unlock()
	close(d.stop)
	for _, s := range ss {
		s.s.Close(errors.New("the JobManager shut down"))
	}
	d.wg.Wait()
}

// abandon ends every session at once, without waiting for their readers (it runs on one): a deposed
// leader's sends reach no TaskManager from now on.
func (d *Dispatcher) abandon(reason error) {
	d.mu.Lock()
	ss := make([]*tmSession, 0, len(d.sessions))
	for _, s := range d.sessions {
		ss = append(ss, s)
	}
	d.mu.Unlock()
	d.log.Warn("deposed: ending every TaskManager's session", "reason", reason)
	for _, s := range ss {
		s.s.Close(reason)
	}
}

// WaitTaskManagers waits until n TaskManagers are registered and their slots pooled, or stop is closed
// (false).
func (d *Dispatcher) WaitTaskManagers(n int, stop <-chan struct{}) bool {
	for {
		d.mu.Lock()
		have := len(d.pool.TaskManagers()) // its slots are in the pool: a job may use them
		d.mu.Unlock()
		if have >= n {
			return true
		}
		select {
		case <-d.registered:
		case <-stop:
			return false
		}
	}
}

// The states of a TaskManager in the dispatcher's table.
const (
	TaskManagerRegistered = "REGISTERED"
	TaskManagerLost       = "LOST"
	TaskManagerLeft       = "LEFT"
)

// TaskManagerInfo is one row of the dispatcher's table of TaskManagers.
type TaskManagerInfo struct {
	ID          jobcore.TaskManagerID
	Name        string
	DataAddress string
	Slots, Free int
	// SinceHeard is how long ago it was last heard, up to when it departed.
	SinceHeard time.Duration
	// HeapBytes and MemoryBytes are its process's memory as its last heartbeat said (protocol.Heartbeat).
	HeapBytes, MemoryBytes int64
	// State is TaskManagerRegistered, TaskManagerLost or TaskManagerLeft; a departed one's At is when, and
	// Reason why.
	State  string
	At     time.Time
	Reason string
}

// TaskManagers returns the registered TaskManagers in registration order.
func (d *Dispatcher) TaskManagers() []TaskManagerInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	free := map[jobcore.TaskManagerID]int{}
	for _, r := range d.pool.TaskManagers() {
		free[r.ID] = r.Free
	}
	out := make([]TaskManagerInfo, 0, len(d.order))
	for _, id := range d.order {
		s := d.sessions[id]
		out = append(out, s.info(free[id], TaskManagerRegistered))
	}
	return out
}

// Departed returns the TaskManagers that were lost or left, in the order they did: the last
// MaxDepartedTaskManagers of them.
func (d *Dispatcher) Departed() []TaskManagerInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.departed)
}

// info is the session's row of the table.
func (ts *tmSession) info(free int, state string) TaskManagerInfo {
	return TaskManagerInfo{ID: ts.id, Name: ts.name, DataAddress: ts.dataAddress, Slots: ts.slots, Free: free,
		SinceHeard: time.Since(ts.heard), HeapBytes: ts.memory.HeapBytes, MemoryBytes: ts.memory.MemoryBytes, State: state}
}

// serve registers a session and reads it until it ends.
func (d *Dispatcher) serve(s protocol.Session) {
	timer := time.AfterFunc(d.cfg.RegisterTimeout, func() {
		s.Close(fmt.Errorf("no registration within %v", d.cfg.RegisterTimeout))
	})
	first, err := s.Recv()
	timer.Stop()
	if err != nil {
		d.log.Warn("a TaskManager's session ended before it registered", "err", err)
		s.Close(err)
		return
	}
	reg, ok := first.Body.(protocol.Register)
	if !ok {
		d.refuse(s, fmt.Sprintf("the first message must be a registration, not %T", first.Body), true)
		return
	}
	if reason, permanent := d.checkRegistration(reg); reason != "" {
		d.refuse(s, reason, permanent)
		return
	}
	d.mu.Lock()
	d.nextID++
	ts := &tmSession{id: d.nextID, s: s, name: reg.Name, dataAddress: reg.DataAddress, slots: reg.Slots, heard: time.Now()}
	var replaced *tmSession
	for _, o := range d.sessions {
		if o.name == reg.Name {
			replaced = o
		}
	}
	d.sessions[ts.id] = ts
	d.order = append(d.order, ts.id)
	d.live.Heard(ts.id, time.Since(d.started))
	d.mu.Unlock()
	if replaced != nil {
		// The same TaskManager registered again: what it ran under the old session is gone.
		replaced.s.Close(fmt.Errorf("TaskManager %s registered again", reg.Name))
	}
	var epoch int64
	if d.cfg.Epoch != nil {
		epoch = d.cfg.Epoch()
	}
	if err := s.Send(protocol.Envelope{Body: protocol.Registered{TaskManager: uint64(ts.id),
		HeartbeatInterval: d.cfg.HeartbeatInterval, HeartbeatTimeout: d.cfg.HeartbeatTimeout, Epoch: epoch}}); err != nil {
		d.lost(ts, err)
		return
	}
	d.log.Log(context.Background(), d.sessionLevel(), "TaskManager registered", "taskmanager", reg.Name, "id", ts.id, "slots", reg.Slots, "data", reg.DataAddress)
	d.mu.Lock()
	if err := d.pool.AddTaskManager(ts.id, reg.Name, reg.DataAddress, reg.Slots); err != nil {
		d.mu.Unlock()
		d.lost(ts, err)
		return
	}
	grants := d.pool.Grants()
	d.mu.Unlock()
	for _, k := range reg.Kept {
		// Before its slots can be granted to anyone: a job taken over keeps the slots its tasks run in.
		if d.cfg.Kept == nil || !d.cfg.Kept(KeptOffer{TaskManager: ts.id, Name: reg.Name, DataAddress: reg.DataAddress, Job: k}) {
			d.Drop(ts.id, k.Job, "the JobManager that leads now does not take the job over")
		}
	}
	select {
	case d.registered <- struct{}{}:
	default:
	}
	d.deliverGrants(grants)
	for {
		env, err := s.Recv()
		if err != nil {
			d.lost(ts, err)
			return
		}
		d.route(ts, env)
	}
}

func (d *Dispatcher) checkRegistration(reg protocol.Register) (reason string, permanent bool) {
	switch {
	case reg.Version != protocol.Version:
		return fmt.Sprintf("TaskManager %s speaks protocol version %d, the JobManager %d: start every process of a cluster from the same build",
			reg.Name, reg.Version, protocol.Version), true
	case d.cfg.Build.Sum != [32]byte{} && reg.Build.Sum != d.cfg.Build.Sum:
		return buildinfo.Mismatch("TaskManager "+reg.Name, reg.Build, "the JobManager", d.cfg.Build), true
	case d.cfg.BufferSize > 0 && reg.BufferSize != d.cfg.BufferSize:
		return fmt.Sprintf("TaskManager %s uses network buffers of %d bytes, the cluster %d: start it with --buffer-size %d",
			reg.Name, reg.BufferSize, d.cfg.BufferSize, d.cfg.BufferSize), true
	case reg.Slots < 1:
		return fmt.Sprintf("TaskManager %s offers %d slots: at least one is needed", reg.Name, reg.Slots), true
	}
	return "", false
}

// sessionLevel is the level of the sessions' log lines: INFO in a cluster, DEBUG in the mini-cluster (no
// heartbeat timeout), whose TaskManagers come and go with each job.
func (d *Dispatcher) sessionLevel() slog.Level {
	if d.cfg.HeartbeatTimeout == 0 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

func (d *Dispatcher) refuse(s protocol.Session, reason string, permanent bool) {
	d.log.Warn("TaskManager refused", "reason", reason)
	_ = s.Send(protocol.Envelope{Body: protocol.Refused{Reason: reason, Permanent: permanent}})
	// The refusal is queued before the end, so the TaskManager reads it first.
	s.Close(errors.New("registration refused: " + reason))
}

// lost takes a TaskManager whose session ended out of the tables, and tells every job.
func (d *Dispatcher) lost(ts *tmSession, reason error) { d.gone(ts, reason.Error(), false, reason) }

// leaving takes a TaskManager that said it leaves (protocol.Leaving) out of the tables at once, as a loss:
// every job fails its tasks over now, and its slots leave the pool, rather than when its session ends.
// Then it closes the session, which is the TaskManager's answer: it stops its tasks only once every job
// has the loss in its inbox, ahead of the failures its stopping tasks cause downstream.
func (d *Dispatcher) leaving(ts *tmSession, m protocol.Leaving) {
	reason := cmp.Or(m.Reason, "shutting down")
	d.gone(ts, reason, true, fmt.Errorf("TaskManager %s is leaving (%s)", ts.name, reason))
}

// gone takes a TaskManager out of the tables, tells every job (jobcore.TaskManagerLost with reason and
// leaving) and closes its session with closeReason: first for a loss (its session ended), last for a
// leave (the close answers it). A session already gone changes nothing but the close.
func (d *Dispatcher) gone(ts *tmSession, reason string, leaving bool, closeReason error) {
	if !leaving {
		ts.s.Close(closeReason)
	} else {
		defer ts.s.Close(closeReason)
	}
	d.mu.Lock()
	if d.sessions[ts.id] != ts {
		d.mu.Unlock()
		return
	}
	delete(d.sessions, ts.id)
	d.order = slices.DeleteFunc(d.order, func(id jobcore.TaskManagerID) bool { return id == ts.id })
	if !d.closed {
		state := TaskManagerLost
		if leaving {
			state = TaskManagerLeft
		}
		info := ts.info(0, state)
		info.At, info.Reason = time.Now(), reason
		if len(d.departed) == MaxDepartedTaskManagers {
			d.departed = slices.Delete(d.departed, 0, 1)
		}
		d.departed = append(d.departed, info)
	}
	d.pool.RemoveTaskManager(ts.id)
	d.live.Forget(ts.id)
	jobs := make([]*Driver, 0, len(d.jobs))
	for _, j := range d.jobs {
		jobs = append(jobs, j)
	}
	closed := d.closed
	d.mu.Unlock()
	switch {
	case closed:
	case leaving:
		d.log.Info("TaskManager leaving", "taskmanager", ts.name, "id", ts.id, "reason", reason)
	default:
		d.log.Warn("TaskManager lost", "taskmanager", ts.name, "id", ts.id, "reason", reason)
	}
	for _, j := range jobs {
		j.post(jobcore.TaskManagerLost{TaskManager: ts.id, Reason: reason, Leaving: leaving})
	}
}

// route hands one message of a TaskManager to the job it concerns.
func (d *Dispatcher) route(ts *tmSession, env protocol.Envelope) {
	d.mu.Lock()
	if d.sessions[ts.id] == ts { // a session declared lost is not heard again
		ts.heard = time.Now()
		d.live.Heard(ts.id, time.Since(d.started))
	}
	j := d.jobs[env.Job]
	d.mu.Unlock()
	if env.Job == (protocol.JobID{}) {
		switch m := env.Body.(type) {
		case protocol.Heartbeat:
			d.mu.Lock()
			ts.memory = m
			d.mu.Unlock()
		case protocol.Leaving:
			d.leaving(ts, m)
		case protocol.NewLeader:
			if d.cfg.Deposed != nil && d.cfg.Deposed(m.Epoch) {
				d.abandon(fmt.Errorf("TaskManager %s says the JobManager of epoch %d leads now", ts.name, m.Epoch))
			}
		default:
			d.log.Error("a session message of no known kind", "taskmanager", ts.name, "message", fmt.Sprintf("%T", env.Body))
		}
		return
	}
	if j == nil {
		// A job that ended (its last answers), or one this JobManager never ran.
		return
	}
	switch m := env.Body.(type) {
	case jobcore.JobSetUp:
		m.TaskManager = ts.id
		j.post(m)
	case jobcore.TaskManagerAlive:
		m.TaskManager = ts.id
		j.post(m)
	case protocol.Accumulators:
		j.accumulated(ts.id, m)
	case jobcore.Event:
		j.post(m)
	default:
		d.log.Error("a job message of no known kind", "taskmanager", ts.name, "message", fmt.Sprintf("%T", env.Body))
	}
}

// ticker sends heartbeats and declares silent TaskManagers lost.
func (d *Dispatcher) ticker() {
	defer d.wg.Done()
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	lastBeat := time.Now()
	for {
		select {
		case <-d.stop:
			return
		case now := <-check.C:
			d.mu.Lock()
			lost := d.live.Tick(time.Since(d.started))
			var victims, all []*tmSession
			for _, id := range lost {
				if s := d.sessions[id]; s != nil {
					victims = append(victims, s)
				}
			}
			beat := now.Sub(lastBeat) >= d.cfg.HeartbeatInterval
			if beat {
				lastBeat = now
				for _, s := range d.sessions {
					all = append(all, s)
				}
			}
			d.mu.Unlock()
			for _, s := range victims {
				// Its reader sees the end and runs the loss.
				s.s.Close(fmt.Errorf("no heartbeat for %v", d.cfg.HeartbeatTimeout))
			}
			for _, s := range all {
				_ = s.s.Send(protocol.Envelope{Body: protocol.Heartbeat{}})
			}
		}
	}
}

// addJob makes a driver's job known: messages for it are routed to it, and its slot requests served.
func (d *Dispatcher) addJob(j *Driver) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("the JobManager is shutting down")
	}
	if _, dup := d.jobs[j.jobID]; dup {
		return fmt.Errorf("job %s runs already", j.jobID)
	}
	d.jobs[j.jobID] = j
	return nil
}

// removeJob forgets a job that ended and returns its slots.
func (d *Dispatcher) removeJob(j *Driver) {
	d.mu.Lock()
	delete(d.jobs, j.jobID)
	d.pool.ForgetJob(j.jobID)
	grants := d.pool.Grants()
	d.mu.Unlock()
	d.deliverGrants(grants)
}

// send sends a job's message to a TaskManager; one that is gone drops it (the job hears of its loss).
func (d *Dispatcher) send(tm jobcore.TaskManagerID, job protocol.JobID, body any) {
	d.mu.Lock()
	s := d.sessions[tm]
	d.mu.Unlock()
	if s == nil {
		return
	}
	if err := s.s.Send(protocol.Envelope{Job: job, Body: body}); err != nil {
		// The session is over (its queue overflowed, or it ended): its reader sees the end and runs the
		// loss. Not here: this is a job's loop, which must not wait for its own inbox.
		s.s.Close(err)
	}
}

// connected reports whether a TaskManager's session is still open.
func (d *Dispatcher) connected(tm jobcore.TaskManagerID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sessions[tm] != nil
}

// slots carries out a job's slot change.
func (d *Dispatcher) slots(job protocol.JobID, sc jobcore.SlotChange) {
	d.mu.Lock()
	if len(sc.Release) > 0 {
		d.pool.Release(job, sc.Release)
	}
	if sc.Request > 0 {
		d.pool.Request(job, sc.Request)
	}
	grants := d.pool.Grants()
	d.mu.Unlock()
	d.deliverGrants(grants)
}

// Adopt takes, for a job taken over from a lost leader, one slot of the TaskManager placement[i] for each
// logical slot i, at once and ahead of waiting requests: the slots its kept tasks run in. On an error
// (a TaskManager gone, or without a free slot) it takes none.
func (d *Dispatcher) Adopt(job protocol.JobID, placement []jobcore.TaskManagerID) ([]jobcore.Slot, error) {
	d.mu.Lock()
	slots := make([]jobcore.Slot, 0, len(placement))
	for _, tm := range placement {
		s, ok := d.pool.Take(job, tm)
		if !ok {
			d.pool.Release(job, slots)
			grants := d.pool.Grants()
			name := fmt.Sprintf("%d", tm)
			if ts := d.sessions[tm]; ts != nil {
				name = ts.name
			}
			d.mu.Unlock()
			d.deliverGrants(grants)
			return nil, fmt.Errorf("TaskManager %s is gone or has no free slot for the job's tasks", name)
		}
		slots = append(slots, s)
	}
	d.mu.Unlock()
	return slots, nil
}

// Forget gives back the slots a job holds that no driver runs (a takeover that did not start).
func (d *Dispatcher) Forget(job protocol.JobID) {
	d.mu.Lock()
	d.pool.ForgetJob(job)
	grants := d.pool.Grants()
	d.mu.Unlock()
	d.deliverGrants(grants)
}

// Drop tells a TaskManager that its kept job is not taken over: it cancels the job's tasks.
func (d *Dispatcher) Drop(tm jobcore.TaskManagerID, job protocol.JobID, reason string) {
	d.send(tm, job, protocol.DropJob{Reason: reason})
}

// exclude keeps a job off a TaskManager that could not set it up.
func (d *Dispatcher) exclude(job protocol.JobID, tm jobcore.TaskManagerID) {
	d.mu.Lock()
	d.pool.Exclude(job, tm)
	d.mu.Unlock()
}

func (d *Dispatcher) deliverGrants(gs []jobcore.Grant[protocol.JobID]) {
	for _, g := range gs {
		d.mu.Lock()
		j := d.jobs[g.Job]
		d.mu.Unlock()
		if j != nil {
			j.grant(jobcore.SlotsGranted{Slots: g.Slots})
		}
	}
}

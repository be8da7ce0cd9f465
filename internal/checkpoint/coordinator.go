package checkpoint

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/ident"
)

// Config holds the coordinator's settings (the job's CheckpointConfig without the storage location).
type Config struct {
	// IntervalMillis is the time between periodic triggers; 0 disables periodic checkpoints (TriggerNow
	// still works, for savepoints).
	IntervalMillis int64
	// Mode is carried to the tasks with every trigger; a savepoint's trigger carries ExactlyOnce when it is
	// Unaligned (TriggerSavepoint).
	Mode barrier.Mode
	// AlignedTimeoutMillis, with Mode Unaligned, makes checkpoints start aligned: a task switches to
	// unaligned once its alignment took longer. The coordinator only carries it for the tasks.
	AlignedTimeoutMillis int64
	// TimeoutMillis aborts a checkpoint not acknowledged by every task this long after its trigger.
	TimeoutMillis int64
	// MinPauseMillis is the least time between the completion of one checkpoint and the trigger of the next.
	// When positive, no checkpoint is triggered while another is in progress (as in Flink).
	MinPauseMillis int64
	// MaxConcurrent bounds the checkpoints in progress (triggered, not yet completed or aborted).
	MaxConcurrent int
	// TolerableFailed is how many consecutive checkpoint failures (timeouts, declines, persist failures)
	// the job survives; one more sets Ready.FailJob. A completed checkpoint resets the count.
	TolerableFailed int
	// Retained is how many completed checkpoints storage keeps; the coordinator only carries it for the
	// caller (Storage.Retain). Keep it at least 2 so a damaged newest checkpoint has a fallback.
	Retained int
}

// Limits and defaults of Config.
const (
	DefaultTimeoutMillis = 10 * 60 * 1000
	DefaultMaxConcurrent = 1
	DefaultRetained      = 2
	// MaxConcurrentLimit bounds Config.MaxConcurrent: each checkpoint in progress holds alignment and state
	// in every task.
	MaxConcurrentLimit = 16
	// historyLimit bounds how many finished checkpoint ids the coordinator remembers to explain late
	// messages; older ids are reported as IgnoreUnknownCheckpoint.
	historyLimit = 1024
)

// DefaultConfig returns Flink's defaults, with periodic checkpoints off (IntervalMillis 0) and two retained
// checkpoints.
func DefaultConfig() Config {
	return Config{
		Mode:          barrier.ExactlyOnce,
		TimeoutMillis: DefaultTimeoutMillis,
		MaxConcurrent: DefaultMaxConcurrent,
		Retained:      DefaultRetained,
	}
}

// Validate reports the first invalid setting, naming the option and the fix.
func (c Config) Validate() error {
	switch {
	case c.IntervalMillis < 0:
		return fmt.Errorf("checkpoint interval %d ms is negative: use 0 to disable periodic checkpoints", c.IntervalMillis)
	case !c.Mode.Valid():
		return fmt.Errorf("checkpoint mode %d is unknown: use exactly-once, at-least-once or unaligned", c.Mode)
	case c.AlignedTimeoutMillis < 0:
		return fmt.Errorf("aligned checkpoint timeout %d ms is negative: use 0 for unaligned checkpoints from their start", c.AlignedTimeoutMillis)
	case c.TimeoutMillis <= 0:
		return fmt.Errorf("checkpoint timeout %d ms must be positive (default %d)", c.TimeoutMillis, DefaultTimeoutMillis)
	case c.MinPauseMillis < 0:
		return fmt.Errorf("checkpoint min pause %d ms is negative: use 0 for no pause", c.MinPauseMillis)
	case c.MaxConcurrent < 1 || c.MaxConcurrent > MaxConcurrentLimit:
		return fmt.Errorf("max concurrent checkpoints %d out of range: use 1 to %d (default %d)",
			c.MaxConcurrent, MaxConcurrentLimit, DefaultMaxConcurrent)
	case c.TolerableFailed < 0:
		return fmt.Errorf("tolerable failed checkpoints %d is negative: use 0 to fail the job on the first failure", c.TolerableFailed)
	case c.Retained < 1:
		return fmt.Errorf("retained checkpoints %d: keep at least 1 (default %d)", c.Retained, DefaultRetained)
	}
	return nil
}

// Task is one subtask the coordinator expects in every checkpoint, as its current attempt.
type Task struct {
	// Attempt is the subtask's current attempt.
	Attempt ident.Attempt
	// Name is the vertex's name (its operator chain), recorded in the metadata for Compatible.
	Name string
	// Operators are the uids of the vertex's operators, head first, recorded in the metadata so that a
	// restore can place each operator's state (Vertex.Operators).
	Operators []string
	// Source marks a subtask without inputs. Triggers go to the running sources and, once some subtasks
	// finished, to every running subtask whose Upstream all finished; every running subtask must
	// acknowledge.
	Source bool
	// Upstream lists the subtasks that feed this one (its producers on every input edge). A source has
	// none; every other subtask must list at least one.
	Upstream []ident.Subtask
}

// Trigger asks the job master to start checkpoint ID at every target: the running subtasks whose upstream
// subtasks all finished (the sources, and with some subtasks finished, the new sources of what still
// runs). A target with inputs takes its snapshot once it has read the rest of its inputs (every channel
// ended), as if the barrier had come after the last record of each.
type Trigger struct {
	ID int64
	// TimestampMillis is the trigger time, carried by the barriers.
	TimestampMillis int64
	// Mode is carried by the barriers.
	Mode barrier.Mode
	// Targets are the current attempts of the running subtasks whose upstream all finished, in subtask
	// order.
	Targets []ident.Attempt
}

// AbortReason says why a checkpoint was aborted.
type AbortReason uint8

// Abort reasons. Timeout, Declined and PersistFailed are failures: they count as "failed" and towards
// Config.TolerableFailed. The others count as "aborted".
const (
	AbortTimeout AbortReason = iota + 1
	AbortDeclined
	AbortPersistFailed
	AbortTaskNotReady
	AbortTaskFailed
	AbortTaskRestarted
	AbortSubsumed
	AbortStopped
)

var abortNames = [...]string{
	AbortTimeout:       "timeout",
	AbortDeclined:      "declined",
	AbortPersistFailed: "persist failed",
	AbortTaskNotReady:  "task not ready",
	AbortTaskFailed:    "task failed",
	AbortTaskRestarted: "task restarted",
	AbortSubsumed:      "subsumed",
	AbortStopped:       "coordinator stopped",
}

// String names the reason ("timeout").
func (r AbortReason) String() string {
	if int(r) < len(abortNames) && abortNames[r] != "" {
		return abortNames[r]
	}
	return fmt.Sprintf("abort(%d)", uint8(r))
}

// Failure reports whether the reason counts as a checkpoint failure.
func (r AbortReason) Failure() bool {
	return r == AbortTimeout || r == AbortDeclined || r == AbortPersistFailed
}

// Aborted reports one aborted checkpoint.
type Aborted struct {
	ID     int64
	Reason AbortReason
	// Err describes the abort for logs ("checkpoint 4 expired after 600000 ms: 2 of 5 subtasks missing: ...").
	Err error
}

// NotifyKind is what a Notification tells a task.
type NotifyKind uint8

const (
	// NotifyComplete: the checkpoint is complete and persisted (Flink's notifyCheckpointComplete).
	NotifyComplete NotifyKind = iota + 1
	// NotifyAbort: the checkpoint was aborted; drop alignment and snapshot work for it.
	NotifyAbort
)

// String returns "complete" or "abort".
func (k NotifyKind) String() string {
	switch k {
	case NotifyComplete:
		return "complete"
	case NotifyAbort:
		return "abort"
	}
	return fmt.Sprintf("notify(%d)", uint8(k))
}

// Notification is a message for one task attempt.
type Notification struct {
	To           ident.Attempt
	CheckpointID int64
	Kind         NotifyKind
}

// IgnoreReason says why a message was ignored (fenced).
type IgnoreReason uint8

// Ignore reasons.
const (
	// IgnoreUnknownTask: the sender's subtask is not part of the job.
	IgnoreUnknownTask IgnoreReason = iota + 1
	// IgnoreNotCurrentAttempt: the sender is not the current attempt of its subtask (a replaced attempt,
	// or one the coordinator was not told about).
	IgnoreNotCurrentAttempt
	// IgnoreUnknownCheckpoint: the id was never triggered, or is too old to be remembered.
	IgnoreUnknownCheckpoint
	// IgnoreAborted: the checkpoint was aborted.
	IgnoreAborted
	// IgnoreCompleted: the checkpoint already has every acknowledgement (it is being persisted or done).
	IgnoreCompleted
	// IgnoreDuplicate: the sender already acknowledged this checkpoint.
	IgnoreDuplicate
	// IgnoreNotExpected: the sender's subtask was not part of this checkpoint (it had finished).
	IgnoreNotExpected
	// IgnoreNotPersisting: Persisted for a checkpoint that is still collecting acknowledgements.
	IgnoreNotPersisting
)

var ignoreNames = [...]string{
	IgnoreUnknownTask:       "unknown task",
	IgnoreNotCurrentAttempt: "not the current attempt",
	IgnoreUnknownCheckpoint: "unknown checkpoint",
	IgnoreAborted:           "checkpoint aborted",
	IgnoreCompleted:         "checkpoint already complete",
	IgnoreDuplicate:         "duplicate",
	IgnoreNotExpected:       "subtask not part of the checkpoint",
	IgnoreNotPersisting:     "checkpoint not waiting to be persisted",
}

// String names the reason.
func (r IgnoreReason) String() string {
	if int(r) < len(ignoreNames) && ignoreNames[r] != "" {
		return ignoreNames[r]
	}
	return fmt.Sprintf("ignore(%d)", uint8(r))
}

// Ignored reports one fenced message. Ignoring is normal after failures and aborts; the caller may log it
// at debug level.
type Ignored struct {
	// Event is the coordinator method that was called ("ack", "decline", "persisted", "task-failed",
	// "task-finished", "task-input-ended").
	Event string
	// ID is the checkpoint id the message named (0 for task events).
	ID int64
	// From is the sender (zero for Persisted).
	From   ident.Attempt
	Reason IgnoreReason
}

// Ready is what one event asks of the caller. Carry it out in this order:
//
//  1. Persist: write each checkpoint with Storage.CommitMetadata (on any goroutine, with a deadline), then
//     report the result with Persisted(now, id, err). The checkpoint counts as in progress until then.
//  2. Completed: checkpoints now persisted; record the newest as the restore point, run
//     Storage.Retain(Config.Retained), update reports.
//  3. Aborted: log them; delete their data with Storage.Discard (best effort, may run asynchronously).
//  4. Notifications: send to the attempts named (best effort).
//  5. Triggers: send each trigger to its targets; a target that cannot be reached should be answered with
//     Decline or TaskFailed.
//  6. FailJob: when non-nil, fail the job (a global failover), after the steps above.
type Ready struct {
	// Persist holds checkpoints every expected subtask acknowledged, to be committed to storage.
	Persist []*CompletedCheckpoint
	// Completed holds checkpoints whose persistence succeeded.
	Completed []*CompletedCheckpoint
	// Aborted holds checkpoints given up, with the reason.
	Aborted []Aborted
	// Notifications are messages for task attempts.
	Notifications []Notification
	// Triggers are checkpoints to start at their targets.
	Triggers []Trigger
	// Ignored lists fenced messages.
	Ignored []Ignored
	// FailJob wraps ErrTooManyFailures when consecutive failures exceeded Config.TolerableFailed.
	FailJob error
}

// Merge returns r followed by o: the actions of both, in that order.
func (r Ready) Merge(o Ready) Ready {
	r.Persist = append(r.Persist, o.Persist...)
	r.Completed = append(r.Completed, o.Completed...)
	r.Aborted = append(r.Aborted, o.Aborted...)
	r.Notifications = append(r.Notifications, o.Notifications...)
	r.Triggers = append(r.Triggers, o.Triggers...)
	r.Ignored = append(r.Ignored, o.Ignored...)
	if r.FailJob == nil {
		r.FailJob = o.FailJob
	}
	return r
}

// Empty reports whether there is nothing to do.
func (r Ready) Empty() bool {
	return len(r.Persist) == 0 && len(r.Completed) == 0 && len(r.Aborted) == 0 && len(r.Notifications) == 0 &&
		len(r.Triggers) == 0 && len(r.Ignored) == 0 && r.FailJob == nil
}

// Counts are the checkpoint figures of the job report; the JSON names are a contract. Every triggered
// checkpoint ends up in exactly one of Completed, Failed (aborted for a reason that is a failure: timeout,
// decline, persist failure) and Aborted (any other reason), or is still in progress.
type Counts struct {
	// Completed counts checkpoints persisted in this run.
	Completed int64 `json:"completed"`
	// Failed counts checkpoints aborted for a failure reason (AbortReason.Failure).
	Failed int64 `json:"failed"`
	// Aborted counts checkpoints aborted for any other reason.
	Aborted int64 `json:"aborted"`
	// LastCompletedID is the highest id completed in this run, 0 if none.
	LastCompletedID int64 `json:"last_completed_id"`
}

// Stats are Counts plus the coordinator's other figures.
type Stats struct {
	Counts
	// InProgress is the number of checkpoints triggered and not yet completed or aborted.
	InProgress int `json:"in_progress"`
	// Ignored counts fenced messages.
	Ignored int64 `json:"ignored"`
	// ConsecutiveFailed is the current run of failures (reset by a completion and by FailJob).
	ConsecutiveFailed int `json:"consecutive_failed"`
}

type taskStatus uint8

const (
	statusRunning  taskStatus = iota
	statusDown                // failed, restart not yet reported
	statusFinished            // bounded input done
)

type taskState struct {
	Task
	status taskStatus
	// ended says that a running subtask's input has ended (TaskInputEnded): it emits nothing more and
	// waits for a checkpoint it takes part in to complete before it finishes.
	ended bool
}

type outcome uint8

const (
	outcomeCompleted outcome = iota + 1
	outcomeAborted
)

// pending is a checkpoint in progress: collecting acknowledgements, then (persisting != nil) waiting for
// the caller to persist it.
type pending struct {
	id            int64
	triggerMillis int64
	waiting       map[ident.Subtask]ident.Attempt
	acks          map[ident.Subtask]StateHandle
	// targets are the subtasks the checkpoint was triggered at; every other subtask takes it when the
	// barrier comes from its upstream.
	targets       map[ident.Subtask]bool
	lastAckMillis int64
	persisting    *CompletedCheckpoint
	// mode is the checkpoint's: the configured one, or ExactlyOnce for a savepoint of an unaligned job.
	mode barrier.Mode
}

// Coordinator is the checkpoint coordinator of one job: a pure state machine. It is not safe for
// concurrent use; the job master calls it from the one goroutine that owns it, passing the time of each
// event in milliseconds from any monotonic clock.
type Coordinator struct {
	cfg      Config
	tasks    map[ident.Subtask]*taskState
	order    []ident.Subtask
	vertices []Vertex

	nextID               int64
	started              bool
	stopped              bool
	lastTriggerMillis    int64
	lastCompletionMillis int64
	hasCompletion        bool

	// down, running and open count subtasks by status (see setStatus and setEnded): down ones, running
	// ones, and running ones whose input has not ended.
	down    int
	running int
	open    int
	// allEnded is whether, at the last event, every subtask had ended its input or finished (and at least
	// one was still running, none down); finalOwed is set when allEnded becomes true and cleared by the
	// next trigger, the final checkpoint, which is due at once rather than after the interval.
	allEnded  bool
	finalOwed bool

	pending map[int64]*pending
	history map[int64]outcome
	// stats are the statistics of the last MaxStatsHistory checkpoints triggered, oldest first.
	stats             []CheckpointStats
	latest            *CompletedCheckpoint
	counts            Counts
	ignored           int64
	consecutiveFailed int
}

// NewCoordinator returns a coordinator for the given subtasks (their current attempts). Checkpoint ids start at
// nextID (1 if lower); a job that reuses a storage location passes Storage.NextID so ids never collide with
// an earlier run's. Every vertex's subtasks must be given, indexed 0..parallelism-1, with one name per
// vertex.
func NewCoordinator(cfg Config, tasks []Task, nextID int64) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, errors.New("checkpoint coordinator: the job has no tasks")
	}
	c := &Coordinator{
		cfg:     cfg,
		tasks:   make(map[ident.Subtask]*taskState, len(tasks)),
		nextID:  max(nextID, 1),
		pending: make(map[int64]*pending),
		history: make(map[int64]outcome),
	}
	names := make(map[ident.VertexID]string)
	operators := make(map[ident.VertexID][]string)
	counts := make(map[ident.VertexID]int32)
	for _, t := range tasks {
		if _, dup := c.tasks[t.Attempt.Subtask]; dup {
			return nil, fmt.Errorf("checkpoint coordinator: subtask %s given twice", t.Attempt.Subtask)
		}
		if t.Name == "" {
			return nil, fmt.Errorf("checkpoint coordinator: subtask %s has no vertex name", t.Attempt.Subtask)
		}
		if t.Attempt.Index < 0 || t.Attempt.Number < 0 {
			return nil, fmt.Errorf("checkpoint coordinator: invalid attempt %s", t.Attempt)
		}
		if n, ok := names[t.Attempt.Vertex]; ok && n != t.Name {
			return nil, fmt.Errorf("checkpoint coordinator: vertex v%d named both %q and %q", t.Attempt.Vertex, n, t.Name)
		}
		names[t.Attempt.Vertex] = t.Name
		if _, ok := operators[t.Attempt.Vertex]; !ok {
			operators[t.Attempt.Vertex] = slices.Clone(t.Operators)
		}
		counts[t.Attempt.Vertex]++
		switch {
		case t.Source && len(t.Upstream) > 0:
			return nil, fmt.Errorf("checkpoint coordinator: source subtask %s lists %d upstream subtasks", t.Attempt.Subtask, len(t.Upstream))
		case !t.Source && len(t.Upstream) == 0:
			return nil, fmt.Errorf("checkpoint coordinator: subtask %s is not a source but lists no upstream subtasks", t.Attempt.Subtask)
		}
		t.Upstream = slices.Clone(t.Upstream)
		c.tasks[t.Attempt.Subtask] = &taskState{Task: t}
		c.running++
		c.open++
		c.order = append(c.order, t.Attempt.Subtask)
	}
	for _, sub := range c.order {
		for _, up := range c.tasks[sub].Upstream {
			if _, ok := c.tasks[up]; !ok || up == sub {
				return nil, fmt.Errorf("checkpoint coordinator: subtask %s lists upstream %s, which is not another subtask of the job", sub, up)
			}
		}
	}
	slices.SortFunc(c.order, compareSubtask)
	for id, p := range counts {
		for i := int32(0); i < p; i++ {
			if _, ok := c.tasks[ident.Subtask{Vertex: id, Index: i}]; !ok {
				return nil, fmt.Errorf("checkpoint coordinator: vertex v%d has %d subtasks but no index %d", id, p, i)
			}
		}
		c.vertices = append(c.vertices, Vertex{ID: id, Name: names[id], Parallelism: p, Operators: operators[id]})
	}
	slices.SortFunc(c.vertices, func(a, b Vertex) int { return cmp.Compare(a.ID, b.ID) })
	return c, nil
}

// Config returns the coordinator's configuration.
func (c *Coordinator) Config() Config { return c.cfg }

// Counts returns the report figures.
func (c *Coordinator) Counts() Counts { return c.counts }

// Stats returns all figures.
func (c *Coordinator) Stats() Stats {
	return Stats{Counts: c.counts, InProgress: len(c.pending), Ignored: c.ignored, ConsecutiveFailed: c.consecutiveFailed}
}

// LatestCompleted returns the newest checkpoint persisted in this run, or nil: the restore point for a
// failover without a trip to storage.
func (c *Coordinator) LatestCompleted() *CompletedCheckpoint { return c.latest }

// Restored tells the coordinator that the job started from cp (found by Storage.Latest, or a savepoint):
// LatestCompleted returns it until a newer checkpoint completes, so a failover before then restores from
// it too, and new ids continue above it. The counts are not touched: they describe this run.
func (c *Coordinator) Restored(cp *CompletedCheckpoint) {
	if cp == nil {
		return
	}
	if c.latest == nil || cp.ID > c.latest.ID {
		c.latest = cp
	}
	c.nextID = max(c.nextID, cp.ID+1)
}

// FallBackTo tells the coordinator that the checkpoints newer than cp cannot be restored (found damaged
// in storage) and that cp is the restore point from now on: LatestCompleted returns it, even though it is
// older, until a newer checkpoint completes. Ids keep rising above every id used, so a damaged checkpoint's
// id is never reused.
func (c *Coordinator) FallBackTo(cp *CompletedCheckpoint) {
	if cp == nil {
		return
	}
	c.latest = cp
	c.nextID = max(c.nextID, cp.ID+1)
}

// InProgress returns the ids of the checkpoints in progress, ascending; Persisting ones included.
func (c *Coordinator) InProgress() []int64 {
	ids := make([]int64, 0, len(c.pending))
	for id := range c.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Attempt returns the current attempt of subtask s.
func (c *Coordinator) Attempt(s ident.Subtask) (ident.Attempt, bool) {
	st, ok := c.tasks[s]
	if !ok {
		return ident.Attempt{}, false
	}
	return st.Attempt, true
}

// Tick advances time. The first call starts the schedule (the first periodic checkpoint is due one
// interval later). Each call aborts checkpoints past their timeout, then triggers a checkpoint if one is
// due: the interval has passed since the last trigger (or the final checkpoint is owed, see
// TaskInputEnded), fewer than MaxConcurrent are in progress, MinPause has passed since the last completion
// (and, with a pause, none is in progress; the final checkpoint does not wait for the pause), no subtask is
// down, and at least one subtask is running.
func (c *Coordinator) Tick(now int64) Ready {
	var rd Ready
	if !c.started {
		c.started = true
		c.lastTriggerMillis = now
	}
	for _, p := range c.sortedPending() {
		if p.persisting == nil && now-p.triggerMillis >= c.cfg.TimeoutMillis {
			c.abort(&rd, now, p, AbortTimeout, fmt.Errorf("checkpoint %d expired after %d ms: %s",
				p.id, now-p.triggerMillis, c.describeMissing(p)))
		}
	}
	if due, ok := c.nextTrigger(); ok && now >= due {
		c.trigger(now, &rd, c.cfg.Mode)
	}
	return rd
}

// NextDeadline returns the earliest time at which Tick may have something to do (a trigger falls due or a
// checkpoint times out), so an event loop can sleep until then; false means only an event can change
// anything.
func (c *Coordinator) NextDeadline() (int64, bool) {
	best, ok := c.nextTrigger()
	if !c.started && c.cfg.IntervalMillis > 0 {
		return 0, true // the first Tick starts the schedule
	}
	for _, p := range c.pending {
		if p.persisting != nil {
			continue
		}
		if t := p.triggerMillis + c.cfg.TimeoutMillis; !ok || t < best {
			best, ok = t, true
		}
	}
	return best, ok
}

// nextTrigger returns when the next periodic trigger is due, if one can happen before some event changes
// the picture. An owed final checkpoint is due at once (0).
func (c *Coordinator) nextTrigger() (int64, bool) {
	if c.cfg.IntervalMillis == 0 || c.triggerBlocked() != nil {
		return 0, false
	}
	if len(c.pending) >= c.cfg.MaxConcurrent || (c.cfg.MinPauseMillis > 0 && len(c.pending) > 0) {
		return 0, false
	}
	if c.finalOwed {
		return 0, true
	}
	if !c.started {
		return 0, false
	}
	due := c.lastTriggerMillis + c.cfg.IntervalMillis
	if c.cfg.MinPauseMillis > 0 && c.hasCompletion {
		due = max(due, c.lastCompletionMillis+c.cfg.MinPauseMillis)
	}
	return due, true
}

// triggerBlocked says why no checkpoint can be triggered now, whatever the schedule.
func (c *Coordinator) triggerBlocked() error {
	if c.stopped {
		return errors.New("checkpoint coordinator is stopped")
	}
	if c.down > 0 {
		for _, sub := range c.order {
			if st := c.tasks[sub]; st.status == statusDown {
				return fmt.Errorf("subtask %s is down", st.Attempt)
			}
		}
	}
	if c.running == 0 {
		return errors.New("every subtask has finished")
	}
	return nil
}

// setStatus moves a subtask to status s, keeping the counters triggerBlocked reads in step. A subtask that
// leaves the running status forgets that its input had ended: a new attempt starts its input again.
func (c *Coordinator) setStatus(st *taskState, s taskStatus) {
	if st.status == s {
		return
	}
	switch st.status {
	case statusDown:
		c.down--
	case statusRunning:
		c.running--
		if !st.ended {
			c.open--
		}
	}
	st.status, st.ended = s, false
	switch s {
	case statusDown:
		c.down++
	case statusRunning:
		c.running++
		c.open++
	}
}

// setEnded marks whether a running subtask's input has ended, keeping open in step.
func (c *Coordinator) setEnded(st *taskState, ended bool) {
	if st.status != statusRunning || st.ended == ended {
		return
	}
	st.ended = ended
	if ended {
		c.open--
	} else {
		c.open++
	}
}

// updateEnded recomputes allEnded after an event that changed statuses: when every subtask has ended its
// input or finished, with some still running and none down, the final checkpoint becomes owed (with
// periodic checkpoints on); it is no longer owed when that stops being true (a failure, a restart).
func (c *Coordinator) updateEnded() {
	now := c.down == 0 && c.open == 0 && c.running > 0
	if now && !c.allEnded && c.cfg.IntervalMillis > 0 {
		c.finalOwed = true
	}
	if !now {
		c.finalOwed = false
	}
	c.allEnded = now
}

// maybeTriggerFinal triggers the owed final checkpoint if nothing holds it back (see nextTrigger): it
// follows at once the event that made every input end, or that freed a slot for it.
func (c *Coordinator) maybeTriggerFinal(now int64, rd *Ready) {
	if !c.finalOwed {
		return
	}
	if _, ok := c.nextTrigger(); ok {
		c.started = true
		c.trigger(now, rd, c.cfg.Mode)
	}
}

// targets returns the current attempts of the running subtasks whose upstream subtasks all finished, in
// subtask order.
func (c *Coordinator) targets() []ident.Attempt {
	var ts []ident.Attempt
	for _, sub := range c.order {
		st := c.tasks[sub]
		if st.status != statusRunning {
			continue
		}
		target := true
		for _, up := range st.Upstream {
			if c.tasks[up].status != statusFinished {
				target = false
				break
			}
		}
		if target {
			ts = append(ts, st.Attempt)
		}
	}
	return ts
}

// TriggerNow triggers a checkpoint at once, regardless of interval, pause and MaxConcurrent (for a
// savepoint or a test). It fails if a subtask is down, every subtask finished, or the coordinator is
// stopped.
func (c *Coordinator) TriggerNow(now int64) (Ready, error) {
	return c.triggerNow(now, c.cfg.Mode)
}

// TriggerSavepoint is TriggerNow for a savepoint: aligned, also in a job of unaligned checkpoints (as in
// Flink), so that it holds no records in flight and restores at any parallelism.
func (c *Coordinator) TriggerSavepoint(now int64) (Ready, error) {
	mode := c.cfg.Mode
	if mode == barrier.Unaligned {
		mode = barrier.ExactlyOnce
	}
	return c.triggerNow(now, mode)
}

func (c *Coordinator) triggerNow(now int64, mode barrier.Mode) (Ready, error) {
	var rd Ready
	if err := c.triggerBlocked(); err != nil {
		return rd, fmt.Errorf("trigger checkpoint: %w", err)
	}
	c.started = true
	c.trigger(now, &rd, mode)
	return rd, nil
}

// trigger starts a checkpoint at the targets; every running subtask must acknowledge it, finished ones
// are recorded as finished. Any trigger pays the owed final checkpoint: every subtask takes it after its
// input ended.
func (c *Coordinator) trigger(now int64, rd *Ready, mode barrier.Mode) {
	id := c.nextID
	c.nextID++
	c.lastTriggerMillis = now
	c.finalOwed = false
	p := &pending{
		id:            id,
		triggerMillis: now,
		waiting:       make(map[ident.Subtask]ident.Attempt, len(c.order)),
		acks:          make(map[ident.Subtask]StateHandle, len(c.order)),
		mode:          mode,
	}
	t := Trigger{ID: id, TimestampMillis: now, Mode: mode, Targets: c.targets()}
	p.targets = make(map[ident.Subtask]bool, len(t.Targets))
	for _, a := range t.Targets {
		p.targets[a.Subtask] = true
	}
	for _, sub := range c.order {
		st := c.tasks[sub]
		switch st.status {
		case statusRunning:
			p.waiting[sub] = st.Attempt
		case statusFinished:
			p.acks[sub] = StateHandle{Attempt: st.Attempt, Finished: true}
		}
	}
	c.pending[id] = p
	c.statsTriggered(p)
	rd.Triggers = append(rd.Triggers, t)
}

// Ack records that attempt from took its snapshot for checkpoint id, described by handle (the coordinator
// sets handle.Attempt to from and clears Finished; it keeps the handle, which the caller must not modify
// afterwards). The last missing ack moves the checkpoint to Ready.Persist. Acks from an attempt that is not
// current, or for a checkpoint that is unknown, aborted or complete, are ignored (Ready.Ignored).
func (c *Coordinator) Ack(now, id int64, from ident.Attempt, handle StateHandle) Ready {
	return c.AckWith(now, id, from, handle, AckStats{})
}

// AckWith is Ack with what the subtask measured of its part (the checkpoint's statistics, History).
func (c *Coordinator) AckWith(now, id int64, from ident.Attempt, handle StateHandle, stats AckStats) Ready {
	var rd Ready
	p, ok := c.fence(&rd, "ack", id, from)
	if !ok {
		return rd
	}
	handle.Attempt = from
	handle.Finished = false
	delete(p.waiting, from.Subtask)
	p.acks[from.Subtask] = handle
	p.lastAckMillis = now
	c.statsAcked(p, handle, stats)
	c.maybeComplete(&rd, p)
	return rd
}

// Decline records that attempt from could not take part in checkpoint id, which is aborted: as a failure,
// unless reason wraps ErrTaskNotReady. Fenced like Ack.
func (c *Coordinator) Decline(now, id int64, from ident.Attempt, reason error) Ready {
	var rd Ready
	p, ok := c.fence(&rd, "decline", id, from)
	if !ok {
		return rd
	}
	if reason == nil {
		reason = errors.New("no reason given")
	}
	why := AbortDeclined
	if errors.Is(reason, ErrTaskNotReady) {
		why = AbortTaskNotReady
	}
	c.abort(&rd, now, p, why, fmt.Errorf("checkpoint %d declined by %s: %w", id, from, reason))
	c.maybeTriggerFinal(now, &rd) // the abort may have freed the slot an owed final checkpoint waits for
	return rd
}

// Persisted reports the outcome of persisting checkpoint id (Ready.Persist). Success completes it: the
// counts move, older checkpoints still collecting acks are subsumed, and the attempts that acknowledged
// and are still current get NotifyComplete. Failure aborts it as a failure.
func (c *Coordinator) Persisted(now, id int64, err error) Ready {
	var rd Ready
	p := c.pending[id]
	if p == nil || p.persisting == nil {
		reason := IgnoreNotPersisting
		if p == nil {
			reason = c.pastReason(id)
		}
		c.ignore(&rd, Ignored{Event: "persisted", ID: id, Reason: reason})
		return rd
	}
	if err != nil {
		c.abort(&rd, now, p, AbortPersistFailed, fmt.Errorf("checkpoint %d: persist: %w", id, err))
		return rd
	}
	cp := p.persisting
	delete(c.pending, id)
	c.remember(id, outcomeCompleted)
	c.counts.Completed++
	c.statsCompleted(now, cp, c.latest)
	if id > c.counts.LastCompletedID {
		c.counts.LastCompletedID = id
		c.latest = cp
	}
	c.lastCompletionMillis = now
	c.hasCompletion = true
	c.consecutiveFailed = 0
	rd.Completed = append(rd.Completed, cp)
	for _, h := range cp.States {
		if !h.Finished && c.isLive(h.Attempt) {
			rd.Notifications = append(rd.Notifications, Notification{To: h.Attempt, CheckpointID: id, Kind: NotifyComplete})
		}
	}
	for _, q := range c.sortedPending() {
		if q.id < id && q.persisting == nil {
			c.abort(&rd, now, q, AbortSubsumed, fmt.Errorf("checkpoint %d subsumed by completed checkpoint %d", q.id, id))
		}
	}
	c.maybeTriggerFinal(now, &rd)
	return rd
}

// TaskFailed reports that the current attempt of a subtask failed. Checkpoints in progress that involve
// it are aborted, and none is triggered until TasksRestarted brings the subtask back.
func (c *Coordinator) TaskFailed(now int64, attempt ident.Attempt, reason error) Ready {
	var rd Ready
	st, ok := c.currentTask(&rd, "task-failed", attempt)
	if !ok {
		return rd
	}
	c.setStatus(st, statusDown)
	c.updateEnded()
	for _, p := range c.sortedPending() {
		if p.persisting == nil && p.involves(attempt.Subtask) {
			c.abort(&rd, now, p, AbortTaskFailed, fmt.Errorf("checkpoint %d aborted: %s failed%s", p.id, attempt, because(reason)))
		}
	}
	return rd
}

// TasksRestarted reports new attempts of some subtasks (all of them after a full failover, a region, or
// the failed vertex and its downstream under approximate recovery). Checkpoints in progress that involve
// any of them are aborted (their old attempts will never acknowledge); checkpoints already being persisted
// are complete and go on. From now on only the new attempts are accepted. Each attempt must be newer than
// the subtask's current one; otherwise nothing changes and an error is returned.
func (c *Coordinator) TasksRestarted(now int64, attempts []ident.Attempt, reason error) (Ready, error) {
	var rd Ready
	seen := make(map[ident.Subtask]bool, len(attempts))
	for _, a := range attempts {
		st, ok := c.tasks[a.Subtask]
		switch {
		case !ok:
			return rd, fmt.Errorf("tasks restarted: %s is not a subtask of the job", a)
		case seen[a.Subtask]:
			return rd, fmt.Errorf("tasks restarted: %s given twice", a.Subtask)
		case !a.Newer(st.Attempt):
			return rd, fmt.Errorf("tasks restarted: %s is not newer than the current attempt %s", a, st.Attempt)
		}
		seen[a.Subtask] = true
	}
	if len(attempts) == 0 {
		return rd, nil
	}
	for _, a := range attempts {
		st := c.tasks[a.Subtask]
		st.Attempt = a
		if st.status == statusRunning {
			c.setEnded(st, false) // the new attempt reads its input again
		}
		c.setStatus(st, statusRunning)
	}
	c.updateEnded()
	for _, p := range c.sortedPending() {
		if p.persisting != nil {
			continue
		}
		for _, a := range attempts {
			if p.involves(a.Subtask) {
				c.abort(&rd, now, p, AbortTaskRestarted, fmt.Errorf("checkpoint %d aborted: %d subtasks restarted (%s first)%s",
					p.id, len(attempts), attempts[0], because(reason)))
				break
			}
		}
	}
	return rd, nil
}

// currentTask returns the state of attempt's subtask when attempt is its current attempt; otherwise it
// records event as ignored (unknown subtask, or a replaced attempt) and returns false.
func (c *Coordinator) currentTask(rd *Ready, event string, attempt ident.Attempt) (*taskState, bool) {
	st, ok := c.tasks[attempt.Subtask]
	switch {
	case !ok:
		c.ignore(rd, Ignored{Event: event, From: attempt, Reason: IgnoreUnknownTask})
		return nil, false
	case st.Attempt != attempt:
		c.ignore(rd, Ignored{Event: event, From: attempt, Reason: IgnoreNotCurrentAttempt})
		return nil, false
	}
	return st, true
}

// TaskInputEnded reports that the input of the current attempt of a running subtask has ended: it will
// emit nothing more, and waits, before it finishes, until a checkpoint it took part in since then has
// completed (Flink's final checkpoint, FLIP-147). Once every subtask has ended its input or finished, the
// final checkpoint is triggered at once, by this call (or by the event that frees a slot for it, or the
// next Tick), without waiting for the interval; if it does not complete, the next one follows the periodic
// schedule, and so on while subtasks run (each failure counts towards Config.TolerableFailed). With
// periodic checkpoints off (IntervalMillis 0) no final checkpoint is triggered: tasks must not wait for one.
// Reports from other attempts or from subtasks that are not running are ignored.
func (c *Coordinator) TaskInputEnded(now int64, attempt ident.Attempt) Ready {
	var rd Ready
	st, ok := c.currentTask(&rd, "task-input-ended", attempt)
	switch {
	case !ok:
		return rd
	case st.status != statusRunning:
		c.ignore(&rd, Ignored{Event: "task-input-ended", From: attempt, Reason: IgnoreNotExpected})
		return rd
	}
	c.setEnded(st, true)
	c.updateEnded()
	c.maybeTriggerFinal(now, &rd)
	return rd
}

// TaskFinished reports that the current attempt of a subtask finished (its bounded input is done, and a
// checkpoint covering its end completed, or checkpoints were off for it). Checkpoints in progress stop
// waiting for it and record it as finished (unless it already acknowledged), which may complete them;
// later checkpoints record it as finished, and are triggered at the running subtasks whose upstream all
// finished. Once every subtask finished, no checkpoint is triggered.
func (c *Coordinator) TaskFinished(now int64, attempt ident.Attempt) Ready {
	var rd Ready
	st, ok := c.currentTask(&rd, "task-finished", attempt)
	if !ok {
		return rd
	}
	c.setStatus(st, statusFinished)
	c.updateEnded()
	for _, p := range c.sortedPending() {
		if _, waiting := p.waiting[attempt.Subtask]; waiting && p.persisting == nil {
			delete(p.waiting, attempt.Subtask)
			p.acks[attempt.Subtask] = StateHandle{Attempt: attempt, Finished: true}
			p.lastAckMillis = now
			if sub, ok := c.cutOff(p); ok {
				c.abort(&rd, now, p, AbortTaskNotReady, fmt.Errorf("checkpoint %d aborted: its barrier can no longer reach %s: every subtask upstream of it finished without taking the checkpoint", p.id, sub))
				continue
			}
			c.maybeComplete(&rd, p)
		}
	}
	c.maybeTriggerFinal(now, &rd)
	return rd
}

// cutOff returns a subtask that p waits for and that can no longer take it: p was not triggered at it,
// and every subtask upstream of it finished without taking p (recorded as finished in p's acks), so no
// barrier of p will come. Such an upstream subtask finished after the trigger without taking it: a
// trigger that reached a source as it was finishing, or a subtask that was cut off itself. A subtask with
// some upstream that took p, or that still runs, can still take it: the barrier comes on that channel, and
// the finished ones have ended theirs.
//
// Why abort rather than wait: the checkpoint would hold its slot until it timed out, and with it every
// later one, also the final checkpoint that finishing subtasks wait for.
func (c *Coordinator) cutOff(p *pending) (ident.Subtask, bool) {
	for _, sub := range c.order {
		if _, waiting := p.waiting[sub]; !waiting || p.targets[sub] {
			continue
		}
		cut := true
		for _, up := range c.tasks[sub].Upstream {
			if h, ok := p.acks[up]; !ok || !h.Finished {
				cut = false
				break
			}
		}
		if cut {
			return sub, true
		}
	}
	return ident.Subtask{}, false
}

// Stop ends checkpointing (the job is finishing, cancelled or suspended): checkpoints collecting acks are
// aborted, none is triggered any more. Checkpoints being persisted can still complete through Persisted.
func (c *Coordinator) Stop(now int64) Ready {
	var rd Ready
	c.stopped = true
	for _, p := range c.sortedPending() {
		if p.persisting == nil {
			c.abort(&rd, now, p, AbortStopped, fmt.Errorf("checkpoint %d aborted: checkpointing stopped", p.id))
		}
	}
	return rd
}

// fence finds the checkpoint a message from attempt from about id is for, or records why it is ignored.
func (c *Coordinator) fence(rd *Ready, event string, id int64, from ident.Attempt) (*pending, bool) {
	reason := IgnoreReason(0)
	st, known := c.tasks[from.Subtask]
	p := c.pending[id]
	switch {
	case !known:
		reason = IgnoreUnknownTask
	case st.Attempt != from:
		reason = IgnoreNotCurrentAttempt
	case p == nil:
		reason = c.pastReason(id)
	case p.persisting != nil:
		reason = IgnoreCompleted
	default:
		want, waiting := p.waiting[from.Subtask]
		_, acked := p.acks[from.Subtask]
		switch {
		case waiting && want == from:
			return p, true
		case waiting:
			reason = IgnoreNotCurrentAttempt
		case acked && p.acks[from.Subtask].Attempt == from && !p.acks[from.Subtask].Finished:
			reason = IgnoreDuplicate
		default:
			reason = IgnoreNotExpected
		}
	}
	c.ignore(rd, Ignored{Event: event, ID: id, From: from, Reason: reason})
	return nil, false
}

func (c *Coordinator) pastReason(id int64) IgnoreReason {
	switch c.history[id] {
	case outcomeCompleted:
		return IgnoreCompleted
	case outcomeAborted:
		return IgnoreAborted
	}
	return IgnoreUnknownCheckpoint
}

func (c *Coordinator) ignore(rd *Ready, ig Ignored) {
	c.ignored++
	rd.Ignored = append(rd.Ignored, ig)
}

// maybeComplete moves p to persisting once nothing is missing.
func (c *Coordinator) maybeComplete(rd *Ready, p *pending) {
	if len(p.waiting) > 0 || p.persisting != nil {
		return
	}
	cp := &CompletedCheckpoint{
		ID:              p.id,
		TimestampMillis: p.triggerMillis,
		CompletedMillis: p.lastAckMillis,
		Mode:            p.mode,
		Vertices:        slices.Clone(c.vertices),
		States:          make([]StateHandle, 0, len(c.order)),
	}
	for _, sub := range c.order {
		cp.States = append(cp.States, p.acks[sub])
	}
	p.persisting = cp
	rd.Persist = append(rd.Persist, cp)
}

// abort ends p for reason: counts, remembers and notifies the live attempts that took part.
func (c *Coordinator) abort(rd *Ready, now int64, p *pending, reason AbortReason, err error) {
	delete(c.pending, p.id)
	c.statsAborted(now, p.id, reason, err)
	c.remember(p.id, outcomeAborted)
	rd.Aborted = append(rd.Aborted, Aborted{ID: p.id, Reason: reason, Err: err})
	for _, sub := range c.order {
		a, ok := p.waiting[sub]
		if !ok {
			h, acked := p.acks[sub]
			if !acked || h.Finished {
				continue
			}
			a = h.Attempt
		}
		if c.isLive(a) {
			rd.Notifications = append(rd.Notifications, Notification{To: a, CheckpointID: p.id, Kind: NotifyAbort})
		}
	}
	if !reason.Failure() {
		c.counts.Aborted++
		return
	}
	c.counts.Failed++
	c.consecutiveFailed++
	if c.consecutiveFailed > c.cfg.TolerableFailed && rd.FailJob == nil {
		rd.FailJob = fmt.Errorf("%d consecutive checkpoint failures exceed the tolerable %d (last: %v): %w",
			c.consecutiveFailed, c.cfg.TolerableFailed, err, ErrTooManyFailures)
		c.consecutiveFailed = 0
	}
}

// because formats an optional cause for a message.
func because(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// isLive reports whether a is the current, running attempt of its subtask.
func (c *Coordinator) isLive(a ident.Attempt) bool {
	st, ok := c.tasks[a.Subtask]
	return ok && st.Attempt == a && st.status == statusRunning
}

func (p *pending) involves(s ident.Subtask) bool {
	if _, ok := p.waiting[s]; ok {
		return true
	}
	h, ok := p.acks[s]
	return ok && !h.Finished
}

// remember records how id ended, forgetting the oldest ids beyond historyLimit.
func (c *Coordinator) remember(id int64, o outcome) {
	c.history[id] = o
	if len(c.history) > 2*historyLimit {
		for old := range c.history {
			if old < c.nextID-historyLimit {
				delete(c.history, old)
			}
		}
	}
}

func (c *Coordinator) sortedPending() []*pending {
	if len(c.pending) == 0 {
		return nil
	}
	ps := make([]*pending, 0, len(c.pending))
	for _, p := range c.pending {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *pending) int { return cmp.Compare(a.id, b.id) })
	return ps
}

// describeMissing lists (a bounded number of) the subtasks p still waits for.
func (c *Coordinator) describeMissing(p *pending) string {
	const show = 5
	var missing []string
	for _, sub := range c.order {
		if a, ok := p.waiting[sub]; ok {
			missing = append(missing, a.String())
		}
	}
	total := len(missing)
	if total > show {
		missing = append(missing[:show], "...")
	}
	return fmt.Sprintf("%d of %d subtasks missing: %s", total, len(c.order), strings.Join(missing, ", "))
}

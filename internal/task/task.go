// Package task runs one subtask: it owns the lifecycle of an attempt (deploying → initializing → running →
// finished, or canceled or failed from any of these; the Canceling state exists but is not reported, since a
// cancel takes effect at the next mailbox step or blocking call), creates its result partitions and input
// channels, and drives its operator chain from a single goroutine, the mailbox loop, which takes records
// from the input gate (or polls the source), control mails, and the output flush timer in turn.
//
// It also takes the subtask's part in checkpoints: it feeds the in-band barriers, cancel markers and ends of
// partition to a barrier.Aligner and carries out its actions, snapshots the chain on the task goroutine,
// writes the state on a goroutine of its own and acknowledges, restores the state it is deployed with, and
// reports what a restarted attempt observes on its channels (the loss of approximate recovery).
//
// A run of the task is the loop (loop.go) and the wiring of parts with one concern each: the input side
// (input.go), a value that says what each buffer and event of a channel means; the checkpointer
// (checkpointer.go), which writes snapshots off the task goroutine; the determinant log's steps under task
// failover (replay.go); event time (watermarks.go); and the end of input and the final checkpoint
// (finish.go).
//
// The chain itself is typed code built by internal/operator behind the Chain interface; this package sees
// bytes, buffers and events only. It must not import the public runnel package, the graph translation, the
// scheduler or the job master; it reports state changes through a callback, with the types of
// internal/deploy.
package task

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/determinants"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
)

// SourceStatus is what a source poll says about its input.
type SourceStatus int

const (
	// MoreAvailable: poll again right away.
	MoreAvailable SourceStatus = iota
	// NothingAvailable: wait for the source's availability channel.
	NothingAvailable
	// EndOfInput: the source is exhausted.
	EndOfInput
)

// AbortListener is a Chain whose operators hear that a checkpoint was aborted (head first): it can never
// complete (operator.CheckpointAbortListener). The task tells it of each abort the job master sent, on the
// task goroutine, also when the task is ending with the abort still waiting (before Close).
type AbortListener interface {
	NotifyCheckpointAborted(id int64) error
}

// Chain is one subtask's operator chain, built by the operator layer.
type Chain interface {
	// Open opens the operators (tail first, so that downstream operators are ready first).
	Open() error
	// ProcessBuffer hands every record that dec yields from its current buffer (network input `input`) to
	// the chain and returns how many it processed. Looping inside the typed chain keeps the per-record path
	// free of interface calls. Errors deep in the chain unwind as a panic carrying a *Failure, which the task
	// recovers. It may stop between two batches of records when dec is paused (dec.Paused), leaving the
	// rest in dec (dec.More) for a later call.
	ProcessBuffer(input int, dec *network.RecordDecoder) (int, error)
	// IsSource reports whether the head is a source; then PollSource drives it.
	IsSource() bool
	// PollSource lets the source emit a batch of records.
	PollSource() (SourceStatus, error)
	// SourceAvailable returns a channel that is ready when a source that said NothingAvailable has more.
	SourceAvailable() <-chan struct{}
	// EndInput tells the chain that all input has ended (bounded input), before Close.
	EndInput() error
	// Close releases the operators' resources. It is always called once Open was attempted.
	Close() error
	// Snapshot captures every stateful operator's state for checkpoint id, quickly, on the task goroutine;
	// the returned writers serialize it later on another goroutine.
	Snapshot(id int64) ([]StateWriter, error)
	// Restore loads operator states by operator name, after Open and before the first record.
	Restore(states map[string][]byte) error
	// RestoreRescaled is Restore for a vertex whose parallelism changed: each operator gets the states of
	// several old subtasks, which only keyed state can take (filtered to the subtask's key groups).
	RestoreRescaled(parts map[string][][]byte) error
	// NotifyCheckpointComplete tells the operators that checkpoint id is complete (head first).
	NotifyCheckpointComplete(id int64) error
	// InputTimed reports whether network input `input` carries a stream with event time, whose channels
	// carry watermarks (watermarks.go).
	InputTimed(input int) bool
	// LogicalInput returns the input of the head that network input `input` feeds: 0, or 1 for the second
	// input of a two-input operator.
	LogicalInput(input int) int
	// ProcessWatermark hands the task's input watermark (epoch ms) to the head, between buffers; it follows
	// every record before it on every channel.
	ProcessWatermark(ms int64) error
	// ProcessWatermarkStatus tells the head that the task's input went idle or is active again.
	ProcessWatermarkStatus(idle bool) error
	// NextDeadline returns the earliest processing time (epoch ms) at which the chain has work;
	// math.MaxInt64 for none. It is asked after every piece of work, so it must be cheap.
	NextDeadline() int64
	// OnProcessingTime does the chain's processing-time work due at nowMillis (epoch ms), between buffers.
	OnProcessingTime(nowMillis int64) error
	// RestoreWatermark starts the operators' event time at the restored floor (after Restore): their
	// current watermark is floor, and what they emit never goes below it.
	RestoreWatermark(floor int64) error
}

// Failure is panicked by chain code to abort the task with an error (a user function's error, a codec
// error, cancellation while blocked on output).
type Failure struct{ Err error }

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// Abort unwinds the chain with err; the task fails (or, for cancellation, stops) with it.
func Abort(err error) { panic(&Failure{Err: err}) }

// Runtime is what a chain factory gets to build the chain.
type Runtime struct {
	Info deploy.Info
	// Outputs holds one result partition per output edge, in the vertex's output order.
	Outputs []*network.ResultPartition
	// FlushEveryRecord asks record writers to flush after each record (buffer timeout 0).
	FlushEveryRecord bool
	// Counters are the task's record counters; the chain adds to the task-goroutine-owned fields.
	Counters *Counters
	// Cancel is closed when the task is cancelled; blocking operations in operators must watch it.
	Cancel <-chan struct{}
	Logger *slog.Logger
	// Clock is the task's processing time: the wall clock, or a manual one in tests.
	Clock clockwork.Clock
	// StateBackend names where keyed state lives: "memory" or "pebble".
	StateBackend string
	// Checkpointing says the job takes periodic checkpoints: what the task writes is covered by one, the
	// last one too (a sink that commits on completion then need not commit at its end of input).
	Checkpointing bool
	// Operators names the chain's operators, for errors; the operator layer fills it as it builds them.
	Operators []OperatorRef
	// Running is the operator whose code runs now, for the report of a panic: 1 + its index in Operators
	// (0: none). Each operator of the chain sets it as it enters its record path and puts back the previous
	// value as it leaves, so that after a panic (which skips the putting back) it names the operator that
	// panicked. An integer, not a pointer: two plain stores per call, no write barrier, where a deferred
	// recover per call would cost a chained map a tenth of its speed.
	Running int32
}

// running returns the operator that Running names, if any.
func (rt *Runtime) running() (OperatorRef, bool) {
	if rt == nil || rt.Running <= 0 || int(rt.Running) > len(rt.Operators) {
		return OperatorRef{}, false
	}
	return rt.Operators[rt.Running-1], true
}

// OperatorRef names an operator for errors: its name and the file:line of the API call that built it.
type OperatorRef struct {
	Name, Origin string
}

// ChainFactory builds a subtask's chain.
type ChainFactory func(rt *Runtime) (Chain, error)

// Counters count records through a task. In and Out are written only by the task goroutine, without
// atomics; Publish copies them to the atomic fields that other goroutines read.
type Counters struct {
	In, Out uint64
	// Watermark is the task's current watermark (epoch ms): the input watermark of a task with timed
	// inputs, the last one emitted by a source; math.MinInt64 (watermark.MinWatermark) until there is one.
	// The first thing to look at when a window does not fire.
	Watermark               int64
	publishedIn, publishOut atomic.Uint64
	publishedWatermark      atomic.Int64
	m                       metrics
	times                   timeClocks // times.go
	// outputs are the attempt's result partitions once set up, for InflightLogBytes.
	outputs atomic.Pointer[[]*network.ResultPartition]
}

// InflightLogBytes returns the bytes the in-flight logs of the attempt's outputs hold (task failover; 0
// without logs, and until its outputs are set up). It takes each subpartition's lock briefly: call it
// now and then (the TaskManager's counters), not per record.
func (c *Counters) InflightLogBytes() int64 {
	ps := c.outputs.Load()
	if ps == nil {
		return 0
	}
	var n int64
	for _, p := range *ps {
		n += p.LogBytes()
	}
	return n
}

// NewCounters returns counters at zero, with no watermark.
func NewCounters() *Counters {
	c := &Counters{Watermark: math.MinInt64}
	c.publishedWatermark.Store(math.MinInt64)
	return c
}

// Publish makes the current counts visible to readers.
func (c *Counters) Publish() {
	c.publishedIn.Store(c.In)
	c.publishOut.Store(c.Out)
	c.publishedWatermark.Store(c.Watermark)
	c.publishMetrics()
}

// PublishedWatermark returns the last published watermark (math.MinInt64: none yet).
func (c *Counters) PublishedWatermark() int64 { return c.publishedWatermark.Load() }

// Snapshot returns the last published counts.
func (c *Counters) Snapshot() (in, out uint64) { return c.publishedIn.Load(), c.publishOut.Load() }

// Config is a task deployment descriptor.
type Config struct {
	Info    deploy.Info
	Outputs []deploy.OutputSpec
	Inputs  []deploy.InputSpec
	Chain   ChainFactory
	// BufferTimeout: > 0 flush partly filled buffers at this interval; 0 flush after every record; < 0 only
	// when full.
	BufferTimeout time.Duration
	MaxRecordSize int
	// CreditsPerChannel is the number of buffers each input channel may hold (its initial credit).
	CreditsPerChannel int
	// ConnectTimeout bounds how long the task waits for its producers' partitions to appear.
	ConnectTimeout time.Duration
	// Checkpoints, when set, makes the task take part in checkpoints.
	Checkpoints *CheckpointSetup
	// Restore, when set, is the state the attempt starts from.
	Restore *deploy.RestoreSpec
	// StateBackend names where keyed state lives: "memory" (default) or "pebble".
	StateBackend string
	// SkipCheckpointsUpTo makes the barrier aligner drop barriers of checkpoints up to this id: they were
	// triggered before this attempt was deployed, and the producers that were not restarted may still send
	// them while restarted ones never will.
	SkipCheckpointsUpTo int64
	// Determinants, when set, is the subtask's determinant log (docs/taskfailover.md §3), owned by the
	// TaskManager and handed to each attempt: the task records in it the channel it took each input buffer
	// from, marks the barriers it took, and truncates it when a checkpoint completes. With Replay, the
	// attempt first takes its input buffers in the order the log holds (what a failed attempt recorded
	// since the checkpoint this one restored), then goes on live, appending. In-process only.
	Determinants *determinants.Log
	Replay       bool
	// PartitionAttempt is the attempt number in the ids of the partitions the task writes: its own, except
	// under task failover, where a subtask's partitions keep the id of the attempt that made them and each
	// new attempt takes them over (TakeOver: ResultPartition.Takeover from the restored checkpoint) instead
	// of making new ones, so that the consumers, which keep running, keep their channels.
	PartitionAttempt int32
	TakeOver         bool
}

// restoredID is the checkpoint the attempt restores (0: none): where its determinant log is replayed from,
// and the barrier its logged input and output partitions are read and taken over from.
func (c *Config) restoredID() int64 {
	if c.Restore == nil {
		return 0
	}
	return c.Restore.CheckpointID
}

// ReplayChecker is a Chain that can say, after its restore, why it cannot replay for task failover (a source
// whose reader is not deterministic). An attempt that replays fails with its error, and the job master falls
// back to region failover.
type ReplayChecker interface {
	CheckReplay() error
}

// RemoteConnector opens a channel to a partition on another TaskManager.
//
// replayFrom is the checkpoint whose barrier a partition with an in-flight log is read from (the one the
// attempt restored; 0: its start), as network.DialOptions.ReplayFrom.
type RemoteConnector func(ctx context.Context, spec deploy.ChannelSpec, owner ident.Attempt, pool *network.BufferPool, credits int, notify func(), replayFrom int64) (network.InputChannel, error)

// Env is what the hosting TaskManager provides.
type Env struct {
	Partitions    *network.PartitionManager
	Memory        *network.NetworkMemory
	ConnectRemote RemoteConnector
	Logger        *slog.Logger
	// SpillDir holds the spill files of blocking partitions.
	SpillDir string
	// LogBudget is the memory (and disk) of the in-flight logs of the TaskManager's logged partitions.
	LogBudget *network.LogBudget
	// Report receives every state change; it must not block for long.
	Report func(deploy.Update)
	// Clock is the processing time of the TaskManager's tasks; nil: the wall clock.
	Clock clockwork.Clock
	// SnapshotWriters, if not nil, bounds the snapshot writers of the TaskManager's tasks that run at once
	// (a slot is a value in the channel). Writing a large state is CPU work: left unbounded, every task's
	// writer runs at the same time, and on a small machine they crowd out the tasks for tens or hundreds of
	// milliseconds.
	SnapshotWriters chan struct{}
}

// Task is one attempt of one subtask.
type Task struct {
	cfg      Config
	env      Env
	log      *slog.Logger
	state    atomic.Int32
	cancel   chan struct{}
	once     sync.Once
	done     chan struct{}
	counters *Counters
	mb       *mailbox
	err      error
}

// DefaultCreditsPerChannel is the credit of a remote input channel unless configured. With 2, a producer in
// another process waited for credit whenever the consumer's process was not scheduled at once: the standard
// pipeline on three TaskManager processes ran at 0.73–0.75 of the mini-cluster; with 4, at 0.78–0.84, and
// the mini-cluster itself 1–3% faster (runnel bench throughput --processes 3, 2 cores). It costs a remote
// channel 4 buffers (128 KiB at the default size) of its TaskManager's network memory instead of 2.
const DefaultCreditsPerChannel = 4

// New makes a task in state Created.
func New(cfg Config, env Env) *Task {
	if cfg.CreditsPerChannel <= 0 {
		cfg.CreditsPerChannel = DefaultCreditsPerChannel
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 30 * time.Second
	}
	lg := cmp.Or(env.Logger, slog.Default())
	if env.Clock == nil {
		env.Clock = clockwork.NewRealClock()
	}
	t := &Task{cfg: cfg, env: env, cancel: make(chan struct{}), done: make(chan struct{}), mb: newMailbox(),
		log: lg.With("task", cfg.Info.Name()), counters: NewCounters()}
	return t
}

// Info returns the task's description.
func (t *Task) Info() deploy.Info { return t.cfg.Info }

// State returns the current state.
func (t *Task) State() deploy.State { return deploy.State(t.state.Load()) }

// Counters returns the task's record counters.
func (t *Task) Counters() *Counters { return t.counters }

// Done is closed when the task reached a terminal state.
func (t *Task) Done() <-chan struct{} { return t.done }

// Err returns the failure cause once the task failed.
func (t *Task) Err() error {
	<-t.done
	return t.err
}

// Cancel asks the task to stop; it ends in Canceled unless it already finished or failed.
func (t *Task) Cancel() {
	t.once.Do(func() { close(t.cancel) })
}

func (t *Task) setState(s deploy.State, err error) {
	t.state.Store(int32(s))
	if t.env.Report != nil {
		u := deploy.Update{Attempt: t.cfg.Info.Attempt, State: s, Err: err}
		if s.Terminal() {
			u.RecordsIn, u.RecordsOut = t.counters.Snapshot()
			u.Watermark = t.counters.PublishedWatermark()
			u.Metrics = t.counters.PublishedMetrics()
		}
		t.env.Report(u)
	}
}

func (t *Task) canceled() bool {
	select {
	case <-t.cancel:
		return true
	default:
		return false
	}
}

// Run executes the task to a terminal state. It is called once, on the goroutine the TaskManager owns for it.
func (t *Task) Run() {
	r := &run{t: t, et: eventTime{clock: t.env.Clock, deadline: math.MaxInt64}, steps: steps{log: t.cfg.Determinants, warn: t.log},
		cp: newCheckpointer(t.cfg.Checkpoints, t.cfg.Info.Attempt, t.env.SnapshotWriters)}
	err := r.execute()
	if err != nil {
		r.cp.cancel()
	}
	r.stopTimer()
	r.cp.wait() // a finished task still acknowledges the checkpoints it took
	r.cp.cancel()
	if err != nil || t.canceled() {
		r.abortsBeforeClose()
	}
	if t.canceled() {
		r.completeBeforeCancel()
	}
	r.cleanup(err)
	final := deploy.Finished
	switch {
	case err == nil:
	case t.canceled() && (errors.Is(err, network.ErrCanceled) || errors.Is(err, errCanceled)):
		final, err = deploy.Canceled, nil
	case t.canceled():
		// Failures caused by the cancellation itself (a released partition, a closed connection) are not
		// the task's fault.
		final, err = deploy.Canceled, nil
	default:
		final = deploy.Failed
		err = fmt.Errorf("task %s failed: %w", t.cfg.Info.Name(), err)
	}
	t.err = err
	t.counters.Publish()
	if err != nil {
		var pe *PanicError
		if errors.As(err, &pe) {
			// The stack is logged, not carried in the error: it is for whoever debugs the function, and
			// would bury the job's error message.
			t.log.Error("task failed", "err", err, "operator", pe.Operator, "stack", pe.Stack)
		} else {
			t.log.Error("task failed", "err", err)
		}
	}
	r.declineLeftTriggers(t.mb.close())
	t.setState(final, err)
	close(t.done)
}

var errCanceled = errors.New("task canceled")

// cannotReplayError is a ReplayChecker's error, unchanged in its text, that also wraps ErrCannotReplay.
type cannotReplayError struct{ err error }

func (e cannotReplayError) Error() string   { return e.err.Error() }
func (e cannotReplayError) Unwrap() []error { return []error{deploy.ErrCannotReplay, e.err} }

// run holds the resources of one execution.
type run struct {
	t       *Task
	outPool *network.BufferPool
	inPool  *network.BufferPool
	outputs []*network.ResultPartition
	gate    *network.InputGate
	in      *input // the input side, channel by channel (input.go); without channels for a source
	chain   Chain
	opened  bool
	aligner *barrier.Aligner
	steps   steps // the determinant log's steps: recorded live, read back while replaying
	// regenerating says outputs taken over still regenerate what their streams held: no checkpoint is
	// taken until they are past it (a barrier there would stand after records the state has not produced).
	regenerating bool
	// lastSnapshot is the newest checkpoint whose snapshot the attempt took (0: none), which a join reports.
	lastSnapshot int64
	outputSeen   bool
	cp           *checkpointer // writes the snapshots (checkpointer.go)
	mail         mail          // the mail being carried out (its memory is reused)
	// completeHeard is the highest checkpoint completion the chain heard of.
	completeHeard int64
	fin           finishing // end of input and the final checkpoint (finish.go)
	align         alignment // the timing of the barriers the input aligns (checkpoint.go)
	// uc is the unaligned checkpoint snapshotted and still storing its input channel state (unaligned.go).
	uc *pendingUnaligned
	y  yielding  // waiting for the output in the mailbox loop, and barriers between batches (yield.go)
	et eventTime // watermarks and processing time (watermarks.go)
}

func (r *run) execute() (err error) {
	t := r.t
	var rt *Runtime
	defer func() {
		if p := recover(); p != nil {
			err = panicError(p, rt)
		}
	}()
	t.setState(deploy.Deploying, nil)
	if err := r.setupOutputs(); err != nil {
		return err
	}
	t.setState(deploy.Initializing, nil)
	if err := r.setupInputs(); err != nil {
		return err
	}
	rt = &Runtime{Info: t.cfg.Info, Outputs: r.outputs, FlushEveryRecord: t.cfg.BufferTimeout == 0,
		Checkpointing: t.cfg.Checkpoints != nil && t.cfg.Checkpoints.FinalCheckpoint,
		Counters:      t.counters, Cancel: t.cancel, Logger: t.log, StateBackend: t.cfg.StateBackend, Clock: t.env.Clock}
	if t.cfg.Determinants != nil {
		r.steps.clock = &stepClock{Clock: t.env.Clock}
		r.steps.clock.ms.Store(t.env.Clock.Now().UnixMilli())
		rt.Clock = r.steps.clock
	}
	chain, err := t.cfg.Chain(rt)
	if err != nil {
		return fmt.Errorf("build operator chain: %w", err)
	}
	r.chain = chain
	r.setupValve()
	r.opened = true
	if err := chain.Open(); err != nil {
		return fmt.Errorf("open operators: %w", err)
	}
	finished, err := r.restore()
	if err != nil {
		return err
	}
	if t.canceled() {
		return errCanceled
	}
	if r.gate != nil && t.cfg.Checkpoints != nil {
		r.aligner = barrier.New(r.gate.NumChannels(), t.cfg.Checkpoints.Mode)
		// Barriers of the restored checkpoint and those before reach a restored task only as stored
		// (unaligned.go) or replayed ones: it has their snapshot already.
		if id := max(t.cfg.SkipCheckpointsUpTo, t.cfg.restoredID()); id > 0 {
			r.apply(r.aligner.OnAbortUpTo(id))
		}
	}
	r.setupYield()
	if t.cfg.Replay {
		if t.cfg.Determinants == nil {
			return errors.New("replay: no determinant log")
		}
		if chain.IsSource() {
			// A source replays by its reader, which rewound to the restored position and reads the same
			// records again (docs/taskfailover.md §3); it takes no steps from the log. Its log starts
			// again at the restored checkpoint, as a first attempt's does, so that the checkpoints it takes
			// from here on are marked and a later failure can restore them.
			t.cfg.Determinants.Reset()
			if id := t.cfg.restoredID(); id > 0 {
				if err := t.cfg.Determinants.Mark(id); err != nil {
					return fmt.Errorf("replay: %w", err)
				}
			}
		} else if r.steps.reader, err = t.cfg.Determinants.ReaderAt(t.cfg.restoredID()); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		if rc, ok := chain.(ReplayChecker); ok {
			if err := rc.CheckReplay(); err != nil {
				return fmt.Errorf("replay: %w", cannotReplayError{err})
			}
		}
	}
	t.counters.startTimes()
	t.setState(deploy.Running, nil)
	// A subtask that had finished at the restored checkpoint ends right away: its output was complete. One
	// whose input had ended there emits nothing and does not end its input again, but waits like any other
	// for a checkpoint that covers its end.
	if !finished {
		if !r.fin.restoredEnded {
			r.rearm()
			read := r.readInput
			if chain.IsSource() {
				read = r.pollSource
			}
			if err := r.loop(read); err != nil {
				return err
			}
			// Processing-time work pending at the end of the input is dropped, as Flink does when a task
			// finishes: EndInput is the place for final work.
			r.stopTimer()
			r.et.off = true
			if err := chain.EndInput(); err != nil {
				return fmt.Errorf("end of input: %w", err)
			}
		}
		if err := r.finishInput(); err != nil {
			return err
		}
	}
	for _, p := range r.outputs {
		if err := p.Finish(); err != nil {
			return err
		}
	}
	return nil
}

func (t *Task) observe(o deploy.Observation) {
	if t.env.Report != nil {
		t.env.Report(deploy.Update{Attempt: t.cfg.Info.Attempt, State: t.State(), Observation: &o})
	}
}

func (r *run) cleanup(runErr error) {
	t := r.t
	if r.opened && r.chain != nil {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.log.Error("operator close panicked", "panic", p)
				}
			}()
			if err := r.chain.Close(); err != nil && runErr == nil {
				t.log.Warn("close operators", "err", err)
			}
		}()
	}
	if r.gate != nil {
		if r.y.cur != nil {
			r.gate.Recycle(r.y.curIdx, r.y.cur) // back to its producer's pool (yield.go)
			r.y.cur = nil
		}
		r.gate.Release()
	}
	for _, p := range r.outputs {
		// The partitions of a failed or cancelled attempt stay until the job master releases them, after it
		// learned of the failure: a consumer that saw them vanish first would report a failure of its own
		// and hide the cause.
		p.Close()
	}
	if r.inPool != nil {
		r.inPool.Destroy()
	}
	if r.outPool != nil {
		r.outPool.Destroy()
	}
}

// panicError turns a recovered panic into an error: a *Failure keeps its cause, anything else (a panic in
// user code) becomes an error with the panic value, the operator that was running (rt.Running, when the
// chain was built) and the stack. Called from the deferred recover, before the stack unwinds, so the stack
// is the panic's.
func panicError(p any, rt *Runtime) error {
	if f, ok := p.(*Failure); ok {
		return f.Err
	}
	pe := &PanicError{Value: p, Stack: string(debug.Stack())}
	if op, ok := rt.running(); ok {
		pe.Operator, pe.Origin = op.Name, op.Origin
	}
	return pe
}

// PanicError is a panic in operator code, recovered by the task. The operator layer fills in the operator
// whose code panicked (a user function, mostly) and where the job created it; a panic it could not
// attribute (in the task's own code) has neither. The task logs Stack at ERROR when it fails with one.
type PanicError struct {
	// Operator names the operator, Origin is the file:line of the API call that built it; both may be empty.
	Operator, Origin string
	Value            any
	Stack            string
}

func (e *PanicError) Error() string {
	if e.Operator == "" {
		return fmt.Sprintf("panic: %v", e.Value)
	}
	at := ""
	if e.Origin != "" {
		at = " (created at " + e.Origin + ")"
	}
	return fmt.Sprintf("operator %q%s panicked: %v", e.Operator, at, e.Value)
}

// PanicStack returns the stack of the goroutine that panicked, as it panicked.
func (e *PanicError) PanicStack() string { return e.Stack }

// Unwrap returns the panic value when it is an error (a state access that failed, for example).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

package runnel

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/executor"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/operator"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

// CheckpointingMode says whether checkpoints align barriers (exactly-once) or not (at-least-once).
type CheckpointingMode string

// Checkpointing modes.
const (
	ExactlyOnce CheckpointingMode = "exactly-once"
	AtLeastOnce CheckpointingMode = "at-least-once"
)

// CheckpointConfig configures periodic checkpoints (Flink's CheckpointConfig). Checkpointing is off while
// Interval is 0.
type CheckpointConfig struct {
	// Interval between the triggers of two checkpoints.
	Interval time.Duration
	// Mode is ExactlyOnce (default) or AtLeastOnce.
	Mode CheckpointingMode
	// Timeout after which a checkpoint in progress is declared failed (default 10 minutes).
	Timeout time.Duration
	// MinPause is the least time between the end of one checkpoint and the start of the next.
	MinPause time.Duration
	// MaxConcurrent checkpoints in progress at once (default 1).
	MaxConcurrent int
	// TolerableFailed is the number of consecutive failed checkpoints tolerated (Flink's
	// execution.checkpointing.tolerable-failed-checkpoints; default 0, as in Flink). One more is a failure
	// of the job as a whole: the restart strategy decides whether it restarts, every task from the latest
	// checkpoint, or fails.
	TolerableFailed int
	// Retained completed checkpoints kept in storage (default 2).
	Retained int
	// Storage is where checkpoints go: a directory, file://DIR, s3://BUCKET/PREFIX or mem:// (default: a
	// directory under the system's temporary directory, per job).
	Storage string
	// Unaligned makes checkpoints unaligned (Flink's execution.checkpointing.unaligned.enabled; CLI
	// --unaligned-checkpoints): a barrier overtakes the data queued in front of it, and what it overtook
	// is stored with the checkpoint as channel state, so that a checkpoint under backpressure does not wait
	// for the queues to drain. Exactly once, with every failover strategy. Only with Mode ExactlyOnce;
	// savepoints stay aligned.
	Unaligned bool
	// AlignedCheckpointTimeout, with Unaligned, makes checkpoints start aligned and switches a subtask to
	// unaligned once its alignment took longer (Flink's execution.checkpointing.aligned-checkpoint-timeout;
	// CLI --aligned-checkpoint-timeout). 0: every checkpoint is unaligned from its start.
	AlignedCheckpointTimeout time.Duration
	// ApproximateLocalRecovery makes every pipelined edge reconnectable (PIPELINED_APPROXIMATE): a failed
	// subtask restarts together with everything downstream of it while everything upstream keeps running,
	// at the price of a counted loss of the records in flight. Same as WithFailover("approximate").
	//
	// Restarted subtasks restore the latest completed checkpoint (or start empty). A restarted source
	// rewinds to its checkpointed position; everything downstream of it restarts from the same checkpoint,
	// so keyed state sees each record once, but a sink that is not part of the checkpoint (print, a plain
	// file) sees again what the restarted path had emitted since that checkpoint: those are duplicates.
	ApproximateLocalRecovery bool
}

// WithCheckpointing turns on periodic checkpoints.
func WithCheckpointing(c CheckpointConfig) Option { return func(cfg *Config) { cfg.Checkpoint = c } }

// WithFailover sets the failover strategy: "full" restarts every task, "region" (the default) the pipelined
// regions that must restart.
func WithFailover(strategy string) Option { return func(c *Config) { c.Failover = strategy } }

// WithRestartStrategy sets the restart strategy from a spec: "none", "fixed-delay:attempts=3,delay=1s",
// "exponential-delay:initial=100ms,max=10s,multiplier=2,reset=1m,jitter=0.1,immediate=1" or
// "failure-rate:max-failures=3,interval=1m,delay=1s". Default: none without checkpointing, and with it
// DefaultRestartWithCheckpoints, whose first restart of a failure is immediate: a job that fails now and
// then is back at once (under approximate recovery every millisecond before the restart is data lost),
// and only failures that follow each other within a minute back off, from 100 ms doubling to 10 s.
func WithRestartStrategy(spec string) Option { return func(c *Config) { c.RestartStrategy = spec } }

// WithStateBackend selects where keyed state lives: "memory" (default) or "pebble" (on disk).
func WithStateBackend(name string) Option { return func(c *Config) { c.StateBackend = name } }

// WithFailureInjection makes tasks fail on purpose, for tests and demos. Each spec is
// "OPERATOR[SUBTASK]@WHEN", where WHEN is a duration since the job started ("2s"), a record count
// ("5000": after that many records reached that subtask of the operator, over all its attempts), or a
// checkpoint ("chk-3": at the first record after the subtask heard that checkpoint 3 or a later one
// completed, so that the failover restores a checkpoint however slowly the machine runs). The task
// holding the operator fails once per spec, at that point, and each spec makes a failover of its own (one
// that strikes a subtask a failover is stopping already fires again in its next attempt). Every spec
// fires, also several for one subtask: "map[0]@1000" and "map[0]@5000" fail the first attempt at the
// 1000th record and a later one at the 5000th; specs due at the same time fire in the order given, one
// per attempt (the next at the first record of the restarted attempt). A spec the job ends before is
// logged at WARN and listed in JobResult.UnfiredInjections.
func WithFailureInjection(specs ...string) Option {
	return func(c *Config) { c.FailureInjections = append(c.FailureInjections, specs...) }
}

// WithSavepointOnStop writes a savepoint to dir when the job is stopped (its context cancelled): a
// checkpoint is taken, copied to dir as a self-contained savepoint, and then the job is cancelled. Execute
// checks dir before the job starts (creating a local directory): one that cannot be written, or that
// already holds a savepoint, fails Execute at once rather than the stop after the whole run.
func WithSavepointOnStop(dir string) Option { return func(c *Config) { c.SavepointOnStop = dir } }

// WithRestoreFrom starts the job from a savepoint, a retained checkpoint directory chk-N, or a checkpoint
// storage directory (its newest valid checkpoint; newer damaged ones are passed over, listed in
// JobResult.RestoredFrom and logged at WARN). dir must exist: nothing is created, and a missing directory
// fails Execute with an error naming it. A checkpoint in which the job had already finished (every task had
// ended its input: the final checkpoint of a bounded job) finishes it at once, reading and emitting
// nothing, as Flink does with operators a checkpoint records as finished; JobResult.RestoredFrom.Finished
// says so.
//
// State is mapped to operators by their uid (Stream.Uid; the name when none was set), not to tasks: the
// job may chain its operators otherwise, rename an operator that has a Uid, add operators (they start
// empty) and drop stateless ones. Sources keep their old parallelism unless they keep their position in
// operator list state; operators with keyed state may change theirs. State of an operator the job no longer
// has fails Execute, naming its uid, unless WithAllowNonRestoredState. (Checkpoints written before uids
// were recorded are restored only into the same operators and chaining.)
func WithRestoreFrom(dir string) Option { return func(c *Config) { c.RestoreFrom = dir } }

// WithIncrementalCheckpoints makes checkpoints incremental (Flink's execution.checkpointing.incremental;
// off by default there and here): keyed state on the memory backend is written as what changed since the
// subtask's previous checkpoint, and a checkpoint refers to the earlier checkpoints' blobs for the rest
// (shared state, kept while a retained checkpoint refers to it). A checkpoint of large state that changes
// little then writes a fraction of it; a restore reads the chain, at most about twice the state (a full
// checkpoint starts the chain again once the deltas outgrow it). Savepoints are self-contained copies.
// The pebble backend writes its whole state each time, as without. See docs/checkpoints.md.
func WithIncrementalCheckpoints() Option { return func(c *Config) { c.IncrementalCheckpoints = true } }

// WithAllowNonRestoredState lets WithRestoreFrom start the job although the checkpoint holds state of
// operators the job no longer has: that state is dropped, and its uids are logged at WARN (Flink's
// --allowNonRestoredState).
func WithAllowNonRestoredState() Option { return func(c *Config) { c.AllowNonRestoredState = true } }

// WithExchangeMode sets which network edges are pipelined and which blocking: "pipelined" (default,
// streaming), "blocking" (every edge: each task runs to completion before its consumers start, and a failure
// restarts only the failed task's region, re-reading its blocking inputs) or "forward-pipelined" (shuffles
// blocking, forward edges pipelined). Blocking edges are for bounded jobs.
func WithExchangeMode(mode string) Option { return func(c *Config) { c.ExchangeMode = mode } }

// WithScheduling sets the scheduling strategy: "pipelined-region" (default: a region is deployed once its
// blocking inputs are consumable) or "eager" (everything at once).
func WithScheduling(mode string) Option { return func(c *Config) { c.Scheduling = mode } }

// DefaultRestartWithCheckpoints is the restart strategy of a checkpointed job without an explicit one: the
// first failure after a quiet minute restarts at once (immediate=1), the next ones back off from 100 ms,
// doubling up to 10 s, with 10% jitter.
const DefaultRestartWithCheckpoints = scheduler.DefaultRestartWithCheckpoints

// recoveryConfig is the validated form of the recovery options: what the executor runs the job with, and
// what building its job graph takes of them.
type recoveryConfig struct {
	executor.Recovery
	exchange      graph.ExchangeMode
	pipelinedType graph.PartitionType
}

func (c *Config) recovery(job string) (*recoveryConfig, error) {
	var errs []error
	rc := &recoveryConfig{Recovery: executor.Recovery{Backend: c.StateBackend}, pipelinedType: graph.PipelinedBounded}
	cp := c.Checkpoint
	if cp.Interval < 0 {
		errs = append(errs, fmt.Errorf("CheckpointConfig.Interval: must not be negative, got %s", cp.Interval))
	}
	rc.Checkpointing = cp.Interval > 0 || c.SavepointOnStop != ""
	rc.SavepointDir, rc.RestoreFrom, rc.AllowDropped = c.SavepointOnStop, c.RestoreFrom, c.AllowNonRestoredState
	rc.Incremental = c.IncrementalCheckpoints
	if c.AllowNonRestoredState && c.RestoreFrom == "" {
		errs = append(errs, errors.New("AllowNonRestoredState (--allow-non-restored-state) applies to a restore: give WithRestoreFrom (--from-savepoint) too"))
	}
	if cp.AlignedCheckpointTimeout < 0 {
		errs = append(errs, fmt.Errorf("CheckpointConfig.AlignedCheckpointTimeout: must not be negative, got %s", cp.AlignedCheckpointTimeout))
	}
	if cp.AlignedCheckpointTimeout > 0 && !cp.Unaligned {
		errs = append(errs, errors.New("CheckpointConfig.AlignedCheckpointTimeout (--aligned-checkpoint-timeout) switches aligned checkpoints to unaligned: set Unaligned (--unaligned-checkpoints) too"))
	}
	if rc.Checkpointing {
		cc := checkpoint.DefaultConfig()
		cc.IntervalMillis = cp.Interval.Milliseconds()
		switch cp.Mode {
		case "", ExactlyOnce:
			cc.Mode = barrier.ExactlyOnce
		case AtLeastOnce:
			cc.Mode = barrier.AtLeastOnce
		default:
			errs = append(errs, fmt.Errorf("CheckpointConfig.Mode: %q is not a mode; use %q or %q", cp.Mode, ExactlyOnce, AtLeastOnce))
		}
		if cp.Unaligned {
			if cc.Mode == barrier.AtLeastOnce {
				errs = append(errs, errors.New("CheckpointConfig.Unaligned with Mode AtLeastOnce: unaligned checkpoints are exactly once; at-least-once checkpoints do not align anyway"))
			}
			cc.Mode = barrier.Unaligned
			cc.AlignedTimeoutMillis = cp.AlignedCheckpointTimeout.Milliseconds()
		}
		if cp.Timeout > 0 {
			cc.TimeoutMillis = cp.Timeout.Milliseconds()
		}
		cc.MinPauseMillis = cp.MinPause.Milliseconds()
		if cp.MaxConcurrent > 0 {
			cc.MaxConcurrent = cp.MaxConcurrent
		}
		cc.TolerableFailed = cp.TolerableFailed
		if cp.Retained > 0 {
			cc.Retained = cp.Retained
		}
		if err := cc.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("CheckpointConfig: %w", err))
		}
		rc.Checkpoint = cc
		rc.Storage = cp.Storage
	}
	failover := c.Failover
	if failover == "" {
		failover = "region"
		if cp.ApproximateLocalRecovery {
			failover = "approximate"
		}
	}
	if mode, err := scheduler.ParseFailoverStrategy(failover); err != nil {
		errs = append(errs, fmt.Errorf("WithFailover: %w", err))
	} else {
		rc.Failover = mode
		if cp.ApproximateLocalRecovery && mode != scheduler.ApproximateFailover {
			errs = append(errs, fmt.Errorf("CheckpointConfig.ApproximateLocalRecovery with WithFailover(%q): approximate local recovery is its own failover strategy; drop WithFailover or use \"approximate\"", failover))
		}
		if mode == scheduler.ApproximateFailover || mode == scheduler.TaskFailover {
			rc.pipelinedType = graph.PipelinedApproximate
		}
	}
	spec := c.RestartStrategy
	if spec == "" {
		spec = "none"
		if cp.Interval > 0 {
			spec = DefaultRestartWithCheckpoints
		}
	}
	if r, err := scheduler.ParseRestartStrategy(spec); err != nil {
		errs = append(errs, fmt.Errorf("WithRestartStrategy: %w", err))
	} else {
		// Restarting without checkpoints is allowed, as in Flink: sources replay from the start and state
		// starts empty.
		rc.Restart = r
	}
	switch c.StateBackend {
	case "", "memory":
		rc.Backend = "memory"
	case "pebble":
		rc.Backend = "pebble"
	default:
		errs = append(errs, fmt.Errorf("WithStateBackend: %q is not a state backend; use memory or pebble", c.StateBackend))
	}
	if c.ExchangeMode != "" {
		if m, err := graph.ParseExchangeMode(c.ExchangeMode); err != nil {
			errs = append(errs, fmt.Errorf("WithExchangeMode: %w", err))
		} else {
			rc.exchange = m
		}
	}
	if rc.exchange != graph.AllPipelined && rc.Checkpointing {
		errs = append(errs, fmt.Errorf("WithExchangeMode(%q) with checkpointing: checkpoints are for pipelined (streaming) jobs; a job with blocking edges recovers by restarting regions from their blocking inputs — drop WithCheckpointing or use exchange mode pipelined", c.ExchangeMode))
	}
	if c.Scheduling != "" {
		if m, err := scheduler.ParseSchedulingStrategy(c.Scheduling); err != nil {
			errs = append(errs, fmt.Errorf("WithScheduling: %w", err))
		} else {
			rc.Scheduling = m
		}
	}
	if rc.Scheduling == scheduler.EagerScheduling && rc.exchange != graph.AllPipelined {
		errs = append(errs, fmt.Errorf("WithScheduling(\"eager\") with exchange mode %q: blocking edges need pipelined-region scheduling", c.ExchangeMode))
	}
	for _, s := range c.FailureInjections {
		inj, err := ParseFailureInjection(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("WithFailureInjection: %w", err))
			continue
		}
		inj.Index = len(rc.Injections) // the same in every process that parses the same options
		rc.Injections = append(rc.Injections, inj)
	}
	return rc, errors.Join(errs...)
}

var injectionSpec = regexp.MustCompile(`^(.+)\[(\d+)\]@(\S+)$`)

// ParseFailureInjection parses "OPERATOR[SUBTASK]@WHEN".
func ParseFailureInjection(spec string) (*operator.Injection, error) {
	m := injectionSpec.FindStringSubmatch(strings.TrimSpace(spec))
	if m == nil {
		return nil, fmt.Errorf("%q is not OPERATOR[SUBTASK]@WHEN (for example map[0]@5000, source[1]@2s or map[0]@chk-3)", spec)
	}
	sub, err := strconv.Atoi(m[2])
	if err != nil {
		return nil, fmt.Errorf("%q: bad subtask index: %w", spec, err)
	}
	inj := &operator.Injection{Operator: m[1], Subtask: sub, Spec: spec}
	if n, err := strconv.ParseUint(m[3], 10, 64); err == nil {
		if n == 0 {
			return nil, fmt.Errorf("%q: the record count must be at least 1", spec)
		}
		inj.AfterRecords = n
		return inj, nil
	}
	if n, ok := strings.CutPrefix(m[3], "chk-"); ok {
		id, err := strconv.ParseInt(n, 10, 64)
		if err != nil || id < 1 {
			return nil, fmt.Errorf("%q: chk-N needs a checkpoint number N of at least 1", spec)
		}
		inj.AfterCheckpoint = id
		return inj, nil
	}
	d, err := time.ParseDuration(m[3])
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("%q: WHEN must be a record count (5000), a positive duration (2s) or a checkpoint (chk-3)", spec)
	}
	inj.After = d
	return inj, nil
}

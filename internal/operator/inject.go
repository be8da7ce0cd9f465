package operator

import (
	"sync/atomic"
	"time"

	"github.com/runnel-dev/runnel/internal/task"
)

// Injection makes one subtask of one operator fail once, on purpose: after AfterRecords records reached it
// (counted over all its attempts, replayed records included), at the first record after the job ran for
// After, or at the first record after the subtask heard that checkpoint AfterCheckpoint or a later one
// completed (so that the failover always has a checkpoint to restore, however slow the machine). It is
// shared by every attempt of the subtask, so it fires once per job, not once per attempt.
//
// Several injections may name the same subtask; each of them fires, once. They are independent triggers
// over the same count of records: the subtask fails at the first record at which an injection is due, and
// since one record fails an attempt at most once, injections due at the same record (or already due when an
// earlier one fired) fire in the order they were given, one per attempt, at the first record of each
// following attempt. So "map[0]@1000" and "map[0]@5000" fail attempt 0 at the 1000th record and a later
// attempt at the 5000th (counted from the start, over all attempts), and the same spec given twice fails
// the subtask twice.
//
// In a cluster every process parses the job's injections from the same arguments, so an injection is known
// everywhere by its Index; the job master keeps the set of those that fired (from the InjectedFailure a
// failed attempt reports) and a TaskManager makes the injections of a subtask agree with it (SetFired)
// before it builds an attempt, so an injection fires once per job even when its subtask moves to another
// process. One that failed an attempt a failover was stopping already made no failover of its own: the job
// master leaves it out, and it fires again in the next attempt.
type Injection struct {
	Operator        string
	Subtask         int
	AfterRecords    uint64
	After           time.Duration
	AfterCheckpoint int64
	Spec            string
	// Index is the injection's position in the job's list of injections, the same in every process.
	Index int

	armed atomic.Bool
	fired atomic.Bool
	seen  atomic.Uint64
}

// Targets reports whether the injection fails subtask of operator.
func (i *Injection) Targets(operator string, subtask int) bool {
	return i.Operator == operator && i.Subtask == subtask
}

// Arm makes a time-based injection fire at the next record; the job's owner calls it After the start.
func (i *Injection) Arm() { i.armed.Store(true) }

// checkpointComplete arms an injection waiting for checkpoint id or an earlier one.
func (i *Injection) checkpointComplete(id int64) {
	if i.AfterCheckpoint > 0 && id >= i.AfterCheckpoint {
		i.armed.Store(true)
	}
}

// Fired reports whether the injection has fired.
func (i *Injection) Fired() bool { return i.fired.Load() }

// SetFired records whether the injection fired, as the job master knows it: true when it fired elsewhere
// (an attempt in another process), so that it never fires here; false when it fired in an attempt whose
// failure a failover in progress took in, so that it fires again. Call it before a chain that holds the
// injection is built, while no attempt of its subtask runs.
func (i *Injection) SetFired(fired bool) { i.fired.Store(fired) }

// InjectedFailure is the error of an attempt that an injection failed: Index says which, so that the
// TaskManager can tell the job master (protocol.Failure.Injection) and the job master the next deployments.
type InjectedFailure struct {
	Index int
	Spec  string
}

func (f *InjectedFailure) Error() string { return "injected failure " + f.Spec }

// InjectionIndex returns the index of the injection that failed the attempt: what a TaskManager reports
// without knowing this type.
func (f *InjectedFailure) InjectionIndex() int { return f.Index }

// observe counts one record that reached the subtask and reports whether the injection is due (and has not
// fired yet).
func (i *Injection) observe() bool {
	if i.fired.Load() {
		return false
	}
	if i.AfterRecords > 0 {
		return i.seen.Add(1) >= i.AfterRecords
	}
	return i.armed.Load()
}

// injector fails the subtask when one of its injections is due. It holds every injection of one subtask of
// one operator, in the order they were given.
type injector[T any] struct {
	next BatchCollector[T]
	injs []*Injection
}

// CollectBatch hands records on one at a time, so that the failure fires at its exact record.
func (c *injector[T]) CollectBatch(vs []T) {
	for _, v := range vs {
		c.Collect(v)
	}
}

func (c *injector[T]) Collect(v T) {
	// Every injection counts the record before any of them fires, so that all of them count the same
	// records: the one that fires at this record does not hide it from the others.
	var due *Injection
	for _, inj := range c.injs {
		if inj.observe() && due == nil {
			due = inj
		}
	}
	if due != nil && due.fired.CompareAndSwap(false, true) {
		task.Abort(&InjectedFailure{Index: due.Index, Spec: due.Spec})
	}
	c.next.Collect(v)
}

// wrapIn puts the context's failure injections, if any, in front of an operator's input.
func wrapIn[T any](ctx *Context, c Collector[T]) Collector[T] {
	if len(ctx.injs) == 0 {
		return c
	}
	return &injector[T]{next: asBatch(c), injs: ctx.injs}
}

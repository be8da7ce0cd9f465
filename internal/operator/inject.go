package operator

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/runnel-dev/runnel/internal/task"
)

// Injection makes one subtask of one operator fail once, on purpose: after AfterRecords records reached it
// (counted over all its attempts, replayed records included), or at the first record after the job ran for
// After. It is shared by every attempt of the subtask, so it fires once per job, not once per attempt.
type Injection struct {
	Operator     string
	Subtask      int
	AfterRecords uint64
	After        time.Duration
	Spec         string

	armed atomic.Bool
	fired atomic.Bool
	seen  atomic.Uint64
}

// Arm makes a time-based injection fire at the next record; the job's owner calls it After the start.
func (i *Injection) Arm() { i.armed.Store(true) }

// Fired reports whether the injection has fired.
func (i *Injection) Fired() bool { return i.fired.Load() }

type injector[T any] struct {
	next BatchCollector[T]
	inj  *Injection
}

// CollectBatch hands records on one at a time, so that the failure fires at its exact record.
func (c *injector[T]) CollectBatch(vs []T) {
	for _, v := range vs {
		c.Collect(v)
	}
}

func (c *injector[T]) Collect(v T) {
	if !c.inj.fired.Load() && (c.inj.AfterRecords > 0 && c.inj.seen.Add(1) >= c.inj.AfterRecords || c.inj.armed.Load()) &&
		c.inj.fired.CompareAndSwap(false, true) {
		task.Abort(fmt.Errorf("injected failure %s", c.inj.Spec))
	}
	c.next.Collect(v)
}

// wrapIn puts the context's failure injection, if any, in front of an operator's input.
func wrapIn[T any](ctx *Context, c Collector[T]) Collector[T] {
	if ctx.inj == nil {
		return c
	}
	return &injector[T]{next: asBatch(c), inj: ctx.inj}
}

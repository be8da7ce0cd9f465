package task

import (
	"fmt"
	"sync/atomic"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/network"
)

// Yielding to barriers (unaligned checkpoints)
//
// An unaligned checkpoint is as quick as its barriers' way through the tasks, and two things would hold a
// barrier up however little data is queued: a task busy with a whole buffer of records (a slow operator
// spends long on one), and a task blocked waiting for a buffer of its output pool (backpressure), which
// hears nothing until one frees up. So in a job of unaligned checkpoints a task waits for its output in its
// mailbox loop instead, as Flink's tasks do: a source is not polled, and no input buffer is begun or
// resumed, while its output pool has no free buffer. And a task stops between two batches of records of a
// buffer when an unaligned checkpoint's barrier reaches the head of one of its local channels
// (network.LocalInputChannel.SetPriorityListener) or its output pool runs out (network.BufferPool.
// OnExhausted); it takes such barriers first, and goes on with the rest of the buffer when its output has
// room. A snapshot taken in the middle of a buffer stores the rest of it as channel state
// (network.RecordDecoder.Unconsumed), since that rest came before the barrier.
//
// Not under task failover, whose replay takes the very steps the failed attempt took, a whole buffer being
// one step there; its sources still wait for their output in the mailbox loop. Over TCP a barrier reaches
// the head of a channel after the buffers already on their way (their credit), which the task takes first.

// yielding is a run's state for the above; the task goroutine owns it, except pause.
type yielding struct {
	// on: a task with inputs stops between batches and waits for its output in the mailbox loop.
	on bool
	// sourceWait: a source waits for its output before a poll; wake says a buffer came back.
	sourceWait bool
	wake       chan struct{}
	// pause makes the input's decoders stop after their current batch (network.RecordDecoder.SetPause): a
	// barrier waits at the head of a channel, or the output ran out. Set from any goroutine.
	pause atomic.Bool
	// curIdx and cur are the input buffer in progress, whose rest its decoder holds (nil: none).
	curIdx int
	cur    *network.Buffer
}

// priorityChannel is an input channel that tells of barriers overtaking its queue (local channels).
type priorityChannel interface {
	SetPriorityListener(func())
	PriorityWaiting() bool
}

// setupYield turns yielding on for a task of a job of unaligned checkpoints: after the restore (which may
// wrap channels) and before the first record.
func (r *run) setupYield() {
	cs := r.t.cfg.Checkpoints
	if cs == nil || cs.Mode != barrier.Unaligned || r.outPool == nil && r.gate == nil {
		return
	}
	if r.chain.IsSource() {
		if r.outPool == nil {
			return
		}
		r.y.sourceWait = true
		r.y.wake = make(chan struct{}, 1)
		r.outPool.OnAvailable(func() {
			select {
			case r.y.wake <- struct{}{}:
			default:
			}
		})
		return
	}
	if r.gate == nil || r.t.cfg.Determinants != nil {
		return
	}
	r.y.on = true
	for _, d := range r.in.decoders {
		d.SetPause(&r.y.pause)
	}
	gate := r.gate
	for i := range gate.NumChannels() {
		if pc, ok := priorityOf(gate.Channel(i)); ok {
			pc.SetPriorityListener(func() {
				r.y.pause.Store(true)
				gate.Wakeup()
			})
		}
	}
	if r.outPool != nil {
		r.outPool.OnAvailable(gate.Wakeup)
		r.outPool.OnExhausted(func() { r.y.pause.Store(true) })
	}
}

// priorityOf returns the channel that tells of overtaking barriers behind ch, if any.
func priorityOf(ch network.InputChannel) (priorityChannel, bool) {
	if sc, ok := ch.(*storedChannel); ok {
		if _, ok := sc.InputChannel.(priorityChannel); !ok {
			return nil, false
		}
		return sc, true
	}
	pc, ok := ch.(priorityChannel)
	return pc, ok
}

// outputFull reports whether the task's output pool has no free buffer; it then asks the pool to wake
// the task when one comes back.
func (r *run) outputFull() bool {
	return r.outPool != nil && r.outPool.Available() == 0 && !r.outPool.WatchAvailable()
}

// yieldStep is readInput's first part when yielding is on: it takes the barriers waiting at the heads of
// channels, waits while the output is full, and goes on with the buffer in progress. It reports whether
// it did a step (then readInput returns its progress).
func (r *run) yieldStep() (progress, bool, error) {
	if r.y.pause.Load() {
		r.y.pause.Store(false)
		if err := r.takePriority(); err != nil {
			return goOn, true, err
		}
	}
	if r.outputFull() {
		return idleUntil(r.gate.Wake()), true, nil
	}
	if r.y.cur == nil {
		return goOn, false, nil
	}
	idx, buf := r.y.curIdx, r.y.cur
	r.y.cur = nil
	if err := r.processRecords(idx, buf, r.in.decoders[idx]); err != nil {
		return goOn, true, err
	}
	r.afterWork()
	return goOn, true, nil
}

// takePriority takes the barriers waiting at the heads of the channels, ahead of the buffers behind them.
func (r *run) takePriority() error {
	for idx := range r.gate.NumChannels() {
		pc, ok := priorityOf(r.gate.Channel(idx))
		if !ok || !pc.PriorityWaiting() {
			continue
		}
		if sc, ok := pc.(*storedChannel); ok && !sc.crossed && r.y.cur != nil && r.y.curIdx == idx {
			// The buffer in progress is a stored one: where the channel goes on live is judged once
			// its decoder has had all of it (crossToLive).
			continue
		}
		buf, err := r.gate.NextFrom(idx)
		if err != nil {
			return fmt.Errorf("input channel %d: %w", idx, err)
		}
		if buf == nil {
			continue
		}
		r.steps.took(idx, buf.Kind == network.KindEvent, r.t.counters.Out)
		if _, err := r.processBuffer(idx, buf); err != nil {
			return err
		}
	}
	return nil
}

// SetPriorityListener implements priorityChannel for a stored channel over a local one.
func (c *storedChannel) SetPriorityListener(f func()) {
	c.InputChannel.(priorityChannel).SetPriorityListener(f)
}

// PriorityWaiting implements priorityChannel: only once the stored buffers are handed out is the inner
// channel's head the next buffer.
func (c *storedChannel) PriorityWaiting() bool {
	return len(c.stored) == 0 && c.InputChannel.(priorityChannel).PriorityWaiting()
}

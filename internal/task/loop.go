package task

import (
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/network"
)

// The mailbox loop (Flink's MailboxProcessor)
//
// A task's goroutine runs one loop, loop, for each phase of its life: it reads its input (a source's poll,
// or the input gate's next buffer) until the input ends, then, finishing, drains its channels to their
// ends of partition and waits for the final checkpoint (finish.go). What the phase does is the loop's
// default action; between two runs of it, the loop carries out what else is ready (mail from other
// goroutines, the flush tick, the processing-time timer, cancellation), so that a task busy with records
// still hears checkpoints and time. When the action has nothing to do, the loop waits for what makes it
// available again, or for any of those.

// action is one run of a loop's default action.
type action func() (progress, error)

// progress is what a run of the default action says about the next one.
type progress struct {
	// done: the phase is over and the loop returns.
	done bool
	// idle: the action has nothing to do now. The loop waits for wake (nil: the action waits for mail,
	// the tick or the timer only), mail, the tick, the timer or cancellation.
	idle bool
	wake <-chan struct{}
}

var (
	// goOn: run the action again, after what is ready between.
	goOn = progress{}
	// phaseEnded: the phase is over.
	phaseEnded = progress{done: true}
)

// idleUntil says the action has nothing to do until wake is ready.
func idleUntil(wake <-chan struct{}) progress { return progress{idle: true, wake: wake} }

// loop runs act until it says done, with the mail, tick and timer between its runs.
func (r *run) loop(act action) error {
	tick, stop := r.ticker()
	defer stop()
	for {
		if err := r.between(tick, false, nil); err != nil {
			return err
		}
		p, err := act()
		if err != nil {
			return err
		}
		if p.done {
			return nil
		}
		if p.idle {
			if err := r.between(tick, true, p.wake); err != nil {
				return err
			}
		}
	}
}

// ticker drives the output flusher (every buffer timeout) and the publication of the record counters; a
// task without outputs to flush still publishes its counters every publishInterval.
func (r *run) ticker() (<-chan time.Time, func()) {
	d := publishInterval
	if bt := r.t.cfg.BufferTimeout; bt > 0 && len(r.outputs) > 0 {
		d = bt
	}
	tk := time.NewTicker(d)
	return tk.C, tk.Stop
}

// publishInterval is how often a task without a buffer timeout publishes its counters.
const publishInterval = 200 * time.Millisecond

// readySignal is what between found ready.
type readySignal uint8

const (
	sigNone readySignal = iota
	sigWake
	sigMail
	sigTick
	sigTimer
	sigCancel
)

// between carries out what is ready between two runs of the default action: mail, the flush tick, the
// processing-time timer, or cancellation. Idle, it first waits for one of them or for wake. It then
// carries out everything else that is ready before it returns, as Flink's mailbox runs all its mail
// before the next input: Go's select picks at random among ready cases, and a timer that fell due
// before a record arrived must fire before that record is read, not after it by chance. The buffer
// timeout is measured while idle too: a task spends most of its time in that wait when its input is
// slow, and a tick taken without flushing would hold its records until a buffer fills.
func (r *run) between(tick <-chan time.Time, idle bool, wake <-chan struct{}) error {
	t := r.t
	if idle {
		got := sigNone
		t.counters.Publish()
		t.counters.times.idle.Start(network.Monotonic())
		select {
		case <-wake:
			got = sigWake
		case <-t.mb.ready:
			got = sigMail
		case <-tick:
			got = sigTick
		case <-r.timerC():
			got = sigTimer
		case <-t.cancel:
			got = sigCancel
		}
		t.counters.times.idle.Stop(network.Monotonic())
		if err := r.carryOut(got); err != nil {
			return err
		}
	}
	// Each of these is ready a bounded number of times: the tick once per interval, the timer once per
	// arming, mail until the mailbox is empty.
	for {
		got := sigNone
		select {
		case <-t.mb.ready:
			got = sigMail
		case <-tick:
			got = sigTick
		case <-r.timerC():
			got = sigTimer
		case <-t.cancel:
			got = sigCancel
		default:
			return nil
		}
		if err := r.carryOut(got); err != nil {
			return err
		}
	}
}

// carryOut does what between found ready.
func (r *run) carryOut(got readySignal) error {
	t := r.t
	switch got {
	case sigMail:
		r.runMail()
	case sigTick:
		r.flushAll()
		t.counters.Publish()
		if r.align.timeout > 0 {
			r.checkAlignmentTimeout()
		}
	case sigTimer:
		return r.onTimer()
	case sigCancel:
		return errCanceled
	}
	return nil
}

// pollSource is the default action of a source's input phase: one poll of the source.
func (r *run) pollSource() (progress, error) {
	if r.y.sourceWait && r.outputFull() {
		return idleUntil(r.y.wake), nil // unaligned checkpoints: wait for the output here (yield.go)
	}
	began := r.beforeWork()
	st, err := r.chain.PollSource()
	if err != nil {
		return goOn, fmt.Errorf("source: %w", err)
	}
	r.checkOutput(began)
	r.afterWork()
	switch st {
	case EndOfInput:
		return phaseEnded, nil
	case NothingAvailable:
		// No flush here: a rate-limited source is idle between every few records, and flushing each
		// time would send tiny buffers; the buffer timeout bounds the latency.
		return idleUntil(r.chain.SourceAvailable()), nil
	}
	return goOn, nil
}

// readInput is the default action of a task with inputs until its input ends: one buffer of the input
// gate (the one the determinant log names, while the attempt replays).
func (r *run) readInput() (progress, error) {
	if r.y.on {
		if p, did, err := r.yieldStep(); did || err != nil {
			return p, err
		}
	}
	idx, buf, err := r.nextBuffer()
	if err != nil {
		return goOn, fmt.Errorf("input channel %d: %w", idx, err)
	}
	if buf == nil {
		return idleUntil(r.gate.Wake()), nil
	}
	done, err := r.processBuffer(idx, buf)
	if err != nil {
		return goOn, err
	}
	r.afterWork()
	if done {
		return phaseEnded, nil
	}
	return goOn, nil
}

// afterWork follows a source poll or an input buffer: outputs a reader reconnected to are flushed, and
// all of them without a buffer timeout.
func (r *run) afterWork() {
	r.rearm()
	r.flushRequested()
	if r.t.cfg.BufferTimeout == 0 {
		r.flushAll()
	}
	if r.regenerating {
		r.checkRegenerated()
	}
	if r.align.timeout > 0 {
		r.checkAlignmentTimeout()
	}
}

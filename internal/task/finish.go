package task

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/network"
)

// End of input and the final checkpoint (Flink's FLIP-147)
//
// When a task's input ends (a source said EndOfInput; every input channel delivered end of data or end of
// partition), its operators hear EndInput and may still emit. Without checkpoints (or without periodic
// ones: CheckpointSetup.FinalCheckpoint false) the task then ends its partitions and finishes, as before.
// With them, it does not finish yet:
//
//  1. it sends end of data on every output (no more records; barriers still follow) and reports
//     InputEnded to the job master, whose coordinator triggers the final checkpoint as soon as every task's
//     input ended;
//  2. it keeps taking part in checkpoints: a source, and a task whose upstream all finished, is triggered
//     directly; the others align the barriers that still come on their channels. Every snapshot taken from
//     now on records that the input had ended (inputEndedName), so that a restore from it neither reads
//     nor emits records again, nor runs EndInput a second time;
//  3. it finishes (ends its partitions, reaches FINISHED) once every input channel delivered its end of
//     partition and its operators heard that a checkpoint it took after step 1 completed: what its last
//     records did is then covered by a completed checkpoint, and a sink that commits on completion has
//     committed everything.
//
// The wait ends on cancellation too. If the final checkpoint does not complete (aborted, declined, timed
// out), the task waits for the next one: the coordinator keeps triggering on its periodic schedule while
// any task runs, and every failed checkpoint counts towards the tolerable failed checkpoints, past which
// the job fails (or fails over) and the task is cancelled. A notification that does not reach the task is
// made up for by the next checkpoint's.
//
// A trigger that reaches a task with inputs (its upstream all finished) before it read its channels to
// their end is deferred until it has (at most maxDeferredTriggers; the oldest beyond is declined): the
// snapshot must come after the last record of every channel, as if the barrier had followed them, since
// the finished upstream will not replay them.

// inputEndedName is the entry, in a snapshot's state blob, that says the subtask's input had ended when it
// was taken. Like channelStateName, the NUL keeps it apart from operator names.
const inputEndedName = "\x00input-ended"

// maxDeferredTriggers bounds the triggers a task holds until it has read its inputs to the end: as many
// checkpoints as the coordinator may have in progress.
const maxDeferredTriggers = checkpoint.MaxConcurrentLimit

// deferredTrigger is a trigger held until every input channel ended.
type deferredTrigger struct {
	id, timestampMillis int64
	flags               uint32
}

// finishing is the end-of-input state of a run; the task goroutine owns it.
//
// That the task's own input ended (its operators heard EndInput, or the restored checkpoint says they had)
// is input.closed: the input side refuses records after it.
type finishing struct {
	// restoredEnded says the restored checkpoint was taken after the subtask's input had ended.
	restoredEnded bool
	// firstSnapshot is the first checkpoint snapshotted since the input ended (0: none yet); every later
	// one is too, since snapshots are taken in increasing id order.
	firstSnapshot int64
	// covered says the operators heard that a checkpoint at or after firstSnapshot completed.
	covered  bool
	deferred []deferredTrigger
}

// waitsForFinalCheckpoint reports whether the task, once its input ended, waits for a checkpoint to
// complete before it finishes.
func (r *run) waitsForFinalCheckpoint() bool {
	cs := r.t.cfg.Checkpoints
	return cs != nil && cs.FinalCheckpoint
}

// finishInput follows the end of the task's input (EndInput has run, or the restored checkpoint says it
// had): see the protocol above. It returns once the task may end its partitions.
func (r *run) finishInput() error {
	t := r.t
	r.in.closed = true
	wait := r.waitsForFinalCheckpoint()
	if wait {
		ev := network.Event{Type: network.EventEndOfData}
		for _, p := range r.outputs {
			if err := p.BroadcastEvent(ev); err != nil {
				return fmt.Errorf("send end of data: %w", err)
			}
		}
		t.observe(deploy.Observation{Kind: deploy.InputEnded, At: time.Now()})
	}
	r.runDeferredTriggers()
	if r.finishedInput(wait) {
		return nil
	}
	return r.loop(func() (progress, error) { return r.drain(wait) })
}

// drain is the default action of a finishing task (finishInput): one buffer of a channel that has not
// delivered its end of partition yet, until the task may end its partitions. It reads the gate's next
// buffer: what a finishing task reads is neither replayed from the determinant log nor recorded in it.
func (r *run) drain(wait bool) (progress, error) {
	if r.finishedInput(wait) {
		return phaseEnded, nil
	}
	if r.gate == nil || r.in.drained() {
		return idleUntil(nil), nil // wait for mail, the timer or cancellation only
	}
	idx, buf, err := r.gate.Next()
	if err != nil {
		return goOn, fmt.Errorf("input channel %d: %w", idx, err)
	}
	if buf == nil {
		return idleUntil(r.gate.Wake()), nil
	}
	if _, err := r.processBuffer(idx, buf); err != nil {
		return goOn, err
	}
	r.afterWork()
	r.runDeferredTriggers()
	if r.finishedInput(wait) {
		return phaseEnded, nil
	}
	return goOn, nil
}

// finishedInput reports whether the finishing task may end its partitions: every input channel ended,
// and, when it waits for one, a checkpoint covering its end completed.
func (r *run) finishedInput(wait bool) bool {
	return (r.gate == nil || r.in.drained()) && (!wait || r.fin.covered)
}

// readAllInput reports whether the task has read every input channel to its end, after EndInput: a
// snapshot taken now covers everything its upstream sent.
func (r *run) readAllInput() bool {
	return r.gate == nil || (r.in.closed && r.in.drained())
}

// triggered starts checkpoint id at this task on the job master's request: at once for a source or a task
// that has read its inputs to the end, otherwise once it has (see the protocol above).
func (r *run) triggered(id, ts int64, flags uint32) {
	if r.cp.setup != nil {
		flags = r.unalignedFlags(flags)
	}
	if r.readAllInput() && !r.regenerating {
		r.performCheckpoint(id, ts, flags)
		return
	}
	if len(r.fin.deferred) == maxDeferredTriggers {
		old := r.fin.deferred[0]
		r.fin.deferred = r.fin.deferred[1:]
		if r.cp.setup != nil {
			r.cp.decline(old.id, fmt.Errorf("%w: %d newer triggers wait for the end of the input or of a regeneration",
				checkpoint.ErrTaskNotReady, maxDeferredTriggers))
		}
	}
	r.fin.deferred = append(r.fin.deferred, deferredTrigger{id: id, timestampMillis: ts, flags: flags})
}

// runDeferredTriggers takes the deferred checkpoints, oldest first, once the inputs were read to the end.
func (r *run) runDeferredTriggers() {
	if len(r.fin.deferred) == 0 || !r.readAllInput() || r.regenerating {
		return
	}
	ds := r.fin.deferred
	r.fin.deferred = nil
	for _, d := range ds {
		r.performCheckpoint(d.id, d.timestampMillis, d.flags)
	}
}

// declineLeftTriggers declines, as not ready, the checkpoints the ended task was triggered for and did not
// take: those left in its mailbox and those it deferred. The declines go out before the task reports its
// end, so the coordinator aborts each such checkpoint (without counting a failure) instead of counting the
// finished task as having taken it, and triggers the next one at the subtasks whose upstream finished.
func (r *run) declineLeftTriggers(left []trigger) {
	if r.cp.setup == nil {
		return
	}
	for _, d := range r.fin.deferred {
		r.cp.decline(d.id, fmt.Errorf("%w: the task ended before its input did", checkpoint.ErrTaskNotReady))
	}
	r.fin.deferred = nil
	for _, tr := range left {
		r.cp.decline(tr.id, fmt.Errorf("%w: the task ended before it took the checkpoint", checkpoint.ErrTaskNotReady))
	}
}

// dropDeferredTriggersUpTo drops the deferred triggers of checkpoints up to id (an abort-up-to mark).
func (r *run) dropDeferredTriggersUpTo(id int64) {
	r.fin.deferred = slices.DeleteFunc(r.fin.deferred, func(d deferredTrigger) bool { return d.id <= id })
}

// dropDeferredTrigger forgets a deferred trigger of an aborted checkpoint.
func (r *run) dropDeferredTrigger(id int64) {
	for i, d := range r.fin.deferred {
		if d.id == id {
			r.fin.deferred = append(r.fin.deferred[:i], r.fin.deferred[i+1:]...)
			return
		}
	}
}

// snapshotTaken notes that checkpoint id is being snapshotted and, after the end of the input, returns
// the writer of the entry that says so (nil before).
func (r *run) snapshotTaken(id int64) *StateWriter {
	if !r.in.closed {
		return nil
	}
	if r.fin.firstSnapshot == 0 {
		r.fin.firstSnapshot = id
	}
	return &StateWriter{Operator: inputEndedName, Write: func(io.Writer) error { return nil }}
}

// checkpointCompleted notes that the operators heard of checkpoint id's completion.
func (r *run) checkpointCompleted(id int64) {
	if r.fin.firstSnapshot > 0 && id >= r.fin.firstSnapshot {
		r.fin.covered = true
	}
}

// errRescaleEnded refuses to rescale state taken after a subtask's input had ended.
var errRescaleEnded = errors.New("its input had ended in the checkpoint, so it has no input left to redistribute")

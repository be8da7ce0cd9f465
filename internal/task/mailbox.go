package task

import (
	"fmt"
	"slices"
	"sync"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// The mailbox holds the work other goroutines give a task (the job master's checkpoint triggers, aborts
// and completion notifications) until the mailbox loop runs it, between records. Nothing a task must hear
// is dropped: each kind of mail has a bound, and what happens past it is stated.
//
//   - Completion notifications coalesce into the highest id: one slot. A completion covers every earlier
//     checkpoint (the contract of CheckpointListener: commit everything staged up to the id), so the
//     chain hears the highest id once, and never an id at or below one it heard.
//   - Aborts are kept as a set of ids, ascending, at most maxPendingAborts: the checkpoint being aligned
//     and as many ahead of it as the barrier aligner remembers. Past the bound the oldest id is folded into
//     an abort-up-to mark, which the task hands the aligner as OnAbortUpTo, and which it logs. Folding can
//     only give up more: a checkpoint below the mark that was still in progress (its own abort not yet
//     sent) then loses this task's acknowledgement and does not complete; no checkpoint is ever made
//     wrong. It takes maxPendingAborts aborts while the task runs no mail (a task stuck in a record).
//   - Triggers (sources, and tasks whose upstream finished) queue in order, at most maxPendingTriggers. An abort takes its checkpoint's
//     trigger out of the queue, so that only checkpoints in progress wait, and the coordinator keeps at
//     most checkpoint.MaxConcurrentLimit of those. Past the bound a trigger is refused: TriggerCheckpoint
//     returns false, and the job master declines the checkpoint (counted, visible in the report).
//
// After the task ended, mail is refused (the methods return false), and the triggers still waiting are
// declined as not ready: a source that finishes with a trigger in its mailbox never sends that
// checkpoint's barrier, so its consumers would never take part in it, and the checkpoint would hold the
// coordinator's slot until it timed out (and with it the final checkpoint the consumers wait for).

// maxPendingTriggers bounds the checkpoint triggers waiting in a task's mailbox.
const maxPendingTriggers = checkpoint.MaxConcurrentLimit

// maxPendingAborts bounds the checkpoint aborts waiting in a task's mailbox, beyond which the oldest are
// folded into an abort-up-to mark.
const maxPendingAborts = barrier.MaxAbortedIDs + 1

// trigger is a checkpoint trigger waiting for the source's mailbox loop.
type trigger struct {
	id, timestampMillis int64
	flags               uint32
}

// mail is what the mailbox holds, and what the loop takes out of it in one go.
type mail struct {
	abortUpTo    int64   // every checkpoint up to here is aborted; 0: none
	folded       int     // aborts merged into abortUpTo since the last take
	aborts       []int64 // ascending, each above abortUpTo
	triggers     []trigger
	completeUpTo int64 // the highest checkpoint completed; 0: none
}

func (m *mail) empty() bool {
	return m.abortUpTo == 0 && len(m.aborts) == 0 && len(m.triggers) == 0 && m.completeUpTo == 0
}

// mailbox is the task's queue of mail; safe for any goroutine. The loop waits on ready.
type mailbox struct {
	mu      sync.Mutex
	closed  bool
	pending mail
	ready   chan struct{} // capacity 1: a value means there is mail
	// taken and carried count the takes of mail and those the loop finished carrying out, so that tests
	// can wait until what they sent has run.
	taken, carried uint64
}

func newMailbox() *mailbox { return &mailbox{ready: make(chan struct{}, 1)} }

// signal wakes the loop; called with mu held after adding mail.
func (mb *mailbox) signal() {
	select {
	case mb.ready <- struct{}{}:
	default: // already signalled, not yet taken
	}
}

// putTrigger queues a checkpoint trigger; false if the task ended or maxPendingTriggers are waiting.
func (mb *mailbox) putTrigger(tr trigger) bool {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if mb.closed || len(mb.pending.triggers) >= maxPendingTriggers {
		return false
	}
	mb.pending.triggers = append(mb.pending.triggers, tr)
	mb.signal()
	return true
}

// putAbort queues the abort of checkpoint id; false if the task ended.
func (mb *mailbox) putAbort(id int64) bool {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if mb.closed {
		return false
	}
	p := &mb.pending
	// A trigger of the aborted checkpoint that the source has not taken yet is void.
	p.triggers = slices.DeleteFunc(p.triggers, func(tr trigger) bool { return tr.id == id })
	if id <= p.abortUpTo {
		return true // covered by the mark already
	}
	i, found := slices.BinarySearch(p.aborts, id)
	if !found {
		p.aborts = slices.Insert(p.aborts, i, id)
	}
	if len(p.aborts) > maxPendingAborts {
		p.abortUpTo = p.aborts[0]
		p.folded++
		p.aborts = slices.Delete(p.aborts, 0, 1)
	}
	mb.signal()
	return true
}

// putComplete queues the completion of checkpoint id, merged with any waiting one; false if the task ended.
func (mb *mailbox) putComplete(id int64) bool {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if mb.closed {
		return false
	}
	mb.pending.completeUpTo = max(mb.pending.completeUpTo, id)
	mb.signal()
	return true
}

// takeComplete returns the highest checkpoint completion waiting (0: none) and removes it.
func (mb *mailbox) takeComplete() int64 {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	id := mb.pending.completeUpTo
	mb.pending.completeUpTo = 0
	return id
}

// takeAborts appends the checkpoint aborts waiting (the mark's id, then each id, ascending) to ids, returns
// it, and removes them.
func (mb *mailbox) takeAborts(ids []int64) []int64 {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	p := &mb.pending
	if p.abortUpTo > 0 {
		ids = append(ids, p.abortUpTo)
	}
	ids = append(ids, p.aborts...)
	p.abortUpTo, p.folded, p.aborts = 0, 0, p.aborts[:0]
	return ids
}

// take moves the waiting mail into m (reusing m's memory) and empties the mailbox.
func (mb *mailbox) take(m *mail) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	p := &mb.pending
	if !p.empty() {
		mb.taken++
	}
	m.abortUpTo, m.folded, m.completeUpTo = p.abortUpTo, p.folded, p.completeUpTo
	m.aborts = append(m.aborts[:0], p.aborts...)
	m.triggers = append(m.triggers[:0], p.triggers...)
	p.abortUpTo, p.folded, p.completeUpTo = 0, 0, 0
	p.aborts, p.triggers = p.aborts[:0], p.triggers[:0]
}

// len returns how many entries wait: aborts, triggers, and the mark and completion slots when set.
func (mb *mailbox) len() int {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	n := len(mb.pending.aborts) + len(mb.pending.triggers)
	if mb.pending.abortUpTo > 0 {
		n++
	}
	if mb.pending.completeUpTo > 0 {
		n++
	}
	return n
}

// carriedOut notes that the loop finished carrying out the mail it took.
func (mb *mailbox) carriedOut() {
	mb.mu.Lock()
	mb.carried++
	mb.mu.Unlock()
}

// idle reports whether no mail waits and everything taken was carried out.
func (mb *mailbox) idle() bool {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.pending.empty() && mb.taken == mb.carried
}

// close refuses all further mail and returns the triggers that were waiting: the task that ended must
// decline them, since the job master counts a trigger it delivered as taken. The rest of what waits is
// dropped with the task (aborts and completions are about the task's own work, which ended).
func (mb *mailbox) close() []trigger {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	mb.closed = true
	left := mb.pending.triggers
	mb.pending = mail{}
	return left
}

// TriggerCheckpoint asks a source task (or, once tasks finished, one whose upstream all finished: see
// finish.go) to snapshot its state and send barriers downstream. It returns false
// when the task cannot take the trigger: it ended, or maxPendingTriggers triggers wait already.
func (t *Task) TriggerCheckpoint(id, timestampMillis int64, flags uint32) bool {
	return t.mb.putTrigger(trigger{id: id, timestampMillis: timestampMillis, flags: flags})
}

// AbortCheckpoint tells the task that the job master gave up on checkpoint id, which can never complete:
// the task drops its alignment and snapshot, and the chain's operators hear of it on the task goroutine
// (AbortListener), also when the task is cancelled or fails with the abort still waiting. It returns false
// when the task ended.
func (t *Task) AbortCheckpoint(id int64) bool { return t.mb.putAbort(id) }

// NotifyCheckpointComplete tells the task that checkpoint id is complete and persisted; the chain's
// operators hear of it on the task goroutine (a sink may then commit what it wrote up to that checkpoint),
// merged with other completions that arrive before the task gets to them. An error fails the task. It
// returns false when the task ended.
func (t *Task) NotifyCheckpointComplete(id int64) bool { return t.mb.putComplete(id) }

// completeBeforeCancel tells the operators of a cancelled task of a checkpoint completion that reached the
// task before its cancellation and was still waiting. The job master sends a stop's cancellations after the
// completion of its savepoint, on the same session: a transactional sink must hear it to commit what the
// savepoint holds, or that transaction stays open, blocking read_committed readers, until the job resumes.
// An error is logged, not raised: the task is cancelled either way, and a restore commits again.
func (r *run) completeBeforeCancel() {
	id := r.t.mb.takeComplete()
	if id <= r.completeHeard || r.chain == nil || !r.opened {
		return
	}
	r.completeHeard = id
	defer func() {
		if p := recover(); p != nil {
			r.t.log.Warn("checkpoint completion heard while cancelling: an operator panicked", "checkpoint", id, "panic", p)
		}
	}()
	if err := r.chain.NotifyCheckpointComplete(id); err != nil {
		r.t.log.Warn("checkpoint completion heard while cancelling", "checkpoint", id, "err", err)
	}
}

// abortsBeforeClose tells the operators of a task that is ending (cancelled, or failed) of the checkpoint
// aborts that reached it and were still waiting. The job master sends the aborts of a job that fails or is
// cancelled ahead of the cancellations, on the same session: a transactional sink that hears them may
// abort what it prepared for those checkpoints as it closes, rather than leave it open. Errors and panics
// are logged, not raised: the task ends either way.
func (r *run) abortsBeforeClose() {
	ids := r.t.mb.takeAborts(nil)
	if len(ids) == 0 || r.chain == nil || !r.opened {
		return
	}
	for _, id := range ids {
		r.notifyAborted(id, true)
	}
}

// notifyAborted tells the chain's operators that checkpoint id was aborted. A task that is ending logs an
// error or a panic; a running one fails with the error.
func (r *run) notifyAborted(id int64, ending bool) {
	l, ok := r.chain.(AbortListener)
	if !ok {
		return
	}
	if !ending {
		if err := l.NotifyCheckpointAborted(id); err != nil {
			Abort(fmt.Errorf("checkpoint %d aborted: %w", id, err))
		}
		return
	}
	defer func() {
		if p := recover(); p != nil {
			r.t.log.Warn("checkpoint abort heard while ending: an operator panicked", "checkpoint", id, "panic", p)
		}
	}()
	if err := l.NotifyCheckpointAborted(id); err != nil {
		r.t.log.Warn("checkpoint abort heard while ending", "checkpoint", id, "err", err)
	}
}

// runMail carries out the waiting mail on the task goroutine: aborts first (the mark, then each id, oldest
// first, as the aligner expects them), then triggers in order, then the completion.
func (r *run) runMail() {
	m := &r.mail
	r.t.mb.take(m)
	if m.empty() {
		return
	}
	defer r.t.mb.carriedOut()
	if m.abortUpTo > 0 {
		r.t.log.Warn("checkpoint aborts merged: the task ran no mail while they arrived",
			"aborted_up_to", m.abortUpTo, "merged", m.folded, "bound", maxPendingAborts)
		r.dropDeferredTriggersUpTo(m.abortUpTo)
		if r.aligner != nil {
			r.apply(r.aligner.OnAbortUpTo(m.abortUpTo))
		}
		if r.chain != nil {
			r.notifyAborted(m.abortUpTo, false) // the mark is an abort that came; those folded into it are not told
		}
	}
	for _, id := range m.aborts {
		r.dropDeferredTrigger(id)
		if r.aligner != nil {
			r.apply(r.aligner.OnAbort(id))
		}
		if r.chain != nil {
			r.notifyAborted(id, false)
		}
	}
	for _, tr := range m.triggers {
		// A task with inputs whose upstream finished is triggered directly; it snapshots once it has read
		// its inputs to the end (finish.go).
		r.triggered(tr.id, tr.timestampMillis, tr.flags)
	}
	if id := m.completeUpTo; id > r.completeHeard && r.chain != nil {
		r.completeHeard = id
		r.steps.truncate(id) // no attempt will restore an older checkpoint
		for _, p := range r.outputs {
			p.TruncateLog(id) // nor will any consumer
		}
		if err := r.chain.NotifyCheckpointComplete(id); err != nil {
			Abort(fmt.Errorf("checkpoint %d complete: %w", id, err))
		}
		r.checkpointCompleted(id) // after the operators heard it: a finishing task may now end
	}
}

package barrier

import (
	"fmt"
	"slices"
	"strings"
)

// Mode says whether barriers are aligned: the consistency mode a checkpoint is taken in (Flink's
// CheckpointingMode). The job's configuration chooses it, the checkpoint coordinator sends it to the tasks
// with every trigger, the barriers carry it, and the checkpoint's metadata records it.
type Mode uint8

const (
	// ExactlyOnce aligns barriers: a channel that delivered the pending barrier is blocked until every channel
	// has delivered it. It is the default.
	ExactlyOnce Mode = iota
	// AtLeastOnce blocks nothing: records keep flowing, and the snapshot is taken when the last barrier arrives.
	AtLeastOnce
	// Unaligned is exactly once without alignment (Flink's unaligned checkpoints, FLIP-76): the first
	// barrier of a checkpoint is snapshotted at once and forwarded ahead of the queued output, and what
	// the other channels deliver before their barriers is stored with the checkpoint as channel state. An
	// Aligner in this mode aligns the checkpoints whose barriers are not marked Unaligned (savepoints).
	Unaligned
)

// String returns "exactly-once" or "at-least-once", the one spelling of the modes on the command line, in
// the API, in checkpoint metadata and in reports.
func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly-once"
	case AtLeastOnce:
		return "at-least-once"
	case Unaligned:
		return "unaligned"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Valid reports whether m is one of the modes.
func (m Mode) Valid() bool { return m == ExactlyOnce || m == AtLeastOnce || m == Unaligned }

// ParseMode parses the spelling String returns. It accepts "exactly_once" and "at_least_once" too: the
// metadata of checkpoints taken by earlier versions spells the modes so, and they must still restore.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "exactly-once", "exactly_once":
		return ExactlyOnce, nil
	case "at-least-once", "at_least_once":
		return AtLeastOnce, nil
	case "unaligned":
		return Unaligned, nil
	}
	return 0, fmt.Errorf("unknown checkpoint mode %q (want exactly-once, at-least-once or unaligned)", s)
}

// MaxAbortedIDs bounds how many ids the job master aborted before their barriers arrived (OnAbort of an id
// newer than the pending one) an Aligner remembers. Beyond it the oldest is forgotten.
const MaxAbortedIDs = 64

// Checkpoint is what a barrier carries. The aligner reads only ID; the rest is passed through to Snapshot.
type Checkpoint struct {
	// ID is positive and increases per job.
	ID int64
	// TimestampMillis is the trigger time.
	TimestampMillis int64
	// Flags are the checkpoint's options, opaque here.
	Flags uint32
	// Unaligned marks an unaligned checkpoint's barrier: in an Aligner of mode ExactlyOnce or Unaligned
	// its first barrier is snapshotted at once, and the checkpoint completes when every channel delivered
	// it or ended (Action.Complete). An at-least-once Aligner ignores it.
	Unaligned bool
}

// String returns "#ID".
func (c Checkpoint) String() string { return fmt.Sprintf("#%d", c.ID) }

// AbortReason says why the aligner abandoned a checkpoint.
type AbortReason uint8

const (
	// AbortCancelMarker: a cancel marker for the checkpoint arrived on a channel.
	AbortCancelMarker AbortReason = iota + 1
	// AbortSubsumed: a barrier or cancel marker of a newer checkpoint arrived before the alignment ended.
	AbortSubsumed
	// AbortJobMaster: the job master aborted the checkpoint (OnAbort).
	AbortJobMaster
	// AbortChannelReset: the producer behind a channel was restarted (OnChannelReset).
	AbortChannelReset
)

// String names the reason ("cancel marker").
func (r AbortReason) String() string {
	switch r {
	case AbortCancelMarker:
		return "cancel marker"
	case AbortSubsumed:
		return "subsumed"
	case AbortJobMaster:
		return "job master"
	case AbortChannelReset:
		return "channel reset"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Abort abandons a checkpoint at this task.
type Abort struct {
	ID     int64
	Reason AbortReason
}

// String returns "abort #ID (reason)".
func (a Abort) String() string { return fmt.Sprintf("abort #%d (%s)", a.ID, a.Reason) }

// Action is what the caller must do after an event, field by field in the order of the fields (see the
// package documentation).
type Action struct {
	// Aborts are the checkpoints to abandon, oldest first (at most two): forward a cancel marker for each.
	Aborts []Abort
	// Snapshot, if set, is the checkpoint to snapshot now; then forward its barrier downstream. For an
	// unaligned one (Snapshot.Unaligned) also begin to store, as its channel state, what every channel
	// that has not delivered its barrier (Received) and has not ended delivers until it does.
	Snapshot *Checkpoint
	// Complete, if set, is the unaligned checkpoint whose channel state is complete: every channel
	// delivered its barrier or ended. Write the checkpoint.
	Complete *Checkpoint
	// UnblockAll says to resume reading every channel that has not ended.
	UnblockAll bool
	// Block lists channels to stop reading, in addition to those already blocked (exactly-once only).
	Block []int
	// Dropped says the event was ignored: it was stale, a duplicate, on an ended channel, or a barrier of a
	// checkpoint the job master aborted. The other fields are then empty.
	Dropped bool
}

// String lists the action's parts in the order they are to be carried out ("abort #3 (subsumed), block [1]"),
// or returns "nothing".
func (a Action) String() string {
	var parts []string
	for _, ab := range a.Aborts {
		parts = append(parts, ab.String())
	}
	if a.Snapshot != nil {
		if a.Snapshot.Unaligned {
			parts = append(parts, "snapshot "+a.Snapshot.String()+" unaligned")
		} else {
			parts = append(parts, "snapshot "+a.Snapshot.String())
		}
	}
	if a.Complete != nil {
		parts = append(parts, "complete "+a.Complete.String())
	}
	if a.UnblockAll {
		parts = append(parts, "unblock all")
	}
	if len(a.Block) > 0 {
		parts = append(parts, fmt.Sprintf("block %v", a.Block))
	}
	if a.Dropped {
		parts = append(parts, "dropped")
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// Aligner aligns the checkpoint barriers of a task's input channels. Create it with New; see the package
// documentation for how to drive it.
type Aligner struct {
	mode     Mode
	ended    []bool
	numEnded int

	// The pending checkpoint, if any. cur.Unaligned says it is unaligned (marked so, or switched by
	// OnAlignmentTimeout): it was snapshotted at its first barrier and waits for the others to complete.
	pending    bool
	cur        Checkpoint
	received   []bool // channels that delivered cur's barrier
	numAligned int    // channels that delivered cur's barrier or ended
	blocked    []bool // exactly-once: the received channels that have not ended
	numBlocked int

	// done is the highest id completed, abandoned or skipped here: events for ids up to it are dropped.
	done          int64
	lastCompleted int64
	// aborted holds ids above done and cur.ID that the job master aborted, ascending, at most MaxAbortedIDs.
	aborted []int64
}

// New returns an aligner for a task with numChannels input channels (at least one) in the given mode.
func New(numChannels int, mode Mode) *Aligner {
	if numChannels < 1 {
		panic(fmt.Sprintf("barrier: %d input channels, want at least 1", numChannels))
	}
	if !mode.Valid() {
		panic(fmt.Sprintf("barrier: unknown %s", mode))
	}
	if mode == Unaligned {
		mode = ExactlyOnce // which barriers are unaligned, they say themselves
	}
	return &Aligner{
		mode:     mode,
		ended:    make([]bool, numChannels),
		received: make([]bool, numChannels),
		blocked:  make([]bool, numChannels),
	}
}

// OnBarrier handles the barrier of checkpoint b read from channel ch.
func (a *Aligner) OnBarrier(ch int, b Checkpoint) Action {
	a.checkChannel(ch)
	if a.ended[ch] || a.stale(b.ID) || (a.pending && b.ID == a.cur.ID && a.received[ch]) {
		return Action{Dropped: true}
	}
	var act Action
	if a.pending && b.ID == a.cur.ID {
		a.arrive(ch, &act)
		return act
	}
	// b is newer than anything seen here.
	a.abandonPending(AbortSubsumed, &act)
	if a.forgetAborted(b.ID) {
		a.done = b.ID
		act.Dropped = len(act.Aborts) == 0
		return act
	}
	if a.mode != ExactlyOnce {
		b.Unaligned = false
	}
	a.pending, a.cur = true, b
	a.numAligned = a.numEnded
	if b.Unaligned {
		cp := a.cur
		act.Snapshot = &cp
		a.lastCompleted = cp.ID
	}
	a.arrive(ch, &act)
	return act
}

// OnAlignmentTimeout switches the pending checkpoint id, if it is aligned and still aligning, to
// unaligned (Flink's aligned checkpoint timeout): its snapshot is taken now, every blocked channel is
// unblocked (what they deliver from now on comes after their barrier), and the channels that have not
// delivered the barrier are stored as its channel state until they do.
func (a *Aligner) OnAlignmentTimeout(id int64) Action {
	if !a.pending || a.cur.ID != id || a.cur.Unaligned || a.mode != ExactlyOnce {
		return Action{Dropped: true}
	}
	a.cur.Unaligned = true
	cp := a.cur
	a.lastCompleted = cp.ID
	act := Action{Snapshot: &cp}
	if a.numBlocked > 0 {
		clear(a.blocked)
		a.numBlocked = 0
		act.UnblockAll = true
	}
	return act
}

// OnCancelMarker handles a cancel marker for checkpoint id read from channel ch.
func (a *Aligner) OnCancelMarker(ch int, id int64) Action {
	a.checkChannel(ch)
	if a.ended[ch] || a.stale(id) {
		return Action{Dropped: true}
	}
	var act Action
	if a.pending && id == a.cur.ID {
		a.abandonPending(AbortCancelMarker, &act)
		return act
	}
	a.abandonPending(AbortSubsumed, &act)
	a.done = id
	a.forgetAborted(id)
	act.Aborts = append(act.Aborts, Abort{ID: id, Reason: AbortCancelMarker})
	return act
}

// OnEndOfPartition handles the end of partition read from channel ch: the channel counts as aligned for the
// pending and all later checkpoints.
func (a *Aligner) OnEndOfPartition(ch int) Action {
	a.checkChannel(ch)
	if a.ended[ch] {
		return Action{Dropped: true}
	}
	a.ended[ch] = true
	a.numEnded++
	if a.blocked[ch] { // read although blocked; nothing follows an end of partition anyway
		a.blocked[ch] = false
		a.numBlocked--
	}
	var act Action
	if a.pending && !a.received[ch] {
		a.numAligned++
		if a.numAligned == len(a.received) {
			a.complete(&act)
		}
	}
	return act
}

// OnAbort handles the job master's abort of checkpoint id.
func (a *Aligner) OnAbort(id int64) Action {
	if a.stale(id) {
		return Action{Dropped: true}
	}
	var act Action
	if a.pending && id == a.cur.ID {
		a.abandonPending(AbortJobMaster, &act)
		return act
	}
	a.rememberAborted(id)
	return act
}

// OnAbortUpTo handles the job master's word that every checkpoint up to and including id is finished for
// this task: completed or aborted. A restarted task calls it first with the highest id triggered before it
// was deployed, so that it does not align barriers of checkpoints its restarted neighbours will never send.
// A pending checkpoint among them is abandoned (AbortJobMaster); events for the others are dropped.
func (a *Aligner) OnAbortUpTo(id int64) Action {
	if a.stale(id) {
		return Action{Dropped: true}
	}
	var act Action
	a.abandonPending(AbortJobMaster, &act)
	a.done = id
	a.forgetAborted(id)
	return act
}

// OnChannelReset handles a restart of the producer behind channel ch: the pending barrier will not come on
// ch, so the pending checkpoint is abandoned. A channel that had ended is live again.
func (a *Aligner) OnChannelReset(ch int) Action {
	a.checkChannel(ch)
	var act Action
	a.abandonPending(AbortChannelReset, &act)
	if a.ended[ch] {
		a.ended[ch] = false
		a.numEnded--
	}
	return act
}

// Mode returns the aligner's mode.
func (a *Aligner) Mode() Mode { return a.mode }

// NumChannels returns the number of input channels.
func (a *Aligner) NumChannels() int { return len(a.ended) }

// Blocked reports whether channel ch must not be read.
func (a *Aligner) Blocked(ch int) bool {
	a.checkChannel(ch)
	return a.blocked[ch]
}

// Ended reports whether channel ch delivered its end of partition.
func (a *Aligner) Ended(ch int) bool {
	a.checkChannel(ch)
	return a.ended[ch]
}

// Received reports whether channel ch delivered the pending checkpoint's barrier.
func (a *Aligner) Received(ch int) bool {
	a.checkChannel(ch)
	return a.pending && a.received[ch]
}

// Pending returns the id of the checkpoint being aligned, if any.
func (a *Aligner) Pending() (id int64, ok bool) {
	if !a.pending {
		return 0, false
	}
	return a.cur.ID, true
}

// LastCompleted returns the id of the last checkpoint snapshotted here, 0 if none.
func (a *Aligner) LastCompleted() int64 { return a.lastCompleted }

// String describes the state: "exactly-once, 3 channels, aligning #5 (received [0 2], blocked [0]),
// ended [2], completed #4, done #4, aborted ahead [7]"; empty parts are left out.
func (a *Aligner) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %d channel", a.mode, len(a.ended))
	if len(a.ended) != 1 {
		b.WriteString("s")
	}
	if a.pending {
		kind := "aligning"
		if a.cur.Unaligned {
			kind = "storing channel state of"
		}
		fmt.Fprintf(&b, ", %s %s (received %v", kind, a.cur, indexes(a.received))
		if a.numBlocked > 0 {
			fmt.Fprintf(&b, ", blocked %v", indexes(a.blocked))
		}
		b.WriteString(")")
	} else {
		b.WriteString(", idle")
	}
	if a.numEnded > 0 {
		fmt.Fprintf(&b, ", ended %v", indexes(a.ended))
	}
	if a.lastCompleted > 0 {
		fmt.Fprintf(&b, ", completed #%d", a.lastCompleted)
	}
	if a.done > a.lastCompleted {
		fmt.Fprintf(&b, ", done #%d", a.done)
	}
	if len(a.aborted) > 0 {
		fmt.Fprintf(&b, ", aborted ahead %v", a.aborted)
	}
	return b.String()
}

func indexes(set []bool) []int {
	var out []int
	for i, in := range set {
		if in {
			out = append(out, i)
		}
	}
	return out
}

func (a *Aligner) checkChannel(ch int) {
	if ch < 0 || ch >= len(a.ended) {
		panic(fmt.Sprintf("barrier: channel %d out of range [0, %d)", ch, len(a.ended)))
	}
}

// stale reports whether events for id are to be dropped: ids up to done and ids older than the pending one.
func (a *Aligner) stale(id int64) bool {
	return id <= a.done || (a.pending && id < a.cur.ID)
}

// arrive records that ch, live, delivered the pending barrier.
func (a *Aligner) arrive(ch int, act *Action) {
	a.received[ch] = true
	a.numAligned++
	if a.numAligned == len(a.received) {
		a.complete(act)
		return
	}
	if a.mode == ExactlyOnce && !a.cur.Unaligned {
		a.blocked[ch] = true
		a.numBlocked++
		act.Block = append(act.Block, ch)
	}
}

func (a *Aligner) complete(act *Action) {
	cp := a.cur
	if cp.Unaligned {
		// Snapshotted at its first barrier, or when it switched to unaligned.
		act.Complete = &cp
	} else {
		act.Snapshot = &cp
	}
	a.lastCompleted, a.done = cp.ID, cp.ID
	a.endAlignment(act)
}

func (a *Aligner) abandonPending(reason AbortReason, act *Action) {
	if !a.pending {
		return
	}
	act.Aborts = append(act.Aborts, Abort{ID: a.cur.ID, Reason: reason})
	a.done = a.cur.ID
	a.endAlignment(act)
}

func (a *Aligner) endAlignment(act *Action) {
	a.pending = false
	clear(a.received)
	a.numAligned = 0
	if a.numBlocked > 0 {
		clear(a.blocked)
		a.numBlocked = 0
		act.UnblockAll = true
	}
}

// rememberAborted adds id, newer than anything seen here, to the ids the job master aborted.
func (a *Aligner) rememberAborted(id int64) {
	i, found := slices.BinarySearch(a.aborted, id)
	if found {
		return
	}
	a.aborted = slices.Insert(a.aborted, i, id)
	if len(a.aborted) > MaxAbortedIDs {
		a.aborted = slices.Delete(a.aborted, 0, 1)
	}
}

// forgetAborted drops the remembered ids up to id, which an event for id made stale, and reports whether id
// itself was among them.
func (a *Aligner) forgetAborted(id int64) bool {
	i, found := slices.BinarySearch(a.aborted, id)
	if found {
		i++
	}
	a.aborted = slices.Delete(a.aborted, 0, i)
	return found
}

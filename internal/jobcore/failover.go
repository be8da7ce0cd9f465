package jobcore

import (
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
)

// Failover is one failover event: which subtask failed, what was restarted, from which checkpoint.
type Failover struct {
	Failed ident.Subtask
	// Global marks a failover of the job as a whole (Failed is then meaningless): checkpoints that kept
	// failing past the tolerable number.
	Global bool
	// FailedSubtasks lists every subtask that failed in this event when there were several (a TaskManager
	// lost with all its tasks); Failed is then the lowest of them. Empty for a single failure.
	FailedSubtasks []ident.Subtask
	// TaskManager names the TaskManager whose loss caused the event ("" for a task's own failure).
	TaskManager string
	// FailedOn names the TaskManager the failed subtask ran on ("" when not known, or for the job).
	FailedOn string
	Cause    error
	Strategy string
	// Fallback, under task failover, says why this failover restarted by region instead ("": it did not).
	Fallback           string
	Restarted          []ident.Subtask
	CheckpointRestored *int64
	FailedAt           time.Time
	// RecoveredAt is when every restarted subtask was running again (zero until then).
	RecoveredAt time.Time
	// OutputAt is when the last of the restarted tail subtasks (those with no restarted consumer) emitted
	// its first record again: the end of the outage of the affected path.
	OutputAt time.Time
	// RecordsLost counts the records that affect no state: on each channel from a producer that kept
	// running to a restarted consumer, those after the consumer's restored position and before the first
	// record it received. RecordsDropped and BuffersDropped are the producers' view of the same loss (whole
	// buffers dropped while no consumer was attached); PartialRecordsSkipped counts records whose start was
	// dropped and whose rest the new consumer skipped.
	RecordsLost, RecordsDropped, BuffersDropped, PartialRecordsSkipped uint64
	// Channels breaks the loss down by channel (only channels that lost something).
	Channels []ChannelLoss
	// RecordsReplayed counts, under task failover, the records the restarted subtask read again from its
	// producers' in-flight logs; DuplicatesDropped those its consumers dropped because the restarted
	// subtask regenerated them. Replay breaks both down by channel (only channels with any).
	RecordsReplayed, DuplicatesDropped uint64
	Replay                             []ChannelReplay

	// What the event keeps only until its restarted attempts have rejoined and emitted (see settle): the
	// subtasks not yet running again, the restarted tails not yet emitting, and the producers' counters of
	// the channels into restarted consumers when the event began.
	awaiting map[ident.Subtask]bool
	tails    map[ident.Subtask]bool
	baseline map[Channel]lossBaseline
}

// ChannelLoss is the loss of one channel in one failover: from a producer subtask to a restarted consumer.
type ChannelLoss struct {
	Producer, Consumer                                                 ident.Subtask
	RecordsLost, RecordsDropped, BuffersDropped, PartialRecordsSkipped uint64
}

// ChannelReplay is what task failover did on one channel in one failover: into the restarted subtask, the
// records it replayed; out of it, the records its consumer dropped as duplicates.
type ChannelReplay struct {
	Producer, Consumer                 ident.Subtask
	RecordsReplayed, DuplicatesDropped uint64
}

// AddReplay counts what task failover did on one channel, in one entry per channel.
func (f *Failover) AddReplay(r ChannelReplay) {
	if r.RecordsReplayed+r.DuplicatesDropped == 0 {
		return
	}
	f.RecordsReplayed += r.RecordsReplayed
	f.DuplicatesDropped += r.DuplicatesDropped
	for i := range f.Replay {
		if c := &f.Replay[i]; c.Producer == r.Producer && c.Consumer == r.Consumer {
			c.RecordsReplayed += r.RecordsReplayed
			c.DuplicatesDropped += r.DuplicatesDropped
			return
		}
	}
	f.Replay = append(f.Replay, r)
}

// Channel names one subpartition of one result partition: the channel from one producer attempt to one
// consumer subtask.
type Channel struct {
	Partition    ident.PartitionID
	Subpartition int
}

// SubpartitionCounters are what a producer dropped on one subpartition while no consumer was attached:
// the producer's side of approximate recovery's loss.
type SubpartitionCounters struct {
	RecordsDropped, BuffersDropped uint64
}

// lossBaseline is a producer's subpartition counters when a failover began, and the restarted consumer of
// that subpartition.
type lossBaseline struct {
	counters SubpartitionCounters
	consumer ident.Subtask
}

// NewFailover starts the record of a failover event at time at: failed is the subtask that failed (nil: the
// job as a whole), restarted what the failover strategy restarts.
func NewFailover(failed *ident.Subtask, cause error, strategy string, restarted []ident.Subtask, at time.Time) *Failover {
	ev := &Failover{Cause: cause, Strategy: strategy, Restarted: restarted, FailedAt: at, Global: failed == nil,
		awaiting: make(map[ident.Subtask]bool), tails: make(map[ident.Subtask]bool), baseline: make(map[Channel]lossBaseline)}
	if failed != nil {
		ev.Failed = *failed
	}
	return ev
}

// MarkTail notes that restarted subtask s has no restarted consumer: its first output again ends the outage.
func (f *Failover) MarkTail(s ident.Subtask) {
	if f.tails == nil {
		f.tails = make(map[ident.Subtask]bool)
	}
	f.tails[s] = true
}

// SetBaseline records the counters of channel ch, from a producer that keeps running to the restarted
// consumer, when the failover began: what the producer drops from here on is this failover's loss.
func (f *Failover) SetBaseline(ch Channel, consumer ident.Subtask, c SubpartitionCounters) {
	if f.baseline == nil {
		f.baseline = make(map[Channel]lossBaseline)
	}
	f.baseline[ch] = lossBaseline{counters: c, consumer: consumer}
}

// TakeBaseline returns the counters SetBaseline recorded for ch and forgets them, so that each channel is
// counted once.
func (f *Failover) TakeBaseline(ch Channel) (SubpartitionCounters, bool) {
	b, ok := f.baseline[ch]
	if ok {
		delete(f.baseline, ch)
	}
	return b.counters, ok
}

// Await notes that the failover is recovered only once s runs again.
func (f *Failover) Await(s ident.Subtask) {
	if f.awaiting == nil {
		f.awaiting = make(map[ident.Subtask]bool)
	}
	f.awaiting[s] = true
}

// Running notes that s runs again at time at; the last awaited subtask to do so recovers the failover.
func (f *Failover) Running(s ident.Subtask, at time.Time) {
	if !f.awaiting[s] {
		return
	}
	delete(f.awaiting, s)
	if len(f.awaiting) == 0 && f.RecoveredAt.IsZero() {
		f.RecoveredAt = at
	}
}

// FirstOutput notes that restarted subtask s emitted its first record at time at; the outage of the path
// ends with the last tail to do so.
func (f *Failover) FirstOutput(s ident.Subtask, at time.Time) {
	if !f.tails[s] {
		return
	}
	delete(f.tails, s)
	if at.After(f.OutputAt) {
		f.OutputAt = at
	}
}

// Report returns a copy of the event without its bookkeeping, for snapshots: nothing in it is shared with
// the event, which goes on changing.
func (f *Failover) Report() Failover {
	c := *f
	c.awaiting, c.tails, c.baseline = nil, nil, nil
	c.Channels = append([]ChannelLoss(nil), f.Channels...)
	c.Replay = append([]ChannelReplay(nil), f.Replay...)
	c.Restarted = append([]ident.Subtask(nil), f.Restarted...)
	c.FailedSubtasks = append([]ident.Subtask(nil), f.FailedSubtasks...)
	if f.CheckpointRestored != nil {
		id := *f.CheckpointRestored
		c.CheckpointRestored = &id
	}
	return c
}

// Add counts one channel's loss in the failover.
func (f *Failover) Add(cl ChannelLoss) {
	f.RecordsLost += cl.RecordsLost
	f.PartialRecordsSkipped += cl.PartialRecordsSkipped
	f.RecordsDropped += cl.RecordsDropped
	f.BuffersDropped += cl.BuffersDropped
	if cl.RecordsLost+cl.RecordsDropped+cl.BuffersDropped+cl.PartialRecordsSkipped > 0 {
		f.Channels = append(f.Channels, cl)
	}
}

// retract takes a channel's loss, counted by Add, out of the failover again: a later failover rolled the
// consumer back and counts that loss itself. The channel's entry goes when nothing is left of it.
func (f *Failover) retract(cl ChannelLoss) {
	f.RecordsLost -= cl.RecordsLost
	f.PartialRecordsSkipped -= cl.PartialRecordsSkipped
	f.RecordsDropped -= cl.RecordsDropped
	f.BuffersDropped -= cl.BuffersDropped
	for i := range f.Channels {
		c := &f.Channels[i]
		if c.Producer != cl.Producer || c.Consumer != cl.Consumer || c.RecordsLost < cl.RecordsLost ||
			c.PartialRecordsSkipped < cl.PartialRecordsSkipped || c.RecordsDropped < cl.RecordsDropped || c.BuffersDropped < cl.BuffersDropped {
			continue
		}
		c.RecordsLost -= cl.RecordsLost
		c.PartialRecordsSkipped -= cl.PartialRecordsSkipped
		c.RecordsDropped -= cl.RecordsDropped
		c.BuffersDropped -= cl.BuffersDropped
		if c.RecordsLost+c.RecordsDropped+c.BuffersDropped+c.PartialRecordsSkipped == 0 {
			f.Channels = append(f.Channels[:i], f.Channels[i+1:]...)
		}
		return
	}
}

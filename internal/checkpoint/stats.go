package checkpoint

import "slices"

// MaxStatsHistory bounds the checkpoints whose statistics a coordinator keeps (Flink's web UI keeps ten by
// default, web.checkpoints.history): past it the oldest is dropped for each new trigger.
const MaxStatsHistory = 64

// StatsStatus is where a checkpoint of the statistics history is.
type StatsStatus uint8

// The statuses of a checkpoint in the statistics history.
const (
	StatsInProgress StatsStatus = iota + 1
	StatsCompleted
	StatsFailed  // aborted for a reason that is a failure (AbortReason.Failure)
	StatsAborted // aborted for any other reason
)

var statsNames = [...]string{StatsInProgress: "IN_PROGRESS", StatsCompleted: "COMPLETED", StatsFailed: "FAILED", StatsAborted: "ABORTED"}

// String names the status as the REST API does ("COMPLETED").
func (s StatsStatus) String() string {
	if int(s) < len(statsNames) && statsNames[s] != "" {
		return statsNames[s]
	}
	return "UNKNOWN"
}

// AckStats are what a subtask measured of its part in a checkpoint.
type AckStats struct {
	// AlignmentNanos is how long the subtask's input was held aligning the checkpoint's barriers: from the
	// first barrier on any input to the last (0 for a source or a subtask of one input).
	AlignmentNanos int64
	// ChannelStateBytes is the size of the records in flight an unaligned checkpoint stored for the
	// subtask (its input and output channel state), part of the state it wrote.
	ChannelStateBytes int64
}

// CheckpointStats are the statistics of one checkpoint: when it was triggered and ended (milliseconds of
// the coordinator's clock; EndMillis 0 while in progress), how many subtasks acknowledged it of those
// expected, the bytes of the state they wrote (StateBytes: every blob and inline state the checkpoint
// refers to; NewBytes: those that the newest completed checkpoint before it did not refer to, which an
// incremental checkpoint writes afresh; ChannelStateBytes: the records in flight an unaligned checkpoint
// stored, part of StateBytes), the longest alignment of a subtask, and why it failed or was aborted.
type CheckpointStats struct {
	ID                       int64
	Status                   StatsStatus
	TriggerMillis, EndMillis int64
	Acknowledged, Expected   int
	StateBytes, NewBytes     int64
	ChannelStateBytes        int64
	MaxAlignmentNanos        int64
	Reason                   string
}

// History returns the statistics of the last MaxStatsHistory checkpoints, oldest first, in a slice of the
// caller's own.
func (c *Coordinator) History() []CheckpointStats { return slices.Clone(c.stats) }

// statsOf returns the statistics of checkpoint id, or nil when they are no longer kept.
func (c *Coordinator) statsOf(id int64) *CheckpointStats {
	for i := len(c.stats) - 1; i >= 0; i-- {
		if c.stats[i].ID == id {
			return &c.stats[i]
		}
	}
	return nil
}

// statsTriggered starts p's statistics.
func (c *Coordinator) statsTriggered(p *pending) {
	if len(c.stats) == MaxStatsHistory {
		c.stats = slices.Delete(c.stats, 0, 1)
	}
	c.stats = append(c.stats, CheckpointStats{ID: p.id, Status: StatsInProgress, TriggerMillis: p.triggerMillis,
		Acknowledged: len(p.acks), Expected: len(p.waiting) + len(p.acks)})
}

// statsAcked adds an acknowledgement of p.
func (c *Coordinator) statsAcked(p *pending, h StateHandle, s AckStats) {
	st := c.statsOf(p.id)
	if st == nil {
		return
	}
	st.Acknowledged++
	st.StateBytes += handleBytes(h)
	st.MaxAlignmentNanos = max(st.MaxAlignmentNanos, s.AlignmentNanos)
	st.ChannelStateBytes += s.ChannelStateBytes
}

// statsCompleted ends cp's statistics as completed at now; before is the newest checkpoint completed before
// it (nil: none), whose blobs cp did not write again.
func (c *Coordinator) statsCompleted(now int64, cp, before *CompletedCheckpoint) {
	st := c.statsOf(cp.ID)
	if st == nil {
		return
	}
	st.Status, st.EndMillis = StatsCompleted, now
	old := map[string]bool{}
	if before != nil {
		for _, h := range before.States {
			for _, b := range h.Blobs {
				old[b.Key] = true
			}
		}
	}
	st.NewBytes = 0
	for _, h := range cp.States {
		st.NewBytes += int64(len(h.Inline))
		for _, b := range h.Blobs {
			if !old[b.Key] {
				st.NewBytes += b.Size
			}
		}
	}
}

// statsAborted ends the statistics of checkpoint id as failed or aborted at now.
func (c *Coordinator) statsAborted(now, id int64, reason AbortReason, err error) {
	st := c.statsOf(id)
	if st == nil {
		return
	}
	st.Status, st.EndMillis = StatsAborted, now
	if reason.Failure() {
		st.Status = StatsFailed
	}
	st.Reason = reason.String()
	if err != nil {
		st.Reason = err.Error()
	}
}

// handleBytes is the state a handle refers to: its blobs and its inline state.
func handleBytes(h StateHandle) int64 {
	n := int64(len(h.Inline))
	for _, b := range h.Blobs {
		n += b.Size
	}
	return n
}

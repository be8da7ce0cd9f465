package jobcore

import "github.com/runnel-dev/runnel/internal/ident"

// MaxFailoverHistory bounds the failover events a job master keeps in detail (Flink bounds its exception
// history the same way). Past it the oldest settled events are folded into the totals of FailoverTotals,
// so a long job that fails over now and then keeps a flat memory while its report stays exact in sum.
const MaxFailoverHistory = 1000

// FailoverTotals sums every failover of the job, those still listed and those folded away.
type FailoverTotals struct {
	// Failovers counts them all; Omitted those no longer listed in detail.
	Failovers, Omitted                                                 int
	RecordsLost, RecordsDropped, BuffersDropped, PartialRecordsSkipped uint64
	// RecordsReplayed and DuplicatesDropped sum what task failover replayed and dropped (Failover).
	RecordsReplayed, DuplicatesDropped uint64
	// Edges breaks the loss down by edge of the job graph (producer vertex to consumer vertex), in order of
	// first loss: bounded by the number of edges.
	Edges []EdgeLoss
}

// EdgeLoss is the loss on the channels of one edge, over all failovers.
type EdgeLoss struct {
	Producer, Consumer                                                 ident.VertexID
	RecordsLost, RecordsDropped, BuffersDropped, PartialRecordsSkipped uint64
}

// addChannel adds one channel's loss to the totals.
func (t *FailoverTotals) addChannel(c ChannelLoss) {
	t.RecordsLost += c.RecordsLost
	t.RecordsDropped += c.RecordsDropped
	t.BuffersDropped += c.BuffersDropped
	t.PartialRecordsSkipped += c.PartialRecordsSkipped
	for i := range t.Edges {
		e := &t.Edges[i]
		if e.Producer == c.Producer.Vertex && e.Consumer == c.Consumer.Vertex {
			e.RecordsLost += c.RecordsLost
			e.RecordsDropped += c.RecordsDropped
			e.BuffersDropped += c.BuffersDropped
			e.PartialRecordsSkipped += c.PartialRecordsSkipped
			return
		}
	}
	t.Edges = append(t.Edges, EdgeLoss{Producer: c.Producer.Vertex, Consumer: c.Consumer.Vertex, RecordsLost: c.RecordsLost,
		RecordsDropped: c.RecordsDropped, BuffersDropped: c.BuffersDropped, PartialRecordsSkipped: c.PartialRecordsSkipped})
}

// CurrentAttempt is what the history needs to know of a subtask's current attempt to settle a failover.
type CurrentAttempt struct {
	Attempt ident.Attempt
	// CreatedBy is the failover that deployed the attempt (nil: a first attempt).
	CreatedBy *Failover
	// Terminal says the attempt ended.
	Terminal bool
}

// Current returns the current attempt of subtask s (false: not a subtask of the job).
type Current func(s ident.Subtask) (CurrentAttempt, bool)

// History is the failover events of a job, oldest first, and the totals of those folded away past
// MaxFailoverHistory.
type History struct {
	events []*Failover
	// folded sums the failover events dropped from events past MaxFailoverHistory.
	folded FailoverTotals
}

// Add appends a new failover event.
func (h *History) Add(ev *Failover) { h.events = append(h.events, ev) }

// Events returns the events listed in detail, oldest first. The slice is the history's own: read it only.
func (h *History) Events() []*Failover { return h.events }

// settle drops what the failover keeps only until its restarted attempts have rejoined and emitted: the
// baselines of channels that no attempt it deployed can join any more (the producer or the consumer was
// replaced since, or the consumer ended), and its waiting sets once empty. A settled failover holds its
// report only.
func settle(ev *Failover, current Current) {
	for key, b := range ev.baseline {
		pex, pok := current(key.Partition.Producer.Subtask)
		cex, cok := current(b.consumer)
		if !pok || pex.Attempt != key.Partition.Producer || !cok || cex.CreatedBy != ev || cex.Terminal {
			delete(ev.baseline, key)
		}
	}
	for s := range ev.tails {
		if ex, ok := current(s); !ok || ex.CreatedBy != ev || ex.Terminal {
			delete(ev.tails, s)
		}
	}
	if len(ev.awaiting) == 0 {
		ev.awaiting = nil
	}
	if len(ev.tails) == 0 {
		ev.tails = nil
	}
	if len(ev.baseline) == 0 {
		ev.baseline = nil
	}
}

// settled reports whether a failover holds nothing but its report.
func (f *Failover) settled() bool {
	return f.awaiting == nil && f.tails == nil && f.baseline == nil
}

// Trim settles the failover events and folds the oldest settled ones past MaxFailoverHistory into the
// totals. An event the loss ledger still refers to is kept: a later restore may take counts out of it. The
// caller must not trim while a restart plan holds events not yet deployed: their attempts do not exist yet,
// so settling would drop what they are still to report.
func (h *History) Trim(current Current, ledger *LossLedger) {
	for _, ev := range h.events {
		if !ev.settled() {
			settle(ev, current)
		}
	}
	excess := len(h.events) - MaxFailoverHistory
	if excess <= 0 {
		return
	}
	referenced := ledger.events()
	kept := h.events[:0]
	for _, ev := range h.events {
		if excess > 0 && ev.settled() && !referenced[ev] {
			excess--
			h.folded.Omitted++
			h.folded.RecordsReplayed += ev.RecordsReplayed
			h.folded.DuplicatesDropped += ev.DuplicatesDropped
			for _, c := range ev.Channels {
				h.folded.addChannel(c)
			}
			continue
		}
		kept = append(kept, ev)
	}
	clear(h.events[len(kept):])
	h.events = kept
}

// Totals sums every failover of the job: the folded ones and those listed.
func (h *History) Totals() FailoverTotals {
	t := FailoverTotals{Omitted: h.folded.Omitted, Failovers: h.folded.Omitted + len(h.events),
		Edges:           append([]EdgeLoss(nil), h.folded.Edges...),
		RecordsReplayed: h.folded.RecordsReplayed, DuplicatesDropped: h.folded.DuplicatesDropped}
	// The channels hold all of a failover's loss.
	for _, e := range t.Edges {
		t.RecordsLost += e.RecordsLost
		t.RecordsDropped += e.RecordsDropped
		t.BuffersDropped += e.BuffersDropped
		t.PartialRecordsSkipped += e.PartialRecordsSkipped
	}
	for _, ev := range h.events {
		t.RecordsReplayed += ev.RecordsReplayed
		t.DuplicatesDropped += ev.DuplicatesDropped
		for _, c := range ev.Channels {
			t.addChannel(c)
		}
	}
	return t
}

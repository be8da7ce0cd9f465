package jobmaster

import (
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
)

// MaxFailoverHistory bounds the failover events a job master keeps in detail (Flink bounds its exception
// history the same way). Past it the oldest settled events are folded into the totals of FailoverTotals,
// so a long job that fails over now and then keeps a flat memory while its report stays exact in sum.
const MaxFailoverHistory = 1000

// FailoverTotals sums every failover of the job, those still listed and those folded away.
type FailoverTotals struct {
	// Failovers counts them all; Omitted those no longer listed in detail.
	Failovers, Omitted                                                 int
	RecordsLost, RecordsDropped, BuffersDropped, PartialRecordsSkipped uint64
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

// lossBaseline is a producer's subpartition counters when a failover began, and the restarted consumer of
// that subpartition.
type lossBaseline struct {
	stats    network.SubpartitionStats
	consumer ident.Subtask
}

// settle drops what the failover keeps only until its restarted attempts have rejoined and emitted: the
// baselines of channels that no attempt it deployed can join any more (the producer or the consumer was
// replaced since, or the consumer ended), and its waiting sets once empty. A settled failover holds its
// report only. Called with the job master's lock held.
func (jm *JobMaster) settle(ev *Failover) {
	for key, b := range ev.baseline {
		pex, cex := jm.execs[key.p.Producer.Subtask], jm.execs[b.consumer]
		if pex == nil || pex.attempt != key.p.Producer || cex == nil || cex.createdBy != ev || cex.state.Terminal() {
			delete(ev.baseline, key)
		}
	}
	for s := range ev.tails {
		if ex := jm.execs[s]; ex == nil || ex.createdBy != ev || ex.state.Terminal() {
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
func (ev *Failover) settled() bool {
	return ev.awaiting == nil && ev.tails == nil && ev.baseline == nil
}

// trimFailovers settles the failover events and folds the oldest settled ones past MaxFailoverHistory into
// the totals. An event the loss ledger still refers to is kept: a later restore may take counts out of it.
// Called with the job master's lock held.
func (jm *JobMaster) trimFailovers() {
	if jm.plan != nil {
		return // events of the plan are not deployed yet
	}
	for _, ev := range jm.failovers {
		if !ev.settled() {
			jm.settle(ev)
		}
	}
	excess := len(jm.failovers) - MaxFailoverHistory
	if excess <= 0 {
		return
	}
	referenced := jm.ledger.events()
	kept := jm.failovers[:0]
	for _, ev := range jm.failovers {
		if excess > 0 && ev.settled() && !referenced[ev] {
			excess--
			jm.folded.Omitted++
			for _, c := range ev.Channels {
				jm.folded.addChannel(c)
			}
			continue
		}
		kept = append(kept, ev)
	}
	clear(jm.failovers[len(kept):])
	jm.failovers = kept
}

// totals sums every failover of the job: the folded ones and those listed. Called with the lock held.
func (jm *JobMaster) totals() FailoverTotals {
	t := FailoverTotals{Omitted: jm.folded.Omitted, Failovers: jm.folded.Omitted + len(jm.failovers),
		RecordsLost: jm.folded.RecordsLost, RecordsDropped: jm.folded.RecordsDropped,
		BuffersDropped: jm.folded.BuffersDropped, PartialRecordsSkipped: jm.folded.PartialRecordsSkipped,
		Edges: append([]EdgeLoss(nil), jm.folded.Edges...)}
	// The channels hold all of a failover's loss.
	t.RecordsLost, t.RecordsDropped, t.BuffersDropped, t.PartialRecordsSkipped = 0, 0, 0, 0
	for _, e := range t.Edges {
		t.RecordsLost += e.RecordsLost
		t.RecordsDropped += e.RecordsDropped
		t.BuffersDropped += e.BuffersDropped
		t.PartialRecordsSkipped += e.PartialRecordsSkipped
	}
	for _, ev := range jm.failovers {
		for _, c := range ev.Channels {
			t.addChannel(c)
		}
	}
	return t
}

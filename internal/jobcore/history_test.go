package jobcore

import (
	"testing"

	"github.com/runnel-dev/runnel/internal/ident"
)

// currentOf answers History.Trim from a fixed table of current attempts.
func currentOf(m map[ident.Subtask]*CurrentAttempt) Current {
	return func(s ident.Subtask) (CurrentAttempt, bool) {
		a, ok := m[s]
		if !ok {
			return CurrentAttempt{}, false
		}
		return *a, true
	}
}

// TestFailoverHistoryIsBounded folds the oldest settled failovers past MaxFailoverHistory into the totals,
// keeps one that the loss ledger still refers to, and loses no record of loss in the sum.
func TestFailoverHistoryIsBounded(t *testing.T) {
	prod := ident.Subtask{Vertex: 1}
	cons := ident.Subtask{Vertex: 2}
	current := currentOf(map[ident.Subtask]*CurrentAttempt{
		prod: {Attempt: ident.Attempt{Subtask: prod}},
		cons: {Attempt: ident.Attempt{Subtask: cons, Number: 7}},
	})
	var h History
	var ledger LossLedger
	const n = MaxFailoverHistory + 50
	var want uint64
	for i := range n {
		ev := &Failover{awaiting: map[ident.Subtask]bool{}, tails: map[ident.Subtask]bool{cons: true},
			baseline: map[Channel]lossBaseline{{Partition: ident.PartitionID{Producer: ident.Attempt{Subtask: prod}}}: {consumer: cons}}}
		ev.Add(ChannelLoss{Producer: prod, Consumer: cons, RecordsLost: uint64(i + 1), BuffersDropped: 1})
		want += uint64(i + 1)
		h.Add(ev)
	}
	// The oldest event is still referred to by the ledger: a restore may take its count out again.
	ledger.Join(ident.Attempt{Subtask: cons, Number: 1}, 3, h.Events()[0], h.Events()[0].Channels[0])
	h.Trim(current, &ledger)
	if got := len(h.Events()); got != MaxFailoverHistory {
		t.Fatalf("%d failovers kept, want %d", got, MaxFailoverHistory)
	}
	if h.Events()[0].Channels[0].RecordsLost != 1 {
		t.Fatal("the failover the ledger refers to was folded")
	}
	for _, ev := range h.Events() {
		if !ev.settled() {
			t.Fatalf("a failover whose consumer was replaced keeps its waiting state: %+v", ev)
		}
	}
	tot := h.Totals()
	if tot.Failovers != n || tot.Omitted != n-MaxFailoverHistory || tot.RecordsLost != want || tot.BuffersDropped != n ||
		len(tot.Edges) != 1 || tot.Edges[0].RecordsLost != want {
		t.Fatalf("totals %+v, want %d failovers and %d records lost", tot, n, want)
	}
	// A restore that rolls the consumer back takes the referred count out; the totals follow.
	ledger.RollBack(cons, nil)
	if tot := h.Totals(); tot.RecordsLost != want-1 {
		t.Fatalf("after the roll-back the totals say %d lost, want %d", tot.RecordsLost, want-1)
	}
}

// TestSettleKeepsWhatCanStillArrive keeps the baseline of a channel whose restarted consumer, deployed by
// the failover, may still join it, and the tail that may still emit.
func TestSettleKeepsWhatCanStillArrive(t *testing.T) {
	prod := ident.Subtask{Vertex: 1}
	cons := ident.Subtask{Vertex: 2}
	ev := &Failover{awaiting: map[ident.Subtask]bool{}, tails: map[ident.Subtask]bool{cons: true},
		baseline: map[Channel]lossBaseline{{Partition: ident.PartitionID{Producer: ident.Attempt{Subtask: prod}}}: {consumer: cons}}}
	table := map[ident.Subtask]*CurrentAttempt{
		prod: {Attempt: ident.Attempt{Subtask: prod}},
		cons: {Attempt: ident.Attempt{Subtask: cons, Number: 1}, CreatedBy: ev},
	}
	settle(ev, currentOf(table))
	if len(ev.baseline) != 1 || len(ev.tails) != 1 || ev.settled() {
		t.Fatalf("settled too early: %+v", ev)
	}
	table[prod].Attempt.Number++ // the producer was replaced: its old channel is never joined
	table[cons].Terminal = true
	settle(ev, currentOf(table))
	if !ev.settled() {
		t.Fatalf("not settled: %+v", ev)
	}
}

package jobmaster

import (
	"testing"

	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/task"
)

// TestFailoverHistoryIsBounded folds the oldest settled failovers past MaxFailoverHistory into the totals,
// keeps one that the loss ledger still refers to, and loses no record of loss in the sum.
func TestFailoverHistoryIsBounded(t *testing.T) {
	prod := ident.Subtask{Vertex: 1}
	cons := ident.Subtask{Vertex: 2}
	jm := &JobMaster{execs: map[ident.Subtask]*execution{
		prod: {attempt: ident.Attempt{Subtask: prod}, state: task.Running},
		cons: {attempt: ident.Attempt{Subtask: cons, Number: 7}, state: task.Running},
	}}
	const n = MaxFailoverHistory + 50
	var want uint64
	for i := range n {
		ev := &Failover{awaiting: map[ident.Subtask]bool{}, tails: map[ident.Subtask]bool{cons: true},
			baseline: map[channelKey]lossBaseline{{p: ident.PartitionID{Producer: ident.Attempt{Subtask: prod}}}: {consumer: cons}}}
		ev.add(ChannelLoss{Producer: prod, Consumer: cons, RecordsLost: uint64(i + 1), BuffersDropped: 1})
		want += uint64(i + 1)
		jm.failovers = append(jm.failovers, ev)
	}
	// The oldest event is still referred to by the ledger: a restore may take its count out again.
	jm.ledger.join(ident.Attempt{Subtask: cons, Number: 1}, 3, jm.failovers[0], jm.failovers[0].Channels[0])
	jm.trimFailovers()
	if got := len(jm.failovers); got != MaxFailoverHistory {
		t.Fatalf("%d failovers kept, want %d", got, MaxFailoverHistory)
	}
	if jm.failovers[0].Channels[0].RecordsLost != 1 {
		t.Fatal("the failover the ledger refers to was folded")
	}
	for _, ev := range jm.failovers {
		if !ev.settled() {
			t.Fatalf("a failover whose consumer was replaced keeps its waiting state: %+v", ev)
		}
	}
	tot := jm.totals()
	if tot.Failovers != n || tot.Omitted != n-MaxFailoverHistory || tot.RecordsLost != want || tot.BuffersDropped != n ||
		len(tot.Edges) != 1 || tot.Edges[0].RecordsLost != want {
		t.Fatalf("totals %+v, want %d failovers and %d records lost", tot, n, want)
	}
	// A restore that rolls the consumer back takes the referred count out; the totals follow.
	jm.ledger.rollBack(cons, nil)
	if tot := jm.totals(); tot.RecordsLost != want-1 {
		t.Fatalf("after the roll-back the totals say %d lost, want %d", tot.RecordsLost, want-1)
	}
}

// TestSettleKeepsWhatCanStillArrive keeps the baseline of a channel whose restarted consumer, deployed by
// the failover, may still join it, and the tail that may still emit.
func TestSettleKeepsWhatCanStillArrive(t *testing.T) {
	prod := ident.Subtask{Vertex: 1}
	cons := ident.Subtask{Vertex: 2}
	ev := &Failover{awaiting: map[ident.Subtask]bool{}, tails: map[ident.Subtask]bool{cons: true},
		baseline: map[channelKey]lossBaseline{{p: ident.PartitionID{Producer: ident.Attempt{Subtask: prod}}}: {consumer: cons}}}
	jm := &JobMaster{execs: map[ident.Subtask]*execution{
		prod: {attempt: ident.Attempt{Subtask: prod}, state: task.Running},
		cons: {attempt: ident.Attempt{Subtask: cons, Number: 1}, state: task.Running, createdBy: ev},
	}}
	jm.settle(ev)
	if len(ev.baseline) != 1 || len(ev.tails) != 1 || ev.settled() {
		t.Fatalf("settled too early: %+v", ev)
	}
	jm.execs[prod].attempt.Number++ // the producer was replaced: its old channel is never joined
	jm.execs[cons].state = task.Canceled
	jm.settle(ev)
	if !ev.settled() {
		t.Fatalf("not settled: %+v", ev)
	}
}

package jobcore

import (
	"testing"

	"github.com/runnel-dev/runnel/internal/ident"
)

// TestLossLedger replays overlapping failovers of one consumer and checks what each failover reports in
// the end: a restore that rolls an attempt back takes that attempt's counts out of the failover that
// reported them, since the later failover counts the loss since the restored checkpoint afresh.
func TestLossLedger(t *testing.T) {
	consumer := ident.Subtask{Vertex: 2, Index: 1}
	p0 := ident.Subtask{Vertex: 1, Index: 0}
	p1 := ident.Subtask{Vertex: 1, Index: 1}
	cp := func(id int64) *int64 { return &id }
	type step struct {
		// restart: the consumer restarts into attempt, deployed by event ev after skipUpTo was triggered,
		// restoring restored; then it joins its channels with the given losses.
		attempt  int32
		ev       int
		skipUpTo int64
		restored *int64
		joins    []ChannelLoss
	}
	loss := func(p ident.Subtask, lost uint64) ChannelLoss {
		return ChannelLoss{Producer: p, Consumer: consumer, RecordsLost: lost}
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  []uint64 // records lost per event at the end
	}{
		{"one failover counts its gap", []step{{1, 0, 5, cp(4), []ChannelLoss{loss(p0, 100)}}}, []uint64{100}},
		{"a second restart from the same checkpoint re-counts the whole gap", []step{
			{1, 0, 5, cp(4), []ChannelLoss{loss(p0, 100), loss(p1, 7)}},
			{2, 1, 5, cp(4), []ChannelLoss{loss(p0, 180)}}, // p1 was restarted too: its records replay or count upstream
		}, []uint64{0, 180}},
		{"three restarts from one checkpoint", []step{
			{1, 0, 5, cp(4), []ChannelLoss{loss(p0, 100)}},
			{2, 1, 5, cp(4), []ChannelLoss{loss(p0, 180)}},
			{3, 2, 6, cp(4), []ChannelLoss{loss(p0, 250)}},
		}, []uint64{0, 0, 250}},
		{"a checkpoint between the restarts holds the first attempt's gap", []step{
			{1, 0, 5, cp(4), []ChannelLoss{loss(p0, 100)}},
			{2, 1, 7, cp(7), []ChannelLoss{loss(p0, 30)}}, // checkpoint 7 was taken by attempt 1 (7 > 5)
		}, []uint64{100, 30}},
		{"no checkpoint rolls everything back", []step{
			{1, 0, 0, nil, []ChannelLoss{loss(p0, 100)}},
			{2, 1, 0, nil, []ChannelLoss{loss(p0, 150)}},
		}, []uint64{0, 150}},
		{"a fallback to an older checkpoint rolls back what a newer one held", []step{
			{1, 0, 5, cp(4), []ChannelLoss{loss(p0, 100)}},
			{2, 1, 8, cp(7), []ChannelLoss{loss(p0, 30)}},
			{3, 2, 9, cp(3), []ChannelLoss{loss(p0, 400)}},
		}, []uint64{0, 0, 400}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l LossLedger
			evs := make([]*Failover, len(tc.want))
			for i := range evs {
				evs[i] = &Failover{}
			}
			for _, st := range tc.steps {
				l.RollBack(consumer, st.restored)
				for _, j := range st.joins {
					evs[st.ev].Add(j)
					l.Join(ident.Attempt{Subtask: consumer, Number: st.attempt}, st.skipUpTo, evs[st.ev], j)
				}
			}
			for i, ev := range evs {
				var channels uint64
				for _, c := range ev.Channels {
					channels += c.RecordsLost
				}
				if ev.RecordsLost != tc.want[i] || channels != tc.want[i] {
					t.Fatalf("event %d reports %d lost (%d over its channels %+v), want %d", i, ev.RecordsLost, channels, ev.Channels, tc.want[i])
				}
			}
		})
	}
}

func TestLossLedgerPrune(t *testing.T) {
	consumer := ident.Subtask{Vertex: 2, Index: 0}
	ev := &Failover{}
	var l LossLedger
	cl := ChannelLoss{Producer: ident.Subtask{Vertex: 1}, Consumer: consumer, RecordsLost: 10}
	l.Join(ident.Attempt{Subtask: consumer, Number: 1}, 3, ev, cl)
	l.Join(ident.Attempt{Subtask: consumer, Number: 2}, 9, ev, cl)
	l.Join(ident.Attempt{Subtask: consumer, Number: 2}, 9, ev, ChannelLoss{Producer: ident.Subtask{Vertex: 1}, Consumer: consumer})
	if l.size() != 2 {
		t.Fatalf("%d entries, want 2 (a join without loss has nothing to take back)", l.size())
	}
	l.Prune(0)
	if l.size() != 2 {
		t.Fatalf("prune without a floor dropped entries: %d left", l.size())
	}
	l.Prune(5) // every restorable checkpoint is above 5: attempt 1's count is final
	if l.size() != 1 {
		t.Fatalf("%d entries after pruning below 5, want 1", l.size())
	}
	l.Prune(10)
	if l.size() != 0 {
		t.Fatalf("%d entries left", l.size())
	}
}

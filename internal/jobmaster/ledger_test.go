package jobmaster

import (
	"testing"

	"github.com/runnel-dev/runnel/internal/ident"
)

func TestLossLedger(t *testing.T) {
	consumer := ident.Subtask{Vertex: 2, Index: 1}
	producer := ident.Attempt{Subtask: ident.Subtask{Vertex: 1, Index: 0}}
	ch := channelKey{p: ident.PartitionID{Result: 1, Producer: producer}, sub: 1}
	other := channelKey{p: ident.PartitionID{Result: 1, Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: 1, Index: 1}}}, sub: 1}
	cp := func(id int64) *int64 { return &id }
	type join struct {
		attempt  int32
		ch       channelKey
		restored *int64
		skipUpTo int64
		gap      uint64
		want     uint64
		wantOK   bool
	}
	for _, tc := range []struct {
		name  string
		joins []join
	}{
		{"one failover counts its gap", []join{{1, ch, cp(4), 5, 100, 100, true}}},
		{"a second restart from the same checkpoint counts only what is new", []join{
			{1, ch, cp(4), 5, 100, 100, true}, // gap [r, r+100)
			{2, ch, cp(4), 5, 180, 80, true},  // gap [r, r+180) covers the first: 80 more
			{3, ch, cp(4), 6, 250, 70, true},  // rolls back both: 250 - 180
		}},
		{"a checkpoint between the restarts holds the first attempt's count", []join{
			{1, ch, cp(4), 5, 100, 100, true},
			{2, ch, cp(7), 7, 30, 30, true}, // checkpoint 7 was taken by attempt 1 (7 > 5): nothing rolled back
		}},
		{"no checkpoint rolls back everything", []join{
			{1, ch, nil, 0, 100, 100, true},
			{2, ch, nil, 0, 150, 50, true},
		}},
		{"channels are counted apart", []join{
			{1, ch, cp(4), 5, 100, 100, true},
			{2, other, cp(4), 5, 40, 40, true},
		}},
		{"a restore that goes back past a committed count cannot go negative", []join{
			{1, ch, cp(4), 5, 100, 100, true},
			{2, ch, cp(4), 5, 150, 50, true},
			{3, ch, cp(3), 8, 120, 0, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l lossLedger
			var sum uint64
			for i, j := range tc.joins {
				got, ok := l.join(ident.Attempt{Subtask: consumer, Number: j.attempt}, j.ch, j.restored, j.skipUpTo, j.gap)
				if got != j.want || ok != j.wantOK {
					t.Fatalf("join %d: counted %d (ok %v), want %d (ok %v)", i, got, ok, j.want, j.wantOK)
				}
				sum += got
			}
			if last := tc.joins[len(tc.joins)-1]; last.wantOK && last.ch == ch && last.restored != nil && *last.restored == 4 && sum != last.gap {
				t.Fatalf("counts sum to %d, want the surviving gap %d", sum, last.gap)
			}
		})
	}
}

func TestLossLedgerPrune(t *testing.T) {
	consumer := ident.Subtask{Vertex: 2, Index: 0}
	p0 := ident.Attempt{Subtask: ident.Subtask{Vertex: 1, Index: 0}}
	p1 := ident.Attempt{Subtask: ident.Subtask{Vertex: 1, Index: 0}, Number: 1}
	ch0 := channelKey{p: ident.PartitionID{Result: 1, Producer: p0}}
	ch1 := channelKey{p: ident.PartitionID{Result: 1, Producer: p1}}
	var l lossLedger
	id := int64(3)
	l.join(ident.Attempt{Subtask: consumer, Number: 1}, ch0, &id, 3, 10)
	l.join(ident.Attempt{Subtask: consumer, Number: 2}, ch0, &id, 9, 10)
	l.join(ident.Attempt{Subtask: consumer, Number: 2}, ch1, &id, 9, 10)
	current := func(a ident.Attempt) bool { return a == p1 || a == p0 }
	l.prune(0, current)
	if l.size() != 3 {
		t.Fatalf("prune without a floor dropped entries: %d left", l.size())
	}
	l.prune(5, current) // every restorable checkpoint is above 5: attempt 1's count is final
	if l.size() != 2 {
		t.Fatalf("%d entries after pruning below 5, want 2", l.size())
	}
	l.prune(5, func(a ident.Attempt) bool { return a == p1 }) // producer attempt 0 was replaced
	if l.size() != 1 {
		t.Fatalf("%d entries after the producer was replaced, want 1", l.size())
	}
	l.prune(10, current)
	if l.size() != 0 {
		t.Fatalf("%d entries left", l.size())
	}
}

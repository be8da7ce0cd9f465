package network

import (
	"testing"
)

// TestUnalignedBarrierOvertakesTheQueue: a producer writes 60 records (spanning the 96-byte buffers) into a
// logged subpartition whose reader takes nothing; an unaligned checkpoint's barrier then overtakes what the
// queue holds. The reader gets the barrier after the records it had taken (over TCP, those its credit had
// let through) and before the overtaken ones, which still follow, and then the rest: every record once, in
// order. The copies the barrier returns are the overtaken buffers: they begin where the reader's records
// before the barrier end, and the next record is 60. A reader from the start of the log gets the barrier at
// the same place; one restored from the checkpoint reads on from the first overtaken buffer, without the
// barrier. A second barrier, later, overtakes the same buffers and those written since, and stands right
// after the first for every reader. A partition restored from the copies hands them on first and numbers
// on from 60 — locally and over TCP.
func TestUnalignedBarrierOvertakesTheQueue(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		const bufSize, before, after = 96, 60, 40
		budget, err := NewLogBudget(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := env.partition(21, bufSize, 64, PartitionOptions{Reconnectable: true, Log: budget})
		live := consumer(t, env, p, 1, 0)
		for i := range before {
			if err := p.EmitRecord(0, patterned(i, 8+i%50)); err != nil {
				t.Fatal(err)
			}
		}
		states, err := p.OvertakeWithBarrier(Event{Type: EventBarrier, CheckpointID: 1})
		if err != nil {
			t.Fatal(err)
		}
		st := states[0]
		if st.NextSeq != before || len(st.Buffers) == 0 {
			t.Fatalf("output state: next record %d, %d buffers; want %d and some", st.NextSeq, len(st.Buffers), before)
		}
		first, err := DecodeHeader(st.Buffers[0])
		if err != nil {
			t.Fatal(err)
		}
		for i := before; i < before+after; i++ {
			if err := p.EmitRecord(0, patterned(i, 8+i%50)); err != nil {
				t.Fatal(err)
			}
		}
		// A second barrier goes after the first, ahead of the same buffers and those since.
		if _, err := p.OvertakeWithBarrier(Event{Type: EventBarrier, CheckpointID: 2}); err != nil {
			t.Fatal(err)
		}
		if err := p.Finish(); err != nil {
			t.Fatal(err)
		}
		got := live.read(t, 1<<30)
		if len(got.records) != before+after || got.barriers != "12" || got.barrierAt[0] != got.barrierAt[1] {
			t.Fatalf("live reader: %d records, barriers %q at %v", len(got.records), got.barriers, got.barrierAt)
		}
		at := got.barrierAt[0]
		// The overtaken buffers begin at the reader's next record, or with the rest of the record it was
		// in the middle of.
		want := uint64(at)
		if first.Continuation > 0 {
			want++
		}
		if first.FirstSeq != want {
			t.Fatalf("the barrier came after %d records, the overtaken buffers start at record %d (continuation %d)", at, first.FirstSeq, first.Continuation)
		}
		if at >= before {
			t.Fatalf("the barrier overtook nothing: it came after %d records", at)
		}
		live.ch.Release()

		fromStart := consumer(t, env, p, 2, 0)
		if got := fromStart.read(t, 1<<30); len(got.records) != before+after || got.barriers != "12" || got.barrierAt[0] != at || got.barrierAt[1] != at {
			t.Fatalf("reader from the start: %d records, barriers %q at %v; want the barrier after %d", len(got.records), got.barriers, got.barrierAt, at)
		}
		fromStart.ch.Release()
		restored := consumer(t, env, p, 3, 1)
		restored.dec.SkipTo(uint64(at))
		// Without the first part of a record cut by the barrier (a restored consumer has it in its input
		// channel state) the reader starts at the next whole record.
		// Barrier 2 stood right after barrier 1: it comes first.
		if got := restored.read(t, 1<<30); got.barriers != "2" || got.barrierAt[0] != 0 || len(got.records) != before+after-int(want) || got.records[0] != want {
			t.Fatalf("reader restored from checkpoint 1: %d records from %v, barriers %q at %v; want %d from %d, barrier 2 first", len(got.records), got.records[:1], got.barriers, got.barrierAt, before+after-int(want), want)
		}
		restored.ch.Release()
		// One restored from checkpoint 2 reads the same, without either barrier: both came before.
		restored2 := consumer(t, env, p, 4, 2)
		restored2.dec.SkipTo(uint64(at))
		if got := restored2.read(t, 1<<30); got.barriers != "" || len(got.records) != before+after-int(want) || got.records[0] != want {
			t.Fatalf("reader restored from checkpoint 2: %d records from %v, barriers %q; want %d from %d", len(got.records), got.records[:1], got.barriers, before+after-int(want), want)
		}
		restored2.ch.Release()

		// A producer restored from the checkpoint: the overtaken buffers first, then new records from 60.
		q, _ := env.partition(22, bufSize, 64, PartitionOptions{})
		if err := q.RestoreOutput(0, st); err != nil {
			t.Fatal(err)
		}
		for i := before; i < before+after; i++ {
			if err := q.EmitRecord(0, patterned(i, 8+i%50)); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Finish(); err != nil {
			t.Fatal(err)
		}
		c := consumer(t, env, q, 1, 0)
		c.dec.SkipTo(uint64(at))
		if got := c.read(t, 1<<30); len(got.records) != before+after-int(want) || got.records[0] != want || !got.ended {
			t.Fatalf("restored partition: %d records from %v; want %d from %d", len(got.records), got.records[:1], before+after-int(want), want)
		}
	})
}

package network

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
)

// TestLoggedPartitionReplaysFromABarrier: a consumer of a partition with an in-flight log goes away in the
// middle; the producer, with a pool of four buffers, writes the rest without waiting for anyone; a newer
// attempt of the consumer reads again from the barrier of checkpoint 2, and gets every record from there
// on, in order and whole, with the barriers after it and the end of the partition — locally and over TCP.
// Once checkpoint 4 completed (TruncateLog), a reader from checkpoint 2 is refused, saying why, and one from
// 4 reads; releasing the partition gives the budget back.
func TestLoggedPartitionReplaysFromABarrier(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		const bufSize, records, every = 96, 3000, 500
		budget, err := NewLogBudget(16 << 20)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := env.partition(9, bufSize, 4, PartitionOptions{Reconnectable: true, Log: budget})
		var produced sync.WaitGroup
		produced.Add(1)
		firstDone := make(chan struct{})
		go func() {
			defer produced.Done()
			for i := range records {
				if i > 0 && i%every == 0 {
					if err := p.BroadcastEvent(Event{Type: EventBarrier, CheckpointID: int64(i / every)}); err != nil {
						t.Errorf("barrier: %v", err)
						return
					}
				}
				if i == 1500 {
					<-firstDone // the first reader goes away here, in the middle of the stream
				}
				if err := p.EmitRecord(0, patterned(i, 8+i%(2*bufSize))); err != nil {
					t.Errorf("emit: %v", err)
					return
				}
			}
			if err := p.Finish(); err != nil {
				t.Errorf("finish: %v", err)
			}
		}()
		first := consumer(t, env, p, 1, 0)
		if got := first.read(t, 1200); got.records[0] != 0 {
			t.Fatalf("the first reader started at record %d", got.records[0])
		}
		first.ch.Release()
		close(firstDone)
		produced.Wait() // nobody reads: a producer that waited on the log's reader would hang here
		// What the first reader's queue held when it went is in the log: nothing was dropped.
		if st := p.Stats(); st.BuffersDropped+st.RecordsDropped != 0 {
			t.Fatalf("a logged partition reports %d buffers (%d records) dropped", st.BuffersDropped, st.RecordsDropped)
		}

		check := func(attempt int32, from int64, firstRecord int, barriers string) {
			t.Helper()
			c := consumer(t, env, p, attempt, from)
			got := c.read(t, 1<<30)
			if !got.ended || len(got.records) != records-firstRecord || got.records[0] != uint64(firstRecord) || got.barriers != barriers {
				t.Fatalf("attempt %d from checkpoint %d: %d records from %d, barriers %q, ended %v; want %d from %d, barriers %q",
					attempt, from, len(got.records), got.records[0], got.barriers, got.ended, records-firstRecord, firstRecord, barriers)
			}
			c.ch.Release()
		}
		check(2, 2, 1000, "345")
		p.TruncateLog(4)
		if _, err := env.openFrom(p.ID(), 0, attemptOf(3), 2, bufSize, func() {}, 2); !errors.Is(err, ErrLogIncomplete) || !strings.Contains(err.Error(), "checkpoint 2") {
			t.Fatalf("a reader from a truncated barrier: %v", err)
		}
		check(4, 4, 2000, "5")
		if p.LogBytes() == 0 || budget.Used() == 0 {
			t.Fatalf("the log holds %d bytes, the budget lent %d", p.LogBytes(), budget.Used())
		}
		env.pm.Release(p.ID())
		if budget.Used() != 0 {
			t.Fatalf("%d bytes still lent after the partition was released", budget.Used())
		}
	})
}

func attemptOf(n int32) (a ident.Attempt) {
	a = testConsumer
	a.Number = n
	return a
}

// loggedConsumer is one consumer attempt's channel and what it read.
type loggedConsumer struct {
	ch   InputChannel
	wake chan struct{}
	dec  *RecordDecoder
}

type readResult struct {
	records  []uint64
	barriers string
	// barrierAt is, per barrier in barriers, how many records the reader had decoded before it.
	barrierAt []int
	ended     bool
}

func consumer(t *testing.T, env *testEnv, p *ResultPartition, attempt int32, from int64) *loggedConsumer {
	t.Helper()
	c := &loggedConsumer{wake: make(chan struct{}, 1), dec: NewRecordDecoder(1 << 20)}
	ch, err := env.openFrom(p.ID(), 0, attemptOf(attempt), 2, 96, func() {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}, from)
	if err != nil {
		t.Fatalf("attempt %d from checkpoint %d: %v", attempt, from, err)
	}
	c.ch = ch
	return c
}

// read reads until n records or the end of the partition.
func (c *loggedConsumer) read(t *testing.T, n int) readResult {
	t.Helper()
	var r readResult
	deadline := time.After(10 * time.Second)
	for len(r.records) < n && !r.ended {
		b, err := c.ch.Poll()
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		if b == nil {
			select {
			case <-c.wake:
			case <-deadline:
				t.Fatalf("no data for 10 s after %d records", len(r.records))
			}
			continue
		}
		if b.Kind == KindEvent {
			e, err := DecodeEvent(b.Payload())
			if err != nil {
				t.Fatal(err)
			}
			switch e.Type {
			case EventEndOfPartition:
				r.ended = true
			case EventBarrier:
				r.barriers += string(rune('0' + e.CheckpointID))
				r.barrierAt = append(r.barrierAt, len(r.records))
			default:
				t.Fatalf("unexpected %s event after %d records", e.Type, len(r.records))
			}
			c.ch.Recycle(b)
			continue
		}
		if _, err := c.dec.SetBuffer(b); err != nil {
			t.Fatal(err)
		}
		for {
			rec, err := c.dec.Next()
			if err != nil {
				t.Fatal(err)
			}
			if rec == nil {
				break
			}
			seq := c.dec.NextSeq() - 1
			if err := checkPatterned(rec, seq); err != nil {
				t.Fatal(err)
			}
			if k := len(r.records); k > 0 && r.records[k-1]+1 != seq {
				t.Fatalf("record %d after %d", seq, r.records[k-1])
			}
			r.records = append(r.records, seq)
		}
		c.ch.Recycle(b)
	}
	return r
}

// TestTakeoverRegeneratesExactlyOnce: a producer writes records with barriers 1 to 3 into a logged
// partition and fails after record 1799 (its last partial buffer never sealed, the last one it sealed cut
// inside a record: records span the 96-byte buffers); its consumer had read to record 1600, with more of the
// failed attempt's buffers still to read. A new attempt takes the partition over from checkpoint 3 (record
// 1500) and writes records 1500 to 2999 again; the partition drops those the stream has and writes the rest
// of the cut record as its continuation, so that the consumer, which is told of nothing, gets every record
// 0 to 2999 exactly once, in order, its decoder dropping none — locally and over TCP. A takeover from a
// barrier the log lacks, or of a partition without a log, is refused.
//
// Both kinds of reader are covered: one still reading the log (it started there and never caught up), and
// one that caught up and reads live (the failed attempt's buffers it has not read are in its queue).
func TestTakeoverRegeneratesExactlyOnce(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(map[bool]string{false: "reader in the log", true: "live reader"}[live], func(t *testing.T) {
			testTakeover(t, live)
		})
	}
}

func testTakeover(t *testing.T, live bool) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		const bufSize = 96
		budget, _ := NewLogBudget(16 << 20)
		p, _ := env.partition(11, bufSize, 1<<13, PartitionOptions{Reconnectable: true, Log: budget})
		write := func(from, to int) { writeTakeoverRecords(t, p, from, to) }
		var c *loggedConsumer
		var early []uint64
		if live {
			c = consumer(t, env, p, 1, 0)
			write(0, 1200)
			p.Flush(0)
			early = c.read(t, 1200).records
			deadline := time.Now().Add(5 * time.Second)
			for !readsLive(p) && time.Now().Before(deadline) {
				if b, err := c.ch.Poll(); err != nil || b != nil {
					t.Fatalf("poll after the first 1200 records: %v, %v", b, err)
				}
				time.Sleep(time.Millisecond)
			}
			if !readsLive(p) {
				t.Fatal("the reader never caught up with the log")
			}
			write(1200, 1800)
		} else {
			// A first reader that goes at once (a first reader reads the queue, see
			// TestLoggedPartitionBeforeItsFirstReader); the next attempt's, attached late, starts at the
			// log's start, far behind.
			consumer(t, env, p, 1, 0).ch.Release()
			write(0, 1800)
			c = consumer(t, env, p, 2, 0)
		}
		p.Close() // the failed attempt's cleanup: its partial buffer is dropped, unsent
		first := c.read(t, 1600-len(early))
		first.records = append(early, first.records...)
		if !live && readsLive(p) {
			t.Fatal("a reader that never caught up reads live")
		}
		if !live && first.barriers != "123" {
			t.Fatalf("before the takeover: barriers %q", first.barriers)
		}
		if err := p.Takeover(NewBufferPool("new attempt", bufSize, 1<<13), nil, 9); !errors.Is(err, ErrLogIncomplete) {
			t.Fatalf("takeover from a checkpoint without a barrier: %v", err)
		}
		if err := p.Takeover(NewBufferPool("new attempt", bufSize, 1<<13), nil, 3); err != nil {
			t.Fatal(err)
		}
		if got := p.NextSequence(0); got != 1500 {
			t.Fatalf("after the takeover the next record is %d, want 1500", got)
		}
		write(1500, 3000)
		if err := p.Finish(); err != nil {
			t.Fatal(err)
		}
		rest := c.read(t, 1<<30)
		all := append(first.records, rest.records...)
		if !rest.ended || len(all) != 3000 {
			t.Fatalf("after the takeover: %d records in all, ended %v", len(all), rest.ended)
		}
		for i, s := range all {
			if s != uint64(i) {
				t.Fatalf("record %d arrived as %d", i, s)
			}
		}
		if c.dec.DuplicatesDropped != 0 || p.Discarded(0) < 200 {
			t.Fatalf("the consumer dropped %d, the partition %d: the partition drops what the stream has (about 1500 to 1700)", c.dec.DuplicatesDropped, p.Discarded(0))
		}
		if p.Regenerating() {
			t.Fatal("still regenerating after the records past the stream's end")
		}
		plain, _ := env.partition(12, bufSize, 8, PartitionOptions{Reconnectable: true})
		if err := plain.Takeover(NewBufferPool("x", bufSize, 8), nil, 0); err == nil {
			t.Fatal("a partition without a log was taken over")
		}
	})
}

// writeTakeoverRecords writes records from to to (patterned, of 96-byte buffers' sizes) into p's
// subpartition 0, flushing every 100: the failed attempt's (from 0) with barriers 1 to 3 before records
// 500, 1000 and 1500, the new attempt's (from 1500 on) without, since it restored checkpoint 3.
func writeTakeoverRecords(t *testing.T, p *ResultPartition, from, to int) {
	t.Helper()
	const bufSize, every = 96, 500
	for i := from; i < to; i++ {
		if i > 0 && i%every == 0 && i < 1800 && from < 1500 {
			if err := p.BroadcastEvent(Event{Type: EventBarrier, CheckpointID: int64(i / every)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EmitRecord(0, patterned(i, 8+i%(2*bufSize))); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			p.Flush(0)
		}
	}
}

// readsLive reports whether p's reader of subpartition 0 has caught up with the log.
func readsLive(p *ResultPartition) bool {
	s := p.subs[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view != nil && s.view.replay == nil
}

// TestLoggedReaderAtTheEndHearsOfMore: a reader that read the whole log while its credit ran out stays a
// reader of the log (it never polled past the end); when the producer then writes more, which goes into
// the log only, the reader must be told, or it waits for ever (found by task failover's sequence runs,
// where the producer had finished and the restarted consumer waited on a buffer it was never told of).
func TestLoggedReaderAtTheEndHearsOfMore(t *testing.T) {
	budget, _ := NewLogBudget(8 << 20)
	pool := NewBufferPool("producer", 96, 64)
	p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, MaxRecordSize: 1 << 10, Reconnectable: true, Log: budget}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := p.EmitRecord(0, patterned(i, 20)); err != nil {
			t.Fatal(err)
		}
		p.Flush(0)
	}
	woken := make(chan struct{}, 16)
	v, err := p.CreateViewFrom(0, testConsumer, 3, func() { woken <- struct{}{} }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []*Buffer
	for range 3 {
		b, err := v.Poll()
		if err != nil || b == nil {
			t.Fatalf("poll: %v, %v", b, err)
		}
		got = append(got, b)
	}
	if b, _ := v.Poll(); b != nil {
		t.Fatal("a fourth buffer without credit")
	}
	for range got {
		v.AddCredit(1)
	}
	for len(woken) > 0 {
		<-woken
	}
	if err := p.EmitRecord(0, patterned(3, 20)); err != nil {
		t.Fatal(err)
	}
	p.Flush(0)
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader was not told of the buffer written after it read the log")
	}
	if b, err := v.Poll(); err != nil || b == nil || b.FirstSeq != 3 {
		t.Fatalf("the new buffer: %v, %v", b, err)
	}
}

// TestLoggedPartitionBeforeItsFirstReader: a logged subpartition whose reader has not come yet queues what
// its producer writes, as any subpartition does, so that a log past its budget (which drops what it holds)
// loses nothing its first reader needs: with a budget of one chunk and twice that written before the reader
// connects, the reader gets every record, in order, and the end. The log is incomplete, so a later reader
// from its start is refused (the fallback's case). Without the queue the first reader was refused too
// ("no barrier of checkpoint 0"), or started past what was dropped.
func TestLoggedPartitionBeforeItsFirstReader(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		const bufSize, size = 96, 1000
		records := 2 * logChunkSize / size
		budget, err := NewLogBudget(logChunkSize)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := env.partition(11, bufSize, 4*logChunkSize/bufSize, PartitionOptions{Reconnectable: true, Log: budget}) // room for all
		for i := range records {
			if err := p.EmitRecord(0, patterned(i, size)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Finish(); err != nil {
			t.Fatal(err)
		}
		if budget.Stats().Drops == 0 {
			t.Fatal("the log kept everything: the test does not overflow it")
		}
		c := consumer(t, env, p, 1, 0)
		got := c.read(t, 1<<30)
		if !got.ended || len(got.records) != records || got.records[0] != 0 {
			t.Fatalf("the first reader got %d records from %v, ended %v; want %d from 0", len(got.records), got.records[:min(1, len(got.records))], got.ended, records)
		}
		c.ch.Release()
		if _, err := env.openFrom(p.ID(), 0, attemptOf(2), 2, bufSize, func() {}, 0); !errors.Is(err, ErrLogIncomplete) {
			t.Fatalf("a second reader from the incomplete log's start: %v", err)
		}
	})
}

// TestTakeoverBeforeTheFirstReader: a producer fails and is taken over before its consumer ever
// connected; the first reader, which reads the queue (TestLoggedPartitionBeforeItsFirstReader), gets the
// failed attempt's buffers, then what the new attempt wrote past them: every record once, in order.
func TestTakeoverBeforeTheFirstReader(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		const bufSize = 96
		budget, _ := NewLogBudget(16 << 20)
		p, _ := env.partition(13, bufSize, 1<<13, PartitionOptions{Reconnectable: true, Log: budget})
		write := func(from, to int) { writeTakeoverRecords(t, p, from, to) }
		write(0, 1800)
		p.Close()
		if err := p.Takeover(NewBufferPool("new attempt", bufSize, 1<<13), nil, 3); err != nil {
			t.Fatal(err)
		}
		write(1500, 3000)
		if err := p.Finish(); err != nil {
			t.Fatal(err)
		}
		c := consumer(t, env, p, 1, 0)
		got := c.read(t, 1<<30)
		if !got.ended || len(got.records) != 3000 || got.barriers != "123" {
			t.Fatalf("%d records, barriers %q, ended %v; want 3000, \"123\", true", len(got.records), got.barriers, got.ended)
		}
		for i, s := range got.records {
			if s != uint64(i) {
				t.Fatalf("record %d arrived as %d", i, s)
			}
		}
	})
}

// TestTakeoverRegeneratesOther: a new attempt whose regenerated record at the stream's cut is shorter than
// the one the stream began, or that sends a barrier before the end of what the stream holds, fails with
// ErrRegeneratedOther instead of handing its readers a record made of two. A stream that ended with its
// end of partition takes the new attempt's records and end of partition without a second one.
func TestTakeoverRegeneratesOther(t *testing.T) {
	const bufSize = 96
	newPartition := func(t *testing.T) *ResultPartition {
		budget, _ := NewLogBudget(16 << 20)
		p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, MaxRecordSize: 1 << 10, Reconnectable: true, Log: budget}, NewBufferPool("producer", bufSize, 1<<10), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("a shorter record at the cut", func(t *testing.T) {
		p := newPartition(t)
		if err := p.EmitRecord(0, patterned(0, 200)); err != nil { // spans three 96-byte buffers, two sealed
			t.Fatal(err)
		}
		p.Close()
		if err := p.Takeover(NewBufferPool("new", bufSize, 1<<10), nil, 0); err != nil {
			t.Fatal(err)
		}
		if err := p.EmitRecord(0, patterned(0, 20)); !errors.Is(err, ErrRegeneratedOther) {
			t.Fatalf("a 20-byte record where the stream has %d bytes of one: %v", 2*(bufSize-HeaderSize), err)
		}
	})
	t.Run("a barrier before the stream's end", func(t *testing.T) {
		p := newPartition(t)
		for i := range 10 {
			if err := p.EmitRecord(0, patterned(i, 10)); err != nil {
				t.Fatal(err)
			}
		}
		p.Flush(0)
		if err := p.Takeover(NewBufferPool("new", bufSize, 1<<10), nil, 0); err != nil {
			t.Fatal(err)
		}
		if err := p.EmitRecord(0, patterned(0, 10)); err != nil {
			t.Fatal(err)
		}
		if err := p.BroadcastEvent(Event{Type: EventBarrier, CheckpointID: 4}); !errors.Is(err, ErrRegeneratedOther) {
			t.Fatalf("a barrier after record 0 of a stream of 10: %v", err)
		}
	})
	t.Run("a stream that had ended", func(t *testing.T) {
		p := newPartition(t)
		for i := range 10 {
			if err := p.EmitRecord(0, patterned(i, 10)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Finish(); err != nil {
			t.Fatal(err)
		}
		before := p.subs[0].Stats().BuffersAdded
		if err := p.Takeover(NewBufferPool("new", bufSize, 1<<10), nil, 0); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if err := p.EmitRecord(0, patterned(i, 10)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Finish(); err != nil {
			t.Fatalf("the new attempt's end of partition: %v", err)
		}
		if p.Discarded(0) != 10 || p.Regenerating() {
			t.Fatalf("discarded %d, regenerating %v; want all 10, done", p.Discarded(0), p.Regenerating())
		}
		if n := p.subs[0].Stats().BuffersAdded; n != before {
			t.Fatalf("%d buffers in the subpartition, want the failed attempt's %d (its data and end of partition) only", n, before)
		}
	})
}

// TestLoggedReaderAfterTheProducerFinished: a consumer that restored a checkpoint completed after its
// producer had finished (so no barrier of it went into the producer's log) is served the log from the
// newest barrier before it, to the end of partition: it had read the channel to its end before it took
// that checkpoint, and drops the records its state holds. While the producer has not finished, a barrier
// the log lacks is refused as ever.
func TestLoggedReaderAfterTheProducerFinished(t *testing.T) {
	budget, _ := NewLogBudget(8 << 20)
	p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, MaxRecordSize: 1 << 10, Reconnectable: true, Log: budget}, NewBufferPool("producer", 96, 64), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if i == 5 {
			if err := p.BroadcastEvent(Event{Type: EventBarrier, CheckpointID: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EmitRecord(0, patterned(i, 10)); err != nil {
			t.Fatal(err)
		}
	}
	p.Flush(0)
	if _, err := p.CreateViewFrom(0, ident.Attempt{Subtask: ident.Subtask{Vertex: 1}, Number: 1}, 8, func() {}, 3); !errors.Is(err, ErrLogIncomplete) {
		t.Fatalf("a reader from checkpoint 3 while the producer runs: %v", err)
	}
	if err := p.Finish(); err != nil {
		t.Fatal(err)
	}
	v, err := p.CreateViewFrom(0, ident.Attempt{Subtask: ident.Subtask{Vertex: 1}, Number: 2}, 64, func() {}, 3)
	if err != nil {
		t.Fatalf("a reader from checkpoint 3 after the producer finished: %v", err)
	}
	dec := NewRecordDecoder(0)
	var first, n uint64
	ended := false
	for !ended {
		b, err := v.Poll()
		if err != nil || b == nil {
			t.Fatalf("poll: %v, %v (ended %v)", b, err, ended)
		}
		if b.Kind == KindEvent {
			e, _ := DecodeEvent(b.Payload())
			ended = e.Type == EventEndOfPartition
			b.Recycle()
			continue
		}
		if _, err := dec.SetBuffer(b); err != nil {
			t.Fatal(err)
		}
		for rec, err := dec.Next(); rec != nil || err != nil; rec, err = dec.Next() {
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				first = dec.NextSeq() - 1
			}
			n++
		}
		b.Recycle()
	}
	if first != 5 || n != 15 {
		t.Fatalf("read %d records from %d, want the 15 after barrier 1 (from 5), then the end", n, first)
	}
}

// TestTakeoverWhileReadersConnect: readers connect over TCP while the producer is taken over again and
// again. A reader checks its buffers against the partition's size, which must not be read from the pool a
// takeover replaces (the race detector found that). A takeover with buffers of another size is refused.
func TestTakeoverWhileReadersConnect(t *testing.T) {
	env := newTestEnv(t, true)
	const bufSize = 96
	budget, _ := NewLogBudget(8 << 20)
	p, _ := env.partition(14, bufSize, 1<<10, PartitionOptions{Reconnectable: true, Log: budget})
	if err := p.Takeover(NewBufferPool("other", 2*bufSize, 8), nil, 0); err == nil {
		t.Fatal("a takeover with buffers of another size was taken")
	}
	done := make(chan struct{})
	var connected atomic.Int32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for attempt := int32(1); ; attempt++ {
			select {
			case <-done:
				return
			default:
			}
			ch, err := env.openFrom(p.ID(), 0, attemptOf(attempt), 2, bufSize, func() {}, 0)
			if err != nil {
				t.Errorf("reader %d: %v", attempt, err)
				return
			}
			connected.Add(1)
			ch.Release()
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); connected.Load() < 20 && time.Now().Before(deadline); {
		if err := p.Takeover(NewBufferPool("new attempt", bufSize, 8), nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}

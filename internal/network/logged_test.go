package network

import (
	"errors"
	"strings"
	"sync"
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
	ended    bool
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

package network

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
)

// A step is one thing a test producer does to a partition: emit a record of size bytes to subpartition
// sub (ev unset), or broadcast event ev to every subpartition.
type step struct {
	sub, size int
	ev        *Event
}

func rec(size int) step        { return step{size: size} }
func recTo(sub, size int) step { return step{sub: sub, size: size} }
func evt(e Event) step         { return step{ev: &e} }
func wm(ms int64) step         { return evt(WatermarkEvent(ms)) }
func barrierStep(id int64) step {
	return evt(Event{Type: EventBarrier, CheckpointID: id, TimestampMillis: 7})
}
func status(idle bool) step          { return evt(WatermarkStatusEvent(idle)) }
func stepsOf(s ...step) []step       { return s }
func flushStep() step                { return step{sub: -1} }
func isFlush(s step) bool            { return s.ev == nil && s.sub < 0 }
func recordName(seq uint64) string   { return fmt.Sprintf("r%d", seq) }
func subOwner(sub int) ident.Attempt { o := testConsumer; o.Subtask.Index = int32(sub); return o }

// traceName names an event in a trace: "wm:100", "idle", "active", "barrier:3", "eod", "eop".
func traceName(e Event) string {
	switch e.Type {
	case EventWatermark:
		return fmt.Sprintf("wm:%d", e.TimestampMillis)
	case EventWatermarkStatus:
		if e.Idle() {
			return "idle"
		}
		return "active"
	case EventBarrier:
		return fmt.Sprintf("barrier:%d", e.CheckpointID)
	case EventEndOfData:
		return "eod"
	case EventEndOfPartition:
		return "eop"
	}
	return e.Type.String()
}

// run carries out steps on p from the calling goroutine, numbering the records of each subpartition from
// seq[sub] on, and returns the trace each subpartition's reader must see and the sizes of its records.
func run(p *ResultPartition, steps []step, seq []uint64, sizes [][]int) ([][]string, error) {
	want := make([][]string, p.NumSubpartitions())
	for _, s := range steps {
		switch {
		case isFlush(s):
			p.FlushAll()
		case s.ev != nil:
			if err := p.BroadcastEvent(*s.ev); err != nil {
				return nil, err
			}
			for i := range want {
				want[i] = append(want[i], traceName(*s.ev))
			}
		default:
			if err := p.EmitRecord(s.sub, record(int(seq[s.sub]), s.size)); err != nil {
				return nil, err
			}
			want[s.sub] = append(want[s.sub], recordName(seq[s.sub]))
			sizes[s.sub] = append(sizes[s.sub], s.size)
			seq[s.sub]++
		}
	}
	return want, nil
}

// traceReader reads one channel into a trace of record and event names, checking every record's bytes.
type traceReader struct {
	t     *testing.T
	ch    InputChannel
	wake  chan struct{}
	dec   *RecordDecoder
	sizes *[]int // sizes of the records by sequence number, as the producer emitted them
	trace []string
	// eventSeqs holds the FirstSeq of every event buffer read, in order.
	eventSeqs []uint64
	ended     bool
}

func openTraceReader(t *testing.T, env *testEnv, pid ident.PartitionID, sub int, attempt int32, credits, bufSize int, sizes *[]int) *traceReader {
	t.Helper()
	r := &traceReader{t: t, wake: make(chan struct{}, 1), dec: NewRecordDecoder(1 << 20), sizes: sizes}
	owner := subOwner(sub)
	owner.Number = attempt
	ch, err := env.open(pid, sub, owner, credits, bufSize, func() {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	r.ch = ch
	return r
}

func (r *traceReader) handle(b *Buffer) error {
	defer r.ch.Recycle(b)
	if b.Kind == KindEvent {
		e, err := DecodeEvent(b.Payload())
		if err != nil {
			return err
		}
		r.trace = append(r.trace, traceName(e))
		r.eventSeqs = append(r.eventSeqs, b.FirstSeq)
		r.ended = e.Type == EventEndOfPartition
		return nil
	}
	if _, err := r.dec.SetBuffer(b); err != nil {
		return err
	}
	for {
		rec, err := r.dec.Next()
		if err != nil || rec == nil {
			return err
		}
		seq := r.dec.NextSeq() - 1
		if seq >= uint64(len(*r.sizes)) || !bytes.Equal(rec, record(int(seq), (*r.sizes)[seq])) {
			return fmt.Errorf("record %d: %d bytes that are not the ones emitted", seq, len(rec))
		}
		r.trace = append(r.trace, recordName(seq))
	}
}

// readUntil reads until the trace has n entries, or the end of partition if n < 0.
func (r *traceReader) readUntil(n int) error {
	deadline := time.NewTimer(testWait)
	defer deadline.Stop()
	for (n < 0 && !r.ended) || (n >= 0 && len(r.trace) < n) {
		b, err := r.ch.Poll()
		if err != nil {
			return err
		}
		if b != nil {
			if err := r.handle(b); err != nil {
				return err
			}
			continue
		}
		select {
		case <-r.wake:
		case <-deadline.C:
			return fmt.Errorf("timed out with trace %v", r.trace)
		}
	}
	return nil
}

// TestWatermarksInOrder sends watermarks and watermark statuses among records (whole, spanning buffers,
// filling buffers exactly) and barriers, over every transport: the reader must see every event exactly
// where the producer put it, with the partly filled buffer before it flushed, and no record lost or moved.
func TestWatermarksInOrder(t *testing.T) {
	const payload = 44 // bytes of payload per buffer
	cases := []struct {
		name  string
		nbuf  int // producer pool; small pools make the producer wait for the reader
		steps []step
	}{
		{"watermark first", 4, stepsOf(wm(1), rec(4), rec(4))},
		{"between records of one buffer", 4, stepsOf(rec(4), rec(4), wm(10), rec(4), wm(20), rec(4))},
		{"after a record spanning buffers", 4, stepsOf(rec(100), wm(5), rec(3), rec(130), wm(6))},
		{"after a record filling its buffer", 4, stepsOf(rec(payload-lengthPrefixSize), wm(5), rec(1))},
		{"consecutive events", 4, stepsOf(rec(2), wm(1), wm(2), status(true), status(false), wm(3), rec(2))},
		{"idle and active around records", 4, stepsOf(rec(9), wm(100), status(true), status(false), rec(9), wm(200))},
		{"with barriers", 4, stepsOf(rec(5), wm(10), barrierStep(1), rec(60), barrierStep(2), wm(20), rec(5), barrierStep(3))},
		{"extreme values", 4, stepsOf(wm(math.MinInt64), rec(1), wm(-1), wm(0), rec(1), wm(math.MaxInt64), evt(Event{Type: EventEndOfData}))},
		{"after an explicit flush", 4, stepsOf(rec(7), flushStep(), wm(3), flushStep(), rec(7))},
		{"many, under backpressure", 2, func() []step {
			var s []step
			for i := 0; i < 60; i++ {
				s = append(s, rec(i%50), rec(3))
				if i%3 == 0 {
					s = append(s, wm(int64(i)))
				}
				if i%11 == 0 {
					s = append(s, status(i%2 == 0), barrierStep(int64(i)))
				}
			}
			return s
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, env *testEnv) {
				p, pool := env.partition(1, HeaderSize+payload, tc.nbuf, PartitionOptions{})
				// The reader checks each record against its size, known before the producer starts.
				var sizes []int
				for _, s := range tc.steps {
					if !isFlush(s) && s.ev == nil {
						sizes = append(sizes, s.size)
					}
				}
				r := openTraceReader(t, env, p.ID(), 0, 0, tc.nbuf, HeaderSize+payload, &sizes)
				var want [][]string
				done := make(chan error, 1)
				go func() {
					var err error
					if want, err = run(p, tc.steps, make([]uint64, 1), make([][]int, 1)); err == nil {
						err = p.Finish()
					}
					done <- err
				}()
				if err := r.readUntil(-1); err != nil {
					t.Fatal(err)
				}
				wait(t, done)
				p.Close()
				if w := append(want[0], "eop"); !slices.Equal(r.trace, w) {
					t.Fatalf("trace\n got %v\nwant %v", r.trace, w)
				}
				r.ch.Release()
				env.waitIdle()
				if pool.Available() != pool.Limit() {
					t.Fatalf("producer buffers leaked: %d of %d available", pool.Available(), pool.Limit())
				}
			})
		})
	}
}

// TestBroadcastWatermark sends records to some subpartitions of a partition and watermarks and statuses to
// all of them (BroadcastWatermark, BroadcastWatermarkStatus): every subpartition's reader gets every event,
// after the records that subpartition got before it, over every transport.
func TestBroadcastWatermark(t *testing.T) {
	const subs, bufSize = 3, 64
	cases := []struct {
		name  string
		steps []step
	}{
		{"records on one subpartition", stepsOf(recTo(1, 5), wm(10), recTo(1, 70), status(true), status(false), wm(20))},
		{"records on every subpartition", stepsOf(recTo(0, 5), recTo(1, 6), recTo(2, 7), wm(10), recTo(2, 100), recTo(0, 1), wm(11))},
		{"no records at all", stepsOf(wm(1), status(true))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, env *testEnv) {
				p, _ := env.partition(1, bufSize, 64, PartitionOptions{Subpartitions: subs}) // holds everything: the readers come after Finish
				seq, sizes := make([]uint64, subs), make([][]int, subs)
				want := make([][]string, subs)
				// Through the typed helpers rather than BroadcastEvent, which run uses.
				for _, s := range tc.steps {
					switch {
					case s.ev == nil:
						w, err := run(p, []step{s}, seq, sizes)
						if err != nil {
							t.Fatal(err)
						}
						want[s.sub] = append(want[s.sub], w[s.sub]...)
						continue
					case s.ev.Type == EventWatermark:
						if err := p.BroadcastWatermark(s.ev.TimestampMillis); err != nil {
							t.Fatal(err)
						}
					default:
						if err := p.BroadcastWatermarkStatus(s.ev.Idle()); err != nil {
							t.Fatal(err)
						}
					}
					for i := range want {
						want[i] = append(want[i], traceName(*s.ev))
					}
				}
				if err := p.Finish(); err != nil {
					t.Fatal(err)
				}
				for sub := 0; sub < subs; sub++ {
					r := openTraceReader(t, env, p.ID(), sub, 0, 8, bufSize, &sizes[sub])
					if err := r.readUntil(-1); err != nil {
						t.Fatalf("subpartition %d: %v", sub, err)
					}
					if w := append(want[sub], "eop"); !slices.Equal(r.trace, w) {
						t.Fatalf("subpartition %d: trace\n got %v\nwant %v", sub, r.trace, w)
					}
				}
				p.Close()
			})
		})
	}
}

// TestAttachResendsLastWatermark restarts the consumer of a reconnectable subpartition (approximate
// recovery): the new reader must get the last watermark and the last status the producer gave the
// subpartition, before anything else, even when the old reader had read them or nobody received them, and
// nothing when the producer sent none. The re-sent events carry the sequence number of the next record
// the producer hands over, so the loss a task computes from them is the loss there was.
func TestAttachResendsLastWatermark(t *testing.T) {
	const bufSize = HeaderSize + 44
	cases := []struct {
		name string
		// before: read by the first reader, which then goes away; away: while nobody reads (dropped
		// once flushed; what is left in the partly filled buffer goes to the next reader); pending:
		// emitted, and left in the producer's partly filled buffer when the second reader attaches;
		// after: once it attached.
		before, away, pending, after []step
		finishAway                   bool     // the producer finishes while nobody reads
		resent                       []string // what the second reader must get first
	}{
		{name: "nothing sent, nothing re-sent",
			before: stepsOf(rec(4)), away: stepsOf(rec(4), flushStep()), after: stepsOf(rec(4))},
		{name: "watermark read by the first reader, standing still",
			before: stepsOf(rec(4), wm(100), rec(4)), away: stepsOf(rec(4), flushStep()), after: stepsOf(rec(4), wm(101)),
			resent: []string{"wm:100"}},
		{name: "watermark and idle dropped while away",
			before: stepsOf(rec(4), wm(100)), away: stepsOf(rec(50), wm(200), status(true)),
			after: stepsOf(status(false), rec(4), wm(300)), resent: []string{"wm:200", "idle"}},
		{name: "last status active, last watermark after it",
			before: stepsOf(status(true), status(false)), away: stepsOf(wm(7), rec(3), flushStep()),
			after: stepsOf(rec(3)), resent: []string{"wm:7", "active"}},
		{name: "ahead of the partly filled buffer",
			before: stepsOf(wm(100)), away: stepsOf(rec(30), flushStep()), pending: stepsOf(rec(4), rec(4)),
			after: stepsOf(wm(150)), resent: []string{"wm:100"}},
		{name: "ahead of a record begun while away",
			before: stepsOf(wm(1)), away: stepsOf(wm(2), rec(100)), pending: stepsOf(rec(5)),
			after: stepsOf(rec(5)), resent: []string{"wm:2"}},
		{name: "producer finished while away",
			before: stepsOf(rec(1)), away: stepsOf(wm(math.MaxInt64), evt(Event{Type: EventEndOfData})),
			finishAway: true, resent: []string{"wm:9223372036854775807"}},
		{name: "status only",
			before: stepsOf(rec(1)), away: stepsOf(status(true)), after: stepsOf(rec(1)),
			resent: []string{"idle"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, env *testEnv) {
				p, pool := env.partition(1, bufSize, 64, PartitionOptions{Reconnectable: true})
				seq, sizes := make([]uint64, 1), make([][]int, 1)
				first := openTraceReader(t, env, p.ID(), 0, 0, 32, bufSize, &sizes[0])
				want, err := run(p, tc.before, seq, sizes)
				if err != nil {
					t.Fatal(err)
				}
				p.FlushAll()
				if err := first.readUntil(len(want[0])); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(first.trace, want[0]) {
					t.Fatalf("first reader: trace %v, want %v", first.trace, want[0])
				}
				first.ch.Release()
				env.waitIdle() // over TCP: the server released the first view before the producer goes on
				if _, err := run(p, tc.away, seq, sizes); err != nil {
					t.Fatal(err)
				}
				if tc.finishAway {
					if err := p.Finish(); err != nil {
						t.Fatal(err)
					}
				}
				pendingFrom := seq[0]
				if _, err := run(p, tc.pending, seq, sizes); err != nil {
					t.Fatal(err)
				}
				// The sequence number of the first record the second reader can get: the first of the
				// partly filled buffer, or of what follows.
				nextSeq := pendingFrom
				if len(tc.pending) == 0 {
					nextSeq = seq[0]
				}
				second := openTraceReader(t, env, p.ID(), 0, 1, 32, bufSize, &sizes[0])
				wantAfter := slices.Clone(tc.resent)
				for s := pendingFrom; s < seq[0]; s++ {
					wantAfter = append(wantAfter, recordName(s))
				}
				if !tc.finishAway {
					w, err := run(p, tc.after, seq, sizes)
					if err != nil {
						t.Fatal(err)
					}
					wantAfter = append(wantAfter, w[0]...)
					if err := p.Finish(); err != nil {
						t.Fatal(err)
					}
				}
				wantAfter = append(wantAfter, "eop")
				if err := second.readUntil(-1); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(second.trace, wantAfter) {
					t.Fatalf("second reader: trace\n got %v\nwant %v", second.trace, wantAfter)
				}
				for i := range tc.resent {
					if second.eventSeqs[i] != nextSeq {
						t.Fatalf("re-sent %s carries sequence number %d, want %d (the next record's)", tc.resent[i], second.eventSeqs[i], nextSeq)
					}
				}
				second.ch.Release()
				env.waitIdle()
				p.Close()
				if pool.Available() != pool.Limit() {
					t.Fatalf("producer buffers leaked: %d of %d available", pool.Available(), pool.Limit())
				}
			})
		})
	}
}

// TestAttachResendsOnlyToNewerAttempts holds the re-send to reconnectable partitions and to an attempt
// that replaces another: the first reader of a reconnectable subpartition reads the events themselves
// from the queue (no copies), and a pipelined partition never re-sends.
func TestAttachResendsOnlyToNewerAttempts(t *testing.T) {
	for _, reconnectable := range []bool{false, true} {
		t.Run(fmt.Sprintf("reconnectable=%v", reconnectable), func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, env *testEnv) {
				p, _ := env.partition(1, 64, 8, PartitionOptions{Reconnectable: reconnectable})
				seq, sizes := make([]uint64, 1), make([][]int, 1)
				want, err := run(p, stepsOf(rec(3), wm(5), status(true), rec(3)), seq, sizes)
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Finish(); err != nil {
					t.Fatal(err)
				}
				r := openTraceReader(t, env, p.ID(), 0, 0, 8, 64, &sizes[0])
				if err := r.readUntil(-1); err != nil {
					t.Fatal(err)
				}
				if w := append(want[0], "eop"); !slices.Equal(r.trace, w) {
					t.Fatalf("trace\n got %v\nwant %v", r.trace, w)
				}
				r.ch.Release()
				env.waitIdle()
				p.Close()
			})
		})
	}
}

// TestRecordPathDoesNotAllocate emits records through a partition and reads them from a local channel, with
// and without watermarks and statuses among them, on pipelined and reconnectable partitions: neither the
// records nor the watermark events (pooled buffers, like barriers) allocate, and remembering what a
// reconnectable subpartition re-sends costs nothing per record.
func TestRecordPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tc := range []struct {
		name          string
		reconnectable bool
		watermarks    bool
	}{
		{"pipelined", false, false},
		{"pipelined with watermarks", false, true},
		{"reconnectable", true, false},
		{"reconnectable with watermarks", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := NewBufferPool("alloc", 256, 8)
			p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, Reconnectable: tc.reconnectable}, pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			v, err := p.CreateView(0, testConsumer, 8, func() {})
			if err != nil {
				t.Fatal(err)
			}
			ch := NewLocalInputChannel(v)
			dec := NewRecordDecoder(0)
			rec := record(1, 40)
			var i int64
			allocs := testing.AllocsPerRun(2000, func() {
				i++
				if err := p.EmitRecord(0, rec); err != nil {
					t.Fatal(err)
				}
				if tc.watermarks && i%16 == 0 {
					if err := p.BroadcastWatermark(i); err != nil {
						t.Fatal(err)
					}
					if err := p.BroadcastWatermarkStatus(i%32 == 0); err != nil {
						t.Fatal(err)
					}
				}
				if i%4 == 0 {
					p.FlushAll()
				}
				for b, err := ch.Poll(); b != nil || err != nil; b, err = ch.Poll() {
					if err != nil {
						t.Fatal(err)
					}
					if b.Kind == KindData {
						if _, err := dec.SetBuffer(b); err != nil {
							t.Fatal(err)
						}
						for r, err := dec.Next(); r != nil || err != nil; r, err = dec.Next() {
							if err != nil {
								t.Fatal(err)
							}
						}
					} else if _, err := DecodeEvent(b.Payload()); err != nil {
						t.Fatal(err)
					}
					ch.Recycle(b)
				}
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per record", allocs)
			}
			ch.Release()
			p.Close()
			p.Release()
		})
	}
}

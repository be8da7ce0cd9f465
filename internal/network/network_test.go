package network

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/runnel-dev/runnel/internal/ident"
)

var (
	testPID      = ident.PartitionID{Result: 1, Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: 0, Index: 0}}}
	testConsumer = ident.Attempt{Subtask: ident.Subtask{Vertex: 1, Index: 0}}
)

// record makes a record whose bytes encode its own index, so a reader can check identity and integrity.
func record(i, size int) []byte {
	b := make([]byte, size)
	for j := range b {
		b[j] = byte(i + j)
	}
	if size >= 8 {
		binary.LittleEndian.PutUint64(b, uint64(i))
	}
	return b
}

type harness struct {
	t    *testing.T
	pool *BufferPool
	p    *ResultPartition
	view *View
	ch   *LocalInputChannel
	dec  *RecordDecoder
	got  [][]byte
}

func newHarness(t *testing.T, bufSize, nbuf int, reconnectable bool) *harness {
	t.Helper()
	pool := NewBufferPool("test", bufSize, nbuf)
	p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, Reconnectable: reconnectable, MaxRecordSize: 1 << 20}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, pool: pool, p: p, dec: NewRecordDecoder(1 << 20)}
}

func (h *harness) attach(attempt int32, credit int) error {
	owner := testConsumer
	owner.Number = attempt
	v, err := h.p.CreateView(0, owner, credit, func() {})
	if err != nil {
		return err
	}
	h.view, h.ch = v, NewLocalInputChannel(v)
	h.dec.Reset()
	return nil
}

// drain reads everything currently available, returning whether end-of-partition was seen.
func (h *harness) drain() (bool, error) {
	for {
		b, err := h.ch.Poll()
		if err != nil || b == nil {
			return false, err
		}
		if b.Kind == KindEvent {
			e, err := DecodeEvent(b.Payload())
			h.ch.Recycle(b)
			if err != nil {
				return false, err
			}
			if e.Type == EventEndOfPartition {
				return true, nil
			}
			continue
		}
		if _, err := h.dec.SetBuffer(b); err != nil {
			return false, err
		}
		for {
			rec, err := h.dec.Next()
			if err != nil {
				return false, err
			}
			if rec == nil {
				break
			}
			h.got = append(h.got, bytes.Clone(rec))
		}
		h.ch.Recycle(b)
	}
}

func TestRoundTripAcrossBuffers(t *testing.T) {
	cases := []struct {
		name    string
		bufSize int
		sizes   []int
	}{
		{"tiny records", 64, []int{0, 1, 2, 3, 4, 5}},
		{"exact fit", HeaderSize + 48, []int{4, 4, 4, 4, 4, 4, 4}}, // 4+4 bytes per record, 6 fill a buffer
		{"prefix split", HeaderSize + 46, []int{40, 1, 0, 17}},     // the second record's length starts 2 bytes before the end
		{"spans 1,2,3 buffers", 64, []int{30, 80, 130, 5, 200}},
		{"large", 4096, []int{100000, 3, 50000}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.bufSize, 1<<12, false)
			if err := h.attach(0, 1<<12); err != nil {
				t.Fatal(err)
			}
			for i, n := range tc.sizes {
				if err := h.p.EmitRecord(0, record(i, n)); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.p.Finish(); err != nil {
				t.Fatal(err)
			}
			end, err := h.drain()
			if err != nil || !end {
				t.Fatalf("drain: end=%v err=%v", end, err)
			}
			if len(h.got) != len(tc.sizes) {
				t.Fatalf("got %d records, want %d", len(h.got), len(tc.sizes))
			}
			for i, n := range tc.sizes {
				if !bytes.Equal(h.got[i], record(i, n)) {
					t.Fatalf("record %d differs", i)
				}
			}
			if h.pool.Available() != h.pool.Limit() {
				t.Fatalf("buffers leaked: %d of %d available", h.pool.Available(), h.pool.Limit())
			}
		})
	}
}

func TestRandomRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 50; trial++ {
		bufSize := MinBufferSize + rng.Intn(200)
		h := newHarness(t, bufSize, 8, false)
		if err := h.attach(0, 2); err != nil {
			t.Fatal(err)
		}
		var want [][]byte
		for i := 0; i < 300; i++ {
			r := record(i, rng.Intn(3*(bufSize-HeaderSize)))
			want = append(want, r)
			if err := h.p.EmitRecord(0, r); err != nil {
				t.Fatal(err)
			}
			if rng.Intn(5) == 0 {
				h.p.Flush(0)
			}
			// Consume as we go so the small pool never runs dry.
			if _, err := h.drain(); err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
		}
		if err := h.p.Finish(); err != nil {
			t.Fatal(err)
		}
		if end, err := h.drain(); err != nil || !end {
			t.Fatalf("end=%v err=%v", end, err)
		}
		if len(h.got) != len(want) {
			t.Fatalf("trial %d: got %d records, want %d", trial, len(h.got), len(want))
		}
		for i := range want {
			if !bytes.Equal(h.got[i], want[i]) {
				t.Fatalf("trial %d: record %d differs", trial, i)
			}
		}
	}
}

// TestReconnectSkipsPartialRecords covers the partial-record cleanup: a consumer goes away while a record is
// in flight, data is dropped while nobody listens, and a newer attempt reconnects. It must receive only whole
// records, and the sequence numbers must account exactly for what was lost.
func TestReconnectSkipsPartialRecords(t *testing.T) {
	const payload = 44 // bytes of payload per buffer
	cases := []struct {
		name string
		// records written before the consumer leaves (all consumed), while it is away, and after it returns
		before, away, after []int
		wantSkipped         uint64
	}{
		{"record at buffer start", []int{4}, []int{4, 4}, []int{4, 4}, 0},
		{"record in the middle spanning 2 buffers", []int{4}, []int{60}, []int{60, 4}, 1},
		{"record spanning 3 buffers", []int{10}, []int{100}, []int{100, 1}, 1},
		{"record ending at buffer end", []int{40}, []int{40}, []int{40, 40}, 0},
		{"nothing while away", []int{5}, nil, []int{50, 3}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, HeaderSize+payload, 64, true)
			if err := h.attach(0, 64); err != nil {
				t.Fatal(err)
			}
			i := 0
			emit := func(sizes []int) {
				for _, n := range sizes {
					if err := h.p.EmitRecord(0, record(i, n)); err != nil {
						t.Fatal(err)
					}
					i++
				}
			}
			emit(tc.before)
			h.p.Flush(0)
			if _, err := h.drain(); err != nil {
				t.Fatal(err)
			}
			consumed := uint64(len(h.got))
			h.ch.Release()
			emit(tc.away) // dropped, whole buffers, never blocks
			if err := h.attach(1, 64); err != nil {
				t.Fatal(err)
			}
			h.got = nil
			emit(tc.after)
			if err := h.p.Finish(); err != nil {
				t.Fatal(err)
			}
			if end, err := h.drain(); err != nil || !end {
				t.Fatalf("end=%v err=%v", end, err)
			}
			// Every record received must be whole and in order.
			for _, r := range h.got {
				idx := int(binary.LittleEndian.Uint64(append(r, make([]byte, 8)...)))
				if len(r) >= 8 && !bytes.Equal(r, record(idx, len(r))) {
					t.Fatalf("received a corrupt record %d", idx)
				}
			}
			firstSeq := h.dec.NextSeq() - uint64(len(h.got))
			lost := firstSeq - consumed
			total := uint64(i)
			if got := consumed + lost + uint64(len(h.got)); got != total {
				t.Fatalf("consumed %d + lost %d + received %d = %d, want %d", consumed, lost, len(h.got), got, total)
			}
			st := h.p.Stats()
			if h.dec.PartialRecordsSkipped != tc.wantSkipped {
				t.Fatalf("partial records skipped = %d, want %d", h.dec.PartialRecordsSkipped, tc.wantSkipped)
			}
			if lost < st.RecordsDropped {
				t.Fatalf("lost %d < dropped %d", lost, st.RecordsDropped)
			}
			if h.pool.Available() != h.pool.Limit() {
				t.Fatalf("buffers leaked: %d of %d available", h.pool.Available(), h.pool.Limit())
			}
		})
	}
}

func TestViewFencing(t *testing.T) {
	h := newHarness(t, 128, 4, true)
	if err := h.attach(2, 1); err != nil {
		t.Fatal(err)
	}
	if err := h.attach(1, 1); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("older attempt: got %v, want ErrStaleAttempt", err)
	}
	if err := h.attach(2, 1); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("same attempt: got %v, want ErrStaleAttempt", err)
	}
	old := h.view
	if err := h.attach(3, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Poll(); !errors.Is(err, ErrViewReleased) {
		t.Fatalf("replaced view: got %v, want ErrViewReleased", err)
	}
	// A pipelined (not reconnectable) partition has exactly one reader.
	h2 := newHarness(t, 128, 4, false)
	if err := h2.attach(0, 1); err != nil {
		t.Fatal(err)
	}
	if err := h2.attach(1, 1); !errors.Is(err, ErrAlreadyConsumed) {
		t.Fatalf("second reader: got %v, want ErrAlreadyConsumed", err)
	}
}

func TestCreditGatesDelivery(t *testing.T) {
	h := newHarness(t, 64, 16, false)
	if err := h.attach(0, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := h.p.EmitRecord(0, record(i, 40)); err != nil {
			t.Fatal(err)
		}
	}
	h.p.Flush(0)
	if b, _ := h.view.Poll(); b != nil {
		t.Fatal("polled a buffer without credit")
	}
	h.view.AddCredit(1)
	b, err := h.view.Poll()
	if b == nil || err != nil {
		t.Fatalf("with credit: %v %v", b, err)
	}
	if b2, _ := h.view.Poll(); b2 != nil {
		t.Fatal("second buffer without a second credit")
	}
	b.Recycle()
}

func TestBackpressureBlocksProducerUntilCanceled(t *testing.T) {
	cancel := make(chan struct{})
	pool := NewBufferPool("bp", 64, 2)
	p, _ := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1}, pool, cancel)
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if err := p.EmitRecord(0, record(i, 40)); err != nil {
				done <- err
				return
			}
		}
	}()
	close(cancel)
	if err := <-done; !errors.Is(err, ErrCanceled) {
		t.Fatalf("got %v, want ErrCanceled", err)
	}
}

func TestRecordTooLarge(t *testing.T) {
	pool := NewBufferPool("big", 64, 2)
	p, _ := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, MaxRecordSize: 100}, pool, nil)
	err := p.EmitRecord(0, make([]byte, 101))
	if !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("got %v", err)
	}
}

func TestDecoderRejectsCorruption(t *testing.T) {
	mk := func(h Header, payload []byte) *Buffer {
		b := &Buffer{data: make([]byte, HeaderSize, 256)}
		b.Header = h
		b.data = append(b.data, payload...)
		b.Seal()
		return b
	}
	lp := func(n int) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(n)) }
	cases := []struct {
		name string
		bufs []*Buffer
	}{
		{"length over max", []*Buffer{mk(Header{Kind: KindData, Starts: 1}, lp(1<<30))}},
		{"more starts than header", []*Buffer{mk(Header{Kind: KindData, Starts: 1}, append(lp(0), lp(0)...))}},
		{"fewer starts than header", []*Buffer{mk(Header{Kind: KindData, Starts: 2}, lp(0))}},
		{"unexpected continuation", []*Buffer{mk(Header{Kind: KindData, Starts: 1}, lp(0)), mk(Header{Kind: KindData, Continuation: 1, FirstSeq: 1}, []byte{1})}},
		{"missing continuation", []*Buffer{mk(Header{Kind: KindData, Starts: 1}, append(lp(10), 1, 2)), mk(Header{Kind: KindData, Starts: 1, FirstSeq: 1}, lp(0))}},
		{"sequence gap", []*Buffer{mk(Header{Kind: KindData, Starts: 1}, lp(0)), mk(Header{Kind: KindData, Starts: 1, FirstSeq: 5}, lp(0))}},
		{"continuation too short", []*Buffer{mk(Header{Kind: KindData, Starts: 1}, append(lp(4), 1, 2)), mk(Header{Kind: KindData, Continuation: 1, Starts: 1, FirstSeq: 1}, []byte{3, 4, 0, 0, 0, 0})}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewRecordDecoder(1 << 20)
			var err error
			for _, b := range tc.bufs {
				if _, err = d.SetBuffer(b); err != nil {
					break
				}
				for {
					var rec []byte
					rec, err = d.Next()
					if err != nil || rec == nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			if err == nil {
				t.Fatal("corruption not detected")
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrRecordTooLarge) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrRecordTooLarge", err)
			}
		})
	}
}

func TestNetworkMemoryBudget(t *testing.T) {
	m, err := NewNetworkMemory(10*1024, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := m.NewPool("a", 6)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewPool("b", 5); !errors.Is(err, ErrInsufficientBuffers) {
		t.Fatalf("got %v", err)
	}
	p1.Destroy()
	if _, err := m.NewPool("b", 5); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkEmitDecode(b *testing.B) {
	for _, size := range []int{16, 100, 1000} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			pool := NewBufferPool("bench", DefaultBufferSize, 8)
			p, _ := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1}, pool, nil)
			v, _ := p.CreateView(0, testConsumer, 8, func() {})
			ch := NewLocalInputChannel(v)
			d := NewRecordDecoder(0)
			rec := record(1, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := p.EmitRecord(0, rec); err != nil {
					b.Fatal(err)
				}
				if i%64 == 63 {
					p.Flush(0)
					for buf, _ := ch.Poll(); buf != nil; buf, _ = ch.Poll() {
						if _, err := d.SetBuffer(buf); err != nil {
							b.Fatal(err)
						}
						for r, err := d.Next(); r != nil || err != nil; r, err = d.Next() {
							if err != nil {
								b.Fatal(err)
							}
						}
						ch.Recycle(buf)
					}
				}
			}
		})
	}
}

// TestRecordTargetInPlace pins the in-place encoding path: a record encoded into RecordTarget's bytes is
// committed only while it fits the buffer and the size limit; otherwise nothing changes and EmitRecord takes
// over, so the stream is the same as with EmitRecord alone.
func TestRecordTargetInPlace(t *testing.T) {
	h := newHarness(t, 64, 64, false)
	h.p.opts.MaxRecordSize = 40
	if err := h.attach(0, 64); err != nil {
		t.Fatal(err)
	}
	if h.p.RecordTarget(0, 1) != nil {
		t.Fatal("target without a current buffer")
	}
	var want [][]byte
	emit := func(rec []byte) {
		t.Helper()
		want = append(want, rec)
		if dst := h.p.RecordTarget(0, 8); dst != nil {
			before := len(h.p.current[0].data)
			if h.p.CommitRecord(0, append(dst, rec...)) {
				return
			}
			if len(h.p.current[0].data) != before {
				t.Fatal("a refused commit changed the buffer")
			}
		}
		if err := h.p.EmitRecord(0, rec); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range []int{8, 8, 3, 30, 8, 0, 8, 8, 39, 8} { // 30 and 39 outgrow a 64-byte buffer's rest
		emit(record(i, n))
	}
	if dst := h.p.RecordTarget(0, 8); dst != nil && h.p.CommitRecord(0, append(dst, make([]byte, 41)...)) {
		t.Fatal("a record over the maximum size was committed")
	}
	if err := h.p.EmitRecord(0, make([]byte, 41)); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("oversized record: %v", err)
	}
	if err := h.p.Finish(); err != nil {
		t.Fatal(err)
	}
	if end, err := h.drain(); err != nil || !end {
		t.Fatalf("drain: end=%v err=%v", end, err)
	}
	if len(h.got) != len(want) {
		t.Fatalf("got %d records, want %d", len(h.got), len(want))
	}
	for i := range want {
		if !bytes.Equal(h.got[i], want[i]) {
			t.Fatalf("record %d: got %x, want %x", i, h.got[i], want[i])
		}
	}
	if h.p.NextSequence(0) != uint64(len(want)) {
		t.Fatalf("next sequence %d, want %d", h.p.NextSequence(0), len(want))
	}
}

// TestReconnectRequestsFlush pins that a reader coming back to a reconnectable subpartition asks the
// producer, once, to flush (so a restarted consumer does not wait for the buffer timeout), and that a first
// reader does not.
func TestReconnectRequestsFlush(t *testing.T) {
	h := newHarness(t, 64, 16, true)
	if err := h.attach(0, 4); err != nil {
		t.Fatal(err)
	}
	if h.p.TakeFlushRequest() {
		t.Fatal("a first reader asked for a flush")
	}
	if err := h.attach(1, 4); err != nil {
		t.Fatal(err)
	}
	if !h.p.TakeFlushRequest() {
		t.Fatal("a reconnected reader did not ask for a flush")
	}
	if h.p.TakeFlushRequest() {
		t.Fatal("the flush request was not taken")
	}
}

package network

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/mtls/mtlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testWait bounds every wait of these tests for something that should happen promptly.
const testWait = 5 * time.Second

// channelFactories are the transports every scenario runs over: one data path, three ways to reach it.
var channelFactories = []struct {
	name     string
	tcp, tls bool
}{
	{"local", false, false},
	{"tcp", true, false},
	{"mtls", true, true}, // TCP with mutual TLS (a CA made for the test) and credentials checked
}

// forEachTransport runs scenario once over local channels, once over TCP channels, and once over TCP
// channels with mutual TLS and credentials.
func forEachTransport(t *testing.T, scenario func(t *testing.T, env *testEnv)) {
	for _, f := range channelFactories {
		t.Run(f.name, func(t *testing.T) {
			if !f.tls {
				scenario(t, newTestEnv(t, f.tcp))
				return
			}
			ca := mtlstest.NewCA(t, "runnel test CA")
			so, do := mtlsServerOptions(t, ca), mtlsDialOptions(t, ca)
			so.Admit = func(r PartitionRequest) (*PartitionManager, error) { return nil, r.VerifyCredential(testSecret) }
			do.Job = testJob
			scenario(t, newTestEnvWith(t, so, do))
		})
	}
}

// testEnv is one TaskManager's partitions, served over TCP when tcp is set, and the channels and consumer
// pools opened on them, all released and checked at the end of the test.
type testEnv struct {
	t     *testing.T
	pm    *PartitionManager
	srv   *Server
	chans []InputChannel
	pools []*BufferPool // consumer-side pools of TCP channels
	// dial is the base of the options TCP channels are opened with; with a Job set, each channel presents
	// the credential issued with testSecret for it.
	dial DialOptions
}

func newTestEnv(t *testing.T, tcp bool) *testEnv {
	if tcp {
		return newTestEnvWith(t, ServerOptions{}, DialOptions{})
	}
	e := &testEnv{t: t, pm: NewPartitionManager()}
	t.Cleanup(e.close)
	return e
}

// newTestEnvWith makes a TCP environment whose server has options so and whose channels dial with do.
func newTestEnvWith(t *testing.T, so ServerOptions, do DialOptions) *testEnv {
	e := &testEnv{t: t, pm: NewPartitionManager(), dial: do}
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first, so it runs last
	srv, err := NewServer(e.pm, "127.0.0.1:0", so)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	t.Cleanup(e.close)
	return e
}

func (e *testEnv) close() {
	for _, ch := range e.chans {
		ch.Release()
	}
	if e.srv != nil {
		if err := e.srv.Close(); err != nil {
			e.t.Errorf("close server: %v", err)
		}
	}
	for _, p := range e.pools {
		if p.Available() != p.Limit() {
			e.t.Errorf("consumer pool %s leaked buffers: %d of %d available", p.name, p.Available(), p.Limit())
		}
	}
}

// partition makes and registers a partition with its own producer pool.
func (e *testEnv) partition(result ident.ResultID, bufSize, nbuf int, opts PartitionOptions) (*ResultPartition, *BufferPool) {
	e.t.Helper()
	pool := NewBufferPool(fmt.Sprintf("producer r%d", result), bufSize, nbuf)
	pid := testPID
	pid.Result = result
	if opts.Subpartitions == 0 {
		opts.Subpartitions = 1
	}
	if opts.MaxRecordSize == 0 {
		opts.MaxRecordSize = 1 << 20
	}
	p, err := NewResultPartition(pid, opts, pool, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.pm.Register(p); err != nil {
		e.t.Fatal(err)
	}
	return p, pool
}

// open opens a channel on subpartition sub of pid for owner with the given credit. A TCP channel gets a
// consumer pool of exactly credits buffers of bufSize bytes.
func (e *testEnv) open(pid ident.PartitionID, sub int, owner ident.Attempt, credits, bufSize int, notify func()) (InputChannel, error) {
	return e.openFrom(pid, sub, owner, credits, bufSize, notify, 0)
}

// openFrom is open reading an in-flight log from the barrier of checkpoint from.
func (e *testEnv) openFrom(pid ident.PartitionID, sub int, owner ident.Attempt, credits, bufSize int, notify func(), from int64) (InputChannel, error) {
	if e.srv == nil {
		v, err := e.pm.CreateViewFrom(pid, sub, owner, credits, notify, from)
		if err != nil {
			return nil, err
		}
		ch := NewLocalInputChannel(v)
		e.chans = append(e.chans, ch)
		return ch, nil
	}
	pool := NewBufferPool("consumer "+owner.String(), bufSize, max(credits, 1))
	opts := e.dialOptions(pid, sub, owner)
	opts.ReplayFrom = from
	ch, err := DialRemoteChannel(context.Background(), e.srv.Addr(), pid, sub, owner, pool, credits, notify, opts)
	if err != nil {
		return nil, err
	}
	e.chans = append(e.chans, ch)
	e.pools = append(e.pools, pool)
	return ch, nil
}

// dialOptions returns the options a TCP channel of this environment dials with: e.dial and, if it names a
// job, the credential issued with testSecret for the channel.
func (e *testEnv) dialOptions(pid ident.PartitionID, sub int, owner ident.Attempt) DialOptions {
	opts := e.dial
	if opts.Job != ([JobIDSize]byte{}) {
		opts.Credential = PartitionCredential(testSecret, opts.Job, pid, sub, owner)
	}
	return opts
}

// waitIdle waits until the server has no connection left, so every producer buffer it held is recycled.
func (e *testEnv) waitIdle() {
	e.t.Helper()
	if e.srv == nil {
		return
	}
	deadline := time.Now().Add(testWait)
	for e.srv.activeConns() > 0 {
		if time.Now().After(deadline) {
			e.t.Fatalf("server still has %d connections", e.srv.activeConns())
		}
		time.Sleep(time.Millisecond)
	}
}

// reader consumes one channel: it decodes records, keeps copies, and recycles buffers.
type reader struct {
	t     *testing.T
	ch    InputChannel
	wake  chan struct{}
	dec   *RecordDecoder
	got   [][]byte
	ended bool
}

func newReader(t *testing.T) *reader {
	return &reader{t: t, wake: make(chan struct{}, 1), dec: NewRecordDecoder(1 << 20)}
}

func (r *reader) notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// openReader opens a channel through env and a reader on it.
func openReader(t *testing.T, env *testEnv, pid ident.PartitionID, attempt int32, credits, bufSize int) (*reader, error) {
	r := newReader(t)
	owner := testConsumer
	owner.Number = attempt
	ch, err := env.open(pid, 0, owner, credits, bufSize, r.notify)
	if err != nil {
		return nil, err
	}
	r.ch = ch
	return r, nil
}

// handle decodes and recycles one buffer.
func (r *reader) handle(b *Buffer) error {
	defer r.ch.Recycle(b)
	if b.Kind == KindEvent {
		e, err := DecodeEvent(b.Payload())
		if err != nil {
			return err
		}
		if e.Type == EventEndOfPartition {
			r.ended = true
		}
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
		r.got = append(r.got, bytes.Clone(rec))
	}
}

// readUntil consumes until done reports true (checked whenever the channel has nothing ready) or the
// channel fails.
func (r *reader) readUntil(done func() bool) error {
	deadline := time.NewTimer(testWait)
	defer deadline.Stop()
	for {
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
		if done() {
			return nil
		}
		select {
		case <-r.wake:
		case <-deadline.C:
			return fmt.Errorf("timed out with %d records, ended=%v", len(r.got), r.ended)
		}
	}
}

func (r *reader) readToEnd() error { return r.readUntil(func() bool { return r.ended }) }

// pollError polls until the channel fails, and returns the error.
func (r *reader) pollError() error {
	err := r.readUntil(func() bool { return r.ended })
	if err == nil {
		return errors.New("channel ended without an error")
	}
	return err
}

// checkRecords verifies that got holds records 0..len(sizes)-1 of the given sizes.
func checkRecords(t *testing.T, got [][]byte, sizes []int) {
	t.Helper()
	if len(got) != len(sizes) {
		t.Fatalf("got %d records, want %d", len(got), len(sizes))
	}
	for i, n := range sizes {
		if !bytes.Equal(got[i], record(i, n)) {
			t.Fatalf("record %d differs", i)
		}
	}
}

// produce emits records of the given sizes from a goroutine (blocking on backpressure as a task would),
// then finishes the partition; the returned channel yields the producer's error.
func produce(p *ResultPartition, sizes []int, finish bool) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i, n := range sizes {
			if err := p.EmitRecord(0, record(i, n)); err != nil {
				done <- err
				return
			}
		}
		var err error
		if finish {
			err = p.Finish()
		} else {
			p.FlushAll()
		}
		done <- err
	}()
	return done
}

func wait(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testWait):
		t.Fatal("producer did not finish")
	}
}

func TestTransportRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		bufSize int
		nbuf    int // producer pool; credits are half of it
		sizes   []int
	}{
		{"tiny records", 64, 8, []int{0, 1, 2, 3, 4, 5}},
		{"prefix split", HeaderSize + 46, 8, []int{40, 1, 0, 17}}, // the second length prefix straddles buffers
		{"spans 1,2,3 buffers", 64, 4, []int{30, 80, 130, 5, 200, 1, 100}},
		{"many small buffers", MinBufferSize, 2, func() []int {
			s := make([]int, 300)
			for i := range s {
				s[i] = i % 37
			}
			return s
		}()},
		{"large", 4096, 8, []int{100000, 3, 50000}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, env *testEnv) {
				p, pool := env.partition(1, tc.bufSize, tc.nbuf, PartitionOptions{})
				r, err := openReader(t, env, p.ID(), 0, max(tc.nbuf/2, 1), tc.bufSize)
				if err != nil {
					t.Fatal(err)
				}
				done := produce(p, tc.sizes, true)
				if err := r.readToEnd(); err != nil {
					t.Fatal(err)
				}
				wait(t, done)
				p.Close()
				checkRecords(t, r.got, tc.sizes)
				if b, err := r.ch.Poll(); b != nil || err != nil {
					t.Fatalf("poll after end of partition: %v, %v", b, err)
				}
				r.ch.Release()
				env.waitIdle()
				if pool.Available() != pool.Limit() {
					t.Fatalf("producer buffers leaked: %d of %d available", pool.Available(), pool.Limit())
				}
				if env.pm.Len() != 0 {
					t.Fatal("fully consumed pipelined partition still registered")
				}
			})
		})
	}
}

func TestTransportCreditGating(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		p, _ := env.partition(1, 64, 16, PartitionOptions{})
		r, err := openReader(t, env, p.ID(), 0, 1, 64)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ { // 4+40 bytes fill a 44-byte payload: one buffer each
			if err := p.EmitRecord(0, record(i, 40)); err != nil {
				t.Fatal(err)
			}
		}
		p.Flush(0)
		queued := func() int {
			s := p.Subpartition(0)
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.queue.len()
		}
		var held []*Buffer
		next := func() *Buffer {
			t.Helper()
			select {
			case <-r.wake:
			case <-time.After(testWait):
			}
			b, err := r.ch.Poll()
			if err != nil || b == nil {
				t.Fatalf("poll with credit: %v, %v", b, err)
			}
			return b
		}
		for i := 0; i < 3; i++ {
			held = append(held, next())
			// Without another credit nothing more leaves the producer.
			time.Sleep(20 * time.Millisecond)
			if b, err := r.ch.Poll(); b != nil || err != nil {
				t.Fatalf("buffer %d: second buffer without credit: %v, %v", i, b, err)
			}
			if n := queued(); n != 2-i {
				t.Fatalf("buffer %d: producer queue holds %d buffers, want %d", i, n, 2-i)
			}
			r.ch.Recycle(held[i]) // one more credit
		}
		if err := p.Finish(); err != nil {
			t.Fatal(err)
		}
		if err := r.readToEnd(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestTransportSlowConsumerIsolation: a consumer that stops reading backpressures its own producer, while a
// second channel served by the same server (the same connection machinery, for TCP) keeps flowing.
func TestTransportSlowConsumerIsolation(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		const n = 200
		sizes := make([]int, n)
		for i := range sizes {
			sizes[i] = 30
		}
		slowP, slowPool := env.partition(1, 64, 4, PartitionOptions{})
		fastP, _ := env.partition(2, 64, 4, PartitionOptions{})
		slow, err := openReader(t, env, slowP.ID(), 0, 2, 64)
		if err != nil {
			t.Fatal(err)
		}
		fast, err := openReader(t, env, fastP.ID(), 0, 2, 64)
		if err != nil {
			t.Fatal(err)
		}
		slowDone := produce(slowP, sizes, true)
		fastDone := produce(fastP, sizes, true)
		if err := fast.readToEnd(); err != nil {
			t.Fatal(err)
		}
		wait(t, fastDone)
		checkRecords(t, fast.got, sizes)
		select {
		case err := <-slowDone:
			t.Fatalf("producer of the stalled channel finished (%v): no backpressure", err)
		case <-time.After(20 * time.Millisecond):
		}
		if slowPool.Available() != 0 {
			t.Fatalf("stalled producer has %d free buffers, want all in flight", slowPool.Available())
		}
		if err := slow.readToEnd(); err != nil {
			t.Fatal(err)
		}
		wait(t, slowDone)
		checkRecords(t, slow.got, sizes)
		slowP.Close()
		fastP.Close()
	})
}

// TestTransportReconnectSkipsPartialRecords is TestReconnectSkipsPartialRecords over both transports: the
// consumer's channel goes away mid-stream, data is dropped, and a newer attempt reconnects to the running
// partition. It receives only whole records and the sequence numbers account for every record.
func TestTransportReconnectSkipsPartialRecords(t *testing.T) {
	const payload = 44
	const bufSize = HeaderSize + payload
	cases := []struct {
		name                string
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
			forEachTransport(t, func(t *testing.T, env *testEnv) {
				p, pool := env.partition(1, bufSize, 64, PartitionOptions{Reconnectable: true})
				first, err := openReader(t, env, p.ID(), 0, 32, bufSize)
				if err != nil {
					t.Fatal(err)
				}
				i := 0
				emit := func(sizes []int) {
					for _, n := range sizes {
						if err := p.EmitRecord(0, record(i, n)); err != nil {
							t.Fatal(err)
						}
						i++
					}
				}
				emit(tc.before)
				p.Flush(0)
				if err := first.readUntil(func() bool { return len(first.got) == len(tc.before) }); err != nil {
					t.Fatal(err)
				}
				consumed := uint64(len(first.got))
				first.ch.Release()
				emit(tc.away) // dropped (or lost with the old connection), never blocks
				second, err := openReader(t, env, p.ID(), 1, 32, bufSize)
				if err != nil {
					t.Fatal(err)
				}
				emit(tc.after)
				if err := p.Finish(); err != nil {
					t.Fatal(err)
				}
				if err := second.readToEnd(); err != nil {
					t.Fatal(err)
				}
				for _, r := range second.got {
					if len(r) >= 8 {
						idx := int(binary.LittleEndian.Uint64(r))
						if !bytes.Equal(r, record(idx, len(r))) {
							t.Fatalf("received a corrupt record %d", idx)
						}
					}
				}
				firstSeq := second.dec.NextSeq() - uint64(len(second.got))
				lost := firstSeq - consumed
				if got := consumed + lost + uint64(len(second.got)); got != uint64(i) {
					t.Fatalf("consumed %d + lost %d + received %d = %d, want %d", consumed, lost, len(second.got), got, i)
				}
				if second.dec.PartialRecordsSkipped != tc.wantSkipped {
					t.Fatalf("partial records skipped = %d, want %d", second.dec.PartialRecordsSkipped, tc.wantSkipped)
				}
				if st := p.Stats(); lost < st.RecordsDropped || st.ViewsCreated != 2 {
					t.Fatalf("lost %d, stats %+v", lost, st)
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

func TestTransportFencing(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		p, _ := env.partition(1, 128, 4, PartitionOptions{Reconnectable: true})
		if _, err := openReader(t, env, p.ID(), 2, 1, 128); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for _, attempt := range []int32{1, 2} {
			_, err := openReader(t, env, p.ID(), attempt, 1, 128)
			if !errors.Is(err, ErrStaleAttempt) {
				t.Fatalf("attempt %d: got %v, want ErrStaleAttempt", attempt, err)
			}
			if env.srv != nil && !strings.Contains(err.Error(), env.srv.Addr()) {
				t.Fatalf("error %q does not name the server", err)
			}
		}
		if time.Since(start) > time.Second {
			t.Fatal("stale attempts were retried instead of rejected at once")
		}
		if _, err := openReader(t, env, p.ID(), 3, 1, 128); err != nil {
			t.Fatalf("newer attempt: %v", err)
		}
		// A pipelined partition has exactly one reader.
		q, _ := env.partition(2, 128, 4, PartitionOptions{})
		if _, err := openReader(t, env, q.ID(), 0, 1, 128); err != nil {
			t.Fatal(err)
		}
		if _, err := openReader(t, env, q.ID(), 1, 1, 128); !errors.Is(err, ErrAlreadyConsumed) {
			t.Fatalf("second reader: got %v, want ErrAlreadyConsumed", err)
		}
	})
}

func TestTransportPartitionReleasedMidStream(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		p, _ := env.partition(1, 64, 8, PartitionOptions{})
		r, err := openReader(t, env, p.ID(), 0, 4, 64)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, produce(p, []int{10, 20, 30}, false))
		if err := r.readUntil(func() bool { return len(r.got) == 3 }); err != nil {
			t.Fatal(err)
		}
		env.pm.Release(p.ID()) // the producer failed
		err = r.pollError()
		if !errors.Is(err, ErrPartitionReleased) || !strings.Contains(err.Error(), p.ID().String()) {
			t.Fatalf("got %v, want ErrPartitionReleased naming %s", err, p.ID())
		}
		p.Close()
	})
}

func TestRemotePartitionNotFoundRetried(t *testing.T) {
	env := newTestEnv(t, true)
	pid := testPID
	pid.Result = 9
	pool := NewBufferPool("consumer", 64, 2)
	r := newReader(t)
	type result struct {
		ch  *RemoteInputChannel
		err error
	}
	dialed := make(chan result, 1)
	go func() {
		ch, err := DialRemoteChannel(context.Background(), env.srv.Addr(), pid, 0, testConsumer, pool, 2, r.notify,
			DialOptions{Timeout: testWait})
		dialed <- result{ch, err}
	}()
	time.Sleep(30 * time.Millisecond) // a few refused attempts
	p, _ := env.partition(9, 64, 4, PartitionOptions{})
	res := <-dialed
	if res.err != nil {
		t.Fatal(res.err)
	}
	r.ch = res.ch
	env.chans = append(env.chans, res.ch)
	wait(t, produce(p, []int{5, 50}, true))
	if err := r.readToEnd(); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, r.got, []int{5, 50})
	res.ch.Release()
	if pool.Available() != pool.Limit() {
		t.Fatalf("consumer buffers leaked: %d of %d", pool.Available(), pool.Limit())
	}
}

func TestRemotePartitionNotFoundGivesUp(t *testing.T) {
	env := newTestEnv(t, true)
	pool := NewBufferPool("consumer", 64, 1)
	cases := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		opts    DialOptions
		wantErr error
		want    string
	}{
		{"timeout", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			DialOptions{Timeout: 60 * time.Millisecond}, ErrPartitionNotFound, "gave up after"},
		{"context canceled", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond) // long enough for one refusal even on a loaded machine
		}, DialOptions{}, context.DeadlineExceeded, "not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			_, err := DialRemoteChannel(ctx, env.srv.Addr(), testPID, 0, testConsumer, pool, 1, nil, tc.opts)
			if !errors.Is(err, tc.wantErr) || !errors.Is(err, ErrPartitionNotFound) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %v and %q", err, tc.wantErr, tc.want)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("gave up after %v", d)
			}
		})
	}
}

func TestRemoteInvalidRequest(t *testing.T) {
	env := newTestEnv(t, true)
	p, _ := env.partition(1, 128, 4, PartitionOptions{Subpartitions: 2})
	cases := []struct {
		name    string
		sub     int
		bufSize int
		want    string
	}{
		{"subpartition out of range", 2, 128, "has 2 subpartitions"},
		{"consumer buffers too small", 0, 64, "writes buffers of 128 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pool := NewBufferPool("consumer", tc.bufSize, 1)
			start := time.Now()
			_, err := DialRemoteChannel(context.Background(), env.srv.Addr(), p.ID(), tc.sub, testConsumer, pool, 1, nil, DialOptions{})
			if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalidRequest with %q", err, tc.want)
			}
			if time.Since(start) > time.Second {
				t.Fatal("invalid request was retried")
			}
		})
	}
}

func TestRemoteServerClosedMidStream(t *testing.T) {
	env := newTestEnv(t, true)
	p, _ := env.partition(1, 64, 8, PartitionOptions{})
	r, err := openReader(t, env, p.ID(), 0, 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, produce(p, []int{10, 20}, false))
	if err := r.readUntil(func() bool { return len(r.got) == 2 }); err != nil {
		t.Fatal(err)
	}
	if err := env.srv.Close(); err != nil {
		t.Fatal(err)
	}
	err = r.pollError()
	for _, want := range []string{p.ID().String(), env.srv.Addr(), "connection closed before end of partition"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if !errors.Is(err, ErrConnectionClosed) {
		t.Fatalf("got %v, want ErrConnectionClosed", err)
	}
	p.Close()
}

// fakeServer accepts one connection, reads the preamble and request, and answers with reply; then it closes
// the connection if hangup is set, or waits for the client to close it.
func fakeServer(t *testing.T, reply []byte, hangup bool) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(testWait))
		if _, err := io.ReadFull(conn, make([]byte, preambleSize+frameHeaderSize+partitionRequestSize)); err != nil {
			t.Errorf("fake server: read request: %v", err)
			return
		}
		if _, err := conn.Write(reply); err != nil || hangup {
			return
		}
		_, _ = io.Copy(io.Discard, conn) // until the client closes
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func TestRemoteRejectsBadFrames(t *testing.T) {
	const bufSize = 64
	ok := appendRequestOK(nil, bufSize)
	bufferFrame := func(b []byte) []byte { return append(appendFrameHeader(nil, frameBuffer, len(b)), b...) }
	data := sealedBuffer(KindData, binary.LittleEndian.AppendUint32(nil, 0), 0, 1)
	badKind := bytes.Clone(data)
	badKind[0] = 9
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	cases := []struct {
		name    string
		reply   []byte
		hangup  bool
		dialErr bool
		wantErr error
		want    string
	}{
		{"garbage reply", []byte("HTTP/1.1 400 Bad Request\r\n"), false, true, ErrProtocol, "unexpected frame type frame(72)"},
		{"buffer before OK", bufferFrame(data), false, true, ErrProtocol, "unexpected frame type Buffer"},
		{"announces larger buffers", appendRequestOK(nil, bufSize*2), false, true, ErrProtocol, "buffers of 128 bytes"},
		{"hangs up during handshake", nil, true, true, ErrConnectionClosed, "during the handshake"},
		{"oversized buffer frame", cat(ok, appendFrameHeader(nil, frameBuffer, bufSize+1)), false, false, ErrProtocol, "Buffer frame of 65 bytes, want 20 to 64"},
		{"unknown frame type", cat(ok, []byte{0xee, 0, 0, 0, 0}), false, false, ErrProtocol, "unexpected frame type frame(238) at stream offset 9 (bytes ee 00 00 00 00)"},
		{"corrupt buffer header", cat(ok, bufferFrame(badKind)), false, false, ErrCorrupt, "unknown buffer kind 9"},
		{"buffer without credit", cat(ok, bufferFrame(data), bufferFrame(data)), false, false, ErrProtocol, "server sent buffer 1 without credit"},
		{"cut mid-frame", cat(ok, bufferFrame(data)[:10]), true, false, ErrConnectionClosed, "server closed the connection after 0 buffers"},
		{"hangs up mid-stream", cat(ok, bufferFrame(data)), true, false, ErrConnectionClosed, "server closed the connection after 1 buffers"},
		{"server error mid-stream", cat(ok, appendErrorFrame(nil, codeViewReleased, "replaced")), false, false, ErrViewReleased, "server replied: replaced"},
		{"server shutting down", cat(ok, closeFrame), false, false, ErrConnectionClosed, "the server is shutting down"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			addr := fakeServer(t, tc.reply, tc.hangup)
			pool := NewBufferPool("consumer", bufSize, 1)
			r := newReader(t)
			ch, err := DialRemoteChannel(context.Background(), addr, testPID, 0, testConsumer, pool, 1, r.notify, DialOptions{})
			if tc.dialErr {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("dial: got %v, want %v with %q", err, tc.wantErr, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Release()
			// Hold every buffer, so that the pool stays empty and credit is not returned.
			var held []*Buffer
			for err == nil {
				var b *Buffer
				if b, err = ch.Poll(); b != nil {
					held = append(held, b)
				} else if err == nil {
					select {
					case <-r.wake:
					case <-time.After(testWait):
						t.Fatal("no error reported")
					}
				}
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("poll: got %v, want %v with %q", err, tc.wantErr, tc.want)
			}
			for _, want := range []string{testPID.String(), addr} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not name %q", err, want)
				}
			}
			for _, b := range held {
				ch.Recycle(b)
			}
			ch.Release()
			if pool.Available() != pool.Limit() {
				t.Fatalf("consumer buffers leaked: %d of %d", pool.Available(), pool.Limit())
			}
			if _, err := ch.Poll(); !errors.Is(err, ErrViewReleased) {
				t.Fatalf("poll after release: %v", err)
			}
		})
	}
}

// TestServerRejectsBadClients speaks to the server with raw bytes and expects an Error frame that quotes
// the offending bytes, then the connection closed.
func TestServerRejectsBadClients(t *testing.T) {
	env := newTestEnv(t, true)
	p, _ := env.partition(1, 64, 4, PartitionOptions{Reconnectable: true})
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	cases := []struct {
		name string
		send func(request []byte) []byte // request is a valid preamble and partition request
		want string
	}{
		{"http client", func([]byte) []byte { return []byte("GET / HTTP/1.1\r\n\r\n") }, `bad preamble "GET / HTTP/1.1\r\n\r\n"`},
		{"old version", func([]byte) []byte { return []byte{'R', 'N', 'D', 'P', 0, 0, 0, 0} }, "unsupported protocol version 0"},
		{"credit before request", func([]byte) []byte { return cat(wirePreamble[:], appendAddCredit(nil, 1)) }, "unexpected frame type AddCredit"},
		{"oversized request", func([]byte) []byte {
			return cat(wirePreamble[:], appendFrameHeader(nil, framePartitionRequest, 1<<30))
		}, "PartitionRequest frame of 1073741824 bytes, want 96"},
		{"oversized credit", func(req []byte) []byte { return cat(req, appendFrameHeader(nil, frameAddCredit, 1<<31)) }, "AddCredit frame of 2147483648 bytes, want 4"},
		{"buffer from client", func(req []byte) []byte { return cat(req, appendFrameHeader(nil, frameBuffer, 30)) }, "unexpected frame type Buffer"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			owner := testConsumer
			owner.Number = int32(i) // a newer attempt each time: the reconnectable partition takes it
			request := appendPartitionRequest(wirePreamble[:len(wirePreamble):len(wirePreamble)], partitionRequest{
				partition: p.ID(), consumer: owner, credit: 1, bufferSize: 64,
			})
			frames := rawExchange(t, env.srv.Addr(), tc.send(request))
			if len(frames) == 0 || frames[len(frames)-1].typ != frameError {
				t.Fatalf("got frames %v, want an Error frame last", frames)
			}
			rerr := parseErrorFrame(frames[len(frames)-1].payload)
			if !errors.Is(rerr, ErrProtocol) || !strings.Contains(rerr.Error(), tc.want) {
				t.Fatalf("got %v, want ErrProtocol with %q", rerr, tc.want)
			}
		})
	}
}

func TestServerHandshakeTimeout(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := NewServer(NewPartitionManager(), "127.0.0.1:0", ServerOptions{HandshakeTimeout: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testWait))
	if _, err := conn.Write(wirePreamble[:3]); err != nil { // and then silence
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("server did not close the silent connection: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("closed after %v", d)
	}
}

// benchMode is the transport a benchmark streams over.
type benchMode int

const (
	benchLocal benchMode = iota
	benchTCP
	benchTCPCredentials // the server's Admit verifies the request's credential
	benchTCPTLS         // mutual TLS and credentials
)

// benchTransport streams b.N records through EmitRecord, a channel and a RecordDecoder, with the producer
// and the consumer on their own goroutines.
func benchTransport(b *testing.B, mode benchMode) {
	for _, size := range []int{16, 100} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			const credits = 8
			pm := NewPartitionManager()
			pool := NewBufferPool("bench producer", DefaultBufferSize, 2*credits)
			p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1}, pool, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := pm.Register(p); err != nil {
				b.Fatal(err)
			}
			wake := make(chan struct{}, 1)
			notify := func() {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
			var ch InputChannel
			if mode != benchLocal {
				var so ServerOptions
				var do DialOptions
				if mode == benchTCPTLS {
					ca := mtlstest.NewCA(b, "bench CA")
					so, do = mtlsServerOptions(b, ca), mtlsDialOptions(b, ca)
				}
				if mode == benchTCPCredentials || mode == benchTCPTLS {
					so.Admit = func(r PartitionRequest) (*PartitionManager, error) { return nil, r.VerifyCredential(testSecret) }
					do.Job = testJob
					do.Credential = PartitionCredential(testSecret, testJob, testPID, 0, testConsumer)
				}
				srv, err := NewServer(pm, "127.0.0.1:0", so)
				if err != nil {
					b.Fatal(err)
				}
				defer srv.Close()
				cpool := NewBufferPool("bench consumer", DefaultBufferSize, credits)
				rc, err := DialRemoteChannel(context.Background(), srv.Addr(), testPID, 0, testConsumer, cpool, credits, notify, do)
				if err != nil {
					b.Fatal(err)
				}
				ch = rc
			} else {
				v, err := pm.CreateView(testPID, 0, testConsumer, credits, notify)
				if err != nil {
					b.Fatal(err)
				}
				ch = NewLocalInputChannel(v)
			}
			defer ch.Release()
			dec := NewRecordDecoder(0)
			rec := record(1, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			done := make(chan error, 1)
			go func() {
				for i := 0; i < b.N; i++ {
					if err := p.EmitRecord(0, rec); err != nil {
						done <- err
						return
					}
				}
				done <- p.Finish()
			}()
			n := 0
		consume:
			for {
				buf, err := ch.Poll()
				if err != nil {
					b.Fatal(err)
				}
				if buf == nil {
					<-wake
					continue
				}
				if buf.Kind == KindEvent {
					ch.Recycle(buf)
					break consume
				}
				if _, err := dec.SetBuffer(buf); err != nil {
					b.Fatal(err)
				}
				for {
					r, err := dec.Next()
					if err != nil {
						b.Fatal(err)
					}
					if r == nil {
						break
					}
					n++
				}
				ch.Recycle(buf)
			}
			b.StopTimer()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			p.Close()
			if n != b.N {
				b.Fatalf("received %d records, want %d", n, b.N)
			}
		})
	}
}

func BenchmarkTCPChannel(b *testing.B) { benchTransport(b, benchTCP) }

// BenchmarkTCPChannelCredentials: credentials are checked once per request, so the throughput is
// BenchmarkTCPChannel's.
func BenchmarkTCPChannelCredentials(b *testing.B) { benchTransport(b, benchTCPCredentials) }

// BenchmarkTCPChannelTLS: the same channel over mutual TLS 1.3 (AES-GCM on both sides of the stream).
func BenchmarkTCPChannelTLS(b *testing.B) { benchTransport(b, benchTCPTLS) }

func BenchmarkLocalChannel(b *testing.B) { benchTransport(b, benchLocal) }

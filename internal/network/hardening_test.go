package network

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/mtls/mtlstest"
)

// stalledClient is a raw data-plane client that requests subpartition 0 of pid with plenty of credit, reads
// the server's RequestOK, and from then on reads nothing while keeping the connection open: a hung consumer
// process, or a peer the network has not noticed is dead. Its receive buffer is small, so that little of
// what the server sends fits in it.
func stalledClient(t *testing.T, addr string, req partitionRequest) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(appendPartitionRequest(wirePreamble[:len(wirePreamble):len(wirePreamble)], req)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(testWait))
	d := newFrameDecoder(false, allFrames, req.bufferSize)
	buf := make([]byte, 64) // the reply and, maybe, the start of the first buffer: then no more reading
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			_, f, ok, derr := d.decode(buf[:n])
			if derr != nil {
				t.Fatal(derr)
			}
			if ok {
				if f.typ != frameRequestOK {
					t.Fatalf("reply %s, want RequestOK", f.typ)
				}
				break
			}
		}
		if err != nil {
			t.Fatalf("no reply to the partition request: %v", err)
		}
	}
	return conn
}

// TestServerWriteTimeoutFreesProducer pins what a consumer that stops reading without disconnecting does
// to its producer, over a real socket: the server's write blocks, times out (WriteTimeout), and the server
// fails the view. A reconnectable partition then drops and counts that subpartition's data, its producer
// running on; a pipelined partition fails, and its producer, blocked waiting for a buffer, gets an error
// that names the consumer, its address and why, within the timeout and some slack.
func TestServerWriteTimeoutFreesProducer(t *testing.T) {
	const (
		writeTimeout = 200 * time.Millisecond
		bufSize      = 4 << 10
		slack        = 3 * time.Second // a loaded 2-core machine under -race
	)
	for _, tc := range []struct {
		name          string
		reconnectable bool
	}{
		{"pipelined fails its producer", false},
		{"reconnectable drops", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			pm := NewPartitionManager()
			srv, err := NewServer(pm, "127.0.0.1:0", ServerOptions{WriteTimeout: writeTimeout, SocketSendBufferBytes: 4 << 10})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			pool := NewBufferPool("producer", bufSize, 8)
			cancel := make(chan struct{}) // unblocks a held producer, should the test fail
			p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, Reconnectable: tc.reconnectable, MaxRecordSize: 1 << 20}, pool, cancel)
			if err != nil {
				t.Fatal(err)
			}
			if err := pm.Register(p); err != nil {
				t.Fatal(err)
			}
			defer p.Release()
			conn := stalledClient(t, srv.Addr(), partitionRequest{
				partition: p.ID(), consumer: testConsumer, credit: 1 << 20, bufferSize: bufSize,
			})

			// Produce far more than the socket buffers hold: the server's write blocks, then times out.
			rec := bytes.Repeat([]byte{1}, 1000)
			sub := p.subs[0]
			start := time.Now()
			produced := make(chan error, 1)
			go func() {
				for sub.Stats().BuffersDropped == 0 {
					if err := p.EmitRecord(0, rec); err != nil {
						produced <- err
						return
					}
				}
				produced <- nil
			}()
			var perr error
			select {
			case perr = <-produced:
			case <-time.After(writeTimeout + slack):
				close(cancel)
				perr = <-produced
				t.Fatalf("the producer was held for %s by a client that does not read (%+v); when cancelled it said: %v",
					writeTimeout+slack, sub.Stats(), perr)
			}
			took := time.Since(start)
			sub.mu.Lock()
			attached := sub.view != nil
			sub.mu.Unlock()
			if attached {
				t.Fatal("the view of the timed-out connection is still attached")
			}
			if tc.reconnectable {
				if perr != nil || p.Err() != nil {
					t.Fatalf("the reconnectable partition's producer failed: %v (partition: %v)", perr, p.Err())
				}
				t.Logf("dropping after %s, %+v", took.Round(time.Millisecond), sub.Stats())
				return
			}
			var gone *ConsumerGoneError
			if !errors.As(perr, &gone) || !errors.Is(perr, ErrConsumerGone) || !errors.Is(perr, os.ErrDeadlineExceeded) {
				t.Fatalf("producer error %v, want a *ConsumerGoneError caused by the write timeout", perr)
			}
			want := ConsumerGoneError{Partition: p.ID(), Subpartition: 0, Consumer: testConsumer, Address: conn.LocalAddr().String(), Idle: writeTimeout}
			if gone.Partition != want.Partition || gone.Subpartition != want.Subpartition || gone.Consumer != want.Consumer ||
				gone.Address != want.Address || gone.Idle != want.Idle {
				t.Fatalf("consumer gone %+v, want %+v", *gone, want)
			}
			for _, s := range []string{testConsumer.String(), conn.LocalAddr().String(), p.ID().String(), "stopped reading for 200ms"} {
				if !strings.Contains(perr.Error(), s) {
					t.Errorf("error %q does not say %q", perr, s)
				}
			}
			// Every later write fails the same way, and nothing the subpartition held is kept from the pool.
			if err := p.Finish(); !errors.Is(err, ErrConsumerGone) {
				t.Errorf("Finish after the failure: %v, want ErrConsumerGone", err)
			}
			p.Close()
			if sub.Stats().BuffersDropped != 0 {
				t.Errorf("a pipelined subpartition counted drops: %+v", sub.Stats())
			}
			if pool.Available() != pool.Limit() {
				t.Errorf("producer pool: %d of %d buffers available after the failure", pool.Available(), pool.Limit())
			}
			t.Logf("producer failed after %s: %v", took.Round(time.Millisecond), perr)
		})
	}
}

// TestViewFail pins View.Fail against Release for every kind of subpartition and every moment: only a
// pipelined subpartition whose end-of-partition nobody read fails, and then its producer's writes return
// the cause and its queued buffers are back in the pool.
func TestViewFail(t *testing.T) {
	cause := &ConsumerGoneError{Partition: testPID, Consumer: testConsumer, Idle: time.Second}
	for _, tc := range []struct {
		name           string
		reconnectable  bool
		readToEnd      bool // the reader got end-of-partition before it was failed
		wantFailed     bool
		wantDropCounts bool
	}{
		{"pipelined, mid-stream", false, false, true, false},
		{"pipelined, after end of partition", false, true, false, false},
		{"reconnectable, mid-stream", true, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := NewBufferPool("producer", 256, 4)
			p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, Reconnectable: tc.reconnectable}, pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Release()
			v, err := p.CreateView(0, testConsumer, 8, func() {})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := p.EmitRecord(0, record(i, 100)); err != nil {
					t.Fatal(err)
				}
				p.Flush(0)
			}
			if tc.readToEnd {
				if err := p.Finish(); err != nil {
					t.Fatal(err)
				}
				for {
					b, err := v.Poll()
					if err != nil || b == nil {
						t.Fatalf("poll before end of partition: %v, %v", b, err)
					}
					end := isEndOfPartition(b)
					b.Recycle()
					if end {
						break
					}
				}
			}
			v.Fail(cause)
			if _, err := v.Poll(); !errors.Is(err, ErrViewReleased) {
				t.Errorf("poll of a failed view: %v, want ErrViewReleased", err)
			}
			err = p.EmitRecord(0, record(9, 300)) // needs a new buffer
			if tc.wantFailed {
				if !errors.Is(err, ErrConsumerGone) || !errors.Is(p.Err(), ErrConsumerGone) {
					t.Fatalf("write after Fail: %v (partition: %v), want the consumer-gone cause", err, p.Err())
				}
				p.Close()
				if pool.Available() != pool.Limit() {
					t.Errorf("%d of %d buffers back in the pool", pool.Available(), pool.Limit())
				}
				return
			}
			if err != nil || p.Err() != nil {
				t.Fatalf("write after Fail: %v (partition: %v), want none", err, p.Err())
			}
			if got := p.Stats().BuffersDropped > 0; got != tc.wantDropCounts {
				t.Errorf("drops counted %v, want %v: %+v", got, tc.wantDropCounts, p.Stats())
			}
		})
	}
}

// syncBuffer is a log sink that the server's goroutines may write while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// floodConn opens a raw connection that sends nothing.
func floodConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// closedByServer reports whether the server closed conn (a read ends with EOF or a reset) by deadline.
func closedByServer(conn net.Conn, deadline time.Time) bool {
	_ = conn.SetReadDeadline(deadline)
	var b [1]byte
	_, err := conn.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// waitOpen waits until the server counts n open connections.
func waitOpen(t *testing.T, srv *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for srv.Stats().Open != n {
		if time.Now().After(deadline) {
			t.Fatalf("server has %d open connections, want %d", srv.Stats().Open, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestServerConnectionLimits floods a data server with real connections that never send a request while a
// real channel streams from it: past MaxConnections new connections are closed at once, one log line says
// why however many there are, and the channel delivers every record throughout. Once the silent
// connections have been silent for a tenth of the handshake timeout, a new real channel gets in: the oldest
// silent one is closed to make room. With TLS the same holds: admission comes before the TLS handshake, so
// silent connections count (and make room) whether or not they would ever speak TLS.
func TestServerConnectionLimits(t *testing.T) {
	const (
		maxConns = 8
		records  = 3000
		extra    = 40
	)
	for _, tc := range []struct {
		name             string
		handshakeTimeout time.Duration
		lateChannel      bool // open a second real channel once the flood fills the server
		tls              bool // mutual TLS
	}{
		{"refused past the limit", 30 * time.Second, false, false},
		{"silent connections make room", 2 * time.Second, true, false},
		{"tls refused past the limit", 30 * time.Second, false, true},
		{"tls silent connections make room", 2 * time.Second, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first, so it runs last
			var logs syncBuffer
			env := &testEnv{t: t, pm: NewPartitionManager()}
			var so ServerOptions
			if tc.tls {
				ca := mtlstest.NewCA(t, "cluster CA")
				so, env.dial = mtlsServerOptions(t, ca), mtlsDialOptions(t, ca)
			}
			so.MaxConnections, so.HandshakeTimeout = maxConns, tc.handshakeTimeout
			so.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			srv, err := NewServer(env.pm, "127.0.0.1:0", so)
			if err != nil {
				t.Fatal(err)
			}
			env.srv = srv
			t.Cleanup(env.close)
			// Two partitions, each with its own pool: one read from the start, one by the late channel.
			p1, _ := env.partition(1, 256, 8, PartitionOptions{})
			p2, _ := env.partition(2, 256, 8, PartitionOptions{})
			sizes := sizesOf(records, 300)
			first := newReader(t)
			ch, err := env.open(p1.ID(), 0, testConsumer, 2, 256, first.notify)
			if err != nil {
				t.Fatal(err)
			}
			first.ch = ch
			produced1, produced2 := produce(p1, sizes, true), produce(p2, sizes, true)
			if err := first.readUntil(func() bool { return len(first.got) >= records/3 }); err != nil {
				t.Fatal(err)
			}

			// Fill the server with silent connections, then open more.
			for range maxConns - 1 {
				floodConn(t, srv.Addr())
			}
			waitOpen(t, srv, maxConns)
			second := newReader(t)
			if tc.lateChannel {
				time.Sleep(tc.handshakeTimeout / 10 * 3 / 2) // the silent ones age past a tenth of the timeout
				ch, err := env.open(p2.ID(), 0, testConsumer, 2, 256, second.notify)
				if err != nil {
					t.Fatalf("a real channel was kept out by silent connections: %v", err)
				}
				second.ch = ch
				if st := srv.Stats(); st.Evicted != 1 || st.Open != maxConns {
					t.Fatalf("after the late channel: %+v, want 1 evicted and %d open", st, maxConns)
				}
				if got := logs.lines("to make room"); len(got) != 1 {
					t.Errorf("log lines about closing to make room: %q, want one", got)
				}
			} else {
				conns := make([]net.Conn, extra)
				for i := range conns {
					conns[i] = floodConn(t, srv.Addr())
				}
				refused, deadline := 0, time.Now().Add(testWait)
				for _, c := range conns {
					if closedByServer(c, deadline) {
						refused++
					}
				}
				if refused != extra {
					t.Fatalf("%d of %d connections past the limit were closed", refused, extra)
				}
				if st := srv.Stats(); st.Refused != extra || st.Open != maxConns {
					t.Fatalf("stats %+v, want %d refused and %d open", st, extra, maxConns)
				}
				got := logs.lines("refused a connection")
				if len(got) != 1 || !strings.Contains(got[0], "ServerOptions.MaxConnections") {
					t.Errorf("log lines about refusals: %q, want one naming the limit", got)
				}
			}

			// The real channels deliver everything while the flood's connections stay open.
			if err := first.readToEnd(); err != nil {
				t.Fatal(err)
			}
			checkRecords(t, first.got, sizes)
			wait(t, produced1)
			if tc.lateChannel {
				if err := second.readToEnd(); err != nil {
					t.Fatal(err)
				}
				checkRecords(t, second.got, sizes)
				wait(t, produced2)
			} else {
				p2.Release() // nobody reads it: let its producer go
				if err := <-produced2; !errors.Is(err, ErrCanceled) && err != nil {
					t.Logf("unread producer: %v", err)
				}
			}
		})
	}
}

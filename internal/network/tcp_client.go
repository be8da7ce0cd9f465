package network

// This file is the consumer side of the TCP data plane: a RemoteInputChannel reads one subpartition served by
// a Server on another TaskManager (protocol in wire.go) and behaves like a LocalInputChannel.
//
// Credit. The channel asks for the subpartition with an initial credit equal to the buffers it dedicates to
// it in the consumer's pool; every Recycle gives one buffer back to the pool and one credit back to the
// server. The server sends a buffer only against credit, so a Buffer frame always finds a free buffer in the
// pool; a frame that does not is a protocol violation and fails the channel.
//
// Goroutines, both owned by the channel and stopped by Release:
//
//   - the reader decodes frames straight into buffers taken from the pool, validates their headers, queues
//     them and calls notify when the queue becomes non-empty (or the channel fails);
//   - the credit writer sends AddCredit frames. Recycle only adds to an atomic counter and wakes it, so the
//     consumer never blocks on the network, and credits recycled in a burst go out in one frame.
//
// Retry. A partition the server does not know yet (its producer is still being deployed), or a blocking
// partition whose producer has not finished (ErrPartitionNotReady, which wraps ErrPartitionNotFound), is
// requested again with exponential backoff; every other refusal is returned at once, wrapping the matching
// sentinel error.
//
// Security. The request carries DialOptions.Job and .Credential (see credential.go); a server that refuses
// them answers ErrBadCredential, which is not retried. With DialOptions.TLS the connection is TLS 1.3, the
// server's certificate verified against the config's RootCAs for the dialed host (or ServerName), and the
// handshake is part of the HandshakeTimeout of each attempt. A handshake that fails, on either side, fails
// the dial with an *mtls.HandshakeError, which names TLS and who refused what. In TLS 1.3 the server checks
// the client's certificate after the client's side of the handshake ended, so its refusal is the alert that
// answers the request: when writing the request fails first (the server closed), the alert is read after.

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/mtls"
)

// Defaults of DialOptions.
const (
	// DefaultDialInitialBackoff is the first wait before asking again for a partition not found.
	DefaultDialInitialBackoff = 5 * time.Millisecond
	// DefaultDialMaxBackoff caps the wait between requests for a partition not found.
	DefaultDialMaxBackoff = 500 * time.Millisecond
	// DefaultDialTimeout bounds the whole of DialRemoteChannel, retries included.
	DefaultDialTimeout = 30 * time.Second
	// DefaultClientReadBufferBytes sizes the read buffer of a remote channel.
	DefaultClientReadBufferBytes = 32 << 10
)

// releaseWriteTimeout bounds the Close frame a released channel still tries to send.
const releaseWriteTimeout = 100 * time.Millisecond

// DialOptions configure DialRemoteChannel. Zero values mean the defaults.
type DialOptions struct {
	// InitialBackoff is the first wait before requesting a partition not found again
	// (default DefaultDialInitialBackoff); later waits double.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between requests (default DefaultDialMaxBackoff).
	MaxBackoff time.Duration
	// Timeout bounds the whole dial, retries included (default DefaultDialTimeout).
	Timeout time.Duration
	// HandshakeTimeout bounds one connection attempt up to the server's reply
	// (default DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// ReadBufferBytes sizes the channel's socket read buffer (default DefaultClientReadBufferBytes).
	ReadBufferBytes int
	// Job and Credential go into the partition request: the job the consumer belongs to and the
	// credential the job master issued for this channel (PartitionCredential). A server without
	// ServerOptions.Admit ignores them; zero values are what a job without credentials sends.
	Job        [JobIDSize]byte
	Credential [CredentialSize]byte
	// ReplayFrom, for a partition with an in-flight log, is the checkpoint whose barrier the channel reads
	// from (ResultPartition.CreateViewFrom; 0: the partition's start). Ignored by other partitions.
	ReplayFrom int64
	// TLS, if set, makes the connection TLS (1.3 at least, whatever the config says): the config's
	// RootCAs verify the server, its Certificates are presented to a server that asks for one, and an
	// empty ServerName is the host of the dialed address. The config is cloned.
	TLS *tls.Config
}

func (o DialOptions) withDefaults() (DialOptions, error) {
	if o.InitialBackoff < 0 || o.MaxBackoff < 0 || o.Timeout < 0 || o.HandshakeTimeout < 0 || o.ReadBufferBytes < 0 {
		return o, fmt.Errorf("dial options: negative value in %+v", o)
	}
	if o.InitialBackoff == 0 {
		o.InitialBackoff = DefaultDialInitialBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = DefaultDialMaxBackoff
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = o.InitialBackoff
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultDialTimeout
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.ReadBufferBytes == 0 {
		o.ReadBufferBytes = DefaultClientReadBufferBytes
	}
	if o.TLS != nil {
		if o.TLS.MaxVersion != 0 && o.TLS.MaxVersion < tls.VersionTLS13 {
			return o, fmt.Errorf("dial options: TLS config allows at most version %s; the data plane requires TLS 1.3",
				tls.VersionName(o.TLS.MaxVersion))
		}
		o.TLS = o.TLS.Clone()
		o.TLS.MinVersion = tls.VersionTLS13
	}
	return o, nil
}

// RemoteInputChannel reads one subpartition from a Server over TCP. It implements InputChannel with the same
// semantics as LocalInputChannel: buffers in order, credit returned on Recycle, end-of-partition last.
type RemoteInputChannel struct {
	addr   string
	pid    ident.PartitionID
	sub    int
	owner  ident.Attempt
	pool   *BufferPool
	notify func()
	// raw is the socket, closed to stop the channel; conn is what frames go over: raw itself, or the
	// *tls.Conn over it. Closing raw rather than conn skips TLS's close_notify, which could block for
	// seconds on a server that stopped reading; the Close frame already says goodbye.
	raw  net.Conn
	conn net.Conn

	// reader-owned
	dec      *frameDecoder
	rbuf     []byte
	pending  *Buffer // buffer the current Buffer frame is decoded into
	gotEnd   bool    // end-of-partition received
	received uint64  // buffers received

	mu       sync.Mutex
	queue    bufferQueue
	err      error // why the connection failed; reported once the queue is drained
	ended    bool  // end-of-partition returned by Poll
	released bool

	credits    atomic.Int64 // recycled buffers not yet announced
	creditWake chan struct{}
	creditBuf  []byte // credit-writer-owned

	done        chan struct{} // closed by Release
	readerDone  chan struct{}
	writerDone  chan struct{}
	releaseOnce sync.Once
}

// DialRemoteChannel connects to the Server at addr and requests subpartition sub of partition pid for the
// consumer attempt owner. The channel's buffers come from pool, of which credits buffers are dedicated to it
// (the initial credit); notify is called, from the channel's goroutine, when Poll may return something new.
//
// A partition not yet registered at the server, or a blocking one not finished yet, is requested again with
// exponential backoff until opts.Timeout or ctx ends; other refusals return at once and wrap ErrStaleAttempt, ErrAlreadyConsumed,
// ErrPartitionReleased, ErrInvalidRequest, ... as the server reported them.
func DialRemoteChannel(ctx context.Context, addr string, pid ident.PartitionID, sub int, owner ident.Attempt,
	pool *BufferPool, credits int, notify func(), opts DialOptions) (*RemoteInputChannel, error) {
	what := fmt.Sprintf("request partition %s subpartition %d for %s from %s", pid, sub, owner, addr)
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	switch {
	case pool == nil:
		return nil, fmt.Errorf("%s: nil buffer pool", what)
	case sub < 0:
		return nil, fmt.Errorf("%s: negative subpartition index: %w", what, ErrInvalidRequest)
	case credits < 0 || credits > pool.Limit():
		return nil, fmt.Errorf("%s: initial credit %d must be between 0 and the %d buffers of pool %s",
			what, credits, pool.Limit(), pool.name)
	}
	if notify == nil {
		notify = func() {}
	}
	c := &RemoteInputChannel{
		addr: addr, pid: pid, sub: sub, owner: owner, pool: pool, notify: notify,
		rbuf:       make([]byte, opts.ReadBufferBytes),
		creditWake: make(chan struct{}, 1),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	req := partitionRequest{partition: pid, subpartition: sub, consumer: owner, credit: credits, bufferSize: pool.Size(),
		job: opts.Job, credential: opts.Credential, replayFrom: opts.ReplayFrom}
	var tlsConfig *tls.Config
	if opts.TLS != nil {
		tlsConfig = opts.TLS
		if tlsConfig.ServerName == "" && !tlsConfig.InsecureSkipVerify {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("%s: TLS server name from the address: %w", what, err)
			}
			tlsConfig.ServerName = host // the clone made by withDefaults: the caller's config is untouched
		}
	}

	dialCtx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	backoff := opts.InitialBackoff
	var lastErr error
	for attempt := 1; ; attempt++ {
		leftover, err := c.connect(dialCtx, req, opts.HandshakeTimeout, tlsConfig)
		if err == nil {
			go c.read(leftover)
			go c.announceCredits()
			return c, nil
		}
		notFound := errors.Is(err, ErrPartitionNotFound)
		if !notFound && dialCtx.Err() == nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if notFound || lastErr == nil {
			lastErr = err // an attempt cut short by the deadline says less than the refusal before it
		}
		if dialCtx.Err() == nil {
			t := time.NewTimer(backoff)
			select {
			case <-dialCtx.Done():
				t.Stop()
			case <-t.C:
			}
			backoff = min(2*backoff, opts.MaxBackoff)
		}
		if dialCtx.Err() != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%s: %w after %d attempts: %w", what, context.Cause(ctx), attempt, lastErr)
			}
			return nil, fmt.Errorf("%s: gave up after %d attempts in %v: %w", what, attempt, opts.Timeout, lastErr)
		}
	}
}

// connect makes one connection attempt and handshake (TLS first if tlsConfig is set). On success c.raw,
// c.conn and c.dec are set and the bytes received after the reply are returned.
func (c *RemoteInputChannel) connect(ctx context.Context, req partitionRequest, handshakeTimeout time.Duration, tlsConfig *tls.Config) ([]byte, error) {
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(hctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	// The deadline in the past interrupts whichever read or write the handshake is in, TLS's included.
	stop := context.AfterFunc(hctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	conn := raw
	var tc *tls.Conn
	if tlsConfig != nil {
		tc = tls.Client(raw, tlsConfig)
		if err = tc.Handshake(); err != nil {
			err = &mtls.HandshakeError{Peer: "the data server", Addr: c.addr, Err: err}
		}
		conn = tc
	}
	var leftover []byte
	if err == nil {
		leftover, err = c.handshake(conn, req)
		if err != nil && tc != nil {
			err = tlsRefusal(tc, c.addr, err)
		}
	}
	if !stop() && err == nil {
		err = fmt.Errorf("handshake: %w", context.Cause(hctx))
	}
	if err != nil {
		raw.Close()
		return nil, err
	}
	c.raw, c.conn = raw, conn
	return leftover, nil
}

// tlsRefusal returns err, the failure of the request on a TLS connection whose handshake succeeded on
// this side, as an *mtls.HandshakeError when the server refused the handshake: its alert answered the
// request, or (the request's write failed, the server having closed) waits to be read.
func tlsRefusal(tc *tls.Conn, addr string, err error) error {
	alert := remoteAlert(err)
	if alert == nil {
		if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			return err
		}
		_ = tc.SetReadDeadline(time.Now().Add(tlsAlertWait))
		_, rerr := tc.Read(make([]byte, 1))
		if alert = remoteAlert(rerr); alert == nil {
			return err
		}
	}
	return &mtls.HandshakeError{Peer: "the data server", Addr: addr, Err: alert}
}

// tlsAlertWait bounds the read of an alert after a failed write: the connection is closed, so the read
// ends at once either way.
const tlsAlertWait = 100 * time.Millisecond

// remoteAlert returns the TLS alert the peer sent that err is or wraps, or nil.
func remoteAlert(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return op
	}
	return nil
}

// handshake sends the preamble and the request and reads the reply.
func (c *RemoteInputChannel) handshake(conn net.Conn, req partitionRequest) ([]byte, error) {
	msg := appendPartitionRequest(wirePreamble[:len(wirePreamble):len(wirePreamble)], req)
	if _, err := conn.Write(msg); err != nil {
		return nil, fmt.Errorf("send request: %w", err)
	}
	dec := newFrameDecoder(false, clientHandshakeFrames, 0)
	for {
		n, rerr := conn.Read(c.rbuf)
		p := c.rbuf[:n]
		for len(p) > 0 {
			k, f, ok, err := dec.decode(p)
			p = p[k:]
			if err != nil {
				return nil, fmt.Errorf("handshake: %w", err)
			}
			if !ok {
				continue
			}
			if f.typ == frameError {
				return nil, parseErrorFrame(f.payload)
			}
			// RequestOK
			size := int(binary.LittleEndian.Uint32(f.payload))
			if size < MinBufferSize || size > c.pool.Size() {
				return nil, fmt.Errorf("%w: server announces buffers of %d bytes, this channel's pool has %d-byte buffers",
					ErrProtocol, size, c.pool.Size())
			}
			dec.maxBuffer = size
			dec.allowed = clientStreamFrames
			dec.bufferDst = c.takeBuffer
			c.dec = dec
			return p, nil
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return nil, fmt.Errorf("%w: server closed the connection during the handshake (a data server at its connection limit does so, and says why in its log)", ErrConnectionClosed)
			}
			return nil, fmt.Errorf("handshake: %w", rerr)
		}
	}
}

// Poll implements InputChannel. After end-of-partition it returns nil forever; after the connection failed
// (and the buffers received before were polled) it returns an error naming the partition, the server and
// the cause.
func (c *RemoteInputChannel) Poll() (*Buffer, error) {
	c.mu.Lock()
	if b := c.queue.pop(); b != nil {
		if isEndOfPartition(b) {
			c.ended = true
		}
		c.mu.Unlock()
		return b, nil
	}
	released, ended, err := c.released, c.ended, c.err
	c.mu.Unlock()
	switch {
	case ended:
		return nil, nil
	case released:
		return nil, fmt.Errorf("remote channel %s: %w", c.describe(), ErrViewReleased)
	}
	return nil, err
}

// Recycle implements InputChannel: the buffer goes back to the pool and one credit to the server, without
// blocking.
func (c *RemoteInputChannel) Recycle(b *Buffer) {
	b.Recycle()
	if c.credits.Add(1) == 1 {
		select {
		case c.creditWake <- struct{}{}:
		default:
		}
	}
}

// Release implements InputChannel: it closes the connection (the server releases the view, not the
// partition), waits for the channel's goroutines and recycles the buffers still queued. It is idempotent.
func (c *RemoteInputChannel) Release() {
	c.releaseOnce.Do(func() {
		close(c.done)
		<-c.writerDone
		c.raw.Close()
		<-c.readerDone
		c.mu.Lock()
		c.released = true
		for b := c.queue.pop(); b != nil; b = c.queue.pop() {
			b.Recycle()
		}
		c.mu.Unlock()
	})
}

func (c *RemoteInputChannel) describe() string {
	return fmt.Sprintf("for partition %s subpartition %d (consumer %s) from %s", c.pid, c.sub, c.owner, c.addr)
}

// announceCredits is the credit writer goroutine.
func (c *RemoteInputChannel) announceCredits() {
	defer close(c.writerDone)
	for {
		select {
		case <-c.creditWake:
		case <-c.done:
			_ = c.conn.SetWriteDeadline(time.Now().Add(releaseWriteTimeout))
			_, _ = c.conn.Write(closeFrame)
			return
		}
		for n := c.credits.Swap(0); n > 0; {
			k := min(n, math.MaxUint32)
			c.creditBuf = appendAddCredit(c.creditBuf[:0], uint32(k))
			if _, err := c.conn.Write(c.creditBuf); err != nil {
				// The connection is gone; the reader reports why. Nothing more to send.
				<-c.done
				return
			}
			n -= k
		}
	}
}

// errCleanEnd stops the reader after the server closed following end-of-partition.
var errCleanEnd = errors.New("clean end of partition")

// read is the reader goroutine.
func (c *RemoteInputChannel) read(leftover []byte) {
	defer close(c.readerDone)
	err := c.consume(leftover)
	for err == nil {
		n, rerr := c.conn.Read(c.rbuf)
		if n > 0 {
			err = c.consume(c.rbuf[:n])
		}
		if err == nil && rerr != nil {
			if errors.Is(rerr, io.EOF) {
				err = fmt.Errorf("%w: server closed the connection after %d buffers", ErrConnectionClosed, c.received)
			} else {
				err = fmt.Errorf("%w: %w", ErrConnectionClosed, rerr)
			}
		}
	}
	// Let the server stop lingering; the credit writer finds the connection closed.
	c.raw.Close()
	if c.pending != nil {
		c.pending.Recycle()
		c.pending = nil
	}
	if c.gotEnd || errors.Is(err, errCleanEnd) {
		return // everything up to end-of-partition arrived; how the connection ended does not matter
	}
	select {
	case <-c.done:
		return // released: nobody polls anymore
	default:
	}
	c.mu.Lock()
	c.err = &PeerError{Address: c.addr, Err: fmt.Errorf("remote channel %s: %w", c.describe(), err)}
	c.mu.Unlock()
	c.notify()
}

// PeerError is the failure of a remote input channel whose connection to the producer's data server at
// Address ended before the end of the partition: the producer's TaskManager may be gone, which the job
// master can then find out before it restarts anything there.
type PeerError struct {
	Address string
	Err     error
}

func (e *PeerError) Error() string { return e.Err.Error() }
func (e *PeerError) Unwrap() error { return e.Err }

// consume handles the frames in p.
func (c *RemoteInputChannel) consume(p []byte) error {
	for len(p) > 0 {
		k, f, ok, err := c.dec.decode(p)
		p = p[k:]
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		switch f.typ {
		case frameBuffer:
			if err := c.receive(f.payload); err != nil {
				return err
			}
		case frameError:
			return parseErrorFrame(f.payload)
		case frameClose:
			if c.gotEnd {
				return errCleanEnd
			}
			return fmt.Errorf("%w: the server is shutting down (after %d buffers)", ErrConnectionClosed, c.received)
		}
	}
	return nil
}

// takeBuffer is the decoder's destination for Buffer frames: a buffer of the pool, which credit guarantees.
func (c *RemoteInputChannel) takeBuffer(n int) ([]byte, error) {
	if c.gotEnd {
		return nil, fmt.Errorf("%w: buffer frame after end of partition", ErrProtocol)
	}
	b := c.pool.TryRequest()
	if b == nil {
		return nil, fmt.Errorf("%w: server sent buffer %d without credit: all %d buffers of pool %s are in use",
			ErrProtocol, c.received, c.pool.Limit(), c.pool.name)
	}
	c.pending = b
	return b.data[:n], nil
}

// receive validates the buffer just decoded into c.pending and queues it.
func (c *RemoteInputChannel) receive(frame []byte) error {
	b := c.pending
	c.pending = nil
	b.data = b.data[:len(frame)]
	h, err := DecodeHeader(b.data)
	if err == nil && h.Kind == KindEvent {
		var e Event
		if e, err = DecodeEvent(b.Payload()); err == nil && e.Type == EventEndOfPartition {
			c.gotEnd = true
		}
	}
	if err != nil {
		b.Recycle()
		return fmt.Errorf("buffer %d: %w", c.received, err)
	}
	b.Header = h
	c.received++
	c.mu.Lock()
	wasEmpty := c.queue.len() == 0
	c.queue.push(b)
	c.mu.Unlock()
	if wasEmpty {
		c.notify()
	}
	return nil
}

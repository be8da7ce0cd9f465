package network

// This file is the producer side of the TCP data plane: a Server that serves the subpartitions held by a
// PartitionManager to RemoteInputChannels on other TaskManagers (protocol in wire.go).
//
// Each connection has two goroutines, both owned by the Server and stopped by Close:
//
//   - serve does the handshake (preamble and PartitionRequest under a deadline), creates the View with the
//     requested initial credit, replies RequestOK or Error, and then becomes the writer: woken by the View's
//     listener, it polls the View (which hands out a buffer only against credit), writes each buffer as a
//     Buffer frame through a bufio.Writer, recycles it, and flushes when the View has nothing more.
//   - read receives AddCredit frames (View.AddCredit, which wakes the writer) and Close.
//
// Whatever ends the connection (end of partition delivered, the client's Close or disconnect, a protocol
// violation, the View or partition released, Server.Close), the View is released; the partition is not.
// The one exception is a client that stopped reading without going away: its write times out
// (ServerOptions.WriteTimeout) and the View is failed (View.Fail), which fails a pipelined partition with a
// *ConsumerGoneError naming that client, so that its producer fails over instead of waiting for it forever.
//
// Admission. Every accepted connection counts against ServerOptions.MaxConnections (and
// MaxConnectionsPerHost, if set) until it closes; past a limit the new connection is closed at once, or, if
// a connection has sat silent in its handshake for a tenth of the HandshakeTimeout, that one is closed to
// make room (admission.go). Refusals are logged at most once per 10 s, with the count of the others; a
// connection that never completes its partition request is closed at its HandshakeTimeout.
//
// Security (credential.go). With ServerOptions.TLS, an admitted connection first completes a TLS handshake
// (TLS 1.3, the client's certificate verified if the config asks for one) inside the same HandshakeTimeout,
// so a client that cannot authenticate never gets a frame decoded. With ServerOptions.Admit, every partition
// request is shown to Admit before any partition is looked up or any view created or replaced: a refused
// request cannot fence out the consumer that holds a view, nor learn which partitions exist. Refusals are
// answered with an Error frame that says only "partition request refused: bad credential" and logged at
// most once per 10 s, like refused connections.
//
// Closing. After end-of-partition or an Error frame the server half-closes (CloseWrite) and waits, at most
// serverLinger, for the client to close, so that the last frames are not lost to a reset caused by unread
// credit announcements. On Server.Close each connection gets a best-effort Close frame.

import (
	"bufio"
	"cmp"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/mtls"
)

// Defaults of ServerOptions.
const (
	// DefaultHandshakeTimeout bounds the time from connect to a complete partition request (server) or to
	// the reply (client).
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultServerWriteBufferBytes is the size of the buffered writer of each server connection.
	DefaultServerWriteBufferBytes = 64 << 10
	// DefaultMaxConnections bounds the open connections of a data server. A TaskManager needs one per
	// remote consumer channel of the subpartitions it produces: a few hundred for a job of parallelism 32
	// with all-to-all shuffles over a handful of TaskManagers. 4096 leaves room for much more, and each
	// connection costs a file descriptor, two goroutines and a 64 KiB write buffer (about 256 MiB of
	// buffers at the limit), far below the file descriptors a process gets on Linux (Go raises the soft
	// limit to the hard one).
	DefaultMaxConnections = 4096
	// refusalLogInterval is the least time between two log lines about refused (or closed to make room)
	// connections; the lines in between are counted and reported with the next.
	refusalLogInterval = 10 * time.Second
)

const (
	// serverReadBufferBytes sizes the read buffer of a server connection, which only receives control
	// frames.
	serverReadBufferBytes = 4 << 10
	// serverLinger bounds the wait for a client to close after the server sent its last frame.
	serverLinger = 2 * time.Second
	// shutdownWriteGrace bounds the writes still attempted after Server.Close.
	shutdownWriteGrace = 100 * time.Millisecond
)

// ServerOptions configure a Server. Zero values mean the defaults.
type ServerOptions struct {
	// HandshakeTimeout bounds the time a new connection may take to send its partition request
	// (default DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// WriteBufferBytes is the size of each connection's buffered writer (default
	// DefaultServerWriteBufferBytes).
	WriteBufferBytes int
	// WriteTimeout bounds how long a write to a client may block (default DefaultServerWriteTimeout). The
	// server only sends what the client granted credit for, so a write that blocks this long means a client
	// that stopped reading without going away (a hung or stopped process, a dead peer the network has not
	// noticed): the server closes the connection and fails its view (View.Fail), so that the producer is
	// not held by it: a reconnectable partition then drops that subpartition's data until a new reader
	// comes; a pipelined one fails, and with it its producer task, with a *ConsumerGoneError.
	WriteTimeout time.Duration
	// SocketSendBufferBytes, when positive, sets the kernel send buffer (SO_SNDBUF) of every accepted
	// connection, as Flink's taskmanager.network.netty.sendReceiveBufferSize does; 0 leaves the system's
	// default and its autotuning. A smaller buffer holds less kernel memory per connection and makes a
	// client that stopped reading run into WriteTimeout after less unread data.
	SocketSendBufferBytes int
	// MaxConnections bounds the open connections (default DefaultMaxConnections). Past it a new connection
	// is closed at once, unless a connection has not sent its partition request for a tenth of the
	// HandshakeTimeout: the oldest such one is closed instead, so that a flood of silent connections cannot
	// keep the job's own channels out. Streaming connections are never closed to make room.
	MaxConnections int
	// MaxConnectionsPerHost, when positive, bounds the open connections from one remote IP address in the
	// same way; 0 means no limit but MaxConnections. It is off by default because every TaskManager of a
	// mini-cluster, and every host behind one NAT, shares one address.
	MaxConnectionsPerHost int
	// Logger receives the server's warnings (refused connections, at most one line per 10 s with the count
	// of the others); nil means slog.Default().
	Logger *slog.Logger
	// Admit, if set, decides about every partition request before the server looks at any partition. It
	// returns the PartitionManager that holds the requested partition (nil: the server's own), or an error
	// to refuse the request: the client then gets ErrBadCredential, and the error goes to the log, or,
	// for an error wrapping ErrPartitionNotFound (a job not set up here yet), the client gets that and asks
	// again as for a producer not deployed yet. Admit runs on the connection's goroutine, once per request;
	// PartitionRequest.VerifyCredential is the check it is meant to make. Nil admits every request without
	// looking at its credential.
	Admit func(PartitionRequest) (*PartitionManager, error)
	// TLS, if set, makes every connection TLS: the server performs the handshake right after admitting the
	// connection, within HandshakeTimeout, and accepts no TLS version below 1.3 whatever the config says.
	// It must hold a certificate; set ClientAuth to tls.RequireAndVerifyClientCert and ClientCAs to the
	// cluster's CA to admit only clients with a certificate from it. The config is cloned: later changes to
	// it have no effect.
	TLS *tls.Config
}

// ServerStats counts what a Server did with the connections it accepted.
type ServerStats struct {
	// Open is the number of connections open now.
	Open int
	// Refused counts connections closed at once because the server was at a limit.
	Refused uint64
	// Evicted counts connections closed, silent in their handshake, to make room for a new one.
	Evicted uint64
	// BadCredentials counts partition requests refused by ServerOptions.Admit.
	BadCredentials uint64
	// FailedTLSHandshakes counts connections closed because their TLS handshake failed or timed out.
	FailedTLSHandshakes uint64
}

// DefaultServerWriteTimeout is the default ServerOptions.WriteTimeout.
const DefaultServerWriteTimeout = 30 * time.Second

// Server serves the result partitions of one TaskManager's PartitionManager over TCP, one subpartition per
// connection.
type Server struct {
	pm   *PartitionManager
	opts ServerOptions
	ln   net.Listener

	log *slog.Logger

	quit   chan struct{} // closed by Close
	mu     sync.Mutex
	conns  map[uint64]*serverConn
	closed bool
	wg     sync.WaitGroup // accept loop and every connection goroutine
	// Guarded by mu: which connections may stay (admission.go), the counts of those that may not, and the
	// rate limits of the lines that report them.
	adm                                   *admission
	nextID                                uint64
	stats                                 ServerStats
	refusedLog, evictLog, credLog, tlsLog logLimiter
}

// NewServer listens on addr (for example "127.0.0.1:0") and serves pm's partitions until Close.
func NewServer(pm *PartitionManager, addr string, opts ServerOptions) (*Server, error) {
	if pm == nil {
		return nil, errors.New("network server: nil partition manager")
	}
	if opts.HandshakeTimeout < 0 || opts.WriteBufferBytes < 0 || opts.WriteTimeout < 0 || opts.SocketSendBufferBytes < 0 ||
		opts.MaxConnections < 0 || opts.MaxConnectionsPerHost < 0 {
		return nil, fmt.Errorf("network server: negative option in %+v", opts)
	}
	if opts.HandshakeTimeout == 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.WriteBufferBytes == 0 {
		opts.WriteBufferBytes = DefaultServerWriteBufferBytes
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultServerWriteTimeout
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	if opts.TLS != nil {
		cfg, err := serverTLSConfig(opts.TLS)
		if err != nil {
			return nil, fmt.Errorf("network server on %s: %w", addr, err)
		}
		opts.TLS = cfg
	}
	lg := cmp.Or(opts.Logger, slog.Default())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("network server: listen on %s: %w", addr, err)
	}
	s := &Server{pm: pm, opts: opts, ln: ln, log: lg.With("data_server", ln.Addr().String()), quit: make(chan struct{}),
		conns:      make(map[uint64]*serverConn),
		adm:        newAdmission(opts.MaxConnections, opts.MaxConnectionsPerHost, opts.HandshakeTimeout/10),
		refusedLog: logLimiter{every: refusalLogInterval}, evictLog: logLimiter{every: refusalLogInterval},
		credLog: logLimiter{every: refusalLogInterval}, tlsLog: logLimiter{every: refusalLogInterval}}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// serverTLSConfig checks a server's TLS config and returns the copy the server uses.
func serverTLSConfig(cfg *tls.Config) (*tls.Config, error) {
	if len(cfg.Certificates) == 0 && cfg.GetCertificate == nil && cfg.GetConfigForClient == nil {
		return nil, errors.New("TLS config without a certificate (Certificates, GetCertificate or GetConfigForClient)")
	}
	if cfg.MaxVersion != 0 && cfg.MaxVersion < tls.VersionTLS13 {
		return nil, fmt.Errorf("TLS config allows at most version %s; the data plane requires TLS 1.3", tls.VersionName(cfg.MaxVersion))
	}
	cfg = cfg.Clone()
	cfg.MinVersion = tls.VersionTLS13
	return cfg, nil
}

// refusedCredential counts and logs (rate-limited) a partition request Admit refused for why.
func (s *Server) refusedCredential(c *serverConn, why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.BadCredentials++
	if ok, n := s.credLog.allow(time.Now()); ok {
		s.log.Warn("data server refused a partition request", "remote", c.conn.RemoteAddr().String(), "reason", why.Error(),
			"refused_before_unreported", n, "refused_total", s.stats.BadCredentials)
	}
}

// failedTLS counts and logs (rate-limited) a connection whose TLS handshake failed.
func (s *Server) failedTLS(c *serverConn, why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns[c.id] != c {
		return // closed to make room, which was counted and logged then
	}
	s.stats.FailedTLSHandshakes++
	if ok, n := s.tlsLog.allow(time.Now()); ok {
		s.log.Warn("data server closed a connection whose TLS handshake failed", "remote", c.conn.RemoteAddr().String(),
			"reason", why.Error(), "failed_before_unreported", n, "failed_total", s.stats.FailedTLSHandshakes)
	}
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, closes every connection (releasing their views, not the partitions) and waits for
// all of the server's goroutines. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.quit)
	conns := make([]*serverConn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	for _, c := range conns {
		c.shutdown()
	}
	s.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("network server %s: close listener: %w", s.Addr(), err)
	}
	return nil
}

// activeConns returns the number of open connections (tests).
func (s *Server) activeConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Stats returns the server's connection counts.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Open = s.adm.open()
	return st
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off and try again, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-s.quit:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		if !s.admit(nc) {
			return
		}
	}
}

// admit decides whether the server keeps the accepted connection nc, closing it (or, to make room for it, an
// older connection silent in its handshake) past the limits, and starts serving it if it stays. It returns
// false once the server is closed.
func (s *Server) admit(nc net.Conn) bool {
	now := time.Now()
	host := nc.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return false
	}
	s.nextID++
	id := s.nextID
	d := s.adm.accept(id, host, now)
	var victim *serverConn
	if d.evict != 0 {
		victim = s.conns[d.evict]
		delete(s.conns, d.evict)
		s.stats.Evicted++
		if ok, n := s.evictLog.allow(now); ok {
			s.log.Warn("data server closed a connection that sent no partition request, to make room for a new one",
				"limit", s.opts.MaxConnections, "open", s.adm.open(), "closed_before_unreported", n, "closed_total", s.stats.Evicted)
		}
	}
	if !d.admit {
		s.stats.Refused++
		if ok, n := s.refusedLog.allow(now); ok {
			s.log.Warn("data server refused a connection", "remote", nc.RemoteAddr().String(), "reason", d.reason,
				"refused_before_unreported", n, "refused_total", s.stats.Refused)
		}
		s.mu.Unlock()
		nc.Close()
		if victim != nil {
			victim.conn.Close()
		}
		return true
	}
	if tc, ok := nc.(*net.TCPConn); ok && s.opts.SocketSendBufferBytes > 0 {
		_ = tc.SetWriteBuffer(s.opts.SocketSendBufferBytes)
	}
	c := &serverConn{
		srv:    s,
		id:     id,
		conn:   nc,
		stream: nc,
		wake:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	s.conns[id] = c
	s.wg.Add(1)
	s.mu.Unlock()
	if victim != nil {
		// Its serve goroutine, reading the handshake or lingering after an error reply, fails and returns.
		victim.conn.Close()
	}
	go c.serve()
	return true
}

// streaming tells the admission that c has its view: it is no longer closed to make room.
func (s *Server) streaming(c *serverConn) {
	s.mu.Lock()
	s.adm.streaming(c.id)
	s.mu.Unlock()
}

func (s *Server) forget(c *serverConn) {
	s.mu.Lock()
	if s.conns[c.id] == c {
		delete(s.conns, c.id)
	}
	s.adm.closed(c.id) // a no-op for a connection closed to make room: it was forgotten then
	s.mu.Unlock()
}

// serverConn is one client connection: one subpartition view streamed to one consumer attempt.
type serverConn struct {
	srv *Server
	id  uint64 // the connection's name in the server's admission
	// conn is the accepted socket: other goroutines close it and set its deadlines (which a TLS
	// connection on top of it obeys too), so it never changes.
	conn net.Conn
	// stream is what frames are read from and written to: conn itself, or with TLS the *tls.Conn over it
	// once its handshake is done. Only the connection's own goroutines use it.
	stream net.Conn
	view   *View
	req    partitionRequest
	// bufferSize is the largest Buffer frame announced to the client.
	bufferSize int
	dec        *frameDecoder
	bw         *bufio.Writer
	hdr        []byte // scratch for frame headers

	wake chan struct{} // the view may have data or credit
	quit chan struct{} // closed by Server.Close
	done chan struct{} // closed when the reader stopped
	// readErr is why the reader stopped (nil for a clean Close or EOF); written before done is closed.
	readErr  error
	quitOnce sync.Once
	// deadlineMu orders the writer's deadlines with shutdown's, so that a write timeout set after shutdown
	// does not extend its grace.
	deadlineMu sync.Mutex
	armedAt    time.Time // when the writer last set its deadline (writer goroutine only)
}

// armWriteDeadline gives the writes that follow the server's write timeout, unless shutdown gave them less.
// A writer that streams without pause re-arms it every quarter of the timeout, so that only a write that
// makes no progress for that long runs into it.
func (c *serverConn) armWriteDeadline() {
	now := time.Now()
	if now.Sub(c.armedAt) < c.srv.opts.WriteTimeout/4 {
		return
	}
	c.armedAt = now
	c.deadlineMu.Lock()
	defer c.deadlineMu.Unlock()
	select {
	case <-c.quit:
	default:
		_ = c.conn.SetWriteDeadline(now.Add(c.srv.opts.WriteTimeout))
	}
}

// onAvailable is the view's listener: it wakes the writer without blocking.
func (c *serverConn) onAvailable() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// shutdown makes the connection's goroutines stop soon: the reader at once, the writer after a final Close
// frame written within shutdownWriteGrace.
func (c *serverConn) shutdown() {
	c.quitOnce.Do(func() {
		c.deadlineMu.Lock()
		close(c.quit)
		_ = c.conn.SetWriteDeadline(time.Now().Add(shutdownWriteGrace))
		c.deadlineMu.Unlock()
		_ = c.conn.SetReadDeadline(time.Now())
	})
}

func (c *serverConn) serve() {
	defer c.srv.wg.Done()
	defer c.srv.forget(c)
	defer c.conn.Close()
	rbuf := make([]byte, serverReadBufferBytes)
	leftover, err := c.handshake(rbuf)
	if err != nil {
		return
	}
	c.srv.streaming(c)
	defer c.view.Release()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		c.read(rbuf, leftover)
	}()
	if err := c.write(); err != nil {
		if gone := c.consumerGone(err); gone != nil {
			c.view.Fail(gone) // before the deferred Release, which is then a no-op
		}
	}
	c.conn.Close()
	<-readerDone
}

// consumerGone tells whether the write error err means the consumer stopped reading without going away,
// and if so returns the *ConsumerGoneError that names it. Only a write that timed out while the server was
// not shutting down says so: the server writes only against credit, and a consumer's reader always has a
// buffer for every credit it granted, so a live consumer takes what it asked for. Any other write error
// (reset, broken pipe) means the consumer closed its side: it ended and says so itself.
func (c *serverConn) consumerGone(err error) error {
	select {
	case <-c.quit:
		return nil // shutdown set a short deadline on purpose
	default:
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return &ConsumerGoneError{
		Partition: c.req.partition, Subpartition: c.req.subpartition, Consumer: c.req.consumer,
		Address: c.conn.RemoteAddr().String(), Idle: c.srv.opts.WriteTimeout, Cause: err,
	}
}

// handshake reads the preamble and partition request, creates the view and replies. It returns the bytes
// received after the request. On failure it has replied (if it could) and the connection is to be closed.
func (c *serverConn) handshake(rbuf []byte) ([]byte, error) {
	// The deadline covers writes too, for the TLS handshake's; the writer arms its own before streaming.
	_ = c.conn.SetDeadline(time.Now().Add(c.srv.opts.HandshakeTimeout))
	select {
	case <-c.quit: // Server.Close ran before the deadline was set
		return nil, fmt.Errorf("network server: shutting down")
	default:
	}
	if cfg := c.srv.opts.TLS; cfg != nil {
		tc := tls.Server(c.conn, cfg)
		if err := tc.Handshake(); err != nil {
			if mtls.ClosedEarly(err) {
				// A port probe (a health check that connects and closes) is no refusal.
				c.srv.log.Debug("data server: connection closed before its TLS handshake", "remote", c.conn.RemoteAddr().String())
				return nil, fmt.Errorf("network server: connection from %s closed before its TLS handshake: %w", c.conn.RemoteAddr(), err)
			}
			err = fmt.Errorf("network server: TLS handshake with %s: %w", c.conn.RemoteAddr(), err)
			select {
			case <-c.quit:
			default:
				c.srv.failedTLS(c, err)
			}
			return nil, err
		}
		c.stream = tc
	}
	c.dec = newFrameDecoder(true, serverHandshakeFrames, 0)
	var (
		f    frame
		rest []byte
		got  bool
	)
	for !got {
		n, err := c.stream.Read(rbuf)
		p := rbuf[:n]
		for len(p) > 0 && !got {
			k, fr, ok, derr := c.dec.decode(p)
			p = p[k:]
			if derr != nil {
				c.replyError(derr)
				return nil, derr
			}
			if ok {
				f, rest, got = fr, p, true
			}
		}
		if !got && err != nil {
			return nil, fmt.Errorf("network server: handshake with %s: %w", c.conn.RemoteAddr(), err)
		}
	}
	c.req = parsePartitionRequest(f.payload)
	_ = c.conn.SetReadDeadline(time.Time{})
	c.armWriteDeadline() // the writer's own deadline replaces the handshake's
	c.dec.allowed = serverStreamFrames
	c.bw = bufio.NewWriterSize(c.stream, c.srv.opts.WriteBufferBytes)
	c.hdr = make([]byte, 0, frameHeaderSize)

	view, bufferSize, err := c.createView()
	if err != nil {
		c.replyError(err)
		return nil, err
	}
	c.view, c.bufferSize = view, bufferSize
	c.hdr = appendRequestOK(c.hdr[:0], bufferSize)
	if _, err := c.bw.Write(c.hdr); err != nil {
		view.Release()
		return nil, err
	}
	// The reply is flushed by the writer, with the first buffers if any are ready.
	return rest, nil
}

// createView admits the request, validates it and attaches the consumer's view. It returns the producer's
// buffer size.
func (c *serverConn) createView() (*View, int, error) {
	r := c.req
	pm, err := c.admitRequest()
	if err != nil {
		return nil, 0, err
	}
	p, err := pm.Lookup(r.partition)
	if err != nil {
		return nil, 0, err
	}
	if r.subpartition < 0 || r.subpartition >= p.NumSubpartitions() {
		return nil, 0, fmt.Errorf("partition %s has %d subpartitions, %s asked for subpartition %d: %w",
			r.partition, p.NumSubpartitions(), r.consumer, r.subpartition, ErrInvalidRequest)
	}
	bufferSize := p.bufferSize()
	if r.bufferSize < bufferSize || r.bufferSize > maxWireBufferSize {
		return nil, 0, fmt.Errorf("partition %s writes buffers of %d bytes, consumer %s has buffers of %d bytes: %w",
			r.partition, bufferSize, r.consumer, r.bufferSize, ErrInvalidRequest)
	}
	v, err := p.CreateViewFrom(r.subpartition, r.consumer, r.credit, c.onAvailable, r.replayFrom)
	if err != nil {
		return nil, 0, err
	}
	return v, bufferSize, nil
}

// admitRequest asks ServerOptions.Admit about the request, before anything looks at a partition, and
// returns the PartitionManager to serve it from. A refusal comes back as ErrBadCredential alone, so that the
// Error frame says nothing of why; the reason is logged.
func (c *serverConn) admitRequest() (*PartitionManager, error) {
	admit := c.srv.opts.Admit
	if admit == nil {
		return c.srv.pm, nil
	}
	r := c.req
	pm, err := admit(PartitionRequest{
		Job: r.job, Partition: r.partition, Subpartition: r.subpartition, Consumer: r.consumer,
		Credential: r.credential, Remote: c.conn.RemoteAddr().String(),
	})
	switch {
	case err != nil && errors.Is(err, ErrPartitionNotFound):
		return nil, err
	case err != nil:
		c.srv.refusedCredential(c, err)
		return nil, ErrBadCredential
	case pm == nil:
		return c.srv.pm, nil
	}
	return pm, nil
}

// replyError sends an Error frame for err, then lingers until the client closes.
func (c *serverConn) replyError(err error) {
	w := c.bw
	if w == nil {
		w = bufio.NewWriterSize(c.stream, frameHeaderSize+maxControlPayload)
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(serverLinger))
	if _, werr := w.Write(appendErrorFrame(nil, codeOf(err), err.Error())); werr != nil {
		return
	}
	if w.Flush() != nil {
		return
	}
	c.linger(nil)
}

// linger half-closes the connection and waits (bounded) until the client has closed its side. If done is
// non-nil the reader goroutine is draining the connection and signals by closing done; otherwise linger
// drains it itself.
func (c *serverConn) linger(done <-chan struct{}) {
	if tc, ok := c.stream.(*tls.Conn); ok {
		_ = tc.CloseWrite() // close_notify: the client's TLS layer reports a clean end, not a truncation
	}
	if tc, ok := c.conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	select {
	case <-c.quit:
		return
	default:
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(serverLinger))
	select {
	case <-c.quit: // shutdown may have set an earlier deadline before the line above
		return
	default:
	}
	if done != nil {
		select {
		case <-done:
		case <-c.quit:
		}
		return
	}
	var scratch [256]byte
	for {
		if _, err := c.stream.Read(scratch[:]); err != nil {
			return
		}
	}
}

// read receives credit announcements until the connection ends, then closes done.
func (c *serverConn) read(rbuf, leftover []byte) {
	err := c.consume(leftover)
	for err == nil {
		n, rerr := c.stream.Read(rbuf)
		if n > 0 {
			err = c.consume(rbuf[:n])
		}
		if err == nil && rerr != nil {
			if errors.Is(rerr, io.EOF) {
				break
			}
			err = rerr
		}
	}
	if errors.Is(err, errClientClosed) {
		err = nil
	}
	c.readErr = err
	close(c.done)
}

// errClientClosed ends the reader when the client sent Close.
var errClientClosed = errors.New("client closed")

// consume handles the frames in p.
func (c *serverConn) consume(p []byte) error {
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
		case frameAddCredit:
			if n := binary.LittleEndian.Uint32(f.payload); n > 0 {
				c.view.AddCredit(int(n))
			}
		case frameClose:
			return errClientClosed
		}
	}
	return nil
}

// write streams the view's buffers until the connection ends for any reason. It returns the error of a
// failed write to the socket, nil for every other end.
func (c *serverConn) write() error {
	for {
		for {
			b, err := c.view.Poll()
			if err != nil {
				// Partition released, or the view replaced by a newer attempt: tell the client why.
				c.sendError(err)
				return nil
			}
			if b == nil {
				break
			}
			if b.Len() > c.bufferSize {
				err := fmt.Errorf("partition %s: buffer of %d bytes exceeds the partition's buffer size of %d bytes: %w",
					c.req.partition, b.Len(), c.bufferSize, ErrCorrupt)
				b.Recycle()
				c.sendError(err)
				return nil
			}
			end := isEndOfPartition(b)
			werr := c.writeBuffer(b)
			b.Recycle()
			if werr != nil {
				return werr
			}
			if end {
				if err := c.bw.Flush(); err != nil {
					return err
				}
				c.linger(c.done)
				return nil
			}
		}
		if c.bw.Buffered() > 0 {
			if err := c.bw.Flush(); err != nil {
				return err
			}
		}
		select {
		case <-c.wake:
		case <-c.quit:
			c.sendClose()
			return nil
		case <-c.done:
			select {
			case <-c.quit:
				c.sendClose()
			default:
				if errors.Is(c.readErr, ErrProtocol) {
					c.sendError(c.readErr)
				}
			}
			return nil
		}
	}
}

// writeBuffer writes one Buffer frame into the buffered writer.
func (c *serverConn) writeBuffer(b *Buffer) error {
	c.armWriteDeadline()
	c.hdr = appendFrameHeader(c.hdr[:0], frameBuffer, b.Len())
	if _, err := c.bw.Write(c.hdr); err != nil {
		return err
	}
	_, err := c.bw.Write(b.Bytes())
	return err
}

// sendError writes an Error frame for err and lingers until the client closed.
func (c *serverConn) sendError(err error) {
	_ = c.conn.SetWriteDeadline(time.Now().Add(serverLinger))
	if _, werr := c.bw.Write(appendErrorFrame(c.hdr[:0], codeOf(err), err.Error())); werr != nil {
		return
	}
	if c.bw.Flush() == nil {
		c.linger(c.done)
	}
}

// sendClose writes a best-effort Close frame (the write deadline was set by shutdown).
func (c *serverConn) sendClose() {
	if _, err := c.bw.Write(closeFrame); err == nil {
		_ = c.bw.Flush()
	}
}

// isEndOfPartition reports whether b is the end-of-partition event.
func isEndOfPartition(b *Buffer) bool {
	p := b.Payload()
	return b.Kind == KindEvent && len(p) > 0 && EventType(p[0]) == EventEndOfPartition
}

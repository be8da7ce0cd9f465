package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc/pb"
)

// Keepalive is the interval of gRPC's own pings on an idle connection, and how long a ping may go
// unanswered: a backstop for half-open connections that the session's heartbeats (the dispatcher's, every
// 500 ms) would catch first. A peer killed outright needs neither: its kernel resets the connection.
const Keepalive = 10 * time.Second

// closeGrace bounds how long a session closed by its own side goes on sending what it had queued before
// the stream is torn down anyway (a peer that does not read cannot hold it open).
const closeGrace = 5 * time.Second

// ServerOptions are the options a *grpc.Server that serves sessions must have: the message limit both ways
// and keepalive pings that agree with DialGateway's (a server that does not permit them would close the
// connection of a client that pings every Keepalive). The caller adds its credentials.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: Keepalive, Timeout: Keepalive}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: Keepalive / 2, PermitWithoutStream: true}),
	}
}

// DialOptions are the options every connection to a JobManager has (DialGateway adds them itself; a
// JobClient's connection should be made with them): the message limit both ways and keepalive pings. The
// caller adds its transport credentials (insecure on loopback, or TLS).
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: Keepalive, Timeout: Keepalive, PermitWithoutStream: true}),
	}
}

// sessionConfig is what tests may change about a session.
type sessionConfig struct {
	queue int           // bound of the send queue (protocol.SendQueue)
	grace time.Duration // closeGrace
}

var defaultSessionConfig = sessionConfig{queue: protocol.SendQueue, grace: closeGrace}

// GatewayServer serves TaskManagerGateway: every Connect stream a TaskManager opens is one
// protocol.Session, handed to accept.
type GatewayServer struct {
	pb.UnimplementedTaskManagerGatewayServer
	accept func(protocol.Session)
	cfg    sessionConfig
}

// NewGatewayServer returns a gateway that hands every session to accept (not nil), which must not wait for
// long: it gives the session to its owner, which reads it on its own goroutine. Register it on a
// *grpc.Server made with ServerOptions; the caller owns the server: its listener, credentials and
// lifetime. Stopping the server (Stop) ends every session at once; closing only the listener ends none, and
// GracefulStop waits until every session was closed.
func NewGatewayServer(accept func(protocol.Session)) *GatewayServer {
	return &GatewayServer{accept: accept, cfg: defaultSessionConfig}
}

// Register registers the gateway on s.
func (g *GatewayServer) Register(s grpc.ServiceRegistrar) {
	pb.RegisterTaskManagerGatewayServer(s, g)
}

// Connect implements pb.TaskManagerGatewayServer: it serves one session and returns when the session ended
// (after the last of what the JobManager queued was sent, for a session it closed; at once otherwise).
func (g *GatewayServer) Connect(st grpc.BidiStreamingServer[pb.FromTaskManager, pb.ToTaskManager]) error {
	s := newStreamSession(g.cfg, encodeToTaskManager, decodeFromTaskManager, goodbyeToTaskManager)
	go s.read(st.Recv)
	go s.send(st.Send, nil)
	g.accept(s)
	select {
	case <-s.ended:
	case <-st.Context().Done():
		s.end(fmt.Errorf("control stream closed: the TaskManager's connection ended (%w)", st.Context().Err()), false)
	}
	if s.graceful() {
		t := time.NewTimer(g.cfg.grace)
		defer t.Stop()
		select {
		case <-s.sent:
			return nil
		case <-t.C:
		}
	}
	// The sender may still be blocked in Send on a peer that does not read: returning cancels the stream,
	// which unblocks it. The status tells the TaskManager why, if it still reads.
	return status.Error(codes.Aborted, s.reason().Error())
}

// DialGateway opens a session with the JobManager at addr (host:port) for a TaskManager. ctx bounds the
// dialing only; the session lasts until either side closes it or the connection breaks, which ends it at
// once (a JobManager killed outright resets the connection). opts come after DialOptions and must include
// the transport credentials.
func DialGateway(ctx context.Context, addr string, opts ...grpc.DialOption) (protocol.Session, error) {
	return dialGateway(ctx, addr, defaultSessionConfig, opts...)
}

func dialGateway(ctx context.Context, addr string, cfg sessionConfig, opts ...grpc.DialOption) (protocol.Session, error) {
	conn, err := grpc.NewClient(addr, append(DialOptions(), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to the JobManager at %s: %w", addr, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	st, err := pb.NewTaskManagerGatewayClient(conn).Connect(sctx)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("connect to the JobManager at %s: %w", addr, err)
	}
	s := newStreamSession(cfg, encodeFromTaskManager, decodeToTaskManager, goodbyeFromTaskManager)
	s.cancel = cancel
	go s.read(st.Recv)
	go func() {
		s.send(st.Send, st.CloseSend)
		// The JobManager ends the stream when it has read the goodbye; the grace timer or an abort cancels
		// it otherwise. Either way the reader returns, and then the connection can go.
		<-s.readDone
		cancel()
		s.mu.Lock()
		if s.graceTimer != nil {
			s.graceTimer.Stop()
		}
		s.mu.Unlock()
		_ = conn.Close()
	}()
	return s, nil
}

// streamSession is a protocol.Session over one gRPC stream, either side's: Out is what this side sends,
// In what it receives. One goroutine reads the stream and hands each message to Recv; one sends what Send
// queued.
type streamSession[Out, In proto.Message] struct {
	cfg     sessionConfig
	encode  func(protocol.Envelope) (Out, error)
	decode  func(In) (protocol.Envelope, *pb.Goodbye, error)
	goodbye func(reason *string) Out
	// cancel tears the stream down (client side; the server's stream ends when Connect returns); after a
	// Close, graceTimer calls it when the queue took too long to drain.
	cancel     context.CancelFunc
	graceTimer *time.Timer

	out      *queue[Out]
	in       chan protocol.Envelope // unbuffered: the reader waits for Recv, and gRPC's flow control for it
	ended    chan struct{}          // closed when the session ended
	sent     chan struct{}          // closed when the sender returned
	readDone chan struct{}          // closed when the reader returned

	mu      sync.Mutex
	err     error // why it ended
	closing bool  // this side closed it: the sender drains its queue and says goodbye
}

func newStreamSession[Out, In proto.Message](cfg sessionConfig, encode func(protocol.Envelope) (Out, error),
	decode func(In) (protocol.Envelope, *pb.Goodbye, error), goodbye func(*string) Out) *streamSession[Out, In] {
	return &streamSession[Out, In]{cfg: cfg, encode: encode, decode: decode, goodbye: goodbye, out: newQueue[Out](cfg.queue),
		in: make(chan protocol.Envelope), ended: make(chan struct{}), sent: make(chan struct{}), readDone: make(chan struct{})}
}

// end ends the session with err; closing says this side closed it. Only the first end counts; it returns
// the reason the session ended with.
func (s *streamSession[Out, In]) end(err error, closing bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.err, s.closing = err, closing
	s.out.close(err, closing)
	close(s.ended)
	if s.cancel != nil {
		if closing {
			s.graceTimer = time.AfterFunc(s.cfg.grace, s.cancel)
		} else {
			s.cancel()
		}
	}
	return err
}

func (s *streamSession[Out, In]) reason() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *streamSession[Out, In]) graceful() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Send implements protocol.Session: it encodes env and queues it for the sender goroutine.
func (s *streamSession[Out, In]) Send(env protocol.Envelope) error {
	select {
	case <-s.ended:
		return s.reason()
	default:
	}
	m, err := s.encode(env)
	if err != nil {
		return s.end(err, false)
	}
	if n := proto.Size(m); n > MaxMessageBytes {
		return s.end(tooBig(env.Body, n), false)
	}
	full, err := s.out.push(m)
	if err != nil {
		return err
	}
	if full {
		return s.end(notReading(s.cfg.queue), false)
	}
	return nil
}

// Recv implements protocol.Session.
func (s *streamSession[Out, In]) Recv() (protocol.Envelope, error) {
	select {
	case <-s.ended:
		return protocol.Envelope{}, s.reason()
	default:
	}
	select {
	case env := <-s.in:
		return env, nil
	case <-s.ended:
		return protocol.Envelope{}, s.reason()
	}
}

// Close implements protocol.Session: what was queued is still sent (within closeGrace), then a goodbye
// carrying reason, which the peer's Recv returns.
func (s *streamSession[Out, In]) Close(reason error) {
	if reason == nil {
		reason = io.EOF
	}
	s.end(reason, true)
}

// read runs on its own goroutine until the stream fails, which it does soon after the session ended
// (the stream is cancelled, or Connect returned). Messages that arrive after the end are dropped.
func (s *streamSession[Out, In]) read(recv func() (In, error)) {
	defer close(s.readDone)
	for {
		m, err := recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("control stream closed: %w", err)
			}
			s.end(err, false)
			return
		}
		env, bye, err := s.decode(m)
		switch {
		case err != nil:
			s.end(fmt.Errorf("malformed message from the peer: %w", err), false)
		case bye != nil:
			if bye.Reason == nil {
				s.end(io.EOF, false)
			} else {
				s.end(errors.New(*bye.Reason), false)
			}
		default:
			select {
			case s.in <- env:
			case <-s.ended:
			}
		}
	}
}

// send runs on its own goroutine: it sends what Send queued, in order, until the session ends. A session
// this side closed is drained first and ends with a goodbye (and closeSend, on the client side).
func (s *streamSession[Out, In]) send(send func(Out) error, closeSend func() error) {
	defer close(s.sent)
	for {
		m, err := s.out.pop()
		if err != nil {
			break
		}
		if err := send(m); err != nil {
			s.end(fmt.Errorf("control stream closed: %w", err), false)
			return
		}
	}
	s.mu.Lock()
	closing, reason := s.closing, s.err
	s.mu.Unlock()
	if !closing {
		return
	}
	var text *string
	if !errors.Is(reason, io.EOF) {
		t := reason.Error()
		text = &t
	}
	if send(s.goodbye(text)) == nil && closeSend != nil {
		_ = closeSend()
	}
}

func goodbyeToTaskManager(reason *string) *pb.ToTaskManager {
	return &pb.ToTaskManager{Body: &pb.ToTaskManager_Goodbye{Goodbye: &pb.Goodbye{Reason: reason}}}
}

func goodbyeFromTaskManager(reason *string) *pb.FromTaskManager {
	return &pb.FromTaskManager{Body: &pb.FromTaskManager_Goodbye{Goodbye: &pb.Goodbye{Reason: reason}}}
}

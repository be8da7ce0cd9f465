package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/runnel-dev/runnel/internal/mtls"
)

// ServerCredentials returns gRPC server credentials for cfg (the server's mutual-TLS config) that log
// every failed handshake to refusals: gRPC's server handshakes inside its transport and logs nothing of
// it.
func ServerCredentials(cfg *tls.Config, refusals *mtls.RefusalLog) credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: credentials.NewTLS(cfg), refusals: refusals}
}

type serverCreds struct {
	credentials.TransportCredentials
	refusals *mtls.RefusalLog
}

func (c *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil && !errors.Is(err, net.ErrClosed) { // closed: the server stops
		c.refusals.Failed(raw.RemoteAddr().String(), err)
	}
	return conn, info, err
}

func (c *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: c.TransportCredentials.Clone(), refusals: c.refusals}
}

// ClientCredentials are gRPC client credentials for one connection (a grpc.ClientConn) to a server that
// speaks first, as gRPC servers do (their SETTINGS frame). A handshake fails with an *mtls.HandshakeError
// naming the peer, and it is not done until the server's first bytes came: in TLS 1.3 the server checks
// the client's certificate after the client's side of the handshake ended, and a server that refuses it
// sends an alert in place of those bytes, which thus fails the handshake; without the wait the client's
// first write (gRPC's preface) would fail first, with a broken pipe or a reset that does not say TLS.
// Explain turns a call's failure into the handshake's error when that was the cause.
type ClientCredentials struct {
	credentials.TransportCredentials
	peer string
	rec  *lastFailure // shared with the clones
}

// lastFailure is the last handshake's failure; nil after one succeeded.
type lastFailure struct {
	mu   sync.Mutex
	last *mtls.HandshakeError
}

// NewClientCredentials returns the credentials of a connection to peer ("the JobManager") with cfg, the
// client's mutual-TLS config.
func NewClientCredentials(cfg *tls.Config, peer string) *ClientCredentials {
	return &ClientCredentials{TransportCredentials: credentials.NewTLS(cfg), peer: peer, rec: &lastFailure{}}
}

// ClientHandshake implements credentials.TransportCredentials.
func (c *ClientCredentials) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err == nil {
		var first []byte
		if first, err = firstBytes(ctx, conn); err == nil {
			c.record(nil)
			return &prefixedConn{Conn: conn, pending: first}, info, nil
		}
		conn.Close()
	}
	if ctx.Err() != nil {
		return nil, nil, err // the connection was given up: no failure of the handshake's own
	}
	he := &mtls.HandshakeError{Peer: c.peer, Addr: raw.RemoteAddr().String(), Err: err}
	c.record(he)
	return nil, nil, he
}

// Clone implements credentials.TransportCredentials: the clone's handshakes are explained by the
// original's Explain too.
func (c *ClientCredentials) Clone() credentials.TransportCredentials {
	return &ClientCredentials{TransportCredentials: c.TransportCredentials.Clone(), peer: c.peer, rec: c.rec}
}

func (c *ClientCredentials) record(he *mtls.HandshakeError) {
	c.rec.mu.Lock()
	c.rec.last = he
	c.rec.mu.Unlock()
}

// Explain returns err, a call's failure on a connection made with c, as the failure of the last
// handshake when the call failed for want of a connection (codes.Unavailable) and that handshake failed:
// the result's text is the *mtls.HandshakeError's, and it wraps both (errors.Is and errors.As see each). Any
// other err is returned as it is.
func (c *ClientCredentials) Explain(err error) error {
	if c == nil || err == nil || status.Code(err) != codes.Unavailable {
		return err
	}
	c.rec.mu.Lock()
	he := c.rec.last
	c.rec.mu.Unlock()
	if he == nil {
		return err
	}
	return &explained{he: he, call: err}
}

type explained struct {
	he   *mtls.HandshakeError
	call error
}

func (e *explained) Error() string   { return e.he.Error() }
func (e *explained) Unwrap() []error { return []error{e.he, e.call} }

// firstBytes waits, until ctx ends, for the first bytes conn receives after its handshake, and returns them.
func firstBytes(ctx context.Context, conn net.Conn) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if !stop() {
		return nil, context.Cause(ctx) // given up; the connection is closed with its deadline in the past
	}
	if n > 0 {
		return buf[:n], nil
	}
	return nil, err
}

// prefixedConn is a connection whose first reads return the bytes firstBytes took.
type prefixedConn struct {
	net.Conn
	pending []byte
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

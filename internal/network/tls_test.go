package network

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/mtls/mtlstest"
)

// mtlsServerOptions are a data server's options for mutual TLS with ca: a certificate of ca, clients of ca
// only; the version is left to the server.
func mtlsServerOptions(t testing.TB, ca *mtlstest.CA) ServerOptions {
	return ServerOptions{TLS: &tls.Config{
		Certificates: []tls.Certificate{ca.Issue(t, "data server")},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool,
	}}
}

// mtlsDialOptions are a channel's options for mutual TLS with ca: a certificate of ca, servers of ca only.
func mtlsDialOptions(t testing.TB, ca *mtlstest.CA) DialOptions {
	return DialOptions{TLS: &tls.Config{
		RootCAs:      ca.Pool,
		Certificates: []tls.Certificate{ca.Issue(t, "consumer")},
	}}
}

// TestTLSChannelDeliversEveryRecord streams records that span buffers over a mutual-TLS channel (with
// credentials) and checks the connection really is TLS 1.3 with the client's certificate verified, even
// when both configs would allow older versions.
func TestTLSChannelDeliversEveryRecord(t *testing.T) {
	ca := mtlstest.NewCA(t, "runnel test CA")
	so, do := mtlsServerOptions(t, ca), mtlsDialOptions(t, ca)
	so.TLS.MinVersion, do.TLS.MinVersion = tls.VersionTLS12, tls.VersionTLS12
	var peers atomic.Int64
	so.TLS.VerifyConnection = func(cs tls.ConnectionState) error {
		if cs.Version == tls.VersionTLS13 && len(cs.PeerCertificates) == 1 && cs.PeerCertificates[0].Subject.CommonName == "consumer" {
			peers.Add(1)
		}
		return nil
	}
	so.Admit = func(r PartitionRequest) (*PartitionManager, error) { return nil, r.VerifyCredential(testSecret) }
	do.Job = testJob
	env := newTestEnvWith(t, so, do)
	p, _ := env.partition(1, 256, 8, PartitionOptions{})
	sizes := sizesOf(5000, 700) // up to almost three buffers a record
	r, err := openReader(t, env, p.ID(), 0, 4, 256)
	if err != nil {
		t.Fatal(err)
	}
	produced := produce(p, sizes, true)
	if err := r.readToEnd(); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, r.got, sizes)
	wait(t, produced)
	rc := r.ch.(*RemoteInputChannel)
	tc, ok := rc.conn.(*tls.Conn)
	if !ok {
		t.Fatalf("the channel's connection is a %T, not TLS", rc.conn)
	}
	if v := tc.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Fatalf("negotiated %s, want TLS 1.3", tls.VersionName(v))
	}
	if peers.Load() != 1 {
		t.Fatalf("the server verified %d TLS 1.3 clients with the consumer's certificate, want 1", peers.Load())
	}
	if so.TLS.MinVersion != tls.VersionTLS12 || do.TLS.ServerName != "" {
		t.Fatal("the server or the dialer changed the caller's TLS config instead of a copy")
	}
}

// TestTLSRefusesUnauthenticatedPeers: with mutual TLS, a client without a certificate, with one from
// another CA, or without TLS at all, and a client that does not trust the server's CA, never get a
// partition request to the server: Admit is never asked, no view is created, no Runnel frame comes back,
// the dial fails at once, and the server counts and logs (once) the failed handshakes.
func TestTLSRefusesUnauthenticatedPeers(t *testing.T) {
	defer goleak.VerifyNone(t)
	ca, other := mtlstest.NewCA(t, "cluster CA"), mtlstest.NewCA(t, "another CA")
	var logs syncBuffer
	so := mtlsServerOptions(t, ca)
	so.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	var admits atomic.Int64
	so.Admit = func(PartitionRequest) (*PartitionManager, error) { admits.Add(1); return nil, nil }
	pm := NewPartitionManager()
	srv, err := NewServer(pm, "127.0.0.1:0", so)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	pool := NewBufferPool("producer", 128, 4)
	p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, Reconnectable: true}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pm.Register(p); err != nil {
		t.Fatal(err)
	}
	defer p.Release()

	good := mtlsDialOptions(t, ca).TLS
	otherCert := other.Issue(t, "intruder")
	cases := []struct {
		name string
		tls  *tls.Config
		want string // in the client's error
	}{
		{"no client certificate", &tls.Config{RootCAs: ca.Pool}, "certificate required"},
		// GetClientCertificate, because Go's client would not even send a certificate the server's request
		// does not ask for; an attacker would.
		{"certificate from another CA", &tls.Config{RootCAs: ca.Pool, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &otherCert, nil
		}}, "unknown certificate authority"},
		{"server not trusted", &tls.Config{RootCAs: other.Pool, Certificates: good.Certificates}, "x509: certificate signed by unknown authority"},
		{"no TLS", nil, ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			cpool := NewBufferPool("consumer", 128, 1)
			owner := testConsumer
			owner.Number = int32(i + 1)
			ch, err := DialRemoteChannel(context.Background(), srv.Addr(), testPID, 0, owner, cpool, 1, nil,
				DialOptions{TLS: tc.tls, Timeout: testWait})
			if err == nil {
				ch.Release()
				t.Fatal("the channel was opened")
			}
			// A TLS 1.3 client learns of its rejected certificate from the alert that answers its first
			// read; a reset may overtake it, so its text is checked only when it arrived.
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) && !strings.Contains(err.Error(), "reset") {
				t.Errorf("got %v, want it to say %q", err, tc.want)
			}
			if tc.tls == nil && !errors.Is(err, ErrConnectionClosed) && !errors.Is(err, ErrProtocol) && !strings.Contains(err.Error(), "reset") {
				t.Errorf("plain client: got %v, want the connection closed without a reply", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("refused after %v: retried instead of failing at once", d)
			}
			waitFailedTLS(t, srv, uint64(i+1))
		})
	}
	// A plain client that speaks the protocol gets no Runnel frame back: at most a TLS alert.
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testWait))
	if _, err := conn.Write(appendPartitionRequest(wirePreamble[:len(wirePreamble):len(wirePreamble)],
		partitionRequest{partition: testPID, consumer: testConsumer, credit: 1, bufferSize: 128})); err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(conn)
	if len(reply) > 0 && reply[0] != 0x15 { // 0x15: a TLS alert record
		t.Fatalf("plain client got % x, want nothing or a TLS alert", reply[:min(len(reply), 16)])
	}
	waitFailedTLS(t, srv, uint64(len(cases)+1))
	// A port probe (a health check that connects and closes) is no failed handshake: neither counted nor
	// logged at WARN. Once the server closed it, its handshake's end was handled.
	probe, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_ = probe.SetDeadline(time.Now().Add(testWait))
	_ = probe.(*net.TCPConn).CloseWrite()
	_, _ = io.ReadAll(probe)
	probe.Close()
	if n := srv.Stats().FailedTLSHandshakes; n != uint64(len(cases)+1) {
		t.Fatalf("after a port probe the server counted %d failed TLS handshakes, want %d", n, len(cases)+1)
	}
	// A client of the right CA that offers at most TLS 1.2 (DialRemoteChannel would refuse to) is refused.
	old := good.Clone()
	old.MinVersion, old.MaxVersion, old.ServerName = tls.VersionTLS12, tls.VersionTLS12, "127.0.0.1"
	raw, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(testWait))
	if err := tls.Client(raw, old).Handshake(); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("a TLS 1.2 handshake: %v, want the version refused", err)
	}
	waitFailedTLS(t, srv, uint64(len(cases)+2))
	if n := admits.Load(); n != 0 {
		t.Fatalf("Admit saw %d requests from clients that failed TLS", n)
	}
	if st := p.Stats(); st.ViewsCreated != 0 {
		t.Fatalf("a view was created: %+v", st)
	}
	if got := logs.lines("TLS handshake failed"); len(got) != 1 {
		t.Fatalf("log lines about failed handshakes: %q, want one", got)
	}
	// And the right client gets in.
	cpool := NewBufferPool("consumer", 128, 1)
	ch, err := DialRemoteChannel(context.Background(), srv.Addr(), testPID, 0, testConsumer, cpool, 1, nil,
		DialOptions{TLS: good, Timeout: testWait})
	if err != nil {
		t.Fatalf("the client with the cluster's certificate: %v", err)
	}
	ch.Release()
}

// waitFailedTLS waits until the server counted n failed TLS handshakes.
func waitFailedTLS(t *testing.T, srv *Server, n uint64) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for srv.Stats().FailedTLSHandshakes != n {
		if time.Now().After(deadline) {
			t.Fatalf("server counted %d failed TLS handshakes, want %d", srv.Stats().FailedTLSHandshakes, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTLSHandshakeDeadline: with TLS the handshake timeout covers the TLS handshake and the partition
// request together: a connection silent from the start, one that stops in the middle of its ClientHello,
// and one that completes TLS and then sends no request are all closed at the timeout.
func TestTLSHandshakeDeadline(t *testing.T) {
	defer goleak.VerifyNone(t)
	const timeout = 100 * time.Millisecond
	ca := mtlstest.NewCA(t, "cluster CA")
	so := mtlsServerOptions(t, ca)
	so.HandshakeTimeout = timeout
	so.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := NewServer(NewPartitionManager(), "127.0.0.1:0", so)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	good := mtlsDialOptions(t, ca).TLS.Clone()
	good.ServerName = "127.0.0.1"
	cases := []struct {
		name  string
		start func(t *testing.T, conn net.Conn) net.Conn // what the client does before falling silent
	}{
		{"silent", func(_ *testing.T, conn net.Conn) net.Conn { return conn }},
		{"half a ClientHello", func(t *testing.T, conn net.Conn) net.Conn {
			if _, err := conn.Write([]byte{0x16, 0x03, 0x01, 0x01, 0x00, 0x01}); err != nil { // record header, 256 bytes announced
				t.Fatal(err)
			}
			return conn
		}},
		{"TLS but no request", func(t *testing.T, conn net.Conn) net.Conn {
			tc := tls.Client(conn, good)
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			return tc
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := net.Dial("tcp", srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			_ = raw.SetDeadline(time.Now().Add(testWait))
			conn := tc.start(t, raw)
			start := time.Now()
			var b [64]byte
			for {
				if _, err := conn.Read(b[:]); err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						t.Fatal("the server did not close the connection")
					}
					break
				}
			}
			if d := time.Since(start); d > timeout+time.Second {
				t.Fatalf("closed after %v, want about %v", d, timeout)
			}
		})
	}
	deadline := time.Now().Add(testWait)
	for srv.Stats().Open != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("server still has %d connections", srv.Stats().Open)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTLSOptionsChecked: a server TLS config without a certificate, or one that caps the version below
// TLS 1.3, is refused up front, as is such a dial config.
func TestTLSOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"no certificate", &tls.Config{}, "without a certificate"},
		{"TLS 1.2 at most", &tls.Config{Certificates: []tls.Certificate{{}}, MaxVersion: tls.VersionTLS12}, "requires TLS 1.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := NewServer(NewPartitionManager(), "127.0.0.1:0", ServerOptions{TLS: tc.cfg})
			if err == nil {
				srv.Close()
				t.Fatal("server started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	pool := NewBufferPool("consumer", 128, 1)
	_, err := DialRemoteChannel(context.Background(), "127.0.0.1:1", testPID, 0, testConsumer, pool, 1, nil,
		DialOptions{TLS: &tls.Config{MaxVersion: tls.VersionTLS12}})
	if err == nil || !strings.Contains(err.Error(), "requires TLS 1.3") {
		t.Fatalf("dial with TLS 1.2 at most: %v", err)
	}
}

package network

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/mtls"
	"github.com/runnel-dev/runnel/internal/mtls/mtlstest"
)

// TestTLSDialErrorsNameTLS: a channel dialing a data server that refuses its certificate (another
// authority's, presented as runnel's TLS flags make every client present its certificate) fails with an
// error that names TLS and says the server refused the certificate, every time, whether the refusal's
// alert or a reset of the request it wrote came first; a channel that does not trust the server says that
// it refused the server's certificate. The server logs the refusals at WARN, with the peer's address,
// once per interval however many there were.
func TestTLSDialErrorsNameTLS(t *testing.T) {
	ca, other := mtlstest.NewCA(t, "cluster CA"), mtlstest.NewCA(t, "another CA")
	var logs syncBuffer
	so := mtlsServerOptions(t, ca)
	so.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	srv, err := NewServer(NewPartitionManager(), "127.0.0.1:0", so)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	intruder := other.Issue(t, "intruder")
	presented := &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{intruder}}
	mtls.PresentCertificate(presented)
	const rounds = 20
	for _, tc := range []struct {
		name string
		tls  *tls.Config
		want string
	}{
		{"certificate of another authority", presented, "it refused our certificate (remote error: tls: unknown certificate authority)"},
		{"server not trusted", &tls.Config{RootCAs: other.Pool, Certificates: mtlsDialOptions(t, ca).TLS.Certificates},
			"we refused its certificate (tls: failed to verify certificate: x509: certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := fmt.Sprintf("TLS handshake with the data server at %s failed: %s", srv.Addr(), tc.want)
			for round := range rounds {
				cpool := NewBufferPool("consumer", 128, 1)
				ch, err := DialRemoteChannel(context.Background(), srv.Addr(), testPID, 0, testConsumer, cpool, 1, nil,
					DialOptions{TLS: tc.tls, Timeout: testWait})
				if err == nil {
					ch.Release()
					t.Fatal("the channel was opened")
				}
				var he *mtls.HandshakeError
				if !strings.Contains(err.Error(), want) || !errors.As(err, &he) {
					t.Fatalf("round %d: %v, want an *mtls.HandshakeError that says %q", round, err, want)
				}
			}
		})
	}
	waitFailedTLS(t, srv, 2*rounds)
	got := logs.lines("TLS handshake failed")
	if len(got) != 1 || !strings.Contains(got[0], "level=WARN") || !strings.Contains(got[0], "remote=127.0.0.1:") ||
		!strings.Contains(got[0], "x509: certificate signed by unknown authority") {
		t.Fatalf("%d failed handshakes logged %q, want one WARN line with the peer and the reason", 2*rounds, got)
	}
}

// TestTLSRefusalAfterAFailedWrite: when the request's write fails because the server that refused the
// client's certificate has closed (a reset), the refusal is still found: its alert waits to be read.
func TestTLSRefusalAfterAFailedWrite(t *testing.T) {
	ca, other := mtlstest.NewCA(t, "cluster CA"), mtlstest.NewCA(t, "another CA")
	so := mtlsServerOptions(t, ca)
	so.Logger = slog.New(slog.DiscardHandler)
	srv, err := NewServer(NewPartitionManager(), "127.0.0.1:0", so)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1",
		Certificates: []tls.Certificate{other.Issue(t, "intruder")}}
	mtls.PresentCertificate(cfg)
	raw, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tc := tls.Client(raw, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatalf("the client's side of the handshake: %v", err)
	}
	waitFailedTLS(t, srv, 1) // the server refused the certificate and closed
	var werr error
	for deadline := time.Now().Add(testWait); werr == nil; {
		if time.Now().After(deadline) {
			t.Fatal("writes to a closed server kept succeeding")
		}
		_, werr = raw.Write([]byte("request")) // the first draws the reset, a later one fails
		time.Sleep(time.Millisecond)
	}
	got := tlsRefusal(tc, srv.Addr(), fmt.Errorf("send request: %w", werr))
	var he *mtls.HandshakeError
	if !errors.As(got, &he) || !strings.Contains(got.Error(), "it refused our certificate (remote error: tls: unknown certificate authority)") {
		t.Fatalf("after the write failed with %v: %v, want the server's refusal", werr, got)
	}
}

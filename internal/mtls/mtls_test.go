package mtls

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/mtls/mtlstest"
)

// client is a client config with a certificate of ca, trusting servers of trust, that presents its
// certificate to every server, as runnel's TLS flags make it.
func client(t *testing.T, ca, trust *mtlstest.CA) *tls.Config {
	cfg := ca.ClientConfig(t, "client", trust)
	PresentCertificate(cfg)
	return cfg
}

// tlsServer accepts connections on a loopback port and handshakes with cfg, reporting each failure to
// refusals, as a server of the cluster does; it returns the address.
func tlsServer(t *testing.T, cfg *tls.Config, refusals *RefusalLog) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer raw.Close()
				_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
				if err := tls.Server(raw, cfg).Handshake(); err != nil {
					refusals.Failed(raw.RemoteAddr().String(), err)
				}
			})
		}
	})
	return ln.Addr().String()
}

// TestHandshakeError: the dialing side's error names TLS, the peer and who refused what, for a real
// handshake that each side fails.
func TestHandshakeError(t *testing.T) {
	ca, other := mtlstest.NewCA(t, "cluster CA"), mtlstest.NewCA(t, "another CA")
	var logs mtlstest.LogBuffer
	addr := tlsServer(t, ca.ServerConfig(t, "server"), NewRefusalLog(logs.Logger(), "test"))
	for _, tc := range []struct {
		name   string
		client *tls.Config
		want   string
	}{
		{"certificate of another authority", client(t, other, ca), "it refused our certificate (remote error: tls: unknown certificate authority)"},
		{"no certificate", &tls.Config{RootCAs: ca.Pool}, "it requires a certificate of an authority it trusts and we sent none (remote error: tls: certificate required)"},
		{"server not trusted", client(t, ca, other), "we refused its certificate (tls: failed to verify certificate: x509: certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", addr, tc.client)
			if err == nil {
				defer conn.Close()
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, err = conn.Read(make([]byte, 1)) // TLS 1.3: the server's verdict answers the first read
			}
			he := &HandshakeError{Peer: "the test server", Addr: addr, Err: err}
			if want := "TLS handshake with the test server at " + addr + " failed: " + tc.want; !strings.HasPrefix(he.Error(), want) {
				t.Fatalf("got %q, want it to start %q", he, want)
			}
		})
	}
}

// TestRefusalLogBounds: a flood of failed handshakes from one host logs one line per LogInterval, and the
// next line says how many were not logged; a flood from many hosts logs at most MaxLinesPerInterval lines
// per LogInterval. Real handshakes over loopback, a clock of the test's.
func TestRefusalLogBounds(t *testing.T) {
	ca, other := mtlstest.NewCA(t, "cluster CA"), mtlstest.NewCA(t, "another CA")
	var logs mtlstest.LogBuffer
	refusals := NewRefusalLog(logs.Logger(), "control plane")
	var mu sync.Mutex
	now := time.Now()
	refusals.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	addr := tlsServer(t, ca.ServerConfig(t, "server"), refusals)

	const flood = 50
	bad := client(t, other, ca)
	for i := range flood {
		dialBad(t, addr, bad)
		if i == 0 {
			logs.WaitLines(t, 1, "TLS handshake failed")
		}
	}
	waitTotal(t, refusals, flood)
	if got := logs.Lines("TLS handshake failed"); len(got) != 1 || !strings.Contains(got[0], "unlogged=0 failed_total=1") {
		t.Fatalf("%d bad handshakes from one host logged %q, want one line", flood, got)
	}
	advance(LogInterval)
	dialBad(t, addr, bad)
	got := logs.WaitLines(t, 2, "TLS handshake failed")
	if want := fmt.Sprintf("unlogged=%d failed_total=%d", flood-1, flood+1); len(got) != 2 || !strings.Contains(got[1], want) {
		t.Fatalf("after %v: %q, want a second line with %s", LogInterval, got, want)
	}

	// Many hosts: the bound per interval holds, the count of the others comes with the next line.
	advance(LogInterval)
	for i := range 100 {
		refusals.failed(fmt.Sprintf("10.0.%d.%d:4000", i/200, i%200+1), "it refused our certificate")
	}
	if got := logs.Lines("TLS handshake failed"); len(got) != 2+MaxLinesPerInterval {
		t.Fatalf("100 hosts in one interval: %d lines in all, want %d", len(got), 2+MaxLinesPerInterval)
	}
	advance(LogInterval)
	refusals.failed("10.0.0.1:4001", "it refused our certificate")
	got = logs.Lines("TLS handshake failed")
	if want := fmt.Sprintf("unlogged=%d", 100-MaxLinesPerInterval); !strings.Contains(got[len(got)-1], want) {
		t.Fatalf("the line after the flood: %q, want %s", got[len(got)-1], want)
	}
}

// dialBad makes one handshake with cfg, which the server refuses, and waits for the refusal.
func dialBad(t *testing.T, addr string, cfg *tls.Config) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Fatalf("a bad certificate's connection read %v, want the server's alert", err)
	}
}

func waitTotal(t *testing.T, l *RefusalLog, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		total := l.total
		l.mu.Unlock()
		if total == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log counted %d failed handshakes, want %d", total, n)
		}
	}
}

// TestHTTPErrorLog: an HTTPS server with HTTPErrorLog logs a client of another authority at WARN with its
// address and why, a client that closes at once at DEBUG, within the same bounds as gRPC's.
func TestHTTPErrorLog(t *testing.T) {
	ca, other := mtlstest.NewCA(t, "cluster CA"), mtlstest.NewCA(t, "another CA")
	var logs mtlstest.LogBuffer
	lg := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.NotFoundHandler(), TLSConfig: ca.ServerConfig(t, "server"), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: NewRefusalLog(lg, "REST API").HTTPErrorLog()}
	go func() { _ = hs.ServeTLS(ln, "", "") }()
	defer hs.Close()
	addr := ln.Addr().String()

	bad := client(t, other, ca)
	for range 10 {
		conn, err := tls.Dial("tcp", addr, bad)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Read(make([]byte, 1))
		conn.Close()
	}
	logs.WaitLines(t, 1, "level=WARN", "TLS handshake failed", "listener=\"REST API\"", "peer=127.0.0.1:",
		"reason=\"we refused its certificate (tls: failed to verify certificate: x509: certificate signed by unknown authority")
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	plain.Close()
	logs.WaitLines(t, 1, "level=DEBUG", "connection closed before its TLS handshake", "listener=\"REST API\"")
	time.Sleep(100 * time.Millisecond)
	if got := logs.Lines("TLS handshake failed"); len(got) != 1 {
		t.Fatalf("10 bad handshakes from one host: %q, want one line", got)
	}
}

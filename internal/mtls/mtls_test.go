package mtls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testCA is a certificate authority of one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

var serial atomic.Int64

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue makes a certificate for 127.0.0.1, good as a server's and a client's.
func (ca *testCA) issue(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// server is a mutual-TLS server config with a certificate of ca, trusting ca's clients.
func (ca *testCA) server(t *testing.T) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "server")}, ClientCAs: ca.pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

// client is a client config with a certificate of ca, trusting servers of trust.
func (ca *testCA) client(t *testing.T, trust *testCA) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "client")}, RootCAs: trust.pool, MinVersion: tls.VersionTLS13}
	PresentCertificate(cfg)
	return cfg
}

// logBuffer is a slog sink the servers' goroutines write while the test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines that contain every one of subs.
func (b *logBuffer) lines(subs ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
next:
	for _, l := range strings.Split(b.buf.String(), "\n") {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// waitLines waits until the log has n lines with every one of subs.
func (b *logBuffer) waitLines(t *testing.T, n int, subs ...string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := b.lines(subs...)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			b.mu.Lock()
			defer b.mu.Unlock()
			t.Fatalf("%d log lines with %q, want %d; the log:\n%s", len(got), subs, n, b.buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	ca, other := newTestCA(t, "cluster CA"), newTestCA(t, "another CA")
	var logs logBuffer
	addr := tlsServer(t, ca.server(t), NewRefusalLog(logs.logger(), "test"))
	for _, tc := range []struct {
		name   string
		client *tls.Config
		want   string
	}{
		{"certificate of another authority", other.client(t, ca), "it refused our certificate (remote error: tls: unknown certificate authority)"},
		{"no certificate", &tls.Config{RootCAs: ca.pool}, "it requires a certificate of an authority it trusts and we sent none (remote error: tls: certificate required)"},
		{"server not trusted", ca.client(t, other), "we refused its certificate (tls: failed to verify certificate: x509: certificate signed by unknown authority"},
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
	ca, other := newTestCA(t, "cluster CA"), newTestCA(t, "another CA")
	var logs logBuffer
	refusals := NewRefusalLog(logs.logger(), "control plane")
	var mu sync.Mutex
	now := time.Now()
	refusals.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	addr := tlsServer(t, ca.server(t), refusals)

	const flood = 50
	bad := other.client(t, ca)
	for i := range flood {
		dialBad(t, addr, bad)
		if i == 0 {
			logs.waitLines(t, 1, "TLS handshake failed")
		}
	}
	waitTotal(t, refusals, flood)
	if got := logs.lines("TLS handshake failed"); len(got) != 1 || !strings.Contains(got[0], "unlogged=0 failed_total=1") {
		t.Fatalf("%d bad handshakes from one host logged %q, want one line", flood, got)
	}
	advance(LogInterval)
	dialBad(t, addr, bad)
	got := logs.waitLines(t, 2, "TLS handshake failed")
	if want := fmt.Sprintf("unlogged=%d failed_total=%d", flood-1, flood+1); len(got) != 2 || !strings.Contains(got[1], want) {
		t.Fatalf("after %v: %q, want a second line with %s", LogInterval, got, want)
	}

	// Many hosts: the bound per interval holds, the count of the others comes with the next line.
	advance(LogInterval)
	for i := range 100 {
		refusals.failed(fmt.Sprintf("10.0.%d.%d:4000", i/200, i%200+1), "it refused our certificate")
	}
	if got := logs.lines("TLS handshake failed"); len(got) != 2+MaxLinesPerInterval {
		t.Fatalf("100 hosts in one interval: %d lines in all, want %d", len(got), 2+MaxLinesPerInterval)
	}
	advance(LogInterval)
	refusals.failed("10.0.0.1:4001", "it refused our certificate")
	got = logs.lines("TLS handshake failed")
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
	ca, other := newTestCA(t, "cluster CA"), newTestCA(t, "another CA")
	var logs logBuffer
	lg := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.NotFoundHandler(), TLSConfig: ca.server(t), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: NewRefusalLog(lg, "REST API").HTTPErrorLog()}
	go func() { _ = hs.ServeTLS(ln, "", "") }()
	defer hs.Close()
	addr := ln.Addr().String()

	bad := other.client(t, ca)
	for range 10 {
		conn, err := tls.Dial("tcp", addr, bad)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Read(make([]byte, 1))
		conn.Close()
	}
	logs.waitLines(t, 1, "level=WARN", "TLS handshake failed", "listener=\"REST API\"", "peer=127.0.0.1:",
		"reason=\"we refused its certificate (tls: failed to verify certificate: x509: certificate signed by unknown authority")
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	plain.Close()
	logs.waitLines(t, 1, "level=DEBUG", "connection closed before its TLS handshake", "listener=\"REST API\"")
	time.Sleep(100 * time.Millisecond)
	if got := logs.lines("TLS handshake failed"); len(got) != 1 {
		t.Fatalf("10 bad handshakes from one host: %q, want one line", got)
	}
}

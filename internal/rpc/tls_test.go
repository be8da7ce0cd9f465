package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/runnel-dev/runnel/internal/mtls"
	"github.com/runnel-dev/runnel/internal/mtls/mtlstest"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// clientTLS is a client's config, as runnel's TLS flags make it: a certificate of ca, servers of trust,
// the certificate presented to every server.
func clientTLS(t *testing.T, ca, trust *mtlstest.CA) *tls.Config {
	cfg := ca.ClientConfig(t, "client", trust)
	mtls.PresentCertificate(cfg)
	return cfg
}

// TestTLSHandshakeFailuresNameTLS runs the control plane's clients (a JobClient, as `runnel submit` and
// `runnel cancel` use it, and DialGateway, a TaskManager's registration) against a JobManager's gRPC server
// with mutual TLS, over loopback. A client whose certificate another authority signed fails with an error
// that names TLS and says the server refused its certificate, every time (gRPC alone reports a broken pipe
// or a reset, whichever wins a race); a client that does not trust the server's certificate says that it
// refused it. The server logs each at WARN with the client's address and the reason. A client of the
// right authority gets through, every call.
func TestTLSHandshakeFailuresNameTLS(t *testing.T) {
	ca, other := mtlstest.NewCA(t, "cluster CA"), mtlstest.NewCA(t, "another CA")
	var logs mtlstest.LogBuffer
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	srv := grpc.NewServer(append(ServerOptions(), grpc.Creds(ServerCredentials(ca.ServerConfig(t, "jobmanager"),
		mtls.NewRefusalLog(logs.Logger(), "control plane"))))...)
	build := protocol.Build{Describe: "runnel test"}
	RegisterJobService(srv, &jobTable{build: build, names: map[string]bool{"sequence": true},
		jobs: map[protocol.JobID]SubmitRequest{}, stopped: map[protocol.JobID]string{}})
	sessions := make(chan protocol.Session, 4)
	NewGatewayServer(func(s protocol.Session) { sessions <- s }).Register(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	defer func() {
		srv.Stop()
		<-served
	}()

	// Each case dials from a loopback address of its own, so that the log's bound per host lets each
	// case's first line through.
	from := func(ip net.IP, local *atomic.Value) grpc.DialOption {
		return grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}).DialContext(ctx, "tcp", a)
			if err == nil {
				local.Store(c.LocalAddr().String())
			}
			return c, err
		})
	}
	for i, tc := range []struct {
		name               string
		client             *tls.Config
		wantClient, wantJM string
	}{
		{"certificate of another authority", clientTLS(t, other, ca),
			"it refused our certificate (remote error: tls: unknown certificate authority)",
			`reason="we refused its certificate (tls: failed to verify certificate: x509: certificate signed by unknown authority`},
		{"server not trusted", clientTLS(t, ca, other),
			"we refused its certificate (tls: failed to verify certificate: x509: certificate signed by unknown authority",
			`reason="it refused our certificate (remote error: tls: bad certificate)"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ip := net.IPv4(127, 0, 0, byte(i+2))
			want := fmt.Sprintf("TLS handshake with the JobManager at %s failed: %s", addr, tc.wantClient)
			check := func(round int, what string, err error) {
				t.Helper()
				if err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("round %d: %s: %v, want it to start %q", round, what, err, want)
				}
				var he *mtls.HandshakeError
				if !errors.As(err, &he) {
					t.Fatalf("round %d: %s: %v is no *mtls.HandshakeError", round, what, err)
				}
				if what != "register" && !errors.Is(err, ErrUnreachable) {
					t.Fatalf("round %d: %s: %v is not ErrUnreachable", round, what, err)
				}
			}
			for round := range 10 { // the outcome must not depend on who wins a race
				var local atomic.Value
				creds := NewClientCredentials(tc.client, "the JobManager")
				conn, err := grpc.NewClient(addr, append(DialOptions(), grpc.WithTransportCredentials(creds), from(ip, &local))...)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err = NewJobClient(conn).Submit(ctx, SubmitRequest{Name: "sequence", Build: build})
				check(round, "submit", creds.Explain(err))
				check(round, "stop", creds.Explain(NewJobClient(conn).Stop(ctx, protocol.JobID{1}, "")))
				cancel()
				conn.Close()
				if round == 0 {
					logs.WaitLines(t, 1, "level=WARN", `msg="TLS handshake failed; connection closed"`, `listener="control plane"`,
						"peer="+local.Load().(string), tc.wantJM)
				}

				creds = NewClientCredentials(tc.client, "the JobManager")
				ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
				s, err := DialGateway(ctx, addr, grpc.WithTransportCredentials(creds), from(ip, &local))
				cancel()
				if err == nil {
					s.Close(nil)
					t.Fatalf("round %d: a TaskManager registered with a certificate the JobManager refuses", round)
				}
				check(round, "register", creds.Explain(err))
			}
		})
	}

	creds := NewClientCredentials(clientTLS(t, ca, ca), "the JobManager")
	conn, err := grpc.NewClient(addr, append(DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if _, err := NewJobClient(conn).Submit(ctx, SubmitRequest{Name: "sequence", Build: build}); err != nil {
			t.Fatalf("a client of the cluster's authority: %v", err)
		}
	}
	tm, err := DialGateway(ctx, addr, grpc.WithTransportCredentials(NewClientCredentials(clientTLS(t, ca, ca), "the JobManager")))
	if err != nil {
		t.Fatalf("a TaskManager of the cluster's authority: %v", err)
	}
	jm := <-sessions
	if err := tm.Send(protocol.Envelope{Body: protocol.Heartbeat{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := recvWithin(t, jm, 5*time.Second); err != nil {
		t.Fatalf("the JobManager's side of a TLS session: %v", err)
	}
	tm.Close(nil)
	jm.Close(nil)
}

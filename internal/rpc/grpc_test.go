package rpc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-dev/runnel/internal/protocol"
)

// TestServerStopEndsSessions: stopping the JobManager's gRPC server ends every session on both sides at
// once, not after a keepalive.
func TestServerStopEndsSessions(t *testing.T) {
	g := startGateway(t, defaultSessionConfig)
	type pair struct{ jm, tm protocol.Session }
	var pairs []pair
	for range 3 {
		jm, tm := g.connect(t)
		pairs = append(pairs, pair{jm, tm})
	}
	start := time.Now()
	g.srv.Stop()
	for i, p := range pairs {
		for _, s := range []protocol.Session{p.jm, p.tm} {
			if _, err := recvWithin(t, s, 2*time.Second); err == nil {
				t.Fatalf("session %d: Recv after the server stopped returned a message", i)
			}
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the sessions ended %s after the server stopped", d)
	}
}

// TestDialGatewayFails: a JobManager that is not there fails the dial at once, and a dial whose context
// ends gives up.
func TestDialGatewayFails(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{{"refused", 10 * time.Second}, {"context ends", time.Nanosecond}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			start := time.Now()
			s, err := DialGateway(ctx, addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err == nil {
				s.Close(nil)
				t.Fatal("dialed a JobManager that is not there")
			}
			if !strings.Contains(err.Error(), "connect to the JobManager at "+addr) {
				t.Errorf("error %q does not name the address", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the dial took %s to fail", d)
			}
		})
	}
}

// The child process of TestKilledPeer: RUNNEL_RPC_TEST_CHILD says which side it plays.
const childEnv = "RUNNEL_RPC_TEST_CHILD"

// runChild plays one side of a session in a child process until it is killed: "jm" serves a gateway on
// 127.0.0.1:0 (printing its address) and sends Registered to the TaskManager that connects; "tm" dials
// the address in RUNNEL_RPC_TEST_ADDR and sends Register.
func runChild(role string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	switch role {
	case "jm":
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fail(err)
		}
		srv := grpc.NewServer(ServerOptions()...)
		NewGatewayServer(func(s protocol.Session) {
			if err := s.Send(protocol.Envelope{Body: protocol.Registered{TaskManager: 1}}); err != nil {
				fail(err)
			}
		}).Register(srv)
		fmt.Printf("ADDR %s\n", lis.Addr())
		fail(srv.Serve(lis))
	case "tm":
		s, err := DialGateway(context.Background(), os.Getenv("RUNNEL_RPC_TEST_ADDR"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fail(err)
		}
		if err := s.Send(protocol.Envelope{Body: protocol.Register{Version: protocol.Version, Name: "tm-child", Slots: 1}}); err != nil {
			fail(err)
		}
		fmt.Println("ADDR sent")
		_, err = s.Recv()
		fail(err)
	}
	fail(fmt.Errorf("unknown role %q", role))
}

// TestKilledPeer: a peer process killed with SIGKILL ends the session at once on the side that lives:
// the kernel resets the connection, and Recv returns an error long before a keepalive would notice.
func TestKilledPeer(t *testing.T) {
	for _, role := range []string{"jm", "tm"} {
		t.Run("child is "+role, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+role)
			var g *gateway
			if role == "tm" {
				g = startGateway(t, defaultSessionConfig)
				cmd.Env = append(cmd.Env, "RUNNEL_RPC_TEST_ADDR="+g.addr)
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			reaped := make(chan struct{})
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-reaped
			})
			first := make(chan string, 1)
			go func() {
				defer close(reaped)
				r := bufio.NewReader(out)
				line, _ := r.ReadString('\n')
				first <- strings.TrimSpace(line)
				_, _ = io.Copy(io.Discard, r)
				_ = cmd.Wait()
			}()
			var line string
			select {
			case line = <-first:
			case <-time.After(20 * time.Second):
				t.Fatal("the child did not start")
			}
			addr, ok := strings.CutPrefix(line, "ADDR ")
			if !ok {
				t.Fatalf("the child said %q", line)
			}
			var s protocol.Session
			if role == "jm" {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if s, err = DialGateway(ctx, addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
					t.Fatal(err)
				}
			} else {
				select {
				case s = <-g.accepted:
				case <-time.After(10 * time.Second):
					t.Fatal("the child's session was not accepted")
				}
			}
			defer s.Close(nil)
			env, err := recvWithin(t, s, 10*time.Second)
			if err != nil {
				t.Fatalf("the first message: %v", err)
			}
			t.Logf("received %T", env.Body)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			if _, err = recvWithin(t, s, 5*time.Second); err == nil {
				t.Fatal("Recv returned a message after the peer was killed")
			}
			if d := time.Since(killed); d > time.Second {
				t.Errorf("the kill surfaced after %s, want at once", d)
			}
			t.Logf("Recv after the kill, %s later: %v", time.Since(killed), err)
			s.Close(nil)
			waitEnded(t, s)
		})
	}
}

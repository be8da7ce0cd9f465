package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// transport makes the two ends of a session with a send queue of limit messages.
type transport struct {
	name string
	pair func(t *testing.T, limit int) (jm, tm protocol.Session)
}

var transports = []transport{
	{"pipe", func(t *testing.T, limit int) (protocol.Session, protocol.Session) { return newPipe(limit) }},
	{"grpc", func(t *testing.T, limit int) (protocol.Session, protocol.Session) {
		c := startGateway(t, sessionConfig{queue: limit, grace: closeGrace})
		return c.connect(t)
	}},
}

// gateway is a gRPC server on loopback serving sessions.
type gateway struct {
	srv      *grpc.Server
	addr     string
	cfg      sessionConfig
	accepted chan protocol.Session
}

// startGateway serves a gateway on 127.0.0.1:0 until the test ends. Its window sizes are fixed at
// 64 KiB (no BDP growth), so a peer that stops reading fills the transport quickly.
func startGateway(t testing.TB, cfg sessionConfig) *gateway {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{addr: lis.Addr().String(), cfg: cfg, accepted: make(chan protocol.Session, 16)}
	g.srv = grpc.NewServer(append(ServerOptions(), grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(64<<10))...)
	gw := NewGatewayServer(func(s protocol.Session) { g.accepted <- s })
	gw.cfg = cfg
	gw.Register(g.srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		g.srv.Stop()
		<-served
	})
	return g
}

// connect dials the gateway and returns both ends of the new session, closed when the test ends.
func (g *gateway) connect(t testing.TB) (jm, tm protocol.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tm, err := dialGateway(ctx, g.addr, g.cfg, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case jm = <-g.accepted:
	case <-ctx.Done():
		t.Fatal("the gateway did not accept the session")
	}
	t.Cleanup(func() {
		tm.Close(nil)
		jm.Close(nil)
		waitEnded(t, tm)
		waitEnded(t, jm)
	})
	return jm, tm
}

// waitEnded waits until a closed session's goroutines are gone (gRPC sessions; a pipe has none).
func waitEnded(t testing.TB, s protocol.Session) {
	t.Helper()
	var sent, read <-chan struct{}
	switch s := s.(type) {
	case *streamSession[*pbTo, *pbFrom]:
		sent, read = s.sent, s.readDone
	case *streamSession[*pbFrom, *pbTo]:
		sent, read = s.sent, s.readDone
	default:
		return
	}
	for _, ch := range []<-chan struct{}{sent, read} {
		select {
		case <-ch:
		case <-time.After(2 * closeGrace):
			t.Fatal("a session's goroutines did not end")
		}
	}
}

// everyBody returns one filled value of each body kind that travels in the given direction.
func everyBody(toTM bool) []protocol.Envelope {
	var out []protocol.Envelope
	for i, k := range bodyKinds {
		if k.toTM != toTM {
			continue
		}
		v := reflect.New(reflect.TypeOf(k.zero)).Elem()
		randomFiller(uint64(100+i), true).fill(v)
		out = append(out, protocol.Envelope{Job: protocol.JobID{byte(i), 7}, Body: v.Interface()})
	}
	return out
}

// sameEnvelope fails t unless got is want after a trip (modulo the non-crossing fields).
func sameEnvelope(t *testing.T, got, want protocol.Envelope) {
	t.Helper()
	wb, wf := crossing(want.Body)
	gb, gf := crossing(got.Body)
	if got.Job != want.Job || wf != gf || !reflect.DeepEqual(gb, wb) {
		t.Fatalf("received %#v (job %s, error %+v), want %#v (job %s, error %+v)", gb, got.Job, gf, wb, want.Job, wf)
	}
}

// recvWithin receives one message, failing the test when none comes within d.
func recvWithin(t *testing.T, s protocol.Session, d time.Duration) (protocol.Envelope, error) {
	t.Helper()
	type result struct {
		env protocol.Envelope
		err error
	}
	ch := make(chan result, 1)
	go func() {
		env, err := s.Recv()
		ch <- result{env, err}
	}()
	select {
	case r := <-ch:
		return r.env, r.err
	case <-time.After(d):
		t.Fatalf("Recv did not return within %s", d)
		return protocol.Envelope{}, nil
	}
}

// TestSessionCarriesEveryKindInOrder: every kind crosses both ways, in order, several rounds, with both
// directions busy at once.
func TestSessionCarriesEveryKindInOrder(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			jm, tm := tr.pair(t, protocol.SendQueue)
			const rounds = 20
			for _, dir := range []struct {
				from, to protocol.Session
				msgs     []protocol.Envelope
			}{{jm, tm, everyBody(true)}, {tm, jm, everyBody(false)}} {
				var wg sync.WaitGroup
				wg.Go(func() {
					for range rounds {
						for _, m := range dir.msgs {
							if err := dir.from.Send(m); err != nil {
								t.Errorf("Send: %v", err)
								return
							}
						}
					}
				})
				for range rounds {
					for _, want := range dir.msgs {
						got, err := recvWithin(t, dir.to, 10*time.Second)
						if err != nil {
							t.Fatalf("Recv: %v", err)
						}
						sameEnvelope(t, got, want)
					}
				}
				wg.Wait()
			}
		})
	}
}

// TestSessionClose: Close on either end ends both. The peer receives what the closing end had sent,
// then the reason (io.EOF for nil), and its Sends fail with it; the closing end's own Recv and Send
// return the reason at once.
func TestSessionClose(t *testing.T) {
	for _, tr := range transports {
		for _, tc := range []struct {
			name      string
			jmCloses  bool
			reason    error
			wantEOF   bool
			wantWords string
		}{
			{"jm closes with a reason", true, errors.New("JobManager shutting down"), false, "JobManager shutting down"},
			{"tm closes with a reason", false, errors.New("TaskManager tm-2 stops"), false, "TaskManager tm-2 stops"},
			{"jm closes, nil", true, nil, true, ""},
			{"tm closes, nil", false, nil, true, ""},
		} {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				jm, tm := tr.pair(t, protocol.SendQueue)
				closer, peer := tm, jm
				msg := protocol.Envelope{Body: protocol.Heartbeat{}}
				if tc.jmCloses {
					closer, peer = jm, tm
					msg = protocol.Envelope{Job: protocol.JobID{9}, Body: jobcore.Probe{}}
				}
				// A Recv already waiting on the closing end returns too.
				waiting := make(chan error, 1)
				go func() {
					_, err := closer.Recv()
					waiting <- err
				}()
				for range 3 {
					if err := closer.Send(msg); err != nil {
						t.Fatal(err)
					}
				}
				closer.Close(tc.reason)
				check := func(what string, err error) {
					t.Helper()
					switch {
					case err == nil:
						t.Fatalf("%s: no error after Close", what)
					case tc.wantEOF && !errors.Is(err, io.EOF):
						t.Fatalf("%s: %v, want io.EOF", what, err)
					case !tc.wantEOF && !strings.Contains(err.Error(), tc.wantWords):
						t.Fatalf("%s: %v, want the reason %q", what, err, tc.wantWords)
					}
				}
				select {
				case err := <-waiting:
					check("the closer's waiting Recv", err)
				case <-time.After(5 * time.Second):
					t.Fatal("a Recv waiting on the closing end did not return")
				}
				for i := range 3 {
					got, err := recvWithin(t, peer, 5*time.Second)
					if err != nil {
						t.Fatalf("message %d sent before Close: %v", i, err)
					}
					sameEnvelope(t, got, msg)
				}
				_, err := recvWithin(t, peer, 5*time.Second)
				check("the peer's Recv", err)
				check("the peer's Send", peer.Send(protocol.Envelope{Body: protocol.Heartbeat{}}))
				_, err = closer.Recv()
				check("the closer's Recv", err)
				check("the closer's Send", closer.Send(msg))
			})
		}
	}
}

// queued is how many messages wait in s's send queue.
func queued(s protocol.Session) int {
	switch s := s.(type) {
	case *streamSession[*pbTo, *pbFrom]:
		return s.out.len()
	case *streamSession[*pbFrom, *pbTo]:
		return s.out.len()
	case *pipeEnd:
		out, _ := s.queues()
		return out.len()
	}
	panic(fmt.Sprintf("queued: %T", s))
}

// TestSessionPeerNotReading: a peer that stops reading ends the session once the send queue is full,
// with an error naming the bound; the sender never blocks on the way. Over gRPC the queue drains into the
// transport until flow control stops it (the windows are 64 KiB here), and only then fills.
func TestSessionPeerNotReading(t *testing.T) {
	const limit = 8
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			jm, tm := tr.pair(t, limit)
			big := protocol.Envelope{Job: protocol.JobID{1}, Body: protocol.SetupJob{Name: "fill", Args: []string{strings.Repeat("x", 4096)}}}
			want := fmt.Sprintf("peer is not reading: %d messages queued", limit)
			var err error
			sent, drained := 0, 0
			start := time.Now()
			for ; sent < 10000 && err == nil; sent++ {
				before := time.Now()
				if err = jm.Send(big); err != nil {
					break
				}
				// Let the sender drain what it can: until the queue is empty, or it stopped moving.
				last, lastMove := queued(jm), time.Now()
				for last > 0 && time.Since(lastMove) < 50*time.Millisecond {
					time.Sleep(time.Millisecond)
					if n := queued(jm); n != last {
						last, lastMove = n, time.Now()
					}
				}
				if last == 0 {
					drained++
				}
				if d := time.Since(before); d > time.Second {
					t.Fatalf("send %d took %s", sent, d)
				}
			}
			if err == nil || err.Error() != want {
				t.Fatalf("after %d sends: %v, want %q", sent, err, want)
			}
			if tr.name == "grpc" && drained <= limit {
				t.Errorf("only %d messages drained into the transport before the queue filled", drained)
			}
			t.Logf("%d sends, %d drained, the queue full after %s", sent, drained, time.Since(start))
			if err := jm.Send(big); err == nil || err.Error() != want {
				t.Errorf("a Send after the end: %v, want %q", err, want)
			}
			if _, err := jm.Recv(); err == nil || err.Error() != want {
				t.Errorf("the sender's Recv after the end: %v, want %q", err, want)
			}
			// The peer that did not read sees the end once it reads again (after what its transport held).
			for i := 0; ; i++ {
				_, err := recvWithin(t, tm, 5*time.Second)
				if err != nil {
					break
				}
				if i > sent {
					t.Fatalf("the peer received %d messages of %d sent and no end", i, sent)
				}
			}
		})
	}
}

// TestSessionRefusesWhatCannotCross: a body that cannot be encoded, or one over MaxMessageBytes, fails
// its Send and ends the session (a message is never dropped silently).
func TestSessionRefusesWhatCannotCross(t *testing.T) {
	for _, tr := range transports {
		for _, tc := range []struct {
			name string
			body any
			want string
		}{
			{"closure", func() {}, "a message of type func() cannot be sent to a TaskManager"},
			{"core's own SetupJob", jobcore.SetupJob{}, "jobcore.SetupJob cannot be sent to a TaskManager"},
			{"too big", protocol.SetupJob{Secret: make([]byte, MaxMessageBytes)}, "exceeds the 16777216-byte limit"},
		} {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				jm, tm := tr.pair(t, protocol.SendQueue)
				err := jm.Send(protocol.Envelope{Body: tc.body})
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Send: %v, want %q", err, tc.want)
				}
				if _, err := recvWithin(t, tm, 5*time.Second); err == nil {
					t.Fatal("the session went on after a message could not be sent")
				}
			})
		}
	}
}

// TestSessionConcurrentSenders: Send is safe from many goroutines; each sender's messages keep their
// order.
func TestSessionConcurrentSenders(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			jm, tm := tr.pair(t, protocol.SendQueue)
			const senders, each = 4, 200
			var wg sync.WaitGroup
			for s := range senders {
				wg.Go(func() {
					for i := range each {
						env := protocol.Envelope{Job: protocol.JobID{byte(s)}, Body: jobcore.Counters{Counts: []jobcore.AttemptCounters{{In: uint64(i)}}}}
						if err := tm.Send(env); err != nil {
							t.Errorf("Send: %v", err)
							return
						}
					}
				})
			}
			next := make([]uint64, senders)
			for range senders * each {
				env, err := recvWithin(t, jm, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				s, n := env.Job[0], env.Body.(jobcore.Counters).Counts[0].In
				if n != next[s] {
					t.Fatalf("sender %d: message %d arrived when %d was due", s, n, next[s])
				}
				next[s]++
			}
			wg.Wait()
		})
	}
}

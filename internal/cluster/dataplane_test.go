package cluster_test

// Whole jobs on real TaskManagers whose data plane meets a misbehaving peer: a consumer connection that stops
// reading without disconnecting, and a flood of connections that never send a request. The job master,
// TaskManagers, tasks, partitions and TCP connections are the real ones; only the operator chains are
// written here (a source of sequence numbers and a sink that checks them), so that the test controls when
// the trouble starts.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/scheduler"
	"github.com/runnel-dev/runnel/internal/task"
)

// sourceToSink builds the job graph of a source and a sink at parallelism 1, joined by an edge of pattern.
func sourceToSink(t *testing.T, name string, pattern graph.Pattern, opts graph.JobGraphOptions) *graph.JobGraph {
	t.Helper()
	sg := &graph.StreamGraph{JobName: name, Nodes: []*graph.StreamNode{
		{ID: 1, Name: "source", Kind: graph.SourceNode, Parallelism: 1, MaxParallelism: 1},
		{ID: 2, Name: "sink", Kind: graph.SinkNode, Parallelism: 1, MaxParallelism: 1},
	}, Edges: []*graph.StreamEdge{{Source: 1, Target: 2, Pattern: pattern}}}
	jg, err := graph.BuildJobGraph(sg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return jg
}

// sequenceSource emits 8-byte sequence numbers from 0, total of them, or without end if total is 0. If gate
// is set, it stops at gateAt until gate is closed.
type sequenceSource struct {
	task.NoEventTime
	rt     *task.Runtime
	total  uint64
	gate   <-chan struct{}
	gateAt uint64
	next   uint64
	rec    [8]byte
}

func (c *sequenceSource) PollSource() (task.SourceStatus, error) {
	for range 256 {
		if c.total > 0 && c.next == c.total {
			return task.EndOfInput, nil
		}
		if c.gate != nil && c.next == c.gateAt {
			select {
			case <-c.gate:
				c.gate = nil
			default:
				return task.NothingAvailable, nil
			}
		}
		binary.LittleEndian.PutUint64(c.rec[:], c.next)
		if err := c.rt.Outputs[0].EmitRecord(0, c.rec[:]); err != nil {
			return 0, err
		}
		c.next++
		c.rt.Counters.Out++
	}
	return task.MoreAvailable, nil
}

func (c *sequenceSource) ProcessBuffer(int, *network.RecordDecoder) (int, error) {
	return 0, errors.New("a source has no network input")
}
func (c *sequenceSource) IsSource() bool                   { return true }
func (c *sequenceSource) SourceAvailable() <-chan struct{} { return c.gate }

// checkingSink checks that every attempt receives 0, 1, 2, ... and reports its progress.
type checkingSink struct {
	task.NoEventTime
	rt       *task.Runtime
	next     uint64
	progress func(attempt int32, received uint64, err error)
}

func (c *checkingSink) ProcessBuffer(_ int, dec *network.RecordDecoder) (int, error) {
	n := 0
	for {
		rec, err := dec.Next()
		if err != nil {
			return n, err
		}
		if rec == nil {
			break
		}
		if got := binary.LittleEndian.Uint64(rec); len(rec) != 8 || got != c.next {
			err := fmt.Errorf("sink attempt %d: record %d is %x, want sequence number %d", c.rt.Info.Attempt.Number, c.next, rec, c.next)
			c.progress(c.rt.Info.Attempt.Number, c.next, err)
			return n, err
		}
		c.next++
		n++
	}
	c.progress(c.rt.Info.Attempt.Number, c.next, nil)
	return n, nil
}

func (c *checkingSink) IsSource() bool                               { return false }
func (c *checkingSink) PollSource() (task.SourceStatus, error)       { return 0, errors.New("not a source") }
func (c *checkingSink) SourceAvailable() <-chan struct{}             { return nil }
func (c *sequenceSource) Open() error                                { return nil }
func (c *checkingSink) Open() error                                  { return nil }
func (c *sequenceSource) EndInput() error                            { return nil }
func (c *checkingSink) EndInput() error                              { return nil }
func (c *sequenceSource) Close() error                               { return nil }
func (c *checkingSink) Close() error                                 { return nil }
func (c *sequenceSource) Snapshot(int64) ([]task.StateWriter, error) { return nil, nil }
func (c *checkingSink) Snapshot(int64) ([]task.StateWriter, error)   { return nil, nil }
func (c *sequenceSource) Restore(map[string][]byte) error            { return nil }
func (c *checkingSink) Restore(map[string][]byte) error              { return nil }
func (c *sequenceSource) RestoreRescaled(map[string][][]byte) error  { return nil }
func (c *checkingSink) RestoreRescaled(map[string][][]byte) error    { return nil }
func (c *sequenceSource) NotifyCheckpointComplete(int64) error       { return nil }
func (c *checkingSink) NotifyCheckpointComplete(int64) error         { return nil }

// freezingProxy forwards TCP connections to target. Freeze makes every connection open at that moment stop
// passing on the server's bytes (and stop reading them) while both sides stay connected: to the server
// the client looks like a consumer that stopped reading without going away. Later connections pass
// everything.
type freezingProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen []chan struct{} // one per connection that is not frozen yet
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newFreezingProxy(t *testing.T) *freezingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{ln: ln}
	p.wg.Add(1)
	go p.accept()
	return p
}

func (p *freezingProxy) Addr() string { return p.ln.Addr().String() }

// setTarget sets where connections are passed on to; until then they are refused.
func (p *freezingProxy) setTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
}

func (p *freezingProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		server, err := net.Dial("tcp", target)
		if err != nil {
			client.Close()
			continue
		}
		// A fixed receive buffer, not autotuned: it bounds what the server can still send past a freeze.
		// (At least a loopback segment of 64 KiB: a window below that stalls in zero-window probes.)
		_ = server.(*net.TCPConn).SetReadBuffer(64 << 10)
		freeze := make(chan struct{})
		p.mu.Lock()
		p.frozen = append(p.frozen, freeze)
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(server, client)
			server.Close()
		}()
		go func() {
			defer p.wg.Done()
			buf := make([]byte, 1<<10)
			for {
				n, err := server.Read(buf)
				select {
				case <-freeze:
					return // read no more; the connections stay open until Close
				default:
				}
				if n > 0 {
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					client.Close()
					return
				}
			}
		}()
	}
}

// Freeze stops the server-to-client direction of every open connection.
func (p *freezingProxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frozen {
		close(f)
	}
	p.frozen = nil
}

func (p *freezingProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// syncBuffer is a log sink written by the TaskManagers' goroutines and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) count(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), substr)
}

// TestJobSurvivesMisbehavingDataPlanePeers runs source → sink with the two on different TaskManagers, so
// that their channel is a real TCP connection, and once the sink has its first records disturbs the
// producer's data server:
//
//   - the consumer's connection stops reading without disconnecting (a proxy freezes it): the job must
//     fail over, with a cause that names the consumer, within the server's write timeout and some slack,
//     and the restarted job must deliver every record. The first attempt of the source never ends, so
//     without the failover the job hangs;
//   - a flood of connections that never send a request, far past the server's limit: the job's channel
//     must keep streaming, with no failover, the surplus refused and said so in one log line.
func TestJobSurvivesMisbehavingDataPlanePeers(t *testing.T) {
	const (
		writeTimeout = 300 * time.Millisecond
		total        = 50_000
		maxConns     = 8
		flood        = 200
	)
	for _, tc := range []struct {
		name      string
		server    network.ServerOptions
		freeze    bool // through a proxy that freezes; else flood
		failovers int
	}{
		{"consumer stops reading", network.ServerOptions{WriteTimeout: writeTimeout, SocketSendBufferBytes: 4 << 10}, true, 1},
		{"connection flood", network.ServerOptions{MaxConnections: maxConns}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first, so it runs last
			var logs syncBuffer
			lg := slog.New(slog.NewTextHandler(&logs, nil))
			pc := cluster.TaskManagerConfig{Name: "producer", Slots: 1, DataServer: tc.server, Logger: lg}
			var proxy *freezingProxy
			if tc.freeze {
				// The producer is reached through the proxy: it advertises the proxy's address.
				proxy = newFreezingProxy(t)
				t.Cleanup(proxy.Close)
				pc.DataAdvertise = proxy.Addr()
			}
			producerTM, err := cluster.NewTaskManager(pc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = producerTM.Shutdown() })
			if proxy != nil {
				proxy.setTarget(producerTM.DataListenAddress())
			}
			consumerTM, err := cluster.NewTaskManager(cluster.TaskManagerConfig{Name: "consumer", Slots: 1, Logger: lg})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = consumerTM.Shutdown() })

			// The disturbance starts once the first attempt of the sink has records.
			started := make(chan struct{})
			var (
				mu       sync.Mutex
				received = map[int32]uint64{}
				sinkErr  error
				once     sync.Once
			)
			progress := func(attempt int32, n uint64, err error) {
				mu.Lock()
				received[attempt] = n
				if err != nil && sinkErr == nil {
					sinkErr = err
				}
				mu.Unlock()
				if attempt == 0 && n >= 1000 {
					once.Do(func() { close(started) })
				}
			}
			disturbed := make(chan struct{}) // closed once the disturbance is in place
			jg := sourceToSink(t, "dataplane", graph.Forward, graph.JobGraphOptions{})
			restart, err := scheduler.ParseRestartStrategy("fixed-delay:attempts=1,delay=0s")
			if err != nil {
				t.Fatal(err)
			}
			chainFor := func(v *graph.JobVertex) task.ChainFactory {
				return func(rt *task.Runtime) (task.Chain, error) {
					if v.IsSource() {
						n := uint64(total)
						if tc.freeze && rt.Info.Attempt.Number == 0 {
							n = 0 // without end: only a failover ends this attempt
						}
						// The second half waits for the disturbance to be in place.
						return &sequenceSource{rt: rt, total: n, gate: disturbed, gateAt: total / 2}, nil
					}
					return &checkingSink{rt: rt, progress: progress}, nil
				}
			}
			disp := connect(t, jobmaster.DispatcherConfig{Logger: lg}, &testCatalog{jg: jg, chainFor: chainFor}, producerTM, consumerTM)
			jm, err := jobmaster.NewDriver(jobmaster.Config{
				Job: jg, Dispatcher: disp, RequireSlots: true, NoSlotSharing: true,
				Failover: scheduler.RegionFailover, Restart: restart, Logger: lg,
				// Full buffers only, 16 of 32 KiB in flight per channel: more than the frozen connection's
				// socket buffers take, so the server's write blocks. (With less in flight than the socket
				// buffers hold, a consumer that stops reading looks like one that is backpressured.)
				BufferTimeout: -1, CreditsPerChannel: 16,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var disturbedAt time.Time
			var floodConns []net.Conn
			go func() {
				defer close(disturbed)
				select {
				case <-started:
				case <-ctx.Done():
					return
				}
				disturbedAt = time.Now()
				if tc.freeze {
					proxy.Freeze()
					return
				}
				for range flood {
					c, err := net.Dial("tcp", producerTM.DataAddress())
					if err != nil {
						t.Errorf("flood connection: %v", err)
						return
					}
					floodConns = append(floodConns, c)
				}
			}()
			snap := jm.Run(ctx)
			<-disturbed
			for _, c := range floodConns {
				c.Close()
			}
			if ctx.Err() != nil {
				t.Fatalf("the job hung: ended %s after the disturbance, received %v", snap.Status, received)
			}
			if snap.Status != jobmaster.StatusFinished {
				t.Fatalf("job %s: %v (received %v)\n%s", snap.Status, snap.Err, received, logs.String())
			}
			mu.Lock()
			defer mu.Unlock()
			if sinkErr != nil {
				t.Fatal(sinkErr)
			}
			last := int32(len(snap.Failovers))
			if received[last] != total {
				t.Fatalf("the sink's attempt %d received %d records, want %d (all: %v)", last, received[last], total, received)
			}
			if len(snap.Failovers) != tc.failovers {
				t.Fatalf("%d failovers, want %d: %+v", len(snap.Failovers), tc.failovers, snap.Failovers)
			}
			if tc.freeze {
				ev := snap.Failovers[0]
				// The cause crossed the session as text: it names the sink's first attempt as a consumer that is gone.
				sink := ident.Attempt{Subtask: ident.Subtask{Vertex: jg.Vertices[1].ID}}
				if !strings.Contains(ev.Cause.Error(), "consumer "+sink.String()+" at ") || !strings.Contains(ev.Cause.Error(), "is gone") {
					t.Fatalf("failover cause %v, want the sink's connection named as a consumer that is gone", ev.Cause)
				}
				if !strings.Contains(ev.Cause.Error(), "stopped reading for 300ms") {
					t.Errorf("failover cause %q does not say why", ev.Cause)
				}
				if d := ev.FailedAt.Sub(disturbedAt); d > writeTimeout+3*time.Second {
					t.Errorf("failed over %s after the consumer stopped reading", d)
				}
				t.Logf("failed over %s after the freeze: %v", ev.FailedAt.Sub(disturbedAt).Round(time.Millisecond), ev.Cause)
				return
			}
			if n := logs.count("refused a connection"); n != 1 {
				t.Errorf("%d log lines about refused connections, want 1 for %d refusals", n, flood-maxConns+1)
			}
		})
	}
}

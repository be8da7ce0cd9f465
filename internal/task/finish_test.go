package task

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
)

// finishChain is a small operator chain for the finishing tests: as a source it emits records (each a
// uvarint of its number) when the test releases it and then ends; with inputs it counts the records it
// gets. It logs what the task asks of it.
type finishChain struct {
	NoEventTime
	rt      *Runtime
	source  bool
	records int
	release chan struct{} // a source emits once it is closed
	// closing, when set, is closed by Close, which then waits for hold: the test acts while the task has
	// ended its work but not yet its life.
	closing, hold chan struct{}

	mu        sync.Mutex
	log       []string
	processed int
	emitted   bool
}

func (c *finishChain) logf(format string, args ...any) {
	c.mu.Lock()
	c.log = append(c.log, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

func (c *finishChain) events() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

func (c *finishChain) Open() error { return nil }

func (c *finishChain) ProcessBuffer(_ int, dec *network.RecordDecoder) (int, error) {
	n := 0
	for {
		rec, err := dec.Next()
		if err != nil || rec == nil {
			c.mu.Lock()
			c.processed += n
			c.mu.Unlock()
			return n, err
		}
		n++
	}
}

func (c *finishChain) IsSource() bool { return c.source }

func (c *finishChain) PollSource() (SourceStatus, error) {
	select {
	case <-c.release:
	default:
		return NothingAvailable, nil
	}
	if c.emitted {
		return 0, errors.New("polled again after its end of input")
	}
	c.emitted = true
	c.logf("emit %d", c.records)
	for i := range c.records {
		if err := c.rt.Outputs[0].EmitRecord(0, binary.AppendUvarint(nil, uint64(i))); err != nil {
			return 0, err
		}
		c.rt.Counters.Out++
	}
	return EndOfInput, nil
}

func (c *finishChain) SourceAvailable() <-chan struct{} { return c.release }

func (c *finishChain) EndInput() error {
	c.logf("end input after %d", c.count())
	return nil
}

func (c *finishChain) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.processed
}

func (c *finishChain) Close() error {
	if c.closing != nil {
		close(c.closing)
		<-c.hold
	}
	return nil
}

func (c *finishChain) Snapshot(id int64) ([]StateWriter, error) {
	c.logf("snapshot %d after %d", id, c.count())
	return nil, nil
}

func (c *finishChain) Restore(states map[string][]byte) error {
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range states {
			if !yield(k) {
				return
			}
		}
	})
	c.logf("restore %v", names)
	return nil
}

func (c *finishChain) RestoreRescaled(map[string][][]byte) error { return errors.New("not rescalable") }

func (c *finishChain) NotifyCheckpointComplete(id int64) error {
	c.logf("complete %d", id)
	return nil
}

// finishHarness runs one task against a real partition manager, network memory and in-memory checkpoint
// storage, and collects what the task reports.
type finishHarness struct {
	t       *testing.T
	pm      *network.PartitionManager
	mem     *network.NetworkMemory
	store   *checkpoint.Storage
	updates chan deploy.Update
	acks    chan string // "ack 3" or "decline 3: ..."
	handles map[int64]checkpoint.StateHandle
	hmu     sync.Mutex
}

func newFinishHarness(t *testing.T) *finishHarness {
	mem, err := network.NewNetworkMemory(4<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &finishHarness{t: t, pm: network.NewPartitionManager(), mem: mem, store: st,
		updates: make(chan deploy.Update, 256), acks: make(chan string, 64), handles: map[int64]checkpoint.StateHandle{}}
}

func (h *finishHarness) setup(final bool) *CheckpointSetup {
	return &CheckpointSetup{
		Store: h.store, FinalCheckpoint: final,
		Ack: func(id int64, _ ident.Attempt, sh checkpoint.StateHandle, _ AckStats) {
			h.hmu.Lock()
			h.handles[id] = sh
			h.hmu.Unlock()
			h.acks <- fmt.Sprintf("ack %d", id)
		},
		Decline: func(id int64, _ ident.Attempt, err error) { h.acks <- fmt.Sprintf("decline %d: %v", id, err) },
	}
}

// partition registers a result partition the test writes to, on a pool of 8 buffers destroyed at the
// end of the test.
func (h *finishHarness) partition(id ident.PartitionID, opts network.PartitionOptions) *network.ResultPartition {
	h.t.Helper()
	pool, err := h.mem.NewPool("producer", 8)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(pool.Destroy)
	p, err := network.NewResultPartition(id, opts, pool, make(chan struct{}))
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.pm.Register(p); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// start runs a task on its own goroutine; the returned function waits for its end.
func (h *finishHarness) start(cfg Config) (*Task, func()) {
	tk := New(cfg, Env{Partitions: h.pm, Memory: h.mem, Report: func(u deploy.Update) { h.updates <- u },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); tk.Run() }()
	return tk, wg.Wait
}

// await waits for the next update that matches what (a state name, or "observed input ended"), skipping
// others, and fails on a terminal state that is not it.
func (h *finishHarness) await(what string) deploy.Update {
	h.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case u := <-h.updates:
			if o := u.Observation; o != nil {
				if o.Kind == deploy.InputEnded && what == "observed input ended" {
					return u
				}
				continue
			}
			if u.State.String() == what {
				return u
			}
			if u.State.Terminal() {
				h.t.Fatalf("waiting for %s: task ended %s (%v)", what, u.State, u.Err)
			}
		case <-timeout:
			h.t.Fatalf("waiting for %s: timed out", what)
		}
	}
}

func (h *finishHarness) awaitAck(want string) {
	h.t.Helper()
	select {
	case got := <-h.acks:
		if got != want {
			h.t.Fatalf("got %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		h.t.Fatalf("waiting for %q: timed out", want)
	}
}

// sync returns once the task ran the mail given before it: mail runs in order.
func (h *finishHarness) sync(tk *Task) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !tk.mb.idle() {
		if time.Now().After(deadline) {
			h.t.Fatal("mail not run")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// reader drains subpartition 0 of a partition and logs what comes: "records", and events by name.
type reader struct {
	mu   sync.Mutex
	seen []string
	done chan struct{}
}

func (h *finishHarness) read(id ident.PartitionID, stop <-chan struct{}) *reader {
	h.t.Helper()
	wake := make(chan struct{}, 1)
	var v *network.View
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		v, err = h.pm.CreateView(id, 0, ident.Attempt{Subtask: ident.Subtask{Vertex: 9}}, 64, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		if err == nil {
			break
		}
		if !errors.Is(err, network.ErrPartitionNotFound) || time.Now().After(deadline) {
			h.t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	r := &reader{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			b, err := v.Poll()
			if err != nil {
				return
			}
			if b == nil {
				select {
				case <-wake:
				case <-stop:
					return
				}
				continue
			}
			what := "records"
			var ev network.Event
			if b.Kind == network.KindEvent {
				ev, _ = network.DecodeEvent(b.Payload())
				what = ev.Type.String()
				if ev.Type == network.EventBarrier {
					what += fmt.Sprint(" ", ev.CheckpointID)
				}
			}
			b.Recycle()
			v.AddCredit(1)
			r.mu.Lock()
			if len(r.seen) == 0 || r.seen[len(r.seen)-1] != what || what != "records" {
				r.seen = append(r.seen, what)
			}
			r.mu.Unlock()
			if ev.Type == network.EventEndOfPartition {
				return
			}
		}
	}()
	return r
}

func (r *reader) got() string {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.seen, ", ")
}

var finishSource = ident.Attempt{Subtask: ident.Subtask{Vertex: 0, Index: 0}}

func sourceConfig(c *finishChain, cs *CheckpointSetup) Config {
	return Config{
		Info:          deploy.Info{JobName: "finish", VertexName: "src", Attempt: finishSource, Parallelism: 1, MaxParallelism: 1},
		Outputs:       []deploy.OutputSpec{{Result: 2, Subpartitions: 1}},
		Chain:         func(rt *Runtime) (Chain, error) { c.rt = rt; return c, nil },
		BufferTimeout: -1, MaxRecordSize: 1 << 16, Checkpoints: cs,
	}
}

// TestSourceWaitsForTheFinalCheckpoint pins the finishing protocol of a source task: after its input ends
// it sends end of data, reports that its input ended, and finishes only once it heard that a checkpoint it
// snapshotted after the end completed; a snapshot from before the end, or a checkpoint that was aborted,
// does not let it finish. Without a final checkpoint it finishes at once, and cancellation ends the wait.
func TestSourceWaitsForTheFinalCheckpoint(t *testing.T) {
	defer goleak.VerifyNone(t)
	cases := []struct {
		name  string
		final bool
		// run drives the task after start; it returns the state the task must end in.
		run        func(h *finishHarness, tk *Task, c *finishChain) deploy.State
		wantOutput string
		wantChain  string
	}{
		{
			name:  "finishes after the final checkpoint",
			final: true,
			run: func(h *finishHarness, tk *Task, c *finishChain) deploy.State {
				close(c.release)
				h.await("observed input ended")
				tk.TriggerCheckpoint(1, 0, 0)
				h.awaitAck("ack 1")
				tk.NotifyCheckpointComplete(1)
				return deploy.Finished
			},
			wantOutput: "records, end-of-data, barrier 1, end-of-partition",
			wantChain:  "emit 10; end input after 0; snapshot 1 after 0; complete 1",
		},
		{
			name:  "an earlier checkpoint or an aborted one does not end the wait",
			final: true,
			run: func(h *finishHarness, tk *Task, c *finishChain) deploy.State {
				h.await("RUNNING")
				tk.TriggerCheckpoint(1, 0, 0)
				h.awaitAck("ack 1")
				close(c.release)
				h.await("observed input ended")
				tk.NotifyCheckpointComplete(1) // taken before the end
				h.sync(tk)                     // mail of different kinds taken at once runs triggers first
				tk.TriggerCheckpoint(2, 0, 0)
				h.awaitAck("ack 2")
				tk.AbortCheckpoint(2)
				h.sync(tk)
				if s := tk.State(); s != deploy.Running {
					h.t.Fatalf("state %s after checkpoint 1 completed and 2 was aborted, want RUNNING", s)
				}
				tk.TriggerCheckpoint(3, 0, 0)
				h.awaitAck("ack 3")
				tk.NotifyCheckpointComplete(3)
				return deploy.Finished
			},
			wantOutput: "barrier 1, records, end-of-data, barrier 2, barrier 3, end-of-partition",
			wantChain:  "snapshot 1 after 0; emit 10; end input after 0; complete 1; snapshot 2 after 0; snapshot 3 after 0; complete 3",
		},
		{
			name:  "a trigger that arrives after the covering checkpoint completed is declined, not dropped",
			final: true,
			run: func(h *finishHarness, tk *Task, c *finishChain) deploy.State {
				close(c.release)
				h.await("observed input ended")
				tk.TriggerCheckpoint(1, 0, 0)
				h.awaitAck("ack 1")
				tk.NotifyCheckpointComplete(1)
				<-c.closing // the task ended its partitions and is closing its chain
				if !tk.TriggerCheckpoint(2, 0, 0) {
					h.t.Fatal("the closing task refused trigger 2: the job master would decline it itself")
				}
				close(c.hold)
				h.awaitAck("decline 2: " + checkpoint.ErrTaskNotReady.Error() + ": the task ended before it took the checkpoint")
				return deploy.Finished
			},
			wantOutput: "records, end-of-data, barrier 1, end-of-partition",
			wantChain:  "emit 10; end input after 0; snapshot 1 after 0; complete 1",
		},
		{
			name:  "cancel ends the wait",
			final: true,
			run: func(h *finishHarness, tk *Task, c *finishChain) deploy.State {
				close(c.release)
				h.await("observed input ended")
				tk.Cancel()
				return deploy.Canceled
			},
			wantChain: "emit 10; end input after 0",
		},
		{
			name:  "without a final checkpoint it finishes at the end",
			final: false,
			run: func(h *finishHarness, tk *Task, c *finishChain) deploy.State {
				close(c.release)
				return deploy.Finished
			},
			wantOutput: "records, end-of-partition",
			wantChain:  "emit 10; end input after 0",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newFinishHarness(t)
			c := &finishChain{source: true, records: 10, release: make(chan struct{})}
			if strings.Contains(tc.name, "declined") {
				c.closing, c.hold = make(chan struct{}), make(chan struct{})
			}
			tk, wait := h.start(sourceConfig(c, h.setup(tc.final)))
			stop := make(chan struct{})
			var out *reader
			if tc.wantOutput != "" {
				out = h.read(ident.PartitionID{Result: 2, Producer: finishSource}, stop)
			}
			want := tc.run(h, tk, c)
			h.await(want.String())
			wait()
			close(stop)
			if out != nil {
				if got := out.got(); got != tc.wantOutput {
					t.Errorf("output %q, want %q", got, tc.wantOutput)
				}
			}
			if got := strings.Join(c.events(), "; "); got != tc.wantChain {
				t.Errorf("chain heard %q, want %q", got, tc.wantChain)
			}
			h.pm.ReleaseAll()
		})
	}
}

// TestRestoredAfterItsEndEmitsNothing restores a source from a checkpoint taken after its input ended: it
// must not poll or end its input again, and still waits for a checkpoint covering its end.
func TestRestoredAfterItsEndEmitsNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newFinishHarness(t)
	c := &finishChain{source: true, records: 10, release: make(chan struct{})}
	close(c.release)
	tk, wait := h.start(sourceConfig(c, h.setup(true)))
	h.await("observed input ended")
	tk.TriggerCheckpoint(1, 0, 0)
	h.awaitAck("ack 1")
	tk.Cancel() // the attempt fails over before checkpoint 1 is known to be complete
	h.await("CANCELED")
	wait()
	h.pm.ReleaseAll()

	h.hmu.Lock()
	handle := h.handles[1]
	h.hmu.Unlock()
	c2 := &finishChain{source: true, records: 10, release: make(chan struct{})}
	close(c2.release)
	cfg := sourceConfig(c2, h.setup(true))
	cfg.Info.Attempt.Number = 1
	cfg.Restore = &deploy.RestoreSpec{CheckpointID: 1, Handle: handle}
	stop := make(chan struct{})
	defer close(stop)
	tk2, wait2 := h.start(cfg)
	out := h.read(ident.PartitionID{Result: 2, Producer: cfg.Info.Attempt}, stop)
	h.await("observed input ended")
	tk2.TriggerCheckpoint(2, 0, 0)
	h.awaitAck("ack 2")
	tk2.NotifyCheckpointComplete(2)
	h.await("FINISHED")
	wait2()
	if got, want := out.got(), "end-of-data, barrier 2, end-of-partition"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	if got, want := strings.Join(c2.events(), "; "), "restore []; snapshot 2 after 0; complete 2"; got != want {
		t.Errorf("restored chain heard %q, want %q", got, want)
	}
	h.pm.ReleaseAll()
}

// TestTriggeredConsumerSnapshotsAfterItsLastRecord triggers a task with an input directly (as the
// coordinator does once its upstream finished) before it has read its input: the snapshot must come after
// the last record, its end of input and the channel's end, since the finished upstream will not replay.
// Records after a channel's end of data fail the task.
func TestTriggeredConsumerSnapshotsAfterItsLastRecord(t *testing.T) {
	defer goleak.VerifyNone(t)
	producer := ident.Attempt{Subtask: ident.Subtask{Vertex: 0, Index: 0}}
	consumer := ident.Attempt{Subtask: ident.Subtask{Vertex: 1, Index: 0}}
	for _, tc := range []struct {
		name     string
		extra    bool // a record after end of data
		wantLog  string
		wantFail string
	}{
		{name: "snapshot after the end", wantLog: "end input after 100; snapshot 5 after 100; complete 5"},
		{name: "records after end of data", extra: true, wantLog: "end input after 100", wantFail: "records after the channel's end of data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFinishHarness(t)
			id := ident.PartitionID{Result: 1, Producer: producer}
			p := h.partition(id, network.PartitionOptions{Subpartitions: 1, MaxRecordSize: 1 << 16})
			c := &finishChain{}
			cfg := Config{
				Info:   deploy.Info{JobName: "finish", VertexName: "sink", Attempt: consumer, Parallelism: 1, MaxParallelism: 1},
				Inputs: []deploy.InputSpec{{Channels: []deploy.ChannelSpec{{Partition: id, Subpartition: 0, Local: true}}}},
				Chain:  func(rt *Runtime) (Chain, error) { c.rt = rt; return c, nil }, BufferTimeout: -1, MaxRecordSize: 1 << 16,
				Checkpoints: h.setup(true),
			}
			tk, wait := h.start(cfg)
			h.await("RUNNING")
			tk.TriggerCheckpoint(5, 0, 0)
			h.sync(tk) // the trigger is in, before any record
			for i := range 100 {
				if err := p.EmitRecord(0, binary.AppendUvarint(nil, uint64(i))); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.BroadcastEvent(network.Event{Type: network.EventEndOfData}); err != nil {
				t.Fatal(err)
			}
			if tc.extra {
				if err := p.EmitRecord(0, []byte{1}); err != nil {
					t.Fatal(err)
				}
				p.FlushAll()
				u := h.await("FAILED")
				wait()
				if u.Err == nil || !strings.Contains(u.Err.Error(), tc.wantFail) || !errors.Is(u.Err, network.ErrCorrupt) {
					t.Fatalf("failed with %v, want %q", u.Err, tc.wantFail)
				}
			} else {
				h.await("observed input ended")
				if err := p.Finish(); err != nil {
					t.Fatal(err)
				}
				h.awaitAck("ack 5")
				tk.NotifyCheckpointComplete(5)
				h.await("FINISHED")
				wait()
			}
			p.Close()
			h.pm.ReleaseAll()
			if got := strings.Join(c.events(), "; "); got != tc.wantLog {
				t.Errorf("chain heard %q, want %q", got, tc.wantLog)
			}
		})
	}
}

// timedChain is a finishChain whose input has event time: it takes watermarks and does nothing with them.
type timedChain struct{ *finishChain }

func (timedChain) InputTimed(int) bool               { return true }
func (timedChain) ProcessWatermark(int64) error      { return nil }
func (timedChain) ProcessWatermarkStatus(bool) error { return nil }

// TestCheckpointPositionBeforeTheFirstRecord takes a checkpoint while a channel's decoder is not yet
// synchronised on a data buffer, and restores a later attempt of the consumer from it. The position the
// checkpoint records must be the first record the attempt has not had; otherwise the later attempt's
// join counts records again that an earlier report covered (or, under task failover, would read again
// records its state holds): a reconnected reader is first re-sent the last watermark, so the attempt
// joins the channel on an event and counts its gap there, before any record. A third attempt restores a
// checkpoint the second took likewise, while its decoder still waited to drop what its state held.
//
// The attempts of the consumer lose the records written while none was attached; their joins must add
// up to those records.
func TestCheckpointPositionBeforeTheFirstRecord(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, tc := range []struct {
		name string
		// gone: a first reader attached and went before the producer writes (its records are dropped).
		gone      bool
		wantFirst uint64 // the first attempt's join
	}{
		{name: "joined on a watermark", gone: true, wantFirst: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFinishHarness(t)
			id := ident.PartitionID{Result: 1, Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: 0, Index: 0}}}
			p := h.partition(id, network.PartitionOptions{Subpartitions: 1, MaxRecordSize: 1 << 16, Reconnectable: true})
			defer func() { p.Close(); h.pm.ReleaseAll() }()
			emit := func(n int) {
				t.Helper()
				for i := range n {
					if err := p.EmitRecord(0, binary.AppendUvarint(nil, uint64(i))); err != nil {
						t.Fatal(err)
					}
				}
				p.FlushAll()
				if err := p.BroadcastWatermark(int64(n)); err != nil {
					t.Fatal(err)
				}
			}
			event := func(ev network.Event) {
				t.Helper()
				if err := p.BroadcastEvent(ev); err != nil {
					t.Fatal(err)
				}
			}
			if tc.gone {
				first, err := h.pm.CreateView(id, 0, ident.Attempt{Subtask: ident.Subtask{Vertex: 1}}, 8, func() {})
				if err != nil {
					t.Fatal(err)
				}
				first.Release()
			}
			emit(10)

			// start runs attempt n of the consumer and returns the records its join says it lost.
			start := func(n int32, restore *deploy.RestoreSpec) (*Task, func(), uint64) {
				t.Helper()
				c := timedChain{&finishChain{}}
				cfg := Config{
					Info:   deploy.Info{JobName: "join", VertexName: "sink", Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: 1}, Number: n}, Parallelism: 1, MaxParallelism: 1},
					Inputs: []deploy.InputSpec{{Channels: []deploy.ChannelSpec{{Partition: id, Subpartition: 0, Local: true}}}},
					Chain:  func(rt *Runtime) (Chain, error) { c.rt = rt; return c, nil }, BufferTimeout: -1, MaxRecordSize: 1 << 16,
					Restore: restore, Checkpoints: h.setup(false),
				}
				tk, wait := h.start(cfg)
				timeout := time.After(10 * time.Second)
				for {
					select {
					case u := <-h.updates:
						if o := u.Observation; o != nil && o.Kind == deploy.ChannelJoined {
							return tk, wait, o.Lost
						}
						if u.State.Terminal() {
							t.Fatalf("attempt %d ended %s (%v) before it joined", n, u.State, u.Err)
						}
					case <-timeout:
						t.Fatalf("attempt %d: no ChannelJoined reported", n)
					}
				}
			}
			tk, wait, lost := start(1, nil)
			if lost != tc.wantFirst {
				t.Fatalf("attempt 1 joined with %d lost, want %d", lost, tc.wantFirst)
			}
			event(network.Event{Type: network.EventBarrier, CheckpointID: 7})
			h.awaitAck("ack 7")
			tk.Cancel()
			h.await("CANCELED")
			wait()

			emit(5) // dropped: attempt 1 is gone
			h.hmu.Lock()
			handle := h.handles[7]
			h.hmu.Unlock()
			tk, wait, lost = start(2, &deploy.RestoreSpec{CheckpointID: 7, Handle: handle, SameRun: true})
			if lost != 5 {
				t.Errorf("attempt 2, restored from checkpoint 7, joined with %d lost, want the 5 written after it", lost)
			}
			if tc.gone {
				// Attempt 2 joined on the re-sent watermark, before any data, while its decoder still waits
				// to drop what its restored state holds: checkpoint 8 must record the gap's end, or attempt 3
				// counts attempt 2's gap again.
				event(network.Event{Type: network.EventBarrier, CheckpointID: 8})
				h.awaitAck("ack 8")
				tk.Cancel()
				h.await("CANCELED")
				wait()
				emit(3)
				h.hmu.Lock()
				handle = h.handles[8]
				h.hmu.Unlock()
				tk, wait, lost = start(3, &deploy.RestoreSpec{CheckpointID: 8, Handle: handle, SameRun: true})
				if lost != 3 {
					t.Errorf("attempt 3, restored from checkpoint 8, joined with %d lost, want the 3 written after it", lost)
				}
			}
			tk.Cancel()
			h.await("CANCELED")
			wait()
		})
	}
}

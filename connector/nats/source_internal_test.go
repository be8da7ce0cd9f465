package nats

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runnel-dev/runnel"
)

type fakeCtx struct {
	runnel.RuntimeContext
}

func (fakeCtx) Checkpointing() bool { return true }

// fakeMsg is a delivery whose metadata says what the test wants: a sequence, and the server's count of
// what is left to deliver.
type fakeMsg struct {
	jetstream.Msg
	seq, pending uint64
}

func (m fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}, NumPending: m.pending, NumDelivered: 1}, nil
}
func (fakeMsg) Subject() string        { return "in" }
func (fakeMsg) Data() []byte           { return []byte{1} }
func (fakeMsg) Headers() natsgo.Header { return nil }
func (fakeMsg) Reply() string          { return "" }
func (fakeMsg) Ack() error             { return nil }

type collect struct{ n int }

// embeddedJetStream starts a nats-server with JetStream for the test and connects to it.
func embeddedJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server not ready after 10 s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := natsgo.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func (c *collect) Collect(int) { c.n++ }

// TestBoundedEndIsASequence hands a bounded reader the delivery of message 3 of 5 with a pending count of
// zero, as the server reports when its count fell short (a consumer reset that met the deletions of a
// work queue's acknowledgements): the reader reads on while the stream holds a message of its subjects up
// to its end, and ends there once it does not (the end's message deleted).
func TestBoundedEndIsASequence(t *testing.T) {
	js := embeddedJetStream(t)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in", "other"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"in", "in", "in", "in", "in", "other"} {
		if _, err := js.Publish(ctx, subj, []byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	// poll hands a reader whose end is end (0: the one it finds) message 3 with a pending count of zero.
	poll := func(end uint64) runnel.InputStatus {
		t.Helper()
		r := &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Stream: "IN", Bounded: true}, decode: func(Msg) (int, error) { return 1, nil }},
			ctx: fakeCtx{}, js: js, filters: []string{"in"}, splits: []int{0}, started: true, explicit: true, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
		if _, err := r.streamInfo(); err != nil {
			t.Fatal(err)
		}
		if r.end = end; end == 0 {
			var err error
			if r.end, err = r.lastOfSubjects(); err != nil || r.end != 5 {
				t.Fatalf("end %d, %v; want 5 (the newest message on subject in)", r.end, err)
			}
		}
		r.fetched = []jetstream.Msg{fakeMsg{seq: 3, pending: 0}}
		var out collect
		status, err := r.PollNext(&out)
		if err != nil || out.n != 1 {
			t.Fatalf("poll: %v, %d records", err, out.n)
		}
		return status
	}
	if status := poll(0); status == runnel.EndOfInput {
		t.Fatal("the reader ended at message 3 because the server counted nothing left; messages 4 and 5 are there")
	}
	for _, seq := range []uint64{4, 5} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, "in", []byte{1}); err != nil { // after the end: not the reader's to wait for
		t.Fatal(err)
	}
	if status := poll(5); status != runnel.EndOfInput {
		t.Fatalf("status %v after message 3 with 4 and 5 deleted, want the end of input", status)
	}
}

// TestBoundedEndAfterQuiet hands a bounded reader message 3 of 5 with a pending count above zero, as the
// server reports it before messages 4 and 5 go (a stream's limits delete them), and then nothing more: the
// reader waits while they are there, and once they are gone it ends after a quiet spell, woken by its own
// timer, instead of waiting forever for a delivery that cannot come.
func TestBoundedEndAfterQuiet(t *testing.T) {
	js := embeddedJetStream(t)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := js.Publish(ctx, "in", []byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	r := &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Stream: "IN", Bounded: true}, decode: func(Msg) (int, error) { return 1, nil }},
		ctx: fakeCtx{}, js: js, filters: []string{"in"}, splits: []int{0}, started: true, end: 5, quiet: 50 * time.Millisecond,
		ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
	if _, err := r.streamInfo(); err != nil {
		t.Fatal(err)
	}
	defer r.stop()
	r.fetched = []jetstream.Msg{fakeMsg{seq: 3, pending: 2}}
	var out collect
	if status, err := r.PollNext(&out); err != nil || out.n != 1 || status == runnel.EndOfInput {
		t.Fatalf("poll of message 3: %v, %v, %d records; want it emitted and the read going on", status, err, out.n)
	}
	// pollQuiet polls until the reader ends or, with nothing delivered, has asked the stream three times.
	pollQuiet := func() runnel.InputStatus {
		t.Helper()
		for range 3 {
			status, err := r.PollNext(&out)
			if err != nil || status != runnel.NothingAvailable {
				if err != nil {
					t.Fatal(err)
				}
				return status
			}
			select {
			case <-r.ready: // the reader's timer
			case <-time.After(10 * time.Second):
				t.Fatal("no wake-up from the reader's quiet timer in 10 s")
			}
			time.Sleep(r.quiet) // the timer can fire a moment before the spell is over on a coarse clock
		}
		return runnel.NothingAvailable
	}
	if status := pollQuiet(); status != runnel.NothingAvailable {
		t.Fatalf("status %v with messages 4 and 5 in the stream, want the read going on", status)
	}
	for _, seq := range []uint64{4, 5} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	if status := pollQuiet(); status != runnel.EndOfInput || !r.finished {
		t.Fatalf("status %v (finished %v) with messages 4 and 5 deleted, want the end of input", status, r.finished)
	}
}

// TestOtherRun pins which consumer names are the source's at another parallelism: prefix_i_p with i < p
// and p not the parallelism, and prefix_i of older versions; not another operator's whose name extends
// the prefix.
func TestOtherRun(t *testing.T) {
	for name, want := range map[string]bool{
		"op_0_2": true, "op_1_2": true, "op_0_3": false, "op_2_3": false, "op_3": true, "op_0": true,
		"op_2_2": false, "op_01_2": false, "op_x_2": false, "op_1_0_2": false, "opx_0_2": false, "op_": false, "op_-1_2": false,
	} {
		if got := otherRun(name, "op", 3); got != want {
			t.Errorf("otherRun(%q, op, 3) = %v, want %v", name, got, want)
		}
	}
}

type fakeList struct{ vs []position }

func (l *fakeList) Get() []position      { return l.vs }
func (l *fakeList) Add(v position)       { l.vs = append(l.vs, v) }
func (l *fakeList) Update(vs []position) { l.vs = append([]position(nil), vs...) }
func (l *fakeList) Clear()               { l.vs = nil }

// TestRestoreNewFilter restores subtask 1 of 2, which reads subject filter in.1 now: from a checkpoint of
// a job that did not have in.1 (its subtask 1 idled and left only the started marker) the restore is
// refused, from a job that never started (nothing) it starts afresh, and from one that read in.1 it takes
// its position.
func TestRestoreNewFilter(t *testing.T) {
	for _, tc := range []struct {
		elems   []position
		refused bool
		pos     map[string]uint64
	}{
		{[]position{{Filter: startedMarker}}, true, map[string]uint64{}},
		{nil, false, map[string]uint64{}},
		{[]position{{Filter: startedMarker}, {Filter: "in.1", Last: 7, Read: true}}, false, map[string]uint64{"in.1": 7}},
		{[]position{{Filter: startedMarker}, {Filter: "in.1", Last: 7, Read: true}, {Filter: "in.2", Last: 9, Read: true}}, true, map[string]uint64{}},
	} {
		r := &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Stream: "IN", Subjects: []string{"in.0", "in.1"}}},
			state: &fakeList{vs: tc.elems}, filters: []string{"in.1"}, pos: map[string]uint64{}}
		r.takeRestored()
		if (r.restoreErr != nil) != tc.refused || fmt.Sprint(r.pos) != fmt.Sprint(tc.pos) {
			t.Errorf("restore of %v: %v, positions %v; want refused %v, positions %v", tc.elems, r.restoreErr, r.pos, tc.refused, tc.pos)
		}
	}
}

// TestRestoreOldFormat restores the reader bytes of the source before its positions were list state (the
// sequence read up to, and the subtask's filters): its filters take the sequence; other filters are refused.
func TestRestoreOldFormat(t *testing.T) {
	old := []byte{sourceStateVersion, 42, 2, 4, 'i', 'n', '.', '1', 4, 'i', 'n', '.', '3'}
	r := &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Stream: "IN"}}, filters: []string{"in.1", "in.3"}, pos: map[string]uint64{}}
	if err := r.RestoreState(old); err != nil || !r.restored || fmt.Sprint(r.pos) != "map[in.1:42 in.3:42]" {
		t.Fatalf("restore: %v, restored %v, positions %v", err, r.restored, r.pos)
	}
	r = &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Stream: "IN"}}, ctx: idx{}, filters: []string{"in.1"}, pos: map[string]uint64{}}
	if err := r.RestoreState(old); err == nil {
		t.Fatal("a restore with other filters was taken")
	}
	if err := r.RestoreState(old[:3]); err == nil {
		t.Fatal("a cut state was taken")
	}
}

type idx struct{ runnel.RuntimeContext }

func (idx) SubtaskIndex() int { return 1 }

package task

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/determinants"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
)

// orderChain records the records it is given, in order (each record names its producer and number).
type orderChain struct {
	finishChain
	omu   sync.Mutex
	order []string
}

func (c *orderChain) ProcessBuffer(_ int, dec *network.RecordDecoder) (int, error) {
	n := 0
	for {
		rec, err := dec.Next()
		if err != nil || rec == nil {
			return n, err
		}
		v, _ := binary.Uvarint(rec)
		c.omu.Lock()
		c.order = append(c.order, fmt.Sprintf("%c%d", 'A'+v/1000, v%1000))
		c.omu.Unlock()
		n++
	}
}

func (c *orderChain) seen() []string {
	c.omu.Lock()
	defer c.omu.Unlock()
	return slices.Clone(c.order)
}

// loggedInputs makes two producers' logged partitions (results firstResult and firstResult+1) in h's
// partition manager, and the input of a task that reads both, one channel each.
func loggedInputs(t *testing.T, h *finishHarness, firstResult int) ([]*network.ResultPartition, deploy.InputSpec) {
	t.Helper()
	budget, err := network.NewLogBudget(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := h.mem.NewPool("producers", 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Destroy)
	var parts []*network.ResultPartition
	var in deploy.InputSpec
	for i := range 2 {
		id := ident.PartitionID{Result: ident.ResultID(firstResult + i), Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: ident.VertexID(5 + i)}}}
		p, err := network.NewResultPartition(id, network.PartitionOptions{Subpartitions: 1, MaxRecordSize: 1 << 10, Reconnectable: true, Log: budget}, pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.pm.Register(p); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
		in.Channels = append(in.Channels, deploy.ChannelSpec{Partition: id, Local: true})
	}
	return parts, in
}

// TestReplayTakesTheRecordedOrder: a task reading two channels from partitions with in-flight logs records
// the channel of every buffer it takes; producer A writes all its records first, then B. A new attempt that
// replays the log reads the same channels again from their start — where both are full at once, so the
// gate alone would interleave them — and its chain sees the records in exactly the order the first attempt
// saw; an attempt that does not replay (the control) sees another order, so the test can tell.
func TestReplayTakesTheRecordedOrder(t *testing.T) {
	const perProducer = 40
	h := newFinishHarness(t)
	parts, in := loggedInputs(t, h, 20)
	log, err := determinants.New(determinants.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	run := func(attempt int32, replay bool, write func()) []string {
		t.Helper()
		c := &orderChain{}
		cfg := Config{
			Info:   deploy.Info{JobName: "replay", VertexName: "join", Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: 1}, Number: attempt}, Parallelism: 1, MaxParallelism: 1},
			Inputs: []deploy.InputSpec{in}, Chain: func(rt *Runtime) (Chain, error) { c.rt = rt; return c, nil },
			BufferTimeout: -1, MaxRecordSize: 1 << 10, CreditsPerChannel: 2, ConnectTimeout: 5 * time.Second,
			Determinants: log, Replay: replay,
		}
		if attempt == 2 {
			cfg.Determinants = nil // the control: no log, no replay
		}
		_, wait := h.start(cfg)
		if write != nil {
			write()
		}
		h.await("FINISHED")
		wait()
		return c.seen()
	}
	emit := func(p int, n int) {
		if err := parts[p].EmitRecord(0, binary.AppendUvarint(nil, uint64(1000*p+n))); err != nil {
			t.Fatal(err)
		}
		parts[p].Flush(0) // a buffer a record: every record is a step of its own
	}
	first := run(0, false, func() {
		for n := range perProducer {
			emit(0, n)
		}
		time.Sleep(50 * time.Millisecond) // A's records are taken before B writes
		for n := range perProducer {
			emit(1, n)
		}
		for _, p := range parts {
			if err := p.Finish(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if len(first) != 2*perProducer || log.Len() == 0 {
		t.Fatalf("first attempt saw %d records, recorded %d steps", len(first), log.Len())
	}
	replayed := run(1, true, nil)
	if !slices.Equal(replayed, first) {
		t.Fatalf("the replay took another order:\n got %v\nwant %v", replayed, first)
	}
	control := run(2, false, nil)
	if slices.Equal(control, first) {
		t.Fatalf("without the log the order is the same (%v): the test proves nothing", control)
	}
}

// timedOrderChain is orderChain with a processing-time timer: the first record arms one 10 ms later, and
// its firing is seen as "T@<ms>" among the records.
type timedOrderChain struct {
	orderChain
	deadline int64
	armed    bool
}

func (c *timedOrderChain) ProcessBuffer(input int, dec *network.RecordDecoder) (int, error) {
	n, err := c.orderChain.ProcessBuffer(input, dec)
	c.omu.Lock()
	if !c.armed && n > 0 {
		c.armed, c.deadline = true, c.rt.Clock.Now().UnixMilli()+10 // the task's clock, as operators read it
	}
	c.omu.Unlock()
	return n, err
}

func (c *timedOrderChain) NextDeadline() int64 {
	c.omu.Lock()
	defer c.omu.Unlock()
	if c.deadline == 0 {
		return math.MaxInt64
	}
	return c.deadline
}

func (c *timedOrderChain) OnProcessingTime(now int64) error {
	c.omu.Lock()
	defer c.omu.Unlock()
	if c.deadline != 0 && now >= c.deadline {
		c.deadline = 0
		c.order = append(c.order, fmt.Sprintf("T@%d", now))
	}
	return nil
}

// TestReplayRunsTimersWhereTheyRan: the first attempt arms a processing-time timer from the time its first
// record was processed, and the timer fires (the clock advanced by 20 ms) between producer A's records and
// B's; the log records the times and the firing. A replaying attempt, whose own clock stands 777 s later and
// never moves, arms the timer from the recorded time and runs it at the same point with the same time; a
// control without the log never fires it.
func TestReplayRunsTimersWhereTheyRan(t *testing.T) {
	h := newFinishHarness(t)
	parts, in := loggedInputs(t, h, 30)
	dets, _ := determinants.New(determinants.DefaultConfig())
	run := func(attempt int32, withLog bool, during func(*timedOrderChain, *clockwork.FakeClock)) []string {
		t.Helper()
		clock := clockwork.NewFakeClockAt(time.UnixMilli(1_000_000 + int64(attempt)*777_000))
		c := &timedOrderChain{}
		cfg := Config{
			Info:   deploy.Info{JobName: "replay", VertexName: "timed", Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: 1}, Number: attempt}, Parallelism: 1, MaxParallelism: 1},
			Inputs: []deploy.InputSpec{in}, Chain: func(rt *Runtime) (Chain, error) { c.rt = rt; return c, nil },
			BufferTimeout: -1, MaxRecordSize: 1 << 10, CreditsPerChannel: 2, ConnectTimeout: 5 * time.Second,
		}
		if withLog {
			cfg.Determinants, cfg.Replay = dets, attempt > 0
		}
		tk := New(cfg, Env{Partitions: h.pm, Memory: h.mem, Report: func(u deploy.Update) { h.updates <- u }, Clock: clock,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		done := make(chan struct{})
		go func() { defer close(done); tk.Run() }()
		if during != nil {
			during(c, clock)
		}
		h.await("FINISHED")
		<-done
		return c.seen()
	}
	emit := func(p, n int) {
		if err := parts[p].EmitRecord(0, binary.AppendUvarint(nil, uint64(1000*p+n))); err != nil {
			t.Fatal(err)
		}
		parts[p].Flush(0)
	}
	first := run(0, true, func(c *timedOrderChain, clock *clockwork.FakeClock) {
		for n := range 5 {
			emit(0, n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := clock.BlockUntilContext(ctx, 1); err != nil { // the task armed its timer
			t.Fatal(err)
		}
		clock.Advance(20 * time.Millisecond)
		deadline := time.Now().Add(5 * time.Second)
		for !slices.Contains(c.seen(), "T@1000020") && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		for n := range 5 {
			emit(1, n)
		}
		for _, p := range parts {
			if err := p.Finish(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if !slices.Contains(first, "T@1000020") {
		t.Fatalf("the first attempt's timer did not fire: %v", first)
	}
	if replayed := run(1, true, nil); !slices.Equal(replayed, first) {
		t.Fatalf("the replay ran the timer elsewhere:\n got %v\nwant %v", replayed, first)
	}
	if control := run(2, false, nil); slices.Contains(control, "T@1000020") {
		t.Fatalf("the control fired the timer without the log: %v", control)
	}
}

// TestProducerTakenOverTwice: a consumer reads records 0..99 of a logged producer; the producer is taken
// over (task failover) and regenerates 0..49, then is taken over again and regenerates 0..149. The
// partition drops what its stream has (0..99) both times, so the consumer, told of nothing, hands its chain
// every record once and drops none itself.
func TestProducerTakenOverTwice(t *testing.T) {
	h := newFinishHarness(t)
	parts, in := loggedInputs(t, h, 40)
	in.Channels = in.Channels[:1]
	p := parts[0]
	c := &orderChain{}
	cfg := Config{
		Info:   deploy.Info{JobName: "rejoin", VertexName: "consumer", Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: 1}}, Parallelism: 1, MaxParallelism: 1},
		Inputs: []deploy.InputSpec{in}, Chain: func(rt *Runtime) (Chain, error) { c.rt = rt; return c, nil },
		BufferTimeout: -1, MaxRecordSize: 1 << 10, CreditsPerChannel: 2, ConnectTimeout: 5 * time.Second,
	}
	_, wait := h.start(cfg)
	emit := func(n int) {
		for i := range n {
			if err := p.EmitRecord(0, binary.AppendUvarint(nil, uint64(i))); err != nil {
				t.Fatal(err)
			}
			p.Flush(0)
		}
	}
	pool, err := h.mem.NewPool("taken over", 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Destroy)
	emit(100)
	for deadline := time.Now().Add(10 * time.Second); len(c.seen()) < 100; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the consumer read %d records of 100", len(c.seen()))
		}
	}
	for _, regenerate := range []int{50, 150} {
		if err := p.Takeover(pool, make(chan struct{}), 0); err != nil {
			t.Fatal(err)
		}
		emit(regenerate)
	}
	if got := p.Discarded(0); got != 100 {
		t.Fatalf("the partition dropped %d regenerated records after the second takeover, want the 100 its stream had", got)
	}
	if err := p.Finish(); err != nil {
		t.Fatal(err)
	}
	var dropped []uint64
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case u := <-h.updates:
			if o := u.Observation; o != nil && o.Kind == deploy.DuplicatesDropped {
				dropped = append(dropped, o.Records)
			}
			if u.State.Terminal() {
				if u.State != deploy.Finished {
					t.Fatalf("consumer ended %s: %v", u.State, u.Err)
				}
				done = true
			}
		case <-timeout:
			t.Fatal("the consumer did not finish")
		}
	}
	wait()
	want := make([]string, 150)
	for i := range want {
		want[i] = fmt.Sprintf("A%d", i)
	}
	if got := c.seen(); !slices.Equal(got, want) {
		t.Fatalf("the chain saw %d records %v, want 0..149 once each", len(got), got)
	}
	if len(dropped) != 0 {
		t.Fatalf("the consumer reported dropping %v: it should have been given nothing twice", dropped)
	}
}

// emittingChain is orderChain that counts an output record per input record, and two for record A7 when
// twice is set: an operator that does not emit the same for the same input.
type emittingChain struct {
	orderChain
	twice bool
}

func (c *emittingChain) ProcessBuffer(input int, dec *network.RecordDecoder) (int, error) {
	n, err := c.orderChain.ProcessBuffer(input, dec)
	c.rt.Counters.Out += uint64(n)
	if c.twice && slices.Contains(c.seen(), "A7") {
		c.twice = false
		c.rt.Counters.Out++
	}
	return n, err
}

// TestReplayDivergenceIsFound: the determinant log records, with every step, the records the task emitted
// since the step before; a replay whose operator emits one record more than the failed attempt did after
// the same input fails with ErrReplayDiverged, naming the step, instead of going on with output that its
// consumers would drop wrongly. A replay that emits the same passes (the control).
func TestReplayDivergenceIsFound(t *testing.T) {
	h := newFinishHarness(t)
	parts, in := loggedInputs(t, h, 60)
	log, err := determinants.New(determinants.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	run := func(attempt int32, replay, twice bool, write func()) deploy.Update {
		t.Helper()
		c := &emittingChain{twice: twice}
		cfg := Config{
			Info:   deploy.Info{JobName: "replay", VertexName: "emit", Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: 1}, Number: attempt}, Parallelism: 1, MaxParallelism: 1},
			Inputs: []deploy.InputSpec{in}, Chain: func(rt *Runtime) (Chain, error) { c.rt = rt; return c, nil },
			BufferTimeout: -1, MaxRecordSize: 1 << 10, CreditsPerChannel: 2, ConnectTimeout: 5 * time.Second,
			Determinants: log, Replay: replay,
		}
		_, wait := h.start(cfg)
		if write != nil {
			write()
		}
		defer wait()
		for {
			select {
			case u := <-h.updates:
				if u.Observation == nil && u.State.Terminal() {
					return u
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the task did not end")
			}
		}
	}
	if u := run(0, false, false, func() {
		for n := range 20 {
			for p := range parts {
				if err := parts[p].EmitRecord(0, binary.AppendUvarint(nil, uint64(1000*p+n))); err != nil {
					t.Fatal(err)
				}
				parts[p].Flush(0)
			}
		}
		for _, p := range parts {
			if err := p.Finish(); err != nil {
				t.Fatal(err)
			}
		}
	}); u.State != deploy.Finished {
		t.Fatalf("the first attempt ended %s: %v", u.State, u.Err)
	}
	if u := run(1, true, false, nil); u.State != deploy.Finished {
		t.Fatalf("a faithful replay ended %s: %v", u.State, u.Err)
	}
	u := run(2, true, true, nil)
	if u.State != deploy.Failed || !errors.Is(u.Err, deploy.ErrReplayDiverged) || !strings.Contains(u.Err.Error(), "had emitted 1 records since its previous step, this attempt 2") {
		t.Fatalf("a diverging replay ended %s: %v", u.State, u.Err)
	}
	t.Log(u.Err)
}

// TestReplayOfAStepThisTaskCannotTake: a determinant log whose step reads a channel this attempt does not
// have (the failed attempt had another shape) is a divergence, typed so (ErrReplayDiverged), so that the job
// master reports it as one when it falls back.
func TestReplayOfAStepThisTaskCannotTake(t *testing.T) {
	h := newFinishHarness(t)
	_, in := loggedInputs(t, h, 60)
	log, err := determinants.New(determinants.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Append(determinants.Entry{Kind: determinants.Buffer, Channel: 9}); err != nil {
		t.Fatal(err)
	}
	c := &emittingChain{}
	cfg := Config{
		Info:   deploy.Info{JobName: "replay", VertexName: "emit", Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: 1}, Number: 1}, Parallelism: 1, MaxParallelism: 1},
		Inputs: []deploy.InputSpec{in}, Chain: func(rt *Runtime) (Chain, error) { c.rt = rt; return c, nil },
		BufferTimeout: -1, MaxRecordSize: 1 << 10, CreditsPerChannel: 2, ConnectTimeout: 5 * time.Second,
		Determinants: log, Replay: true,
	}
	_, wait := h.start(cfg)
	defer wait()
	for {
		select {
		case u := <-h.updates:
			if u.Observation != nil || !u.State.Terminal() {
				continue
			}
			if u.State != deploy.Failed || !errors.Is(u.Err, deploy.ErrReplayDiverged) || !strings.Contains(u.Err.Error(), "buffer(9), which this task cannot replay") {
				t.Fatalf("the replay ended %s: %v", u.State, u.Err)
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("the task did not end")
		}
	}
}

package runnel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// ttlOp is one step of the TTL job: write V under Key, or read Key's state.
type ttlOp struct {
	Key   string
	Write bool
	V     int64
}

// ttlSeen is what the TTL job's function saw for a read.
type ttlSeen struct {
	Key           string
	WriteAck      bool
	Value, InMap  bool // found in the value state (OnCreateAndWrite), in the map state (OnReadAndWrite)
	ValueV, MapV  int64
	PlainSurvives bool // the state without TTL still holds the key's value
	PlainV        int64
}

// stepSource emits the ops the test hands it, one at a time, and ends when the test closes it.
type stepSource struct {
	mu     sync.Mutex
	queue  []ttlOp
	closed bool
	ready  chan struct{} // cap 1: a poll that found nothing waits on it
}

func newStepSource() *stepSource { return &stepSource{ready: make(chan struct{}, 1)} }

func (s *stepSource) push(op ttlOp) {
	s.mu.Lock()
	s.queue = append(s.queue, op)
	s.mu.Unlock()
	s.wake()
}

func (s *stepSource) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wake()
}

func (s *stepSource) wake() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *stepSource) CreateReader(runnel.RuntimeContext) (runnel.SourceReader[ttlOp], error) {
	return s, nil
}

func (s *stepSource) PollNext(out runnel.Collector[ttlOp]) (runnel.InputStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		out.Collect(s.queue[0])
		s.queue = s.queue[1:]
		return runnel.MoreAvailable, nil
	}
	if s.closed {
		return runnel.EndOfInput, nil
	}
	return runnel.NothingAvailable, nil
}

func (s *stepSource) Available() <-chan struct{} { return s.ready }
func (s *stepSource) Close() error               { return nil }

// ttlFunc keeps a value with TTL (refreshed by writes), a map with TTL (refreshed by reads too) and a value
// without TTL for each key, and reports what it finds.
type ttlFunc struct {
	runnel.KeyedProcessBase[string, ttlSeen]
	value runnel.ValueState[int64]
	m     runnel.MapState[string, int64]
	plain runnel.ValueState[int64]
}

func (f *ttlFunc) Open(ctx runnel.KeyedContext[string]) error {
	var err error
	if f.value, err = runnel.NewValueState[int64](runnel.WithTTL(ctx, runnel.StateTTL{TTL: time.Second}), "value"); err != nil {
		return err
	}
	readTTL := runnel.WithTTL(ctx, runnel.StateTTL{TTL: time.Second, UpdateOn: runnel.OnReadAndWrite})
	if f.m, err = runnel.NewMapState[string, int64](readTTL, "map"); err != nil {
		return err
	}
	f.plain, err = runnel.NewValueState[int64](ctx, "plain")
	return err
}

func (f *ttlFunc) ProcessElement(_ runnel.KeyedContext[string], op ttlOp, out runnel.Collector[ttlSeen]) error {
	if op.Write {
		f.value.Update(op.V)
		f.m.Put("v", op.V)
		f.plain.Update(op.V)
		out.Collect(ttlSeen{Key: op.Key, WriteAck: true})
		return nil
	}
	s := ttlSeen{Key: op.Key}
	s.ValueV, s.Value = f.value.Value()
	s.MapV, s.InMap = f.m.Get("v")
	s.PlainV, s.PlainSurvives = f.plain.Value()
	out.Collect(s)
	return nil
}

// ttlSink hands each record to the test as it arrives.
type ttlSink struct{ got chan ttlSeen }

func (s *ttlSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[ttlSeen], error) {
	return s, nil
}

func (s *ttlSink) Write(v ttlSeen) error {
	s.got <- v
	return nil
}
func (s *ttlSink) Flush() error { return nil }
func (s *ttlSink) Close() error { return nil }

// TestStateTTLInAJob runs a keyed job on a manual processing-time clock, on both backends: a value with
// TTL is gone one TTL after its write, however often it is read; a map with OnReadAndWrite lives on while
// it is read within its TTL, and goes once it is not; a state without TTL keeps its value throughout.
func TestStateTTLInAJob(t *testing.T) {
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
			env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithClock(clock), runnel.WithStateBackend(backend))
			src := newStepSource()
			sink := &ttlSink{got: make(chan ttlSeen, 1)}
			ops := runnel.FromSource[ttlOp](env, src).Name("ops").WithCodec(codec.MustStruct[ttlOp]())
			runnel.Process(runnel.KeyBy(ops, func(o ttlOp) string { return o.Key }),
				func() runnel.KeyedProcessFunction[string, ttlOp, ttlSeen] { return &ttlFunc{} }).Name("ttl").
				WithCodec(codec.MustStruct[ttlSeen]()).
				SinkTo(sink).Name("sink")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			type result struct {
				res *runnel.JobResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := env.Execute(ctx, "ttl")
				done <- result{res, err}
			}()
			// step sends op and waits for what the job made of it, so that the clock moves between records.
			step := func(op ttlOp) ttlSeen {
				t.Helper()
				src.push(op)
				select {
				case s := <-sink.got:
					return s
				case r := <-done:
					t.Fatalf("job ended early: %+v %v", r.res, r.err)
				case <-ctx.Done():
					t.Fatal("timed out waiting for the job")
				}
				return ttlSeen{}
			}
			step(ttlOp{Key: "a", Write: true, V: 7})
			for _, c := range []struct {
				advance      time.Duration
				value, inMap bool
			}{
				{500 * time.Millisecond, true, true},  // 500ms after the write: both live; the map's read refreshes it
				{600 * time.Millisecond, false, true}, // 1.1s after the write: the value is gone; the map was read 600ms ago
				{900 * time.Millisecond, false, true}, // read 900ms ago
				{time.Second, false, false},           // read a second ago: gone
			} {
				clock.Advance(c.advance)
				s := step(ttlOp{Key: "a"})
				if s.Value != c.value || s.InMap != c.inMap || (s.Value && s.ValueV != 7) || (s.InMap && s.MapV != 7) {
					t.Fatalf("after %v more: value %v (%d), map %v (%d); want value %v, map %v",
						c.advance, s.Value, s.ValueV, s.InMap, s.MapV, c.value, c.inMap)
				}
				if !s.PlainSurvives || s.PlainV != 7 {
					t.Fatalf("after %v more: the state without TTL lost its value (%v %d)", c.advance, s.PlainSurvives, s.PlainV)
				}
			}
			// A new write starts a new time to live.
			step(ttlOp{Key: "a", Write: true, V: 8})
			clock.Advance(999 * time.Millisecond)
			if s := step(ttlOp{Key: "a"}); !s.Value || s.ValueV != 8 {
				t.Fatalf("999ms after a new write: value %v %d", s.Value, s.ValueV)
			}
			src.close()
			r := <-done
			if r.err != nil || r.res.Status != "FINISHED" {
				t.Fatal(fmt.Errorf("job: %v %+v", r.err, r.res))
			}
		})
	}
}

// sweptKeys writes a value with a TTL per key and, at the end of its input, counts the keys that still
// have state (ForEachKey visits a key until its expired state is swept).
type sweptKeys struct {
	runnel.KeyedProcessBase[string, int]
	v runnel.ValueState[int64]
}

func (f *sweptKeys) Open(ctx runnel.KeyedContext[string]) error {
	var err error
	f.v, err = runnel.NewValueState[int64](runnel.WithTTL(ctx, runnel.StateTTL{TTL: time.Second}), "v")
	return err
}

func (f *sweptKeys) ProcessElement(_ runnel.KeyedContext[string], op ttlOp, out runnel.Collector[int]) error {
	f.v.Update(op.V)
	if op.Key == "last" {
		out.Collect(-1) // the test's sign that every write was processed
	}
	return nil
}

func (f *sweptKeys) EndInput(ctx runnel.KeyedContext[string], out runnel.Collector[int]) error {
	n := 0
	err := ctx.ForEachKey(func(string) error { n++; return nil })
	out.Collect(n)
	return err
}

// TestTTLSweptByTheOperator: a keyed operator with TTL state sweeps it on its processing-time deadline
// (every second of the task clock), so the keys of expired state are gone without being read again.
func TestTTLSweptByTheOperator(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	env := runnel.NewEnvironment(runnel.WithClock(clock), runnel.WithLogger(quiet))
	src := newStepSource()
	out := make(chan int, 4)
	counts := runnel.Process(runnel.KeyBy(runnel.FromSource(env, src).WithCodec(codec.MustStruct[ttlOp]()), func(op ttlOp) string { return op.Key }),
		func() runnel.KeyedProcessFunction[string, ttlOp, int] { return &sweptKeys{} })
	counts.SinkTo(chanSink(out))
	done := make(chan error, 1)
	go func() { _, err := env.Execute(context.Background(), "sweep"); done <- err }()
	for i := range 100 {
		src.push(ttlOp{Key: fmt.Sprint("k", i), Write: true, V: int64(i)})
	}
	src.push(ttlOp{Key: "last", Write: true})
	if got := <-out; got != -1 {
		t.Fatalf("got %d before the writes were done", got)
	}
	// Past the TTL: the sweep due every second of the task clock frees the expired keys.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if err := clock.BlockUntilContext(ctx, 1); err != nil { // the task's timer for the next sweep
			t.Fatal(err)
		}
		clock.Advance(1500 * time.Millisecond)
	}
	if err := clock.BlockUntilContext(ctx, 1); err != nil { // the second sweep ran and set the timer again
		t.Fatal(err)
	}
	src.close()
	if got := <-out; got != 0 {
		t.Fatalf("%d keys still have state after their TTL and a sweep, want 0", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// chanSink sends what it is given to a channel.
type chanSink chan int

func (c chanSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[int], error) { return c, nil }
func (c chanSink) Write(v int) error                                                  { c <- v; return nil }
func (c chanSink) Flush() error                                                       { return nil }
func (c chanSink) Close() error                                                       { return nil }

package runnel_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// scripted is a source of clicks that emits one click per poll and, at a nil step, waits until release
// is closed.
type scripted struct {
	steps   []*click
	release <-chan struct{}
}

func (s *scripted) CreateReader(runnel.RuntimeContext) (runnel.SourceReader[click], error) {
	return &scriptedReader{s: s, steps: s.steps}, nil
}

type scriptedReader struct {
	s     *scripted
	steps []*click
}

func (r *scriptedReader) PollNext(out runnel.Collector[click]) (runnel.InputStatus, error) {
	if len(r.steps) == 0 {
		return runnel.EndOfInput, nil
	}
	if r.steps[0] == nil {
		select {
		case <-r.s.release:
			r.steps = r.steps[1:]
			return runnel.MoreAvailable, nil
		default:
			return runnel.NothingAvailable, nil
		}
	}
	out.Collect(*r.steps[0])
	r.steps = r.steps[1:]
	return runnel.MoreAvailable, nil
}
func (r *scriptedReader) Available() <-chan struct{} { return r.s.release }
func (r *scriptedReader) Close() error               { return nil }

// stamped is a sink that keeps what it is given as "v@ts", with the timestamps the stream carried.
type stamped[T any] struct {
	mu  sync.Mutex
	got []string
}

func (s *stamped[T]) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[T], error) { return s, nil }
func (s *stamped[T]) Write(T) error                                                    { return fmt.Errorf("Write on a timed stream") }
func (s *stamped[T]) WriteTimed(v T, ts int64) error {
	s.mu.Lock()
	s.got = append(s.got, fmt.Sprintf("%v@%d", v, ts))
	s.mu.Unlock()
	return nil
}
func (s *stamped[T]) Flush() error { return nil }
func (s *stamped[T]) Close() error { return nil }

func (s *stamped[T]) sorted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.got))
}

// pairJoin joins clicks as "left N-right N"; it sends pairs more than 5 ms apart to a side output too,
// and closes release when it joins the pair whose two records each came after its side's watermark
// marker, which tells the sources that the join's watermark has reached both markers.
type pairJoin struct {
	l       *lifecycle
	far     runnel.OutputTag[string]
	release func()
	sub     int
	pairs   *runnel.Counter
}

func (f *pairJoin) Open(ctx runnel.RuntimeContext) error {
	f.sub = ctx.SubtaskIndex()
	f.pairs = ctx.Metrics().Counter("pairs")
	f.l.note(ctx.OperatorName(), f.sub, fmt.Sprintf("open %d/%d", f.sub, ctx.Parallelism()))
	return nil
}

func (f *pairJoin) ProcessElement(l, r click, ctx runnel.JoinContext, out runnel.Collector[string]) error {
	if ctx.LeftTimestamp() != l.At || ctx.RightTimestamp() != r.At {
		return fmt.Errorf("join context %d/%d for %+v %+v", ctx.LeftTimestamp(), ctx.RightTimestamp(), l, r)
	}
	if l.N == 4 && r.N == 105 {
		f.release()
	}
	p := fmt.Sprintf("%d-%d", l.N, r.N)
	out.Collect(p)
	if d := l.At - r.At; d > 5 || d < -5 {
		f.far.Emit(ctx, p)
	}
	f.pairs.Inc()
	return nil
}

func (f *pairJoin) Close() error { f.l.note("join", f.sub, "close"); return nil }

// TestIntervalJoinProcess runs IntervalJoinBetween with an exclusive lower bound and late side outputs for
// both sides through a whole job: the pairs (a nested loop over the records that are not late, with the
// bounds), their timestamps (the later of the two), each side's late records on its side output at their
// own timestamps, the function's side output, its lifecycle on each subtask and its metric.
//
// Lateness in a job depends on when each input's watermark reaches the join. The script pins it: each
// source sends its records before 1000, a watermark at 1000, a record at 1000, and waits; the join
// releases both sources when it joins those two records at 1000, so its watermark is then exactly 1000
// (both inputs at 1000, nothing beyond until the end), and of what follows, the records below 1000 are
// late and the others are not. Nothing before the markers is late or cleaned up before its partners came.
func TestIntervalJoinProcess(t *testing.T) {
	at := func(user string, ts, n int64) *click { return &click{User: user, At: ts, N: n} }
	left := []*click{at("a", 100, 1), at("a", 200, 2), at("b", 150, 3), at("b", 500, 8), at("wm", 1000, 0), at("a", 1000, 4),
		nil, at("a", 300, 5), at("a", 999, 6), at("a", 1000, 7), at("a", 1003, 9)}
	right := []*click{at("a", 90, 101), at("a", 110, 102), at("a", 195, 103), at("b", 141, 104), at("b", 140, 108),
		at("b", 505, 109), at("wm", 1000, 0), at("a", 1000, 105), nil, at("a", 400, 106), at("a", 1005, 107)}
	// The reference: a record after the wait below 1000 is late; the others join when -10 < tb-ta <= 10.
	onTime := func(script []*click) (kept, late []click) {
		waited := false
		for _, c := range script {
			switch {
			case c == nil:
				waited = true
			case c.User == "wm":
			case waited && c.At < 1000:
				late = append(late, *c)
			default:
				kept = append(kept, *c)
			}
		}
		return kept, late
	}
	ls, lateL := onTime(left)
	rs, lateR := onTime(right)
	var wantPairs, wantFar, wantLateL, wantLateR []string
	for _, l := range ls {
		for _, r := range rs {
			if l.User == r.User && r.At > l.At-10 && r.At <= l.At+10 {
				p := fmt.Sprintf("%d-%d@%d", l.N, r.N, max(l.At, r.At))
				wantPairs = append(wantPairs, p)
				if r.At-l.At > 5 || l.At-r.At > 5 {
					wantFar = append(wantFar, p)
				}
			}
		}
	}
	for _, c := range lateL {
		wantLateL = append(wantLateL, fmt.Sprintf("%v@%d", c, c.At))
	}
	for _, c := range lateR {
		wantLateR = append(wantLateR, fmt.Sprintf("%v@%d", c, c.At))
	}
	slices.Sort(wantPairs)
	slices.Sort(wantFar)
	slices.Sort(wantLateL)
	slices.Sort(wantLateR)

	release := make(chan struct{})
	var once sync.Once
	l := &lifecycle{events: map[string][]string{}}
	env := runnel.NewEnvironment(runnel.WithTaskManagers(2), runnel.WithChaining(false), runnel.WithLogger(quiet))
	stream := func(name string, script []*click) *runnel.KeyedStream[string, click] {
		s := runnel.FromSource(env, &scripted{steps: script, release: release}).Name(name).SetParallelism(1).
			WithCodec(codec.MustStruct[click]()).
			WithTimestamps(runnel.CustomWatermarks(func() runnel.WatermarkGenerator[click] { return markers{} }).
				WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
		s = s.Filter(func(c click) (bool, error) { return c.User != "wm", nil })
		return runnel.KeyBy(s, func(c click) string { return c.User })
	}
	lateLeft, lateRight := runnel.NewOutputTag[click]("late-left"), runnel.NewOutputTag[click]("late-right")
	far := runnel.NewOutputTag[string]("far")
	joined := runnel.IntervalJoinProcess(
		runnel.IntervalJoinBetween(stream("left", left), stream("right", right), -10*time.Millisecond, 10*time.Millisecond).
			LowerBoundExclusive().SideOutputLeftLateData(lateLeft).SideOutputRightLateData(lateRight),
		func() runnel.ProcessJoinFunction[click, click, string] {
			return &pairJoin{l: l, far: far, release: func() { once.Do(func() { close(release) }) }}
		}).Name("join").SetParallelism(2)
	pairs, farSink := &stamped[string]{}, &stamped[string]{}
	lateLSink, lateRSink := &stamped[click]{}, &stamped[click]{}
	joined.SinkTo(pairs).SetParallelism(1)
	runnel.SideOutput(joined, far).SinkTo(farSink).SetParallelism(1)
	runnel.SideOutput(joined, lateLeft).WithCodec(codec.MustStruct[click]()).SinkTo(lateLSink).SetParallelism(1)
	runnel.SideOutput(joined, lateRight).WithCodec(codec.MustStruct[click]()).SinkTo(lateRSink).SetParallelism(1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "interval join process")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v %+v", err, res)
	}
	for _, x := range []struct {
		what      string
		got, want []string
	}{
		{"pairs", pairs.sorted(), wantPairs},
		{"far pairs", farSink.sorted(), wantFar},
		{"late left records", lateLSink.sorted(), wantLateL},
		{"late right records", lateRSink.sorted(), wantLateR},
	} {
		if !slices.Equal(x.got, x.want) {
			t.Errorf("%s: got %q, want %q", x.what, x.got, x.want)
		}
	}
	if len(wantPairs) < 8 || len(wantFar) == 0 || len(wantLateL) != 2 || len(wantLateR) != 1 {
		t.Fatalf("the script tests too little: %d pairs, %d far, %d and %d late", len(wantPairs), len(wantFar), len(wantLateL), len(wantLateR))
	}
	var counted int64
	for sub := range 2 {
		if got, want := l.events[fmt.Sprintf("join[%d]", sub)], []string{fmt.Sprintf("open %d/2", sub), "close"}; !slices.Equal(got, want) {
			t.Errorf("join[%d]: %v, want %v", sub, got, want)
		}
		counted += res.Vertex("join").Subtasks[sub].Metrics["join/pairs"]
	}
	if counted != int64(len(wantPairs)) {
		t.Errorf("the metric counts %d pairs, want %d", counted, len(wantPairs))
	}
}

package runnel_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
)

// sparseSource is an unbounded source with fewer splits than subtasks: subtask 0 emits a record every
// few milliseconds, at 0, 100, 200, … ms of event time, without end; the others never emit one.
type sparseSource struct{}

func (sparseSource) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[int64], error) {
	return &sparseReader{data: ctx.SubtaskIndex() == 0}, nil
}

type sparseReader struct {
	data bool
	next int64
}

func (r *sparseReader) PollNext(out runnel.Collector[int64]) (runnel.InputStatus, error) {
	if r.data {
		out.Collect(r.next)
		r.next += 100
	}
	return runnel.NothingAvailable, nil
}

// Available is ready a few milliseconds on for the subtask with data, never for the others.
func (r *sparseReader) Available() <-chan struct{} {
	if !r.data {
		return nil
	}
	c := make(chan struct{})
	time.AfterFunc(3*time.Millisecond, func() { close(c) })
	return c
}
func (r *sparseReader) Close() error { return nil }

// windowCount emits "[start,end) n" per window.
type windowCount struct {
	runnel.ProcessWindowBase[int64]
}

func (windowCount) Process(ctx runnel.WindowContext[int64], vs []int64, out runnel.Collector[string]) error {
	out.Collect(fmt.Sprintf("[%d,%d) %d", ctx.Window().Start, ctx.Window().End, len(vs)))
	return nil
}

// liveSink keeps what it is written at once, so that a test sees results while an unbounded job runs.
type liveSink struct {
	mu  sync.Mutex
	got []string
}

func (s *liveSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[string], error) {
	return s, nil
}
func (s *liveSink) Write(v string) error {
	s.mu.Lock()
	s.got = append(s.got, v)
	s.mu.Unlock()
	return nil
}
func (s *liveSink) Flush() error { return nil }
func (s *liveSink) Close() error { return nil }
func (s *liveSink) results() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// TestIdlenessOfSubtasksWithoutRecords runs an unbounded job whose source has three subtasks and data for
// one: with WithIdleness, the two that never emit a record go idle once the timeout has passed from their
// first periodic check (Flink's idleness timer starts there, not at a record), so the window operator's
// watermark follows the subtask with data and its windows fire while the job runs. The expected results
// follow from Flink's rules: the records are at 0, 100, 200, … ms, so the first windows to fire are
// [0,1000) and [1000,2000), ten records each, once the watermark of monotonous timestamps (the highest
// timestamp minus 1 ms) passes their ends. The strategy is folded into the source, and on an operator
// downstream of it (whose subtasks 1 and 2 get no records either).
func TestIdlenessOfSubtasksWithoutRecords(t *testing.T) {
	want := []string{"[0,1000) 10", "[1000,2000) 10"}
	strategy := runnel.MonotonousTimestamps[int64]().WithTimestampAssigner(func(v int64, _ int64) int64 { return v }).
		WithIdleness(100 * time.Millisecond)
	for _, downstream := range []bool{false, true} {
		t.Run(fmt.Sprintf("downstream %v", downstream), func(t *testing.T) {
			got := runIdleWindows(t, sparseSource{}, strategy, downstream, len(want), 0)
			if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
				t.Fatalf("windows fired while the job ran (within 10 s): %q, want %q first", got, want)
			}
		})
	}
}

// burstSource is an unbounded source with fewer splits than subtasks: subtask 0 emits its records, at 0,
// 100, …, 2000 ms of event time, in its first poll and then nothing more, without end; the others never
// emit one.
type burstSource struct{}

func (burstSource) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[int64], error) {
	return &burstReader{data: ctx.SubtaskIndex() == 0}, nil
}

type burstReader struct{ data bool }

func (r *burstReader) PollNext(out runnel.Collector[int64]) (runnel.InputStatus, error) {
	if r.data {
		for ts := int64(0); ts <= 2000; ts += 100 {
			out.Collect(ts)
		}
		r.data = false
	}
	return runnel.NothingAvailable, nil
}
func (r *burstReader) Available() <-chan struct{} { return nil }
func (r *burstReader) Close() error               { return nil }

// idleAfterData is a punctuated generator of monotonous timestamps (the watermark is the record's
// timestamp minus 1 ms) that marks its stream idle at the first periodic call after a record: the subtask
// with data goes idle at once, long before the subtasks without records do (WithIdleness).
type idleAfterData struct{ saw bool }

func (g *idleAfterData) OnEvent(_ int64, ts int64, out runnel.WatermarkOutput) {
	g.saw = true
	out.EmitWatermark(ts - 1)
}
func (g *idleAfterData) OnPeriodicEmit(out runnel.WatermarkOutput) {
	if g.saw {
		out.MarkIdle()
	}
}

// TestIdleSubtaskWithDataFlushes runs an unbounded job whose only subtask with data goes idle after its
// last record, before the subtasks without records go idle: each channel of the window operator's valve is
// then idle, and the last one to go idle holds the output at MinWatermark. Flink's StatusWatermarkValve
// flushes then: the last active channel goes idle at the output, so the valve emits the highest watermark
// of its channels, 1999 (the last record, 2000, minus 1 ms), before its idle status. So the windows
// [0,1000) and [1000,2000) fire, ten records each, while the job runs; [2000,3000) does not, its end is
// past every watermark. The strategy is folded into the source, and on an operator downstream of it.
func TestIdleSubtaskWithDataFlushes(t *testing.T) {
	want := []string{"[0,1000) 10", "[1000,2000) 10"}
	strategy := runnel.CustomWatermarks(func() runnel.WatermarkGenerator[int64] { return &idleAfterData{} }).
		WithTimestampAssigner(func(v int64, _ int64) int64 { return v }).WithIdleness(300 * time.Millisecond)
	for _, downstream := range []bool{false, true} {
		t.Run(fmt.Sprintf("downstream %v", downstream), func(t *testing.T) {
			// A window fired too far would show within a few watermark intervals.
			got := runIdleWindows(t, burstSource{}, strategy, downstream, len(want), 100*time.Millisecond)
			if !slices.Equal(got, want) {
				t.Fatalf("windows fired while the job ran (within 10 s): %q, want %q", got, want)
			}
		})
	}
}

// runIdleWindows runs an unbounded job at parallelism 3: src, with strategy folded into it (downstream:
// into an operator after it), into one-second event-time windows that count their records. It returns
// the windows that fired within 10 s once want of them did, and settle more, then cancels the job.
func runIdleWindows(t *testing.T, src runnel.Source[int64], strategy runnel.WatermarkStrategy[int64], downstream bool, want int, settle time.Duration) []string {
	t.Helper()
	env := runnel.NewEnvironment(runnel.WithParallelism(3), runnel.WithWatermarkInterval(10*time.Millisecond),
		runnel.WithLogger(quiet))
	in := runnel.FromSource(env, src).Name("source")
	if downstream {
		in = runnel.Map(in, func(v int64) (int64, error) { return v, nil }).Name("pass")
	}
	timed := in.WithTimestamps(strategy)
	sink := &liveSink{}
	runnel.WindowProcess(runnel.Window(runnel.KeyBy(timed, func(int64) int64 { return 0 }), runnel.TumblingEventTimeWindows(time.Second)),
		func() runnel.ProcessWindowFunction[int64, int64, string] { return windowCount{} }).Name("windows").
		SinkTo(sink).Name("sink")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := env.Execute(ctx, "idleness")
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(sink.results()) < want && time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("the unbounded job ended: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	time.Sleep(settle)
	got := sink.results()
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the job did not end within 20 s of its cancellation")
	}
	return got
}

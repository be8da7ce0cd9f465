package runnel_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// click is a record with an event time of its own.
type click struct {
	User string
	At   int64 // epoch ms
	N    int64
}

// timedCollect is a sink that keeps what it is given with the timestamps the stream carried.
type timedCollect struct {
	mu   sync.Mutex
	recs []timedClick
}

type timedClick struct {
	click
	ts int64
}

func (s *timedCollect) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[click], error) {
	return &timedCollectWriter{s: s}, nil
}

type timedCollectWriter struct{ s *timedCollect }

func (w *timedCollectWriter) Write(click) error {
	return fmt.Errorf("Write called: a timed stream's TimestampedWriter must get WriteTimed")
}

func (w *timedCollectWriter) WriteTimed(v click, ts int64) error {
	w.s.mu.Lock()
	w.s.recs = append(w.s.recs, timedClick{v, ts})
	w.s.mu.Unlock()
	return nil
}
func (w *timedCollectWriter) Flush() error { return nil }
func (w *timedCollectWriter) Close() error { return nil }

// stampCheck is a keyed process function that checks the timestamp of each record against its event time.
type stampCheck struct {
	runnel.KeyedProcessBase[string, click]
	shift int64
}

func (f *stampCheck) ProcessElement(ctx runnel.KeyedContext[string], v click, out runnel.Collector[click]) error {
	ts, ok := ctx.Timestamp()
	if !ok || ts != v.At+f.shift {
		return fmt.Errorf("record %+v: timestamp %d, %v; want %d", v, ts, ok, v.At+f.shift)
	}
	out.Collect(v)
	return nil
}

// outOfOrderClicks returns n clicks of a few users, each at most bound ms out of order.
func outOfOrderClicks(n int, bound int64, seed uint64) []click {
	rng := rand.New(rand.NewPCG(seed, 1))
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	cs := make([]click, n)
	for i := range cs {
		cs[i] = click{User: fmt.Sprintf("u%d", rng.IntN(7)), At: base + int64(i)*3 - rng.Int64N(bound+1), N: int64(i)}
	}
	return cs
}

// TestEventTimeThroughAJob runs records with event time through chained and network edges, with the
// strategy folded into the source and as an operator downstream: every operator and the sink see the
// records' timestamps, and at the end every subtask's watermark is the end of time.
func TestEventTimeThroughAJob(t *testing.T) {
	clicks := outOfOrderClicks(5000, 40, 1)
	for _, tc := range []struct {
		name string
		opts []runnel.Option
		// downstream: the strategy goes on a mapped stream (an operator), not on the source.
		downstream bool
	}{
		{"source local", []runnel.Option{runnel.WithParallelism(2)}, false},
		{"source tcp unchained", []runnel.Option{runnel.WithParallelism(3), runnel.WithTaskManagers(2), runnel.WithChaining(false)}, false},
		{"operator local", []runnel.Option{runnel.WithParallelism(2)}, true},
		{"operator tcp tiny buffers", []runnel.Option{runnel.WithParallelism(2), runnel.WithTaskManagers(2), runnel.WithBufferSize(64)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(tc.opts...)
			strategy := runnel.BoundedOutOfOrderness[click](40 * time.Millisecond).
				WithTimestampAssigner(func(c click, _ int64) int64 { return c.At })
			src := runnel.FromSource(env, connector.Collection(clicks)).Name("clicks")
			var stream *runnel.Stream[click]
			if tc.downstream {
				stream = runnel.Map(src, func(c click) (click, error) { return c, nil }).Name("copy").WithTimestamps(strategy)
			} else {
				stream = src.WithTimestamps(strategy)
			}
			// A map keeps the timestamp; a flat map gives each output its input's; a filter keeps it.
			shifted := runnel.FlatMap(stream, func(c click, out runnel.Collector[click]) error {
				out.Collect(c)
				return nil
			}).Name("flat").Filter(func(c click) (bool, error) { return c.N%5 != 0, nil }).Name("filter")
			checked := runnel.Process(runnel.KeyBy(shifted, func(c click) string { return c.User }),
				func() runnel.KeyedProcessFunction[string, click, click] { return &stampCheck{} }).Name("check").
				WithCodec(codec.MustStruct[click]())
			sink := &timedCollect{}
			checked.SinkTo(sink).Name("sink")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "eventtime")
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != "FINISHED" {
				t.Fatalf("status %s: %s", res.Status, res.Error)
			}
			want := 0
			for _, c := range clicks {
				if c.N%5 != 0 {
					want++
				}
			}
			if len(sink.recs) != want {
				t.Fatalf("sink got %d records, want %d", len(sink.recs), want)
			}
			for _, r := range sink.recs {
				if r.ts != r.At {
					t.Fatalf("sink got %+v with timestamp %d", r.click, r.ts)
				}
			}
			for _, v := range res.Vertices {
				for _, s := range v.Subtasks {
					if s.Watermark == nil || *s.Watermark != runnel.MaxWatermark {
						t.Errorf("%s[%d]: watermark %v at the end, want the end of time", v.Name, s.Index, s.Watermark)
					}
				}
			}
		})
	}
}

// TestEventTimeBuildErrors: mistakes with event time are refused when the job is built, naming the cause.
func TestEventTimeBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(env *runnel.Environment)
		want  string
	}{
		{"no assigner on an untimed stream", func(env *runnel.Environment) {
			src := runnel.FromSource(env, connector.Collection([]click{{}}))
			src.WithTimestamps(runnel.MonotonousTimestamps[click]()).SinkTo(connector.Discard[click]())
		}, "needs WithTimestampAssigner"},
		{"union of timed and untimed", func(env *runnel.Environment) {
			a := runnel.FromSource(env, connector.Collection([]click{{}})).Name("a").
				WithTimestamps(runnel.MonotonousTimestamps[click]().WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
			b := runnel.FromSource(env, connector.Collection([]click{{}})).Name("b")
			runnel.Union(a, b).SinkTo(connector.Discard[click]())
		}, `the stream of "a" has event time and the stream of "b" has none`},
		{"negative bound", func(env *runnel.Environment) {
			runnel.FromSource(env, connector.Collection([]click{{}})).
				WithTimestamps(runnel.BoundedOutOfOrderness[click](-time.Second).WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
		}, "whole milliseconds, at least 0"},
		{"sub-millisecond idleness", func(env *runnel.Environment) {
			runnel.FromSource(env, connector.Collection([]click{{}})).
				WithTimestamps(runnel.MonotonousTimestamps[click]().WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }).WithIdleness(time.Microsecond))
		}, "WithIdleness"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment()
			tc.build(env)
			err := env.Err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// timerFire is what timerJob emits for each event-time timer.
type timerFire struct {
	User      string
	At        int64 // the timer's time
	Watermark int64 // the operator's watermark when it fired
	Ts        int64 // the timestamp the output carried
}

// timerJob registers, for every click, an event-time timer 100 ms after it; OnTimer emits the timer.
type timerJob struct {
	runnel.KeyedProcessBase[string, timerFire]
}

func (timerJob) ProcessElement(ctx runnel.KeyedContext[string], v click, _ runnel.Collector[timerFire]) error {
	if wm := ctx.TimerService().CurrentWatermark(); v.At+100 <= wm {
		return fmt.Errorf("record %+v: its timer at %d is behind the watermark %d: the bound was broken", v, v.At+100, wm)
	}
	ctx.TimerService().RegisterEventTimeTimer(v.At + 100)
	return nil
}

func (timerJob) OnTimer(ctx runnel.TimerContext[string], ts int64, out runnel.Collector[timerFire]) error {
	if ctx.TimeDomain() != runnel.EventTime {
		return fmt.Errorf("timer %d fired in %s", ts, ctx.TimeDomain())
	}
	own, _ := ctx.Timestamp()
	out.Collect(timerFire{User: ctx.CurrentKey(), At: ts, Watermark: ctx.TimerService().CurrentWatermark(), Ts: own})
	return nil
}

// fireSink keeps timer outputs with the timestamps the stream carried.
type fireSink struct {
	mu  sync.Mutex
	got []timerFire
}

func (s *fireSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[timerFire], error) {
	return s, nil
}
func (s *fireSink) Write(timerFire) error { return fmt.Errorf("Write on a timed stream") }
func (s *fireSink) WriteTimed(v timerFire, ts int64) error {
	v.Ts = ts
	s.mu.Lock()
	s.got = append(s.got, v)
	s.mu.Unlock()
	return nil
}
func (s *fireSink) Flush() error { return nil }
func (s *fireSink) Close() error { return nil }

// TestEventTimeTimers registers an event-time timer per record on out-of-order input: every distinct
// (user, time) fires once, only when the watermark reached it, in time order per user, and what OnTimer
// emits carries the timer's time; the end of input fires what is left. With failures and checkpoints the
// timers are restored with the keyed state (the collecting sink may see a timer again after a restore,
// never miss one), on both state backends.
func TestEventTimeTimers(t *testing.T) {
	clicks := outOfOrderClicks(20_000, 40, 2)
	want := map[timerFire]bool{}
	for _, c := range clicks {
		want[timerFire{User: c.User, At: c.At + 100}] = true
	}
	for _, tc := range []struct {
		name string
		opts []runnel.Option
		// exact: no failure, so each timer fires exactly once.
		exact bool
	}{
		{"no failure", []runnel.Option{runnel.WithParallelism(2), runnel.WithTaskManagers(2)}, true},
		{"region failover memory", []runnel.Option{runnel.WithParallelism(2),
			runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond}), runnel.WithFailover("region"),
			runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=10ms"), runnel.WithFailureInjection("timers[1]@3000")}, false},
		{"full failover pebble", []runnel.Option{runnel.WithParallelism(2), runnel.WithStateBackend("pebble"),
			runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond}), runnel.WithFailover("full"),
			runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=10ms"), runnel.WithFailureInjection("timers[0]@4000")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(append(tc.opts, runnel.WithWatermarkInterval(5*time.Millisecond))...)
			src := runnel.FromSource(env, connector.Generator(func(sub int, seq uint64) click { return clicks[int(seq)*2+sub] },
				connector.GeneratorOptions{TotalRecords: uint64(len(clicks)), RatePerSubtask: 50_000})).Name("clicks").
				WithCodec(codec.MustStruct[click]()).
				WithTimestamps(runnel.BoundedOutOfOrderness[click](40 * time.Millisecond).WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
			fires := runnel.Process(runnel.KeyBy(src, func(c click) string { return c.User }),
				func() runnel.KeyedProcessFunction[string, click, timerFire] { return timerJob{} }).Name("timers").
				WithCodec(codec.MustStruct[timerFire]())
			sink := &fireSink{}
			fires.SinkTo(sink).Name("sink").SetParallelism(1)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "timers")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v %+v", err, res)
			}
			seen := map[timerFire]int{}
			last := map[string]int64{}
			for _, f := range sink.got {
				if f.Ts != f.At {
					t.Fatalf("timer output %+v carries timestamp %d", f, f.Ts)
				}
				if f.Watermark < f.At {
					t.Fatalf("timer %+v fired before the watermark reached it", f)
				}
				if tc.exact && f.At < last[f.User] {
					t.Fatalf("timers of %s out of order: %d after %d", f.User, f.At, last[f.User])
				}
				last[f.User] = f.At
				seen[timerFire{User: f.User, At: f.At}]++
			}
			for w := range want {
				if seen[w] == 0 {
					t.Fatalf("timer %+v never fired (%d of %d fired)", w, len(seen), len(want))
				}
				if tc.exact && seen[w] != 1 {
					t.Fatalf("timer %+v fired %d times", w, seen[w])
				}
			}
			if len(seen) != len(want) {
				t.Fatalf("%d distinct timers fired, want %d", len(seen), len(want))
			}
			if !tc.exact && len(res.Failovers) == 0 {
				t.Fatal("no failover happened")
			}
		})
	}
}

package runnel_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// winResult is what every window function of the reference test emits.
type winResult struct {
	Key                  string
	Start, End           int64 // End from the result's timestamp; Start only from a process function
	Count, Sum, Min, Max int64
}

func (r winResult) add(o winResult) winResult {
	r.Count += o.Count
	r.Sum += o.Sum
	r.Min = min(r.Min, o.Min)
	r.Max = max(r.Max, o.Max)
	return r
}

func one(c click) winResult { return winResult{Key: c.User, Count: 1, Sum: c.N, Min: c.N, Max: c.N} }

type winAgg struct{}

func (winAgg) CreateAccumulator() winResult { return winResult{Min: 1 << 62, Max: -1 << 62} }
func (winAgg) Add(c click, acc winResult) winResult {
	r := acc.add(one(c))
	r.Key = c.User
	return r
}
func (winAgg) Result(acc winResult) winResult { return acc }
func (winAgg) Merge(a, b winResult) winResult {
	r := a.add(b)
	r.Key = max(a.Key, b.Key)
	return r
}

type winList struct {
	runnel.ProcessWindowBase[string]
}

func (winList) Process(ctx runnel.WindowContext[string], cs []click, out runnel.Collector[winResult]) error {
	r := winAgg{}.CreateAccumulator()
	for _, c := range cs {
		if c.User != ctx.CurrentKey() {
			return fmt.Errorf("window of %q holds a click of %q", ctx.CurrentKey(), c.User)
		}
		r = winAgg{}.Add(c, r)
	}
	r.Start, r.End = ctx.Window().Start, ctx.Window().End
	if ctx.CurrentWatermark() < r.End-1 {
		return fmt.Errorf("window %+v fired at watermark %d", ctx.Window(), ctx.CurrentWatermark())
	}
	out.Collect(r)
	return nil
}

type winSink struct {
	mu  sync.Mutex
	got []winResult
}

func (s *winSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[winResult], error) {
	return s, nil
}
func (s *winSink) Write(winResult) error { return fmt.Errorf("Write on a timed stream") }
func (s *winSink) WriteTimed(r winResult, ts int64) error {
	if r.End != 0 && r.End-1 != ts {
		return fmt.Errorf("result %+v carries timestamp %d, want End-1", r, ts)
	}
	r.End = ts + 1
	s.mu.Lock()
	s.got = append(s.got, r)
	s.mu.Unlock()
	return nil
}
func (s *winSink) Flush() error { return nil }
func (s *winSink) Close() error { return nil }

// referenceWindows computes the windows of clicks directly: per key, every window a click belongs to
// (tumbling, sliding) or the sessions of the key's sorted times (a time at or before the session's end
// joins it: windows that touch merge, as in Flink).
func referenceWindows(clicks []click, kind string, size, slide, gap int64) []winResult {
	type kw struct {
		key        string
		start, end int64
	}
	acc := map[kw]winResult{}
	addTo := func(k kw, c click) {
		r, ok := acc[k]
		if !ok {
			r = winAgg{}.CreateAccumulator()
		}
		r = winAgg{}.Add(c, r)
		r.Start, r.End = k.start, k.end
		acc[k] = r
	}
	switch kind {
	case "tumbling", "sliding":
		if kind == "tumbling" {
			slide = size
		}
		for _, c := range clicks {
			// Every start s = k*slide with s <= t < s+size: floor division by hand, for negative times too.
			first := c.At - size + 1
			s := first - ((first%slide)+slide)%slide
			if s < first {
				s += slide
			}
			for ; s <= c.At; s += slide {
				addTo(kw{c.User, s, s + size}, c)
			}
		}
	case "session":
		byKey := map[string][]click{}
		for _, c := range clicks {
			byKey[c.User] = append(byKey[c.User], c)
		}
		for key, cs := range byKey {
			sort.Slice(cs, func(i, j int) bool { return cs[i].At < cs[j].At })
			var cur kw
			var members []click
			flush := func() {
				for _, c := range members {
					addTo(cur, c)
				}
			}
			for i, c := range cs {
				if i == 0 || c.At > cur.end { // a window that touches the session merges with it
					if i > 0 {
						flush()
					}
					cur, members = kw{key, c.At, c.At + gap}, nil
				}
				cur.end = max(cur.end, c.At+gap)
				members = append(members, c)
			}
			flush()
		}
	}
	out := make([]winResult, 0, len(acc))
	for _, r := range acc {
		out = append(out, r)
	}
	return out
}

func sortResults(rs []winResult) {
	slices.SortFunc(rs, func(a, b winResult) int {
		return strings.Compare(fmt.Sprintf("%s/%020d/%020d", a.Key, a.End, a.Start), fmt.Sprintf("%s/%020d/%020d", b.Key, b.End, b.Start))
	})
}

// TestWindowsMatchReference runs tumbling, sliding and session windows with a reduce, an aggregate and a
// process function over seeded out-of-order input within its bound, at parallelism 1 and 3 (over TCP),
// and compares every window's result with a reference computed directly from the input.
func TestWindowsMatchReference(t *testing.T) {
	const bound = 30
	clicks := outOfOrderClicks(6000, bound, 3)
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range clicks {
		clicks[i].N = rng.Int64N(1000)
	}
	assigners := []struct {
		name             string
		a                runnel.WindowAssigner
		size, slide, gap int64
	}{
		{"tumbling", runnel.TumblingEventTimeWindows(100 * time.Millisecond), 100, 0, 0},
		{"sliding", runnel.SlidingEventTimeWindows(100*time.Millisecond, 30*time.Millisecond), 100, 30, 0},
		{"session", runnel.EventTimeSessionWindows(25 * time.Millisecond), 0, 0, 25},
	}
	functions := []string{"reduce", "aggregate", "process"}
	for _, as := range assigners {
		want := referenceWindows(clicks, as.name, as.size, as.slide, as.gap)
		sortResults(want)
		for _, fn := range functions {
			for _, p := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s %s p%d", as.name, fn, p), func(t *testing.T) {
					opts := []runnel.Option{runnel.WithParallelism(p), runnel.WithWatermarkInterval(2 * time.Millisecond)}
					if p > 1 {
						opts = append(opts, runnel.WithTaskManagers(2))
					}
					env := runnel.NewEnvironment(opts...)
					src := runnel.FromSource(env, connector.Collection(clicks)).Name("clicks").WithCodec(codec.MustStruct[click]()).
						WithTimestamps(runnel.BoundedOutOfOrderness[click](bound * time.Millisecond).WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
					var results *runnel.Stream[winResult]
					switch fn {
					case "reduce":
						ones := runnel.Map(src, func(c click) (winResult, error) { return one(c), nil }).WithCodec(codec.MustStruct[winResult]())
						results = runnel.WindowReduce(runnel.Window(runnel.KeyBy(ones, func(r winResult) string { return r.Key }), as.a),
							func(a, b winResult) (winResult, error) { return a.add(b), nil })
					case "aggregate":
						results = runnel.WindowAggregate(runnel.Window(runnel.KeyBy(src, func(c click) string { return c.User }), as.a),
							runnel.AggregateFunction[click, winResult, winResult](winAgg{}))
					case "process":
						results = runnel.WindowProcess(runnel.Window(runnel.KeyBy(src, func(c click) string { return c.User }), as.a),
							func() runnel.ProcessWindowFunction[string, click, winResult] { return winList{} })
					}
					sink := &winSink{}
					results.Name("windows").WithCodec(codec.MustStruct[winResult]()).SinkTo(sink).Name("sink").SetParallelism(1)
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					res, err := env.Execute(ctx, "windows")
					if err != nil || res.Status != "FINISHED" {
						t.Fatalf("%v %+v", err, res)
					}
					got := sink.got
					exp := slices.Clone(want)
					if fn != "process" {
						for i := range exp {
							exp[i].Start = 0
						}
					}
					sortResults(got)
					sortResults(exp)
					if len(got) != len(exp) {
						t.Fatalf("%d windows, want %d", len(got), len(exp))
					}
					for i := range exp {
						if got[i] != exp[i] {
							t.Fatalf("window %d: got %+v, want %+v", i, got[i], exp[i])
						}
					}
				})
			}
		}
	}
}

// onePerPoll is a source that emits one scripted click per poll, so that a punctuated watermark follows
// exactly the record that made it.
type onePerPoll struct{ clicks []click }

func (s *onePerPoll) CreateReader(runnel.RuntimeContext) (runnel.SourceReader[click], error) {
	return &onePerPollReader{clicks: s.clicks}, nil
}

type onePerPollReader struct{ clicks []click }

func (r *onePerPollReader) PollNext(out runnel.Collector[click]) (runnel.InputStatus, error) {
	if len(r.clicks) == 0 {
		return runnel.EndOfInput, nil
	}
	out.Collect(r.clicks[0])
	r.clicks = r.clicks[1:]
	return runnel.MoreAvailable, nil
}
func (r *onePerPollReader) Available() <-chan struct{} { return nil }
func (r *onePerPollReader) Close() error               { return nil }

// markers is a punctuated generator: a click of user "wm" is a watermark at its time.
type markers struct{}

func (markers) OnEvent(c click, ts int64, out runnel.WatermarkOutput) {
	if c.User == "wm" {
		out.EmitWatermark(ts)
	}
}
func (markers) OnPeriodicEmit(runnel.WatermarkOutput) {}

// TestWindowLateness pins what a window does with records behind the watermark: within the allowed
// lateness it fires again with them; past it (or with none) they are dropped; its state goes at its
// cleanup time.
func TestWindowLateness(t *testing.T) {
	script := []click{
		{User: "a", At: 10, N: 1}, {User: "a", At: 20, N: 2},
		{User: "wm", At: 99},      // [0,100) fires: 3
		{User: "a", At: 30, N: 4}, // late: within 50 ms of lateness it fires [0,100) again: 7
		{User: "wm", At: 149},     // cleanup of [0,100)
		{User: "a", At: 40, N: 8}, // past the lateness: dropped
		{User: "a", At: 150, N: 16},
	}
	for _, tc := range []struct {
		name     string
		lateness time.Duration
		backend  string
		want     []winResult
		dropped  int64
	}{
		{"lateness 50ms", 50 * time.Millisecond, "memory", []winResult{
			{Key: "a", End: 100, Count: 2, Sum: 3, Min: 1, Max: 2}, {Key: "a", End: 100, Count: 3, Sum: 7, Min: 1, Max: 4},
			{Key: "a", End: 200, Count: 1, Sum: 16, Min: 16, Max: 16}}, 1},
		{"lateness 50ms pebble", 50 * time.Millisecond, "pebble", []winResult{
			{Key: "a", End: 100, Count: 2, Sum: 3, Min: 1, Max: 2}, {Key: "a", End: 100, Count: 3, Sum: 7, Min: 1, Max: 4},
			{Key: "a", End: 200, Count: 1, Sum: 16, Min: 16, Max: 16}}, 1},
		{"no lateness", 0, "memory", []winResult{
			{Key: "a", End: 100, Count: 2, Sum: 3, Min: 1, Max: 2}, {Key: "a", End: 200, Count: 1, Sum: 16, Min: 16, Max: 16}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithStateBackend(tc.backend), runnel.WithWatermarkInterval(0))
			src := runnel.FromSource(env, &onePerPoll{clicks: script}).Name("clicks").WithCodec(codec.MustStruct[click]()).
				WithTimestamps(runnel.CustomWatermarks(func() runnel.WatermarkGenerator[click] { return markers{} }).
					WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
			data := src.Filter(func(c click) (bool, error) { return c.User != "wm", nil })
			results := runnel.WindowAggregate(runnel.Window(runnel.KeyBy(data, func(c click) string { return c.User }),
				runnel.TumblingEventTimeWindows(100*time.Millisecond)).AllowedLateness(tc.lateness),
				runnel.AggregateFunction[click, winResult, winResult](winAgg{})).WithCodec(codec.MustStruct[winResult]())
			sink := &winSink{}
			results.SinkTo(sink)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "lateness")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v %+v", err, res)
			}
			if !slices.Equal(sink.got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", sink.got, tc.want)
			}
			if got := res.Vertex("window").Subtasks[0].Metrics["window/late_records_dropped"]; got != tc.dropped {
				t.Fatalf("late_records_dropped %d, want %d (metrics %v)", got, tc.dropped, res.Vertex("window").Subtasks[0].Metrics)
			}
		})
	}
}

// readCommitted returns the lines of the committed part files of a FileSink directory.
func readCommitted(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "part-") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' })...)
	}
	slices.Sort(lines)
	return lines
}

// TestTimersAndWindowsAcrossSavepointAndRescale stops a windowed job with a savepoint in the middle of its
// windows and resumes it with the window operator at another parallelism, on both backends: window
// contents and their timers move with their key groups, and the results, written exactly once by a file
// sink, equal a direct computation over the whole input.
func TestTimersAndWindowsAcrossSavepointAndRescale(t *testing.T) {
	const keys, perSubtask = 23, 4000
	gen := func(sub int, seq uint64) click {
		return click{User: fmt.Sprintf("k%d", (seq*2+uint64(sub))%keys), At: int64(seq) * 2, N: int64(seq%7) + 1}
	}
	// The first run is throttled to 2000 records a second per subtask (two seconds of input, stopped after
	// 200 ms: the savepoint falls inside the input even on a loaded machine), the restored one is not.
	build := func(windowP int, out, chk string, rate float64, opts ...runnel.Option) *runnel.Environment {
		env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet),
			runnel.WithWatermarkInterval(2 * time.Millisecond),
			runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 50 * time.Millisecond, Storage: chk})}, opts...)...)
		src := runnel.FromSource(env, connector.Generator(gen, connector.GeneratorOptions{RecordsPerSubtask: perSubtask, RatePerSubtask: rate})).
			Name("source").WithCodec(codec.MustStruct[click]()).
			WithTimestamps(runnel.MonotonousTimestamps[click]().WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
		results := runnel.WindowAggregate(runnel.Window(runnel.KeyBy(src, func(c click) string { return c.User }),
			runnel.TumblingEventTimeWindows(100*time.Millisecond)), runnel.AggregateFunction[click, winResult, winResult](winAgg{})).
			Name("windows").WithCodec(codec.MustStruct[winResult]()).SetParallelism(windowP)
		stamped := runnel.Process(runnel.KeyBy(results, func(r winResult) string { return r.Key }),
			func() runnel.KeyedProcessFunction[string, winResult, string] { return &stampLine{} }).Name("format").SetParallelism(1)
		stamped.SinkTo(connector.FileSink(out, func(s string) string { return s })).Name("files").SetParallelism(1)
		return env
	}
	var all []click
	for sub := 0; sub < 2; sub++ {
		for seq := uint64(0); seq < perSubtask; seq++ {
			all = append(all, gen(sub, seq))
		}
	}
	var want []string
	for _, r := range referenceWindows(all, "tumbling", 100, 0, 0) {
		want = append(want, fmt.Sprintf("%s/%d/%d/%d", r.Key, r.End, r.Count, r.Sum))
	}
	slices.Sort(want)
	for _, tc := range []struct {
		backend string
		to      int
	}{{"memory", 3}, {"pebble", 1}, {"pebble", 3}} {
		t.Run(fmt.Sprintf("%s 2 to %d", tc.backend, tc.to), func(t *testing.T) {
			dir := t.TempDir()
			sp, out := filepath.Join(dir, "sp"), filepath.Join(dir, "out")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			res, err := build(2, out, filepath.Join(dir, "chk"), 2000, runnel.WithStateBackend(tc.backend), runnel.WithSavepointOnStop(sp)).
				Execute(ctx, "first")
			if err != nil || res.Status != "CANCELED" || res.Savepoint != sp {
				t.Fatalf("first run: %v, %+v", err, res)
			}
			if v := res.Vertex("source"); v == nil || v.RecordsOut == 0 || v.RecordsOut >= 2*perSubtask {
				t.Fatalf("the savepoint must fall inside the input: the source emitted %+v", v)
			}
			res, err = build(tc.to, out, filepath.Join(dir, "chk2"), 0, runnel.WithStateBackend(tc.backend), runnel.WithRestoreFrom(sp)).
				Execute(context.Background(), "rescaled")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("rescaled run: %v, %+v", err, res)
			}
			got := readCommitted(t, out)
			if !slices.Equal(got, want) {
				t.Fatalf("%d window results, want %d; first differences: %v", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// stampLine formats a window result as a line.
type stampLine struct {
	runnel.KeyedProcessBase[string, string]
}

func (*stampLine) ProcessElement(ctx runnel.KeyedContext[string], r winResult, out runnel.Collector[string]) error {
	ts, _ := ctx.Timestamp()
	out.Collect(fmt.Sprintf("%s/%d/%d/%d", r.Key, ts+1, r.Count, r.Sum))
	return nil
}

func firstDiff(got, want []string) string {
	g, w := map[string]int{}, map[string]int{}
	for _, s := range got {
		g[s]++
	}
	for _, s := range want {
		w[s]++
	}
	var d []string
	for s, n := range g {
		if w[s] != n {
			d = append(d, fmt.Sprintf("%s got %d want %d", s, n, w[s]))
		}
	}
	for s, n := range w {
		if _, ok := g[s]; !ok {
			d = append(d, fmt.Sprintf("%s got 0 want %d", s, n))
		}
	}
	slices.Sort(d)
	return fmt.Sprint(d[:min(5, len(d))])
}

// TestLateRecordsGoToSideOutput: with SideOutputLateData, the records past the allowed lateness come out
// of the window operator's side output (with their own timestamps), chained and over the network, and the
// window results are those of TestWindowLateness.
func TestLateRecordsGoToSideOutput(t *testing.T) {
	script := []click{
		{User: "a", At: 10, N: 1}, {User: "wm", At: 99}, {User: "a", At: 30, N: 4}, {User: "b", At: 50, N: 2},
		{User: "a", At: 150, N: 16}, {User: "wm", At: 260}, {User: "a", At: 120, N: 32},
	}
	for _, chained := range []bool{true, false} {
		t.Run(fmt.Sprintf("chained %v", chained), func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithWatermarkInterval(0), runnel.WithChaining(chained), runnel.WithTaskManagers(2))
			src := runnel.FromSource(env, &onePerPoll{clicks: script}).Name("clicks").WithCodec(codec.MustStruct[click]()).
				WithTimestamps(runnel.CustomWatermarks(func() runnel.WatermarkGenerator[click] { return markers{} }).
					WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
			data := src.Filter(func(c click) (bool, error) { return c.User != "wm", nil })
			late := runnel.NewOutputTag[click]("late")
			results := runnel.WindowAggregate(runnel.Window(runnel.KeyBy(data, func(c click) string { return c.User }),
				runnel.TumblingEventTimeWindows(100*time.Millisecond)).SideOutputLateData(late),
				runnel.AggregateFunction[click, winResult, winResult](winAgg{})).WithCodec(codec.MustStruct[winResult]())
			sink := &winSink{}
			results.SinkTo(sink)
			lateSink := &timedCollect{}
			runnel.SideOutput(results, late).WithCodec(codec.MustStruct[click]()).SinkTo(lateSink)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "late")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v %+v", err, res)
			}
			wantLate := []timedClick{{click{User: "a", At: 30, N: 4}, 30}, {click{User: "b", At: 50, N: 2}, 50}, {click{User: "a", At: 120, N: 32}, 120}}
			if !slices.Equal(lateSink.recs, wantLate) {
				t.Fatalf("late records %+v, want %+v", lateSink.recs, wantLate)
			}
			want := []winResult{{Key: "a", End: 100, Count: 1, Sum: 1, Min: 1, Max: 1}, {Key: "a", End: 200, Count: 1, Sum: 16, Min: 16, Max: 16}}
			if !slices.Equal(sink.got, want) {
				t.Fatalf("windows %+v, want %+v", sink.got, want)
			}
		})
	}
}

// quietAfterOne emits one click far ahead in event time, then nothing until released: under approximate
// recovery its watermark stands still, so a restarted consumer hears it only as the re-sent copy.
type quietAfterOne struct{ release chan struct{} }

func (q *quietAfterOne) CreateReader(runnel.RuntimeContext) (runnel.SourceReader[click], error) {
	return &quietReader{q: q}, nil
}

type quietReader struct {
	q    *quietAfterOne
	sent bool
}

func (r *quietReader) PollNext(out runnel.Collector[click]) (runnel.InputStatus, error) {
	if !r.sent {
		r.sent = true
		out.Collect(click{User: "quiet", At: 1 << 40})
		return runnel.NothingAvailable, nil
	}
	select {
	case <-r.q.release:
		return runnel.EndOfInput, nil
	default:
		return runnel.NothingAvailable, nil
	}
}
func (r *quietReader) Available() <-chan struct{} { return r.q.release }
func (r *quietReader) Close() error               { return nil }

// windowEnds keeps the window ends a sink saw, by the attempt of its subtask.
type windowEnds struct {
	mu   sync.Mutex
	ends map[int][]int64 // attempt -> window ends
}

func (s *windowEnds) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[winResult], error) {
	return &windowEndsWriter{s: s, attempt: ctx.Attempt()}, nil
}

func (s *windowEnds) after(attempt int) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int64
	for a, es := range s.ends {
		if a >= attempt {
			out = append(out, es...)
		}
	}
	return out
}

type windowEndsWriter struct {
	s       *windowEnds
	attempt int
}

func (w *windowEndsWriter) Write(winResult) error { return fmt.Errorf("Write on a timed stream") }
func (w *windowEndsWriter) WriteTimed(_ winResult, ts int64) error {
	w.s.mu.Lock()
	w.s.ends[w.attempt] = append(w.s.ends[w.attempt], ts+1)
	w.s.mu.Unlock()
	return nil
}
func (w *windowEndsWriter) Flush() error { return nil }
func (w *windowEndsWriter) Close() error { return nil }

// TestApproximateWatermarks restarts a window operator under approximate recovery while one of its
// producers is steady and the other has gone quiet after one watermark far ahead: the restarted attempt
// gets the quiet producer's watermark again from its reconnectable subpartition, so it is not held back
// until that producer ends, and fires its windows as the steady producer's watermark moves on. Locally and
// over TCP.
func TestApproximateWatermarks(t *testing.T) {
	for _, tms := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d TaskManagers", tms), func(t *testing.T) {
			q := &quietAfterOne{release: make(chan struct{})}
			env := runnel.NewEnvironment(approximateOpts(runnel.WithTaskManagers(tms), runnel.WithParallelism(1),
				runnel.WithWatermarkInterval(5*time.Millisecond), runnel.WithFailureInjection("window[0]@300"))...)
			strategy := runnel.MonotonousTimestamps[click]().WithTimestampAssigner(func(c click, _ int64) int64 { return c.At })
			steady := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) click {
				return click{User: fmt.Sprintf("u%d", seq%3), At: int64(seq) * 10, N: 1}
			}, connector.GeneratorOptions{TotalRecords: 3000, RatePerSubtask: 1500})).Name("steady").
				WithCodec(codec.MustStruct[click]()).WithTimestamps(strategy)
			quiet := runnel.FromSource(env, q).Name("quiet").WithCodec(codec.MustStruct[click]()).WithTimestamps(strategy)
			results := runnel.WindowAggregate(runnel.Window(runnel.KeyBy(runnel.Union(steady, quiet), func(c click) string { return c.User }),
				runnel.TumblingEventTimeWindows(500*time.Millisecond)), runnel.AggregateFunction[click, winResult, winResult](winAgg{})).
				Name("window").WithCodec(codec.MustStruct[winResult]())
			sink := &windowEnds{ends: map[int][]int64{}}
			results.SinkTo(sink).Name("sink")
			done := make(chan struct{})
			var res *runnel.JobResult
			var err error
			go func() {
				defer close(done)
				res, err = env.Execute(context.Background(), "approximate-watermarks")
			}()
			// The restarted path (window and sink, attempt 1) fires windows while the quiet source runs.
			deadline := time.After(20 * time.Second)
			for len(sink.after(1)) < 3 {
				select {
				case <-deadline:
					close(q.release)
					<-done
					t.Fatalf("the restarted window fired %v before the quiet source ended: held back (result %+v, %v)", sink.after(1), res, err)
				case <-done:
					t.Fatalf("job ended before the quiet source was released: %v %+v", err, res)
				case <-time.After(5 * time.Millisecond):
				}
			}
			close(q.release)
			<-done
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v %+v", err, res)
			}
			if len(res.Failovers) != 1 || res.Failovers[0].Strategy != "approximate" {
				t.Fatalf("failovers %+v, want one approximate", res.Failovers)
			}
			// The restarted attempt's windows, before the end: only those past where it restored, in order.
			ends := sink.after(1)
			for i := 1; i < len(ends); i++ {
				if ends[i] < ends[i-1] && ends[i] != 1<<40 {
					t.Fatalf("window ends out of order after the restart: %v", ends)
				}
			}
		})
	}
}

// countedClick is a click whose own encoding counts how often it is encoded: the window operator's
// state codec for it is its AppendBinary (codec.For).
type countedClick struct {
	User string
	At   int64
}

var countedEncodes atomic.Int64

func (c countedClick) AppendBinary(b []byte) ([]byte, error) {
	countedEncodes.Add(1)
	b = binary.AppendUvarint(b, uint64(len(c.User)))
	b = append(b, c.User...)
	return binary.AppendVarint(b, c.At), nil
}

func (c *countedClick) UnmarshalBinary(b []byte) error {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return fmt.Errorf("countedClick: bad length")
	}
	c.User = string(b[k : k+int(n)])
	at, k2 := binary.Varint(b[k+int(n):])
	if k2 <= 0 || k+int(n)+k2 != len(b) {
		return fmt.Errorf("countedClick: bad time")
	}
	c.At = at
	return nil
}

// TestSessionContentsStayPut grows one session of a process-window function record by record on the
// pebble backend: each record is stored once, where the session's contents already are, not the whole
// session moved to the grown window at every record (which made a session of n records cost n²/2 element
// writes, and scanning the key's windows on pebble pass every version those moves left).
func TestSessionContentsStayPut(t *testing.T) {
	const n = 2000
	clicks := make([]countedClick, n)
	for i := range clicks {
		clicks[i] = countedClick{User: "u", At: int64(i)}
	}
	env := runnel.NewEnvironment(runnel.WithStateBackend("pebble"), runnel.WithLogger(quiet))
	src := runnel.FromSource(env, connector.Collection(clicks)).Name("clicks").
		WithTimestamps(runnel.MonotonousTimestamps[countedClick]().WithTimestampAssigner(func(c countedClick, _ int64) int64 { return c.At }))
	sizes := runnel.WindowProcess(runnel.Window(runnel.KeyBy(src, func(c countedClick) string { return c.User }), runnel.EventTimeSessionWindows(10*time.Millisecond)),
		func() runnel.ProcessWindowFunction[string, countedClick, [3]int64] { return sessionSize{} })
	sink := connector.NewCollect[[3]int64]()
	sizes.SinkTo(sink)
	countedEncodes.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "session")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v %+v", err, res)
	}
	if got, want := sink.Records(), [][3]int64{{0, n - 1 + 10, n}}; !slices.Equal(got, want) {
		t.Fatalf("sessions %v, want %v", got, want)
	}
	// Each click is encoded to cross the channel and to be stored: a few times n, not n²/2.
	if e := countedEncodes.Load(); e > 4*n {
		t.Fatalf("%d click encodings for %d clicks in one session: its contents were moved as it grew", e, n)
	}
}

// sessionSize emits a session's start, end and size.
type sessionSize struct {
	runnel.ProcessWindowBase[string]
}

func (sessionSize) Process(ctx runnel.WindowContext[string], cs []countedClick, out runnel.Collector[[3]int64]) error {
	out.Collect([3]int64{ctx.Window().Start, ctx.Window().End, int64(len(cs))})
	return nil
}

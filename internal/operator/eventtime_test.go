package operator

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/task"
)

// eventLog records, in order, what a timed operator hands on: records with their timestamps, watermarks and
// watermark statuses.
type eventLog struct{ got []string }

func (l *eventLog) Collect(v Timed[int]) { l.got = append(l.got, fmt.Sprintf("%d@%d", v.V, v.Ts)) }

func (l *eventLog) CollectBatch(vs []Timed[int]) {
	for _, v := range vs {
		l.Collect(v)
	}
}

func (l *eventLog) emitWatermark(ms int64) error {
	if ms == math.MaxInt64 {
		l.got = append(l.got, "wm max")
	} else {
		l.got = append(l.got, fmt.Sprint("wm ", ms))
	}
	return nil
}

func (l *eventLog) emitWatermarkStatus(idle bool) error {
	l.got = append(l.got, map[bool]string{true: "idle", false: "active"}[idle])
	return nil
}

// scriptedReader emits one scripted batch per poll (timestamps are the values) and ends after the last.
type scriptedReader struct{ polls [][]int }

func (r *scriptedReader) PollNext(out Collector[int]) (InputStatus, error) {
	if len(r.polls) == 0 {
		return EndOfInput, nil
	}
	for _, v := range r.polls[0] {
		out.Collect(v)
	}
	r.polls = r.polls[1:]
	if len(r.polls) == 0 {
		return EndOfInput, nil
	}
	return MoreAvailable, nil
}
func (r *scriptedReader) Available() <-chan struct{} { return nil }
func (r *scriptedReader) Close() error               { return nil }

type scriptedSource struct{ polls [][]int }

func (s *scriptedSource) CreateReader(RuntimeContext) (SourceReader[int], error) {
	return &scriptedReader{polls: slices.Clone(s.polls)}, nil
}

// punctuated emits a watermark at every record divisible by 10, at the record's timestamp.
type punctuated struct{}

func (punctuated) OnEvent(v int, ts int64, out WatermarkOutput) {
	if v%10 == 0 {
		out.EmitWatermark(ts)
	}
}
func (punctuated) OnPeriodicEmit(WatermarkOutput) {}

// TestSourceWatermarks drives a timed source operator on a manual clock: periodic watermarks go out only
// at the interval and only when they advanced, after the records of the poll; a punctuated generator's
// watermarks wait for the end of the poll and are coalesced to the highest; an idle source says so once and
// says active before its next record; the end of input sends the end of time after the last records.
func TestSourceWatermarks(t *testing.T) {
	assign := func(v int, _ int64) int64 { return int64(v) }
	type step struct {
		poll    bool          // poll the source once
		advance time.Duration // or move the clock and run what is due
	}
	cases := []struct {
		name  string
		spec  WatermarkSpec[int]
		polls [][]int
		steps []step
		want  []string
	}{
		{"periodic bounded", WatermarkSpec[int]{Assign: assign, Bound: 5 * time.Millisecond, Interval: 200 * time.Millisecond},
			[][]int{{100, 120, 110}, {130}, {125}},
			[]step{{poll: true}, {advance: 199 * time.Millisecond}, {advance: time.Millisecond}, {advance: 200 * time.Millisecond},
				{poll: true}, {poll: true}, {advance: 200 * time.Millisecond}},
			[]string{"100@100", "120@120", "110@110", "wm 114", "130@130", "125@125", "wm max"}},
		{"periodic off", WatermarkSpec[int]{Assign: assign},
			[][]int{{1, 2}, {3}},
			[]step{{poll: true}, {advance: time.Hour}, {poll: true}},
			[]string{"1@1", "2@2", "3@3", "wm max"}},
		{"punctuated coalesced", WatermarkSpec[int]{Assign: assign, NewGenerator: func() WatermarkGenerator[int] { return punctuated{} }, Interval: 200 * time.Millisecond},
			[][]int{{10, 15, 20, 25}, {27}, {30}},
			[]step{{poll: true}, {poll: true}, {advance: time.Second}, {poll: true}},
			[]string{"10@10", "15@15", "20@20", "25@25", "wm 20", "27@27", "30@30", "wm 30", "wm max"}},
		{"idle and back", WatermarkSpec[int]{Assign: assign, Idleness: 300 * time.Millisecond, Interval: 100 * time.Millisecond},
			[][]int{{1}, {2}},
			[]step{{poll: true}, {advance: 100 * time.Millisecond}, {advance: 100 * time.Millisecond}, {advance: 100 * time.Millisecond},
				{advance: 100 * time.Millisecond}, {advance: 100 * time.Millisecond}, {advance: 100 * time.Millisecond}, {poll: true}},
			[]string{"1@1", "wm 0", "idle", "active", "2@2", "wm max"}},
		// A subtask that has read nothing goes idle too: its timer starts at the first periodic check (at
		// 100 ms), so it is idle at the check at 400 ms, not at 300.
		{"idle without a record", WatermarkSpec[int]{Assign: assign, Idleness: 300 * time.Millisecond, Interval: 100 * time.Millisecond},
			[][]int{{}, {}, {2}},
			[]step{{poll: true}, {advance: 100 * time.Millisecond}, {advance: 100 * time.Millisecond}, {advance: 100 * time.Millisecond},
				{poll: true}, {advance: 100 * time.Millisecond}, {poll: true}},
			[]string{"idle", "active", "2@2", "wm max"}},
		{"not idle before the timeout", WatermarkSpec[int]{Assign: assign, Idleness: 300 * time.Millisecond, Interval: 100 * time.Millisecond},
			[][]int{{}, {2}},
			[]step{{poll: true}, {advance: 100 * time.Millisecond}, {advance: 100 * time.Millisecond}, {advance: 100 * time.Millisecond},
				{poll: true}},
			[]string{"2@2", "wm max"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(time.UnixMilli(1_000_000))
			rt := &task.Runtime{Info: deploy.Info{Parallelism: 1, MaxParallelism: 1}, Counters: task.NewCounters(),
				Logger: slog.Default(), Clock: clock}
			ctx := NewContext(rt, "src")
			log := &eventLog{}
			ctx.wmOut = []watermarkTarget{log}
			spec := &TimedSourceSpec[int]{Source: &scriptedSource{polls: tc.polls}, Watermarks: &tc.spec}
			b, err := spec.Build(ctx, []any{Collector[Timed[int]](log)})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Open(); err != nil {
				t.Fatal(err)
			}
			deadline := func() int64 {
				if b.NextDeadline == nil {
					return math.MaxInt64
				}
				return b.NextDeadline()
			}
			for _, s := range tc.steps {
				if s.poll {
					if _, err := b.Source.Poll(); err != nil {
						t.Fatal(err)
					}
					continue
				}
				clock.Advance(s.advance)
				now := clock.Now().UnixMilli()
				for deadline() <= now {
					if err := b.OnProcessingTime(now); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !slices.Equal(log.got, tc.want) {
				t.Fatalf("got  %q\nwant %q", log.got, tc.want)
			}
			if got := rt.Counters.Watermark; got != math.MaxInt64 {
				t.Errorf("the source's watermark counter is %d, want the end of time", got)
			}
		})
	}
}

// splitReader emits scripted (split, value) pairs through SplitOutput, one poll per line; a negative
// value releases its split.
type splitReader struct{ polls [][][2]int }

func (r *splitReader) PollNext(out Collector[int]) (InputStatus, error) {
	if len(r.polls) == 0 {
		return EndOfInput, nil
	}
	so := out.(SplitOutput[int])
	for _, p := range r.polls[0] {
		if p[1] < 0 {
			so.ReleaseSplit(p[0])
			continue
		}
		so.ForSplit(p[0]).Collect(p[1])
	}
	r.polls = r.polls[1:]
	if len(r.polls) == 0 {
		return EndOfInput, nil
	}
	return MoreAvailable, nil
}
func (r *splitReader) Available() <-chan struct{} { return nil }
func (r *splitReader) Close() error               { return nil }

type splitSource struct{ polls [][][2]int }

func (s *splitSource) CreateReader(RuntimeContext) (SourceReader[int], error) {
	return &splitReader{polls: slices.Clone(s.polls)}, nil
}

// TestSplitWatermarks: a reader that emits per split gets a watermark per split; the source's is the
// lowest of the active splits', so the fast split does not run ahead of the slow one; an idle split stops
// holding the others back and a released one stops counting.
func TestSplitWatermarks(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.UnixMilli(1_000_000))
	rt := &task.Runtime{Info: deploy.Info{Parallelism: 1, MaxParallelism: 1}, Counters: task.NewCounters(), Logger: slog.Default(), Clock: clock}
	ctx := NewContext(rt, "src")
	log := &eventLog{}
	ctx.wmOut = []watermarkTarget{log}
	spec := &TimedSourceSpec[int]{Source: &splitSource{polls: [][][2]int{
		{{0, 100}, {1, 10}, {0, 200}},
		{{0, 300}},
		{{0, 400}, {2, 50}},
		{{2, -1}},
		{{0, 500}},
	}}, Watermarks: &WatermarkSpec[int]{Assign: func(v int, _ int64) int64 { return int64(v) }, Interval: 100 * time.Millisecond,
		Idleness: 250 * time.Millisecond}}
	b, err := spec.Build(ctx, []any{Collector[Timed[int]](log)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	tick := func() {
		clock.Advance(100 * time.Millisecond)
		now := clock.Now().UnixMilli()
		for b.NextDeadline() <= now {
			if err := b.OnProcessingTime(now); err != nil {
				t.Fatal(err)
			}
		}
	}
	poll := func() {
		if _, err := b.Source.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	poll() // splits 0 and 1
	tick() // the lowest: split 1 at 10 -> 9
	poll() // split 0 at 300; split 1 quiet
	tick()
	tick()
	tick() // split 1 idle: the watermark moves to split 0's
	poll() // split 2 appears at 50: it holds the watermark at 299 (split 0 is at 399), never moving it back
	tick()
	poll() // split 2 released: split 0 alone counts
	tick()
	poll() // the end
	want := []string{"100@100", "10@10", "200@200", "wm 9", "300@300", "wm 299", "400@400", "50@50", "wm 399", "500@500", "wm max"}
	if !slices.Equal(log.got, want) {
		t.Fatalf("got  %q\nwant %q", log.got, want)
	}
}

// batchReader emits one poll: a record by Collect, a batch of records by CollectBatch, and another record
// by Collect (timestamps are the values).
type batchReader struct {
	first, last int
	batch       []int
	done        bool
}

func (r *batchReader) PollNext(out Collector[int]) (InputStatus, error) {
	if r.done {
		return EndOfInput, nil
	}
	r.done = true
	out.Collect(r.first)
	out.(BatchCollector[int]).CollectBatch(r.batch)
	out.Collect(r.last)
	return EndOfInput, nil
}
func (r *batchReader) Available() <-chan struct{} { return nil }
func (r *batchReader) Close() error               { return nil }

type batchSource struct{ r *batchReader }

func (s *batchSource) CreateReader(RuntimeContext) (SourceReader[int], error) { return s.r, nil }

// TestSourceBatchToChainedFlatMap: a timed source hands a reader's batch to the flat maps chained to it
// (as columns, without copying it into timed records; to each of two in turn), in order with the records
// collected one by one around it, each output stamped with its input's timestamp, every input counted
// once, and the reader's slice untouched. The batch is longer than the chain's batches, so it goes on in
// several.
func TestSourceBatchToChainedFlatMap(t *testing.T) {
	batch := make([]int, 3*maxBatch+7)
	for i := range batch {
		batch[i] = 2 + i
	}
	last := 2 + len(batch)
	// The first flat map drops multiples of 3 and emits the others with their tenfold; the second emits
	// the even ones negated.
	fns := []func(v int, out Collector[int]) error{
		func(v int, out Collector[int]) error {
			if v%3 != 0 {
				out.Collect(v)
				out.Collect(10 * v)
			}
			return nil
		},
		func(v int, out Collector[int]) error {
			if v%2 == 0 {
				out.Collect(-v)
			}
			return nil
		},
	}
	wants := make([][]string, len(fns))
	for v := 1; v <= last; v++ {
		if v%3 != 0 {
			wants[0] = append(wants[0], fmt.Sprintf("%d@%d", v, v), fmt.Sprintf("%d@%d", 10*v, v))
		}
		if v%2 == 0 {
			wants[1] = append(wants[1], fmt.Sprintf("%d@%d", -v, v))
		}
	}
	for n, name := range map[int]string{1: "one flat map", 2: "two flat maps"} {
		t.Run(name, func(t *testing.T) {
			r := &batchReader{first: 1, batch: slices.Clone(batch), last: last}
			rt := &task.Runtime{Info: deploy.Info{Parallelism: 1, MaxParallelism: 1}, Counters: task.NewCounters(),
				Logger: slog.Default(), Clock: clockwork.NewFakeClock()}
			logs := make([]*eventLog, n)
			downstream := make([]any, n)
			for i := range n {
				logs[i] = &eventLog{}
				fm, err := (&TimedFlatMapSpec[int, int]{Fn: fns[i]}).Build(NewContext(rt, fmt.Sprint("flat map ", i)), []any{Collector[Timed[int]](logs[i])})
				if err != nil {
					t.Fatal(err)
				}
				downstream[i] = fm.Input
			}
			ctx := NewContext(rt, "src")
			ctx.wmOut = []watermarkTarget{logs[0]}
			spec := &TimedSourceSpec[int]{Source: &batchSource{r}, Watermarks: &WatermarkSpec[int]{Assign: func(v int, _ int64) int64 { return int64(v) }}}
			b, err := spec.Build(ctx, downstream)
			if err != nil {
				t.Fatal(err)
			}
			if sc := b.Source.(*sourceDriver[int]).out.(*stampingCollector[int]); sc.cols == nil {
				t.Fatal("the source does not hand its batches on as columns: this test would not test them")
			}
			if err := b.Open(); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Source.Poll(); err != nil {
				t.Fatal(err)
			}
			for i, log := range logs {
				want := wants[i]
				if i == 0 {
					want = append(slices.Clone(want), "wm max")
				}
				if !slices.Equal(log.got, want) {
					t.Errorf("flat map %d: got  %q\nwant %q", i, log.got, want)
				}
			}
			if got, n := rt.Counters.In, uint64(len(batch)+2); got != n {
				t.Errorf("the source counted %d records in, want %d", got, n)
			}
			if !slices.Equal(r.batch, batch) {
				t.Error("the reader's batch was modified")
			}
		})
	}
}

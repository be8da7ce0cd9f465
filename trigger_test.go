package runnel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// TestTriggerAndEvictorInAJob runs windows with a purging count trigger, and with a count evictor, through
// a whole job (parallelism 1, so that each key's records reach the window in input order), against
// references computed from the input: the purging count trigger fires every fifth record of a window with
// those five, and never at the window's end; the evictor leaves the window function the last three.
func TestTriggerAndEvictorInAJob(t *testing.T) {
	const bound, size = 30, 100
	clicks := outOfOrderClicks(3000, bound, 9)
	type kw struct {
		key   string
		start int64
	}
	byWindow := map[kw][]click{}
	var order []kw
	for _, c := range clicks {
		k := kw{c.User, c.At - c.At%size}
		if _, ok := byWindow[k]; !ok {
			order = append(order, k)
		}
		byWindow[k] = append(byWindow[k], c)
	}
	fold := func(k kw, cs []click) winResult {
		r := winAgg{}.CreateAccumulator()
		for _, c := range cs {
			r = winAgg{}.Add(c, r)
		}
		r.End = k.start + size
		return r
	}
	var fives, lastThree []winResult
	for _, k := range order {
		cs := byWindow[k]
		for i := 5; i <= len(cs); i += 5 {
			fives = append(fives, fold(k, cs[i-5:i]))
		}
		lastThree = append(lastThree, fold(k, cs[max(0, len(cs)-3):]))
	}
	for _, tc := range []struct {
		name  string
		build func(*runnel.WindowedStream[string, click]) *runnel.Stream[winResult]
		want  []winResult
	}{
		{"purging count trigger", func(w *runnel.WindowedStream[string, click]) *runnel.Stream[winResult] {
			return runnel.WindowAggregate(w.Trigger(runnel.PurgingTrigger(runnel.CountTrigger[click](5))),
				runnel.AggregateFunction[click, winResult, winResult](winAgg{}))
		}, fives},
		{"count evictor", func(w *runnel.WindowedStream[string, click]) *runnel.Stream[winResult] {
			return runnel.WindowAggregate(w.Evictor(runnel.CountEvictor[click](3, false)),
				runnel.AggregateFunction[click, winResult, winResult](winAgg{}))
		}, lastThree},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet))
			src := runnel.FromSource(env, connector.Collection(clicks)).WithCodec(codec.MustStruct[click]()).
				WithTimestamps(runnel.BoundedOutOfOrderness[click](bound * time.Millisecond).WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
			w := runnel.Window(runnel.KeyBy(src, func(c click) string { return c.User }), runnel.TumblingEventTimeWindows(size*time.Millisecond))
			sink := &winSink{}
			tc.build(w).WithCodec(codec.MustStruct[winResult]()).SinkTo(sink)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if res, err := env.Execute(ctx, "triggers"); err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v %+v", err, res)
			}
			// Windows fire more than once: results are ordered by all their fields.
			got, want := sink.got, slices.Clone(tc.want)
			byAll := func(a, b winResult) int { return strings.Compare(fmt.Sprintf("%+v", a), fmt.Sprintf("%+v", b)) }
			slices.SortFunc(got, byAll)
			slices.SortFunc(want, byAll)
			if len(want) < 100 || len(got) != len(want) {
				t.Fatalf("%d results, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("result %d: got %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
}

// onEveryRecord is a custom trigger without OnMerge.
type onEveryRecord struct{}

func (onEveryRecord) OnElement(click, int64, runnel.TimeWindow, runnel.TriggerContext) (runnel.TriggerResult, error) {
	return runnel.Fire, nil
}
func (onEveryRecord) OnEventTime(int64, runnel.TimeWindow, runnel.TriggerContext) (runnel.TriggerResult, error) {
	return runnel.Continue, nil
}
func (onEveryRecord) OnProcessingTime(int64, runnel.TimeWindow, runnel.TriggerContext) (runnel.TriggerResult, error) {
	return runnel.Continue, nil
}
func (onEveryRecord) Clear(runnel.TimeWindow, runnel.TriggerContext) error { return nil }
func (onEveryRecord) String() string                                       { return "onEveryRecord" }

// TestTriggerErrorsAtBuild: a trigger that cannot merge on session windows, and built-in triggers and
// evictors made with bad arguments, fail the job's build with the reason.
func TestTriggerErrorsAtBuild(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*runnel.WindowedStream[string, click])
		want string
	}{
		{"no merge", func(w *runnel.WindowedStream[string, click]) { w.Trigger(onEveryRecord{}) },
			"trigger onEveryRecord cannot run on event-time session windows"},
		{"count", func(w *runnel.WindowedStream[string, click]) { w.Trigger(runnel.CountTrigger[click](0)) },
			"CountTrigger: the count must be at least 1, got 0"},
		{"interval", func(w *runnel.WindowedStream[string, click]) {
			w.Trigger(runnel.PurgingTrigger(runnel.ContinuousEventTimeTrigger[click](0)))
		}, "ContinuousEventTimeTrigger: the interval must be whole milliseconds"},
		{"evictor", func(w *runnel.WindowedStream[string, click]) { w.Evictor(runnel.CountEvictor[click](-1, true)) },
			"CountEvictor: the count must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithLogger(quiet))
			src := runnel.FromSource(env, connector.Collection([]click{{User: "a"}})).WithCodec(codec.MustStruct[click]()).
				WithTimestamps(runnel.MonotonousTimestamps[click]().WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
			w := runnel.Window(runnel.KeyBy(src, func(c click) string { return c.User }), runnel.EventTimeSessionWindows(time.Second))
			tc.set(w)
			runnel.WindowAggregate(w, runnel.AggregateFunction[click, winResult, winResult](winAgg{})).
				WithCodec(codec.MustStruct[winResult]()).SinkTo(&winSink{})
			_, err := env.Execute(context.Background(), "bad")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "trigger_test.go") {
				t.Errorf("%v does not name the call", fmt.Sprint(err))
			}
		})
	}
}

package runnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// here returns "file.go:line" of its caller, as the engine's error messages name the user's calls.
func here() string {
	_, file, line, _ := runtime.Caller(1)
	return fmt.Sprintf("%s:%d", filepath.Base(file), line)
}

// TestMissingCodecNamesFileAndLine pins the README's promise for a record type without a codec on a network
// edge: the error names the operator whose output crosses the network and the file:line of the API call
// that built it, however the edge comes to cross a task boundary.
func TestMissingCodecNamesFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []runnel.Option
		build func(env *runnel.Environment) string
	}{
		{"rebalance", nil, func(env *runnel.Environment) string {
			src := runnel.FromSource(env, connector.Collection(seq(3)))
			m, at := runnel.Map(src, func(v int64) (unencodable, error) { return unencodable{}, nil }).Name("mk"), here()
			m.Rebalance().SinkTo(connector.Discard[unencodable]())
			return at
		}},
		{"no chaining", []runnel.Option{runnel.WithChaining(false)}, func(env *runnel.Environment) string {
			src := runnel.FromSource(env, connector.Collection(seq(3)))
			m, at := runnel.Map(src, func(v int64) (unencodable, error) { return unencodable{}, nil }).Name("mk"), here()
			m.SinkTo(connector.Discard[unencodable]())
			return at
		}},
		{"parallelism changes", nil, func(env *runnel.Environment) string {
			src := runnel.FromSource(env, connector.Collection(seq(3)))
			m, at := runnel.Map(src, func(v int64) (unencodable, error) { return unencodable{}, nil }).Name("mk"), here()
			m.SinkTo(connector.Discard[unencodable]()).SetParallelism(2)
			return at
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(tc.opts...)
			at := tc.build(env)
			_, err := env.Execute(context.Background(), "no codec")
			if err == nil {
				t.Fatal("the job ran without a codec on a network edge")
			}
			for _, want := range []string{`operator "mk"`, "needs a codec", "created at", at} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// lateState declares its state in ProcessElement instead of Open.
type lateState struct {
	runnel.KeyedProcessBase[int64, int64]
}

func (lateState) ProcessElement(ctx runnel.KeyedContext[int64], v int64, out runnel.Collector[int64]) error {
	total, err := runnel.NewValueState[int64](ctx, "total")
	if err != nil {
		return err
	}
	sum, _ := total.Value()
	total.Update(sum + v)
	out.Collect(sum + v)
	return nil
}

// TestStateDeclaredOutsideOpen pins the message for keyed state declared in ProcessElement: it names the
// state and the operator and says that state is declared in Open, at the first record (before, the first
// record declared it and the second failed with "registered twice"), with either state backend.
func TestStateDeclaredOutsideOpen(t *testing.T) {
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithStateBackend(backend))
			src := runnel.FromSource(env, connector.Collection(seq(10)))
			sums := runnel.Process(runnel.KeyBy(src, func(v int64) int64 { return v % 2 }),
				func() runnel.KeyedProcessFunction[int64, int64, int64] { return lateState{} }).Name("late")
			sums.SinkTo(connector.Discard[int64]())
			_, err := env.Execute(context.Background(), "late state")
			if err == nil {
				t.Fatal("the job ran with state declared in ProcessElement")
			}
			for _, want := range []string{`value state "total"`, `operator "late"`, "must be declared in Open"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "twice") {
				t.Fatalf("error %q blames a second declaration", err)
			}
		})
	}
}

// captureHandler is a slog handler that keeps every record, for tests that check what was logged.
type captureHandler struct {
	mu      *sync.Mutex
	records *[]slog.Record
	attrs   []slog.Attr
}

func newCaptureHandler() *captureHandler {
	return &captureHandler{mu: &sync.Mutex{}, records: &[]slog.Record{}}
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.records = append(*h.records, r)
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clone(h.attrs), as...)
	return &c
}

func (h *captureHandler) WithGroup(string) slog.Handler { return h }

// errorsWith returns the records logged at ERROR that have attribute key, with that attribute's value.
func (h *captureHandler) errorsWith(key string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range *h.records {
		if r.Level < slog.LevelError {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				out = append(out, a.Value.String())
			}
			return true
		})
	}
	return out
}

// TestPanicNamesOperator pins what a panic in a user function reports: the job's error names the operator
// whose function panicked (not only the chain it runs in) and the file:line of the API call that built
// it, and the task logs the panic's stack at ERROR. The panicking operator sits in the middle of a chain
// of several, reached on the batch path (records of a source poll), behind a flat map, and as a flat map
// that panics after the operators behind it ran.
func TestPanicNamesOperator(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(env *runnel.Environment) string
	}{
		{"batch path", func(env *runnel.Environment) string {
			src := runnel.FromSource(env, connector.Collection(seq(1000)))
			parsed := runnel.Map(src, func(v int64) (int64, error) { return v * 2, nil }).Name("parse")
			explode := func(v int64) (int64, error) {
				if v == 600 {
					panic("explode at 600")
				}
				return v, nil
			}
			boom, at := runnel.Map(parsed, explode).Name("explode"), here()
			boom.Filter(func(v int64) (bool, error) { return v%3 == 0, nil }).Name("keep").SinkTo(connector.Discard[int64]()).Name("sink")
			return at
		}},
		{"behind a flat map", func(env *runnel.Environment) string {
			src := runnel.FromSource(env, connector.Collection(seq(1000)))
			twice := runnel.FlatMap(src, func(v int64, out runnel.Collector[int64]) error {
				out.Collect(v)
				out.Collect(v + 1000)
				return nil
			}).Name("twice")
			explode := func(v int64) (int64, error) {
				if v == 1300 {
					panic("explode at 1300")
				}
				return v, nil
			}
			boom, at := runnel.Map(twice, explode).Name("explode"), here()
			boom.Filter(func(v int64) (bool, error) { return true, nil }).Name("keep").SinkTo(connector.Discard[int64]()).Name("sink")
			return at
		}},
		// The flat map panics after its output filled a batch that the operators behind it took: the panic
		// is still the flat map's.
		{"after emitting downstream", func(env *runnel.Environment) string {
			src := runnel.FromSource(env, connector.Collection(seq(10)))
			explode := func(v int64, out runnel.Collector[int64]) error {
				for i := range int64(1000) {
					out.Collect(v*1000 + i)
				}
				if v == 7 {
					panic("explode at 7")
				}
				return nil
			}
			boom, at := runnel.FlatMap(src, explode).Name("explode"), here()
			runnel.Map(boom, func(v int64) (int64, error) { return v, nil }).Name("after").
				Filter(func(v int64) (bool, error) { return true, nil }).Name("keep").SinkTo(connector.Discard[int64]()).Name("sink")
			return at
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := newCaptureHandler()
			env := runnel.NewEnvironment(runnel.WithLogger(slog.New(logs)))
			at := tc.build(env)
			res, err := env.Execute(context.Background(), "panic")
			if err == nil {
				t.Fatal("the job did not fail")
			}
			if len(res.Vertices) != 1 {
				t.Fatalf("the operators were not chained into one task: %d vertices", len(res.Vertices))
			}
			for _, want := range []string{`operator "explode"`, "created at", at, "panicked: explode at"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
			}
			stacks := logs.errorsWith("stack")
			if len(stacks) == 0 {
				t.Fatal("no stack was logged at ERROR")
			}
			// The stack is the panic's: it runs through the user's function in this file.
			if !strings.Contains(stacks[0], "api_errors_test.go") || !strings.Contains(stacks[0], "panic") {
				t.Fatalf("the logged stack does not show the panicking function:\n%s", stacks[0])
			}
		})
	}
}

// TestBuildErrorsNameTheUsersCall pins the README's promise for build errors made through the event-time
// and two-input API: each names the API function the user called (WindowJoin, not an operator it builds
// inside) and the file:line of that call in the user's code, however many of Runnel's own functions lie
// between; and an operator such a call built says where the user created it.
func TestBuildErrorsNameTheUsersCall(t *testing.T) {
	clicks := []click{{User: "a", At: 1}}
	byUser := func(c click) string { return c.User }
	untimed := func(env *runnel.Environment, name string) *runnel.KeyedStream[string, click] {
		return runnel.KeyBy(runnel.FromSource(env, connector.Collection(clicks)).Name(name), byUser)
	}
	timed := func(env *runnel.Environment, name string) *runnel.KeyedStream[string, click] {
		s := runnel.FromSource(env, connector.Collection(clicks)).Name(name).
			WithTimestamps(runnel.MonotonousTimestamps[click]().WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
		return runnel.KeyBy(s, byUser)
	}
	tumbling := runnel.TumblingEventTimeWindows(time.Second)
	sum := func(a, b click) (click, error) { return a, nil }
	pair := func(a, b click, out runnel.Collector[click]) error { out.Collect(a); return nil }
	group := func(_ runnel.WindowContext[string], as, bs []click, out runnel.Collector[click]) error { return nil }
	list := func() runnel.ProcessWindowFunction[string, click, click] { return nil }
	join := func(a, b click, _ runnel.JoinContext, out runnel.Collector[click]) error { return nil }
	for _, tc := range []struct {
		name, want string
		build      func(env *runnel.Environment) string
	}{
		{"WindowReduce without event time", "WindowReduce: event-time tumbling windows need a stream with event time", func(env *runnel.Environment) string {
			w := runnel.Window(untimed(env, "a"), tumbling)
			_, at := runnel.WindowReduce(w, sum), here()
			return at
		}},
		{"WindowAggregate without event time", "WindowAggregate: event-time tumbling windows", func(env *runnel.Environment) string {
			w := runnel.Window(untimed(env, "a"), tumbling)
			_, at := runnel.WindowAggregate(w, runnel.AggregateFunction[click, winResult, winResult](winAgg{})), here()
			return at
		}},
		{"WindowAggregate with a nil function", "WindowAggregate: nil function", func(env *runnel.Environment) string {
			w := runnel.Window(timed(env, "a"), tumbling)
			_, at := runnel.WindowAggregate[string, click, winResult, winResult](w, nil), here()
			return at
		}},
		{"WindowAggregateProcess without event time", "WindowAggregateProcess: event-time tumbling windows", func(env *runnel.Environment) string {
			w := runnel.Window(untimed(env, "a"), tumbling)
			pass := func() runnel.ProcessWindowFunction[string, winResult, winResult] { return nil }
			_, at := runnel.WindowAggregateProcess(w, runnel.AggregateFunction[click, winResult, winResult](winAgg{}), pass), here()
			return at
		}},
		{"WindowProcess without event time", "WindowProcess: event-time tumbling windows", func(env *runnel.Environment) string {
			w := runnel.Window(untimed(env, "a"), tumbling)
			_, at := runnel.WindowProcess(w, list), here()
			return at
		}},
		{"AllowedLateness in processing time", "AllowedLateness: processing-time", func(env *runnel.Environment) string {
			w := runnel.Window(untimed(env, "a"), runnel.TumblingProcessingTimeWindows(time.Second))
			_, at := w.AllowedLateness(time.Second), here()
			return at
		}},
		{"WindowJoin without event time", "WindowJoin: event-time tumbling windows need a stream with event time", func(env *runnel.Environment) string {
			a, b := untimed(env, "a"), untimed(env, "b")
			_, at := runnel.WindowJoin(a, b, tumbling, pair), here()
			return at
		}},
		{"WindowJoin of a timed and an untimed stream", "WindowJoin: one stream has event time and the other has none", func(env *runnel.Environment) string {
			a, b := timed(env, "a"), untimed(env, "b")
			_, at := runnel.WindowJoin(a, b, tumbling, pair), here()
			return at
		}},
		{"WindowJoin across environments", "WindowJoin: the streams belong to different environments", func(env *runnel.Environment) string {
			a, b := timed(env, "a"), timed(runnel.NewEnvironment(), "b")
			_, at := runnel.WindowJoin(a, b, tumbling, pair), here()
			return at
		}},
		{"WindowJoin with a nil function", "WindowJoin: nil function", func(env *runnel.Environment) string {
			a, b := timed(env, "a"), timed(env, "b")
			_, at := runnel.WindowJoin[string, click, click, click](a, b, tumbling, nil), here()
			return at
		}},
		{"WindowCoGroup of a timed and an untimed stream", "WindowCoGroup: one stream has event time", func(env *runnel.Environment) string {
			a, b := untimed(env, "a"), timed(env, "b")
			_, at := runnel.WindowCoGroup(a, b, tumbling, group), here()
			return at
		}},
		{"IntervalJoin without event time", "IntervalJoin: both streams need event time", func(env *runnel.Environment) string {
			a, b := untimed(env, "a"), untimed(env, "b")
			_, at := runnel.IntervalJoin(a, b, -time.Second, time.Second, join), here()
			return at
		}},
		{"IntervalJoin with crossed bounds", "IntervalJoin: the lower bound 1s is above the upper bound", func(env *runnel.Environment) string {
			a, b := timed(env, "a"), timed(env, "b")
			_, at := runnel.IntervalJoin(a, b, time.Second, -time.Second, join), here()
			return at
		}},
		{"IntervalJoinBetween with exclusive bounds that admit no pair", "IntervalJoinBetween: the bounds [0 ms, 0 ms] with an exclusive end admit no pair", func(env *runnel.Environment) string {
			j := runnel.IntervalJoinBetween(timed(env, "a"), timed(env, "b"), 0, 0).UpperBoundExclusive()
			_, at := runnel.IntervalJoinProcess(j, func() runnel.ProcessJoinFunction[click, click, click] { return nil }), here()
			return at
		}},
		{"SideOutputRightLateData without a tag", "SideOutputRightLateData: the tag has no id", func(env *runnel.Environment) string {
			j := runnel.IntervalJoinBetween(timed(env, "a"), timed(env, "b"), -time.Second, time.Second)
			_, at := j.SideOutputRightLateData(runnel.OutputTag[click]{}), here()
			return at
		}},
		{"ConnectKeyed of a timed and an untimed stream", "ConnectKeyed: one stream has event time", func(env *runnel.Environment) string {
			a, b := timed(env, "a"), untimed(env, "b")
			_, at := runnel.ConnectKeyed(a, b), here()
			return at
		}},
		{"WithTimestamps without an assigner", "WithTimestamps: the stream has no timestamps yet", func(env *runnel.Environment) string {
			s := runnel.FromSource(env, connector.Collection(clicks))
			_, at := s.WithTimestamps(runnel.MonotonousTimestamps[click]()), here()
			return at
		}},
		{"SideOutputLateData without a tag", "SideOutputLateData: the tag has no id", func(env *runnel.Environment) string {
			w := runnel.Window(timed(env, "a"), tumbling)
			_, at := w.SideOutputLateData(runnel.OutputTag[click]{}), here()
			return at
		}},
		// The window's results have no codec and cross the network: the error names the window operator and
		// where the user created it.
		{"a window operator's origin", `operator "window"`, func(env *runnel.Environment) string {
			w := runnel.Window(timed(env, "a"), tumbling)
			mk := func() runnel.ProcessWindowFunction[string, click, unencodable] { return nil }
			out, at := runnel.WindowProcess(w, mk), here()
			out.Rebalance().SinkTo(connector.Discard[unencodable]())
			return at
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithLogger(quiet))
			at := tc.build(env)
			err := env.Err()
			if err == nil {
				_, err = env.Execute(context.Background(), "build errors")
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range []string{tc.want, "api_errors_test.go", at} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "cogroup") {
				t.Fatalf("error %q names an operator the user did not write", err)
			}
		})
	}
}

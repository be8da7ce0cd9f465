package operator

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// counting is a keyed process function for the harness's own tests: it counts each key's records in
// keyed state, emits "key:count" per record, sends odd values to side output "odd", sets an event-time
// timer at the record's time plus 10 (or a processing-time timer at the clock plus 10 where the stream has
// no event time) that emits "key fired", and fails on the value -1.
type counting struct{ n state.ValueState[int64] }

func (f *counting) Open(ctx KeyedContext[int64]) (err error) {
	f.n, err = state.NewValue[int64](KeyedBackend(ctx), "n", codec.Int64())
	return err
}
func (f *counting) Close() error                                          { return nil }
func (f *counting) EndInput(KeyedContext[int64], Collector[string]) error { return nil }

func (f *counting) ProcessElement(ctx KeyedContext[int64], v int64, out Collector[string]) error {
	if v == -1 {
		return errors.New("the value -1")
	}
	n, _ := f.n.Value()
	f.n.Update(n + 1)
	out.Collect(fmt.Sprintf("%d:%d", ctx.CurrentKey(), n+1))
	if v%2 != 0 {
		EmitSide(ctx, "odd", v)
	}
	if ts, timed := ctx.Timestamp(); timed {
		ctx.TimerService().RegisterEventTimeTimer(ts + 10)
	} else {
		ctx.TimerService().RegisterProcessingTimeTimer(ctx.TimerService().CurrentProcessingTime() + 10)
	}
	return nil
}

func (f *counting) OnTimer(ctx TimerContext[int64], ts int64, out Collector[string]) error {
	out.Collect(fmt.Sprintf("%d fired", ctx.CurrentKey()))
	f.n.Clear()
	return nil
}

func countingSpec() *TimedKeyedProcessSpec[int64, int64, string] {
	return &TimedKeyedProcessSpec[int64, int64, string]{Key: func(v int64) int64 { return v % 3 }, KeyCodec: codec.Int64(),
		New: func() KeyedProcessFunction[int64, int64, string] { return &counting{} }}
}

func timedStrings(vs []Timed[string]) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprintf("%s@%d", v.V, v.Ts)
	}
	return out
}

// TestHarnessRunsAKeyedOperator drives a timed keyed process function through the harness: records
// carry their timestamps out, side outputs theirs, a watermark fires the timers it passes before it is
// forwarded, a snapshot restored into a fresh operator goes on with the keyed state, the timers and the
// watermark, and an operator's failure is the step's.
func TestHarnessRunsAKeyedOperator(t *testing.T) {
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			cfg := HarnessConfig{StateBackend: backend, SideOutputs: []string{"odd"}}
			h := NewHarness[Timed[int64], Timed[string]](t, countingSpec(), cfg)
			h.Process(Timed[int64]{Ts: 100, V: 3})
			h.ProcessBatch([]Timed[int64]{{Ts: 105, V: 6}, {Ts: 107, V: 4}})
			h.Watermark(112)
			if got, want := timedStrings(h.TakeOutput()), []string{"0:1@100", "0:2@105", "1:1@107", "0 fired@110"}; !slices.Equal(got, want) {
				t.Fatalf("output %q, want %q", got, want)
			}
			if got, want := SideOutput[int64](h, "odd"), []Timed[int64]{{Ts: 100, V: 3}}; !slices.Equal(got, want) {
				t.Fatalf("side output %v, want %v", got, want)
			}
			snap := h.Snapshot()
			if snap.Watermark != 112 {
				t.Fatalf("snapshot at watermark %d, want 112", snap.Watermark)
			}
			h.Watermark(200)
			if got, want := timedStrings(h.TakeOutput()), []string{"0 fired@115", "1 fired@117"}; !slices.Equal(got, want) {
				t.Fatalf("after the snapshot: %q, want %q", got, want)
			}
			if got, want := h.Watermarks(), []int64{112, 200}; !slices.Equal(got, want) {
				t.Fatalf("watermarks %v, want %v", got, want)
			}

			cfg.Restore = []Snapshot{snap}
			r := NewHarness[Timed[int64], Timed[string]](t, countingSpec(), cfg)
			r.Process(Timed[int64]{Ts: 150, V: 1})
			r.Watermark(112) // behind the restored watermark: nothing fires, nothing is forwarded
			r.Watermark(200)
			if got, want := timedStrings(r.Output()), []string{"1:2@150", "0 fired@115", "1 fired@117", "1 fired@160"}; !slices.Equal(got, want) {
				t.Fatalf("restored: %q, want %q", got, want)
			}
			if got := StateKeys[int64](r); len(got) != 0 {
				t.Fatalf("keys %v hold state after every timer fired", got)
			}
			err := r.Catch(func() { r.Process(Timed[int64]{Ts: 300, V: -1}) })
			if err == nil || !strings.Contains(err.Error(), "the value -1") {
				t.Fatalf("failing record: %v", err)
			}
		})
	}
}

// TestHarnessProcessingTime fires processing-time timers as the clock moves, and only those due.
func TestHarnessProcessingTime(t *testing.T) {
	spec := &KeyedProcessSpec[int64, int64, string]{Key: func(v int64) int64 { return v % 3 }, KeyCodec: codec.Int64(),
		New: func() KeyedProcessFunction[int64, int64, string] { return &counting{} }}
	h := NewHarness[int64, string](t, spec, HarnessConfig{ProcessingTime: 1000})
	h.Process(3)
	h.SetProcessingTime(1005)
	h.Process(4)
	h.SetProcessingTime(1010)
	if got, want := h.TakeOutput(), []string{"0:1", "1:1", "0 fired"}; !slices.Equal(got, want) {
		t.Fatalf("at 1010: %q, want %q", got, want)
	}
	h.SetProcessingTime(1020)
	if got, want := h.TakeOutput(), []string{"1 fired"}; !slices.Equal(got, want) {
		t.Fatalf("at 1020: %q, want %q", got, want)
	}
	if err := h.Catch(func() { h.SetProcessingTime(1019) }); err == nil {
		t.Fatal("the clock went back")
	}
}

// joinCount is a keyed co-process function: it emits what each input brings, and on a timer at the
// watermark the number of records seen.
type joinCount struct{}

func (joinCount) Open(KeyedContext[int64]) error                        { return nil }
func (joinCount) Close() error                                          { return nil }
func (joinCount) EndInput(KeyedContext[int64], Collector[string]) error { return nil }
func (joinCount) ProcessElement1(ctx KeyedContext[int64], a int64, out Collector[string]) error {
	out.Collect(fmt.Sprint("a", a))
	ts, _ := ctx.Timestamp()
	ctx.TimerService().RegisterEventTimeTimer(ts)
	return nil
}
func (joinCount) ProcessElement2(ctx KeyedContext[int64], b string, out Collector[string]) error {
	out.Collect("b" + b)
	return nil
}
func (joinCount) OnTimer(ctx TimerContext[int64], ts int64, out Collector[string]) error {
	out.Collect(fmt.Sprint("timer ", ts))
	return nil
}

// TestTwoInputHarnessCombinesWatermarks: the operator's watermark is the lower of its inputs', an idle
// input stops holding the other back, and a snapshot carries the combined watermark.
func TestTwoInputHarnessCombinesWatermarks(t *testing.T) {
	spec := &KeyedCoProcessSpec[int64, int64, string, string]{Key1: func(a int64) int64 { return a }, Key2: func(string) int64 { return 1 },
		KeyCodec: codec.Int64(), Timed: true, New: func() KeyedCoProcessFunction[int64, int64, string, string] { return joinCount{} }}
	h := NewTwoInputHarness[Timed[int64], Timed[string], Timed[string]](t, spec, HarnessConfig{})
	h.Process1(Timed[int64]{Ts: 10, V: 1})
	h.Process2(Timed[string]{Ts: 20, V: "x"})
	h.Process1(Timed[int64]{Ts: 30, V: 1})
	h.Watermark1(50)
	if got := h.Watermarks(); len(got) != 0 {
		t.Fatalf("watermarks %v before the second input has one", got)
	}
	h.Watermark2(15)
	h.Idle2(true)
	h.Watermark1(60)
	if got, want := h.Watermarks(), []int64{15, 50, 60}; !slices.Equal(got, want) {
		t.Fatalf("watermarks %v, want %v", got, want)
	}
	if got, want := timedStrings(h.Output()), []string{"a1@10", "bx@20", "a1@30", "timer 10@10", "timer 30@30"}; !slices.Equal(got, want) {
		t.Fatalf("output %q, want %q", got, want)
	}
	if snap := h.Snapshot(); snap.Watermark != 60 {
		t.Fatalf("snapshot at %d, want 60", snap.Watermark)
	}
}

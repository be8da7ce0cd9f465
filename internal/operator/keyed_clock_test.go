package operator

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/codec"
)

// clockReader emits the processing time it is told for each record and moves the harness's clock on by a
// second, as a slow function's records would see it move; its timers emit the time they are told too.
type clockReader struct{ clock *clockwork.FakeClock }

func (f *clockReader) Open(KeyedContext[int64]) error                        { return nil }
func (f *clockReader) EndInput(KeyedContext[int64], Collector[string]) error { return nil }
func (f *clockReader) Close() error                                          { return nil }

func (f *clockReader) ProcessElement(ctx KeyedContext[int64], v int64, out Collector[string]) error {
	now := ctx.TimerService().CurrentProcessingTime()
	out.Collect(fmt.Sprintf("%d@%d", v, now))
	if v == 0 {
		ctx.TimerService().RegisterProcessingTimeTimer(now + 1)
	}
	f.clock.Advance(time.Second)
	return nil
}

func (f *clockReader) OnTimer(ctx TimerContext[int64], ts int64, out Collector[string]) error {
	out.Collect(fmt.Sprintf("timer %d@%d", ts, ctx.TimerService().CurrentProcessingTime()))
	return nil
}

// TestProcessingTimeReadOncePerBatch: a keyed process function's processing time is read once per
// batch of records (the batch's records all see the time of its start) and at every call otherwise (a
// record alone, a timer), timed stream or not.
func TestProcessingTimeReadOncePerBatch(t *testing.T) {
	f := &clockReader{}
	newFn := func() KeyedProcessFunction[int64, int64, string] { return f }
	check := func(t *testing.T, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("got  %q\nwant %q", got, want)
		}
	}
	t.Run("untimed", func(t *testing.T) {
		spec := &KeyedProcessSpec[int64, int64, string]{Key: func(v int64) int64 { return v }, KeyCodec: codec.Int64(), New: newFn}
		h := NewHarness[int64, string](t, spec, HarnessConfig{ProcessingTime: 1_000_000})
		f.clock = h.Clock()
		h.ProcessBatch([]int64{1, 2, 3})
		h.Process(4)
		h.Process(0)
		h.SetProcessingTime(1_005_001)
		check(t, h.TakeOutput(), []string{"1@1000000", "2@1000000", "3@1000000", "4@1003000", "0@1004000",
			"timer 1004001@1005001"})
	})
	t.Run("timed", func(t *testing.T) {
		spec := &TimedKeyedProcessSpec[int64, int64, string]{Key: func(v int64) int64 { return v }, KeyCodec: codec.Int64(), New: newFn}
		h := NewHarness[Timed[int64], Timed[string]](t, spec, HarnessConfig{ProcessingTime: 1_000_000})
		f.clock = h.Clock()
		h.ProcessBatch([]Timed[int64]{{Ts: 1, V: 1}, {Ts: 2, V: 2}})
		h.ProcessBatch([]Timed[int64]{{Ts: 3, V: 3}})
		var got []string
		for _, v := range h.TakeOutput() {
			got = append(got, v.V)
		}
		check(t, got, []string{"1@1000000", "2@1000000", "3@1002000"})
	})
}

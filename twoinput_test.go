package runnel_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// order and payment are the two streams of the co-process tests.
type order struct{ ID, At int64 }
type payment struct{ ID, At int64 }

// payments pairs orders with their payments, either first; an order unpaid 50 ms (in event time) after it
// was placed is reported unpaid.
type payments struct {
	runnel.KeyedCoProcessBase[int64, string]
	placed runnel.ValueState[int64] // the order's time, while it waits for its payment
	paid   runnel.ValueState[bool]  // a payment that came before its order
}

func (p *payments) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	if p.placed, err = runnel.NewValueState[int64](ctx, "placed"); err != nil {
		return err
	}
	p.paid, err = runnel.NewValueState[bool](ctx, "paid")
	return err
}

func (p *payments) ProcessElement1(ctx runnel.KeyedContext[int64], o order, out runnel.Collector[string]) error {
	if _, ok := p.paid.Value(); ok {
		p.paid.Clear()
		out.Collect(fmt.Sprintf("paid %d", o.ID))
		return nil
	}
	p.placed.Update(o.At)
	ctx.TimerService().RegisterEventTimeTimer(o.At + 50)
	return nil
}

func (p *payments) ProcessElement2(ctx runnel.KeyedContext[int64], pm payment, out runnel.Collector[string]) error {
	if at, ok := p.placed.Value(); ok {
		p.placed.Clear()
		ctx.TimerService().DeleteEventTimeTimer(at + 50)
		out.Collect(fmt.Sprintf("paid %d", pm.ID))
		return nil
	}
	p.paid.Update(true)
	return nil
}

func (p *payments) OnTimer(ctx runnel.TimerContext[int64], ts int64, out runnel.Collector[string]) error {
	if _, ok := p.placed.Value(); ok {
		p.placed.Clear()
		out.Collect(fmt.Sprintf("unpaid %d", ctx.CurrentKey()))
	}
	return nil
}

// TestKeyedCoProcessExactlyOnce joins two keyed streams with event time in a keyed co-process function
// (shared keyed state, either side first, event-time timers that fire on the lower watermark of the two
// inputs), with failures injected under region and full failover, on both backends, local and over TCP:
// the file sink's committed lines are exactly the expected ones.
func TestKeyedCoProcessExactlyOnce(t *testing.T) {
	const n = 6000
	orderOf := func(sub int, seq uint64) order { id := int64(seq)*2 + int64(sub); return order{ID: id, At: id * 3} }
	paymentOf := func(sub int, seq uint64) payment {
		id := int64(seq)*2 + int64(sub)
		// Every fifth order is never paid; the others are paid up to 40 ms after (or 10 ms before) it.
		if id%5 == 0 {
			return payment{ID: -1, At: id * 3}
		}
		return payment{ID: id, At: id*3 + id%50 - 10}
	}
	var want []string
	for id := int64(0); id < n; id++ {
		if id%5 == 0 {
			want = append(want, fmt.Sprintf("unpaid %d", id))
		} else {
			want = append(want, fmt.Sprintf("paid %d", id))
		}
	}
	slices.Sort(want)
	for _, tc := range []struct {
		name string
		opts []runnel.Option
	}{
		{"no failure local", nil},
		{"region memory tcp", []runnel.Option{runnel.WithTaskManagers(2), runnel.WithFailover("region"), runnel.WithFailureInjection("coprocess[1]@1500")}},
		{"full pebble", []runnel.Option{runnel.WithStateBackend("pebble"), runnel.WithFailover("full"), runnel.WithFailureInjection("coprocess[0]@2500", "payments[1]@1000")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet),
				runnel.WithWatermarkInterval(2 * time.Millisecond),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond, Storage: filepath.Join(dir, "chk")}),
				runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=10ms")}, tc.opts...)...)
			orders := runnel.FromSource(env, connector.Generator(orderOf, connector.GeneratorOptions{TotalRecords: n, RatePerSubtask: 20_000})).
				Name("orders").WithCodec(codec.MustStruct[order]()).
				WithTimestamps(runnel.MonotonousTimestamps[order]().WithTimestampAssigner(func(o order, _ int64) int64 { return o.At }))
			pays := runnel.FromSource(env, connector.Generator(paymentOf, connector.GeneratorOptions{TotalRecords: n, RatePerSubtask: 20_000})).
				Name("payments").WithCodec(codec.MustStruct[payment]()).
				WithTimestamps(runnel.BoundedOutOfOrderness[payment](60 * time.Millisecond).WithTimestampAssigner(func(p payment, _ int64) int64 { return p.At })).
				Filter(func(p payment) (bool, error) { return p.ID >= 0, nil })
			joined := runnel.KeyedCoProcess(runnel.ConnectKeyed(runnel.KeyBy(orders, func(o order) int64 { return o.ID }),
				runnel.KeyBy(pays, func(p payment) int64 { return p.ID })),
				func() runnel.KeyedCoProcessFunction[int64, order, payment, string] { return &payments{} })
			joined.SinkTo(connector.FileSink(out, func(s string) string { return s })).Name("files").SetParallelism(1)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "coprocess")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v %+v", err, res)
			}
			if len(tc.opts) > 0 && len(res.Failovers) == 0 {
				t.Fatal("no failover happened")
			}
			lines := readCommitted(t, out)
			if !slices.Equal(lines, want) {
				t.Fatalf("%d lines, want %d; first differences: %v", len(lines), len(want), firstDiff(lines, want))
			}
		})
	}
}

// TestWindowJoinMatchesReference joins two keyed streams per tumbling window (WindowJoin, and
// WindowCoGroup counting both sides) and compares with the cross products computed directly.
func TestWindowJoinMatchesReference(t *testing.T) {
	const n = 3000
	orderOf := func(sub int, seq uint64) order { id := int64(seq)*2 + int64(sub); return order{ID: id, At: id * 3} }
	paymentOf := func(sub int, seq uint64) payment {
		id := int64(seq)*2 + int64(sub)
		return payment{ID: id, At: id*3 + id%70}
	}
	key := func(id int64) int64 { return id % 7 }
	var want []string
	wantGroups := map[[2]int64][2]int{}
	for i := int64(0); i < n; i++ {
		o := orderOf(int(i%2), uint64(i/2))
		ow := o.At - o.At%100 + 100
		wg := wantGroups[[2]int64{key(o.ID), ow}]
		wg[0]++
		wantGroups[[2]int64{key(o.ID), ow}] = wg
		for j := int64(0); j < n; j++ {
			p := paymentOf(int(j%2), uint64(j/2))
			if key(p.ID) == key(o.ID) && p.At-p.At%100+100 == ow {
				want = append(want, fmt.Sprint(joinPair{key(o.ID), ow, o.ID, p.ID}))
			}
		}
	}
	for j := int64(0); j < n; j++ {
		p := paymentOf(int(j%2), uint64(j/2))
		pw := p.At - p.At%100 + 100
		wg := wantGroups[[2]int64{key(p.ID), pw}]
		wg[1]++
		wantGroups[[2]int64{key(p.ID), pw}] = wg
	}
	slices.Sort(want)
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet), runnel.WithWatermarkInterval(2*time.Millisecond))
	orders := runnel.FromSource(env, connector.Generator(orderOf, connector.GeneratorOptions{TotalRecords: n})).
		Name("orders").WithCodec(codec.MustStruct[order]()).
		WithTimestamps(runnel.MonotonousTimestamps[order]().WithTimestampAssigner(func(o order, _ int64) int64 { return o.At }))
	pays := runnel.FromSource(env, connector.Generator(paymentOf, connector.GeneratorOptions{TotalRecords: n})).
		Name("payments").WithCodec(codec.MustStruct[payment]()).
		WithTimestamps(runnel.BoundedOutOfOrderness[payment](70 * time.Millisecond).WithTimestampAssigner(func(p payment, _ int64) int64 { return p.At }))
	ko := runnel.KeyBy(orders, func(o order) int64 { return key(o.ID) })
	kp := runnel.KeyBy(pays, func(p payment) int64 { return key(p.ID) })
	joined := runnel.WindowJoin(ko, kp, runnel.TumblingEventTimeWindows(100*time.Millisecond),
		func(o order, p payment, out runnel.Collector[joinPair]) error {
			out.Collect(joinPair{key(o.ID), 0, o.ID, p.ID})
			return nil
		}).WithCodec(codec.MustStruct[joinPair]())
	pairs := &timedPairs{}
	joined.SinkTo(pairs).SetParallelism(1)
	groups := connector.NewCollect[[4]int64]()
	runnel.WindowCoGroup(ko, kp, runnel.TumblingEventTimeWindows(100*time.Millisecond),
		func(ctx runnel.WindowContext[int64], os []order, ps []payment, out runnel.Collector[[4]int64]) error {
			out.Collect([4]int64{ctx.CurrentKey(), ctx.Window().End, int64(len(os)), int64(len(ps))})
			return nil
		}).SinkTo(groups).SetParallelism(1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "window join")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v %+v", err, res)
	}
	var got []string
	for _, p := range pairs.got {
		got = append(got, fmt.Sprint(p))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%d pairs, want %d: %v", len(got), len(want), firstDiff(got, want))
	}
	gotGroups := map[[2]int64][2]int{}
	for _, g := range groups.Records() {
		gotGroups[[2]int64{g[0], g[1]}] = [2]int{int(g[2]), int(g[3])}
	}
	if len(gotGroups) != len(wantGroups) {
		t.Fatalf("%d groups, want %d", len(gotGroups), len(wantGroups))
	}
	for k, w := range wantGroups {
		if gotGroups[k] != w {
			t.Fatalf("group %v: %v, want %v", k, gotGroups[k], w)
		}
	}
}

// joinPair is a result of the window join test.
type joinPair struct{ K, End, O, P int64 }

// timedPairs keeps join results with the window end their timestamp says.
type timedPairs struct {
	mu  sync.Mutex
	got []joinPair
}

func (s *timedPairs) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[joinPair], error) {
	return s, nil
}
func (s *timedPairs) Write(joinPair) error { return fmt.Errorf("Write on a timed stream") }
func (s *timedPairs) WriteTimed(p joinPair, ts int64) error {
	p.End = ts + 1
	s.mu.Lock()
	s.got = append(s.got, p)
	s.mu.Unlock()
	return nil
}
func (s *timedPairs) Flush() error { return nil }
func (s *timedPairs) Close() error { return nil }

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

// TestIntervalJoinMatchesReference joins orders with the payments of their key between 10 ms before and
// 40 ms after them, on out-of-order input within its bound, and compares with the pairs computed directly;
// every result carries the later timestamp of its pair.
func TestIntervalJoinMatchesReference(t *testing.T) {
	const n = 2000
	orderOf := func(sub int, seq uint64) order { id := int64(seq)*2 + int64(sub); return order{ID: id, At: id * 3} }
	paymentOf := func(sub int, seq uint64) payment {
		id := int64(seq)*2 + int64(sub)
		return payment{ID: id, At: id*3 + id%70 - 30}
	}
	key := func(id int64) int64 { return id % 11 }
	var want []string
	for i := int64(0); i < n; i++ {
		o := orderOf(int(i%2), uint64(i/2))
		for j := int64(0); j < n; j++ {
			p := paymentOf(int(j%2), uint64(j/2))
			if key(p.ID) == key(o.ID) && p.At >= o.At-10 && p.At <= o.At+40 {
				want = append(want, fmt.Sprint(joinPair{key(o.ID), max(o.At, p.At) + 1, o.ID, p.ID}))
			}
		}
	}
	slices.Sort(want)
	for _, p := range []int{1, 3} {
		t.Run(fmt.Sprintf("p%d", p), func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithTaskManagers(2), runnel.WithLogger(quiet),
				runnel.WithWatermarkInterval(2*time.Millisecond))
			orders := runnel.FromSource(env, connector.Generator(orderOf, connector.GeneratorOptions{TotalRecords: n})).SetParallelism(2).
				Name("orders").WithCodec(codec.MustStruct[order]()).
				WithTimestamps(runnel.MonotonousTimestamps[order]().WithTimestampAssigner(func(o order, _ int64) int64 { return o.At }))
			pays := runnel.FromSource(env, connector.Generator(paymentOf, connector.GeneratorOptions{TotalRecords: n})).SetParallelism(2).
				Name("payments").WithCodec(codec.MustStruct[payment]()).
				WithTimestamps(runnel.BoundedOutOfOrderness[payment](70 * time.Millisecond).WithTimestampAssigner(func(p payment, _ int64) int64 { return p.At }))
			joined := runnel.IntervalJoin(runnel.KeyBy(orders, func(o order) int64 { return key(o.ID) }),
				runnel.KeyBy(pays, func(p payment) int64 { return key(p.ID) }), -10*time.Millisecond, 40*time.Millisecond,
				func(o order, p payment, jc runnel.JoinContext, out runnel.Collector[joinPair]) error {
					if jc.LeftTimestamp() != o.At || jc.RightTimestamp() != p.At {
						return fmt.Errorf("join context %d/%d for %+v %+v", jc.LeftTimestamp(), jc.RightTimestamp(), o, p)
					}
					out.Collect(joinPair{K: key(o.ID), O: o.ID, P: p.ID})
					return nil
				}).WithCodec(codec.MustStruct[joinPair]())
			pairs := &timedPairs{}
			joined.SinkTo(pairs).SetParallelism(1)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "interval join")
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
		})
	}
}

// threshold is a rule of the broadcast test: clicks of User above N are reported.
type threshold struct {
	User string
	N    int64
}

// overThreshold reports the clicks above their user's threshold; clicks that come before their user's rule
// wait in keyed state and are judged when it comes.
type overThreshold struct {
	pending runnel.ListState[click]
}

func (f *overThreshold) Open(ctx runnel.KeyedContext[string]) error {
	var err error
	f.pending, err = runnel.NewListState[click](ctx, "pending")
	return err
}
func (f *overThreshold) Close() error { return nil }

func (f *overThreshold) ProcessElement(ctx runnel.KeyedBroadcastContext[string, string, int64], c click, out runnel.Collector[string]) error {
	limit, ok := ctx.State().Get(c.User)
	if !ok {
		f.pending.Add(c)
		return nil
	}
	if c.N > limit {
		out.Collect(fmt.Sprintf("%s/%d", c.User, c.N))
	}
	return nil
}

func (f *overThreshold) ProcessBroadcastElement(ctx runnel.BroadcastContext[string, string, int64], r threshold, out runnel.Collector[string]) error {
	ctx.State().Put(r.User, r.N)
	return ctx.ForEachKey(func(user string) error {
		if user != r.User {
			return nil
		}
		for _, c := range f.pending.Get() {
			if c.N > r.N {
				out.Collect(fmt.Sprintf("%s/%d", c.User, c.N))
			}
		}
		f.pending.Clear()
		return nil
	})
}

// TestBroadcastStateRescale broadcasts per-user thresholds to a keyed operator that judges clicks by them,
// stops it with a savepoint after the rules were all read and resumes it at another parallelism: every
// subtask has the rules again (they are not read twice), and the report, written exactly once, is the
// direct computation's.
func TestBroadcastStateRescale(t *testing.T) {
	const users, perSubtask = 7, 3000
	rules := make([]threshold, users)
	for u := range rules {
		rules[u] = threshold{User: fmt.Sprintf("u%d", u), N: int64(u * 100)}
	}
	gen := func(sub int, seq uint64) click {
		n := int64(seq*2) + int64(sub)
		return click{User: fmt.Sprintf("u%d", n%users), N: n % 1000, At: n}
	}
	var want []string
	for sub := 0; sub < 2; sub++ {
		for seq := uint64(0); seq < perSubtask; seq++ {
			c := gen(sub, seq)
			if c.N > rules[c.At%users].N {
				want = append(want, fmt.Sprintf("%s/%d", c.User, c.N))
			}
		}
	}
	slices.Sort(want)
	build := func(p int, out, chk string, opts ...runnel.Option) *runnel.Environment {
		env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet),
			runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 50 * time.Millisecond, Storage: chk})}, opts...)...)
		rs := runnel.FromSource(env, connector.Collection(rules)).Name("rules").SetParallelism(1).WithCodec(codec.MustStruct[threshold]())
		clicks := runnel.FromSource(env, connector.Generator(gen, connector.GeneratorOptions{RecordsPerSubtask: perSubtask, RatePerSubtask: 2000})).
			Name("clicks").WithCodec(codec.MustStruct[click]())
		report := runnel.ProcessBroadcast(runnel.ConnectBroadcast(runnel.KeyBy(clicks, func(c click) string { return c.User }), rs),
			func() runnel.KeyedBroadcastProcessFunction[string, click, threshold, string, int64, string] {
				return &overThreshold{}
			}).
			Name("judge").SetParallelism(p)
		// Its own task at every parallelism: state is matched to chains until operators have uids.
		report.Rebalance().SinkTo(connector.FileSink(out, func(s string) string { return s })).Name("files").SetParallelism(1)
		return env
	}
	for _, to := range []int{3, 1} {
		t.Run(fmt.Sprintf("2 to %d", to), func(t *testing.T) {
			dir := t.TempDir()
			sp, out := filepath.Join(dir, "sp"), filepath.Join(dir, "out")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			// The stop comes a quarter of a second in, and the sources emit for a second and a half at
			// their rate: the savepoint falls inside the input also on a loaded machine.
			ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
			defer cancel()
			res, err := build(2, out, filepath.Join(dir, "chk"), runnel.WithSavepointOnStop(sp)).Execute(ctx, "first")
			if err != nil || res.Status != "CANCELED" || res.Savepoint != sp {
				t.Fatalf("first run: %v, %+v", err, res)
			}
			if v := res.Vertex("clicks"); v == nil || v.RecordsOut == 0 || v.RecordsOut >= 2*perSubtask {
				t.Fatalf("the savepoint must fall inside the input: the clicks source emitted %+v", v)
			}
			res, err = build(to, out, filepath.Join(dir, "chk2"), runnel.WithRestoreFrom(sp)).Execute(context.Background(), "rescaled")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("rescaled run: %v, %+v", err, res)
			}
			if v := res.Vertex("rules"); v.RecordsOut != 0 {
				t.Fatalf("the rules source emitted %d records after the restore, want none", v.RecordsOut)
			}
			if got := readCommitted(t, out); !slices.Equal(got, want) {
				t.Fatalf("%d reports, want %d: %v", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

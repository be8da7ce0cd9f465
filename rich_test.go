package runnel_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// lifecycle records what rich functions were told, per operator and subtask.
type lifecycle struct {
	mu     sync.Mutex
	events map[string][]string
}

func (l *lifecycle) note(op string, sub int, what string) {
	l.mu.Lock()
	l.events[fmt.Sprintf("%s[%d]", op, sub)] = append(l.events[fmt.Sprintf("%s[%d]", op, sub)], what)
	l.mu.Unlock()
}

// richMap doubles N; it refuses records before Open.
type richMap struct {
	l       *lifecycle
	sub, p  int
	opened  bool
	n       int
	doubled *runnel.Counter
}

func (m *richMap) Open(ctx runnel.RuntimeContext) error {
	m.sub, m.p, m.opened = ctx.SubtaskIndex(), ctx.Parallelism(), true
	m.doubled = ctx.Metrics().Counter("doubled")
	ctx.Metrics().Gauge("open", func() int64 { return 1 })
	m.l.note(ctx.OperatorName(), m.sub, fmt.Sprintf("open %d/%d", m.sub, m.p))
	return nil
}
func (m *richMap) Map(c click) (click, error) {
	if !m.opened {
		return c, fmt.Errorf("record before Open")
	}
	m.n++
	m.doubled.Inc()
	c.N *= 2
	return c, nil
}
func (m *richMap) Close() error { m.l.note("double", m.sub, "close"); return nil }

type richFilter struct {
	runnel.RichBase
	l   *lifecycle
	sub int
}

func (f *richFilter) Open(ctx runnel.RuntimeContext) error {
	f.sub = ctx.SubtaskIndex()
	f.l.note(ctx.OperatorName(), f.sub, "open")
	return nil
}
func (f *richFilter) Filter(c click) (bool, error) { return c.N%4 == 0, nil }
func (f *richFilter) Close() error                 { f.l.note("even", f.sub, "close"); return nil }

// tagger is a process function on a stream that is not keyed: it checks timestamps, sends clicks of user
// u0 to a side output, and counts what it saw at the end.
type tagger struct {
	runnel.ProcessBase[click]
	tag  runnel.OutputTag[string]
	seen int
}

func (p *tagger) ProcessElement(ctx runnel.ProcessContext, c click, out runnel.Collector[click]) error {
	if ts, ok := ctx.Timestamp(); !ok || ts != c.At {
		return fmt.Errorf("click %+v: timestamp %d %v", c, ts, ok)
	}
	p.seen++
	if c.User == "u0" {
		p.tag.Emit(ctx, c.User)
		return nil
	}
	out.Collect(c)
	return nil
}

func (p *tagger) EndInput(ctx runnel.ProcessContext, out runnel.Collector[click]) error {
	out.Collect(click{User: "total", N: int64(p.seen), At: 0})
	return nil
}

// TestRichFunctionsLifecycle: MapWith, FilterWith and ProcessWith make one function per subtask, open it
// with its runtime context before its first record and close it at the end; a process function on a
// stream that is not keyed sees timestamps and emits to a side output.
func TestRichFunctionsLifecycle(t *testing.T) {
	l := &lifecycle{events: map[string][]string{}}
	clicks := outOfOrderClicks(3000, 10, 5)
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithTaskManagers(2), runnel.WithChaining(false))
	src := runnel.FromSource(env, connector.Collection(clicks)).Name("clicks").WithCodec(codec.MustStruct[click]()).
		WithTimestamps(runnel.BoundedOutOfOrderness[click](10 * time.Millisecond).WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
	doubled := runnel.MapWith(src, func() runnel.MapFunction[click, click] { return &richMap{l: l} }).Name("double")
	even := runnel.FilterWith(doubled, func() runnel.FilterFunction[click] { return &richFilter{l: l} }).Name("even")
	tag := runnel.NewOutputTag[string]("u0")
	tagged := runnel.ProcessWith(even, func() runnel.ProcessFunction[click, click] { return &tagger{tag: tag} }).Name("tagger")
	main := connector.NewCollect[click]()
	tagged.SinkTo(main).SetParallelism(1)
	side := connector.NewCollect[string]()
	runnel.SideOutput(tagged, tag).SinkTo(side).SetParallelism(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "rich")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v %+v", err, res)
	}
	for _, op := range []string{"double", "even"} {
		for sub := 0; sub < 2; sub++ {
			got := l.events[fmt.Sprintf("%s[%d]", op, sub)]
			want := []string{"open", "close"}
			if op == "double" {
				want[0] = fmt.Sprintf("open %d/2", sub)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s[%d]: %v, want %v", op, sub, got, want)
			}
		}
	}
	var counted int64
	for _, s := range res.Vertex("double").Subtasks {
		counted += s.Metrics["double/doubled"]
		if s.Metrics["double/open"] != 1 {
			t.Errorf("double[%d]: gauge %v", s.Index, s.Metrics)
		}
	}
	if counted != int64(len(clicks)) {
		t.Errorf("the counters say %d records were doubled, want %d", counted, len(clicks))
	}
	var wantMain, wantSide, total int
	for _, c := range clicks {
		if (c.N*2)%4 != 0 {
			continue
		}
		total++
		if c.User == "u0" {
			wantSide++
		} else {
			wantMain++
		}
	}
	var gotMain, gotTotal int
	for _, c := range main.Records() {
		if c.User == "total" {
			gotTotal += int(c.N)
		} else {
			gotMain++
		}
	}
	if gotMain != wantMain || gotTotal != total || len(side.Records()) != wantSide {
		t.Fatalf("main %d (want %d), counted %d (want %d), side %d (want %d)", gotMain, wantMain, gotTotal, total, len(side.Records()), wantSide)
	}
}

// merger tags the records of two streams with their side, checking timestamps on a stream with event time.
type merger struct {
	runnel.CoProcessBase[string]
	timed bool
	n     int
}

func (m *merger) ProcessElement1(ctx runnel.ProcessContext, c click, out runnel.Collector[string]) error {
	if ts, ok := ctx.Timestamp(); ok != m.timed || (ok && ts != c.At) {
		return fmt.Errorf("click %+v: timestamp %d %v", c, ts, ok)
	}
	m.n++
	out.Collect("click " + c.User)
	return nil
}

func (m *merger) ProcessElement2(ctx runnel.ProcessContext, o order, out runnel.Collector[string]) error {
	if ts, ok := ctx.Timestamp(); ok != m.timed || (ok && ts != o.At) {
		return fmt.Errorf("order %+v: timestamp %d %v", o, ts, ok)
	}
	m.n++
	out.Collect(fmt.Sprint("order ", o.ID))
	return nil
}

func (m *merger) EndInput(_ runnel.ProcessContext, out runnel.Collector[string]) error {
	out.Collect(fmt.Sprint("seen ", m.n))
	return nil
}

// TestCoProcess connects two streams that are not keyed, with and without event time, over the network:
// every record reaches its side's method once, with its timestamp on a stream with event time.
func TestCoProcess(t *testing.T) {
	clicks := outOfOrderClicks(1000, 5, 9)
	var orders []order
	for i := range 700 {
		orders = append(orders, order{ID: int64(i), At: int64(i) * 7})
	}
	for _, timed := range []bool{false, true} {
		t.Run(fmt.Sprint("timed ", timed), func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithTaskManagers(2))
			cs := runnel.FromSource(env, connector.Collection(clicks)).Name("clicks").WithCodec(codec.MustStruct[click]())
			os := runnel.FromSource(env, connector.Collection(orders)).Name("orders").WithCodec(codec.MustStruct[order]())
			if timed {
				cs = cs.WithTimestamps(runnel.BoundedOutOfOrderness[click](5 * time.Millisecond).WithTimestampAssigner(func(c click, _ int64) int64 { return c.At }))
				os = os.WithTimestamps(runnel.MonotonousTimestamps[order]().WithTimestampAssigner(func(o order, _ int64) int64 { return o.At }))
			}
			merged := runnel.CoProcess(runnel.Connect(cs.Rebalance(), os.Rebalance()),
				func() runnel.CoProcessFunction[click, order, string] { return &merger{timed: timed} })
			sink := connector.NewCollect[string]()
			merged.SinkTo(sink).SetParallelism(1)
			res, err := env.Execute(context.Background(), "coprocess")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v %+v", err, res)
			}
			counts := map[string]int{}
			seen := 0
			for _, s := range sink.Records() {
				var n int
				if _, err := fmt.Sscanf(s, "seen %d", &n); err == nil {
					seen += n
					continue
				}
				counts[s]++
			}
			if seen != len(clicks)+len(orders) || counts["order 699"] != 1 || len(sink.Records()) != seen+2 {
				t.Fatalf("seen %d, %d records (want %d + 2 totals)", seen, len(sink.Records()), len(clicks)+len(orders))
			}
		})
	}
}

// Package clickstream is the keyed clickstream aggregation example: a deterministic generator of click
// events (user, page, timestamp) is keyed by user, and a keyed process function counts each user's clicks
// in total and per page (ValueState and MapState), emitting the user's running totals every N clicks and
// at end of input. A sink of parallelism 1 keeps the latest totals per user for a summary.
//
//	clicks -> keyBy(user) -> aggregate (keyed process) -> totals (sink, parallelism 1)
//
// With --records N the source is bounded; with --records 0, or when the run has a --duration and
// --records is not given, it is unbounded.
package clickstream

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/examples/internal/run"
)

// Click is one click event.
type Click struct {
	User      int64
	Page      int32
	Timestamp int64 // milliseconds
}

// UserTotals are a user's running totals.
type UserTotals struct {
	User      int64
	Clicks    int64
	Pages     int32 // distinct pages clicked
	TopPage   int32 // the most clicked page (the lowest on ties)
	TopClicks int64 // clicks on TopPage
	Final     bool  // emitted at end of input
}

// Job is a configured clickstream run.
type Job struct {
	Records   uint64
	Users     int
	Pages     int
	EmitEvery int64
	Rate      float64
	fs        *pflag.FlagSet
	sink      *run.LatestSink[int64, UserTotals]
}

// New registers the example's flags on fs (nil: none) and returns the job they configure.
func New(fs *pflag.FlagSet) *Job {
	j := &Job{Records: 1_000_000, Users: 10_000, Pages: 50, EmitEvery: 100, fs: fs}
	if fs != nil {
		fs.Uint64Var(&j.Records, "records", j.Records, "clicks to generate in total (0: unbounded, stop with --duration)")
		fs.IntVar(&j.Users, "users", j.Users, "distinct users")
		fs.IntVar(&j.Pages, "pages", j.Pages, "distinct pages")
		fs.Int64Var(&j.EmitEvery, "emit-every", j.EmitEvery, "emit a user's running totals every N of their clicks")
		fs.Float64Var(&j.Rate, "rate", 0, "clicks per second per source subtask (0: as fast as possible)")
	}
	return j
}

// GenerateClick returns click seq of source subtask.
func GenerateClick(users, pages int, subtask int, seq uint64) Click {
	h := run.Mix(uint64(subtask)<<40 ^ seq)
	return Click{
		User:      int64(h % uint64(users)),
		Page:      int32((h >> 32) % uint64(pages)),
		Timestamp: int64(seq)*10 + int64(subtask),
	}
}

// Build adds the clickstream pipeline to env.
func (j *Job) Build(env *runnel.Environment, opts run.Options) error {
	switch {
	case j.Users < 1:
		return fmt.Errorf("--users must be at least 1, got %d", j.Users)
	case j.Pages < 1:
		return fmt.Errorf("--pages must be at least 1, got %d", j.Pages)
	case j.EmitEvery < 1:
		return fmt.Errorf("--emit-every must be at least 1, got %d", j.EmitEvery)
	case j.Rate < 0:
		return fmt.Errorf("--rate must not be negative, got %v", j.Rate)
	}
	records := j.Records
	if opts.Duration > 0 && (j.fs == nil || !j.fs.Changed("records")) {
		records = 0
	}
	users, pages := j.Users, j.Pages
	clicks := runnel.FromSource(env, connector.Generator(func(subtask int, seq uint64) Click {
		return GenerateClick(users, pages, subtask, seq)
	}, connector.GeneratorOptions{TotalRecords: records, RatePerSubtask: j.Rate})).
		Name("clicks").WithCodec(codec.MustStruct[Click]())
	every := j.EmitEvery
	totals := runnel.Process(runnel.KeyBy(clicks, func(c Click) int64 { return c.User }),
		func() runnel.KeyedProcessFunction[int64, Click, UserTotals] { return &aggregate{every: every} }).
		Name("aggregate").WithCodec(codec.MustStruct[UserTotals]())
	j.sink = run.NewLatestSink(func(t UserTotals) int64 { return t.User },
		func(a, b UserTotals) bool { return a.Clicks >= b.Clicks })
	totals.SinkTo(j.sink).Name("totals").SetParallelism(1)
	return nil
}

// Totals returns the latest totals per user seen by the sink (after the job ended: the final ones).
func (j *Job) Totals() map[int64]UserTotals {
	if j.sink == nil {
		return nil
	}
	return j.sink.Latest()
}

// Summary prints the number of users and clicks and the five most active users.
func (j *Job) Summary(w io.Writer, _ *runnel.JobResult) error {
	totals := j.Totals()
	all := make([]UserTotals, 0, len(totals))
	var clicks int64
	for _, t := range totals {
		all = append(all, t)
		clicks += t.Clicks
	}
	slices.SortFunc(all, func(a, b UserTotals) int {
		if c := cmp.Compare(b.Clicks, a.Clicks); c != 0 {
			return c
		}
		return cmp.Compare(a.User, b.User)
	})
	fmt.Fprintf(w, "%d users, %d clicks counted (latest totals seen by the sink); most active:\n", len(all), clicks)
	for _, t := range all[:min(5, len(all))] {
		fmt.Fprintf(w, "  user %6d: %8d clicks on %3d pages, top page %d (%d clicks)\n", t.User, t.Clicks, t.Pages, t.TopPage, t.TopClicks)
	}
	return nil
}

// aggregate counts clicks per user (ValueState) and per user and page (MapState).
type aggregate struct {
	runnel.KeyedProcessBase[int64, UserTotals]
	every  int64
	clicks runnel.ValueState[int64]
	pages  runnel.MapState[int32, int64]
}

func (a *aggregate) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	if a.clicks, err = runnel.NewValueState[int64](ctx, "clicks"); err != nil {
		return err
	}
	a.pages, err = runnel.NewMapState[int32, int64](ctx, "pages")
	return err
}

func (a *aggregate) ProcessElement(ctx runnel.KeyedContext[int64], c Click, out runnel.Collector[UserTotals]) error {
	n, _ := a.clicks.Value()
	n++
	a.clicks.Update(n)
	p, _ := a.pages.Get(c.Page)
	a.pages.Put(c.Page, p+1)
	if n%a.every == 0 {
		out.Collect(a.totals(ctx.CurrentKey(), n, false))
	}
	return nil
}

func (a *aggregate) EndInput(ctx runnel.KeyedContext[int64], out runnel.Collector[UserTotals]) error {
	return ctx.ForEachKey(func(user int64) error {
		n, _ := a.clicks.Value()
		out.Collect(a.totals(user, n, true))
		return nil
	})
}

func (a *aggregate) totals(user, clicks int64, final bool) UserTotals {
	t := UserTotals{User: user, Clicks: clicks, Pages: int32(a.pages.Len()), TopPage: -1, Final: final}
	a.pages.Range(func(page int32, n int64) bool {
		if n > t.TopClicks || (n == t.TopClicks && page < t.TopPage) {
			t.TopPage, t.TopClicks = page, n
		}
		return true
	})
	return t
}

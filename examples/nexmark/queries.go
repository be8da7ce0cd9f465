package nexmark

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// The queries of docs/eventtime.md §10.4, as jobs on the public API. Each maps the events it reads to a
// small type of its own at once (an Event is about 410 bytes; a bid's auction id is 8), so that only what
// the query needs crosses the network and goes into state.

// Queries are the query names `runnel run nexmark --query` takes, in order.
var Queries = []string{"q0", "q1", "q2", "q5", "q7"}

// The windows of the queries (the Nexmark suite's Flink SQL): q5 hops 10 s every 2 s, q7 and q8 tumble
// every 10 s; all are aligned to the epoch.
const (
	WindowSize = 10 * time.Second
	HopSlide   = 2 * time.Second
)

// DefaultOutOfOrderness is the watermark bound of the Nexmark project's Flink DDL.
const DefaultOutOfOrderness = 4 * time.Second

// Result is a query's result stream, ready for one of the sinks below.
type Result struct {
	toFile  func(dir string) *runnel.SinkOperator
	toCount func(c *Counter) *runnel.SinkOperator
}

// ToFile adds a connector.FileSink at parallelism 1 that writes the results as JSON lines (the issue's
// fields, in its order) into part files in dir: exactly once when the job takes checkpoints.
func (r Result) ToFile(dir string) *runnel.SinkOperator { return r.toFile(dir) }

// ToCounter adds a sink at the result's parallelism that counts the results into c and formats nothing
// (the benchmark's discarding sink).
func (r Result) ToCounter(c *Counter) *runnel.SinkOperator { return r.toCount(c) }

func newResult[T any](s *runnel.Stream[T], format func(dst []byte, v *T) []byte) Result {
	return Result{
		toFile: func(dir string) *runnel.SinkOperator {
			var buf []byte // the one sink subtask's scratch line (FileSink calls format from its task only)
			return s.SinkTo(connector.FileSink(dir, func(v T) string {
				buf = format(buf[:0], &v)
				return string(buf)
			})).Name("sink").SetParallelism(1)
		},
		toCount: func(c *Counter) *runnel.SinkOperator {
			return s.SinkTo(&countSink[T]{c: c}).Name("sink")
		},
	}
}

// Events returns the Nexmark events of src with event time: timestamps from dateTime and watermarks
// bounded out of order by bound. parallelism 0 keeps the environment's (a file is read by one subtask: 1).
func Events(env *runnel.Environment, src runnel.Source[Event], parallelism int, bound time.Duration) *runnel.Stream[Event] {
	s := runnel.FromSource(env, src).Name("events").WithCodec(EventCodec())
	if parallelism > 0 {
		s = s.SetParallelism(parallelism)
	}
	return s.WithTimestamps(runnel.BoundedOutOfOrderness[Event](bound).
		WithTimestampAssigner(func(e Event, _ int64) int64 { return e.DateTime() }))
}

// Build adds query q on events (which have event time, see Events) to their environment and returns its
// result stream.
func Build(q string, events *runnel.Stream[Event]) (Result, error) {
	switch q {
	case "q0":
		return q0(events), nil
	case "q1":
		return q1(events), nil
	case "q2":
		return q2(events), nil
	case "q5":
		return q5(events), nil
	case "q7":
		return q7(events), nil
	}
	return Result{}, fmt.Errorf("unknown query %q: use one of %s", q, strings.Join(Queries, ", "))
}

// bids maps the events to f of their bids (the other kinds are dropped).
func bids[T any](events *runnel.Stream[Event], f func(b *Bid) (T, bool)) *runnel.Stream[T] {
	return runnel.FlatMap(events, func(e Event, out runnel.Collector[T]) error {
		if e.Kind == KindBid {
			if v, ok := f(&e.Bid); ok {
				out.Collect(v)
			}
		}
		return nil
	}).Name("bids")
}

// q0 passes every bid through: {auction, bidder, price, channel, url, dateTime, extra}.
func q0(events *runnel.Stream[Event]) Result {
	s := bids(events, func(b *Bid) (Bid, bool) { return *b, true }).WithCodec(codec.MustStruct[Bid]())
	return newResult(s, func(dst []byte, b *Bid) []byte {
		o := BeginObject(dst)
		o.Int("auction", b.Auction)
		o.Int("bidder", b.Bidder)
		o.Int("price", b.Price)
		o.String("channel", b.Channel)
		o.String("url", b.URL)
		o.Int("dateTime", b.DateTime)
		o.String("extra", b.Extra)
		return o.End()
	})
}

// euroBid is q1's row; Milli is the price in thousandths of a euro (price·908: 0.908 × price exactly).
type euroBid struct{ Auction, Bidder, Milli, DateTime int64 }

// q1 converts every bid's price to euros: {auction, bidder, price: 0.908 × price, dateTime}.
func q1(events *runnel.Stream[Event]) Result {
	s := bids(events, func(b *Bid) (euroBid, bool) {
		return euroBid{Auction: b.Auction, Bidder: b.Bidder, Milli: b.Price * 908, DateTime: b.DateTime}, true
	}).WithCodec(codec.MustStruct[euroBid]())
	return newResult(s, func(dst []byte, b *euroBid) []byte {
		o := BeginObject(dst)
		o.Int("auction", b.Auction)
		o.Int("bidder", b.Bidder)
		o.Decimal3("price", b.Milli)
		o.Int("dateTime", b.DateTime)
		return o.End()
	})
}

// auctionPrice is q2's row.
type auctionPrice struct{ Auction, Price int64 }

// q2 selects the bids on every 123rd auction: {auction, price}.
func q2(events *runnel.Stream[Event]) Result {
	s := bids(events, func(b *Bid) (auctionPrice, bool) {
		return auctionPrice{Auction: b.Auction, Price: b.Price}, b.Auction%123 == 0
	}).WithCodec(codec.MustStruct[auctionPrice]())
	return newResult(s, func(dst []byte, r *auctionPrice) []byte {
		o := BeginObject(dst)
		o.Int("auction", r.Auction)
		o.Int("price", r.Price)
		return o.End()
	})
}

// auctionCount is q5's row: an auction's bids in the window [Start, End).
type auctionCount struct{ Auction, Num, Start, End int64 }

// count is the aggregate of q5's first stage: the bids of an auction in a window.
type count struct{}

func (count) CreateAccumulator() int64     { return 0 }
func (count) Add(_ int64, acc int64) int64 { return acc + 1 }
func (count) Result(acc int64) int64       { return acc }
func (count) Merge(a, b int64) int64       { return a + b }

// withWindow is q5's process-window function: the count with its auction and window.
type withWindow struct {
	runnel.ProcessWindowBase[int64]
}

func (withWindow) Process(ctx runnel.WindowContext[int64], counts []int64, out runnel.Collector[auctionCount]) error {
	w := ctx.Window()
	for _, n := range counts {
		out.Collect(auctionCount{Auction: ctx.CurrentKey(), Num: n, Start: w.Start, End: w.End})
	}
	return nil
}

// q5 finds the hot items: per hopping window (10 s every 2 s) the auctions with the most bids, ties all
// emitted: {auction, num, window_start, window_end}. Two stages, so that both run in parallel: a count
// per auction and window, then, keyed by window, the highest counts, emitted when the watermark passes
// the window (every count of it has arrived by then: each upstream subtask fired it first).
func q5(events *runnel.Stream[Event]) Result {
	ids := bids(events, func(b *Bid) (int64, bool) { return b.Auction, true })
	counts := runnel.WindowAggregateProcess(
		runnel.Window(runnel.KeyBy(ids, func(a int64) int64 { return a }), runnel.SlidingEventTimeWindows(WindowSize, HopSlide)),
		runnel.AggregateFunction[int64, int64, int64](count{}),
		func() runnel.ProcessWindowFunction[int64, int64, auctionCount] { return withWindow{} }).
		Name("count").WithCodec(codec.MustStruct[auctionCount]())
	hot := runnel.Process(runnel.KeyBy(counts, func(c auctionCount) int64 { return c.Start }),
		func() runnel.KeyedProcessFunction[int64, auctionCount, auctionCount] { return &hottest{} }).
		Name("hottest").WithCodec(codec.MustStruct[auctionCount]())
	return newResult(hot, func(dst []byte, c *auctionCount) []byte {
		o := BeginObject(dst)
		o.Int("auction", c.Auction)
		o.Int("num", c.Num)
		o.Int("window_start", c.Start)
		o.Int("window_end", c.End)
		return o.End()
	})
}

// hottest keeps, per window (its key is the window's start), the highest count and the auctions that
// have it; a timer at the window's last millisecond emits them and frees the key. State per window: one
// count and the tied auctions (at most every auction of the window, when all tie).
type hottest struct {
	runnel.KeyedProcessBase[int64, auctionCount]
	max      runnel.ValueState[auctionCount] // the highest count so far (Auction unused) and the window
	auctions runnel.ListState[int64]         // the auctions with that count
}

func (h *hottest) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	if h.max, err = runnel.NewValueState[auctionCount](ctx, "max"); err != nil {
		return err
	}
	h.auctions, err = runnel.NewListState[int64](ctx, "auctions")
	return err
}

func (h *hottest) ProcessElement(ctx runnel.KeyedContext[int64], c auctionCount, _ runnel.Collector[auctionCount]) error {
	m, ok := h.max.Value()
	switch {
	case !ok:
		ctx.TimerService().RegisterEventTimeTimer(c.End - 1)
		fallthrough
	case c.Num > m.Num:
		h.max.Update(c)
		h.auctions.Update([]int64{c.Auction})
	case c.Num == m.Num:
		h.auctions.Add(c.Auction)
	}
	return nil
}

func (h *hottest) OnTimer(_ runnel.TimerContext[int64], _ int64, out runnel.Collector[auctionCount]) error {
	m, ok := h.max.Value()
	if !ok {
		return nil
	}
	for _, a := range h.auctions.Get() {
		out.Collect(auctionCount{Auction: a, Num: m.Num, Start: m.Start, End: m.End})
	}
	h.max.Clear()
	h.auctions.Clear()
	return nil
}

// priceBid is q7's row: a bid at the highest price of the window ending at End.
type priceBid struct{ Auction, Price, Bidder, DateTime, End int64 }

// highest is q7's accumulator: the highest price and every bid at it.
type highest struct {
	Price int64
	Bids  []priceBid // End unset
}

// highestBids is the aggregate of q7's first stage.
type highestBids struct{}

func (highestBids) CreateAccumulator() highest { return highest{} }
func (highestBids) Add(b priceBid, acc highest) highest {
	switch {
	case len(acc.Bids) == 0 || b.Price > acc.Price:
		return highest{Price: b.Price, Bids: []priceBid{b}}
	case b.Price == acc.Price:
		acc.Bids = append(acc.Bids, b)
	}
	return acc
}
func (highestBids) Result(acc highest) highest { return acc }
func (h highestBids) Merge(a, b highest) highest {
	for _, x := range b.Bids {
		a = h.Add(x, a)
	}
	return a
}

// atWindowEnd is q7's process-window function: each bid of the auction's highest with the window's end.
type atWindowEnd struct {
	runnel.ProcessWindowBase[int64]
}

func (atWindowEnd) Process(ctx runnel.WindowContext[int64], hs []highest, out runnel.Collector[priceBid]) error {
	end := ctx.Window().End
	for _, h := range hs {
		for _, b := range h.Bids {
			b.End = end
			out.Collect(b)
		}
	}
	return nil
}

// q7 finds the highest bid: per tumbling window of 10 s every bid at the window's highest price:
// {auction, price, bidder, dateTime, window_end}. Two stages, as q5: the highest bids per auction and
// window, then, keyed by window, the overall highest.
func q7(events *runnel.Stream[Event]) Result {
	bs := bids(events, func(b *Bid) (priceBid, bool) {
		return priceBid{Auction: b.Auction, Price: b.Price, Bidder: b.Bidder, DateTime: b.DateTime}, true
	}).WithCodec(codec.MustStruct[priceBid]())
	perAuction := runnel.WindowAggregateProcess(
		runnel.Window(runnel.KeyBy(bs, func(b priceBid) int64 { return b.Auction }), runnel.TumblingEventTimeWindows(WindowSize)),
		runnel.AggregateFunction[priceBid, highest, highest](highestBids{}),
		func() runnel.ProcessWindowFunction[int64, highest, priceBid] { return atWindowEnd{} }).
		Name("highest-per-auction").WithCodec(codec.MustStruct[priceBid]())
	top := runnel.Process(runnel.KeyBy(perAuction, func(b priceBid) int64 { return b.End }),
		func() runnel.KeyedProcessFunction[int64, priceBid, priceBid] { return &highestOfWindow{} }).
		Name("highest").WithCodec(codec.MustStruct[priceBid]())
	return newResult(top, func(dst []byte, b *priceBid) []byte {
		o := BeginObject(dst)
		o.Int("auction", b.Auction)
		o.Int("price", b.Price)
		o.Int("bidder", b.Bidder)
		o.Int("dateTime", b.DateTime)
		o.Int("window_end", b.End)
		return o.End()
	})
}

// highestOfWindow keeps, per window (its key is the window's end), the bids at the highest price so far;
// a timer at the window's last millisecond emits them and frees the key. State per window: the tied bids.
type highestOfWindow struct {
	runnel.KeyedProcessBase[int64, priceBid]
	bids runnel.ListState[priceBid]
}

func (h *highestOfWindow) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	h.bids, err = runnel.NewListState[priceBid](ctx, "bids")
	return err
}

func (h *highestOfWindow) ProcessElement(ctx runnel.KeyedContext[int64], b priceBid, _ runnel.Collector[priceBid]) error {
	cur := h.bids.Get()
	switch {
	case len(cur) == 0:
		ctx.TimerService().RegisterEventTimeTimer(b.End - 1)
		fallthrough
	case b.Price > cur[0].Price:
		h.bids.Update([]priceBid{b})
	case b.Price == cur[0].Price:
		h.bids.Add(b)
	}
	return nil
}

func (h *highestOfWindow) OnTimer(_ runnel.TimerContext[int64], _ int64, out runnel.Collector[priceBid]) error {
	for _, b := range h.bids.Get() {
		out.Collect(b)
	}
	h.bids.Clear()
	return nil
}

// Counter counts the records of a ToCounter sink and when the last one came; safe for concurrent use.
type Counter struct {
	n    atomic.Int64
	last atomic.Int64 // UnixNano of the latest record written
}

// Count returns the records counted.
func (c *Counter) Count() int64 { return c.n.Load() }

// Last returns when the latest record was counted (the zero time before the first).
func (c *Counter) Last() time.Time {
	if ns := c.last.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (c *Counter) add(n int) {
	c.n.Add(int64(n))
	now := time.Now().UnixNano()
	for {
		old := c.last.Load()
		if now <= old || c.last.CompareAndSwap(old, now) {
			return
		}
	}
}

// countSink is the discarding sink of the benchmark: it counts, per batch.
type countSink[T any] struct{ c *Counter }

func (s *countSink[T]) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[T], error) {
	return s, nil
}
func (s *countSink[T]) Write(T) error { s.c.add(1); return nil }

// WriteBatch implements runnel.BatchWriter: one clock read per batch.
func (s *countSink[T]) WriteBatch(vs []T) error { s.c.add(len(vs)); return nil }
func (s *countSink[T]) Flush() error            { return nil }
func (s *countSink[T]) Close() error            { return nil }

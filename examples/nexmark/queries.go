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
var Queries = []string{"q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "q11", "q12", "q13", "q14", "q15", "q16", "q17", "q18", "q19", "q20", "q21", "q22"}

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
			// A line of its own per record: the output is not the benchmark's path, and a buffer shared by
			// the closure would be shared by a failed attempt of the sink and its restart too.
			return s.SinkTo(connector.FileSink(dir, func(v T) string {
				return string(format(make([]byte, 0, 128), &v))
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
	case "q3":
		return q3(events), nil
	case "q4":
		return q4(events), nil
	case "q5":
		return q5(events), nil
	case "q7":
		return q7(events), nil
	case "q8":
		return q8(events), nil
	case "q6":
		return q6(events), nil
	case "q9":
		return q9(events), nil
	case "q11":
		return q11(events), nil
	case "q12":
		return q12(events), nil
	case "q13":
		return q13(events, nil), nil
	case "q14":
		return q14(events), nil
	case "q15":
		return q15(events), nil
	case "q16":
		return q16(events), nil
	case "q17":
		return q17(events), nil
	case "q18":
		return q18(events), nil
	case "q19":
		return q19(events), nil
	case "q20":
		return q20(events), nil
	case "q21":
		return q21(events), nil
	case "q22":
		return q22(events), nil
	}
	return Result{}, fmt.Errorf("unknown query %q: use one of %s", q, strings.Join(Queries, ", "))
}

// bids maps the events to f of their bids (the other kinds are dropped).
func bids[T any](events *runnel.Stream[Event], f func(b Bid) (T, bool)) *runnel.Stream[T] {
	return runnel.FlatMap(events, func(e Event, out runnel.Collector[T]) error {
		if e.Kind == KindBid {
			if v, ok := f(e.Bid); ok {
				out.Collect(v)
			}
		}
		return nil
	}).Name("bids")
}

// people maps the events to f of their persons.
func people[T any](events *runnel.Stream[Event], f func(p Person) (T, bool)) *runnel.Stream[T] {
	return runnel.FlatMap(events, func(e Event, out runnel.Collector[T]) error {
		if e.Kind == KindPerson {
			if v, ok := f(e.Person); ok {
				out.Collect(v)
			}
		}
		return nil
	}).Name("people")
}

// auctions maps the events to f of their auctions.
func auctions[T any](events *runnel.Stream[Event], f func(a Auction) (T, bool)) *runnel.Stream[T] {
	return runnel.FlatMap(events, func(e Event, out runnel.Collector[T]) error {
		if e.Kind == KindAuction {
			if v, ok := f(e.Auction); ok {
				out.Collect(v)
			}
		}
		return nil
	}).Name("auctions")
}

// q0 passes every bid through: {auction, bidder, price, channel, url, dateTime, extra}.
func q0(events *runnel.Stream[Event]) Result {
	s := bids(events, func(b Bid) (Bid, bool) { return b, true }).WithCodec(codec.MustStruct[Bid]())
	return newResult(s, appendBid)
}

// euroBid is q1's row; Milli is the price in thousandths of a euro (price·908: 0.908 × price exactly).
type euroBid struct{ Auction, Bidder, Milli, DateTime int64 }

// q1 converts every bid's price to euros: {auction, bidder, price: 0.908 × price, dateTime}.
func q1(events *runnel.Stream[Event]) Result {
	s := bids(events, func(b Bid) (euroBid, bool) {
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
	s := bids(events, func(b Bid) (auctionPrice, bool) {
		return auctionPrice{Auction: b.Auction, Price: b.Price}, b.Auction%123 == 0
	}).WithCodec(codec.MustStruct[auctionPrice]())
	return newResult(s, func(dst []byte, r *auctionPrice) []byte {
		o := BeginObject(dst)
		o.Int("auction", r.Auction)
		o.Int("price", r.Price)
		return o.End()
	})
}

// seller is q3's person side: a person, and whether they live in one of the states q3 selects (the
// strings are kept only then).
type seller struct {
	ID                int64
	Name, City, State string
	Match             bool
}

// item is q3's auction side: an auction of category 10 and its seller.
type item struct{ ID, Seller int64 }

// localItem is q3's row: an auction of category 10 with its seller in OR, ID or CA.
type localItem struct {
	Name, City, State string
	Auction           int64
}

// q3 finds local item suggestions: every auction of category 10 joined with its seller, when the seller
// lives in OR, ID or CA: {name, city, state, id}. A regular join: either side may come first.
func q3(events *runnel.Stream[Event]) Result {
	sellers := people(events, func(p Person) (seller, bool) {
		if p.State == "OR" || p.State == "ID" || p.State == "CA" {
			return seller{ID: p.ID, Name: p.Name, City: p.City, State: p.State, Match: true}, true
		}
		return seller{ID: p.ID}, true
	}).WithCodec(codec.MustStruct[seller]())
	items := auctions(events, func(a Auction) (item, bool) {
		return item{ID: a.ID, Seller: a.Seller}, a.Category == 10
	}).WithCodec(codec.MustStruct[item]())
	joined := runnel.KeyedCoProcess(runnel.ConnectKeyed(
		runnel.KeyBy(sellers, func(p seller) int64 { return p.ID }),
		runnel.KeyBy(items, func(a item) int64 { return a.Seller })),
		func() runnel.KeyedCoProcessFunction[int64, seller, item, localItem] { return &localItems{} }).
		Name("join").WithCodec(codec.MustStruct[localItem]())
	return newResult(joined, func(dst []byte, r *localItem) []byte {
		o := BeginObject(dst)
		o.String("name", r.Name)
		o.String("city", r.City)
		o.String("state", r.State)
		o.Int("id", r.Auction)
		return o.End()
	})
}

// localItems is q3's join, keyed by person id: the person (once they came) and the auctions that came
// before them. A person outside the selected states is kept as a bare marker, so that their auctions are
// dropped at once rather than kept waiting. State per person: the marker or their three strings, plus the
// auction ids that wait for a person not yet seen (the generator makes auctions of sellers up to 10 people
// ahead, so a few per seller). As for the SQL regular join, the people stay: the state grows with them.
type localItems struct {
	runnel.KeyedCoProcessBase[int64, localItem]
	person  runnel.ValueState[seller]
	waiting runnel.ListState[int64]
}

func (j *localItems) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	if j.person, err = runnel.NewValueState[seller](ctx, "person"); err != nil {
		return err
	}
	j.waiting, err = runnel.NewListState[int64](ctx, "waiting")
	return err
}

func (j *localItems) ProcessElement1(_ runnel.KeyedContext[int64], p seller, out runnel.Collector[localItem]) error {
	j.person.Update(p)
	if p.Match {
		for _, a := range j.waiting.Get() {
			out.Collect(localItem{Name: p.Name, City: p.City, State: p.State, Auction: a})
		}
	}
	j.waiting.Clear()
	return nil
}

func (j *localItems) ProcessElement2(_ runnel.KeyedContext[int64], a item, out runnel.Collector[localItem]) error {
	p, ok := j.person.Value()
	switch {
	case !ok:
		j.waiting.Add(a.ID)
	case p.Match:
		out.Collect(localItem{Name: p.Name, City: p.City, State: p.State, Auction: a.ID})
	}
	return nil
}

// openAuction is q4's auction side, and its state while it runs: the highest valid bid so far.
type openAuction struct {
	DateTime, Expires, Category int64
	Max                         int64
	HasBid                      bool
}

// timedPrice is a bid as q4 keeps it.
type timedPrice struct{ Price, DateTime int64 }

// keyedAuction and keyedBid are q4's two sides: an auction or a bid with the auction id they are keyed by.
type (
	keyedAuction struct {
		ID int64
		A  openAuction
	}
	keyedBid struct {
		Auction int64
		B       timedPrice
	}
)

// closedAuction is what q4's first stage emits when an auction closes with a valid bid.
type closedAuction struct{ Category, Price int64 }

// categoryAvg is q4's row.
type categoryAvg struct{ Category, Avg int64 }

// q4 computes the average closing price per category: an auction's closing price is its highest bid
// with dateTime in [the auction's dateTime, expires]; after each auction that closes with a valid bid,
// its category's average (integer division, as Flink SQL's AVG of a BIGINT): {category, avg}. An update
// stream: the category's last line is its average over every closed auction.
func q4(events *runnel.Stream[Event]) Result {
	ids := auctions(events, func(a Auction) (keyedAuction, bool) {
		return keyedAuction{ID: a.ID, A: openAuction{DateTime: a.DateTime, Expires: a.Expires, Category: a.Category}}, true
	}).WithCodec(codec.MustStruct[keyedAuction]())
	bs := bids(events, func(b Bid) (keyedBid, bool) {
		return keyedBid{Auction: b.Auction, B: timedPrice{Price: b.Price, DateTime: b.DateTime}}, true
	}).WithCodec(codec.MustStruct[keyedBid]())
	closed := runnel.KeyedCoProcess(runnel.ConnectKeyed(
		runnel.KeyBy(ids, func(a keyedAuction) int64 { return a.ID }),
		runnel.KeyBy(bs, func(b keyedBid) int64 { return b.Auction })),
		func() runnel.KeyedCoProcessFunction[int64, keyedAuction, keyedBid, closedAuction] {
			return &closingPrice{}
		}).
		Name("closing-price").WithCodec(codec.MustStruct[closedAuction]())
	avgs := runnel.Process(runnel.KeyBy(closed, func(c closedAuction) int64 { return c.Category }),
		func() runnel.KeyedProcessFunction[int64, closedAuction, categoryAvg] { return &average{} }).
		Name("average").WithCodec(codec.MustStruct[categoryAvg]())
	return newResult(avgs, func(dst []byte, r *categoryAvg) []byte {
		o := BeginObject(dst)
		o.Int("category", r.Category)
		o.Int("avg", r.Avg)
		return o.End()
	})
}

// closingPrice is q4's join, keyed by auction id. The auction, once it came, holds its highest valid bid;
// an event timer at its expiry emits the closing price (nothing for an auction without a valid bid, as
// the inner join) and frees the key. A bid that comes before its auction waits, with an event timer at
// its own dateTime: an auction it could count for has a dateTime at or before it, so once the watermark
// passes it (no late data) no such auction can come and the bid is dropped. State per auction: one
// openAuction, or the bids waiting for it (the generator bids on auctions up to 10 ahead; they wait
// about the watermark's bound).
type closingPrice struct {
	runnel.KeyedCoProcessBase[int64, closedAuction]
	open    runnel.ValueState[openAuction]
	waiting runnel.ListState[timedPrice]
}

func (c *closingPrice) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	if c.open, err = runnel.NewValueState[openAuction](ctx, "auction"); err != nil {
		return err
	}
	c.waiting, err = runnel.NewListState[timedPrice](ctx, "waiting")
	return err
}

// raise counts bid b for auction a if its time is within the auction's.
func raise(a *openAuction, b timedPrice) {
	if b.DateTime >= a.DateTime && b.DateTime <= a.Expires && (!a.HasBid || b.Price > a.Max) {
		a.Max, a.HasBid = b.Price, true
	}
}

func (c *closingPrice) ProcessElement1(ctx runnel.KeyedContext[int64], v keyedAuction, _ runnel.Collector[closedAuction]) error {
	a := v.A
	for _, b := range c.waiting.Get() {
		raise(&a, b)
	}
	c.waiting.Clear()
	c.open.Update(a)
	ctx.TimerService().RegisterEventTimeTimer(a.Expires)
	return nil
}

func (c *closingPrice) ProcessElement2(ctx runnel.KeyedContext[int64], v keyedBid, _ runnel.Collector[closedAuction]) error {
	b := v.B
	if a, ok := c.open.Value(); ok {
		raise(&a, b)
		c.open.Update(a)
		return nil
	}
	c.waiting.Add(b)
	ctx.TimerService().RegisterEventTimeTimer(b.DateTime)
	return nil
}

func (c *closingPrice) OnTimer(_ runnel.TimerContext[int64], ts int64, out runnel.Collector[closedAuction]) error {
	if a, ok := c.open.Value(); ok {
		if ts >= a.Expires {
			if a.HasBid {
				out.Collect(closedAuction{Category: a.Category, Price: a.Max})
			}
			c.open.Clear()
		}
		return nil
	}
	// No auction yet: the bids up to ts can no longer find one.
	w := c.waiting.Get()
	keep := w[:0:0]
	for _, b := range w {
		if b.DateTime > ts {
			keep = append(keep, b)
		}
	}
	if len(keep) == 0 {
		c.waiting.Clear()
	} else if len(keep) < len(w) {
		c.waiting.Update(keep)
	}
	return nil
}

// average is q4's second stage, keyed by category: the running sum and count of closing prices.
type average struct {
	runnel.KeyedProcessBase[int64, categoryAvg]
	sum runnel.ValueState[[2]int64]
}

func (a *average) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	a.sum, err = runnel.NewValueState[[2]int64](ctx, "sum-count")
	return err
}

func (a *average) ProcessElement(ctx runnel.KeyedContext[int64], c closedAuction, out runnel.Collector[categoryAvg]) error {
	s, _ := a.sum.Value()
	s[0] += c.Price
	s[1]++
	a.sum.Update(s)
	out.Collect(categoryAvg{Category: ctx.CurrentKey(), Avg: s[0] / s[1]})
	return nil
}

// newUser is q8's person side and row (with the window's start).
type newUser struct {
	ID    int64
	Name  string
	Start int64
}

// q8 monitors new users: every person who opened an auction as seller in the tumbling window of 10 s in
// which the person was created: {id, name, window_start}.
func q8(events *runnel.Stream[Event]) Result {
	ps := people(events, func(p Person) (newUser, bool) { return newUser{ID: p.ID, Name: p.Name}, true }).
		WithCodec(codec.MustStruct[newUser]())
	sellers := auctions(events, func(a Auction) (int64, bool) { return a.Seller, true })
	users := runnel.WindowCoGroup(
		runnel.KeyBy(ps, func(p newUser) int64 { return p.ID }),
		runnel.KeyBy(sellers, func(s int64) int64 { return s }),
		runnel.TumblingEventTimeWindows(WindowSize),
		func(ctx runnel.WindowContext[int64], ps []newUser, sold []int64, out runnel.Collector[newUser]) error {
			if len(sold) == 0 {
				return nil
			}
			for _, p := range ps {
				p.Start = ctx.Window().Start
				out.Collect(p)
			}
			return nil
		}).Name("new-users").WithCodec(codec.MustStruct[newUser]())
	return newResult(users, func(dst []byte, u *newUser) []byte {
		o := BeginObject(dst)
		o.Int("id", u.ID)
		o.String("name", u.Name)
		o.Int("window_start", u.Start)
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
	ids := bids(events, func(b Bid) (int64, bool) { return b.Auction, true })
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
	bs := bids(events, func(b Bid) (priceBid, bool) {
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

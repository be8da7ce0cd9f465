package nexmark

import (
	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// q6 and q9 share Nexmark's "winning bids" core (q4's too): an auction's winning bid is its highest bid
// with dateTime in [the auction's dateTime, expires], the earliest of equal highest bids; an auction
// without such a bid has none and yields nothing (the SQL's inner join).

// lifetime is an auction's id and lifetime with what a query keeps of it (A).
type lifetime[A any] struct {
	ID, DateTime, Expires int64
	A                     A
}

// offer is a bid's auction, price and time with what a query keeps of it (B).
type offer[B any] struct {
	Auction, Price, DateTime int64
	B                        B
}

// running is an auction while it is open: its lifetime and its best valid bid so far.
type running[A, B any] struct {
	L      lifetime[A]
	Best   offer[B]
	HasBid bool
}

// raise makes o the auction's best bid if it is valid for it and beats the best so far: a higher price,
// or the same price earlier (ties on price and time keep the first that came: the generator never makes
// two events with one dateTime at a fixed rate).
func (r *running[A, B]) raise(o offer[B]) {
	if o.DateTime < r.L.DateTime || o.DateTime > r.L.Expires {
		return
	}
	if !r.HasBid || o.Price > r.Best.Price || (o.Price == r.Best.Price && o.DateTime < r.Best.DateTime) {
		r.Best, r.HasBid = o, true
	}
}

// winningBids is the winning-bid join, keyed by auction id: the auction (once it came) with its best
// valid bid; an event timer at its expiry emits result(auction, bid), when it has one, and frees the key.
// A bid that comes before its auction waits, with an event timer at its own dateTime: an auction it could
// be valid for has a dateTime at or before it, so once the watermark passes it (no late data) no such
// auction can come and the bid is dropped. A bid after its auction's expiry waits the same way and goes.
// State per auction: one running value from the auction's arrival to its expiry, or the bids waiting for
// it (the generator bids on auctions up to 10 ids ahead; they wait about the watermark's bound). So the
// state is bounded by the auctions open at once plus the bids of a watermark's bound.
type winningBids[A, B, Out any] struct {
	runnel.KeyedCoProcessBase[int64, Out]
	result  func(l *lifetime[A], b *offer[B]) Out
	open    runnel.ValueState[running[A, B]]
	waiting runnel.ListState[offer[B]]
}

func (w *winningBids[A, B, Out]) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	if w.open, err = runnel.NewValueState(ctx, "auction", codec.MustStruct[running[A, B]]()); err != nil {
		return err
	}
	w.waiting, err = runnel.NewListState(ctx, "waiting", codec.MustStruct[offer[B]]())
	return err
}

func (w *winningBids[A, B, Out]) ProcessElement1(ctx runnel.KeyedContext[int64], l lifetime[A], _ runnel.Collector[Out]) error {
	r := running[A, B]{L: l}
	for _, o := range w.waiting.Get() {
		r.raise(o)
	}
	w.waiting.Clear()
	w.open.Update(r)
	ctx.TimerService().RegisterEventTimeTimer(l.Expires)
	return nil
}

func (w *winningBids[A, B, Out]) ProcessElement2(ctx runnel.KeyedContext[int64], o offer[B], _ runnel.Collector[Out]) error {
	if r, ok := w.open.Value(); ok {
		if o.DateTime >= r.L.DateTime && o.DateTime <= r.L.Expires {
			r.raise(o)
			w.open.Update(r)
		}
		return nil
	}
	w.waiting.Add(o)
	ctx.TimerService().RegisterEventTimeTimer(o.DateTime)
	return nil
}

func (w *winningBids[A, B, Out]) OnTimer(_ runnel.TimerContext[int64], ts int64, out runnel.Collector[Out]) error {
	if r, ok := w.open.Value(); ok {
		if ts >= r.L.Expires {
			if r.HasBid {
				out.Collect(w.result(&r.L, &r.Best))
			}
			w.open.Clear()
		}
		return nil
	}
	// No auction yet (or no more): the bids up to ts can no longer find one.
	ws := w.waiting.Get()
	keep := ws[:0:0]
	for _, o := range ws {
		if o.DateTime > ts {
			keep = append(keep, o)
		}
	}
	if len(keep) == 0 {
		w.waiting.Clear()
	} else if len(keep) < len(ws) {
		w.waiting.Update(keep)
	}
	return nil
}

// winning keys the auctions and bids of events by auction id and joins them with winningBids: one Out per
// auction with a winning bid, when the watermark passes its expiry.
func winning[A, B, Out any](events *runnel.Stream[Event], name string,
	fromAuction func(a *Auction) A, fromBid func(b *Bid) B, result func(l *lifetime[A], b *offer[B]) Out) *runnel.Stream[Out] {
	as := auctions(events, func(a Auction) (lifetime[A], bool) {
		return lifetime[A]{ID: a.ID, DateTime: a.DateTime, Expires: a.Expires, A: fromAuction(&a)}, true
	}).WithCodec(codec.MustStruct[lifetime[A]]())
	bs := bids(events, func(b Bid) (offer[B], bool) {
		return offer[B]{Auction: b.Auction, Price: b.Price, DateTime: b.DateTime, B: fromBid(&b)}, true
	}).WithCodec(codec.MustStruct[offer[B]]())
	return runnel.KeyedCoProcess(runnel.ConnectKeyed(
		runnel.KeyBy(as, func(l lifetime[A]) int64 { return l.ID }),
		runnel.KeyBy(bs, func(o offer[B]) int64 { return o.Auction })),
		func() runnel.KeyedCoProcessFunction[int64, lifetime[A], offer[B], Out] {
			return &winningBids[A, B, Out]{result: result}
		}).Name(name).WithCodec(codec.MustStruct[Out]())
}

// soldItem is what q9 keeps of an auction beside its id and lifetime.
type soldItem struct {
	ItemName, Description string
	InitialBid, Reserve   int64
	Seller, Category      int64
	Extra                 string
}

// bidderExtra is what q9 keeps of a bid beside its auction, price and time.
type bidderExtra struct {
	Bidder int64
	Extra  string
}

// winningBid is q9's row: an auction and its winning bid.
type winningBid struct {
	L lifetime[soldItem]
	O offer[bidderExtra]
}

// q9 finds the winning bids: every auction with its winning bid, when it closes (the watermark passes its
// expiry): {id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra,
// auction, bidder, price, bid_dateTime, bid_extra}. Each auction's line is final: the SQL's Top-1 updates
// its row as better bids come, and its final state is these lines.
func q9(events *runnel.Stream[Event]) Result {
	wins := winning(events, "winning-bids",
		func(a *Auction) soldItem {
			return soldItem{ItemName: a.ItemName, Description: a.Description, InitialBid: a.InitialBid,
				Reserve: a.Reserve, Seller: a.Seller, Category: a.Category, Extra: a.Extra}
		},
		func(b *Bid) bidderExtra { return bidderExtra{Bidder: b.Bidder, Extra: b.Extra} },
		func(l *lifetime[soldItem], o *offer[bidderExtra]) winningBid { return winningBid{L: *l, O: *o} })
	return newResult(wins, func(dst []byte, w *winningBid) []byte {
		a, b := &w.L, &w.O
		o := BeginObject(dst)
		o.Int("id", a.ID)
		o.String("itemName", a.A.ItemName)
		o.String("description", a.A.Description)
		o.Int("initialBid", a.A.InitialBid)
		o.Int("reserve", a.A.Reserve)
		o.Int("dateTime", a.DateTime)
		o.Int("expires", a.Expires)
		o.Int("seller", a.A.Seller)
		o.Int("category", a.A.Category)
		o.String("extra", a.A.Extra)
		o.Int("auction", b.Auction)
		o.Int("bidder", b.B.Bidder)
		o.Int("price", b.Price)
		o.Int("bid_dateTime", b.DateTime)
		o.String("bid_extra", b.B.Extra)
		return o.End()
	})
}

// SellerWindow is how many of a seller's closed auctions q6 averages: the last ten.
const SellerWindow = 10

// closedSale is q6's first stage's output: an auction of Seller that closed at Expires with its winning
// price.
type closedSale struct{ Seller, Expires, ID, Price int64 }

// recentSales is q6's state per seller: the last SellerWindow closed sales, oldest first (N used).
type recentSales struct {
	N     int64
	Sales [SellerWindow]closedSale
}

// priceOnly is what q6 keeps of a bid beside its auction, price and time: nothing.
type priceOnly struct{}

// sellerAvg is q6's row.
type sellerAvg struct{ Seller, Avg int64 }

// q6 computes the average selling price per seller over their last ten closed auctions: after each
// auction that closes with a winning bid (q9's), the average of the winning prices of its seller's last
// ten closed auctions, in the order of their expiry (ties by auction id), integer division as Flink SQL's
// AVG of a BIGINT: {seller, avg_price}. An update stream: a seller's last line is the average over
// their last ten auctions of the whole input.
func q6(events *runnel.Stream[Event]) Result {
	sales := winning(events, "closing-price",
		func(a *Auction) int64 { return a.Seller },
		func(*Bid) priceOnly { return priceOnly{} },
		func(l *lifetime[int64], o *offer[priceOnly]) closedSale {
			return closedSale{Seller: l.A, Expires: l.Expires, ID: l.ID, Price: o.Price}
		})
	avgs := runnel.Process(runnel.KeyBy(sales, func(c closedSale) int64 { return c.Seller }),
		func() runnel.KeyedProcessFunction[int64, closedSale, sellerAvg] { return &lastSales{} }).
		Name("seller-average").WithCodec(codec.MustStruct[sellerAvg]())
	return newResult(avgs, func(dst []byte, r *sellerAvg) []byte {
		o := BeginObject(dst)
		o.Int("seller", r.Seller)
		o.Int("avg_price", r.Avg)
		return o.End()
	})
}

// lastSales is q6's second stage, keyed by seller: the seller's last SellerWindow closed sales. Sales of
// one seller come from both subtasks of the first stage, so two that close at one watermark may come in
// either order: each is put in its place by (expiry, id), and one older than all kept is dropped, so the
// result does not depend on that order. State per seller: one recentSales (about 330 bytes); as the
// SQL's OVER window keeps its rows per seller, it stays for every seller that ever sold: it grows with
// the sellers (a new person every 50 events, a seller's next sale needs the last ten).
type lastSales struct {
	runnel.KeyedProcessBase[int64, sellerAvg]
	recent runnel.ValueState[recentSales]
}

func (l *lastSales) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	l.recent, err = runnel.NewValueState(ctx, "recent", codec.MustStruct[recentSales]())
	return err
}

// before says whether sale a closed before sale b.
func (a closedSale) before(b closedSale) bool {
	return a.Expires < b.Expires || (a.Expires == b.Expires && a.ID < b.ID)
}

func (l *lastSales) ProcessElement(ctx runnel.KeyedContext[int64], c closedSale, out runnel.Collector[sellerAvg]) error {
	r, _ := l.recent.Value()
	r.add(c)
	l.recent.Update(r)
	out.Collect(sellerAvg{Seller: ctx.CurrentKey(), Avg: r.average()})
	return nil
}

// add puts c in its place among the last SellerWindow sales; when they are full the oldest goes, unless c
// is older still.
func (r *recentSales) add(c closedSale) {
	s := r.Sales[:r.N]
	i := len(s) // c's place: after every sale that closed before it
	for i > 0 && c.before(s[i-1]) {
		i--
	}
	switch {
	case r.N < SellerWindow:
		copy(r.Sales[i+1:r.N+1], r.Sales[i:r.N])
		r.Sales[i] = c
		r.N++
	case i > 0:
		copy(r.Sales[:i-1], r.Sales[1:i])
		r.Sales[i-1] = c
	}
}

// average is the sales' average price, integer division (r holds at least one).
func (r *recentSales) average() int64 {
	var sum int64
	for _, s := range r.Sales[:r.N] {
		sum += s.Price
	}
	return sum / r.N
}

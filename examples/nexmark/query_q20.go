package nexmark

import (
	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// joinCategory is the category of the auctions q20 joins.
const joinCategory = 10

// auctionItem is q20's auction side: an auction, with its fields when it is of category 10 (Match), else
// a bare marker, so that its bids are dropped at once rather than kept waiting.
type auctionItem struct {
	Auction Auction
	Match   bool
}

// bidItem is q20's row: a bid with its auction's fields.
type bidItem struct {
	Bid     Bid
	Auction Auction
}

// q20 expands each bid on an auction of category 10 with the auction's fields (the Nexmark SQL's regular
// join of bid and auction on the auction's id): {auction, bidder, price, channel, url, bid_dateTime,
// bid_extra, itemName, description, initialBid, reserve, auction_dateTime, expires, seller, category,
// auction_extra}. Either side may come first.
func q20(events *runnel.Stream[Event]) Result {
	items := auctions(events, func(a Auction) (auctionItem, bool) {
		if a.Category == joinCategory {
			return auctionItem{Auction: a, Match: true}, true
		}
		return auctionItem{Auction: Auction{ID: a.ID, DateTime: a.DateTime}}, true
	}).WithCodec(codec.MustStruct[auctionItem]())
	bs := bids(events, func(b Bid) (Bid, bool) { return b, true }).WithCodec(codec.MustStruct[Bid]())
	joined := runnel.KeyedCoProcess(runnel.ConnectKeyed(
		runnel.KeyBy(items, func(a auctionItem) int64 { return a.Auction.ID }),
		runnel.KeyBy(bs, func(b Bid) int64 { return b.Auction })),
		func() runnel.KeyedCoProcessFunction[int64, auctionItem, Bid, bidItem] { return &expandBids{} }).
		Name("join").WithCodec(codec.MustStruct[bidItem]())
	return newResult(joined, func(dst []byte, r *bidItem) []byte {
		b, a := &r.Bid, &r.Auction
		o := BeginObject(dst)
		o.Int("auction", b.Auction)
		o.Int("bidder", b.Bidder)
		o.Int("price", b.Price)
		o.String("channel", b.Channel)
		o.String("url", b.URL)
		o.Int("bid_dateTime", b.DateTime)
		o.String("bid_extra", b.Extra)
		o.String("itemName", a.ItemName)
		o.String("description", a.Description)
		o.Int("initialBid", a.InitialBid)
		o.Int("reserve", a.Reserve)
		o.Int("auction_dateTime", a.DateTime)
		o.Int("expires", a.Expires)
		o.Int("seller", a.Seller)
		o.Int("category", a.Category)
		o.String("auction_extra", a.Extra)
		return o.End()
	})
}

// expandBids is q20's join, keyed by auction id: the auction (once it came: its fields or a marker) and
// the bids that came before it. The key's state is dropped IdleRetention after the latest event of the
// auction (see IdleRetention; the SQL's regular join keeps both sides for good): one timer is pending per
// key and moves on when events came since it was set. State: per auction with an event in the last
// IdleRetention of event time (plus the watermark's bound), the auction (its strings for category 10
// only) and the bids waiting for it (the generator bids on auctions up to 10 ahead, so a few).
type expandBids struct {
	runnel.KeyedCoProcessBase[int64, bidItem]
	auction runnel.ValueState[auctionItem]
	waiting runnel.ListState[Bid]
	// clock is the latest event time of the key and the time of its pending cleanup timer.
	clock runnel.ValueState[[2]int64]
}

func (j *expandBids) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	if j.auction, err = runnel.NewValueState[auctionItem](ctx, "auction"); err != nil {
		return err
	}
	if j.waiting, err = runnel.NewListState[Bid](ctx, "waiting"); err != nil {
		return err
	}
	j.clock, err = runnel.NewValueState[[2]int64](ctx, "clock")
	return err
}

// touch records an event at t for the key, and sets the cleanup timer if none is pending.
func (j *expandBids) touch(ts runnel.TimerService, t int64) {
	c, ok := j.clock.Value()
	switch {
	case !ok:
		c = [2]int64{t, t + idleRetentionMillis}
		ts.RegisterEventTimeTimer(c[1])
	case t > c[0]:
		c[0] = t
	default:
		return
	}
	j.clock.Update(c)
}

func (j *expandBids) ProcessElement1(ctx runnel.KeyedContext[int64], a auctionItem, out runnel.Collector[bidItem]) error {
	j.touch(ctx.TimerService(), a.Auction.DateTime)
	j.auction.Update(a)
	if a.Match {
		for _, b := range j.waiting.Get() {
			out.Collect(bidItem{Bid: b, Auction: a.Auction})
		}
	}
	j.waiting.Clear()
	return nil
}

func (j *expandBids) ProcessElement2(ctx runnel.KeyedContext[int64], b Bid, out runnel.Collector[bidItem]) error {
	j.touch(ctx.TimerService(), b.DateTime)
	a, ok := j.auction.Value()
	switch {
	case !ok:
		j.waiting.Add(b)
	case a.Match:
		out.Collect(bidItem{Bid: b, Auction: a.Auction})
	}
	return nil
}

func (j *expandBids) OnTimer(ctx runnel.TimerContext[int64], ts int64, _ runnel.Collector[bidItem]) error {
	c, ok := j.clock.Value()
	if !ok || ts != c[1] {
		return nil
	}
	if end := c[0] + idleRetentionMillis; end > ts {
		c[1] = end
		ctx.TimerService().RegisterEventTimeTimer(end)
		j.clock.Update(c)
		return nil
	}
	j.clock.Clear()
	j.auction.Clear()
	j.waiting.Clear()
	return nil
}

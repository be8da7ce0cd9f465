package nexmark

import (
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// IdleRetention is how long, in event time, q19 and q20 keep an auction's state after the latest event
// of that auction (its creation or a bid on it): once the watermark passes that time plus IdleRetention,
// the auction's state is dropped, as Flink SQL's idle state retention (table.exec.state.ttl) drops a key
// not touched for its TTL, but in event time, so that results do not depend on the processing speed. The
// Nexmark SQL keeps such state for good; its results differ from these only for an auction that gets an
// event more than IdleRetention after its previous one. The generator bids on an auction while fewer than
// 100 later auctions exist (and up to 10 before it exists): about 1833 events, 37 s at 50 events/s, so
// at or above that rate no auction's events are a minute apart.
const IdleRetention = time.Minute

const idleRetentionMillis = int64(IdleRetention / time.Millisecond)

// bidderAuction is q18's key.
type bidderAuction struct{ Bidder, Auction int64 }

// q18 finds each bidder's last bid on each auction (the Nexmark SQL's ROW_NUMBER() OVER (PARTITION BY
// bidder, auction ORDER BY dateTime DESC) = 1): {auction, bidder, price, channel, url, dateTime, extra}.
// An upsert stream keyed by (bidder, auction), as the SQL's result updates: a bid is emitted when it is
// the latest of its bidder and auction so far (at equal dateTime the later one, as Flink's deduplication
// keeps the last row), so the last line per bidder and auction is its last bid.
func q18(events *runnel.Stream[Event]) Result {
	bs := bids(events, func(b Bid) (Bid, bool) { return b, true }).WithCodec(codec.MustStruct[Bid]())
	last := runnel.Process(runnel.KeyBy(bs, func(b Bid) bidderAuction { return bidderAuction{b.Bidder, b.Auction} }),
		func() runnel.KeyedProcessFunction[bidderAuction, Bid, Bid] { return &lastBid{} }).
		Name("last-bid").WithCodec(codec.MustStruct[Bid]())
	return newResult(last, appendBid)
}

// lastBid is q18's keyed process, keyed by bidder and auction: it emits each bid that is the latest of its
// key so far and rejects an earlier bid that comes after it (out of order). The output is an upsert stream
// whose last line per key is the result, so the state is the latest bid's dateTime alone (Flink SQL's
// deduplication keeps the whole row, for the retraction of the row a new one replaces). That is all the
// state is for: once the watermark passes that dateTime, every bid still to come (none is late) is later
// and would be emitted anyway, so an event timer at that dateTime frees the key. State: one dateTime per
// bidder and auction with a bid within the watermark's bound, so it follows the rate, not the stream's
// length. A late bid (behind the watermark) is dropped, as a window drops it: its key's latest bid may be
// gone.
type lastBid struct {
	runnel.KeyedProcessBase[bidderAuction, Bid]
	latest runnel.ValueState[int64]
}

func (l *lastBid) Open(ctx runnel.KeyedContext[bidderAuction]) error {
	var err error
	l.latest, err = runnel.NewValueState[int64](ctx, "latest")
	return err
}

func (l *lastBid) ProcessElement(ctx runnel.KeyedContext[bidderAuction], b Bid, out runnel.Collector[Bid]) error {
	ts := ctx.TimerService()
	if b.DateTime <= ts.CurrentWatermark() {
		return nil
	}
	if prev, ok := l.latest.Value(); ok && b.DateTime < prev {
		return nil
	}
	l.latest.Update(b.DateTime)
	ts.RegisterEventTimeTimer(b.DateTime)
	out.Collect(b)
	return nil
}

func (l *lastBid) OnTimer(_ runnel.TimerContext[bidderAuction], ts int64, _ runnel.Collector[Bid]) error {
	if latest, ok := l.latest.Value(); ok && latest <= ts {
		l.latest.Clear()
	}
	return nil
}

// TopBids is how many bids per auction q19 ranks.
const TopBids = 10

// rankedBid is q19's row: a bid and its rank (1 the highest) among its auction's bids.
type rankedBid struct {
	Bid
	Rank int64
}

// topHead is the small half of q19's state per auction, read for every bid: how many bids it ranks, the
// lowest of them (the bid a newcomer must rank before once there are TopBids), and the idle retention's
// clock. It holds no pointers, so that writing it costs the collector nothing.
type topHead struct {
	N int64
	// LastPrice and LastDateTime are the lowest ranked bid's.
	LastPrice, LastDateTime int64
	// Latest is the latest dateTime of the auction's bids, Timer the time of the pending cleanup timer.
	Latest, Timer int64
}

// topList is the large half, read and written only when a bid enters the ranking: the ranked bids, the
// highest first.
type topList [TopBids]Bid

// q19 ranks each auction's bids by price and keeps the top ten (the Nexmark SQL's ROW_NUMBER() OVER
// (PARTITION BY auction ORDER BY price DESC) <= 10): {auction, bidder, price, channel, url, dateTime,
// extra, rank_number}. Ties on price go to the earlier dateTime, on both the SQL's side (ORDER BY price
// DESC, dateTime) and here, so that the ranks do not depend on the order in which parallel channels
// deliver the bids (Flink breaks them by arrival); at the same price and dateTime the one that came first
// ranks first, and a bid equal to the tenth does not enter. An upsert stream keyed by (auction,
// rank_number): when a bid enters at rank r, it and every bid it moves down (r … 10) are emitted with
// their new rank, so the last line per auction and rank is the final top ten.
func q19(events *runnel.Stream[Event]) Result {
	bs := bids(events, func(b Bid) (Bid, bool) { return b, true }).WithCodec(codec.MustStruct[Bid]())
	top := runnel.Process(runnel.KeyBy(bs, func(b Bid) int64 { return b.Auction }),
		func() runnel.KeyedProcessFunction[int64, Bid, rankedBid] { return &topTen{} }).
		Name("top-bids").WithCodec(codec.MustStruct[rankedBid]())
	return newResult(top, func(dst []byte, r *rankedBid) []byte {
		o := BeginObject(dst)
		o.Int("auction", r.Auction)
		o.Int("bidder", r.Bidder)
		o.Int("price", r.Price)
		o.String("channel", r.Channel)
		o.String("url", r.URL)
		o.Int("dateTime", r.DateTime)
		o.String("extra", r.Extra)
		o.Int("rank_number", r.Rank)
		return o.End()
	})
}

// topTen is q19's keyed process, keyed by auction: a topHead and a topList. A bid that does not enter
// the ranking (most of a busy auction's) reads and writes the 40-byte head only. The state is dropped
// IdleRetention after the auction's latest bid (see IdleRetention): a timer is pending at most once per
// auction and moves on when bids came since it was set. State: up to ten bids per auction with a bid in
// the last IdleRetention of event time (plus the watermark's bound).
type topTen struct {
	runnel.KeyedProcessBase[int64, rankedBid]
	head runnel.ValueState[topHead]
	list runnel.ValueState[topList]
}

func (t *topTen) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	if t.head, err = runnel.NewValueState[topHead](ctx, "head"); err != nil {
		return err
	}
	t.list, err = runnel.NewValueState[topList](ctx, "list")
	return err
}

// ranksBefore says whether a ranks before b: a higher price, or the same price and an earlier dateTime.
func ranksBefore(a, b *Bid) bool {
	return a.Price > b.Price || a.Price == b.Price && a.DateTime < b.DateTime
}

func (t *topTen) ProcessElement(ctx runnel.KeyedContext[int64], b Bid, out runnel.Collector[rankedBid]) error {
	ts := ctx.TimerService()
	if b.DateTime <= ts.CurrentWatermark() {
		return nil // late: the auction's ranking may be gone
	}
	h, ok := t.head.Value()
	if !ok {
		h.Latest = b.DateTime
		h.Timer = b.DateTime + idleRetentionMillis
		ts.RegisterEventTimeTimer(h.Timer)
	}
	if last := (Bid{Price: h.LastPrice, DateTime: h.LastDateTime}); h.N == TopBids && !ranksBefore(&b, &last) {
		if b.DateTime > h.Latest {
			h.Latest = b.DateTime
			t.head.Update(h)
		}
		return nil // below the ranking
	}
	h.Latest = max(h.Latest, b.DateTime)
	l, _ := t.list.Value()
	r := int(h.N) // the new bid's index: after every bid that ranks before it or ties with it
	for r > 0 && ranksBefore(&b, &l[r-1]) {
		r--
	}
	if h.N < TopBids {
		h.N++
	}
	n := int(h.N)
	copy(l[r+1:n], l[r:n-1])
	l[r] = b
	for i := r; i < n; i++ {
		out.Collect(rankedBid{Bid: l[i], Rank: int64(i + 1)})
	}
	h.LastPrice, h.LastDateTime = l[n-1].Price, l[n-1].DateTime
	t.list.Update(l)
	t.head.Update(h)
	return nil
}

func (t *topTen) OnTimer(ctx runnel.TimerContext[int64], ts int64, _ runnel.Collector[rankedBid]) error {
	h, ok := t.head.Value()
	if !ok || ts != h.Timer {
		return nil
	}
	if end := h.Latest + idleRetentionMillis; end > ts {
		h.Timer = end
		ctx.TimerService().RegisterEventTimeTimer(end)
		t.head.Update(h)
		return nil
	}
	t.head.Clear()
	t.list.Clear()
	return nil
}

package nexmark

import (
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// q15, q16 and q17: per-day bid statistics. The Nexmark suite's SQL groups the bids by the day of their
// dateTime (DATE_FORMAT 'yyyy-MM-dd', UTC here) in an unbounded GROUP BY, whose result updates with every
// bid. Here a day is a tumbling event-time window of 24 h aligned to the epoch, which is exactly the set
// of bids of that UTC date: a keyed process keeps the day's figures and emits them once, at an event timer
// at the day's last millisecond, then frees the key. So the output is insert-only, one row per key and day,
// equal to the SQL result's final row for that key; and the state is one day's keys, not every day's.
// What differs: a row comes when its day ends (or the input does), and a bid behind the watermark (late:
// none in input out of order by less than the watermark's bound) is dropped rather than counted.
//
// The generator's nominal timestamps (10 M events/s) put a run of millions of events into about one
// second of a single day, so at that rate q15 has one row, q16 one per channel and q17 one per auction.

const dayMillis = int64(24 * time.Hour / time.Millisecond)

// Price ranks: rank 1 below 10,000 cents, rank 2 below 1,000,000, rank 3 the rest.
const (
	rank1Below = 10_000
	rank2Below = 1_000_000
)

// priceRank is a price's rank, 1, 2 or 3.
func priceRank(price int64) int {
	switch {
	case price < rank1Below:
		return 1
	case price < rank2Below:
		return 2
	}
	return 3
}

// epochDay is the day of ms since the epoch (UTC), rounded down for times before it.
func epochDay(ms int64) int64 {
	d := ms / dayMillis
	if ms%dayMillis < 0 {
		d--
	}
	return d
}

// appendDay appends day as yyyy-MM-dd.
func appendDay(dst []byte, day int64) []byte {
	return time.UnixMilli(day*dayMillis).UTC().AppendFormat(dst, time.DateOnly)
}

// statBid is a bid as q15 and q16 count it. Channel is set for q16 only.
type statBid struct {
	Channel                                  string
	Day, MinuteOfDay, Bidder, Auction, Price int64
}

// dayStats is q15's and q16's row: a day's (and for q16 a channel's) bids, distinct bidders and distinct
// auctions, each in total (index 0) and per price rank (index 1–3); MaxMinute is the latest minute of
// the day of a bid (q16's max of 'HH:mm').
type dayStats struct {
	Channel                 string
	Day, MaxMinute          int64
	Bids, Bidders, Auctions [4]int64
}

// channelDay is q16's key.
type channelDay struct {
	Channel string
	Day     int64
}

func toStatBid(b Bid, channel bool) statBid {
	s := statBid{Day: epochDay(b.DateTime), Bidder: b.Bidder, Auction: b.Auction, Price: b.Price}
	s.MinuteOfDay = (b.DateTime - s.Day*dayMillis) / 60_000
	if channel {
		s.Channel = b.Channel
	}
	return s
}

// q15 reports per day the bids, the distinct bidders and the distinct auctions, in total and per price
// rank: {day, total_bids, rank1_bids, rank2_bids, rank3_bids, total_bidders, rank1_bidders, ...,
// rank3_auctions}. One key (the day): the stage runs in one subtask, as the SQL's GROUP BY of one day.
func q15(events *runnel.Stream[Event]) Result {
	bs := bids(events, func(b Bid) (statBid, bool) { return toStatBid(b, false), true }).
		WithCodec(codec.MustStruct[statBid]())
	stats := runnel.Process(runnel.KeyBy(bs, func(b statBid) int64 { return b.Day }),
		func() runnel.KeyedProcessFunction[int64, statBid, dayStats] { return &dailyStats[int64]{} }).
		Name("daily-stats").WithCodec(codec.MustStruct[dayStats]())
	return newResult(stats, func(dst []byte, s *dayStats) []byte {
		o := BeginObject(dst)
		o.key("day")
		o.b = appendDay(append(o.b, '"'), s.Day)
		o.b = append(o.b, '"')
		appendStats(&o, s)
		return o.End()
	})
}

// q16 is q15 per channel and day, with the latest minute of the day of the channel's bids:
// {channel, day, minute ('HH:mm'), total_bids, ..., rank3_auctions}.
func q16(events *runnel.Stream[Event]) Result {
	bs := bids(events, func(b Bid) (statBid, bool) { return toStatBid(b, true), true }).
		WithCodec(codec.MustStruct[statBid]())
	stats := runnel.Process(runnel.KeyBy(bs, func(b statBid) channelDay { return channelDay{b.Channel, b.Day} }),
		func() runnel.KeyedProcessFunction[channelDay, statBid, dayStats] { return &dailyStats[channelDay]{} }).
		Name("channel-stats").WithCodec(codec.MustStruct[dayStats]())
	return newResult(stats, func(dst []byte, s *dayStats) []byte {
		o := BeginObject(dst)
		o.String("channel", s.Channel)
		o.key("day")
		o.b = appendDay(append(o.b, '"'), s.Day)
		o.b = append(o.b, '"')
		o.key("minute")
		h, m := s.MaxMinute/60, s.MaxMinute%60
		o.b = append(o.b, '"', byte('0'+h/10), byte('0'+h%10), ':', byte('0'+m/10), byte('0'+m%10), '"')
		appendStats(&o, s)
		return o.End()
	})
}

// statNames are the names of q15's and q16's counts: bids, bidders and auctions, each in total and per rank.
var statNames = [3][4]string{
	{"total_bids", "rank1_bids", "rank2_bids", "rank3_bids"},
	{"total_bidders", "rank1_bidders", "rank2_bidders", "rank3_bidders"},
	{"total_auctions", "rank1_auctions", "rank2_auctions", "rank3_auctions"},
}

// appendStats appends q15's and q16's twelve counts.
func appendStats(o *Object, s *dayStats) {
	for i, counts := range [3]*[4]int64{&s.Bids, &s.Bidders, &s.Auctions} {
		for j, n := range counts {
			o.Int(statNames[i][j], n)
		}
	}
}

// dailyStats is q15's and q16's keyed process: per key (a day, or a channel and a day) the counts, and
// the bidders and auctions seen, each with the ranks it was seen in (a bit per rank), so that a bidder or
// auction is counted once in total and once per rank. An event timer at the day's last millisecond
// emits the row and frees the key. State per key: one dayStats and an entry per distinct bidder and
// auction of the day.
type dailyStats[K comparable] struct {
	runnel.KeyedProcessBase[K, dayStats]
	stats    runnel.ValueState[dayStats]
	bidders  runnel.MapState[int64, uint8]
	auctions runnel.MapState[int64, uint8]
}

func (d *dailyStats[K]) Open(ctx runnel.KeyedContext[K]) error {
	var err error
	if d.stats, err = runnel.NewValueState[dayStats](ctx, "stats"); err != nil {
		return err
	}
	if d.bidders, err = runnel.NewMapState[int64, uint8](ctx, "bidders"); err != nil {
		return err
	}
	d.auctions, err = runnel.NewMapState[int64, uint8](ctx, "auctions")
	return err
}

// distinct counts id into counts (total and rank r) unless seen already there, recording it in seen.
func distinct(seen runnel.MapState[int64, uint8], id int64, r int, counts *[4]int64) {
	bit := uint8(1) << r
	m, ok := seen.Get(id)
	if !ok {
		counts[0]++
	}
	if m&bit == 0 {
		counts[r]++
		seen.Put(id, m|bit)
	}
}

func (d *dailyStats[K]) ProcessElement(ctx runnel.KeyedContext[K], b statBid, _ runnel.Collector[dayStats]) error {
	ts := ctx.TimerService()
	if b.Day*dayMillis+dayMillis-1 <= ts.CurrentWatermark() {
		return nil // late: the day's row is out
	}
	s, ok := d.stats.Value()
	if !ok {
		s = dayStats{Channel: b.Channel, Day: b.Day}
		ts.RegisterEventTimeTimer(b.Day*dayMillis + dayMillis - 1)
	}
	r := priceRank(b.Price)
	s.Bids[0]++
	s.Bids[r]++
	s.MaxMinute = max(s.MaxMinute, b.MinuteOfDay)
	distinct(d.bidders, b.Bidder, r, &s.Bidders)
	distinct(d.auctions, b.Auction, r, &s.Auctions)
	d.stats.Update(s)
	return nil
}

func (d *dailyStats[K]) OnTimer(_ runnel.TimerContext[K], _ int64, out runnel.Collector[dayStats]) error {
	if s, ok := d.stats.Value(); ok {
		out.Collect(s)
	}
	d.stats.Clear()
	d.bidders.Clear()
	d.auctions.Clear()
	return nil
}

// auctionDay is q17's key.
type auctionDay struct{ Auction, Day int64 }

// auctionStats is q17's state and row: an auction's bids of a day, in total and per price rank, and the
// minimum, maximum and sum of their prices.
type auctionStats struct {
	Auction, Day  int64
	Bids          [4]int64
	Min, Max, Sum int64
}

// q17 reports per auction and day the bids, in total and per price rank, and their prices' minimum,
// maximum, average (integer division, as Flink SQL's AVG of a BIGINT) and sum: {auction, day,
// total_bids, rank1_bids, rank2_bids, rank3_bids, min_price, max_price, avg_price, sum_price}.
func q17(events *runnel.Stream[Event]) Result {
	bs := bids(events, func(b Bid) (auctionStats, bool) {
		return auctionStats{Auction: b.Auction, Day: epochDay(b.DateTime), Min: b.Price, Max: b.Price, Sum: b.Price}, true
	}).WithCodec(codec.MustStruct[auctionStats]())
	stats := runnel.Process(runnel.KeyBy(bs, func(b auctionStats) auctionDay { return auctionDay{b.Auction, b.Day} }),
		func() runnel.KeyedProcessFunction[auctionDay, auctionStats, auctionStats] { return &auctionDaily{} }).
		Name("auction-stats").WithCodec(codec.MustStruct[auctionStats]())
	return newResult(stats, func(dst []byte, s *auctionStats) []byte {
		o := BeginObject(dst)
		o.Int("auction", s.Auction)
		o.key("day")
		o.b = appendDay(append(o.b, '"'), s.Day)
		o.b = append(o.b, '"')
		o.Int("total_bids", s.Bids[0])
		o.Int("rank1_bids", s.Bids[1])
		o.Int("rank2_bids", s.Bids[2])
		o.Int("rank3_bids", s.Bids[3])
		o.Int("min_price", s.Min)
		o.Int("max_price", s.Max)
		o.Int("avg_price", s.Sum/s.Bids[0])
		o.Int("sum_price", s.Sum)
		return o.End()
	})
}

// auctionDaily is q17's keyed process, keyed by auction and day: one auctionStats (the bid's price is in
// Min, Max and Sum of the record that comes in), emitted and freed at an event timer at the day's last
// millisecond.
type auctionDaily struct {
	runnel.KeyedProcessBase[auctionDay, auctionStats]
	stats runnel.ValueState[auctionStats]
}

func (a *auctionDaily) Open(ctx runnel.KeyedContext[auctionDay]) error {
	var err error
	a.stats, err = runnel.NewValueState[auctionStats](ctx, "stats")
	return err
}

func (a *auctionDaily) ProcessElement(ctx runnel.KeyedContext[auctionDay], b auctionStats, _ runnel.Collector[auctionStats]) error {
	ts := ctx.TimerService()
	end := b.Day*dayMillis + dayMillis - 1
	if end <= ts.CurrentWatermark() {
		return nil // late: the day's row is out
	}
	price := b.Sum
	s, ok := a.stats.Value()
	if !ok {
		s = auctionStats{Auction: b.Auction, Day: b.Day, Min: price, Max: price}
		ts.RegisterEventTimeTimer(end)
	}
	r := priceRank(price)
	s.Bids[0]++
	s.Bids[r]++
	s.Min = min(s.Min, price)
	s.Max = max(s.Max, price)
	s.Sum += price
	a.stats.Update(s)
	return nil
}

func (a *auctionDaily) OnTimer(_ runnel.TimerContext[auctionDay], _ int64, out runnel.Collector[auctionStats]) error {
	if s, ok := a.stats.Value(); ok {
		out.Collect(s)
	}
	a.stats.Clear()
	return nil
}

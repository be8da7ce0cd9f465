package nexmark

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// SideInputRows is the size of q13's default side input, and the modulus of its join key: a bid joins the
// row keyed auction mod SideInputRows (Nexmark's Flink suite: MOD(auction, 10000) against 10,000 rows).
const SideInputRows = 10_000

// defaultSideInput returns q13's side input when no file is given: key k → the decimal digits of k for k in
// [0, SideInputRows), the rows of the Nexmark suite's side input file.
func defaultSideInput() map[int64]string {
	m := make(map[int64]string, SideInputRows)
	for k := range int64(SideInputRows) {
		m[k] = strconv.FormatInt(k, 10)
	}
	return m
}

// maxSideInputBytes bounds a side input file: it is held in memory by every subtask that joins.
const maxSideInputBytes = 64 << 20

// readSideInput reads a side input file for q13: one row per line, `key,value` (key a decimal int64, value
// the rest of the line, taken as is: no quoting). Empty lines are skipped; a repeated key is an error, as
// is a file over 64 MiB.
func readSideInput(path string) (map[int64]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("side input: %w", err)
	}
	if st.Size() > maxSideInputBytes {
		return nil, fmt.Errorf("side input %s: %d bytes, at most %d: it is held in memory", path, st.Size(), maxSideInputBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("side input: %w", err)
	}
	m := map[int64]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxSideInputBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, ",")
		if !ok {
			return nil, fmt.Errorf("side input %s:%d: want key,value, got %q", path, n, line)
		}
		key, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("side input %s:%d: key %q: %w", path, n, k, err)
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("side input %s:%d: key %d repeated", path, n, key)
		}
		m[key] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("side input %s: %w", path, err)
	}
	return m, nil
}

// enrichedBid is q13's row: a bid with the side input's value for its auction.
type enrichedBid struct {
	Auction, Bidder, Price, DateTime int64
	Value                            string
}

// q13 joins every bid with a bounded side input: the value of the row keyed auction mod SideInputRows
// (floor modulo), bids without one dropped (the SQL's inner lookup join): {auction, bidder, price,
// dateTime, value}. The side input (defaultSideInput when side is nil) is read before the job starts and
// shared, read-only, by every subtask of the join, as Flink's lookup join holds its table in a full cache.
func q13(events *runnel.Stream[Event], side map[int64]string) Result {
	if side == nil {
		side = defaultSideInput()
	}
	// The join key is in [0, SideInputRows): the rows it can match are looked up by index, not hashed per
	// bid; rows keyed outside it never match.
	var rows [SideInputRows]struct {
		value string
		ok    bool
	}
	for k, v := range side {
		if 0 <= k && k < SideInputRows {
			rows[k].value, rows[k].ok = v, true
		}
	}
	joined := bids(events, func(b Bid) (enrichedBid, bool) {
		r := &rows[((b.Auction%SideInputRows)+SideInputRows)%SideInputRows]
		return enrichedBid{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime, Value: r.value}, r.ok
	}).WithCodec(codec.MustStruct[enrichedBid]())
	return newResult(joined, func(dst []byte, r *enrichedBid) []byte {
		o := BeginObject(dst)
		o.Int("auction", r.Auction)
		o.Int("bidder", r.Bidder)
		o.Int("price", r.Price)
		o.Int("dateTime", r.DateTime)
		o.String("value", r.Value)
		return o.End()
	})
}

// The range of q14's euro price, in thousandths of a euro, both ends excluded: 0.908 × price in
// (1,000,000, 50,000,000).
const (
	q14MinMilli = 1_000_000 * 1000
	q14MaxMilli = 50_000_000 * 1000
)

// The bid time types of q14, by the hour (UTC) of the bid.
const (
	dayTime   = "dayTime"   // 08:00–18:59
	nightTime = "nightTime" // 20:00–06:59
	otherTime = "otherTime" // 07:00–07:59 and 19:00–19:59
)

// bidTimeType is q14's bidTimeType of a bid at dateTime (epoch milliseconds): by its hour of the day, UTC.
func bidTimeType(dateTime int64) string {
	const hourMs = 3_600_000
	hours := dateTime / hourMs
	if dateTime%hourMs < 0 {
		hours-- // floor, not truncation, before the epoch
	}
	h := (hours%24 + 24) % 24
	switch {
	case h >= 8 && h <= 18:
		return dayTime
	case h <= 6 || h >= 20:
		return nightTime
	}
	return otherTime
}

// calculatedBid is q14's row; Milli is the euro price in thousandths (price·908), TimeType one of the
// constants above.
type calculatedBid struct {
	Auction, Bidder, Milli int64
	TimeType               string
	DateTime               int64
	Extra                  string
	CCount                 int64
}

// q14 filters and computes: the bids whose euro price (0.908 × price, exact) is strictly between 1,000,000
// and 50,000,000, with the time of day of the bid and the number of 'c' in its extra: {auction, bidder,
// price, bidTimeType, dateTime, extra, c_counts}.
func q14(events *runnel.Stream[Event]) Result {
	s := bids(events, func(b Bid) (calculatedBid, bool) {
		m := b.Price * 908
		if m <= q14MinMilli || m >= q14MaxMilli {
			return calculatedBid{}, false
		}
		return calculatedBid{Auction: b.Auction, Bidder: b.Bidder, Milli: m, TimeType: bidTimeType(b.DateTime),
			DateTime: b.DateTime, Extra: b.Extra, CCount: int64(strings.Count(b.Extra, "c"))}, true
	}).WithCodec(codec.MustStruct[calculatedBid]())
	return newResult(s, func(dst []byte, r *calculatedBid) []byte {
		o := BeginObject(dst)
		o.Int("auction", r.Auction)
		o.Int("bidder", r.Bidder)
		o.Decimal3("price", r.Milli)
		o.String("bidTimeType", r.TimeType)
		o.Int("dateTime", r.DateTime)
		o.String("extra", r.Extra)
		o.Int("c_counts", r.CCount)
		return o.End()
	})
}

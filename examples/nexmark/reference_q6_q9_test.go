package nexmark_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/nexmark"
)

// The references of q6 and q9, written from the queries' definitions: every auction's winning bid found by
// a loop over all bids, then q9's lines, or q6's averages per seller over the whole input.

func init() {
	references["q6"] = refQ6
	references["q9"] = refQ9
	// q6 is an update stream: a seller's line after each of their closed auctions. Its final state, the
	// last line per seller, is what the reference computes and what Flink's changelog ends with.
	comparableOutput["q6"] = lastPer("seller")
}

// winner is an auction and its winning bid.
type winner struct {
	a nexmark.Auction
	b nexmark.Bid
}

// winners returns each auction's winning bid: among the bids on it with dateTime in [the auction's
// dateTime, expires], the highest price, the earliest of those. Auctions without such a bid are absent.
func winners(evs []nexmark.Event) map[int64]winner {
	as := map[int64]nexmark.Auction{}
	for _, e := range evs {
		if e.Kind == nexmark.KindAuction {
			as[e.Auction.ID] = e.Auction
		}
	}
	ws := map[int64]winner{}
	for _, b := range bidsOf(evs) {
		a, ok := as[b.Auction]
		if !ok || b.DateTime < a.DateTime || b.DateTime > a.Expires {
			continue
		}
		w, seen := ws[a.ID]
		if !seen || b.Price > w.b.Price || (b.Price == w.b.Price && b.DateTime < w.b.DateTime) {
			ws[a.ID] = winner{a: a, b: b}
		}
	}
	return ws
}

func refQ9(evs []nexmark.Event) []string {
	var out []string
	for _, w := range winners(evs) {
		a, b := w.a, w.b
		out = append(out, fmt.Sprintf(`{"id":%d,"itemName":%s,"description":%s,"initialBid":%d,"reserve":%d,"dateTime":%d,"expires":%d,"seller":%d,"category":%d,"extra":%s,`+
			`"auction":%d,"bidder":%d,"price":%d,"bid_dateTime":%d,"bid_extra":%s}`,
			a.ID, jstr(a.ItemName), jstr(a.Description), a.InitialBid, a.Reserve, a.DateTime, a.Expires, a.Seller, a.Category, jstr(a.Extra),
			b.Auction, b.Bidder, b.Price, b.DateTime, jstr(b.Extra)))
	}
	return out
}

// refQ6 returns the final average per seller: over the winning prices of the seller's last ten auctions
// in the order of their expiry (ties by id), integer division.
func refQ6(evs []nexmark.Event) []string {
	bySeller := map[int64][]winner{}
	for _, w := range winners(evs) {
		bySeller[w.a.Seller] = append(bySeller[w.a.Seller], w)
	}
	var out []string
	for seller, ws := range bySeller {
		slices.SortFunc(ws, func(x, y winner) int {
			if x.a.Expires != y.a.Expires {
				return int(x.a.Expires - y.a.Expires)
			}
			return int(x.a.ID - y.a.ID)
		})
		last := ws[max(0, len(ws)-nexmark.SellerWindow):]
		var sum int64
		for _, w := range last {
			sum += w.b.Price
		}
		out = append(out, fmt.Sprintf(`{"seller":%d,"avg_price":%d}`, seller, sum/int64(len(last))))
	}
	return out
}

// lastPer returns a comparison that keeps the last line per value of the integer field: an update
// stream's final state.
func lastPer(field string) func(t *testing.T, lines []string) []string {
	return func(t *testing.T, lines []string) []string {
		t.Helper()
		last := map[int64]string{}
		for _, l := range lines {
			var v map[string]json.RawMessage
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			var k int64
			if err := json.Unmarshal(v[field], &k); err != nil {
				t.Fatalf("line %q: field %s: %v", l, field, err)
			}
			last[k] = l
		}
		out := make([]string, 0, len(last))
		for _, l := range last {
			out = append(out, l)
		}
		return out
	}
}

// TestQ6KeepsTheLastTen checks the reference's premise on the generated input: some seller closes more
// than ten auctions, so that q6's window of ten drops some and the comparison tests it.
func TestQ6KeepsTheLastTen(t *testing.T) {
	evs := generate(t, nexmark.GeneratorConfig{Seed: 7, Rate: 50}, 6000)
	n := map[int64]int{}
	for _, w := range winners(evs) {
		n[w.a.Seller]++
	}
	most := 0
	for _, c := range n {
		most = max(most, c)
	}
	if most <= nexmark.SellerWindow {
		t.Fatalf("no seller closes more than %d auctions (at most %d): q6's comparisons do not test its window", nexmark.SellerWindow, most)
	}
}

// TestQ9TiesGoToTheEarliestBid runs q9 on the generated input with every bid at one price, so that each
// auction's winning bid is decided by the tie-break alone: the earliest valid bid. (The tied input of
// TestNexmarkMatchesReference makes one bid per auction the highest, for q4's inclusive end.) Also
// against Flink when RUNNEL_FLINK_JAR is set.
func TestQ9TiesGoToTheEarliestBid(t *testing.T) {
	evs := generate(t, nexmark.GeneratorConfig{Seed: 7, Rate: 50}, 6000)
	for i := range evs {
		if evs[i].Kind == nexmark.KindBid {
			evs[i].Bid.Price = 777
		}
	}
	input := filepath.Join(t.TempDir(), "one-price.jsonl")
	if err := os.WriteFile(input, jsonLines(shuffleWithin(evs, 2000, 7)), 0o644); err != nil {
		t.Fatal(err)
	}
	want := refQ9(evs)
	if len(want) == 0 {
		t.Fatal("no auction has a valid bid: the test would prove nothing")
	}
	got := runQuery(t, "q9", input, runnel.WithParallelism(2), runnel.WithChaining(false))
	sameLines(t, "q9 with one price", got, want)
	if jar := os.Getenv("RUNNEL_FLINK_JAR"); jar != "" {
		sameLines(t, "q9 with one price (Runnel against Flink)", got, runFlink(t, jar, "q9", input))
	}
}

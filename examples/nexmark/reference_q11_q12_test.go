package nexmark_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/examples/nexmark"
)

func init() {
	references["q11"] = refQ11
	references["q12"] = refQ12
	// q12's windows are processing time: which window a bid lands in depends on when the engine gets to
	// it, so two runs (or two engines) agree only on what does not, each bidder's total over its windows.
	comparableOutput["q12"] = totalsPerBidder
	// Flink SQL drops the processing-time windows still open when a bounded input ends (its tasks finish
	// without firing pending processing-time timers), and a 6000-line file is read in well under 10 s: it
	// writes few windows or none. Runnel's q12 emits those windows at the end of input. So Flink's lines
	// are held to being well-formed windows whose totals per bidder do not exceed Runnel's (which the
	// reference holds to each bidder's bids).
	compareWithFlink["q12"] = func(t *testing.T, runnel, flink []string) {
		t.Helper()
		r, f := bidderTotals(t, runnel), bidderTotals(t, flink)
		for bidder, n := range f {
			if n > r[bidder] {
				t.Errorf("q12: Flink counts %d bids of bidder %d, Runnel %d", n, bidder, r[bidder])
			}
		}
		t.Logf("q12: Flink wrote %d windows of %d bidders, Runnel %d of %d", len(flink), len(f), len(runnel), len(r))
	}
}

const refGap = int64(10_000) // ms: q11's session gap

// refQ11 cuts each bidder's bids, in time order, into sessions: a bid at t extends the session whose end
// (its last bid + gap) is at or after t (windows that touch merge, as Flink's TimeWindow.intersects says),
// else it starts a new one.
func refQ11(evs []nexmark.Event) []string {
	times := map[int64][]int64{}
	for _, b := range bidsOf(evs) {
		times[b.Bidder] = append(times[b.Bidder], b.DateTime)
	}
	var out []string
	for bidder, ts := range times {
		slices.Sort(ts)
		start, end, n := ts[0], ts[0]+refGap, 0
		for _, t := range ts {
			if t > end {
				out = append(out, fmt.Sprintf(`{"bidder":%d,"bid_count":%d,"starttime":%d,"endtime":%d}`, bidder, n, start, end))
				start, n = t, 0
			}
			end = max(end, t+refGap)
			n++
		}
		out = append(out, fmt.Sprintf(`{"bidder":%d,"bid_count":%d,"starttime":%d,"endtime":%d}`, bidder, n, start, end))
	}
	return out
}

// refQ12 is each bidder's number of bids, in totalsPerBidder's form.
func refQ12(evs []nexmark.Event) []string {
	n := map[int64]int64{}
	for _, b := range bidsOf(evs) {
		n[b.Bidder]++
	}
	var out []string
	for bidder, c := range n {
		out = append(out, fmt.Sprintf(`{"bidder":%d,"bids":%d}`, bidder, c))
	}
	return out
}

// totalsPerBidder is bidderTotals as lines.
func totalsPerBidder(t *testing.T, lines []string) []string {
	t.Helper()
	var out []string
	for bidder, c := range bidderTotals(t, lines) {
		out = append(out, fmt.Sprintf(`{"bidder":%d,"bids":%d}`, bidder, c))
	}
	return out
}

// bidderTotals checks that q12's lines are windows of 10 s aligned to the epoch, each bidder's once per
// window with a positive count, and returns each bidder's total over them.
func bidderTotals(t *testing.T, lines []string) map[int64]int64 {
	t.Helper()
	type window struct{ bidder, start int64 }
	seen := map[window]bool{}
	n := map[int64]int64{}
	for _, l := range lines {
		var v struct {
			Bidder   int64
			BidCount int64 `json:"bid_count"`
			Start    int64 `json:"starttime"`
			End      int64 `json:"endtime"`
		}
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("q12 line %q: %v", l, err)
		}
		w := window{v.Bidder, v.Start}
		switch {
		case v.End-v.Start != 10_000 || v.Start%10_000 != 0:
			t.Errorf("q12 line %s: not a window of 10 s aligned to the epoch", l)
		case v.BidCount <= 0:
			t.Errorf("q12 line %s: a window without bids", l)
		case seen[w]:
			t.Errorf("q12 line %s: bidder %d's window at %d twice", l, v.Bidder, v.Start)
		}
		seen[w] = true
		n[v.Bidder] += v.BidCount
	}
	return n
}

// TestQ11HasSessions checks the reference's premise on the generated input: bidders have several
// sessions, so the gap is tested, and some session holds several bids, so merging is.
func TestQ11HasSessions(t *testing.T) {
	evs := generate(t, nexmark.GeneratorConfig{Seed: 7, Rate: 50}, 6000)
	perBidder := map[int64]int{}
	multi := false
	for _, l := range refQ11(evs) {
		var v struct {
			Bidder   int64
			BidCount int64 `json:"bid_count"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		perBidder[v.Bidder]++
		multi = multi || v.BidCount > 1
	}
	several := 0
	for _, n := range perBidder {
		if n > 1 {
			several++
		}
	}
	if several == 0 || !multi {
		t.Fatalf("%d bidders with several sessions, sessions of several bids: %v", several, multi)
	}
}

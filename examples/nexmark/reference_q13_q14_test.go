package nexmark_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/nexmark"
)

func init() {
	references["q13"] = func(evs []nexmark.Event) []string { return refQ13(evs, nil) }
	references["q14"] = refQ14
	// The tied input's bids cost 100 to 300 cents, far below q14's range: no bid passes its filter. q14 has
	// no ties to test; TestQ14HoursOfTheDay gives it a second input instead.
	emptyOn["ties/q14"] = "the tied bids' prices are below q14's range"
}

// refQ13 joins each bid with side[auction mod 10000]; side nil is the Nexmark suite's side input, in which
// key k's value is k's decimal digits.
func refQ13(evs []nexmark.Event, side map[int64]string) []string {
	var out []string
	for _, b := range bidsOf(evs) {
		k := b.Auction % 10_000
		v, ok := strconv.FormatInt(k, 10), k >= 0 && k < 10_000
		if side != nil {
			v, ok = side[k]
		}
		if ok {
			out = append(out, fmt.Sprintf(`{"auction":%d,"bidder":%d,"price":%d,"dateTime":%d,"value":%s}`, b.Auction, b.Bidder, b.Price, b.DateTime, jstr(v)))
		}
	}
	return out
}

func refQ14(evs []nexmark.Event) []string {
	var out []string
	for _, b := range bidsOf(evs) {
		// 0.908 × price strictly between 1,000,000 and 50,000,000, in thousandths of a euro.
		if m := b.Price * 908; m <= 1_000_000_000 || m >= 50_000_000_000 {
			continue
		}
		hour := b.DateTime / 3_600_000 % 24 // the inputs are after the epoch
		kind := "otherTime"
		if hour >= 8 && hour <= 18 {
			kind = "dayTime"
		} else if hour <= 6 || hour >= 20 {
			kind = "nightTime"
		}
		out = append(out, fmt.Sprintf(`{"auction":%d,"bidder":%d,"price":%s,"bidTimeType":%q,"dateTime":%d,"extra":%s,"c_counts":%d}`,
			b.Auction, b.Bidder, euros(b.Price), kind, b.DateTime, jstr(b.Extra), strings.Count(b.Extra, "c")))
	}
	return out
}

// TestQ13SideInputFile runs q13 with a side input file of its own (`--side-input`): keys missing (their
// bids are dropped), values that are not the key, a value with a comma and one with quotes and spaces.
func TestQ13SideInputFile(t *testing.T) {
	evs := generate(t, nexmark.GeneratorConfig{Seed: 7, Rate: 50}, 6000)
	dir := t.TempDir()
	input := filepath.Join(dir, "events.jsonl")
	if err := os.WriteFile(input, jsonLines(shuffleWithin(evs, 2000, 7)), 0o644); err != nil {
		t.Fatal(err)
	}
	side := map[int64]string{}
	var file strings.Builder
	for k := int64(0); k < 10_000; k++ {
		if k%3 == 0 {
			continue
		}
		v := fmt.Sprintf("item %d, \"%d\"", k*7, k%11)
		side[k] = v
		fmt.Fprintf(&file, "%d,%s\n", k, v)
	}
	path := filepath.Join(dir, "side.csv")
	if err := os.WriteFile(path, []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	want := refQ13(evs, side)
	if all := refQ13(evs, nil); len(want) == 0 || len(want) == len(all) {
		t.Fatalf("the side input joins %d of %d bids: the test would not see the missing keys", len(want), len(all))
	}
	j := nexmark.New(nil)
	j.Query, j.Input, j.SideInput = "q13", input, path
	got, _ := runJob(t, j, runnel.WithParallelism(2), runnel.WithChaining(false))
	sameLines(t, "q13 with a side input file", got, want)
}

// TestQ14HoursOfTheDay runs q14 on the generated input spread over a day, so that every bidTimeType
// occurs (the other inputs span two minutes after midnight, all nightTime): event i is moved later by
// i·24/n hours, which keeps the stream in time order. Also against Flink when RUNNEL_FLINK_JAR is set.
func TestQ14HoursOfTheDay(t *testing.T) {
	evs := generate(t, nexmark.GeneratorConfig{Seed: 7, Rate: 50}, 6000)
	for i := range evs {
		shift := int64(i) * 24 / int64(len(evs)) * 3_600_000
		switch e := &evs[i]; e.Kind {
		case nexmark.KindPerson:
			e.Person.DateTime += shift
		case nexmark.KindAuction:
			e.Auction.DateTime += shift
			e.Auction.Expires += shift
		case nexmark.KindBid:
			e.Bid.DateTime += shift
		}
	}
	input := filepath.Join(t.TempDir(), "day.jsonl")
	if err := os.WriteFile(input, jsonLines(shuffleWithin(evs, 2000, 7)), 0o644); err != nil {
		t.Fatal(err)
	}
	want := refQ14(evs)
	for _, kind := range []string{"dayTime", "nightTime", "otherTime"} {
		if !strings.Contains(strings.Join(want, "\n"), `"bidTimeType":"`+kind+`"`) {
			t.Fatalf("no %s bid in the reference: the test would not cover it", kind)
		}
	}
	got := runQuery(t, "q14", input, runnel.WithParallelism(2), runnel.WithChaining(false))
	sameLines(t, "q14 over a day", got, want)
	if jar := os.Getenv("RUNNEL_FLINK_JAR"); jar != "" {
		sameLines(t, "q14 over a day (Runnel against Flink)", got, runFlink(t, jar, "q14", input))
	}
}

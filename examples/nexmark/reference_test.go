package nexmark_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/internal/run"
	"github.com/runnel-dev/runnel/examples/nexmark"
)

// The reference: each query of the issue evaluated by a plain loop over the whole input, written from the
// issue's definitions and not from the jobs (no windows API, no state, no watermarks): a window [start,
// end) aligned to the epoch holds the events with start <= dateTime < end.

const (
	refSize  = int64(10_000) // ms: q5's hop size, q7's and q8's tumble
	refSlide = int64(2_000)  // ms: q5's hop
)

// jstr is s as a JSON string, escaped as encoding/json does without HTML escaping.
func jstr(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// euros writes 0.908 × cents as a decimal number with no trailing zeros.
func euros(cents int64) string {
	m := cents * 908
	s := fmt.Sprintf("%d.%03d", m/1000, m%1000)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func bidsOf(evs []nexmark.Event) []nexmark.Bid {
	var bs []nexmark.Bid
	for _, e := range evs {
		if e.Kind == nexmark.KindBid {
			bs = append(bs, e.Bid)
		}
	}
	return bs
}

func refQ0(evs []nexmark.Event) []string {
	var out []string
	for _, b := range bidsOf(evs) {
		out = append(out, fmt.Sprintf(`{"auction":%d,"bidder":%d,"price":%d,"channel":%s,"url":%s,"dateTime":%d,"extra":%s}`,
			b.Auction, b.Bidder, b.Price, jstr(b.Channel), jstr(b.URL), b.DateTime, jstr(b.Extra)))
	}
	return out
}

func refQ1(evs []nexmark.Event) []string {
	var out []string
	for _, b := range bidsOf(evs) {
		out = append(out, fmt.Sprintf(`{"auction":%d,"bidder":%d,"price":%s,"dateTime":%d}`, b.Auction, b.Bidder, euros(b.Price), b.DateTime))
	}
	return out
}

func refQ2(evs []nexmark.Event) []string {
	var out []string
	for _, b := range bidsOf(evs) {
		if b.Auction%123 == 0 {
			out = append(out, fmt.Sprintf(`{"auction":%d,"price":%d}`, b.Auction, b.Price))
		}
	}
	return out
}

func refQ3(evs []nexmark.Event) []string {
	people := map[int64]nexmark.Person{}
	for _, e := range evs {
		if e.Kind == nexmark.KindPerson {
			people[e.Person.ID] = e.Person
		}
	}
	var out []string
	for _, e := range evs {
		if e.Kind != nexmark.KindAuction || e.Auction.Category != 10 {
			continue
		}
		p, ok := people[e.Auction.Seller]
		if ok && (p.State == "OR" || p.State == "ID" || p.State == "CA") {
			out = append(out, fmt.Sprintf(`{"name":%s,"city":%s,"state":%s,"id":%d}`, jstr(p.Name), jstr(p.City), jstr(p.State), e.Auction.ID))
		}
	}
	return out
}

// refQ4 returns the final average per category (the last line the update stream has for it).
func refQ4(evs []nexmark.Event) []string {
	type closing struct {
		category, max int64
		valid         bool
	}
	auctions := map[int64]*closing{}
	var as []nexmark.Auction
	for _, e := range evs {
		if e.Kind == nexmark.KindAuction {
			as = append(as, e.Auction)
			auctions[e.Auction.ID] = &closing{category: e.Auction.Category}
		}
	}
	byID := map[int64]nexmark.Auction{}
	for _, a := range as {
		byID[a.ID] = a
	}
	for _, b := range bidsOf(evs) {
		a, ok := byID[b.Auction]
		if !ok || b.DateTime < a.DateTime || b.DateTime > a.Expires {
			continue
		}
		c := auctions[a.ID]
		if !c.valid || b.Price > c.max {
			c.max, c.valid = b.Price, true
		}
	}
	sum, n := map[int64]int64{}, map[int64]int64{}
	for _, c := range auctions {
		if c.valid {
			sum[c.category] += c.max
			n[c.category]++
		}
	}
	var out []string
	for cat, s := range sum {
		out = append(out, fmt.Sprintf(`{"category":%d,"avg":%d}`, cat, s/n[cat]))
	}
	return out
}

func refQ5(evs []nexmark.Event) []string {
	counts := map[[2]int64]int64{} // (window start, auction) → bids
	starts := map[int64]bool{}
	for _, b := range bidsOf(evs) {
		// Every hop start s with s <= t < s + size.
		for s := b.DateTime - b.DateTime%refSlide; s > b.DateTime-refSize; s -= refSlide {
			counts[[2]int64{s, b.Auction}]++
			starts[s] = true
		}
	}
	var out []string
	for s := range starts {
		var best int64
		for k, n := range counts {
			if k[0] == s {
				best = max(best, n)
			}
		}
		for k, n := range counts {
			if k[0] == s && n == best {
				out = append(out, fmt.Sprintf(`{"auction":%d,"num":%d,"window_start":%d,"window_end":%d}`, k[1], n, s, s+refSize))
			}
		}
	}
	return out
}

func refQ7(evs []nexmark.Event) []string {
	best := map[int64]int64{} // window start → highest price
	bs := bidsOf(evs)
	for _, b := range bs {
		s := b.DateTime - b.DateTime%refSize
		if p, ok := best[s]; !ok || b.Price > p {
			best[s] = b.Price
		}
	}
	var out []string
	for _, b := range bs {
		s := b.DateTime - b.DateTime%refSize
		if b.Price == best[s] {
			out = append(out, fmt.Sprintf(`{"auction":%d,"price":%d,"bidder":%d,"dateTime":%d,"window_end":%d}`, b.Auction, b.Price, b.Bidder, b.DateTime, s+refSize))
		}
	}
	return out
}

func refQ8(evs []nexmark.Event) []string {
	sold := map[[2]int64]bool{} // (window start, seller) with an auction in the window
	for _, e := range evs {
		if e.Kind == nexmark.KindAuction {
			sold[[2]int64{e.Auction.DateTime - e.Auction.DateTime%refSize, e.Auction.Seller}] = true
		}
	}
	var out []string
	for _, e := range evs {
		if e.Kind != nexmark.KindPerson {
			continue
		}
		s := e.Person.DateTime - e.Person.DateTime%refSize
		if sold[[2]int64{s, e.Person.ID}] {
			out = append(out, fmt.Sprintf(`{"id":%d,"name":%s,"window_start":%d}`, e.Person.ID, jstr(e.Person.Name), s))
		}
	}
	return out
}

var references = map[string]func([]nexmark.Event) []string{
	"q0": refQ0, "q1": refQ1, "q2": refQ2, "q3": refQ3, "q4": refQ4, "q5": refQ5, "q7": refQ7, "q8": refQ8,
}

// comparableOutput turns a query's output lines into what the reference (and Flink) have, for the
// queries whose output cannot be compared line for line: an update stream's final state (q4: its last
// line per category), or the part of a result that does not depend on processing time. Queries not
// listed are compared as they are. A query's reference test file adds its entry.
var comparableOutput = map[string]func(t *testing.T, lines []string) []string{
	"q4": lastPerCategory,
}

// emptyOn lists the inputs ("ties/q14") on which a query has no results by construction, with the
// reason: there the test demands no output rather than refusing to compare nothing.
var emptyOn = map[string]string{}

// expectResults fails t when the reference has no results on the input and emptyOn does not allow it
// (the comparison would prove nothing); it returns whether there are results to expect.
func expectResults(t *testing.T, input, q string, want []string) bool {
	t.Helper()
	if len(want) > 0 {
		return true
	}
	if _, ok := emptyOn[input+"/"+q]; !ok {
		t.Fatalf("%s: the reference has no results on this input: the test would prove nothing", q)
	}
	return false
}

// lastPerCategory keeps q4's last line per category: its update stream's final state.
func lastPerCategory(t *testing.T, lines []string) []string {
	t.Helper()
	last := map[int64]string{}
	for _, l := range lines {
		var v struct{ Category int64 }
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("q4 line %q: %v", l, err)
		}
		last[v.Category] = l
	}
	var out []string
	for _, l := range last {
		out = append(out, l)
	}
	return out
}

// shuffleWithin returns the events in an order out of dateTime order by at most bound: each event is put
// at dateTime + a random delay in [0, bound]. No event comes after one more than bound later than itself,
// so a watermark bounded by bound out of order declares none late.
func shuffleWithin(evs []nexmark.Event, bound int64, seed uint64) []nexmark.Event {
	r := rand.New(rand.NewPCG(seed, 1))
	type keyed struct {
		at int64
		e  nexmark.Event
	}
	ks := make([]keyed, len(evs))
	for i, e := range evs {
		ks[i] = keyed{at: e.DateTime() + r.Int64N(bound+1), e: e}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return int(a.at - b.at) })
	out := make([]nexmark.Event, len(ks))
	moved := 0
	for i, k := range ks {
		out[i] = k.e
		if i > 0 && out[i].DateTime() < out[i-1].DateTime() {
			moved++
		}
	}
	if moved == 0 {
		panic("shuffleWithin moved nothing")
	}
	return out
}

// runQuery runs the job of `runnel run nexmark --query q --input input --output FILE` in a mini-cluster
// and returns the lines of FILE.
func runQuery(t *testing.T, q, input string, opts ...runnel.Option) []string {
	t.Helper()
	lines, _ := runQueryResult(t, q, input, opts...)
	return lines
}

// runQueryResult is runQuery that also returns the job's result.
func runQueryResult(t *testing.T, q, input string, opts ...runnel.Option) ([]string, *runnel.JobResult) {
	t.Helper()
	j := nexmark.New(nil)
	j.Query, j.Input = q, input
	return runJob(t, j, opts...)
}

// runJob runs the configured job j, with its Output set to a file of its own, as runQueryResult does.
func runJob(t *testing.T, j *nexmark.Job, opts ...runnel.Option) ([]string, *runnel.JobResult) {
	t.Helper()
	q := j.Query
	j.Output = filepath.Join(t.TempDir(), q+".jsonl")
	env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err := j.Build(env, run.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "nexmark-"+q)
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%s: %v: %+v", q, err, res)
	}
	if err := j.Summary(io.Discard, res); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(j.Output + ".parts"); !os.IsNotExist(err) {
		t.Errorf("%s: the parts directory is still there after the job finished (%v)", q, err)
	}
	b, err := os.ReadFile(j.Output)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil, res
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"), res
}

// sameLines compares two lists of lines as multisets, naming the first few differences.
func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	if slices.Equal(g, w) {
		return
	}
	count := map[string]int{}
	for _, l := range w {
		count[l]++
	}
	for _, l := range g {
		count[l]--
	}
	shown := 0
	for l, n := range count {
		if n != 0 && shown < 5 {
			t.Errorf("%s: line %s: %+d in the reference than in the output", what, l, n)
			shown++
		}
	}
	t.Errorf("%s: %d lines, the reference has %d", what, len(got), len(want))
}

// tied returns evs with its bids rewritten to tie: four auctions in turn and a few prices, so that windows
// have several auctions at the highest count (q5) and several bids at the highest price (q7); and for
// q4's inclusive end, each of those auctions expires exactly at its last bid before its expiry, which is
// made its highest.
func tied(evs []nexmark.Event) []nexmark.Event {
	// The same stream with its bids rewritten to tie: four auctions in turn and a few prices, so that
	// windows have several auctions at the highest count (q5) and several bids at the highest price (q7).
	ties := slices.Clone(evs)
	for i := range ties {
		if b := &ties[i].Bid; ties[i].Kind == nexmark.KindBid {
			b.Auction = 1107 + int64(i%4) // 1107 = 9·123, for q2; auctions of the stream, for q4
			b.Price = 100 * int64(1+i%13%3)
		}
	}
	// And q4's inclusive end: each of those auctions expires exactly at its last bid before its expiry,
	// which is made its highest.
	at := map[int64]int{} // auction id → index of the event
	last := map[int64]int{}
	for i, e := range ties {
		if e.Kind == nexmark.KindAuction {
			at[e.Auction.ID] = i
		}
		if e.Kind == nexmark.KindBid {
			if j, ok := at[e.Bid.Auction]; ok && e.Bid.DateTime <= ties[j].Auction.Expires {
				last[e.Bid.Auction] = i
			}
		}
	}
	for id, i := range last {
		ties[at[id]].Auction.Expires = ties[i].Bid.DateTime
		ties[i].Bid.Price = 1000
	}
	return ties
}

// TestNexmarkMatchesReference runs every query on a generated input whose events are shuffled out of
// dateTime order (within 2 s, under the default 4 s bound), through the example's own job (--input and
// --output, at parallelism 2 without chaining, so that every stage runs in parallel and over channels),
// and compares the output with the reference: lines as multisets, after comparableOutput (q4: its last
// line per category).
func TestNexmarkMatchesReference(t *testing.T) {
	// 50 events/s spaces dateTime 20 ms apart: 6000 events are two minutes, 12 tumbling windows and 60
	// hops, auctions that run for up to a minute, 120 people.
	generated := generate(t, nexmark.GeneratorConfig{Seed: 7, Rate: 50}, 6000)
	ties := tied(generated)
	for _, in := range []struct {
		name string
		evs  []nexmark.Event
	}{{"generated", generated}, {"ties", ties}} {
		input := filepath.Join(t.TempDir(), in.name+".jsonl")
		if err := os.WriteFile(input, jsonLines(shuffleWithin(in.evs, 2000, 7)), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, q := range nexmark.Queries {
			t.Run(in.name+"/"+q, func(t *testing.T) {
				ref, ok := references[q]
				if !ok {
					t.Fatalf("no reference for %s", q)
				}
				want := ref(in.evs)
				expectResults(t, in.name, q, want)
				got := runQuery(t, q, input, runnel.WithParallelism(2), runnel.WithChaining(false))
				if c, ok := comparableOutput[q]; ok {
					got = c(t, got)
				}
				sameLines(t, q, got, want)
			})
		}
	}
}

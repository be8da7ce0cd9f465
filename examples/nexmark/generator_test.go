package nexmark_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/nexmark"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestGeneratorGolden")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeContext is the RuntimeContext of one subtask, for driving readers without a job.
type fakeContext struct{ subtask, parallelism int }

func (c fakeContext) JobName() string      { return "test" }
func (c fakeContext) OperatorName() string { return "source" }
func (c fakeContext) TaskName() string {
	return fmt.Sprintf("source [%d/%d] #0", c.subtask+1, c.parallelism)
}
func (c fakeContext) SubtaskIndex() int           { return c.subtask }
func (c fakeContext) Parallelism() int            { return c.parallelism }
func (c fakeContext) MaxParallelism() int         { return 128 }
func (c fakeContext) Attempt() int                { return 0 }
func (c fakeContext) Logger() *slog.Logger        { return slog.New(slog.DiscardHandler) }
func (c fakeContext) Done() <-chan struct{}       { return nil }
func (c fakeContext) Checkpointing() bool         { return false }
func (c fakeContext) Metrics() runnel.MetricGroup { return nil }

// sliceCollector keeps what a reader emits.
type sliceCollector struct{ events []nexmark.Event }

func (c *sliceCollector) Collect(e nexmark.Event) { c.events = append(c.events, e) }

// maxPolls bounds every drain loop, so a reader that never ends fails the test instead of hanging it.
const maxPolls = 100_000

func newReader(t *testing.T, src runnel.Source[nexmark.Event], subtask, p int) runnel.SourceReader[nexmark.Event] {
	t.Helper()
	r, err := src.CreateReader(fakeContext{subtask, p})
	if err != nil {
		t.Fatalf("CreateReader(%d of %d): %v", subtask, p, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// poll polls r up to polls times (0: to its end) and returns what it emitted and whether it ended. A
// NothingAvailable waits on Available.
func poll(t *testing.T, r runnel.SourceReader[nexmark.Event], polls int) ([]nexmark.Event, bool) {
	t.Helper()
	out := &sliceCollector{}
	limit := polls
	if limit == 0 {
		limit = maxPolls
	}
	for range limit {
		st, err := r.PollNext(out)
		if err != nil {
			t.Fatalf("PollNext: %v", err)
		}
		switch st {
		case runnel.EndOfInput:
			return out.events, true
		case runnel.NothingAvailable:
			select {
			case <-r.Available():
			case <-time.After(10 * time.Second):
				t.Fatalf("Available not ready 10s after NothingAvailable")
			}
		}
	}
	if polls == 0 {
		t.Fatalf("reader did not end after %d polls (%d events)", maxPolls, len(out.events))
	}
	return out.events, false
}

// generate returns events 0 … n−1 of cfg's stream from a Generator.
func generate(t testing.TB, cfg nexmark.GeneratorConfig, n uint64) []nexmark.Event {
	t.Helper()
	g, err := nexmark.NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]nexmark.Event, n)
	for i := range n {
		g.Event(i, &evs[i])
	}
	return evs
}

func jsonLines(evs []nexmark.Event) []byte {
	var b []byte
	for i := range evs {
		b = append(nexmark.AppendEvent(b, &evs[i]), '\n')
	}
	return b
}

// TestGeneratorGolden pins the generator to the golden files that bench/flink's GeneratorGoldenTest reads
// too: generator-1000.jsonl is the default stream (seed 0, rate 0, the default base time), the other a
// seeded stream at a low rate, where timestamps and auction lengths vary. -update rewrites them.
func TestGeneratorGolden(t *testing.T) {
	for _, tc := range []struct {
		file   string
		cfg    nexmark.GeneratorConfig
		events uint64
	}{
		{"generator-1000.jsonl", nexmark.GeneratorConfig{}, 1000},
		{"generator-seed42-rate1000-300.jsonl", nexmark.GeneratorConfig{Seed: 42, Rate: 1000}, 300},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got := jsonLines(generate(t, tc.cfg, tc.events))
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if bytes.Equal(got, want) {
				return
			}
			g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
			for i := range min(len(g), len(w)) {
				if g[i] != w[i] {
					t.Fatalf("line %d differs:\n got %s\nwant %s", i+1, g[i], w[i])
				}
			}
			t.Fatalf("got %d lines, want %d", len(g), len(w))
		})
	}
}

// TestGeneratorFollowsTheModel checks the model's rules over a long stream, independently of the golden
// file: proportions, ids, time, categories, states, prices, references and the average sizes.
func TestGeneratorFollowsTheModel(t *testing.T) {
	const n = 50_000
	cfg := nexmark.GeneratorConfig{Seed: 7, Rate: 2000}
	evs := generate(t, cfg, n)
	var kinds [3]int
	var sizes [3]int
	nextPerson, nextAuction := int64(1000), int64(1000)
	for i := range evs {
		e := &evs[i]
		if want := nexmark.DefaultBaseTime + int64(i)/2; e.DateTime() != want {
			t.Fatalf("event %d: dateTime %d, want %d", i, e.DateTime(), want)
		}
		kinds[e.Kind]++
		sizes[e.Kind] += len(nexmark.AppendEvent(nil, e))
		switch e.Kind {
		case nexmark.KindPerson:
			p := e.Person
			if p.ID != nextPerson {
				t.Fatalf("event %d: person id %d, want %d", i, p.ID, nextPerson)
			}
			nextPerson++
			if !slices.Contains([]string{"AZ", "CA", "ID", "OR", "WA", "WY"}, p.State) || p.City == "" || len(p.CreditCard) != 19 {
				t.Fatalf("event %d: bad person %+v", i, p)
			}
		case nexmark.KindAuction:
			a := e.Auction
			if a.ID != nextAuction {
				t.Fatalf("event %d: auction id %d, want %d", i, a.ID, nextAuction)
			}
			nextAuction++
			if a.Category < 10 || a.Category > 14 || a.Expires <= a.DateTime || a.Reserve <= a.InitialBid ||
				a.Seller < 1000 || a.Seller >= nextPerson+10 {
				t.Fatalf("event %d: bad auction %+v", i, a)
			}
		case nexmark.KindBid:
			b := e.Bid
			if b.Price < 100 || b.Price >= 100_000_000 || b.Auction < 1000 || b.Auction >= nextAuction+10 ||
				b.Bidder < 1000 || b.Bidder >= nextPerson+10 || !strings.HasPrefix(b.URL, "https://www.nexmark.com/") {
				t.Fatalf("event %d: bad bid %+v", i, b)
			}
		}
	}
	if kinds != [3]int{n / 50, n / 50 * 3, n / 50 * 46} {
		t.Fatalf("kinds %v, want 1:3:46 of %d", kinds, n)
	}
	// The model's average sizes count the fields' bytes, not JSON's: allow for keys and quotes.
	for k, avg := range []int{200, 500, 100} {
		got := sizes[k] / kinds[k]
		if got < avg || got > avg+200 {
			t.Errorf("%s: average JSON size %d bytes, want about %d plus the keys", nexmark.Kind(k), got, avg)
		}
	}
}

// TestSubtasksGenerateTheStream: the subtasks of every parallelism together generate exactly the stream of
// parallelism 1, subtask s the events n ≡ s (mod P) in order; bounded and also when P does not divide it.
func TestSubtasksGenerateTheStream(t *testing.T) {
	const events = 3001
	cfg := nexmark.GeneratorConfig{Seed: 3, Events: events}
	want := generate(t, cfg, events)
	for _, p := range []int{1, 2, 3, 7} {
		t.Run(fmt.Sprint("p=", p), func(t *testing.T) {
			src := nexmark.Source(cfg)
			got := make([]nexmark.Event, events)
			total := 0
			for s := range p {
				evs, _ := poll(t, newReader(t, src, s, p), 0)
				for i := range evs {
					n := s + i*p
					if n >= events {
						t.Fatalf("subtask %d emitted more than its share", s)
					}
					got[n] = evs[i]
				}
				total += len(evs)
			}
			if total != events {
				t.Fatalf("%d events over %d subtasks, want %d", total, p, events)
			}
			for n := range got {
				if got[n] != want[n] {
					t.Fatalf("event %d differs:\n got %+v\nwant %+v", n, got[n], want[n])
				}
			}
		})
	}
}

// TestSourceRestore: a reader restored from a snapshot continues with exactly the events after it.
func TestSourceRestore(t *testing.T) {
	cfg := nexmark.GeneratorConfig{Events: 5000}
	all := generate(t, cfg, 5000)
	for _, tc := range []struct {
		name        string
		subtask, p  int
		pollsBefore int
	}{
		{"start", 0, 1, 0},
		{"middle", 1, 3, 2},
		{"end", 0, 2, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := nexmark.Source(cfg)
			first := newReader(t, src, tc.subtask, tc.p)
			var before []nexmark.Event
			if tc.pollsBefore > 0 {
				before, _ = poll(t, first, tc.pollsBefore)
			}
			state, err := first.(runnel.CheckpointedReader).SnapshotState(1)
			if err != nil {
				t.Fatal(err)
			}
			r := newReader(t, src, tc.subtask, tc.p)
			if err := r.(runnel.CheckpointedReader).RestoreState(state); err != nil {
				t.Fatalf("RestoreState(% x): %v", state, err)
			}
			after, _ := poll(t, r, 0)
			var want []nexmark.Event
			for n := tc.subtask; n < len(all); n += tc.p {
				want = append(want, all[n])
			}
			if got := append(before, after...); !slices.Equal(got, want) {
				t.Fatalf("before and after the restore %d+%d events, want %d in order", len(before), len(after), len(want))
			}
		})
	}
}

// TestSourceRefusesBadState names the problem for a position of another subtask, past the end, or garbage.
func TestSourceRefusesBadState(t *testing.T) {
	src := nexmark.Source(nexmark.GeneratorConfig{Events: 100})
	for _, tc := range []struct {
		name  string
		state []byte
	}{
		{"empty", nil},
		{"another subtask's n", []byte{4}},
		{"past the end", []byte{103}},
		{"trailing bytes", []byte{3, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newReader(t, src, 1, 2).(runnel.CheckpointedReader).RestoreState(tc.state)
			if err == nil || !strings.Contains(err.Error(), "bad checkpointed position") {
				t.Fatalf("RestoreState(% x) = %v, want a bad position error", tc.state, err)
			}
		})
	}
	if _, err := nexmark.Source(nexmark.GeneratorConfig{Rate: -1}).CreateReader(fakeContext{0, 1}); err == nil {
		t.Fatal("a negative rate was accepted")
	}
}

// TestSourceThrottles: at a rate of R events/s, N events take at least (N−1)/R seconds.
func TestSourceThrottles(t *testing.T) {
	const events, rate = 400, 2000
	src := nexmark.Source(nexmark.GeneratorConfig{Events: events, Rate: rate})
	start := time.Now()
	evs, _ := poll(t, newReader(t, src, 0, 1), 0)
	elapsed := time.Since(start)
	if len(evs) != events {
		t.Fatalf("%d events, want %d", len(evs), events)
	}
	if least := time.Duration(float64(events-1) / rate * float64(time.Second)); elapsed < least {
		t.Fatalf("%d events in %s, less than the %s the rate allows", events, elapsed, least)
	}
	if last := evs[events-1].DateTime(); last != nexmark.DefaultBaseTime+(events-1)*1000/rate {
		t.Fatalf("last dateTime %d", last)
	}
}

// readLines reads a file's lines.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

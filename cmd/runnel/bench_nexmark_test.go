package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/examples/nexmark"
)

// nexmarkFields are the fields of each query's output lines, in the order.
var nexmarkFields = map[string][]string{
	"q0":  {"auction", "bidder", "price", "channel", "url", "dateTime", "extra"},
	"q1":  {"auction", "bidder", "price", "dateTime"},
	"q2":  {"auction", "price"},
	"q3":  {"name", "city", "state", "id"},
	"q4":  {"category", "avg"},
	"q5":  {"auction", "num", "window_start", "window_end"},
	"q7":  {"auction", "price", "bidder", "dateTime", "window_end"},
	"q8":  {"id", "name", "window_start"},
	"q15": {"day", "total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "total_bidders", "rank1_bidders", "rank2_bidders", "rank3_bidders", "total_auctions", "rank1_auctions", "rank2_auctions", "rank3_auctions"},
	"q16": {"channel", "day", "minute", "total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "total_bidders", "rank1_bidders", "rank2_bidders", "rank3_bidders", "total_auctions", "rank1_auctions", "rank2_auctions", "rank3_auctions"},
	"q17": {"auction", "day", "total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "min_price", "max_price", "avg_price", "sum_price"},
	"q18": {"auction", "bidder", "price", "channel", "url", "dateTime", "extra"},
	"q19": {"auction", "bidder", "price", "channel", "url", "dateTime", "extra", "rank_number"},
	"q20": {"auction", "bidder", "price", "channel", "url", "bid_dateTime", "bid_extra", "itemName", "description", "initialBid", "reserve", "auction_dateTime", "expires", "seller", "category", "auction_extra"},
	"q21": {"auction", "bidder", "price", "channel", "channel_id"},
	"q22": {"auction", "bidder", "price", "channel", "dir1", "dir2", "dir3"},
	"q6":  {"seller", "avg_price"},
	"q9": {"id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires", "seller", "category", "extra",
		"auction", "bidder", "price", "bid_dateTime", "bid_extra"},
	"q11": {"bidder", "bid_count", "starttime", "endtime"},
	"q12": {"bidder", "bid_count", "starttime", "endtime"},
	"q13": {"auction", "bidder", "price", "dateTime", "value"},
	"q14": {"auction", "bidder", "price", "bidTimeType", "dateTime", "extra", "c_counts"},
}

// keysInOrder returns the keys of the JSON object line, in the order they appear.
func keysInOrder(t *testing.T, line string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s (%v)", line, err)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		keys = append(keys, k.(string))
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if _, isObj := v.(map[string]any); isObj {
			t.Fatalf("%s: a nested object under %s", line, k)
		}
	}
	return keys
}

func readJSONLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// writeNexmarkInput writes events 0 … n−1 of the generator at rate 50 (dateTime 20 ms apart, so that the
// stream spans many windows) as a JSON lines file.
func writeNexmarkInput(t *testing.T, n uint64) string {
	t.Helper()
	g, err := nexmark.NewGenerator(nexmark.GeneratorConfig{Seed: 3, Rate: 50})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	var e nexmark.Event
	for i := range n {
		g.Event(i, &e)
		b.Write(nexmark.AppendEvent(nil, &e))
		b.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var resultsWritten = regexp.MustCompile(`nexmark (q\d+): (\d+) results written to `)

// TestRunNexmark runs every query through the command with --input and --output: each writes JSON lines
// with the fields in its order and removes its parts directory; then two queries again with
// checkpoints and injected failures (q5 in its window operator and its keyed process, q0 in its file
// sink, q8 in its co-group window, q4 in its co-process), whose output equals the failure-free run's (q4:
// its last line per category).
func TestRunNexmark(t *testing.T) {
	input := writeNexmarkInput(t, 8_000)
	dir := t.TempDir()
	outputs := map[string][]string{}
	for _, q := range nexmark.Queries {
		t.Run(q, func(t *testing.T) {
			out := filepath.Join(dir, q+".jsonl")
			stdout, stderr, code := runCLI(t, "run", "nexmark", "--query", q, "--input", input, "--output", out, "--parallelism", "2")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			lines := readJSONLines(t, out)
			m := resultsWritten.FindStringSubmatch(stdout)
			if len(lines) == 0 || m == nil || m[1] != q || m[2] != strconv.Itoa(len(lines)) {
				t.Fatalf("%d lines in %s; stdout:\n%s", len(lines), out, stdout)
			}
			for _, l := range lines {
				if keys := keysInOrder(t, l); !slices.Equal(keys, nexmarkFields[q]) {
					t.Fatalf("line %s: keys %v, want %v", l, keys, nexmarkFields[q])
				}
			}
			if _, err := os.Stat(out + ".parts"); !os.IsNotExist(err) {
				t.Fatalf("parts directory left behind: %v", err)
			}
			outputs[q] = lines
		})
	}
	for _, tc := range []struct {
		query  string
		inject []string
	}{
		{"q5", []string{"count[1]@2000", "hottest[0]@500"}},
		{"q0", []string{"sink[0]@3000"}},
		{"q8", []string{"new-users[1]@200"}},
		{"q4", []string{"closing-price[0]@1500"}},
	} {
		t.Run(tc.query+" with failures", func(t *testing.T) {
			want, ok := outputs[tc.query]
			if !ok {
				t.Skipf("%s did not run", tc.query)
			}
			out, report := filepath.Join(t.TempDir(), "out.jsonl"), filepath.Join(t.TempDir(), "report.json")
			args := []string{"run", "nexmark", "--query", tc.query, "--input", input, "--output", out, "--parallelism", "2",
				"--checkpoint-interval", "20ms", "--restart-strategy", "fixed-delay:attempts=5,delay=10ms", "--report", report}
			for _, s := range tc.inject {
				args = append(args, "--inject-failure", s)
			}
			_, stderr, code := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, stderr)
			}
			var r struct {
				Failovers []struct {
					CheckpointRestored *int64 `json:"checkpoint_restored"`
				} `json:"failovers"`
				Results int64 `json:"results"`
			}
			b, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			// Every injection fires once; two may land in one failover, when the second subtask reaches its
			// count while the first failure's restart is cancelling it (a failure of a task being cancelled
			// is part of the failover under way), which depends on timing.
			if len(r.Failovers) < 1 || len(r.Failovers) > len(tc.inject) {
				t.Fatalf("%d failovers, want 1 to %d: %s", len(r.Failovers), len(tc.inject), b)
			}
			restored := 0
			for _, f := range r.Failovers {
				if f.CheckpointRestored != nil {
					restored++
				}
			}
			t.Logf("%d of %d failovers restored a checkpoint", restored, len(r.Failovers))
			got := readJSONLines(t, out)
			if r.Results != int64(len(got)) {
				t.Errorf("report says %d results, the file has %d", r.Results, len(got))
			}
			if tc.query == "q4" {
				// An update stream whose order across auctions depends on arrival: its result is the
				// last line per category.
				got, want = lastPerCategory(t, got), lastPerCategory(t, want)
			}
			g, w := slices.Clone(got), slices.Clone(want)
			slices.Sort(g)
			slices.Sort(w)
			if !slices.Equal(g, w) {
				t.Fatalf("%d lines with failures, %d without; they differ", len(got), len(want))
			}
		})
	}
}

// lastPerCategory keeps q4's last line per category.
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

// TestBenchNexmark runs the benchmark briefly: the throughput run's JSON, with checkpoints, under the
// default failover (with its CPU and allocation profiles) and under task failover, and the memory run's
// RSS samples.
func TestBenchNexmark(t *testing.T) {
	profiles := t.TempDir()
	cpu, mem := filepath.Join(profiles, "cpu.prof"), filepath.Join(profiles, "mem.prof")
	for _, failover := range []string{"", "task"} {
		args := []string{"bench", "nexmark", "--query", "q5", "--events", "50000", "--runs", "2", "--checkpoint-interval", "50ms", "--json",
			"--warmup", "1", "--warmup-events", "20000"}
		if failover != "" {
			args = append(args, "--failover", failover)
		} else {
			args = append(args, "--cpuprofile", cpu, "--memprofile", mem)
		}
		stdout, stderr, code := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, stderr)
		}
		var res nexmarkBenchResult
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
		if res.Query != "q5" || res.Parallelism != 2 || len(res.Runs) != 2 || res.EventsPerS <= 0 || res.Failover != failover ||
			res.WarmupRuns != 1 || res.EventsPerSMin > res.EventsPerS || res.EventsPerS > res.EventsPerSMax ||
			res.Setup.GOMAXPROCS < 1 || res.Setup.StateBackend != "memory" {
			t.Fatalf("result: %s", stdout)
		}
		for _, r := range res.Runs {
			if r.Events != 50_000 || r.Results < 1 || r.Elapsed <= 0 || r.EventsPerS <= 0 {
				t.Fatalf("run: %s", stdout)
			}
		}
	}

	for _, f := range []string{cpu, mem} {
		// A profile is a gzipped protocol buffer.
		if b, err := os.ReadFile(f); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Fatalf("%s: %d bytes, %v", f, len(b), err)
		}
	}

	stdout, stderr, code := runCLI(t, "bench", "nexmark", "--query", "q0", "--rate", "20000", "--duration", "1500ms",
		"--rss-every", "400ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	var samples []rssSample
	dec := json.NewDecoder(strings.NewReader(stdout))
	for dec.More() {
		var s rssSample
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
		samples = append(samples, s)
	}
	if len(samples) < 2 || samples[0].RSS <= 0 || samples[len(samples)-1].Events <= samples[0].Events {
		t.Fatalf("samples: %s", stdout)
	}

	// The limit: the generator alone, all the events, and none of a job's settings.
	stdout, stderr, code = runCLI(t, "bench", "nexmark", "--limit", "--events", "30001", "--runs", "3", "--json",
		"--warmup", "1", "--warmup-events", "1000")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	var limit nexmarkBenchResult
	if err := json.Unmarshal([]byte(stdout), &limit); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if limit.Query != "limit" || !limit.Limit || limit.Parallelism != 2 || len(limit.Runs) != 3 || limit.EventsPerS <= 0 ||
		limit.WarmupRuns != 1 || limit.Setup.GOMAXPROCS < 1 {
		t.Fatalf("limit: %s", stdout)
	}
	for _, r := range limit.Runs {
		if r.Events != 30_001 || r.Elapsed <= 0 || r.EventsPerS <= 0 {
			t.Fatalf("limit run: %s", stdout)
		}
	}
	for _, args := range [][]string{{"--query", "q0"}, {"--checkpoint-interval", "1s"}, {"--rate", "10", "--duration", "1s"}} {
		_, stderr, code = runCLI(t, append([]string{"bench", "nexmark", "--limit"}, args...)...)
		if code != 2 || !strings.Contains(stderr, "--limit measures the generator alone") {
			t.Fatalf("--limit %v: exit %d:\n%s", args, code, stderr)
		}
	}

	_, stderr, code = runCLI(t, "bench", "nexmark", "--query", "q99")
	if code != 2 || !strings.Contains(stderr, `invalid --query "q99"`) {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	_, stderr, code = runCLI(t, "bench", "nexmark", "--query", "q5", "--warmup", "-1")
	if code != 2 || !strings.Contains(stderr, `invalid --warmup -1`) {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	_, stderr, code = runCLI(t, "bench", "nexmark", "--query", "q5", "--failover", "nope")
	if code != 2 || !strings.Contains(stderr, `invalid --failover "nope"`) {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
}

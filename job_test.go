package runnel_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

type wordCount struct {
	Word  string
	Count int64
}

func tokenize(line string, out runnel.Collector[wordCount]) error {
	for _, w := range strings.FieldsFunc(line, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		out.Collect(wordCount{Word: strings.ToLower(w), Count: 1})
	}
	return nil
}

func TestWordCountSmoke(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []runnel.Option
	}{
		{"local", []runnel.Option{runnel.WithParallelism(2)}},
		{"tcp", []runnel.Option{runnel.WithParallelism(2), runnel.WithTaskManagers(2)}},
		{"unchained tiny buffers", []runnel.Option{runnel.WithParallelism(3), runnel.WithTaskManagers(2), runnel.WithChaining(false), runnel.WithBufferSize(64)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(tc.opts...)
			lines := runnel.FromSource(env, connector.Collection([]string{"a b", "b c c", "The the THE", "x"})).Name("lines")
			words := runnel.FlatMap(lines, tokenize).Name("tokenize").WithCodec(codec.MustStruct[wordCount]())
			counts := runnel.Reduce(runnel.KeyBy(words, func(w wordCount) string { return w.Word }),
				func(a, b wordCount) (wordCount, error) { a.Count += b.Count; return a, nil }).Name("count")
			sink := connector.NewCollect[wordCount]()
			counts.SinkTo(sink).Name("collect")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "wc")
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != "FINISHED" {
				t.Fatalf("status %s", res.Status)
			}
			final := map[string]int64{}
			for _, r := range sink.Records() {
				if r.Count > final[r.Word] {
					final[r.Word] = r.Count
				}
			}
			want := map[string]int64{"a": 1, "b": 2, "c": 2, "the": 3, "x": 1}
			var keys []string
			for k := range final {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if len(final) != len(want) {
				t.Fatalf("got %v", final)
			}
			for k, v := range want {
				if final[k] != v {
					t.Fatalf("count[%s] = %d, want %d (all %v)", k, final[k], v, final)
				}
			}
		})
	}
}

// TestBufferTimeoutBoundsLatencyOfSlowSource pins that the buffer timeout, not the buffer size, bounds how
// long a record of a slow (rate-limited) source waits before it crosses the network: the source spends most
// of its time waiting for its next record, and a flush missed there held records until a buffer filled
// (about 15 s at this rate; 30 ms stalls in the recovery benchmark).
func TestBufferTimeoutBoundsLatencyOfSlowSource(t *testing.T) {
	for _, tc := range []struct {
		name string
		tms  int
	}{{"local", 1}, {"tcp", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithTaskManagers(tc.tms),
				runnel.WithChaining(false), runnel.WithBufferTimeout(5*time.Millisecond))
			const want = 20
			got := make(chan struct{})
			n := 0
			src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
				connector.GeneratorOptions{RatePerSubtask: 200})).Name("slow")
			runnel.Map(src, func(v int64) (int64, error) {
				if n++; n == want {
					close(got)
				}
				return v, nil
			}).Name("count").SinkTo(connector.Discard[int64]())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { _, err := env.Execute(ctx, "latency"); done <- err }()
			start := time.Now()
			select {
			case <-got:
				// 20 records at 200/s take 100 ms to produce; anything near a second means flushes are missed.
				if d := time.Since(start); d > 3*time.Second {
					t.Fatalf("%d records took %s to arrive", want, d)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%d records of a 200/s source did not cross a 5 ms buffer timeout in 10 s", want)
			case err := <-done:
				t.Fatalf("job ended early: %v", err)
			}
			cancel()
			<-done
		})
	}
}

// TestRecordsOfVaryingSizeCrossIntact sends records whose encoded sizes grow and shrink over a task
// boundary, with buffers small enough that records outgrow the space left in a buffer (the writer's
// in-place encoding then falls back to a copy) and large enough that one buffer carries more records than
// one batch of the reader; every record must arrive intact and in order.
func TestRecordsOfVaryingSizeCrossIntact(t *testing.T) {
	text := func(seq uint64) string {
		n := int(seq*37%301) + int(seq%5)*1000*int(seq%7/6) // mostly short, now and then a few thousand bytes
		return strings.Repeat(string(rune('a'+seq%26)), n)
	}
	for _, tc := range []struct {
		name    string
		bufSize int
		records uint64
		short   bool
	}{
		{"small buffers", 256, 3000, false},
		{"many per buffer", 32 << 10, 20000, true},
	} {
		for _, tms := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/tms=%d", tc.name, tms), func(t *testing.T) {
				env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithTaskManagers(tms),
					runnel.WithChaining(false), runnel.WithBufferSize(tc.bufSize))
				gen := func(_ int, seq uint64) string {
					if tc.short {
						return text(seq)[:min(2, len(text(seq)))]
					}
					return text(seq)
				}
				src := runnel.FromSource(env, connector.Generator(gen, connector.GeneratorOptions{RecordsPerSubtask: tc.records}))
				sink := connector.NewCollect[string]()
				runnel.Map(src, func(s string) (string, error) { return s, nil }).Name("pass").SinkTo(sink)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if _, err := env.Execute(ctx, "sizes"); err != nil {
					t.Fatal(err)
				}
				got := sink.Records()
				if uint64(len(got)) != tc.records {
					t.Fatalf("got %d records, want %d", len(got), tc.records)
				}
				for i, s := range got {
					if want := gen(0, uint64(i)); s != want {
						t.Fatalf("record %d: got %d bytes %.10q, want %d bytes %.10q", i, len(s), s, len(want), want)
					}
				}
			})
		}
	}
}

// TestMetricsEndpoint scrapes a running job's Prometheus endpoint over real HTTP: the per-subtask record
// counters grow, checkpoints and failovers are counted, and the server is gone once Execute returned.
func TestMetricsEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/metrics"
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithChaining(false), runnel.WithMetricsListener(ln),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond, ApproximateLocalRecovery: true}),
		runnel.WithFailureInjection("double[1]@2000"), runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"))
	src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
		connector.GeneratorOptions{RatePerSubtask: 20_000})).Name("numbers")
	runnel.Map(src, func(v int64) (int64, error) { return 2 * v, nil }).Name("double").SinkTo(connector.Discard[int64]()).Name("sink")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := env.Execute(ctx, "metered"); done <- err }()

	scrape := func() string {
		resp, err := http.Get(url)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	want := []string{
		`runnel_job_status{job="metered",status="RUNNING"} 1`,
		`runnel_records_out_total{job="metered",subtask="0",vertex="numbers"}`,
		`runnel_subtask_attempt{job="metered",subtask="1",vertex="double"} 1`,
		`runnel_failovers_total{job="metered",strategy="approximate"} 1`,
		`runnel_checkpoints_completed_total{job="metered"}`,
		`runnel_records_lost_total{job="metered"}`,
		"go_goroutines",
	}
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		body = scrape()
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = w
				break
			}
		}
		if missing == "" && !strings.Contains(body, `runnel_records_out_total{job="metered",subtask="0",vertex="numbers"} 0`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s the metrics lack %q:\n%s", missing, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
	if _, err := http.Get(url); err == nil {
		t.Fatal("the metrics server still answers after Execute returned")
	}
}

package runnel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// pacedSink writes at most rate records per second: record n is written no sooner than n/rate seconds
// after the first. Its writer sleeps in Write, which is the subtask's work (busy), as a slow external
// system would be.
type pacedSink struct{ rate float64 }

func (s pacedSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[int64], error) {
	return &pacedWriter{rate: s.rate}, nil
}

type pacedWriter struct {
	rate  float64
	start time.Time
	n     int64
}

func (w *pacedWriter) Write(int64) error {
	if w.start.IsZero() {
		w.start = time.Now()
	}
	w.n++
	due := w.start.Add(time.Duration(float64(w.n) / w.rate * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
	return nil
}

func (w *pacedWriter) Flush() error { return nil }
func (w *pacedWriter) Close() error { return nil }

// silentSource emits nothing and never ends: its subtasks wait for a record that never comes.
type silentSource struct{}

func (silentSource) CreateReader(runnel.RuntimeContext) (runnel.SourceReader[int64], error) {
	return silentReader{}, nil
}

type silentReader struct{}

func (silentReader) PollNext(runnel.Collector[int64]) (runnel.InputStatus, error) {
	return runnel.NothingAvailable, nil
}
func (silentReader) Available() <-chan struct{} { return nil }
func (silentReader) Close() error               { return nil }

// runWatched runs env's job until done says the live result is what the test waits for (or 30 s pass),
// then cancels it; it returns that live result and the job's final one.
func runWatched(t *testing.T, env *runnel.Environment, latest *atomic.Pointer[runnel.JobResult], done func(*runnel.JobResult) bool) (live, final *runnel.JobResult) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ending struct {
		r   *runnel.JobResult
		err error
	}
	ended := make(chan ending, 1)
	go func() { r, err := env.Execute(ctx, "times"); ended <- ending{r, err} }()
	deadline := time.Now().Add(30 * time.Second)
	for live == nil {
		if r := latest.Load(); r != nil && done(r) {
			live = r
			break
		}
		select {
		case e := <-ended:
			t.Fatalf("the job ended before the condition held: %v", e.err)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			<-ended
			t.Fatalf("after 30 s the condition does not hold; the last result:\n%s", timesOf(latest.Load()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	e := <-ended
	if e.err != nil {
		t.Fatalf("job: %v", e.err)
	}
	return live, e.r
}

// timesOf lists the time per second of every subtask of r, for failure messages.
func timesOf(r *runnel.JobResult) string {
	if r == nil {
		return "(none)"
	}
	var b strings.Builder
	for _, v := range r.Vertices {
		fmt.Fprintf(&b, "%s: busy %d, backpressured %d, idle %d\n", v.Name, v.BusyMsPerSecond, v.BackpressuredMsPerSecond, v.IdleMsPerSecond)
		for _, s := range v.Subtasks {
			fmt.Fprintf(&b, "  [%d] %s: busy %d, backpressured %d, idle %d\n", s.Index, s.State, s.BusyMsPerSecond, s.BackpressuredMsPerSecond, s.IdleMsPerSecond)
		}
	}
	return b.String()
}

// checkSums checks that the three times of every running subtask add up to a second, and that each
// vertex shows the highest of its subtasks'.
func checkSums(t *testing.T, r *runnel.JobResult) {
	t.Helper()
	for _, v := range r.Vertices {
		var busy, bp, idle int64
		for _, s := range v.Subtasks {
			if s.State != "RUNNING" {
				continue
			}
			if sum := s.BusyMsPerSecond + s.BackpressuredMsPerSecond + s.IdleMsPerSecond; sum < 998 || sum > 1002 {
				t.Errorf("%s[%d]: busy, backpressured and idle add up to %d ms per second, want 1000:\n%s", v.Name, s.Index, sum, timesOf(r))
			}
			busy, bp, idle = max(busy, s.BusyMsPerSecond), max(bp, s.BackpressuredMsPerSecond), max(idle, s.IdleMsPerSecond)
		}
		if v.BusyMsPerSecond != busy || v.BackpressuredMsPerSecond != bp || v.IdleMsPerSecond != idle {
			t.Errorf("%s shows %d/%d/%d, want the highest of its running subtasks' %d/%d/%d", v.Name,
				v.BusyMsPerSecond, v.BackpressuredMsPerSecond, v.IdleMsPerSecond, busy, bp, idle)
		}
	}
}

// TestBackpressureOfSlowSink runs a source at 2,000 records per second into a sink that writes 1,000, in
// separate tasks: once the source's output buffers are full, it waits for them nearly all the time
// (backpressured past 900 ms per second), and the sink is busy writing. The live result says so, and
// /metrics agrees (past 500: it is read a moment later).
func TestBackpressureOfSlowSink(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/metrics"
	var latest atomic.Pointer[runnel.JobResult]
	// Small buffers: the source's six output buffers fill with a few hundred records, not tens of
	// thousands, so that the backpressure starts within a second.
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithChaining(false), runnel.WithBufferSize(1024),
		runnel.WithMetricsListener(ln), runnel.WithProgress(50*time.Millisecond, func(r *runnel.JobResult) { latest.Store(r) }))
	src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
		connector.GeneratorOptions{RatePerSubtask: 2000})).Name("numbers")
	src.SinkTo(pacedSink{rate: 1000}).Name("slow")

	scraped := func() (bp, busy float64, ok bool) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, 0, false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		value := func(metric, vertex string) (float64, bool) {
			m := regexp.MustCompile(`(?m)^runnel_subtask_` + metric + `\{job="times",subtask="0",vertex="` + vertex + `"\} (\S+)$`).FindSubmatch(body)
			if m == nil {
				return 0, false
			}
			v, err := strconv.ParseFloat(string(m[1]), 64)
			return v, err == nil
		}
		bp, ok1 := value("backpressured_ms_per_second", "numbers")
		busy, ok2 := value("busy_ms_per_second", "slow")
		return bp, busy, ok1 && ok2
	}
	var metricsAgree bool
	r, _ := runWatched(t, env, &latest, func(r *runnel.JobResult) bool {
		src, sink := r.Vertex("numbers"), r.Vertex("slow")
		if src.BackpressuredMsPerSecond <= 900 || sink.BusyMsPerSecond <= 900 {
			return false
		}
		bp, busy, ok := scraped()
		metricsAgree = ok && bp > 500 && busy > 500
		return metricsAgree
	})
	t.Logf("the live result:\n%s", timesOf(r))
	checkSums(t, r)
	if sink := r.Vertex("slow"); sink.BackpressuredMsPerSecond > 100 {
		t.Errorf("the sink, which has no output, is backpressured %d ms per second:\n%s", sink.BackpressuredMsPerSecond, timesOf(r))
	}
	js, err := json.Marshal(r.Vertex("numbers").Subtasks[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"busy_ms_per_s":`, `"backpressured_ms_per_s":`, `"idle_ms_per_s":`} {
		if !strings.Contains(string(js), key) {
			t.Errorf("the subtask's JSON has no %s: %s", key, js)
		}
	}
}

// TestIdlePipelineIsIdle runs a source that emits nothing into a sink, in separate tasks: both wait for
// input all the time (idle), neither is busy nor backpressured; and once the job is cancelled its subtasks
// show no time at all.
func TestIdlePipelineIsIdle(t *testing.T) {
	var latest atomic.Pointer[runnel.JobResult]
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithChaining(false),
		runnel.WithProgress(50*time.Millisecond, func(r *runnel.JobResult) { latest.Store(r) }))
	runnel.FromSource[int64](env, silentSource{}).Name("silent").SinkTo(connector.Discard[int64]()).Name("sink")
	r, final := runWatched(t, env, &latest, func(r *runnel.JobResult) bool {
		for _, v := range r.Vertices {
			for _, s := range v.Subtasks {
				if s.State != "RUNNING" || s.IdleMsPerSecond < 950 {
					return false
				}
			}
		}
		return true
	})
	t.Logf("the live result:\n%s", timesOf(r))
	checkSums(t, r)
	for _, v := range r.Vertices {
		if v.BusyMsPerSecond > 50 || v.BackpressuredMsPerSecond != 0 {
			t.Errorf("%s of an idle pipeline is busy %d and backpressured %d ms per second:\n%s", v.Name,
				v.BusyMsPerSecond, v.BackpressuredMsPerSecond, timesOf(r))
		}
	}
	// Cancelled, the subtasks no longer run: they report no time.
	for _, v := range final.Vertices {
		if v.BusyMsPerSecond != 0 || v.BackpressuredMsPerSecond != 0 || v.IdleMsPerSecond != 0 {
			t.Errorf("%s of a cancelled job shows time:\n%s", v.Name, timesOf(final))
		}
		for _, s := range v.Subtasks {
			if s.State == "RUNNING" || s.BusyMsPerSecond != 0 || s.BackpressuredMsPerSecond != 0 || s.IdleMsPerSecond != 0 {
				t.Errorf("%s[%d] of a cancelled job:\n%s", v.Name, s.Index, timesOf(final))
			}
		}
	}
}

package runnel_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// TestInflightLogMetrics scrapes a task-failover job on two TaskManagers whose in-flight logs have 8 MiB of
// memory: each TaskManager shows its logs' memory against that limit, and its spiller's bytes on disk and
// written, growing past what the memory holds. (With 1 MiB, one chunk for a TaskManager's two logs, the
// logs found no chunk and dropped what they held, disk included, so often that on a loaded machine the
// disk was rarely past 1 MiB when scraped.)
func TestInflightLogMetrics(t *testing.T) {
	const memory = 8 << 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/metrics"
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithTaskManagers(2), runnel.WithChaining(false),
		runnel.WithMetricsListener(ln), runnel.WithFailover("task"), runnel.WithInflightLogMemory(memory),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Second}))
	src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
		connector.GeneratorOptions{RatePerSubtask: 200_000})).Name("numbers")
	runnel.Map(src, func(v int64) (int64, error) { return 2 * v, nil }).Name("double").SinkTo(connector.Discard[int64]()).Name("sink")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := env.Execute(ctx, "logged"); done <- err }()

	value := func(body, metric, tm string) (float64, bool) {
		m := regexp.MustCompile(`(?m)^runnel_inflight_log_` + metric + `\{taskmanager="` + tm + `"\} (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(m[1], 64)
		return v, err == nil
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, tm := range []string{"tm-1", "tm-2"} {
		for {
			body := scrapeOnce(url)
			limit, _ := value(body, "memory_limit_bytes", tm)
			mem, okMem := value(body, "memory_bytes", tm)
			disk, _ := value(body, "disk_bytes", tm)
			spilled, _ := value(body, "spilled_bytes_total", tm)
			logs, _ := value(body, "logs", tm)
			if limit != memory && body != "" {
				t.Fatalf("%s: memory limit %v, want %d:\n%s", tm, limit, memory, body)
			}
			if mem > limit {
				t.Fatalf("%s: the logs hold %v bytes of memory, past the limit %v", tm, mem, limit)
			}
			// Records at 200,000/s of 8 bytes and more for ten seconds between checkpoints: past 8 MiB
			// within a few seconds.
			if okMem && disk > 1<<20 && spilled >= disk && logs >= 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after 15 s, %v bytes in memory, %v on disk, %v spilled, %v logs:\n%s", tm, mem, disk, spilled, logs, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Each logged producer subtask says what its own logs hold: the sources' and the maps' outputs are
	// logged, the sinks have none.
	for _, sub := range []string{`subtask="0",vertex="numbers"`, `subtask="1",vertex="double"`} {
		re := regexp.MustCompile(`(?m)^runnel_subtask_inflight_log_bytes\{job="logged",` + sub + `\} (\S+)$`)
		for {
			body := scrapeOnce(url)
			if m := re.FindStringSubmatch(body); m != nil && m[1] != "0" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 15 s, no in-flight log bytes for %s:\n%s", sub, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if body := scrapeOnce(url); !regexp.MustCompile(`(?m)^runnel_subtask_inflight_log_bytes\{job="logged",subtask="0",vertex="sink"\} 0$`).MatchString(body) {
		t.Fatalf("the sink, which has no output, holds in-flight log bytes:\n%s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// scrapeOnce returns the body at url ("" when it cannot be read).
func scrapeOnce(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

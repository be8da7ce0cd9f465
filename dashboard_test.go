package runnel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// TestDashboardServesTheRunningJob reads a running job's dashboard address over real HTTP: its page, its
// REST API with the one job (graph, failover, exception, throughput) and its metrics, all while it runs,
// and nothing once Execute returned. The throughput is held against the sources' own rate.
func TestDashboardServesTheRunningJob(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	const ratePerSubtask = 10_000
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithChaining(false), runnel.WithUIListener(ln),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 50 * time.Millisecond}),
		runnel.WithFailureInjection("double[1]@2000"), runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"))
	src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
		connector.GeneratorOptions{RatePerSubtask: ratePerSubtask})).Name("numbers")
	// One sink subtask reads both double subtasks: it aligns each checkpoint's two barriers.
	runnel.Map(src, func(v int64) (int64, error) { return 2 * v, nil }).Name("double").SinkTo(connector.Discard[int64]()).Name("sink").SetParallelism(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := env.Execute(ctx, "shown"); done <- err }()

	get := func(path string, into any) (string, int) {
		resp, err := http.Get(base + path)
		if err != nil {
			return "", 0
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if into != nil && resp.StatusCode == 200 {
			if err := json.Unmarshal(b, into); err != nil {
				t.Fatalf("GET %s: %v: %s", path, err, b)
			}
		}
		return string(b), resp.StatusCode
	}
	await := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("after 20 s: %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var jobs struct {
		Jobs []struct{ ID, Name, Status string }
	}
	await("the job is listed as running", func() bool {
		get("/v1/jobs", &jobs)
		return len(jobs.Jobs) == 1 && jobs.Jobs[0].Status == "RUNNING"
	})
	id := jobs.Jobs[0].ID
	if jobs.Jobs[0].Name != "shown" {
		t.Fatalf("jobs %+v", jobs)
	}
	var job runnel.JobResult
	get("/v1/jobs/"+id, &job)
	if len(job.Vertices) != 3 || job.Vertex("numbers") == nil || job.Vertex("double") == nil || job.Vertex("sink") == nil {
		t.Fatalf("vertices %+v", job.Vertices)
	}
	var exceptions struct {
		Exceptions []struct{ Subtask, Error, TaskManager string }
	}
	await("the injected failure is among the exceptions", func() bool {
		get("/v1/jobs/"+id+"/exceptions", &exceptions)
		return len(exceptions.Exceptions) == 1
	})
	if e := exceptions.Exceptions[0]; e.Subtask != "double[1]" || e.TaskManager != "tm-1" || !strings.Contains(e.Error, "injected failure double[1]@2000") {
		t.Fatalf("exceptions %+v", exceptions)
	}
	var failovers struct {
		Failovers []struct{ Failed string }
	}
	get("/v1/jobs/"+id+"/failovers", &failovers)
	if len(failovers.Failovers) != 1 || failovers.Failovers[0].Failed != "double[1]" {
		t.Fatalf("failovers %+v", failovers)
	}
	var tp struct {
		IntervalMillis int64 `json:"interval_ms"`
		Samples        []struct {
			Vertices []struct {
				Name string
				Out  float64 `json:"records_out_per_s"`
			}
		}
	}
	await("three throughput samples", func() bool {
		get("/v1/jobs/"+id+"/throughput", &tp)
		return len(tp.Samples) >= 3
	})
	// The sources emit 2 × ratePerSubtask records a second; a sample of a whole second in the middle of
	// the run is within a quarter of it.
	last := tp.Samples[len(tp.Samples)-1]
	if v := last.Vertices[0]; v.Name != "numbers" || v.Out < 0.75*2*ratePerSubtask || v.Out > 1.25*2*ratePerSubtask {
		t.Fatalf("throughput %+v: want numbers at about %d records/s", last, 2*ratePerSubtask)
	}
	var cks struct {
		Checkpoints struct{ Completed int64 }
		History     []struct {
			ID           int64
			Status       string
			TriggerTime  time.Time `json:"trigger_time"`
			Acknowledged int
			Expected     int
			StateBytes   int64 `json:"state_bytes"`
			Alignment    int64 `json:"alignment_ms"`
		}
	}
	await("completed checkpoints in the history", func() bool {
		get("/v1/jobs/"+id+"/checkpoints", &cks)
		return cks.Checkpoints.Completed >= 2 && len(cks.History) >= 2
	})
	completed := 0
	for _, c := range cks.History {
		if c.Status != "COMPLETED" {
			continue
		}
		completed++
		// Five subtasks, with the sources' offsets at least; the sink's alignment took some time, which
		// is rounded up to whole milliseconds.
		if c.Acknowledged != 5 || c.Expected != 5 || c.StateBytes <= 0 || c.Alignment < 1 || time.Since(c.TriggerTime) > time.Minute || time.Since(c.TriggerTime) < 0 {
			t.Fatalf("checkpoint %+v", c)
		}
	}
	if completed == 0 {
		t.Fatalf("no completed checkpoint in %+v", cks.History)
	}
	var tms struct {
		TaskManagers []struct {
			State       string
			MemoryBytes int64 `json:"memory_bytes"`
			HeapBytes   int64 `json:"heap_bytes"`
		}
	}
	await("the TaskManager's heartbeat says its memory", func() bool {
		get("/v1/taskmanagers", &tms)
		return len(tms.TaskManagers) == 1 && tms.TaskManagers[0].MemoryBytes > 0
	})
	if tm := tms.TaskManagers[0]; tm.State != "REGISTERED" || tm.HeapBytes <= 0 || tm.HeapBytes > tm.MemoryBytes {
		t.Fatalf("taskmanagers %+v", tms)
	}
	if page, code := get("/", nil); code != 200 || !strings.Contains(page, "<script") {
		t.Fatalf("GET /: %d %s", code, page)
	}
	if m, code := get("/metrics", nil); code != 200 || !strings.Contains(m, `runnel_job_status{job="shown",status="RUNNING"} 1`) {
		t.Fatalf("GET /metrics: %d %s", code, m)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
	if _, err := http.Get(base + "/v1/jobs"); err == nil {
		t.Fatal("the dashboard still answers after Execute returned")
	}
}

// TestDashboardShowsAPanicsStack: a function that panics fails its subtask; the dashboard's exceptions
// give the panic's message and the stack of the goroutine that panicked, down to the function.
func TestDashboardShowsAPanicsStack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	panicked.Store(false)
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithUIListener(ln),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 50 * time.Millisecond}), runnel.WithRestartStrategy("fixed-delay:attempts=1,delay=0s"))
	src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
		connector.GeneratorOptions{RatePerSubtask: 10_000})).Name("numbers")
	runnel.Map(src, panicAt1000).Name("fragile").SinkTo(connector.Discard[int64]()).Name("sink")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := env.Execute(ctx, "panicky"); done <- err }()
	var jobs struct{ Jobs []struct{ ID string } }
	var exceptions struct {
		Exceptions []struct{ Subtask, Error, Stack string }
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(exceptions.Exceptions) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("after 20 s no exception is listed")
		}
		time.Sleep(20 * time.Millisecond)
		if getJSON(base+"/v1/jobs", &jobs) != nil || len(jobs.Jobs) == 0 {
			continue
		}
		_ = getJSON(base+"/v1/jobs/"+jobs.Jobs[0].ID+"/exceptions", &exceptions)
	}
	e := exceptions.Exceptions[0]
	if !strings.Contains(e.Error, "panicked: the thousandth record") || !strings.Contains(e.Stack, "runnel_test.panicAt1000") ||
		!strings.Contains(e.Stack, "dashboard_test.go") {
		t.Fatalf("exception %+v: want the panic's message and its stack", e)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// panicked makes panicAt1000 panic once: the restarted attempt reads record 1000 again.
var panicked atomic.Bool

func panicAt1000(v int64) (int64, error) {
	if v == 1000 && panicked.CompareAndSwap(false, true) {
		panic("the thousandth record")
	}
	return v, nil
}

// getJSON decodes the JSON document at url into v.
func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

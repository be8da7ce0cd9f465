package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/internal/ui/uitest"
)

// dashboard is a job run in the mini-cluster with its dashboard on a local port, and the REST API the
// page reads, for comparing the two.
type dashboard struct {
	t    *testing.T
	base string
	id   string
}

// startJob runs the job build makes on env's options plus the dashboard's listener until the test ends,
// and waits until the API lists it as running.
func startJob(t *testing.T, name string, build func(env *runnel.Environment), opts ...runnel.Option) *dashboard {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dashboard{t: t, base: "http://" + ln.Addr().String()}
	env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithLogger(slog.New(slog.DiscardHandler)), runnel.WithUIListener(ln)}, opts...)...)
	build(env)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := env.Execute(ctx, name); done <- err }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the job: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	var jobs struct {
		Jobs []struct{ ID, Status string }
	}
	d.await("the job is listed as running", func() bool {
		return d.get("/v1/jobs", &jobs) && len(jobs.Jobs) == 1 && jobs.Jobs[0].Status == "RUNNING"
	})
	d.id = jobs.Jobs[0].ID
	return d
}

// get decodes the API's document at path into v; false when it did not answer 200.
func (d *dashboard) get(path string, v any) bool {
	d.t.Helper()
	resp, err := http.Get(d.base + path)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return false
	}
	if err := json.Unmarshal(b, v); err != nil {
		d.t.Fatalf("GET %s: %v: %s", path, err, b)
	}
	return true
}

// await waits for a condition of the API (the page's conditions wait in the browser, uitest.Await).
func (d *dashboard) await(what string, ok func() bool) {
	d.t.Helper()
	const timeout = 30 * time.Second
	for deadline := time.Now().Add(timeout); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			d.t.Fatalf("after %v: %s", timeout, what)
		}
	}
}

// pageFailover is what the page shows of a failover on its timeline.
type pageFailover struct {
	Failed      string   `json:"failed"`
	Restarted   []string `json:"restarted"`
	RecordsLost string   `json:"records_lost"`
	Restored    string   `json:"checkpoint_restored"`
	Strategy    string   `json:"strategy"`
	Chips       []string `json:"chips"`
}

const readFailover = `(() => {
  const li = document.querySelector('#failover-list [data-failover-index="%d"]');
  if (!li) return null;
  const v = (f) => { const e = li.querySelector('[data-field="' + f + '"]'); return e ? e.getAttribute('data-value') : null; };
  return { failed: li.querySelector('[data-field="failed"]').textContent, strategy: li.getAttribute('data-strategy'),
    restarted: JSON.parse(li.querySelector('.restarted-set').getAttribute('data-restarted')),
    chips: [...li.querySelectorAll('.restarted-set .chip')].map((c) => c.textContent),
    records_lost: v('records_lost'), checkpoint_restored: v('checkpoint_restored') };
})()`

// TestDashboardShowsARecovery runs source -> double -> sink under approximate failover with double[1]
// failing once a checkpoint completed, and reads the dashboard in a browser while it runs: the overview
// lists the job; its graph has the job's vertices and edges; the failover appears on the timeline with
// the restarted set, the checkpoint restored and the records lost of GET /v1/jobs/{id}/failovers, and
// picking it marks those subtasks on the graph and on the subtasks table; the throughput chart marks it;
// the TaskManagers page lists the mini-cluster's. The page logs no error (a CSP violation would be one).
func TestDashboardShowsARecovery(t *testing.T) {
	b := uitest.Start(t)
	d := startJob(t, "recovery", func(env *runnel.Environment) {
		src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
			connector.GeneratorOptions{RatePerSubtask: 5000})).Name("numbers")
		runnel.Map(src.Rebalance(), func(v int64) (int64, error) { return 2 * v, nil }).Name("double").
			SinkTo(connector.Discard[int64]()).Name("sink")
	}, runnel.WithParallelism(2), runnel.WithChaining(false),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 100 * time.Millisecond, ApproximateLocalRecovery: true}),
		runnel.WithFailureInjection("double[1]@chk-15"), runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"))

	b.Open(d.base + "/")
	b.Await("the overview lists the job", fmt.Sprintf(`document.querySelector('#jobs-table [data-job=%q] a') !== null`, d.id), 10*time.Second)
	b.Screenshot("overview")
	b.Click(fmt.Sprintf(`#jobs-table [data-job=%q] a`, d.id))
	b.Await("the job's page", `document.getElementById('page-job') !== null`, 10*time.Second)

	var job runnel.JobResult
	d.get("/v1/jobs/"+d.id, &job)
	var want []string
	for _, v := range job.Vertices {
		want = append(want, v.Name)
	}
	b.Await("the graph draws every vertex", fmt.Sprintf(`document.querySelectorAll('#graph-svg [data-vertex]').length === %d`, len(want)), 10*time.Second)
	if got := uitest.Eval[[]string](b, `[...document.querySelectorAll('#graph-svg [data-vertex]')].map((g) => g.getAttribute('data-vertex'))`); !slices.Equal(got, want) {
		t.Errorf("graph vertices %q, want the API's %q", got, want)
	}
	if got := uitest.Eval[[]string](b, `[...document.querySelectorAll('#graph-svg [data-edge]')].map((g) => g.getAttribute('data-edge') + ' ' + g.getAttribute('data-pattern'))`); !slices.Equal(got, []string{"numbers->double rebalance", "double->sink forward"}) {
		t.Errorf("graph edges %q", got)
	}

	// The failover: the page shows the API's numbers once it polled after the API had them; the loss of
	// an approximate failover is counted as the restarted channels reconnect, so both are read until they
	// agree.
	type apiFailovers struct {
		Failovers []runnel.FailoverResult `json:"failovers"`
	}
	var fo apiFailovers
	d.await("the API lists the failover", func() bool { return d.get("/v1/jobs/"+d.id+"/failovers", &fo) && len(fo.Failovers) == 1 })
	b.Await("the timeline shows the failover", `document.querySelector('#failover-list [data-failover-index="0"]') !== null`, 10*time.Second)
	var shown pageFailover
	agree := func() bool {
		shown = uitest.Eval[pageFailover](b, fmt.Sprintf(readFailover, 0))
		d.get("/v1/jobs/"+d.id+"/failovers", &fo)
		f := fo.Failovers[0]
		restored := ""
		if f.CheckpointRestored != nil {
			restored = strconv.FormatInt(*f.CheckpointRestored, 10)
		}
		return shown.Failed == f.Failed && slices.Equal(shown.Restarted, f.Restarted) && shown.Strategy == f.Strategy &&
			shown.RecordsLost == strconv.FormatUint(f.RecordsLost, 10) && shown.Restored == restored
	}
	deadline := time.Now().Add(10 * time.Second)
	for !agree() {
		if time.Now().After(deadline) {
			t.Fatalf("the timeline shows %+v, the API %+v", shown, fo.Failovers[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	f := fo.Failovers[0]
	// One chip per vertex restarted, with how many of its subtasks and which: double[1] alone of two.
	if len(shown.Chips) == 0 || shown.Chips[0] != "double 1/2 [1]" {
		t.Errorf("the restarted set shows %q, want double's first: \"double 1/2 [1]\"", shown.Chips)
	}
	t.Logf("failover of %s: restarted %v, checkpoint %d restored, %d records lost", f.Failed, f.Restarted, *f.CheckpointRestored, f.RecordsLost)
	if f.Failed != "double[1]" || f.Strategy != "approximate" || !slices.Contains(f.Restarted, "double[1]") {
		t.Errorf("failover %+v: want double[1]'s, approximate", f)
	}

	// Picking the failover marks its restarted subtasks on the graph, vertex by vertex.
	b.Click(`#failover-list [data-failover-index="0"]`)
	marked := map[string][]string{}
	for _, st := range f.Restarted {
		i := strings.LastIndex(st, "[")
		marked[st[:i]] = append(marked[st[:i]], st[i+1:len(st)-1])
	}
	for name, idx := range marked {
		slices.Sort(idx)
		b.Await(name+" is marked restarted on the graph", fmt.Sprintf(`(() => { const g = document.querySelector('#graph-svg [data-vertex=%q]'); return g && g.classList.contains('restarted') && g.getAttribute('data-restarted') === %q; })()`,
			name, strings.Join(idx, ",")), 5*time.Second)
	}
	if got := uitest.Eval[int](b, `document.querySelectorAll('#graph-svg .vertex.restarted').length`); got != len(marked) {
		t.Errorf("%d vertices marked restarted, want %d (%v)", got, len(marked), marked)
	}
	b.Await("the throughput chart marks the failover", `document.querySelector('#throughput-svg .failover-mark[data-failover-index="0"]') !== null`, 10*time.Second)
	checkHistory(t, b, d)
	if checkStacks(t, b, d) {
		t.Error("GET /v1/jobs/{id}/exceptions has a stack for an error the function returned: only a panic has one")
	}
	b.Screenshot("job")

	// A click on a vertex opens its subtasks: the API's attempts, the restarted one marked.
	b.Click(`#graph-svg [data-vertex="double"]`)
	b.Await("double's subtasks", `document.querySelectorAll('#subtasks-table tbody tr').length === 2`, 5*time.Second)
	if got := uitest.Eval[string](b, `document.querySelector('#subtasks-table [data-subtask="double[1]"] [data-field="attempt"]').getAttribute('data-value')`); got != "1" {
		t.Errorf("double[1] shows attempt %s, want 1", got)
	}
	if got := uitest.Eval[bool](b, `document.querySelector('#subtasks-table [data-subtask="double[1]"]').classList.contains('restarted')`); !got {
		t.Error("double[1] is not marked restarted in its subtasks table")
	}
	b.Screenshot("job-subtasks")

	b.Go("#/taskmanagers", "page-taskmanagers")
	b.Await("the TaskManagers table", `document.querySelectorAll('#tm-table tbody tr').length >= 1`, 5*time.Second)
	b.Screenshot("taskmanagers")
	if errs := b.ConsoleErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
}

// TestDashboardShowsAStack runs numbers -> explode -> sink where explode panics once: the exceptions show
// the panic's error and, in a <pre>, the stack GET /v1/jobs/{id}/exceptions gives.
func TestDashboardShowsAStack(t *testing.T) {
	b := uitest.Start(t)
	var fired atomic.Bool
	d := startJob(t, "panic", func(env *runnel.Environment) {
		src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
			connector.GeneratorOptions{RatePerSubtask: 2000})).Name("numbers")
		runnel.Map(src, func(v int64) (int64, error) {
			if v == 500 && fired.CompareAndSwap(false, true) {
				panic("explode: record 500")
			}
			return v, nil
		}).Name("explode").SinkTo(connector.Discard[int64]()).Name("sink")
	}, runnel.WithParallelism(1), runnel.WithChaining(false), runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"))

	var doc struct {
		Exceptions []struct{ Error, Stack string }
	}
	d.await("the API lists the panic", func() bool {
		return d.get("/v1/jobs/"+d.id+"/exceptions", &doc) && len(doc.Exceptions) == 1
	})
	if doc.Exceptions[0].Stack == "" {
		t.Fatalf("GET /v1/jobs/{id}/exceptions: %+v, want the panic's stack", doc.Exceptions)
	}
	b.Open(d.base + "/#/jobs/" + d.id)
	if !checkStacks(t, b, d) {
		t.Fatal("no stack to check")
	}
	b.Await("the panic's error", `document.querySelector('#exceptions .err').textContent.includes('explode: record 500')`, 5*time.Second)
	b.Screenshot("job-stack")
	if errs := b.ConsoleErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
}

// TestDashboardShowsBackpressure runs numbers -> sink where the sink sleeps for each record, so that it
// takes half of what the source offers: the source's vertex shows as backpressured (above half of its
// time, Flink's HIGH), coloured so, with the API's numbers, and the sink as busy, not backpressured.
func TestDashboardShowsBackpressure(t *testing.T) {
	b := uitest.Start(t)
	const ratePerSecond = 2000
	d := startJob(t, "backpressure", func(env *runnel.Environment) {
		src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
			connector.GeneratorOptions{RatePerSubtask: ratePerSecond})).Name("numbers")
		src.SinkTo(slowSink{perRecord: 2 * time.Second / ratePerSecond}).Name("slow")
	}, runnel.WithParallelism(1), runnel.WithChaining(false))

	var job map[string]any
	d.await("the API has the job's vertices", func() bool {
		return d.get("/v1/jobs/"+d.id, &job) && len(job["vertices"].([]any)) == 2
	})
	b.Open(d.base + "/#/jobs/" + d.id)
	b.Await("the graph", `document.querySelectorAll('#graph-svg [data-vertex]').length === 2`, 10*time.Second)
	if _, ok := job["vertices"].([]any)[0].(map[string]any)["backpressured_ms_per_s"]; !ok {
		t.Fatalf("GET /v1/jobs/{id} has no vertices[].backpressured_ms_per_s: %v", job["vertices"])
	}
	b.Await("numbers shows as backpressured", `document.querySelector('#graph-svg [data-vertex="numbers"]').getAttribute('data-backpressure') === 'high'`, 30*time.Second)
	d.get("/v1/jobs/"+d.id, &job)
	for _, v := range job["vertices"].([]any) {
		v := v.(map[string]any)
		t.Logf("%s: busy %v, backpressured %v, idle %v ms/s", v["name"], v["busy_ms_per_s"], v["backpressured_ms_per_s"], v["idle_ms_per_s"])
	}
	// The page shows the API's numbers: read both until a poll of the page follows one of the API.
	vertexField := func(doc map[string]any, name, field string) string {
		for _, v := range doc["vertices"].([]any) {
			if v := v.(map[string]any); v["name"] == name && v[field] != nil {
				return strconv.FormatFloat(v[field].(float64), 'f', -1, 64)
			}
		}
		return ""
	}
	var shown, api string
	deadline := time.Now().Add(10 * time.Second)
	for {
		shown = uitest.Eval[string](b, `document.querySelector('#graph-svg [data-vertex="numbers"] [data-field="backpressured_ms_per_s"]').getAttribute('data-value')`)
		d.get("/v1/jobs/"+d.id, &job)
		if api = vertexField(job, "numbers", "backpressured_ms_per_s"); shown == api {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the graph shows numbers backpressured %s ms/s, the API %s", shown, api)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Await("slow is not backpressured", `document.querySelector('#graph-svg [data-vertex="slow"]').getAttribute('data-backpressure') === 'ok'`, 10*time.Second)
	b.Click(`#graph-svg [data-vertex="numbers"]`)
	b.Await("numbers' subtasks", `document.querySelectorAll('#subtasks-table tbody tr').length === 1`, 5*time.Second)
	b.Screenshot("backpressure")
	if errs := b.ConsoleErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
}

// slowSink sleeps perRecord for every record it writes.
type slowSink struct{ perRecord time.Duration }

func (s slowSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[int64], error) {
	return s, nil
}
func (s slowSink) Write(int64) error { time.Sleep(s.perRecord); return nil }
func (s slowSink) Flush() error      { return nil }
func (s slowSink) Close() error      { return nil }

// checkHistory holds the page's checkpoint table against GET /v1/jobs/{id}/checkpoints' history, where
// the API has one: every row the page shows of a checkpoint that ended has that checkpoint's status,
// duration and state size (an ended checkpoint's numbers are final, so the page's poll may lag the API's).
func checkHistory(t *testing.T, b *uitest.Browser, d *dashboard) {
	t.Helper()
	var doc struct {
		History []map[string]any `json:"history"`
	}
	if !d.get("/v1/jobs/"+d.id+"/checkpoints", &doc) || doc.History == nil {
		t.Log("GET /v1/jobs/{id}/checkpoints has no history: the checkpoint table is not checked")
		return
	}
	b.Await("the checkpoint table", `document.querySelectorAll('#checkpoint-table tbody tr').length > 0`, 10*time.Second)
	type row struct{ ID, Status, Duration, Size string }
	rows := uitest.Eval[[]row](b, `[...document.querySelectorAll('#checkpoint-table tbody tr')].map((r) => ({ID: r.getAttribute('data-checkpoint'),
  Status: r.getAttribute('data-checkpoint-status'), Duration: r.querySelector('[data-field="duration_ms"]').getAttribute('data-value'),
  Size: r.querySelector('[data-field="state_bytes"]').getAttribute('data-value')}))`)
	d.get("/v1/jobs/"+d.id+"/checkpoints", &doc)
	api := map[string]row{}
	str := func(v any) string {
		if f, ok := v.(float64); ok {
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
		return fmt.Sprint(v)
	}
	for _, c := range doc.History {
		id := str(c["id"])
		api[id] = row{id, str(c["status"]), str(c["duration_ms"]), str(c["state_bytes"])}
	}
	checked := 0
	for _, r := range rows {
		a, ok := api[r.ID]
		if r.Status == "IN_PROGRESS" || !ok {
			continue // still changing, or dropped from the API's bounded history since the page's poll
		}
		checked++
		if r != a {
			t.Errorf("checkpoint table row %+v, the API's %+v", r, a)
		}
	}
	if checked == 0 {
		t.Errorf("no row of the checkpoint table (%d rows) is one of the API's ended checkpoints", len(rows))
	}
}

// checkStacks: where GET /v1/jobs/{id}/exceptions gives a failure's stack, the page shows it in a <pre>.
// It returns whether there was one.
func checkStacks(t *testing.T, b *uitest.Browser, d *dashboard) bool {
	t.Helper()
	var doc struct {
		Exceptions []map[string]any `json:"exceptions"`
	}
	d.get("/v1/jobs/"+d.id+"/exceptions", &doc)
	if len(doc.Exceptions) == 0 {
		t.Error("GET /v1/jobs/{id}/exceptions lists no exception after the failure")
		return false
	}
	stack, ok := doc.Exceptions[len(doc.Exceptions)-1]["stack"].(string)
	if !ok {
		return false
	}
	b.Await("the failure's stack", fmt.Sprintf(`[...document.querySelectorAll('#exceptions pre.stack')].some((p) => p.textContent === %s)`, jsString(stack)), 10*time.Second)
	return true
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

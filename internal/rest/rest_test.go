package rest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/ui"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource serves fixed documents. It stands in for the lead's source over the dispatcher and the
// drivers: the handlers are what is under test. Every call checks that it got a deadline.
type fakeSource struct {
	t    *testing.T
	jobs []JobSummary
	// docs holds per job id the documents by kind: "job", "checkpoints", "failovers", "throughput",
	// "exceptions".
	docs map[string]map[string]any
	tms  []TaskManager
	// leader is what Leader returns (the zero Leader leads nothing).
	leader Leader
	// err, when set, is what every call returns.
	err error
}

func (f *fakeSource) Leader(ctx context.Context) (Leader, error) {
	if err := f.check(ctx); err != nil {
		return Leader{}, err
	}
	return f.leader, nil
}

func (f *fakeSource) check(ctx context.Context) error {
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > SourceTimeout {
		f.t.Errorf("the source was called with deadline %v, %v; want one within %v", d, ok, SourceTimeout)
	}
	return f.err
}

func (f *fakeSource) Jobs(ctx context.Context) ([]JobSummary, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	return f.jobs, nil
}

func (f *fakeSource) doc(ctx context.Context, id, kind string) (any, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	d, ok := f.docs[id]
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrUnknownJob)
	}
	return d[kind], nil
}

func (f *fakeSource) Job(ctx context.Context, id string) (any, error) { return f.doc(ctx, id, "job") }
func (f *fakeSource) Checkpoints(ctx context.Context, id string) (any, error) {
	return f.doc(ctx, id, "checkpoints")
}
func (f *fakeSource) Failovers(ctx context.Context, id string) (any, error) {
	return f.doc(ctx, id, "failovers")
}
func (f *fakeSource) Throughput(ctx context.Context, id string) (any, error) {
	return f.doc(ctx, id, "throughput")
}
func (f *fakeSource) Exceptions(ctx context.Context, id string) (any, error) {
	return f.doc(ctx, id, "exceptions")
}

func (f *fakeSource) TaskManagers(ctx context.Context) ([]TaskManager, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	return f.tms, nil
}

func TestHandler(t *testing.T) {
	started := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	full := func(t *testing.T) *fakeSource {
		return &fakeSource{t: t,
			jobs: []JobSummary{
				{ID: "3f2a", Name: "sequence", Status: "FINISHED", Started: started, Ended: started.Add(90 * time.Second), Parallelism: 4, Failover: "task"},
				{ID: "77c0", Name: "clicks", Status: "RUNNING", Started: started.Add(time.Minute), Parallelism: 2, Failover: "region"},
			},
			docs: map[string]map[string]any{
				"3f2a": {
					"job":         map[string]any{"name": "sequence", "status": "FINISHED", "waiting": ""},
					"checkpoints": map[string]any{"completed": 3, "latest": map[string]any{"id": 3}},
					"failovers":   map[string]any{"failovers": []any{}, "failover_totals": map[string]any{"records_lost": 0}},
					"throughput":  map[string]any{"interval_ms": 1000, "samples": []any{}},
					"exceptions":  map[string]any{"exceptions": []any{}},
				},
				"a/b": {"job": "slash"},
				"inf": {"job": math.Inf(1)},
			},
			tms: []TaskManager{
				{ID: 1, Name: "tm-1", DataAddress: "127.0.0.1:41000", Slots: 2, FreeSlots: 0, SinceHeardMillis: 120, Tasks: 4,
					HeapBytes: 1 << 20, MemoryBytes: 8 << 20, State: "REGISTERED"},
				{ID: 4, Name: "tm-2", DataAddress: "127.0.0.1:41001", Slots: 2, FreeSlots: 2, SinceHeardMillis: 3, State: "REGISTERED"},
				{ID: 2, Name: "tm-3", DataAddress: "127.0.0.1:41002", Slots: 2, SinceHeardMillis: 1200, State: "LOST",
					DepartedAt: started.Add(time.Minute), Reason: "no heartbeat for 1.2s"},
			},
		}
	}
	empty := func(t *testing.T) *fakeSource { return &fakeSource{t: t} }
	alone := func(t *testing.T) *fakeSource {
		return &fakeSource{t: t, leader: Leader{Leading: true, Addr: "10.0.0.1:6123", REST: "10.0.0.1:8081"}}
	}
	leads := func(t *testing.T) *fakeSource {
		return &fakeSource{t: t, leader: Leader{HA: true, Cluster: "prod", Leading: true, Addr: "10.0.0.1:6123", REST: "10.0.0.1:8081", Epoch: 17}}
	}
	standby := func(t *testing.T) *fakeSource {
		return &fakeSource{t: t, leader: Leader{HA: true, Cluster: "prod", Addr: "10.0.0.1:6123", REST: "10.0.0.1:8081", Epoch: 17}}
	}
	noLeader := func(t *testing.T) *fakeSource { return &fakeSource{t: t, leader: Leader{HA: true, Cluster: "prod"}} }
	failing := func(err error) func(t *testing.T) *fakeSource {
		return func(t *testing.T) *fakeSource { return &fakeSource{t: t, err: err} }
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintln(w, "runnel_sessions 2")
	})
	const jsonType = "application/json"
	notFound := func(path string) string {
		return `{"error":"no such path \"` + path + `\" (the API serves /v1/jobs, /v1/jobs/{id}, /v1/jobs/{id}/checkpoints, ` +
			`/v1/jobs/{id}/failovers, /v1/jobs/{id}/throughput, /v1/jobs/{id}/exceptions, /v1/taskmanagers, /v1/leader, /metrics, /healthz, /healthz/ready)"}`
	}
	for _, tc := range []struct {
		name         string
		src          func(t *testing.T) *fakeSource
		metrics      http.Handler
		method, path string
		status       int
		contentType  string
		allow        string // the Allow header a 405 must carry
		body         string // without the final newline
	}{
		{"jobs", full, nil, "GET", "/v1/jobs", 200, jsonType, "",
			`{"jobs":[{"id":"3f2a","name":"sequence","status":"FINISHED","started":"2026-12-01T21:00:00Z","ended":"2026-12-01T21:01:30Z","parallelism":4,"failover":"task"},` +
				`{"id":"77c0","name":"clicks","status":"RUNNING","started":"2026-12-01T21:01:00Z","parallelism":2,"failover":"region"}]}`},
		{"no jobs is an empty list", empty, nil, "GET", "/v1/jobs", 200, jsonType, "", `{"jobs":[]}`},
		{"a job", full, nil, "GET", "/v1/jobs/3f2a", 200, jsonType, "", `{"name":"sequence","status":"FINISHED","waiting":""}`},
		{"a job id with an escaped slash", full, nil, "GET", "/v1/jobs/a%2Fb", 200, jsonType, "", `"slash"`},
		{"a job's checkpoints", full, nil, "GET", "/v1/jobs/3f2a/checkpoints", 200, jsonType, "", `{"completed":3,"latest":{"id":3}}`},
		{"a job's failovers", full, nil, "GET", "/v1/jobs/3f2a/failovers", 200, jsonType, "",
			`{"failover_totals":{"records_lost":0},"failovers":[]}`},
		{"a job's throughput", full, nil, "GET", "/v1/jobs/3f2a/throughput", 200, jsonType, "", `{"interval_ms":1000,"samples":[]}`},
		{"a job's exceptions", full, nil, "GET", "/v1/jobs/3f2a/exceptions", 200, jsonType, "", `{"exceptions":[]}`},
		{"an unknown job's throughput", full, nil, "GET", "/v1/jobs/nope/throughput", 404, jsonType, "",
			`{"error":"no job \"nope\" on this JobManager"}`},
		{"no dashboard without one", full, nil, "GET", "/", 404, jsonType, "", notFound("/")},
		{"an unknown job", full, nil, "GET", "/v1/jobs/nope", 404, jsonType, "", `{"error":"no job \"nope\" on this JobManager"}`},
		{"an unknown job's checkpoints", full, nil, "GET", "/v1/jobs/nope/checkpoints", 404, jsonType, "",
			`{"error":"no job \"nope\" on this JobManager"}`},
		{"an unknown job's failovers", full, nil, "GET", "/v1/jobs/nope/failovers", 404, jsonType, "",
			`{"error":"no job \"nope\" on this JobManager"}`},
		{"a long unknown id is cut in the error", full, nil, "GET", "/v1/jobs/" + strings.Repeat("x", 100), 404, jsonType, "",
			`{"error":"no job \"` + strings.Repeat("x", 64) + `\"… on this JobManager"}`},
		{"taskmanagers", full, nil, "GET", "/v1/taskmanagers", 200, jsonType, "",
			`{"taskmanagers":[{"id":1,"name":"tm-1","data_address":"127.0.0.1:41000","slots":2,"free_slots":0,"since_heard_ms":120,"tasks":4,` +
				`"heap_bytes":1048576,"memory_bytes":8388608,"state":"REGISTERED"},` +
				`{"id":4,"name":"tm-2","data_address":"127.0.0.1:41001","slots":2,"free_slots":2,"since_heard_ms":3,"tasks":0,"heap_bytes":0,"memory_bytes":0,"state":"REGISTERED"},` +
				`{"id":2,"name":"tm-3","data_address":"127.0.0.1:41002","slots":2,"free_slots":0,"since_heard_ms":1200,"tasks":0,"heap_bytes":0,"memory_bytes":0,"state":"LOST",` +
				`"departed_at":"2026-12-01T21:01:00Z","reason":"no heartbeat for 1.2s"}]}`},
		{"no taskmanagers is an empty list", empty, nil, "GET", "/v1/taskmanagers", 200, jsonType, "", `{"taskmanagers":[]}`},
		{"health", empty, nil, "GET", "/healthz", 200, jsonType, "", `{"status":"ok"}`},
		{"a standby is live", standby, nil, "GET", "/healthz", 200, jsonType, "", `{"status":"ok"}`},
		{"leader without HA", alone, nil, "GET", "/v1/leader", 200, jsonType, "",
			`{"ha":false,"leading":true,"addr":"10.0.0.1:6123","rest":"10.0.0.1:8081"}`},
		{"leader with HA", leads, nil, "GET", "/v1/leader", 200, jsonType, "",
			`{"ha":true,"cluster":"prod","leading":true,"addr":"10.0.0.1:6123","rest":"10.0.0.1:8081","epoch":17}`},
		{"a standby names the leader", standby, nil, "GET", "/v1/leader", 200, jsonType, "",
			`{"ha":true,"cluster":"prod","leading":false,"addr":"10.0.0.1:6123","rest":"10.0.0.1:8081","epoch":17}`},
		{"ready alone", alone, nil, "GET", "/healthz/ready", 200, jsonType, "", `{"status":"ready"}`},
		{"ready as the leader", leads, nil, "GET", "/healthz/ready", 200, jsonType, "", `{"status":"ready"}`},
		{"a standby is not ready", standby, nil, "GET", "/healthz/ready", 503, jsonType, "",
			`{"error":"standing by: the JobManager at 10.0.0.1:6123 leads cluster \"prod\""}`},
		{"not ready while no one leads", noLeader, nil, "GET", "/healthz/ready", 503, jsonType, "",
			`{"error":"standing by: no JobManager leads cluster \"prod\" now"}`},
		{"not ready when who leads is unknown", failing(errors.New("etcd: context deadline exceeded")), nil, "GET", "/healthz/ready", 503, jsonType, "",
			`{"error":"who leads is not known: etcd: context deadline exceeded"}`},
		{"HEAD has the headers and no body", full, nil, "HEAD", "/v1/jobs", 200, jsonType, "", ``},
		{"metrics are the given handler's", empty, metrics, "GET", "/metrics", 200, "text/plain; version=0.0.4", "", `runnel_sessions 2`},
		{"no metrics handler", empty, nil, "GET", "/metrics", 404, jsonType, "", `{"error":"this JobManager serves no metrics"}`},
		{"POST on jobs", full, nil, "POST", "/v1/jobs", 405, jsonType, "GET, HEAD",
			`{"error":"method \"POST\" not allowed on \"/v1/jobs\": the API is read-only (GET)"}`},
		{"DELETE on a job", full, nil, "DELETE", "/v1/jobs/3f2a", 405, jsonType, "GET, HEAD",
			`{"error":"method \"DELETE\" not allowed on \"/v1/jobs/3f2a\": the API is read-only (GET)"}`},
		{"PUT on checkpoints", full, nil, "PUT", "/v1/jobs/3f2a/checkpoints", 405, jsonType, "GET, HEAD",
			`{"error":"method \"PUT\" not allowed on \"/v1/jobs/3f2a/checkpoints\": the API is read-only (GET)"}`},
		{"POST on metrics", empty, metrics, "POST", "/metrics", 405, jsonType, "GET, HEAD",
			`{"error":"method \"POST\" not allowed on \"/metrics\": the API is read-only (GET)"}`},
		{"POST on health", empty, nil, "POST", "/healthz", 405, jsonType, "GET, HEAD",
			`{"error":"method \"POST\" not allowed on \"/healthz\": the API is read-only (GET)"}`},
		{"an unknown path", full, nil, "GET", "/v2/jobs", 404, jsonType, "", notFound("/v2/jobs")},
		{"an empty job id", full, nil, "GET", "/v1/jobs/", 404, jsonType, "", notFound("/v1/jobs/")},
		{"an unknown part of a job", full, nil, "GET", "/v1/jobs/3f2a/vertices", 404, jsonType, "", notFound("/v1/jobs/3f2a/vertices")},
		{"an unknown path with another method", full, nil, "POST", "/v1/cancel", 404, jsonType, "", notFound("/v1/cancel")},
		{"a source that does not answer in time", failing(fmt.Errorf("asking job 3f2a's loop: %w", context.DeadlineExceeded)), nil,
			"GET", "/v1/jobs/3f2a", 503, jsonType, "",
			`{"error":"GET /v1/jobs/{id}: the JobManager did not answer in time: asking job 3f2a's loop: context deadline exceeded"}`},
		{"a source that fails", failing(errors.New("dispatcher stopped")), nil, "GET", "/v1/taskmanagers", 500, jsonType, "",
			`{"error":"GET /v1/taskmanagers: dispatcher stopped"}`},
		{"a document that cannot be encoded", full, nil, "GET", "/v1/jobs/inf", 500, jsonType, "",
			`{"error":"encoding the response: json: unsupported value: +Inf"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(Handler(tc.src(t), tc.metrics, nil))
			defer srv.Close()
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if got := resp.Header.Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type %q, want %q", got, tc.contentType)
			}
			if got := resp.Header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			want := tc.body
			if want != "" {
				want += "\n"
			}
			if string(body) != want {
				t.Errorf("body\n%s\nwant\n%s", body, want)
			}
		})
	}
}

// TestHealthHandler: the health listener serves the two health checks and nothing else.
func TestHealthHandler(t *testing.T) {
	for _, tc := range []struct {
		path   string
		leader Leader
		status int
		body   string
	}{
		{"/healthz", Leader{HA: true, Cluster: "prod"}, 200, `{"status":"ok"}`},
		{"/healthz/ready", Leader{HA: true, Cluster: "prod", Leading: true, Addr: "a:1"}, 200, `{"status":"ready"}`},
		{"/healthz/ready", Leader{HA: true, Cluster: "prod", Addr: "a:1"}, 503, `{"error":"standing by: the JobManager at a:1 leads cluster \"prod\""}`},
		{"/v1/jobs", Leader{Leading: true}, 404, `{"error":"no such path \"/v1/jobs\" (this listener serves GET /healthz and /healthz/ready only)"}`},
		{"/metrics", Leader{Leading: true}, 404, `{"error":"no such path \"/metrics\" (this listener serves GET /healthz and /healthz/ready only)"}`},
	} {
		srv := httptest.NewServer(HealthHandler(&fakeSource{t: t, leader: tc.leader}))
		resp, err := srv.Client().Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != tc.status || string(body) != tc.body+"\n" {
			t.Errorf("GET %s: %d %s, want %d %s", tc.path, resp.StatusCode, body, tc.status, tc.body)
		}
	}
}

// TestHandlerServesDashboard mounts the dashboard beside the API: its page at /, its files under /ui/,
// and the API's routes and errors unchanged.
func TestHandlerServesDashboard(t *testing.T) {
	srv := httptest.NewServer(Handler(&fakeSource{t: t}, nil, ui.Handler()))
	defer srv.Close()
	for _, tc := range []struct {
		path, contentType string
		status            int
	}{
		{"/", "text/html; charset=utf-8", 200},
		{"/ui/app.js", "text/javascript; charset=utf-8", 200},
		{"/ui/style.css", "text/css; charset=utf-8", 200},
		{"/ui/nope.js", "text/plain; charset=utf-8", 404},
		{"/v1/jobs", "application/json", 200},
		{"/index.html", "application/json", 404},
	} {
		resp, err := srv.Client().Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.contentType {
			t.Errorf("GET %s: %d %q, want %d %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, tc.contentType)
		}
	}
}

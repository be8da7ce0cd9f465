// Package rest serves the JobManager's read-only JSON API (docs/cluster.md §6.2): the jobs it runs, each
// job's live result, checkpoints and failovers, its TaskManagers, the Prometheus metrics and a health check.
//
// It owns the routes, the status codes, the error bodies and the JSON encoding, and nothing else: what it
// serves comes from a Source its caller implements over the dispatcher's and the job drivers' snapshots,
// so the documents of a job (the --report contract) are built where they are defined, in the root package.
// It changes nothing, starts no goroutine of its own beyond net/http's, and must not import the job master,
// the core or the cluster packages: a handler asks the Source, bounded by a deadline, and never reaches
// into a loop's state.
package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Source is what the API serves, read when a request comes. Every method gets the request's context with
// a deadline (SourceTimeout) and must give up when it is done, returning the context's error: a job loop
// that does not answer makes the request fail with 503, not hang. The documents are JSON-ready values:
// anything encoding/json encodes (a struct of the root package, a map, a json.RawMessage).
type Source interface {
	// Jobs lists the jobs the JobManager runs or ran (those it still remembers), in the order submitted.
	Jobs(ctx context.Context) ([]JobSummary, error)
	// Job returns job id's live result (the --report document, plus "waiting"); an error wrapping
	// ErrUnknownJob when there is no such job.
	Job(ctx context.Context, id string) (any, error)
	// Checkpoints returns job id's checkpoint statistics (the counts and the latest completed checkpoint);
	// an error wrapping ErrUnknownJob when there is no such job.
	Checkpoints(ctx context.Context, id string) (any, error)
	// Failovers returns job id's failovers with their loss and the totals; an error wrapping ErrUnknownJob
	// when there is no such job.
	Failovers(ctx context.Context, id string) (any, error)
	// Throughput returns job id's recent throughput per vertex (report.Throughput's samples); an error
	// wrapping ErrUnknownJob when there is no such job.
	Throughput(ctx context.Context, id string) (any, error)
	// Exceptions returns job id's recent task failures, each with its error and stack, newest first; an
	// error wrapping ErrUnknownJob when there is no such job.
	Exceptions(ctx context.Context, id string) (any, error)
	// TaskManagers lists the registered TaskManagers, in registration order.
	TaskManagers(ctx context.Context) ([]TaskManager, error)
	// Leader says who leads the cluster's JobManagers, as this one knows it.
	Leader(ctx context.Context) (Leader, error)
}

// Leader is GET /v1/leader: who leads the JobManagers of a cluster with high availability, or, without
// it, this JobManager alone.
type Leader struct {
	// HA says the JobManager is one of a cluster's on etcd; Cluster is that cluster's name.
	HA      bool   `json:"ha"`
	Cluster string `json:"cluster,omitempty"`
	// Leading says this JobManager leads (always, without HA); a standby serves no jobs.
	Leading bool `json:"leading"`
	// Addr and REST are the leader's control-plane and REST addresses, Epoch its term ("" and 0: no
	// JobManager leads now).
	Addr  string `json:"addr,omitempty"`
	REST  string `json:"rest,omitempty"`
	Epoch int64  `json:"epoch,omitempty"`
}

// ErrUnknownJob is what a Source's error wraps when it knows no job of the id asked for: the API answers
// 404.
var ErrUnknownJob = errors.New("unknown job")

// SourceTimeout bounds every call of a Source: past it the request fails with 503.
const SourceTimeout = 5 * time.Second

// JobSummary is one row of GET /v1/jobs.
type JobSummary struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Status is the job's status as the report writes it ("RUNNING", "FINISHED").
	Status string `json:"status"`
	// Started is when the job was submitted; Ended when it reached its final status (absent while it runs).
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`
	// Parallelism is the highest parallelism of the job's vertices; Failover its failover strategy
	// ("full", "region", "approximate", "task").
	Parallelism int    `json:"parallelism"`
	Failover    string `json:"failover"`
}

// TaskManager is one row of GET /v1/taskmanagers.
type TaskManager struct {
	// ID is the id of the TaskManager's registration: a TaskManager that registers again gets a new one.
	ID          uint64 `json:"id"`
	Name        string `json:"name"`
	DataAddress string `json:"data_address"`
	Slots       int    `json:"slots"`
	FreeSlots   int    `json:"free_slots"`
	// SinceHeardMillis is how long ago the JobManager last heard from it.
	SinceHeardMillis int64 `json:"since_heard_ms"`
	// Tasks is how many task attempts it runs.
	Tasks int `json:"tasks"`
	// HeapBytes and MemoryBytes are its process's memory as its last heartbeat said: the Go heap's live
	// objects, and all the memory the Go runtime holds from the operating system.
	HeapBytes   int64 `json:"heap_bytes"`
	MemoryBytes int64 `json:"memory_bytes"`
	// State is "REGISTERED", or "LOST" (its session ended or it went silent) or "LEFT" (it said it shuts
	// down): the table keeps the last 64 that departed, with when (DepartedAt) and why (Reason).
	State      string    `json:"state"`
	DepartedAt time.Time `json:"departed_at,omitzero"`
	Reason     string    `json:"reason,omitempty"`
}

// Handler returns the API's handler over src; metrics, when not nil, serves GET /metrics (nil: 404), and
// dashboard, when not nil, GET / and GET /ui/... (the web dashboard, internal/ui). A wrong method on a
// route is 405 with an Allow header, an unknown path 404; every error has a JSON body {"error": "..."}
// that says what was wrong.
func Handler(src Source, metrics, dashboard http.Handler) http.Handler {
	mux := http.NewServeMux()
	if dashboard != nil {
		mux.Handle("GET /{$}", dashboard)
		mux.Handle("GET /ui/", dashboard)
	}
	route := func(path string, h http.HandlerFunc) {
		// A GET pattern also serves HEAD; the same path without a method is less specific, so it takes
		// only the other methods.
		mux.HandleFunc("GET "+path, h)
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s: the API is read-only (GET)",
				quoteBounded(r.Method), quoteBounded(r.URL.Path)))
		})
	}
	route("/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, "", func(ctx context.Context) (any, error) {
			jobs, err := src.Jobs(ctx)
			if jobs == nil {
				jobs = []JobSummary{}
			}
			return struct {
				Jobs []JobSummary `json:"jobs"`
			}{jobs}, err
		})
	})
	perJob := func(get func(ctx context.Context, id string) (any, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			serve(w, r, id, func(ctx context.Context) (any, error) { return get(ctx, id) })
		}
	}
	route("/v1/jobs/{id}", perJob(src.Job))
	route("/v1/jobs/{id}/checkpoints", perJob(src.Checkpoints))
	route("/v1/jobs/{id}/failovers", perJob(src.Failovers))
	route("/v1/jobs/{id}/throughput", perJob(src.Throughput))
	route("/v1/jobs/{id}/exceptions", perJob(src.Exceptions))
	route("/v1/taskmanagers", func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, "", func(ctx context.Context) (any, error) {
			tms, err := src.TaskManagers(ctx)
			if tms == nil {
				tms = []TaskManager{}
			}
			return struct {
				TaskManagers []TaskManager `json:"taskmanagers"`
			}{tms}, err
		})
	})
	route("/v1/leader", func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, "", func(ctx context.Context) (any, error) { return src.Leader(ctx) })
	})
	healthRoutes(route, src)
	if metrics != nil {
		route("/metrics", metrics.ServeHTTP)
	} else {
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, "this JobManager serves no metrics")
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such path %s (the API serves /v1/jobs, /v1/jobs/{id}, "+
			"/v1/jobs/{id}/checkpoints, /v1/jobs/{id}/failovers, /v1/jobs/{id}/throughput, /v1/jobs/{id}/exceptions, /v1/taskmanagers, /v1/leader, /metrics, /healthz, /healthz/ready)", quoteBounded(r.URL.Path)))
	})
	return mux
}

// healthRoutes adds the health checks to route. /healthz is liveness: the process serves. /healthz/ready
// is readiness: it leads, so it runs jobs (a standby is live but not ready, and a load balancer or
// Kubernetes Service sends nothing to it).
func healthRoutes(route func(string, http.HandlerFunc), src interface {
	Leader(context.Context) (Leader, error)
}) {
	route("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	route("/healthz/ready", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), SourceTimeout)
		defer cancel()
		l, err := src.Leader(ctx)
		switch {
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, "who leads is not known: "+err.Error())
		case !l.Leading && l.Addr != "":
			writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("standing by: the JobManager at %s leads cluster %q", l.Addr, l.Cluster))
		case !l.Leading:
			writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("standing by: no JobManager leads cluster %q now", l.Cluster))
		default:
			writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		}
	})
}

// HealthHandler serves only the health checks (GET /healthz, /healthz/ready) over src's leadership: for a
// listener without TLS whose clients (a kubelet's probes) carry no certificate, which must serve nothing
// else.
func HealthHandler(src interface {
	Leader(context.Context) (Leader, error)
}) http.Handler {
	mux := http.NewServeMux()
	healthRoutes(func(path string, h http.HandlerFunc) { mux.HandleFunc("GET "+path, h) }, src)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such path %s (this listener serves GET /healthz and /healthz/ready only)", quoteBounded(r.URL.Path)))
	})
	return mux
}

// serve answers a GET with what get returns, under the Source deadline; job names the job asked for ("":
// none) for the 404 of an unknown one.
func serve(w http.ResponseWriter, r *http.Request, job string, get func(ctx context.Context) (any, error)) {
	ctx, cancel := context.WithTimeout(r.Context(), SourceTimeout)
	defer cancel()
	v, err := get(ctx)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, v)
	case errors.Is(err, ErrUnknownJob):
		writeError(w, http.StatusNotFound, fmt.Sprintf("no job %s on this JobManager", quoteBounded(job)))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("%s: the JobManager did not answer in time: %v", r.Pattern, err))
	default:
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("%s: %v", r.Pattern, err))
	}
}

// quoteBounded quotes s, cut to 64 bytes: an error echoes what the client sent, not all of it.
func quoteBounded(s string) string {
	const maxBytes = 64
	if len(s) > maxBytes {
		return fmt.Sprintf("%q…", s[:maxBytes])
	}
	return fmt.Sprintf("%q", s)
}

// writeJSON writes v as the response. It encodes before writing the header, so a value that cannot be
// encoded is a 500 with an error body, not a 200 with half a document.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(errorBody{fmt.Sprintf("encoding the response: %v", err)})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	// Live state: a cached copy would be stale at once.
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{msg})
}

package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/metrics"
	"github.com/runnel-dev/runnel/internal/report"
	"github.com/runnel-dev/runnel/internal/rest"
	"github.com/runnel-dev/runnel/internal/ui"
)

// RESTTaskManagers lists the TaskManagers of a dispatcher as the REST API does (GET /v1/taskmanagers): the
// registered ones, then those that were lost or left.
func RESTTaskManagers(d *jobmaster.Dispatcher) []rest.TaskManager {
	var out []rest.TaskManager
	for _, tm := range append(d.TaskManagers(), d.Departed()...) {
		r := rest.TaskManager{ID: uint64(tm.ID), Name: tm.Name, DataAddress: tm.DataAddress, Slots: tm.Slots,
			FreeSlots: tm.Free, SinceHeardMillis: tm.SinceHeard.Milliseconds(), HeapBytes: tm.HeapBytes, MemoryBytes: tm.MemoryBytes,
			State: tm.State, DepartedAt: tm.At, Reason: tm.Reason}
		if tm.State == jobmaster.TaskManagerRegistered {
			r.Tasks = tm.Slots - tm.Free
		}
		out = append(out, r)
	}
	return out
}

// dashboard is the REST API and web dashboard of one run on the mini-cluster (Settings.UIAddr): the
// JobManager's API with this one job, so that the dashboard reads the same documents from either.
type dashboard struct {
	name       string
	summary    rest.JobSummary
	disp       *jobmaster.Dispatcher
	submitted  time.Time
	throughput report.Throughput

	mu     sync.Mutex
	driver *jobmaster.Driver
	ended  time.Time
}

// serveDashboard serves the run's dashboard on the listener the settings ask for, and sets on to feed it;
// the returned function stops the server and waits for it (nothing to stop when none is asked for).
func (j *Job) serveDashboard(on *On, tms []*cluster.TaskManager) (stop func(), err error) {
	ln := j.Settings.UIListener
	if ln == nil && j.Settings.UIAddr == "" {
		return func() {}, nil
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", j.Settings.UIAddr); err != nil {
			return nil, fmt.Errorf("job %q: the dashboard's address: %w", j.Name, err)
		}
	}
	d := &dashboard{name: j.Name, summary: j.Summary(), disp: on.Dispatcher, submitted: time.Now()}
	started := on.Started
	on.Started = func(jm *jobmaster.Driver) {
		d.mu.Lock()
		d.driver = jm
		d.mu.Unlock()
		if started != nil {
			started(jm)
		}
	}
	on.Throughput = &d.throughput
	srv := &http.Server{Handler: rest.Handler(d, metrics.JobHandler(j.Name, d.current, tms), ui.Handler()), ReadHeaderTimeout: 10 * time.Second}
	j.Settings.logger().Info("dashboard", "job", j.Name, "url", "http://"+ln.Addr().String()+"/")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	return func() {
		d.mu.Lock()
		d.ended = time.Now()
		d.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			j.Settings.logger().Warn("dashboard server", "job", j.Name, "err", err)
		}
	}, nil
}

// current is the run's result as it is now.
func (d *dashboard) current() *report.JobResult {
	d.mu.Lock()
	jm := d.driver
	d.mu.Unlock()
	if jm == nil {
		return &report.JobResult{Job: d.name, Status: string(jobmaster.StatusCreated), Failovers: []report.FailoverResult{}}
	}
	return report.Of(d.name, jm.Snapshot())
}

// id is the run's job id ("" before it started).
func (d *dashboard) id() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.driver == nil {
		return ""
	}
	return d.driver.JobID().String()
}

func (d *dashboard) job(id string) (*report.JobResult, error) {
	if own := d.id(); own == "" || id != own {
		return nil, fmt.Errorf("%w: %q", rest.ErrUnknownJob, id)
	}
	return d.current(), nil
}

// Jobs implements rest.Source.
func (d *dashboard) Jobs(context.Context) ([]rest.JobSummary, error) {
	id := d.id()
	if id == "" {
		return nil, nil
	}
	d.mu.Lock()
	ended := d.ended
	d.mu.Unlock()
	s := d.summary
	s.ID, s.Status, s.Started, s.Ended = id, d.current().Status, d.submitted, ended
	return []rest.JobSummary{s}, nil
}

// Job implements rest.Source.
func (d *dashboard) Job(_ context.Context, id string) (any, error) { return d.job(id) }

// Checkpoints implements rest.Source.
func (d *dashboard) Checkpoints(_ context.Context, id string) (any, error) {
	r, err := d.job(id)
	if err != nil {
		return nil, err
	}
	return r.CheckpointsDocument(), nil
}

// Failovers implements rest.Source.
func (d *dashboard) Failovers(_ context.Context, id string) (any, error) {
	r, err := d.job(id)
	if err != nil {
		return nil, err
	}
	return r.FailoversDocument(), nil
}

// Throughput implements rest.Source.
func (d *dashboard) Throughput(_ context.Context, id string) (any, error) {
	if _, err := d.job(id); err != nil {
		return nil, err
	}
	return d.throughput.Document(), nil
}

// Exceptions implements rest.Source.
func (d *dashboard) Exceptions(_ context.Context, id string) (any, error) {
	r, err := d.job(id)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	ended := d.ended
	d.mu.Unlock()
	return r.ExceptionsDocument(ended), nil
}

// TaskManagers implements rest.Source.
func (d *dashboard) TaskManagers(context.Context) ([]rest.TaskManager, error) {
	return RESTTaskManagers(d.disp), nil
}

// Leader implements rest.Source: the mini-cluster's JobManager leads, alone.
func (d *dashboard) Leader(context.Context) (rest.Leader, error) {
	return rest.Leader{Leading: true}, nil
}

// Package metrics serves Runnel's Prometheus metrics: the collectors of a job (read from its result at every
// scrape; nothing is counted on the record path for them) and of TaskManagers' in-flight logs, and the
// /metrics server of a job run or a TaskManager process. It decides nothing about a job and changes none.
package metrics

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/report"
)

// JobCollector reads the job's counters at every scrape; nothing is counted on the record path for it.
type JobCollector struct {
	name     string
	snapshot func() *report.JobResult

	up, uptime, recordsIn, recordsOut, attempt, running *prometheus.Desc
	watermark, operatorMetric                           *prometheus.Desc
	busy, backpressured, idle, inflightLog              *prometheus.Desc
	ckCompleted, ckFailed, ckAborted, ckLastID          *prometheus.Desc
	failovers, recordsLost, lastOutage, lastRecovery    *prometheus.Desc
}

// NewJobCollector collects the metrics of job name from snapshot, with labels added to each (the JobManager
// adds its job_id).
func NewJobCollector(name string, snapshot func() *report.JobResult, labels prometheus.Labels) *JobCollector {
	job := prometheus.Labels{"job": name}
	for k, v := range labels {
		job[k] = v
	}
	sub := []string{"vertex", "subtask"}
	d := func(n, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("runnel_"+n, help, labels, job)
	}
	return &JobCollector{name: name, snapshot: snapshot,
		up:         d("job_status", "1 for the job's current status.", "status"),
		uptime:     d("job_uptime_seconds", "Time since the job started."),
		recordsIn:  d("records_in_total", "Records the subtask's current attempt took in (from 0 at each restart).", sub...),
		recordsOut: d("records_out_total", "Records the subtask's current attempt emitted (from 0 at each restart).", sub...),
		attempt:    d("subtask_attempt", "The subtask's attempt number: how often it was restarted.", sub...),
		running:    d("subtask_running", "1 while the subtask runs.", sub...),
		watermark:  d("subtask_watermark_ms", "The subtask's event-time watermark, in ms since the epoch (absent without event time).", sub...),
		busy: d("subtask_busy_ms_per_second", "Milliseconds per second the running subtask was busy over the last second: neither idle nor backpressured (Flink's busyTimeMsPerSecond; absent while it does not run).",
			sub...),
		backpressured: d("subtask_backpressured_ms_per_second", "Milliseconds per second the running subtask was blocked on a full output over the last second (Flink's backPressuredTimeMsPerSecond; absent while it does not run).",
			sub...),
		idle: d("subtask_idle_ms_per_second", "Milliseconds per second the running subtask waited for input over the last second (Flink's idleTimeMsPerSecond; absent while it does not run).",
			sub...),
		inflightLog: d("subtask_inflight_log_bytes", "Bytes the in-flight logs of the running subtask's outputs hold (task failover; absent while it does not run).",
			sub...),
		operatorMetric: d("operator_metric", "An operator metric of the subtask: a counter or gauge of a function (RuntimeContext.Metrics), or the engine's (late_records_dropped).",
			"vertex", "subtask", "operator", "name"),
		ckCompleted:  d("checkpoints_completed_total", "Checkpoints completed."),
		ckFailed:     d("checkpoints_failed_total", "Checkpoints that failed."),
		ckAborted:    d("checkpoints_aborted_total", "Checkpoints aborted (by a failover or a stop)."),
		ckLastID:     d("checkpoint_last_completed_id", "The id of the newest completed checkpoint."),
		failovers:    d("failovers_total", "Failovers, by strategy.", "strategy"),
		recordsLost:  d("records_lost_total", "Records lost by approximate local recovery, over all failovers."),
		lastOutage:   d("failover_last_outage_seconds", "The outage of the newest failover: from the failure until the restarted path emitted again."),
		lastRecovery: d("failover_last_recovery_seconds", "From the newest failure until every restarted subtask ran again."),
	}
}

// Describe implements prometheus.Collector.
func (c *JobCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

// Collect implements prometheus.Collector.
func (c *JobCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.snapshot()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(c.up, 1, r.Status)
	gauge(c.uptime, float64(r.WallMillis)/1000)
	for _, v := range r.Vertices {
		for _, s := range v.Subtasks {
			i := strconv.Itoa(s.Index)
			counter(c.recordsIn, float64(s.RecordsIn), v.Name, i)
			counter(c.recordsOut, float64(s.RecordsOut), v.Name, i)
			gauge(c.attempt, float64(s.Attempt), v.Name, i)
			run := 0.0
			if s.State == "RUNNING" {
				run = 1
				gauge(c.busy, float64(s.BusyMsPerSecond), v.Name, i)
				gauge(c.backpressured, float64(s.BackpressuredMsPerSecond), v.Name, i)
				gauge(c.idle, float64(s.IdleMsPerSecond), v.Name, i)
				gauge(c.inflightLog, float64(s.InflightLogBytes), v.Name, i)
			}
			gauge(c.running, run, v.Name, i)
			if s.Watermark != nil {
				gauge(c.watermark, float64(*s.Watermark), v.Name, i)
			}
			for name, val := range s.Metrics {
				op, metric, _ := strings.Cut(name, "/")
				gauge(c.operatorMetric, float64(val), v.Name, i, op, metric)
			}
		}
	}
	if ck := r.Checkpoints; ck != nil {
		counter(c.ckCompleted, float64(ck.Completed))
		counter(c.ckFailed, float64(ck.Failed))
		counter(c.ckAborted, float64(ck.Aborted))
		gauge(c.ckLastID, float64(ck.LastCompletedID))
	}
	byStrategy := map[string]int{}
	var lost uint64
	for _, f := range r.Failovers {
		byStrategy[f.Strategy]++
		lost += f.RecordsLost
	}
	for s, n := range byStrategy {
		counter(c.failovers, float64(n), s)
	}
	counter(c.recordsLost, float64(lost))
	if n := len(r.Failovers); n > 0 {
		f := r.Failovers[n-1]
		gauge(c.lastOutage, float64(f.OutageMillis)/1000)
		gauge(c.lastRecovery, float64(f.RecoveryMillis)/1000)
	}
}

// inflightLogCollector reads the in-flight log budgets of TaskManagers (task failover,
// docs/taskfailover.md §2.3) at every scrape: what their logs hold in memory and on disk, against the
// budget's limits, and what the spiller did.
type inflightLogCollector struct {
	tms                               []*cluster.TaskManager
	memory, disk, memoryMax, diskMax  *prometheus.Desc
	spilled, drops, spillErrors, logs *prometheus.Desc
}

func newInflightLogCollector(tms []*cluster.TaskManager) *inflightLogCollector {
	d := func(n, help string) *prometheus.Desc {
		return prometheus.NewDesc("runnel_inflight_log_"+n, help, []string{"taskmanager"}, nil)
	}
	return &inflightLogCollector{tms: tms,
		memory:      d("memory_bytes", "Memory the TaskManager's in-flight logs hold (task failover), in chunks lent by its budget."),
		disk:        d("disk_bytes", "Bytes the TaskManager's in-flight logs spilled to disk and still hold."),
		memoryMax:   d("memory_limit_bytes", "The TaskManager's in-flight log memory budget (--inflight-log-memory)."),
		diskMax:     d("disk_limit_bytes", "The most the TaskManager's in-flight logs may spill to disk."),
		spilled:     d("spilled_bytes_total", "Bytes the TaskManager's spiller wrote to the in-flight logs' spill files."),
		drops:       d("drops_total", "Times an in-flight log found no memory and dropped what it held: a failure then falls back to region failover."),
		spillErrors: d("spill_errors_total", "Writes of in-flight log chunks to disk that failed."),
		logs:        d("logs", "Open in-flight logs: one per subpartition of a logged partition."),
	}
}

// Describe implements prometheus.Collector.
func (c *inflightLogCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

// Collect implements prometheus.Collector.
func (c *inflightLogCollector) Collect(ch chan<- prometheus.Metric) {
	for _, tm := range c.tms {
		b := tm.InflightLogs()
		st := b.Stats()
		name := tm.Name()
		for _, m := range []struct {
			d *prometheus.Desc
			t prometheus.ValueType
			v int64
		}{
			{c.memory, prometheus.GaugeValue, b.Used()}, {c.disk, prometheus.GaugeValue, b.DiskUsed()},
			{c.memoryMax, prometheus.GaugeValue, b.Max()}, {c.diskMax, prometheus.GaugeValue, b.MaxDisk()},
			{c.spilled, prometheus.CounterValue, st.BytesSpilled}, {c.drops, prometheus.CounterValue, st.Drops},
			{c.spillErrors, prometheus.CounterValue, st.SpillErrors}, {c.logs, prometheus.GaugeValue, int64(st.Logs)},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, m.t, float64(m.v), name)
		}
	}
}

// Server serves metrics at /metrics over HTTP until stopped.
type Server struct {
	srv  *http.Server
	done sync.WaitGroup
	err  error
}

// ServeJob serves the job's metrics on ln, and those of the in-process TaskManagers tms; Stop ends the
// server and waits for it.
func ServeJob(ln net.Listener, name string, snapshot func() *report.JobResult, tms []*cluster.TaskManager) *Server {
	return serveMetrics(ln, jobRegistry(name, snapshot, tms), nil, nil)
}

// JobHandler serves the metrics ServeJob serves, for a server of the caller's (a run's dashboard).
func JobHandler(name string, snapshot func() *report.JobResult, tms []*cluster.TaskManager) http.Handler {
	reg := jobRegistry(name, snapshot, tms)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

func jobRegistry(name string, snapshot func() *report.JobResult, tms []*cluster.TaskManager) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewJobCollector(name, snapshot, nil), collectors.NewGoCollector())
	if len(tms) > 0 {
		reg.MustRegister(newInflightLogCollector(tms))
	}
	return reg
}

// ServeTaskManager serves the metrics of a TaskManager process (runnel taskmanager --metrics-addr)
// on ln: its in-flight log gauges, which no heartbeat carries to the JobManager, and the Go runtime's.
// With serverTLS it serves HTTPS with the TaskManager's certificate and asks the scraper for one, as the
// JobManager's REST API does. errorLog, when set, is the server's http.Server.ErrorLog.
func ServeTaskManager(ln net.Listener, tm *cluster.TaskManager, serverTLS *tls.Config, errorLog *log.Logger) *Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newInflightLogCollector([]*cluster.TaskManager{tm}), collectors.NewGoCollector())
	return serveMetrics(ln, reg, serverTLS, errorLog)
}

// serveMetrics serves reg at /metrics on ln (over TLS with serverTLS, with errorLog as the server's
// http.Server.ErrorLog) until stopped.
func serveMetrics(ln net.Listener, reg *prometheus.Registry, serverTLS *tls.Config, errorLog *log.Logger) *Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	m := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: serverTLS, ErrorLog: errorLog}}
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		var err error
		if serverTLS != nil {
			err = m.srv.ServeTLS(ln, "", "")
		} else {
			err = m.srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.err = err
		}
	}()
	return m
}

// Stop shuts the server down, letting a scrape in progress finish for a moment, and waits for it.
func (m *Server) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		m.srv.Close()
	}
	m.done.Wait()
	if m.err != nil {
		return fmt.Errorf("metrics server: %w", m.err)
	}
	return nil
}

package main

// The benchmarks that need a real cluster (docs/cluster.md §6.4): `runnel bench tm-loss` and
// `runnel bench throughput --processes N`. Both start a JobManager and TaskManagers as child processes of
// this binary, submit a registered job to them from this process (runnel.Submit) and read the JobManager's
// REST API. Every child is stopped and reaped before the command returns, on errors and interrupts too.
// What the figures mean is decided by pure functions (measureTMLoss, recoveredAfter, medians) so that they
// are tested without processes.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/bench/throughput"
	"github.com/runnel-dev/runnel/cmd/runnel/internal/proccluster"
	"github.com/runnel-dev/runnel/internal/report"
)

// Bounds and timings of the cluster benchmarks.
const (
	// childTailLines is how many of a child's last stderr lines are kept, to say why it failed; older lines
	// are dropped.
	childTailLines = 100
	// childStartTimeout bounds how long a child may take to print that it is ready.
	childStartTimeout = 60 * time.Second
	// childStopGrace is how long a child may take to exit after SIGTERM before it is SIGKILLed.
	childStopGrace = 5 * time.Second
	// phaseTimeout bounds each wait of a run: for the job to run steadily, for it to recover, to stop.
	phaseTimeout = 60 * time.Second
	// restPollInterval is how often the REST API is read while waiting for the job to change.
	restPollInterval = 10 * time.Millisecond
	// sourceVertex is the sequence job's chained source task; its subtask 1's TaskManager is the victim.
	sourceVertex = "source -> map"
)

// benchCluster is a cluster of child processes of this binary, named tm-1 ... tm-N, that logs the pid of
// every child to log.
type benchCluster struct{ *proccluster.Cluster }

// startBenchCluster starts taskManagers TaskManagers with slots slots each and waits until every one
// registered (registration order does not matter: the victim is found by REST). jmArgs go to the
// JobManager. On an error, what it started is stopped before it returns.
func startBenchCluster(ctx context.Context, taskManagers, slots int, jmArgs []string, log io.Writer) (*benchCluster, error) {
	c, err := proccluster.StartCluster(ctx, proccluster.Spec{TaskManagers: taskManagers, Slots: slots, JobManagerArgs: jmArgs,
		StartTimeout: childStartTimeout, Process: proccluster.Options{TailLines: childTailLines, Log: log}})
	if err != nil {
		return nil, err
	}
	return &benchCluster{c}, nil
}

// close stops every child and returns once all are reaped. It may be called more than once.
func (c *benchCluster) close() { c.Close(childStopGrace) }

// submission is a job submitted from this process with runnel.Submit, which blocks until the job ends.
type submission struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    *runnel.JobResult // once done
	err    error
}

// submit submits the registered job with args to the cluster.
func (c *benchCluster) submit(ctx context.Context, job string, args []string) *submission {
	sctx, cancel := context.WithCancel(ctx)
	s := &submission{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.res, s.err = runnel.Submit(sctx, runnel.SubmitConfig{JobManager: c.Addr, Job: job, Args: args})
	}()
	return s
}

// stop stops the job and waits for Submit to return. Submit's watch of the job outlives its context, so
// a JobManager that does not end the job within phaseTimeout is SIGKILLed, which ends the watch.
func (s *submission) stop(c *benchCluster) {
	s.cancel()
	select {
	case <-s.done:
		return
	case <-time.After(phaseTimeout):
	}
	_ = c.JobManager.Kill()
	<-s.done
}

// poll reads the job's REST document every restPollInterval until done says so (or fails), the job's
// submission ends, ctx ends or timeout passes; what names the awaited state in errors.
func (c *benchCluster) poll(ctx context.Context, s *submission, id string, timeout time.Duration, what string,
	done func(*runnel.JobResult) (bool, error)) (*runnel.JobResult, error) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(restPollInterval)
	defer tick.Stop()
	var doc runnel.JobResult
	for {
		doc = runnel.JobResult{}
		if err := c.Get(ctx, "/v1/jobs/"+id, &doc); err != nil {
			return nil, fmt.Errorf("waiting for %s: %w", what, err)
		}
		ok, err := done(&doc)
		if err != nil {
			return nil, fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return &doc, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no %s within %v: the job is %s (waiting: %q), failovers %s; JobManager's last lines:\n%s",
				what, timeout, doc.Status, doc.Waiting, describeFailovers(doc.Failovers), c.JobManager.LastLines())
		}
		select {
		case <-tick.C:
		case <-s.done:
			return nil, fmt.Errorf("waiting for %s: the job ended (%v) first", what, s.err)
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// describeFailovers summarizes failovers for an error message.
func describeFailovers(fs []runnel.FailoverResult) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("{%s taskmanager=%q at=%s restarted=%v recovery_ms=%d outage_ms=%d}",
			f.Failed, f.TaskManager, f.FailedAt.Format("15:04:05.000"), f.Restarted, f.RecoveryMillis, f.OutageMillis))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// jobID waits until the JobManager lists exactly one job and returns its id.
func (c *benchCluster) jobID(ctx context.Context, s *submission) (string, error) {
	deadline := time.Now().Add(phaseTimeout)
	tick := time.NewTicker(restPollInterval)
	defer tick.Stop()
	for {
		var jobs struct {
			Jobs []struct {
				ID string `json:"id"`
			} `json:"jobs"`
		}
		if err := c.Get(ctx, "/v1/jobs", &jobs); err != nil {
			return "", err
		}
		switch n := len(jobs.Jobs); {
		case n == 1:
			return jobs.Jobs[0].ID, nil
		case n > 1:
			return "", fmt.Errorf("the JobManager runs %d jobs, want only the benchmark's", n)
		case time.Now().After(deadline):
			return "", fmt.Errorf("the job was not submitted within %v", phaseTimeout)
		}
		select {
		case <-tick.C:
		case <-s.done:
			return "", fmt.Errorf("submitting the job: %w", cmp.Or(s.err, errors.New("it ended before the JobManager listed it")))
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// tmLossConfig configures `runnel bench tm-loss`.
type tmLossConfig struct {
	failovers []string
	runs      int
	// freeze SIGSTOPs the victim instead of SIGKILLing it: its sockets stay open, so only the
	// heartbeat timeout reveals the loss. terminate SIGTERMs it: it shuts down as the TaskManager of a
	// deleted pod does.
	freeze, terminate                   bool
	heartbeatInterval, heartbeatTimeout time.Duration
	rate                                float64 // records per second per source subtask
	checkpointInterval                  time.Duration
	unaligned                           unalignedFlags
}

// signal is what the victim gets: SIGKILL, or SIGSTOP with freeze, or SIGTERM with terminate.
func (cfg tmLossConfig) signal() syscall.Signal {
	switch {
	case cfg.freeze:
		return syscall.SIGSTOP
	case cfg.terminate:
		return syscall.SIGTERM
	}
	return syscall.SIGKILL
}

// signalName is the signal's name as people write it ("SIGKILL").
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGSTOP:
		return "SIGSTOP"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return "SIGKILL"
}

// tmLossSample is what one run measured.
type tmLossSample struct {
	Victim   string    `json:"victim"`
	KilledAt time.Time `json:"killed_at"`
	// DetectionMillis runs from the kill to the first failover it caused (the job master's first sign of
	// the loss: the TaskManager declared lost, or a consumer whose connection to it closed).
	DetectionMillis int64 `json:"detection_ms"`
	// LostMillis runs from the kill to the failover that declares the TaskManager lost.
	LostMillis int64 `json:"taskmanager_lost_ms"`
	// RestartMillis runs from the first failover to the last first output of a restarted path (for one
	// failover: its outage_ms).
	RestartMillis int64 `json:"restart_ms"`
	// TotalMillis is DetectionMillis + RestartMillis: from the kill until every restarted path emitted.
	TotalMillis int64 `json:"total_ms"`
	// Failovers counts the failovers the kill caused; FirstCause is the first one's cause, LostCause that
	// of the failover that declares the TaskManager lost (how the job master learnt of it).
	Failovers          int      `json:"failovers"`
	FirstCause         string   `json:"first_cause"`
	LostCause          string   `json:"lost_cause"`
	Restarted          []string `json:"restarted"`
	RecordsLost        uint64   `json:"records_lost"`
	CheckpointRestored *int64   `json:"checkpoint_restored"`
	// UpstreamUnchanged: every source subtask that did not run on the victim kept its first attempt.
	UpstreamUnchanged bool `json:"upstream_unchanged"`
}

// tmLossResult is the medians of one strategy's runs: the --json object.
type tmLossResult struct {
	Strategy          string `json:"strategy"`
	Signal            string `json:"signal"`
	HeartbeatInterval int64  `json:"heartbeat_interval_ms"`
	HeartbeatTimeout  int64  `json:"heartbeat_timeout_ms"`
	Runs              int    `json:"runs"`
	DetectionMillis   int64  `json:"detection_ms"`
	LostMillis        int64  `json:"taskmanager_lost_ms"`
	RestartMillis     int64  `json:"restart_ms"`
	TotalMillis       int64  `json:"total_ms"`
	RestartedSubtasks int64  `json:"restarted_subtasks"`
	// Failovers is the median count of the failovers a kill caused; LossFirst counts the runs whose first
	// failover was the TaskManager's own loss, not a consumer's failure that came before it.
	Failovers         int64          `json:"failovers"`
	LossFirst         int            `json:"loss_first"`
	RecordsLost       int64          `json:"records_lost"`
	UpstreamUnchanged bool           `json:"upstream_unchanged"` // in every run
	Samples           []tmLossSample `json:"samples"`
}

// failoversAfter returns the failovers of doc the job master started at or after t.
func failoversAfter(doc *runnel.JobResult, t time.Time) []runnel.FailoverResult {
	var out []runnel.FailoverResult
	for _, f := range doc.Failovers {
		if !f.FailedAt.Before(t) {
			out = append(out, f)
		}
	}
	return out
}

// outageEnd returns when the last restarted path of failovers emitted again: the latest failed_at +
// outage_ms, and whether any failover has an outage_ms yet.
func outageEnd(fs []runnel.FailoverResult) (time.Time, bool) {
	var end time.Time
	for _, f := range fs {
		if f.OutageMillis == 0 {
			continue
		}
		if e := f.FailedAt.Add(time.Duration(f.OutageMillis) * time.Millisecond); e.After(end) {
			end = e
		}
	}
	return end, !end.IsZero()
}

// recoveredAfter reports whether doc shows the job recovered from the loss of victim at killedAt: a
// failover since the kill names the victim, every such failover has its restarted subtasks running again
// (recovery_ms), and the restarted path emitted again after the last of them began.
//
// The last condition is not "every failover has an outage_ms": failovers that come together (a consumer
// that saw its connection to the victim close, then the victim's loss) share one restart, whose new
// attempts each belong to the first failover that restarted them, so only that one sees the tail emit
// and the others never get an outage_ms. A failover that began after the path emitted again restarts it
// anew and must have its own. A job that ended is an error.
func recoveredAfter(doc *runnel.JobResult, victim string, killedAt time.Time) (bool, error) {
	switch doc.Status {
	case "FAILED", "CANCELED", "FINISHED":
		return false, fmt.Errorf("the job ended %s (%s) before it recovered from the loss of %s", doc.Status, doc.Error, victim)
	}
	fs := failoversAfter(doc, killedAt)
	end, emitted := outageEnd(fs)
	if !emitted {
		return false, nil
	}
	named := false
	for _, f := range fs {
		if f.RecoveryMillis == 0 || f.OutageMillis == 0 && f.FailedAt.After(end) {
			return false, nil
		}
		named = named || f.TaskManager == victim
	}
	return named, nil
}

// steady reports whether the job runs every subtask, has completed a checkpoint, and (so that the
// victim's loss is not its only one) spreads its subtasks over more than one TaskManager.
func steady(doc *runnel.JobResult) bool {
	if doc.Status != "RUNNING" || doc.Checkpoints == nil || doc.Checkpoints.Completed == 0 || doc.Waiting != "" {
		return false
	}
	tms := map[string]bool{}
	for _, v := range doc.Vertices {
		for _, s := range v.Subtasks {
			if s.State != "RUNNING" {
				return false
			}
			tms[s.TaskManager] = true
		}
	}
	return len(tms) > 1
}

// measureTMLoss computes a run's figures from the job before the kill (placement), after its recovery,
// the victim and when it was killed.
func measureTMLoss(before, after *runnel.JobResult, victim string, killedAt time.Time) (tmLossSample, error) {
	s := tmLossSample{Victim: victim, KilledAt: killedAt, Restarted: []string{}}
	fs := failoversAfter(after, killedAt)
	if len(fs) == 0 {
		return s, fmt.Errorf("no failover after the kill of %s at %s", victim, killedAt.Format(time.RFC3339Nano))
	}
	end, emitted := outageEnd(fs)
	if !emitted {
		return s, fmt.Errorf("after the kill of %s the restarted path never emitted again: failovers %s", victim, describeFailovers(fs))
	}
	first, firstCause := fs[0].FailedAt, fs[0].Cause
	var lost *runnel.FailoverResult
	restarted := map[string]bool{}
	for i, f := range fs {
		if f.FailedAt.Before(first) {
			first, firstCause = f.FailedAt, f.Cause
		}
		if f.TaskManager == victim && lost == nil {
			lost = &fs[i]
		}
		for _, r := range f.Restarted {
			restarted[r] = true
		}
		s.RecordsLost += f.RecordsLost
	}
	if lost == nil {
		return s, fmt.Errorf("none of the %d failovers after the kill names the lost TaskManager %s", len(fs), victim)
	}
	s.Failovers, s.FirstCause, s.LostCause = len(fs), firstCause, lost.Cause
	s.DetectionMillis = report.CeilMillis(first.Sub(killedAt))
	s.LostMillis = report.CeilMillis(lost.FailedAt.Sub(killedAt))
	s.TotalMillis = report.CeilMillis(end.Sub(killedAt))
	s.RestartMillis = s.TotalMillis - s.DetectionMillis
	s.CheckpointRestored = lost.CheckpointRestored
	for r := range restarted {
		s.Restarted = append(s.Restarted, r)
	}
	slices.Sort(s.Restarted)
	where, _ := proccluster.Placement(before)
	_, attempt := proccluster.Placement(after)
	s.UpstreamUnchanged = true
	sources := 0
	for st, tm := range where {
		if !strings.HasPrefix(st, sourceVertex+"[") {
			continue
		}
		sources++
		if tm != victim && attempt[st] != 0 {
			s.UpstreamUnchanged = false
		}
	}
	if sources == 0 {
		return s, fmt.Errorf("the job has no vertex %q", sourceVertex)
	}
	return s, nil
}

// medianInt64 returns the median of xs (the upper one of an even count), 0 for none.
func medianInt64(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// summarizeTMLoss folds one strategy's samples into their medians.
func summarizeTMLoss(strategy string, cfg tmLossConfig, samples []tmLossSample) tmLossResult {
	r := tmLossResult{Strategy: strategy, Signal: signalName(cfg.signal()), HeartbeatInterval: cfg.heartbeatInterval.Milliseconds(),
		HeartbeatTimeout: cfg.heartbeatTimeout.Milliseconds(), Runs: len(samples), UpstreamUnchanged: len(samples) > 0, Samples: samples}
	col := func(f func(tmLossSample) int64) int64 {
		var xs []int64
		for _, s := range samples {
			xs = append(xs, f(s))
		}
		return medianInt64(xs)
	}
	r.DetectionMillis = col(func(s tmLossSample) int64 { return s.DetectionMillis })
	r.LostMillis = col(func(s tmLossSample) int64 { return s.LostMillis })
	r.RestartMillis = col(func(s tmLossSample) int64 { return s.RestartMillis })
	r.TotalMillis = col(func(s tmLossSample) int64 { return s.TotalMillis })
	r.RestartedSubtasks = col(func(s tmLossSample) int64 { return int64(len(s.Restarted)) })
	r.RecordsLost = col(func(s tmLossSample) int64 { return int64(s.RecordsLost) })
	r.Failovers = col(func(s tmLossSample) int64 { return int64(s.Failovers) })
	for _, s := range samples {
		r.UpstreamUnchanged = r.UpstreamUnchanged && s.UpstreamUnchanged
		if s.FirstCause == s.LostCause && strings.HasPrefix(s.LostCause, "TaskManager "+s.Victim+" ") {
			r.LossFirst++
		}
	}
	return r
}

// runTMLoss is one run: a new cluster, the sequence job at parallelism 4, the kill of the TaskManager that
// runs source -> map[1] once a checkpoint completed, and the figures of the recovery.
func runTMLoss(ctx context.Context, cfg tmLossConfig, strategy string, log io.Writer) (tmLossSample, error) {
	dir, err := os.MkdirTemp("", "runnel-bench-tm-loss-")
	if err != nil {
		return tmLossSample{}, fmt.Errorf("checkpoint directory: %w", err)
	}
	defer os.RemoveAll(dir)
	var jmArgs []string
	if cfg.heartbeatInterval > 0 {
		jmArgs = []string{"--heartbeat-interval", cfg.heartbeatInterval.String(), "--heartbeat-timeout", cfg.heartbeatTimeout.String()}
	}
	c, err := startBenchCluster(ctx, 3, 2, jmArgs, log)
	if err != nil {
		return tmLossSample{}, err
	}
	defer c.close()
	// Unbounded, rate-limited sources: the job runs until it is stopped. A key's counters go to the sink
	// every 10 of its records, so that the restarted path's first output comes soon after it runs.
	args := []string{"--records=0", fmt.Sprintf("--rate=%g", cfg.rate), "--parallelism=4", "--failover=" + strategy,
		"--checkpoint-interval=" + cfg.checkpointInterval.String(), "--checkpoint-storage=" + filepath.Join(dir, "chk"),
		"--emit-every=10"}
	args = append(args, cfg.unaligned.args()...)
	sub := c.submit(ctx, "sequence", args)
	defer sub.stop(c)
	id, err := c.jobID(ctx, sub)
	if err != nil {
		return tmLossSample{}, err
	}
	before, err := c.poll(ctx, sub, id, phaseTimeout, "the job to run with a completed checkpoint",
		func(doc *runnel.JobResult) (bool, error) { return steady(doc), nil })
	if err != nil {
		return tmLossSample{}, err
	}
	where, _ := proccluster.Placement(before)
	victimName := where[sourceVertex+"[1]"]
	victim := c.TaskManager(victimName)
	if victim == nil {
		return tmLossSample{}, fmt.Errorf("%s[1] runs on %q, not on one of the benchmark's TaskManagers", sourceVertex, victimName)
	}
	killedAt := time.Now().Round(0) // wall clock only: failed_at comes from the JobManager's
	switch sig := cfg.signal(); sig {
	case syscall.SIGSTOP:
		err = victim.Freeze()
	case syscall.SIGKILL:
		err = victim.Kill()
	default: // it exits by itself; the cluster's close reaps it
		err = victim.Signal(sig)
	}
	if err != nil {
		return tmLossSample{}, err
	}
	if _, err := c.poll(ctx, sub, id, phaseTimeout, "the recovery from the loss of "+victimName,
		func(doc *runnel.JobResult) (bool, error) { return recoveredAfter(doc, victimName, killedAt) }); err != nil {
		return tmLossSample{}, err
	}
	sub.stop(c)
	var after runnel.JobResult
	if err := c.Get(ctx, "/v1/jobs/"+id, &after); err != nil {
		return tmLossSample{}, fmt.Errorf("the job after it stopped: %w", err)
	}
	return measureTMLoss(before, &after, victimName, killedAt)
}

// runTMLossBench runs every strategy cfg.runs times, the strategies alternating run by run so that each
// sees the same machine weather, and returns their medians in the order of cfg.failovers.
func runTMLossBench(ctx context.Context, cfg tmLossConfig, log io.Writer) ([]tmLossResult, error) {
	samples := map[string][]tmLossSample{}
	for run := range cfg.runs {
		for _, strategy := range cfg.failovers {
			s, err := runTMLoss(ctx, cfg, strategy, log)
			if err != nil {
				return nil, fmt.Errorf("tm-loss %s run %d: %w", strategy, run+1, err)
			}
			fmt.Fprintf(log, "bench: tm-loss %s run %d/%d: %s lost after %d ms, detected after %d ms, output again after %d ms (%d failovers, %d restarted, %d records lost)\n",
				strategy, run+1, cfg.runs, s.Victim, s.LostMillis, s.DetectionMillis, s.TotalMillis, s.Failovers, len(s.Restarted), s.RecordsLost)
			samples[strategy] = append(samples[strategy], s)
		}
	}
	var out []tmLossResult
	for _, strategy := range cfg.failovers {
		out = append(out, summarizeTMLoss(strategy, cfg, samples[strategy]))
	}
	return out, nil
}

// writeTMLossTable prints the medians as a table.
func writeTMLossTable(w io.Writer, cfg tmLossConfig, res []tmLossResult) error {
	sig := signalName(cfg.signal())
	fmt.Fprintf(w, "%s of the TaskManager running %s[1]: JobManager + 3 TaskManagers x 2 slots, sequence at parallelism 4,\n", sig, sourceVertex)
	fmt.Fprintf(w, "checkpoints every %v, heartbeats every %v, lost after %v of silence; medians of %d runs\n",
		cfg.checkpointInterval, cfg.heartbeatInterval, cfg.heartbeatTimeout, cfg.runs)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tdetection_ms\ttm_lost_ms\trestart_ms\ttotal_ms\trestarted\trecords_lost\tupstream_unchanged\tfailovers\tloss_first\t")
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t%d\t%d/%d\t\n", r.Strategy, r.DetectionMillis, r.LostMillis, r.RestartMillis,
			r.TotalMillis, r.RestartedSubtasks, r.RecordsLost, r.UpstreamUnchanged, r.Failovers, r.LossFirst, r.Runs)
	}
	return tw.Flush()
}

func newTMLossBenchCmd() *cobra.Command {
	cfg := tmLossConfig{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tm-loss",
		Short: "SIGKILL (or SIGSTOP, SIGTERM) a TaskManager process of a real cluster: detection and restart times per failover strategy",
		Long: `Per run and strategy, starts a JobManager and three TaskManagers (two slots each) as child processes of
this binary, submits the sequence example at parallelism 4 (unbounded, --rate records/s per source
subtask, checkpoints every --checkpoint-interval into a temporary directory), waits for a completed
checkpoint, and SIGKILLs the TaskManager that runs source -> map[1] (with --freeze: SIGSTOPs it, so that
only the heartbeat timeout reveals the loss; with --terminate: SIGTERMs it, so that it shuts down as the
TaskManager of a deleted pod does). From the JobManager's REST API, once the job emits again:

  detection_ms        kill -> the first failover it caused (failed_at)
  tm_lost_ms          kill -> the failover that declares the TaskManager lost
  restart_ms          that first failover -> the last restarted path's first output (outage_ms)
  total_ms            detection_ms + restart_ms
  restarted           subtasks restarted by the kill's failovers
  records_lost        their records_lost
  upstream_unchanged  every source subtask on a live TaskManager kept attempt 0 (in every run)
  failovers           failovers the kill caused
  loss_first          runs whose first failover was the TaskManager's own loss (or leave), not the
                      failure of a consumer that saw it go first

Each figure is the median of its own column over the runs (so total_ms need not be the sum of the
medians of detection_ms and restart_ms). Prints the medians per strategy as a table, or with --json one JSON object per strategy per line (with
every run's figures under "samples"). Every child process is stopped before the command returns.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.freeze && cfg.terminate {
				return usageError(errors.New("--freeze and --terminate exclude each other: the TaskManager gets one signal"))
			}
			if cfg.runs < 1 {
				return usageError(fmt.Errorf("invalid --runs %d: must be at least 1", cfg.runs))
			}
			for _, f := range cfg.failovers {
				if f != "full" && f != "region" && f != "approximate" {
					return usageError(fmt.Errorf("invalid --failover %q: use full, region or approximate", f))
				}
			}
			if len(cfg.failovers) == 0 {
				return usageError(errors.New("--failover names no strategy"))
			}
			if cfg.heartbeatInterval <= 0 || cfg.heartbeatTimeout < 2*cfg.heartbeatInterval {
				return usageError(fmt.Errorf("invalid --heartbeat-timeout %v with --heartbeat-interval %v: the interval must be positive and the timeout at least twice it",
					cfg.heartbeatTimeout, cfg.heartbeatInterval))
			}
			if cfg.rate <= 0 {
				return usageError(fmt.Errorf("invalid --rate %v: must be positive (the job is unbounded)", cfg.rate))
			}
			if cfg.checkpointInterval <= 0 {
				return usageError(fmt.Errorf("invalid --checkpoint-interval %v: must be positive", cfg.checkpointInterval))
			}
			if err := cfg.unaligned.validate(true, ""); err != nil {
				return usageError(err)
			}
			// SIGINT and SIGTERM end the runs cleanly: the children are stopped, not orphaned.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := runTMLossBench(ctx, cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				return writeTMLossTable(out, cfg, res)
			}
			return writeJSONLines(out, res)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&cfg.failovers, "failover", []string{"approximate", "region", "full"}, "failover strategies to run, in order (approximate, region, full)")
	fl.IntVar(&cfg.runs, "runs", 3, "runs per strategy; medians are reported")
	fl.BoolVar(&cfg.freeze, "freeze", false, "SIGSTOP the TaskManager instead of SIGKILL: its connections stay open, so the heartbeat timeout detects it")
	fl.BoolVar(&cfg.terminate, "terminate", false, "SIGTERM the TaskManager instead of SIGKILL: it shuts down as a deleted pod's does")
	fl.DurationVar(&cfg.heartbeatInterval, "heartbeat-interval", runnel.DefaultHeartbeatInterval, "the JobManager's heartbeat interval")
	fl.DurationVar(&cfg.heartbeatTimeout, "heartbeat-timeout", runnel.DefaultHeartbeatTimeout, "the JobManager's heartbeat timeout")
	fl.Float64Var(&cfg.rate, "rate", 2000, "records per second per source subtask")
	fl.DurationVar(&cfg.checkpointInterval, "checkpoint-interval", 100*time.Millisecond, "checkpoint interval")
	cfg.unaligned.register(fl, "the job")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object per strategy per line")
	return cmd
}

// processThroughput compares the standard pipeline on TaskManager processes with the mini-cluster.
type processThroughput struct {
	Processes   int    `json:"processes"`
	Records     uint64 `json:"records"`
	Keys        int64  `json:"keys"`
	Parallelism int    `json:"parallelism"`
	Runs        int    `json:"runs"`
	// ClusterRPS is records over the median wall_ms of the runs on a JobManager and Processes
	// TaskManager processes; MiniClusterRPS the same in-process with Processes TaskManagers.
	ClusterRPS      float64 `json:"cluster_rps"`
	MiniClusterRPS  float64 `json:"minicluster_rps"`
	Ratio           float64 `json:"ratio"`
	ClusterWall     []int64 `json:"cluster_wall_ms"`
	MiniClusterWall []int64 `json:"minicluster_wall_ms"`
}

// rps is records per second over wall milliseconds (at least one: a tiny run still gives a figure).
func rps(records uint64, wallMillis int64) float64 {
	return float64(records) / (float64(max(wallMillis, 1)) / 1000)
}

// runProcessThroughput runs bench-throughput at parallelism processes, cfg.Runs times on a cluster of
// processes TaskManager processes (one slot each) and as many times in the mini-cluster with that many
// TaskManagers, alternating which goes first. Both place subtask i of every operator on TaskManager i,
// so both pay TCP for the same channels; the ratio measures processes and the control plane.
func runProcessThroughput(ctx context.Context, records uint64, keys int64, processes, runs int, log io.Writer) (*processThroughput, error) {
	res := &processThroughput{Processes: processes, Records: records, Keys: keys, Parallelism: processes, Runs: runs}
	job := benchThroughputArgs{records: records, keys: keys, parallelism: processes}
	c, err := startBenchCluster(ctx, processes, 1, nil, log)
	if err != nil {
		return nil, err
	}
	defer c.close()
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mini := func() (int64, error) {
		env := runnel.NewEnvironment(append(benchThroughputOptions, runnel.WithParallelism(processes),
			runnel.WithTaskManagers(processes), runnel.WithLogger(logger))...)
		if err := job.build(env); err != nil {
			return 0, err
		}
		r, err := env.Execute(ctx, benchThroughputJob)
		if err != nil {
			return 0, fmt.Errorf("mini-cluster run: %w", err)
		}
		if r.Status != "FINISHED" {
			return 0, fmt.Errorf("mini-cluster run ended %s: %s", r.Status, r.Error)
		}
		return r.WallMillis, nil
	}
	cluster := func() (int64, error) {
		sub := c.submit(ctx, benchThroughputJob, job.args())
		<-sub.done
		if sub.err != nil {
			return 0, fmt.Errorf("cluster run: %w", sub.err)
		}
		if sub.res.Status != "FINISHED" {
			return 0, fmt.Errorf("cluster run ended %s: %s", sub.res.Status, sub.res.Error)
		}
		return sub.res.WallMillis, nil
	}
	type mode struct {
		run   func() (int64, error)
		walls *[]int64
	}
	modes := []mode{{mini, &res.MiniClusterWall}, {cluster, &res.ClusterWall}}
	for i := range runs {
		for j := range modes {
			m := modes[(i+j)%len(modes)] // the other mode goes first in every other round
			wall, err := m.run()
			if err != nil {
				return nil, fmt.Errorf("throughput round %d: %w", i+1, err)
			}
			*m.walls = append(*m.walls, wall)
		}
		fmt.Fprintf(log, "bench: throughput round %d/%d: mini-cluster %d ms, cluster %d ms\n", i+1, runs,
			res.MiniClusterWall[i], res.ClusterWall[i])
	}
	res.MiniClusterRPS = rps(records, medianInt64(res.MiniClusterWall))
	res.ClusterRPS = rps(records, medianInt64(res.ClusterWall))
	res.Ratio = res.ClusterRPS / res.MiniClusterRPS
	return res, nil
}

// writeProcessThroughput prints the comparison.
func writeProcessThroughput(w io.Writer, r *processThroughput) {
	fmt.Fprintf(w, "records            %d (keys %d, parallelism %d, %d TaskManagers, medians of %d runs)\n", r.Records, r.Keys, r.Parallelism, r.Processes, r.Runs)
	fmt.Fprintf(w, "mini-cluster       %12.0f records/s  (wall_ms %v)\n", r.MiniClusterRPS, r.MiniClusterWall)
	fmt.Fprintf(w, "%-19s%12.0f records/s  (wall_ms %v)\n", fmt.Sprintf("%d processes", r.Processes), r.ClusterRPS, r.ClusterWall)
	fmt.Fprintf(w, "ratio              %12.3f\n", r.Ratio)
}

// runProcessThroughputCmd is `runnel bench throughput --processes N`.
func runProcessThroughputCmd(cmd *cobra.Command, cfg throughput.Config, processes int, asJSON bool) error {
	if processes < 1 || processes > runnel.MaxTaskManagers {
		return usageError(fmt.Errorf("invalid --processes %d: must be between 1 and %d", processes, runnel.MaxTaskManagers))
	}
	runs := cfg.Runs
	if runs < 1 {
		return usageError(fmt.Errorf("invalid --runs %d: must be at least 1", runs))
	}
	// SIGINT and SIGTERM end the runs cleanly: the children are stopped, not orphaned.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := runProcessThroughput(ctx, cfg.Records, cfg.Keys, processes, runs, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	writeProcessThroughput(cmd.OutOrStdout(), res)
	return nil
}

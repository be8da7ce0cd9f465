package main

// `runnel bench jm-loss` (docs/cluster.md §6.4): SIGKILL of the leading JobManager of an HA cluster on
// etcd while the sequence job runs, and what its output did across the takeover.
//
// The cluster is child processes: an etcd member, two JobManagers with --ha (a short lease, --ha-ttl), and
// TaskManagers with --ha; the job is submitted by a `runnel submit --ha` child, which follows the leader
// through etcd and writes the job's report (the checker's counts) when the job ends.
//
// The etcd member is not linked into this binary (it would add the whole etcd server to every runnel
// binary for one benchmark). By default the bench builds bench/etcd, a small main package of this module
// around go.etcd.io/etcd/server/v3/embed at the version go.mod pins, with `go build` into the run's
// temporary directory: that needs the Go toolchain and this module's source (run the bench from the
// checkout). --etcd-binary PATH uses that build (or any program that prints bench/etcd's ready line);
// --etcd etcd://HOST:PORT uses an etcd that runs already, with a cluster name of its own per run.
//
// The output over time comes from the sink itself: the sequence job's --progress-dir makes each sink
// writer log the wall-clock time of every report it receives (examples/sequence/progress.go), in the
// TaskManager process that runs it, into a directory all processes share. The REST API's counters are no
// measure here: the TaskManagers send them every 200 ms, and to the leader only, so while no JobManager
// leads there is no sample at all, and output that went on then could not be told from output that
// stopped. The bench and the sink run on one machine, so their wall clocks agree.
//
// What the figures mean is decided by pure functions (parseProgress, measureJMLoss, summarizeJMLoss),
// tested without processes.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/cmd/runnel/internal/proccluster"
	"github.com/runnel-dev/runnel/examples/sequence"
	"github.com/runnel-dev/runnel/internal/report"
)

// etcdReady is the line by which bench/etcd says it serves, with its HA address.
var etcdReady = regexp.MustCompile(`etcd ready at (etcd://\S+)`)

// etcdPackage is the package of the etcd member the bench builds.
const etcdPackage = "github.com/runnel-dev/runnel/bench/etcd"

// The modes of jm-loss: what the JobManagers and TaskManagers do with the job when its leader is lost.
const (
	// modeRestart: the new leader restarts the job from its latest checkpoint; the TaskManagers cancel
	// their tasks when they lose the leader.
	modeRestart = "restart"
	// modeContinuity: the TaskManagers keep their tasks running for a grace period, and the new leader
	// takes the running job over.
	modeContinuity = "continuity"
)

// jmLossMode is a mode's flags: to every JobManager and to every TaskManager.
type jmLossMode struct {
	name           string
	jmArgs, tmArgs []string
}

// jmLossModes returns the modes named, with their flags. continuityFlags says whether the binary has
// --ha-continuity and --ha-grace: without them, restart is what the binary does anyway and continuity
// cannot be asked for.
func jmLossModes(names []string, continuityFlags bool, grace time.Duration) ([]jmLossMode, error) {
	if len(names) == 0 {
		return nil, errors.New("--mode names no mode")
	}
	var out []jmLossMode
	for _, n := range names {
		switch {
		case n == modeRestart && continuityFlags:
			out = append(out, jmLossMode{name: n, jmArgs: []string{"--ha-continuity=false"}, tmArgs: []string{"--ha-grace=0s"}})
		case n == modeRestart:
			out = append(out, jmLossMode{name: n})
		case n == modeContinuity && continuityFlags:
			out = append(out, jmLossMode{name: n, jmArgs: []string{"--ha-continuity=true"}, tmArgs: []string{"--ha-grace=" + grace.String()}})
		case n == modeContinuity:
			return nil, errors.New("--mode continuity: this binary's JobManager has no --ha-continuity (or its TaskManager no --ha-grace): it has no task continuity to measure")
		default:
			return nil, fmt.Errorf("invalid --mode %q: use restart or continuity", n)
		}
	}
	return out, nil
}

// hasContinuityFlags reports whether the runnel binary bin knows --ha-continuity (jobmanager) and
// --ha-grace (taskmanager), from their --help.
func hasContinuityFlags(ctx context.Context, bin string) (bool, error) {
	for _, c := range [][2]string{{"jobmanager", "--ha-continuity"}, {"taskmanager", "--ha-grace"}} {
		out, err := exec.CommandContext(ctx, bin, c[0], "--help").CombinedOutput()
		if err != nil {
			return false, fmt.Errorf("%s %s --help: %w: %s", bin, c[0], err, out)
		}
		if !bytes.Contains(out, []byte(c[1])) {
			return false, nil
		}
	}
	return true, nil
}

// jmLossConfig configures `runnel bench jm-loss`.
type jmLossConfig struct {
	modes               []string
	runs                int
	taskManagers, slots int
	parallelism, keys   int
	rate                float64 // records per second per source subtask
	duration            time.Duration
	killAfter           time.Duration
	checkpointInterval  time.Duration
	unaligned           unalignedFlags
	haTTL, grace        time.Duration
	emitEvery           int64
	etcd, etcdBinary    string
	keepDir             bool
}

// records is how many records the job generates: --duration's worth at --rate from every source subtask.
func (cfg jmLossConfig) records() uint64 {
	return uint64(cfg.rate * cfg.duration.Seconds() * float64(cfg.parallelism))
}

// progressLog is what one sink writer logged: when it started and the time of every report it received.
type progressLog struct {
	Name   string
	Start  time.Time
	Writes []time.Time
}

// parseProgress reads one progress file of the sequence job's sink (examples/sequence/progress.go). A
// last line without its newline is a write in progress and is left out.
func parseProgress(name string, data []byte) (progressLog, error) {
	l := progressLog{Name: name}
	lines := strings.Split(string(data), "\n")
	lines = lines[:len(lines)-1] // "" after the last newline, or an unfinished line
	if len(lines) == 0 || !strings.HasPrefix(lines[0], sequence.ProgressHeader+" ") {
		return l, fmt.Errorf("progress file %s: no header line %q", name, sequence.ProgressHeader)
	}
	for _, f := range strings.Fields(strings.TrimPrefix(lines[0], sequence.ProgressHeader)) {
		if v, ok := strings.CutPrefix(f, "start="); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return l, fmt.Errorf("progress file %s: header %q: start: %w", name, lines[0], err)
			}
			l.Start = time.UnixMicro(us)
		}
	}
	if l.Start.IsZero() {
		return l, fmt.Errorf("progress file %s: header %q names no start", name, lines[0])
	}
	for i, line := range lines[1:] {
		us, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return l, fmt.Errorf("progress file %s: line %d %q: %w", name, i+2, line, err)
		}
		l.Writes = append(l.Writes, time.UnixMicro(us))
	}
	return l, nil
}

// readProgress parses every progress file in dir.
func readProgress(dir string) ([]progressLog, error) {
	files, err := filepath.Glob(filepath.Join(dir, "sink-*.log"))
	if err != nil {
		return nil, fmt.Errorf("progress files: %w", err)
	}
	var logs []progressLog
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("progress file: %w", err)
		}
		l, err := parseProgress(filepath.Base(f), data)
		if err != nil {
			return nil, err
		}
		logs = append(logs, l)
	}
	return logs, nil
}

// jmLossReport is what the bench reads of the job's report: its end, the checker, the resume.
type jmLossReport struct {
	Status       string                `json:"status"`
	Error        string                `json:"error"`
	Checker      sequence.Checker      `json:"checker"`
	RestoredFrom *runnel.RestoreResult `json:"restored_from"`
	Resumed      *report.ResumeResult  `json:"resumed"`
}

// jmLossSample is what one run measured. Times are from the kill of the leader (killed_at); a figure
// before the kill is negative.
type jmLossSample struct {
	Mode     string    `json:"mode"`
	KilledAt time.Time `json:"killed_at"`
	// TakeoverMillis runs to the standby's first ready answer (GET /healthz/ready 200), polled every 10 ms.
	TakeoverMillis int64 `json:"takeover_ms"`
	// FirstOutputMillis runs to the sink's first report at or after the takeover; FirstOutputWriter says
	// whether a sink writer that ran before the kill wrote it ("kept") or one started since ("new").
	FirstOutputMillis int64  `json:"first_output_ms"`
	FirstOutputWriter string `json:"first_output_writer"`
	// LongestGapMillis is the longest silence of the sink between two reports, the later one after the
	// kill; it began GapStartMillis after the kill (negative: before) and ended at OutputResumedMillis.
	LongestGapMillis    int64 `json:"longest_gap_ms"`
	GapStartMillis      int64 `json:"gap_start_ms"`
	OutputResumedMillis int64 `json:"output_resumed_ms"`
	// BaselineMaxGapMillis is the longest silence from the job's steady state to the kill: the noise floor
	// (network buffers flushed every 100 ms, checkpoint pauses, a loaded machine).
	BaselineMaxGapMillis int64 `json:"baseline_max_gap_ms"`
	// KeptWriterReportsAfterKill counts the reports that sink writers started before the kill received
	// after it; SinkWriters counts the writers of the run.
	KeptWriterReportsAfterKill int `json:"kept_writer_reports_after_kill"`
	SinkWriters                int `json:"sink_writers"`
	// The checker's counts from the job's report: ExactlyOnce is the job FINISHED with the verdict OK,
	// every generated record counted once.
	RecordsExpected    int64  `json:"records_expected"`
	RecordsChecked     int64  `json:"records_checked"`
	RecordsLost        int64  `json:"records_lost"`
	RecordsDuplicated  int64  `json:"records_duplicated"`
	RecordsOutOfOrder  int64  `json:"records_out_of_order"`
	Verdict            string `json:"verdict"`
	ExactlyOnce        bool   `json:"exactly_once"`
	CheckpointRestored *int64 `json:"checkpoint_restored"`
	Resumed            bool   `json:"resumed"`
}

// measureJMLoss computes a run's figures from the sink writers' logs, when the job ran steadily, when the
// leader was killed and when the standby took over. It does not read the report (addChecker does).
func measureJMLoss(logs []progressLog, steadyAt, killedAt, takeoverAt time.Time) (jmLossSample, error) {
	s := jmLossSample{KilledAt: killedAt, SinkWriters: len(logs)}
	if takeoverAt.Before(killedAt) {
		return s, fmt.Errorf("the takeover at %s comes before the kill at %s", takeoverAt.Format(time.RFC3339Nano), killedAt.Format(time.RFC3339Nano))
	}
	type write struct {
		at   time.Time
		kept bool
	}
	var ws []write
	for _, l := range logs {
		kept := l.Start.Before(killedAt)
		for _, w := range l.Writes {
			ws = append(ws, write{w, kept})
			if kept && w.After(killedAt) {
				s.KeptWriterReportsAfterKill++
			}
		}
	}
	slices.SortStableFunc(ws, func(a, b write) int { return a.at.Compare(b.at) })
	ms := func(t time.Time) int64 { return signedMillis(t.Sub(killedAt)) }
	s.TakeoverMillis = ms(takeoverAt)
	first := slices.IndexFunc(ws, func(w write) bool { return !w.at.Before(takeoverAt) })
	if first < 0 {
		return s, fmt.Errorf("the sink reported nothing after the takeover (%d reports in all)", len(ws))
	}
	s.FirstOutputMillis = ms(ws[first].at)
	s.FirstOutputWriter = "new"
	if ws[first].kept {
		s.FirstOutputWriter = "kept"
	}
	before := slices.IndexFunc(ws, func(w write) bool { return w.at.After(killedAt) })
	if before <= 0 {
		return s, errors.New("the sink reported nothing before the kill")
	}
	var longest time.Duration
	for i := before; i < len(ws); i++ {
		if g := ws[i].at.Sub(ws[i-1].at); g > longest || i == before {
			longest = g
			s.GapStartMillis = ms(ws[i-1].at)
			s.OutputResumedMillis = ms(ws[i].at)
		}
	}
	s.LongestGapMillis = report.CeilMillis(longest)
	var baseline time.Duration
	for i := 1; i < before; i++ {
		if ws[i-1].at.Before(steadyAt) {
			continue
		}
		baseline = max(baseline, ws[i].at.Sub(ws[i-1].at))
	}
	s.BaselineMaxGapMillis = report.CeilMillis(baseline)
	return s, nil
}

// signedMillis is d in whole milliseconds, rounded away from zero.
func signedMillis(d time.Duration) int64 {
	if d < 0 {
		return -report.CeilMillis(-d)
	}
	return report.CeilMillis(d)
}

// addChecker adds the job's report to s: the checker's counts and whether the run was exactly once.
func addChecker(s *jmLossSample, r jmLossReport) {
	c := r.Checker
	s.RecordsExpected, s.RecordsChecked, s.RecordsLost, s.RecordsDuplicated, s.RecordsOutOfOrder = c.ExpectedRecords, c.Records,
		c.Lost, c.Duplicated, c.OutOfOrder
	s.Verdict = string(c.Verdict)
	s.ExactlyOnce = r.Status == "FINISHED" && c.Verdict == sequence.VerdictOK && c.Records == c.ExpectedRecords && c.ExpectedRecords > 0
	if r.RestoredFrom != nil {
		id := r.RestoredFrom.CheckpointID
		s.CheckpointRestored = &id
	}
	s.Resumed = r.Resumed != nil
}

// jmLossFigure is one figure over the runs: the median and the range.
type jmLossFigure struct {
	Median int64 `json:"median"`
	Min    int64 `json:"min"`
	Max    int64 `json:"max"`
}

// figure returns the median and range of xs.
func figure(xs []int64) jmLossFigure {
	if len(xs) == 0 {
		return jmLossFigure{}
	}
	return jmLossFigure{Median: medianInt64(xs), Min: slices.Min(xs), Max: slices.Max(xs)}
}

// jmLossResult is one mode's runs: the --json object.
type jmLossResult struct {
	Mode                 string         `json:"mode"`
	Runs                 int            `json:"runs"`
	HATTLMillis          int64          `json:"ha_ttl_ms"`
	TakeoverMillis       int64          `json:"takeover_ms"`
	FirstOutputMillis    int64          `json:"first_output_ms"`
	OutputResumedMillis  int64          `json:"output_resumed_ms"`
	LongestGapMillis     int64          `json:"longest_gap_ms"`
	BaselineMaxGapMillis int64          `json:"baseline_max_gap_ms"`
	ExactlyOnceRuns      int            `json:"exactly_once_runs"`
	Ranges               jmLossRanges   `json:"ranges"`
	Samples              []jmLossSample `json:"samples"`
}

// jmLossRanges are the medians' figures with their ranges.
type jmLossRanges struct {
	TakeoverMillis       jmLossFigure `json:"takeover_ms"`
	FirstOutputMillis    jmLossFigure `json:"first_output_ms"`
	OutputResumedMillis  jmLossFigure `json:"output_resumed_ms"`
	LongestGapMillis     jmLossFigure `json:"longest_gap_ms"`
	BaselineMaxGapMillis jmLossFigure `json:"baseline_max_gap_ms"`
}

// summarizeJMLoss folds one mode's samples into medians and ranges.
func summarizeJMLoss(mode string, haTTL time.Duration, samples []jmLossSample) jmLossResult {
	r := jmLossResult{Mode: mode, Runs: len(samples), HATTLMillis: haTTL.Milliseconds(), Samples: samples}
	col := func(f func(jmLossSample) int64) jmLossFigure {
		var xs []int64
		for _, s := range samples {
			xs = append(xs, f(s))
		}
		return figure(xs)
	}
	r.Ranges = jmLossRanges{
		TakeoverMillis:       col(func(s jmLossSample) int64 { return s.TakeoverMillis }),
		FirstOutputMillis:    col(func(s jmLossSample) int64 { return s.FirstOutputMillis }),
		OutputResumedMillis:  col(func(s jmLossSample) int64 { return s.OutputResumedMillis }),
		LongestGapMillis:     col(func(s jmLossSample) int64 { return s.LongestGapMillis }),
		BaselineMaxGapMillis: col(func(s jmLossSample) int64 { return s.BaselineMaxGapMillis }),
	}
	r.TakeoverMillis, r.FirstOutputMillis, r.OutputResumedMillis = r.Ranges.TakeoverMillis.Median, r.Ranges.FirstOutputMillis.Median,
		r.Ranges.OutputResumedMillis.Median
	r.LongestGapMillis, r.BaselineMaxGapMillis = r.Ranges.LongestGapMillis.Median, r.Ranges.BaselineMaxGapMillis.Median
	for _, s := range samples {
		if s.ExactlyOnce {
			r.ExactlyOnceRuns++
		}
	}
	return r
}

// buildEtcd builds bench/etcd into dir with the Go toolchain, from the module in the working directory.
func buildEtcd(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "runnel-etcd")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, etcdPackage).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the etcd member (go build %s; run the bench from the runnel checkout, or pass --etcd-binary or --etcd): %w: %s",
			etcdPackage, err, out)
	}
	return bin, nil
}

// jmLossCluster is one run's processes.
type jmLossCluster struct {
	etcd     *proccluster.Process // nil with an external etcd
	jms      []*proccluster.Process
	rest     map[*proccluster.Process]string // REST address of each JobManager
	tms      []*proccluster.Process
	submit   *proccluster.Process
	client   *http.Client
	etcdAddr string
	name     string
}

// close stops every process and returns once all are reaped. It may be called more than once.
func (c *jmLossCluster) close() {
	ps := append(append(append([]*proccluster.Process{c.submit}, c.tms...), c.jms...), c.etcd)
	proccluster.Stop(childStopGrace, ps...)
}

// ready reports whether the JobManager jm answers ready (it leads).
func (c *jmLossCluster) ready(ctx context.Context, jm *proccluster.Process) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.rest[jm]+"/healthz/ready", nil)
	if err != nil {
		return false
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// get decodes the JSON document at a REST path of jm into v.
func (c *jmLossCluster) get(ctx context.Context, jm *proccluster.Process, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.rest[jm]+path, nil)
	if err != nil {
		return fmt.Errorf("GET %s of %s: %w", path, jm.Name, err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s of %s: %w", path, jm.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s of %s: %s: %s", path, jm.Name, resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s of %s: decoding: %w", path, jm.Name, err)
	}
	return nil
}

// awaitLeader polls jms every restPollInterval until one answers ready, and returns it with when it did.
func (c *jmLossCluster) awaitLeader(ctx context.Context, timeout time.Duration, jms ...*proccluster.Process) (*proccluster.Process, time.Time, error) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(restPollInterval)
	defer tick.Stop()
	for {
		for _, jm := range jms {
			if c.ready(ctx, jm) {
				return jm, time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			var last []string
			for _, jm := range jms {
				last = append(last, fmt.Sprintf("%s:\n%s", jm.Name, jm.LastLines()))
			}
			return nil, time.Time{}, fmt.Errorf("no JobManager ready within %v; their last lines:\n%s", timeout, strings.Join(last, "\n"))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, time.Time{}, ctx.Err()
		}
	}
}

// startJMLossCluster starts etcd (unless cfg names one), two JobManagers and the TaskManagers in dir, and
// waits until one JobManager leads and every TaskManager registered.
func startJMLossCluster(ctx context.Context, cfg jmLossConfig, mode jmLossMode, etcdBin, dir string, log io.Writer) (c *jmLossCluster, err error) {
	c = &jmLossCluster{rest: map[*proccluster.Process]string{}, client: &http.Client{Timeout: 2 * time.Second},
		etcdAddr: cfg.etcd, name: fmt.Sprintf("jm-loss-%d", time.Now().UnixNano())}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	opt := proccluster.Options{TailLines: childTailLines, Log: log}
	if c.etcdAddr == "" {
		data := filepath.Join(dir, "etcd")
		if err := os.Mkdir(data, 0o755); err != nil {
			return c, fmt.Errorf("etcd's directory: %w", err)
		}
		eo := opt
		eo.Binary, eo.Watch = etcdBin, []*regexp.Regexp{etcdReady}
		if c.etcd, err = proccluster.Start("etcd", eo, "--dir", data); err != nil {
			return c, err
		}
		m, err := c.etcd.WaitFor(ctx, etcdReady, childStartTimeout)
		if err != nil {
			return c, err
		}
		c.etcdAddr = m[1]
	}
	ha := []string{"--ha", c.etcdAddr, "--ha-cluster", c.name}
	jo := opt
	jo.Watch = []*regexp.Regexp{proccluster.Listening}
	for _, name := range []string{"jm-a", "jm-b"} {
		args := append(append([]string{"jobmanager", "--addr", "127.0.0.1:0", "--rest-addr", "127.0.0.1:0", "--ha-ttl", cfg.haTTL.String()}, ha...), mode.jmArgs...)
		jm, err := proccluster.Start(name, jo, args...)
		if err != nil {
			return c, err
		}
		c.jms = append(c.jms, jm)
		m, err := jm.WaitFor(ctx, proccluster.Listening, childStartTimeout)
		if err != nil {
			return c, err
		}
		c.rest[jm] = m[2]
	}
	if _, _, err := c.awaitLeader(ctx, phaseTimeout, c.jms...); err != nil {
		return c, err
	}
	to := opt
	to.Watch = []*regexp.Regexp{proccluster.Registered}
	for i := range cfg.taskManagers {
		name := fmt.Sprintf("tm-%d", i+1)
		args := append(append([]string{"taskmanager", "--name", name, "--slots", strconv.Itoa(cfg.slots)}, ha...), mode.tmArgs...)
		tm, err := proccluster.Start(name, to, args...)
		if err != nil {
			return c, err
		}
		c.tms = append(c.tms, tm)
	}
	for _, tm := range c.tms {
		if _, err := tm.WaitFor(ctx, proccluster.Registered, childStartTimeout); err != nil {
			return c, err
		}
	}
	return c, nil
}

// awaitSteady waits until the leader runs the job steadily (every subtask running on more than one
// TaskManager, a checkpoint completed) and returns when it saw that.
func (c *jmLossCluster) awaitSteady(ctx context.Context, leader *proccluster.Process) (time.Time, error) {
	deadline := time.Now().Add(phaseTimeout)
	tick := time.NewTicker(restPollInterval)
	defer tick.Stop()
	var doc runnel.JobResult
	for {
		var jobs struct {
			Jobs []struct {
				ID string `json:"id"`
			} `json:"jobs"`
		}
		if err := c.get(ctx, leader, "/v1/jobs", &jobs); err != nil {
			return time.Time{}, err
		}
		if len(jobs.Jobs) > 1 {
			return time.Time{}, fmt.Errorf("the leader runs %d jobs, want only the benchmark's", len(jobs.Jobs))
		}
		if len(jobs.Jobs) == 1 {
			doc = runnel.JobResult{}
			if err := c.get(ctx, leader, "/v1/jobs/"+jobs.Jobs[0].ID, &doc); err != nil {
				return time.Time{}, err
			}
			if steady(&doc) {
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the job did not run steadily with a completed checkpoint within %v: %s (waiting: %q); submit's last lines:\n%s",
				phaseTimeout, doc.Status, doc.Waiting, c.submit.LastLines())
		}
		select {
		case <-tick.C:
		case <-c.submit.Done():
			return time.Time{}, fmt.Errorf("the submission ended before the job ran steadily; its last lines:\n%s", c.submit.LastLines())
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// runJMLoss is one run: a new cluster, the sequence job, the kill of the leader once the job ran steadily
// for cfg.killAfter, and the figures once the job finished under the new leader.
func runJMLoss(ctx context.Context, cfg jmLossConfig, mode jmLossMode, etcdBin string, log io.Writer) (jmLossSample, error) {
	dir, err := os.MkdirTemp("", "runnel-bench-jm-loss-")
	if err != nil {
		return jmLossSample{}, fmt.Errorf("the run's directory: %w", err)
	}
	if cfg.keepDir {
		fmt.Fprintf(log, "bench: jm-loss %s: the run's files stay in %s\n", mode.name, dir)
	} else {
		defer os.RemoveAll(dir)
	}
	progress := filepath.Join(dir, "progress")
	if err := os.Mkdir(progress, 0o755); err != nil {
		return jmLossSample{}, fmt.Errorf("the progress directory: %w", err)
	}
	c, err := startJMLossCluster(ctx, cfg, mode, etcdBin, dir, log)
	if err != nil {
		return jmLossSample{}, err
	}
	defer c.close()
	leader, _, err := c.awaitLeader(ctx, phaseTimeout, c.jms...)
	if err != nil {
		return jmLossSample{}, err
	}
	standby := c.jms[0]
	if standby == leader {
		standby = c.jms[1]
	}
	reportFile := filepath.Join(dir, "report.json")
	args := []string{"submit", "sequence", "--ha", c.etcdAddr, "--ha-cluster", c.name,
		"--records=" + strconv.FormatUint(cfg.records(), 10), fmt.Sprintf("--rate=%g", cfg.rate), "--keys=" + strconv.Itoa(cfg.keys),
		"--parallelism=" + strconv.Itoa(cfg.parallelism), "--emit-every=" + strconv.FormatInt(cfg.emitEvery, 10),
		"--checkpoint-interval=" + cfg.checkpointInterval.String(), "--checkpoint-storage=" + filepath.Join(dir, "chk"),
		"--progress-dir=" + progress, "--report=" + reportFile}
	args = append(args, cfg.unaligned.args()...)
	if c.submit, err = proccluster.Start("submit", proccluster.Options{TailLines: childTailLines, Log: log}, args...); err != nil {
		return jmLossSample{}, err
	}
	steadyAt, err := c.awaitSteady(ctx, leader)
	if err != nil {
		return jmLossSample{}, err
	}
	select {
	case <-time.After(cfg.killAfter):
	case <-c.submit.Done():
		return jmLossSample{}, fmt.Errorf("the job ended before the kill (make --duration longer than --kill-after); submit's last lines:\n%s", c.submit.LastLines())
	case <-ctx.Done():
		return jmLossSample{}, ctx.Err()
	}
	killedAt := time.Now()
	if err := leader.Kill(); err != nil {
		return jmLossSample{}, err
	}
	_, takeoverAt, err := c.awaitLeader(ctx, phaseTimeout, standby)
	if err != nil {
		return jmLossSample{}, fmt.Errorf("after the kill of %s: %w", leader.Name, err)
	}
	code, err := c.submit.Exited(cfg.duration + 2*phaseTimeout)
	if err != nil {
		return jmLossSample{}, fmt.Errorf("waiting for the job to end under %s: %w", standby.Name, err)
	}
	var r jmLossReport
	data, err := os.ReadFile(reportFile)
	if err == nil {
		err = json.Unmarshal(data, &r)
	}
	if err != nil {
		return jmLossSample{}, fmt.Errorf("the job's report (submit exited %d): %w; submit's last lines:\n%s", code, err, c.submit.LastLines())
	}
	if code != 0 || r.Status != "FINISHED" {
		return jmLossSample{}, fmt.Errorf("the job ended %s (%s), submit exited %d; submit's last lines:\n%s", r.Status, r.Error, code, c.submit.LastLines())
	}
	logs, err := readProgress(progress)
	if err != nil {
		return jmLossSample{}, err
	}
	s, err := measureJMLoss(logs, steadyAt, killedAt, takeoverAt)
	if err != nil {
		return s, err
	}
	s.Mode = mode.name
	addChecker(&s, r)
	return s, nil
}

// runJMLossBench runs every mode cfg.runs times, the modes alternating run by run so that each sees the
// same machine weather, and returns their summaries in the order of the modes.
func runJMLossBench(ctx context.Context, cfg jmLossConfig, modes []jmLossMode, etcdBin string, log io.Writer) ([]jmLossResult, error) {
	samples := map[string][]jmLossSample{}
	for run := range cfg.runs {
		for i := range modes {
			m := modes[(run+i)%len(modes)] // the other mode goes first in every other round
			s, err := runJMLoss(ctx, cfg, m, etcdBin, log)
			if err != nil {
				return nil, fmt.Errorf("jm-loss %s run %d: %w", m.name, run+1, err)
			}
			fmt.Fprintf(log, "bench: jm-loss %s run %d/%d: takeover after %d ms, first output after it at %d ms (%s writer), longest gap %d ms (from %d ms to %d ms; %d ms before the kill), %d/%d records checked, %s\n",
				m.name, run+1, cfg.runs, s.TakeoverMillis, s.FirstOutputMillis, s.FirstOutputWriter, s.LongestGapMillis, s.GapStartMillis,
				s.OutputResumedMillis, s.BaselineMaxGapMillis, s.RecordsChecked, s.RecordsExpected, s.Verdict)
			samples[m.name] = append(samples[m.name], s)
		}
	}
	var out []jmLossResult
	for _, m := range modes {
		out = append(out, summarizeJMLoss(m.name, cfg.haTTL, samples[m.name]))
	}
	return out, nil
}

// writeJMLossTable prints the medians and ranges as a table.
func writeJMLossTable(w io.Writer, cfg jmLossConfig, res []jmLossResult) error {
	fmt.Fprintf(w, "SIGKILL of the leading JobManager: etcd, 2 JobManagers (lease %v), %d TaskManagers x %d slots, sequence at parallelism %d,\n",
		cfg.haTTL, cfg.taskManagers, cfg.slots, cfg.parallelism)
	fmt.Fprintf(w, "%d records at %g records/s per source subtask, checkpoints every %v, kill %v after steady; ms from the kill, median [min-max] of %d runs\n",
		cfg.records(), cfg.rate, cfg.checkpointInterval, cfg.killAfter, cfg.runs)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttakeover_ms\tfirst_output_ms\toutput_resumed_ms\tlongest_gap_ms\tbaseline_max_gap_ms\texactly_once\t")
	f := func(x jmLossFigure) string { return fmt.Sprintf("%d [%d-%d]", x.Median, x.Min, x.Max) }
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t\n", r.Mode, f(r.Ranges.TakeoverMillis), f(r.Ranges.FirstOutputMillis),
			f(r.Ranges.OutputResumedMillis), f(r.Ranges.LongestGapMillis), f(r.Ranges.BaselineMaxGapMillis), r.ExactlyOnceRuns, r.Runs)
	}
	return tw.Flush()
}

func newJMLossBenchCmd() *cobra.Command {
	cfg := jmLossConfig{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "jm-loss",
		Short: "SIGKILL the leading JobManager of an HA cluster on etcd: takeover, first output after it and the gap in the sink's output",
		Long: `Per run and mode, starts an etcd member, two JobManagers with --ha (lease --ha-ttl) and --taskmanagers
TaskManagers with --ha as child processes, and submits the sequence example through etcd (a child
` + "`runnel submit --ha`" + `): bounded, --duration's worth of records at --rate per source subtask, checkpoints
every --checkpoint-interval into a directory all processes share, and --progress-dir, so that the sink
logs the time of every report it receives. Once the job runs steadily with a completed checkpoint, it
waits --kill-after, SIGKILLs the leading JobManager, and waits for the standby to lead and the job to
finish. From the sink's log, in ms from the kill:

  takeover_ms          the standby answers ready (GET /healthz/ready, polled every 10 ms)
  first_output_ms      the sink's first report at or after the takeover
  output_resumed_ms    the end of the longest silence of the sink that ended after the kill
  longest_gap_ms       that silence
  baseline_max_gap_ms  the longest silence from steady state to the kill (the noise floor: buffers are
                       flushed every 100 ms, checkpoints pause)
  exactly_once         runs whose job FINISHED with the checker's verdict OK: every record once

Modes: restart (the new leader restarts the job from its latest checkpoint; the TaskManagers cancel
their tasks when the leader is lost) and continuity (the TaskManagers keep their tasks for --ha-grace and
the new leader takes the running job over). A binary whose JobManager has no --ha-continuity does what
restart says, and has no continuity to measure. The modes alternate run by run.

The etcd member is bench/etcd, built with ` + "`go build`" + ` into a temporary directory (run the bench from the
runnel checkout), unless --etcd-binary or --etcd names another. Prints the medians and ranges as a table,
or with --json one JSON object per mode per line (every run's figures under "samples"). Every child
process is stopped before the command returns.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cfg.runs < 1:
				return usageError(fmt.Errorf("invalid --runs %d: must be at least 1", cfg.runs))
			case cfg.taskManagers < 2 || cfg.slots < 1 || cfg.taskManagers*cfg.slots < cfg.parallelism:
				return usageError(fmt.Errorf("invalid --taskmanagers %d with --slots %d: at least 2 TaskManagers with %d slots in all (the parallelism)",
					cfg.taskManagers, cfg.slots, cfg.parallelism))
			case cfg.parallelism < 1 || cfg.keys < cfg.parallelism:
				return usageError(fmt.Errorf("invalid --parallelism %d with --keys %d: the parallelism must be positive and at most the keys", cfg.parallelism, cfg.keys))
			case cfg.rate <= 0:
				return usageError(fmt.Errorf("invalid --rate %v: must be positive", cfg.rate))
			case cfg.killAfter <= 0 || cfg.duration <= cfg.killAfter:
				return usageError(fmt.Errorf("invalid --duration %v with --kill-after %v: the job must run past the kill", cfg.duration, cfg.killAfter))
			case cfg.checkpointInterval <= 0:
				return usageError(fmt.Errorf("invalid --checkpoint-interval %v: must be positive", cfg.checkpointInterval))
			case cfg.unaligned.validate(true, "") != nil:
				return usageError(cfg.unaligned.validate(true, ""))
			case cfg.haTTL < time.Second || cfg.haTTL%time.Second != 0:
				return usageError(fmt.Errorf("invalid --ha-ttl %v: whole seconds, at least 1s", cfg.haTTL))
			case cfg.emitEvery < 1:
				return usageError(fmt.Errorf("invalid --emit-every %d: must be at least 1", cfg.emitEvery))
			case cfg.etcd != "" && cfg.etcdBinary != "":
				return usageError(errors.New("--etcd and --etcd-binary exclude each other"))
			}
			// SIGINT and SIGTERM end the runs cleanly: the children are stopped, not orphaned.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding this binary: %w", err)
			}
			known, err := hasContinuityFlags(ctx, self)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("mode") && !known {
				cfg.modes = []string{modeRestart}
				fmt.Fprintln(cmd.ErrOrStderr(), "bench: jm-loss: this binary has no --ha-continuity; measuring restart only")
			}
			modes, err := jmLossModes(cfg.modes, known, cfg.grace)
			if err != nil {
				return usageError(err)
			}
			etcdBin := cfg.etcdBinary
			if cfg.etcd == "" && etcdBin == "" {
				dir, err := os.MkdirTemp("", "runnel-etcd-build-")
				if err != nil {
					return fmt.Errorf("a directory for the etcd member: %w", err)
				}
				defer os.RemoveAll(dir)
				if etcdBin, err = buildEtcd(ctx, dir); err != nil {
					return err
				}
			}
			res, err := runJMLossBench(ctx, cfg, modes, etcdBin, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				return writeJMLossTable(out, cfg, res)
			}
			return writeJSONLines(out, res)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&cfg.modes, "mode", []string{modeRestart, modeContinuity}, "modes to run: restart, continuity")
	fl.IntVar(&cfg.runs, "runs", 3, "runs per mode; medians and ranges are reported")
	fl.IntVar(&cfg.taskManagers, "taskmanagers", 3, "TaskManagers")
	fl.IntVar(&cfg.slots, "slots", 2, "slots per TaskManager")
	fl.IntVar(&cfg.parallelism, "parallelism", 4, "the job's parallelism (the sink's is 1)")
	fl.IntVar(&cfg.keys, "keys", 16, "distinct keys")
	fl.Float64Var(&cfg.rate, "rate", 1000, "records per second per source subtask")
	fl.DurationVar(&cfg.duration, "duration", 20*time.Second, "how long the sources take to emit their records at --rate (the job's length without the kill)")
	fl.DurationVar(&cfg.killAfter, "kill-after", 3*time.Second, "how long the job runs steadily before the leader is killed")
	fl.DurationVar(&cfg.checkpointInterval, "checkpoint-interval", 100*time.Millisecond, "checkpoint interval")
	cfg.unaligned.register(fl, "the job")
	fl.DurationVar(&cfg.haTTL, "ha-ttl", 2*time.Second, "the JobManagers' lease (whole seconds; etcd's minimum is 2s)")
	fl.DurationVar(&cfg.grace, "ha-grace", 30*time.Second, "continuity: how long the TaskManagers keep their tasks without a leader")
	fl.Int64Var(&cfg.emitEvery, "emit-every", 10, "the check operator reports a key's counters to the sink every N of its records")
	fl.StringVar(&cfg.etcd, "etcd", "", "use this running etcd (etcd://HOST:PORT) instead of starting one")
	fl.StringVar(&cfg.etcdBinary, "etcd-binary", "", "start this build of bench/etcd instead of building it")
	fl.BoolVar(&cfg.keepDir, "keep", false, "keep each run's directory (progress logs, report, checkpoints) and say where")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object per mode per line")
	return cmd
}

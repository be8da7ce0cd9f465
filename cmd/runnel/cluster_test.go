package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/cmd/runnel/internal/proccluster"
)

// process is a child process of a cluster test: the runnel binary in one role, every stderr line kept.
type process struct{ *proccluster.Process }

// start starts the runnel binary with args; cleanup kills it (if it still runs) and reaps it.
func start(t *testing.T, name string, env []string, args ...string) *process {
	t.Helper()
	return startIn(t, "", name, env, args...)
}

// startIn is start with the working directory dir ("": the test's).
func startIn(t *testing.T, dir, name string, env []string, args ...string) *process {
	t.Helper()
	return startProc(t, proccluster.Options{Binary: binary, Dir: dir, Env: env}, name, args...)
}

// startBin is start with the binary bin (a user's job binary).
func startBin(t *testing.T, bin, name string, args ...string) *process {
	t.Helper()
	return startProc(t, proccluster.Options{Binary: bin}, name, args...)
}

func startProc(t *testing.T, opts proccluster.Options, name string, args ...string) *process {
	t.Helper()
	p, err := proccluster.Start(name, opts, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Kill()
		logIfFailed(t, p)
	})
	return &process{p}
}

func logIfFailed(t *testing.T, p *proccluster.Process) {
	if t.Failed() {
		t.Logf("%s's stderr:\n%s", p.Name, p.Stderr())
	}
}

// waitFor waits until the process's stderr matches re, and returns the submatches.
func (p *process) waitFor(t *testing.T, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	m, err := p.WaitFor(context.Background(), re, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// exited waits for the process to exit and returns its exit code.
func (p *process) exited(t *testing.T, timeout time.Duration) int {
	t.Helper()
	code, err := p.Exited(timeout)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

var (
	listening  = proccluster.Listening
	registered = proccluster.Registered
)

// testCluster is a JobManager and its TaskManagers, each a process.
type testCluster struct {
	c          *proccluster.Cluster
	jm         *process
	addr, rest string
	tms        []*process
}

// startCluster starts a JobManager and n TaskManagers with slots slots each, named tm-1 ... tm-n, and
// waits for each to register (in order, so that the slot pool's order follows the names).
func startCluster(t *testing.T, n, slots int) *testCluster {
	t.Helper()
	return startClusterWith(t, proccluster.Spec{TaskManagers: n, Slots: slots})
}

// startClusterWith starts the cluster spec shapes, its TaskManagers in order, of the runnel binary unless
// spec names another (a user's job binary); cleanup kills every process.
func startClusterWith(t *testing.T, spec proccluster.Spec) *testCluster {
	t.Helper()
	spec.InOrder, spec.StartTimeout = true, 30*time.Second
	if spec.Process.Binary == "" {
		spec.Process.Binary = binary
	}
	c, err := proccluster.StartCluster(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{c: c, jm: &process{c.JobManager}, addr: c.Addr, rest: c.REST}
	for _, tm := range c.TaskManagers {
		tc.tms = append(tc.tms, &process{tm})
	}
	t.Cleanup(func() {
		c.Close(0)
		logIfFailed(t, c.JobManager)
		for _, tm := range c.TaskManagers {
			logIfFailed(t, tm)
		}
	})
	return tc
}

func (c *testCluster) addTaskManager(t *testing.T, name string, slots int, extra ...string) *process {
	t.Helper()
	p, err := c.c.AddTaskManager(context.Background(), name, slots, extra...)
	if err != nil {
		t.Fatal(err)
	}
	c.tms = append(c.tms, &process{p})
	return c.tms[len(c.tms)-1]
}

// awaitMap1 waits until the cluster's one job (a sequence job) runs with a checkpoint completed, and
// returns its id, the TaskManager that runs source -> map[1] and its process.
func (c *testCluster) awaitMap1(t *testing.T) (id, victim string, p *process) {
	t.Helper()
	var jobs struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	var live clusterReport
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint completed: %+v", live)
		}
		c.get(t, "/v1/jobs", &jobs)
		if len(jobs.Jobs) != 1 {
			continue
		}
		c.get(t, "/v1/jobs/"+jobs.Jobs[0].ID, &live)
		if live.Status == "RUNNING" && live.Checkpoints != nil && live.Checkpoints.Completed > 0 {
			break
		}
	}
	before, _ := live.where()
	victim = before["source -> map[1]"]
	if p = c.taskManager(victim); p == nil {
		t.Fatalf("map[1] runs on %q, not one of the test's TaskManagers", victim)
	}
	return jobs.Jobs[0].ID, victim, p
}

func (c *testCluster) taskManager(name string) *process {
	for _, p := range c.tms {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// get decodes the JSON of a REST path of the JobManager into v.
func (c *testCluster) get(t *testing.T, path string, v any) {
	t.Helper()
	if err := c.c.Get(context.Background(), path, v); err != nil {
		t.Fatal(err)
	}
}

// clusterReport is what the tests read of a --report file or of the REST API's job document: the job's
// result, and the sequence checker's verdict in a report.
type clusterReport struct {
	runnel.JobResult
	Checker struct {
		Records    int64  `json:"records"`
		Lost       int64  `json:"lost"`
		Duplicated int64  `json:"duplicated"`
		OutOfOrder int64  `json:"out_of_order"`
		Verdict    string `json:"verdict"`
	} `json:"checker"`
}

func readReport(t *testing.T, path string) clusterReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r clusterReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

// where returns the TaskManager of each subtask ("source -> map[1]" -> "tm-2") and its attempt.
func (r *clusterReport) where() (tm map[string]string, attempt map[string]int) {
	return proccluster.Placement(&r.JobResult)
}

// TestClusterRunsAJobLikeTheMiniCluster runs sequence on a JobManager and three TaskManager processes:
// every record exactly once, as the same run in the mini-cluster, with tasks on several TaskManagers.
func TestClusterRunsAJobLikeTheMiniCluster(t *testing.T) {
	c := startCluster(t, 3, 2)
	dir := t.TempDir()
	args := []string{"sequence", "--records", "40000", "--parallelism", "3", "--checkpoint-interval", "50ms",
		"--checkpoint-storage", filepath.Join(dir, "chk")}
	report := filepath.Join(dir, "cluster.json")
	sub := start(t, "submit", nil, append([]string{"submit", "--jobmanager", c.addr, "--report", report}, args...)...)
	if code := sub.exited(t, 60*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, sub.Stderr())
	}
	r := readReport(t, report)
	if r.Status != "FINISHED" || len(r.Failovers) != 0 || r.Checker.Verdict != "OK" || r.Checker.Records != 40000 {
		t.Fatalf("cluster run: %s, %d failovers, checker %+v", r.Status, len(r.Failovers), r.Checker)
	}
	// The JobManager's REST API and metrics know the job and the TaskManagers.
	var jobs struct {
		Jobs []struct{ ID, Status string } `json:"jobs"`
	}
	c.get(t, "/v1/jobs", &jobs)
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].Status != "FINISHED" {
		t.Errorf("/v1/jobs: %+v", jobs)
	}
	var cps struct {
		Checkpoints struct{ Completed int } `json:"checkpoints"`
	}
	c.get(t, "/v1/jobs/"+jobs.Jobs[0].ID+"/checkpoints", &cps)
	if cps.Checkpoints.Completed == 0 {
		t.Errorf("/v1/jobs/ID/checkpoints: %+v", cps)
	}
	resp, err := http.Get("http://" + c.rest + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"runnel_taskmanagers 3", `runnel_job_status{job="sequence",job_id="` + jobs.Jobs[0].ID + `",status="FINISHED"} 1`,
		`runnel_taskmanagers_departed{state="LOST"} 0`, `runnel_taskmanager_memory_bytes{taskmanager="tm-1"} `} {
		if !strings.Contains(body.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	tms, _ := r.where()
	used := map[string]bool{}
	for _, tm := range tms {
		used[tm] = true
	}
	if len(used) != 3 {
		t.Errorf("the tasks ran on %v, want all three TaskManagers", used)
	}
	local := filepath.Join(dir, "local.json")
	args[len(args)-1] = filepath.Join(dir, "chk-local")
	if _, stderr, code := runCLI(t, append([]string{"run", "--report", local}, args...)...); code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	if l := readReport(t, local); l.Checker != r.Checker {
		t.Errorf("checker in the mini-cluster %+v, on the cluster %+v", l.Checker, r.Checker)
	}
}

// TestKilledTaskManager SIGKILLs the TaskManager that runs map[1] once a checkpoint completed: with region
// failover the job recovers on the slots that remain from the checkpoint, every record exactly once; with
// approximate failover only the dead TaskManager's subtasks and what lies downstream restart, the other
// sources keep their first attempt, and the checker's loss is the reported one.
func TestKilledTaskManager(t *testing.T) {
	for _, tc := range []struct {
		name, failover string
		// freeze stops the TaskManager (SIGSTOP) instead of killing it: its sockets stay open, so only
		// the heartbeat timeout (1.5 s by default) finds it out.
		freeze bool
	}{{"region", "region", false}, {"approximate", "approximate", false}, {"approximate-frozen", "approximate", true}} {
		failover := tc.failover
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, 3, 2)
			dir := t.TempDir()
			report := filepath.Join(dir, "r.json")
			// 4 sources at 4000 records/s: about 3 s, so the kill lands mid-run. With region failover an
			// injection fails map[1] first: restarted on another TaskManager after the kill, whose build of the
			// job counts its records from zero, it must not fire again (the job master's fired set).
			args := []string{"submit", "sequence", "--jobmanager", c.addr, "--report", report,
				"--records", "48000", "--rate", "4000", "--parallelism", "4", "--failover", failover,
				"--checkpoint-interval", "50ms", "--checkpoint-storage", filepath.Join(dir, "chk")}
			injected := 0
			if failover == "region" {
				args = append(args, "--inject-failure", "map[1]@1500")
				injected = 1
			}
			sub := start(t, "submit", nil, args...)
			var jobs struct {
				Jobs []struct{ ID string } `json:"jobs"`
			}
			var live clusterReport
			deadline := time.Now().Add(30 * time.Second)
			for {
				if time.Now().After(deadline) {
					t.Fatalf("no checkpoint completed: %+v", live)
				}
				c.get(t, "/v1/jobs", &jobs)
				if len(jobs.Jobs) == 1 {
					c.get(t, "/v1/jobs/"+jobs.Jobs[0].ID, &live)
					if live.Status == "RUNNING" && live.Checkpoints != nil && live.Checkpoints.Completed > 0 && len(live.Failovers) == injected {
						_, attempts := live.where()
						if injected == 0 || attempts["source -> map[1]"] > 0 {
							break
						}
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
			before, _ := live.where()
			victim := before["source -> map[1]"]
			p := c.taskManager(victim)
			if p == nil {
				t.Fatalf("map[1] runs on %q, not one of the test's TaskManagers", victim)
			}
			var tms struct {
				TaskManagers []struct {
					Name        string `json:"name"`
					DataAddress string `json:"data_address"`
				} `json:"taskmanagers"`
			}
			c.get(t, "/v1/taskmanagers", &tms)
			victimData := ""
			for _, tm := range tms.TaskManagers {
				if tm.Name == victim {
					victimData = tm.DataAddress
				}
			}
			if victimData == "" {
				t.Fatalf("/v1/taskmanagers does not list %s: %+v", victim, tms)
			}
			sig := syscall.SIGKILL
			if tc.freeze {
				sig = syscall.SIGSTOP
			}
			killedAt := time.Now()
			if err := p.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := sub.exited(t, 60*time.Second); code != 0 {
				t.Fatalf("submit exited %d:\n%s", code, sub.Stderr())
			}
			r := readReport(t, report)
			// One failover names the lost TaskManager; any other is a consumer whose connection to it
			// closed first (approximate failover restarts those before the loss is declared).
			named := 0
			for _, f := range r.Failovers[injected:] {
				switch {
				case f.TaskManager == victim:
					named++
				case !strings.Contains(f.Cause, victimData):
					t.Errorf("failover %+v is neither %s's loss nor a connection to it (%s)", f, victim, victimData)
				}
				if f.CheckpointRestored == nil {
					t.Errorf("failover %+v restored no checkpoint", f)
				}
				if f.TaskManager == victim && tc.freeze {
					// Declared lost by the heartbeat timeout (1.5 s) after its last heartbeat, which may have
					// come up to one heartbeat interval (0.5 s) before the SIGSTOP: not before that, and not
					// much after it. (A lower bound of 1.5 s failed by 13 ms on a fresh CI machine.)
					if d := f.FailedAt.Sub(killedAt); d < 1000*time.Millisecond || d > 3*time.Second {
						t.Errorf("the frozen %s was declared lost %v after SIGSTOP, want 1 s to 3 s", victim, d)
					} else {
						t.Logf("the frozen %s was declared lost %v after SIGSTOP", victim, d.Round(time.Millisecond))
					}
				}
			}
			if injected > 0 && !strings.Contains(r.Failovers[0].Cause, "injected failure map[1]@1500") {
				t.Errorf("the first failover %+v is not the injected one", r.Failovers[0])
			}
			if r.Status != "FINISHED" || named != 1 || (injected > 0 && len(r.Failovers) != 2) {
				t.Fatalf("%s with failovers %+v: want one naming %s", r.Status, r.Failovers, victim)
			}
			after, attempt := r.where()
			for st, tm := range after {
				if tm == victim {
					t.Errorf("%s still runs on the killed %s", st, victim)
				}
			}
			switch failover {
			case "region":
				if r.Checker.Verdict != "OK" {
					t.Errorf("checker %+v, want every record exactly once", r.Checker)
				}
			case "approximate":
				if v := r.Checker.Verdict; v != "OK" && v != "OK_APPROXIMATE" || uint64(r.Checker.Lost) > r.FailoverTotals.RecordsLost {
					t.Errorf("checker %+v with %d records reported lost", r.Checker, r.FailoverTotals.RecordsLost)
				}
				for st, tm := range before {
					if strings.HasPrefix(st, "source -> map") && tm != victim && attempt[st] != 0 {
						t.Errorf("%s on %s (alive) restarted: attempt %d", st, tm, attempt[st])
					}
					if tm == victim && attempt[st] == 0 {
						t.Errorf("%s ran on the killed %s and was not restarted", st, victim)
					}
				}
			}
		})
	}
}

// TestTaskFailoverFallbackAcrossProcesses runs the in-flight log overflow of examples/sequence
// TestTaskFailoverLogOverflowFallsBack on a JobManager and two TaskManager processes: 4 MiB of log memory
// each, no disk, and no checkpoint before the failure of source[1], so that the logs its task failover
// needs overflowed. Its new attempt finds them incomplete (network.ErrLogIncomplete: its own partitions
// cannot be taken over, or its consumers cannot read them again); the TaskManager process says so in the
// failure's Replay field, which crosses gRPC to the JobManager, and the job master falls back to region
// failover with the producers restarting, exactly once. Without the field crossing (its decoding taken
// out of internal/rpc) the fallback is the generic one, which restarts the same incomplete logs' readers
// again until the restart strategy gives up, and the job fails. Each TaskManager process serves its own
// in-flight log gauges (--metrics-addr), which no heartbeat carries to the JobManager: its budget, and
// the drops of the logs that overflowed.
func TestTaskFailoverFallbackAcrossProcesses(t *testing.T) {
	c := startCluster(t, 0, 0)
	metrics := map[string]string{}
	for _, name := range []string{"tm-1", "tm-2"} {
		p := c.addTaskManager(t, name, 1, "--inflight-log-memory", fmt.Sprint(4<<20), "--inflight-log-disk", "-1",
			"--metrics-addr", "127.0.0.1:0")
		metrics[name] = p.waitFor(t, tmMetricsLine, 10*time.Second)[1]
	}
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	const records = 400_000
	sub := start(t, "submit", nil, "submit", "sequence", "--jobmanager", c.addr, "--report", report,
		"--records", fmt.Sprint(records), "--rate", "200000", "--keys", "8", "--parallelism", "2", "--no-chaining",
		"--failover", "task", "--restart-strategy", "fixed-delay:attempts=6,delay=0s", "--checkpoint-interval", "10s",
		"--checkpoint-storage", filepath.Join(dir, "chk"), "--inject-failure", "source[1]@150000")
	if code := sub.exited(t, 90*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, sub.Stderr())
	}
	r := readReport(t, report)
	if r.Status != "FINISHED" || r.Checker.Verdict != "OK" || r.Checker.Records != records {
		t.Fatalf("%s, checker %+v, failovers %+v", r.Status, r.Checker, r.Failovers)
	}
	if len(r.Failovers) != 2 || r.Failovers[0].Strategy != "task" || r.Failovers[1].Strategy != "region" {
		t.Fatalf("failovers %+v: want the task failover of source[1], then its fallback", r.Failovers)
	}
	f := r.Failovers[1]
	if !strings.HasPrefix(f.Fallback, "an in-flight log its replay needs was incomplete") || !slices.Contains(f.Restarted, "source[0]") {
		t.Fatalf("fallback %+v: want the incomplete log's reason, and the producers restarted too", f)
	}
	t.Logf("fallback of %s: %s", f.Failed, f.Fallback)
	drops := 0.0
	for name, addr := range metrics {
		body := scrape(t, "http://"+addr+"/metrics")
		if v := gaugeOf(t, body, "runnel_inflight_log_memory_limit_bytes", name); v != 4<<20 {
			t.Errorf("%s: in-flight log memory limit %v, want %d (its --inflight-log-memory)", name, v, 4<<20)
		}
		if v := gaugeOf(t, body, "runnel_inflight_log_disk_limit_bytes", name); v != 0 {
			t.Errorf("%s: in-flight log disk limit %v, want 0 (--inflight-log-disk -1)", name, v)
		}
		for other := range metrics {
			if other != name && strings.Contains(body, `taskmanager="`+other+`"`) {
				t.Errorf("%s's metrics show %s's logs", name, other)
			}
		}
		drops += gaugeOf(t, body, "runnel_inflight_log_drops_total", name)
	}
	if drops == 0 {
		t.Errorf("the TaskManagers' metrics count no in-flight log drops: the logs the fallback found incomplete overflowed")
	}
}

// tmMetricsLine is what runnel taskmanager --metrics-addr prints once its metrics server listens.
var tmMetricsLine = regexp.MustCompile(`TaskManager metrics on http://(\S+)/metrics`)

// scrape returns the body of a GET of url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return body.String()
}

// gaugeOf returns the value of metric{taskmanager="tm"} in a Prometheus text body.
func gaugeOf(t *testing.T, body, metric, tm string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + metric + `\{taskmanager="` + regexp.QuoteMeta(tm) + `"\} (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %s of %s in:\n%s", metric, tm, body)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s of %s: %v", metric, tm, err)
	}
	return v
}

// TestTaskManagerOfAnotherBuildIsRefused starts a TaskManager that poses as another build: the
// JobManager refuses it with the sentence that says so, and it exits with code 2 without retrying; a
// submit from another build is refused the same way.
func TestTaskManagerOfAnotherBuildIsRefused(t *testing.T) {
	c := startCluster(t, 0, 1)
	p := start(t, "tm-other", []string{"RUNNEL_TEST_FINGERPRINT=other"}, "taskmanager", "--jobmanager", c.addr, "--name", "tm-other")
	if code := p.exited(t, 30*time.Second); code != exitUsage {
		t.Fatalf("exit %d, want %d:\n%s", code, exitUsage, p.Stderr())
	}
	if !strings.Contains(p.Stderr(), "start every process of a cluster from the same build") {
		t.Errorf("the refusal does not say why:\n%s", p.Stderr())
	}
	other := start(t, "submit-other", []string{"RUNNEL_TEST_FINGERPRINT=other"}, "submit", "sequence", "--jobmanager", c.addr, "--records", "10")
	if code := other.exited(t, 30*time.Second); code != exitUsage || !strings.Contains(other.Stderr(), "start every process of a cluster from the same build") {
		t.Errorf("submit from another build: exit %d:\n%s", code, other.Stderr())
	}
	if _, stderr, code := runCLI(t, "submit", "sequence", "--jobmanager", c.addr, "--checkpoint-interval", "50ms"); code != exitUsage ||
		!strings.Contains(stderr, "every process reaches") {
		t.Errorf("submit with per-process checkpoint storage: exit %d, %s", code, stderr)
	}
}

// TestStoppedJobManagerTakesItsTaskManagersTasksDown stops the JobManager mid-run: each TaskManager
// cancels its tasks at once, and, started with --jobmanager-wait, exits by itself.
func TestStoppedJobManagerTakesItsTaskManagersTasksDown(t *testing.T) {
	c := startCluster(t, 0, 1)
	for i := range 2 {
		c.addTaskManager(t, fmt.Sprintf("tm-%d", i+1), 2, "--jobmanager-wait", "1s")
	}
	sub := start(t, "submit", nil, "submit", "sequence", "--jobmanager", c.addr, "--records", "0")
	var jobs struct {
		Jobs []struct{ Status string } `json:"jobs"`
	}
	for deadline := time.Now().Add(30 * time.Second); len(jobs.Jobs) == 0 || jobs.Jobs[0].Status != "RUNNING"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not start: %+v", jobs)
		}
		c.get(t, "/v1/jobs", &jobs)
	}
	stopped := time.Now()
	if err := c.jm.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := c.jm.exited(t, 30*time.Second); code != 0 {
		t.Errorf("the JobManager exited %d after SIGTERM", code)
	}
	for _, tm := range c.tms {
		tm.waitFor(t, regexp.MustCompile(`every task cancelled`), 2*time.Second+time.Since(stopped))
		if code := tm.exited(t, 30*time.Second); code != exitFailed {
			t.Errorf("%s exited %d, want %d after --jobmanager-wait", tm.Name, code, exitFailed)
		}
	}
	if code := sub.exited(t, 30*time.Second); code == 0 {
		t.Errorf("submit exited 0 although its JobManager stopped the job")
	}
}

// TestJobWaitsForATaskManagerToJoin kills one of three TaskManagers that hold exactly the slots the job
// needs: the job waits, saying so through the REST API, until a fourth TaskManager registers, which then
// receives the lost TaskManager's work, and the job finishes with every record once.
func TestJobWaitsForATaskManagerToJoin(t *testing.T) {
	c := startCluster(t, 3, 1)
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	sub := start(t, "submit", nil, "submit", "sequence", "--jobmanager", c.addr, "--report", report,
		"--records", "30000", "--rate", "3000", "--parallelism", "3",
		"--checkpoint-interval", "50ms", "--checkpoint-storage", filepath.Join(dir, "chk"))
	var jobs struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	var live clusterReport
	for deadline := time.Now().Add(30 * time.Second); live.Checkpoints == nil || live.Checkpoints.Completed == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint completed: %+v", live)
		}
		c.get(t, "/v1/jobs", &jobs)
		if len(jobs.Jobs) == 1 {
			c.get(t, "/v1/jobs/"+jobs.Jobs[0].ID, &live)
		}
	}
	victim := c.taskManager("tm-3")
	if err := victim.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(live.Waiting, "slot"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job does not say it waits for a slot: %+v", live)
		}
		c.get(t, "/v1/jobs/"+jobs.Jobs[0].ID, &live)
	}
	if live.Status != "RUNNING" {
		t.Fatalf("while waiting the job is %s", live.Status)
	}
	c.addTaskManager(t, "tm-4", 1)
	if code := sub.exited(t, 60*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, sub.Stderr())
	}
	r := readReport(t, report)
	if r.Status != "FINISHED" || r.Checker.Verdict != "OK" {
		t.Fatalf("%s, checker %+v", r.Status, r.Checker)
	}
	where, _ := r.where()
	onNew := 0
	for st, tm := range where {
		switch tm {
		case "tm-3":
			t.Errorf("%s still on the killed tm-3", st)
		case "tm-4":
			onNew++
		}
	}
	if onNew == 0 {
		t.Errorf("tm-4 received no work: %v", where)
	}
}

// TestCancelWithSavepoint stops a cluster job with runnel cancel --savepoint, and starts it again from the
// savepoint on the cluster: its TaskManagers read the savepoint the JobManager wrote. The second run does
// not chain ("source -> map" becomes two tasks): the operators' state is mapped to them by uid across the
// processes.
func TestCancelWithSavepoint(t *testing.T) {
	c := startCluster(t, 2, 2)
	dir := t.TempDir()
	report, sp := filepath.Join(dir, "r.json"), filepath.Join(dir, "savepoint")
	sub := start(t, "submit", nil, "submit", "sequence", "--jobmanager", c.addr, "--report", report, "--records", "0",
		"--rate", "2000", "--checkpoint-interval", "50ms", "--checkpoint-storage", filepath.Join(dir, "chk"))
	var jobs struct {
		Jobs []struct{ ID, Status string } `json:"jobs"`
	}
	var live clusterReport
	for deadline := time.Now().Add(30 * time.Second); live.Checkpoints == nil || live.Checkpoints.Completed == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint completed: %+v", live)
		}
		c.get(t, "/v1/jobs", &jobs)
		if len(jobs.Jobs) == 1 {
			c.get(t, "/v1/jobs/"+jobs.Jobs[0].ID, &live)
		}
	}
	if _, stderr, code := runCLI(t, "cancel", jobs.Jobs[0].ID, "--jobmanager", c.addr, "--savepoint", sp); code != 0 {
		t.Fatalf("cancel: exit %d: %s", code, stderr)
	}
	if code := sub.exited(t, 30*time.Second); code != exitFailed {
		t.Errorf("submit of a cancelled job exited %d, want %d", code, exitFailed)
	}
	var r struct {
		Status    string `json:"status"`
		Savepoint string `json:"savepoint"`
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Status != "CANCELED" || r.Savepoint != sp {
		t.Fatalf("report %s (%v): want CANCELED with the savepoint %s", b, err, sp)
	}
	again := filepath.Join(dir, "again.json")
	if _, stderr, code := runCLI(t, "submit", "sequence", "--jobmanager", c.addr, "--report", again, "--records", "0", "--rate", "2000",
		"--duration", "500ms", "--no-chaining", "--from-savepoint", sp, "--checkpoint-interval", "50ms", "--checkpoint-storage", filepath.Join(dir, "chk2")); code != 0 {
		t.Fatalf("submit from the savepoint: exit %d: %s", code, stderr)
	}
	var a struct {
		Failovers    []any `json:"failovers"`
		RestoredFrom *struct {
			Location string `json:"location"`
		} `json:"restored_from"`
	}
	if b, err = os.ReadFile(again); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &a); err != nil || len(a.Failovers) != 0 || a.RestoredFrom == nil || a.RestoredFrom.Location != sp {
		t.Fatalf("run from the savepoint: %s (%v)", b, err)
	}
	if _, stderr, code := runCLI(t, "cancel", "not-a-job", "--jobmanager", c.addr); code != exitUsage {
		t.Errorf("cancel of a malformed id: exit %d: %s", code, stderr)
	}
}

// TestUnsharedCheckpointStorageIsRefused gives a JobManager and a TaskManager different working directories
// and the job a relative checkpoint storage path, so that each would write checkpoints of its own: the
// TaskManager cannot read the probe the JobManager wrote, and the job fails saying why instead of taking
// checkpoints no other process could restore.
func TestUnsharedCheckpointStorageIsRefused(t *testing.T) {
	jmDir, tmDir := t.TempDir(), t.TempDir()
	c := startClusterWith(t, proccluster.Spec{Process: proccluster.Options{Dir: jmDir}})
	tm := startIn(t, tmDir, "tm-1", nil, "taskmanager", "--jobmanager", c.addr, "--name", "tm-1", "--slots", "2")
	tm.waitFor(t, registered, 30*time.Second)
	_, stderr, code := runCLI(t, "submit", "sequence", "--jobmanager", c.addr, "--records", "1000",
		"--checkpoint-interval", "50ms", "--checkpoint-storage", "chk")
	if code != exitFailed || !strings.Contains(stderr, "is not the one the JobManager writes") || !strings.Contains(stderr, "tm-1") {
		t.Fatalf("exit %d, want %d with the probe's refusal:\n%s", code, exitFailed, stderr)
	}
}

// TestClusterExitCodes: a role that cannot start as configured is a usage error (2) that names the problem;
// a JobManager that does not answer is not (1).
func TestClusterExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"jobmanager", "--addr", "nonsense"}, exitUsage, "missing port"},
		{[]string{"jobmanager", "--heartbeat-interval", "1s", "--heartbeat-timeout", "1s"}, exitUsage, "at least twice"},
		{[]string{"taskmanager", "--tls-cert", "x.pem"}, exitUsage, "go together"},
		{[]string{"taskmanager", "--slots", "0"}, exitUsage, "--slots"},
		{[]string{"taskmanager", "--inflight-log-disk", "4096"}, exitUsage, "--inflight-log-disk 4096: at least 1 MiB"},
		{[]string{"taskmanager", "--heap-budget", "4096"}, exitUsage, "--heap-budget 4096: at least 1 MiB"},
		{[]string{"submit", "sequence", "--inflight-log-disk", "-1"}, exitUsage, "--inflight-log-disk is not a flag of submit"},
		{[]string{"taskmanager", "--jobmanager", "127.0.0.1:1", "--jobmanager-wait", "300ms"}, exitFailed, "--jobmanager-wait"},
		{[]string{"submit", "sequence", "--jobmanager", "127.0.0.1:1"}, exitFailed, "did not answer"},
		{[]string{"submit", "sequence", "--taskmanagers", "2"}, exitUsage, "not a flag of submit"},
		{[]string{"cancel", "0123", "--jobmanager", "127.0.0.1:1"}, exitUsage, "32 hexadecimal digits"},
	} {
		_, stderr, code := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.says) {
			t.Errorf("%q: exit %d, want %d, with %q in:\n%s", tc.args, code, tc.code, tc.says, stderr)
		}
	}
}

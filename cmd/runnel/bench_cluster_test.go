package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/internal/cli"
)

var startedLine = regexp.MustCompile(`bench: started (\S+) \(pid (\d+)\)`)

// childPIDs returns the pids of the children a bench command said it started.
func childPIDs(t *testing.T, stderr string) []int {
	t.Helper()
	var pids []int
	for _, m := range startedLine.FindAllStringSubmatch(stderr, -1) {
		pid, err := strconv.Atoi(m[2])
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// assertGone fails the test for every pid that still names a process (running, stopped or an unreaped
// zombie): the bench must kill and reap every child before it exits.
func assertGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if !strings.Contains(string(cmdline), "runnel") && len(cmdline) > 0 {
			continue // the pid was reused by an unrelated process: ours is gone
		}
		t.Errorf("child pid %d is still there (kill 0: %v): %s", pid, err, stat)
		_ = syscall.Kill(pid, syscall.SIGKILL) // do not leave it to the next test
	}
}

func at(ms int64) time.Time {
	return time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

func TestRecoveredAfter(t *testing.T) {
	killed := at(0)
	fo := func(failed, tm string, failedAt, recovery, outage int64) runnel.FailoverResult {
		return runnel.FailoverResult{Failed: failed, TaskManager: tm, FailedAt: at(failedAt), RecoveryMillis: recovery, OutageMillis: outage}
	}
	for _, tc := range []struct {
		name      string
		status    string
		failovers []runnel.FailoverResult
		want      bool
		wantErr   string
	}{
		{name: "no failover yet", status: "RUNNING", want: false},
		{name: "a failover before the kill does not count", status: "RUNNING",
			failovers: []runnel.FailoverResult{fo("map[1]", "", -500, 10, 20)}, want: false},
		{name: "the loss, not yet restarted", status: "RUNNING",
			failovers: []runnel.FailoverResult{fo("source -> map[1]", "tm-2", 2, 0, 0)}, want: false},
		{name: "the loss, running again but not emitting", status: "RUNNING",
			failovers: []runnel.FailoverResult{fo("source -> map[1]", "tm-2", 2, 8, 0)}, want: false},
		{name: "the loss, emitting again", status: "RUNNING",
			failovers: []runnel.FailoverResult{fo("source -> map[1]", "tm-2", 2, 8, 9)}, want: true},
		{name: "a consumer's failover emitting, the loss not named yet", status: "RUNNING",
			failovers: []runnel.FailoverResult{fo("check[0]", "", 1, 5, 7)}, want: false},
		{name: "a consumer first, then the loss in the same restart: only the first sees the tail", status: "RUNNING",
			failovers: []runnel.FailoverResult{fo("sink[0]", "", 1, 206, 206), fo("source -> map[1]", "tm-2", 2, 205, 0)}, want: true},
		{name: "a consumer's path emitted, then the loss restarted it anew: wait for its own", status: "RUNNING",
			failovers: []runnel.FailoverResult{fo("check[0]", "", 1, 5, 7), fo("source -> map[1]", "tm-2", 1500, 10, 0)}, want: false},
		{name: "both emitted", status: "RUNNING",
			failovers: []runnel.FailoverResult{fo("check[0]", "", 1, 5, 7), fo("source -> map[1]", "tm-2", 1500, 10, 12)}, want: true},
		{name: "one of several not running again", status: "RUNNING",
			failovers: []runnel.FailoverResult{fo("sink[0]", "", 1, 206, 206), fo("source -> map[1]", "tm-2", 2, 0, 0)}, want: false},
		{name: "the job failed", status: "FAILED", wantErr: "ended FAILED"},
		{name: "the job finished", status: "FINISHED", wantErr: "ended FINISHED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := &runnel.JobResult{Status: tc.status, Failovers: tc.failovers}
			got, err := recoveredAfter(doc, "tm-2", killed)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("recoveredAfter = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// seqJob returns a job document with the sequence job's placement: "source -> map[i]" on tms[i] at
// attempts[i].
func seqJob(tms []string, attempts []int, failovers ...runnel.FailoverResult) *runnel.JobResult {
	v := runnel.VertexResult{Name: sourceVertex}
	for i := range tms {
		v.Subtasks = append(v.Subtasks, runnel.SubtaskResult{Index: i, TaskManager: tms[i], Attempt: attempts[i], State: "RUNNING"})
	}
	return &runnel.JobResult{Status: "RUNNING", Vertices: []runnel.VertexResult{v}, Failovers: failovers}
}

func TestMeasureTMLoss(t *testing.T) {
	killed := at(0)
	cp := int64(3)
	place := []string{"tm-1", "tm-2", "tm-3", "tm-1"}
	loss := runnel.FailoverResult{Failed: "source -> map[1]", TaskManager: "tm-2", FailedAt: at(1500), RecoveryMillis: 40,
		OutageMillis: 60, Restarted: []string{"source -> map[1]", "check[0]", "sink[0]"}, RecordsLost: 30, CheckpointRestored: &cp,
		Cause: "TaskManager tm-2 lost: no heartbeat for 1.5s"}
	consumer := runnel.FailoverResult{Failed: "check[0]", FailedAt: at(3), RecoveryMillis: 50, OutageMillis: 50,
		Restarted: []string{"check[0]", "sink[0]"}, RecordsLost: 5, Cause: "remote channel: connection closed"}
	folded := loss
	folded.FailedAt, folded.OutageMillis = at(4), 0
	earlier := runnel.FailoverResult{Failed: "map[0]", FailedAt: at(-900), OutageMillis: 10, Restarted: []string{"map[0]"}, RecordsLost: 1000}
	for _, tc := range []struct {
		name     string
		after    *runnel.JobResult
		want     tmLossSample
		wantErrs string
	}{
		{name: "the heartbeat path: one failover", after: seqJob(place, []int{0, 1, 0, 0}, loss),
			want: tmLossSample{DetectionMillis: 1500, LostMillis: 1500, RestartMillis: 60, TotalMillis: 1560, Failovers: 1,
				FirstCause: "TaskManager tm-2 lost: no heartbeat for 1.5s", LostCause: "TaskManager tm-2 lost: no heartbeat for 1.5s",
				Restarted: []string{"check[0]", "sink[0]", "source -> map[1]"}, RecordsLost: 30, CheckpointRestored: &cp, UpstreamUnchanged: true}},
		{name: "a consumer's failover first; an earlier one is not the kill's", after: seqJob(place, []int{0, 1, 0, 0}, earlier, consumer, loss),
			want: tmLossSample{DetectionMillis: 3, LostMillis: 1500, RestartMillis: 1557, TotalMillis: 1560, Failovers: 2,
				FirstCause: "remote channel: connection closed", LostCause: "TaskManager tm-2 lost: no heartbeat for 1.5s",
				Restarted: []string{"check[0]", "sink[0]", "source -> map[1]"}, RecordsLost: 35, CheckpointRestored: &cp, UpstreamUnchanged: true}},
		{name: "the loss folded into the consumer's restart", after: seqJob(place, []int{0, 1, 0, 0}, consumer, folded),
			want: tmLossSample{DetectionMillis: 3, LostMillis: 4, RestartMillis: 50, TotalMillis: 53, Failovers: 2,
				FirstCause: "remote channel: connection closed", LostCause: "TaskManager tm-2 lost: no heartbeat for 1.5s",
				Restarted: []string{"check[0]", "sink[0]", "source -> map[1]"}, RecordsLost: 35, CheckpointRestored: &cp, UpstreamUnchanged: true}},
		{name: "region: the sources on live TaskManagers restarted too", after: seqJob(place, []int{1, 1, 1, 1}, loss),
			want: tmLossSample{DetectionMillis: 1500, LostMillis: 1500, RestartMillis: 60, TotalMillis: 1560, Failovers: 1,
				FirstCause: "TaskManager tm-2 lost: no heartbeat for 1.5s", LostCause: "TaskManager tm-2 lost: no heartbeat for 1.5s",
				Restarted: []string{"check[0]", "sink[0]", "source -> map[1]"}, RecordsLost: 30, CheckpointRestored: &cp, UpstreamUnchanged: false}},
		{name: "no failover after the kill", after: seqJob(place, []int{0, 0, 0, 0}, earlier), wantErrs: "no failover after the kill"},
		{name: "the loss is never named", after: seqJob(place, []int{0, 0, 0, 0}, consumer), wantErrs: "names the lost TaskManager tm-2"},
		{name: "nothing emitted again", after: seqJob(place, []int{0, 1, 0, 0}, folded), wantErrs: "never emitted again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := measureTMLoss(seqJob(place, []int{0, 0, 0, 0}), tc.after, "tm-2", killed)
			if tc.wantErrs != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrs) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErrs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Victim, tc.want.KilledAt = "tm-2", killed
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tc.want)
			if string(gj) != string(wj) {
				t.Fatalf("got  %s\nwant %s", gj, wj)
			}
		})
	}
}

func TestSummarizeTMLoss(t *testing.T) {
	cfg := tmLossConfig{freeze: true, heartbeatInterval: 500 * time.Millisecond, heartbeatTimeout: 1500 * time.Millisecond}
	samples := []tmLossSample{
		{DetectionMillis: 1600, TotalMillis: 1700, Restarted: []string{"a", "b"}, RecordsLost: 9, UpstreamUnchanged: true},
		{DetectionMillis: 1500, TotalMillis: 1900, Restarted: []string{"a"}, RecordsLost: 3, UpstreamUnchanged: false},
		{DetectionMillis: 1550, TotalMillis: 1600, Restarted: []string{"a", "b", "c"}, RecordsLost: 5, UpstreamUnchanged: true},
	}
	r := summarizeTMLoss("approximate", cfg, samples)
	if r.Signal != "SIGSTOP" || r.Runs != 3 || r.DetectionMillis != 1550 || r.TotalMillis != 1700 || r.RestartedSubtasks != 2 ||
		r.RecordsLost != 5 || r.UpstreamUnchanged || r.HeartbeatTimeout != 1500 {
		t.Fatalf("%+v", r)
	}
	if r := summarizeTMLoss("region", tmLossConfig{}, nil); r.UpstreamUnchanged || r.TotalMillis != 0 || r.Signal != "SIGKILL" {
		t.Fatalf("no samples: %+v", r)
	}
	if r := summarizeTMLoss("region", tmLossConfig{terminate: true}, samples); r.Signal != "SIGTERM" || r.LossFirst != 0 {
		t.Fatalf("--terminate: %+v", r)
	}
	samples[0].Victim, samples[0].FirstCause, samples[0].LostCause = "tm-2", "TaskManager tm-2 is leaving (shutting down)", "TaskManager tm-2 is leaving (shutting down)"
	samples[1].Victim, samples[1].FirstCause, samples[1].LostCause = "tm-2", "remote channel: partition released", "TaskManager tm-2 lost: x"
	samples[2].Victim, samples[2].FirstCause, samples[2].LostCause = "tm-2", "remote channel: partition released", "remote channel: partition released"
	samples[0].Failovers, samples[1].Failovers, samples[2].Failovers = 1, 4, 1
	if r := summarizeTMLoss("region", cfg, samples); r.LossFirst != 1 || r.Failovers != 1 {
		t.Fatalf("loss first in %d runs, %d failovers (median), want 1 and 1: %+v", r.LossFirst, r.Failovers, r)
	}
}

func TestBuildBenchThroughputArgs(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: benchThroughputArgs{records: 10, keys: 4, parallelism: 3}.args()},
		{args: []string{"--records=0"}, wantErr: "invalid --records 0"},
		{args: []string{"--keys=0"}, wantErr: "invalid --keys 0"},
		{args: []string{"--parallelism=0"}, wantErr: "invalid --parallelism 0"},
		{args: []string{"--nope"}, wantErr: "unknown flag: --nope"},
		{args: []string{"--", "stray"}, wantErr: `unexpected arguments ["stray"]`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := cli.BuildJob(context.Background(), benchThroughputJob, tc.args, cli.Local{})
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestBenchTMLoss runs one small tm-loss run for real: a JobManager and three TaskManager processes, a
// SIGKILL, the figures from the REST API; and every child process is gone when the command returns.
func TestBenchTMLoss(t *testing.T) {
	stdout, stderr, code := runCLI(t, "bench", "tm-loss", "--runs", "1", "--failover", "approximate", "--rate", "500", "--json")
	pids := childPIDs(t, stderr)
	assertGone(t, pids)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if len(pids) != 4 {
		t.Errorf("started %d children, want a JobManager and 3 TaskManagers:\n%s", len(pids), stderr)
	}
	var r tmLossResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if r.Strategy != "approximate" || r.Signal != "SIGKILL" || r.Runs != 1 || len(r.Samples) != 1 {
		t.Fatalf("%s", stdout)
	}
	s := r.Samples[0]
	if !strings.HasPrefix(s.Victim, "tm-") || s.KilledAt.IsZero() || time.Since(s.KilledAt) > 2*time.Minute {
		t.Errorf("victim %q killed at %v", s.Victim, s.KilledAt)
	}
	// A SIGKILL closes the victim's connections: detected long before the heartbeat timeout.
	if s.DetectionMillis < 0 || s.DetectionMillis > s.LostMillis || s.LostMillis >= 1500 {
		t.Errorf("detection %d ms, lost after %d ms", s.DetectionMillis, s.LostMillis)
	}
	if s.RestartMillis <= 0 || s.TotalMillis != s.DetectionMillis+s.RestartMillis || r.TotalMillis != s.TotalMillis {
		t.Errorf("restart %d ms, total %d ms (median %d)", s.RestartMillis, s.TotalMillis, r.TotalMillis)
	}
	// Approximate failover restarts the lost source subtask and everything downstream (check, sink), and
	// only the sources on the live TaskManagers keep their first attempt.
	// The victim ran two logical slots: one or two source subtasks.
	for _, want := range []string{sourceVertex + "[1]", "check[0]", "check[1]", "check[2]", "check[3]", "sink[0]"} {
		if !slices.Contains(s.Restarted, want) || len(s.Restarted) > 7 {
			t.Errorf("restarted %v, want %s among at most 7", s.Restarted, want)
		}
	}
	if !s.UpstreamUnchanged || !r.UpstreamUnchanged || s.CheckpointRestored == nil || s.Failovers < 1 || r.RestartedSubtasks != int64(len(s.Restarted)) {
		t.Errorf("%s", stdout)
	}
	if !strings.HasPrefix(s.LostCause, "TaskManager "+s.Victim+" lost: ") {
		t.Errorf("the loss's cause %q, want the SIGKILLed %s lost", s.LostCause, s.Victim)
	}
	if _, stderr, code := runCLI(t, "bench", "tm-loss", "--freeze", "--terminate"); code != exitUsage || !strings.Contains(stderr, "exclude each other") {
		t.Errorf("--freeze --terminate: exit %d, %s", code, stderr)
	}
}

// TestBenchInterruptedLeavesNoProcess SIGTERMs the bench while its cluster starts: it stops every child
// it started before it exits.
func TestBenchInterruptedLeavesNoProcess(t *testing.T) {
	cmd := exec.Command(binary, "bench", "tm-loss", "--runs", "1", "--failover", "region")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(pipe)
	signalled := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if m := startedLine.FindStringSubmatch(sc.Text()); m != nil && m[1] == "tm-3" && !signalled {
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			signalled = true
		}
	}
	err = cmd.Wait()
	stderr := strings.Join(lines, "\n")
	if !signalled {
		t.Fatalf("the bench never started tm-3 (%v):\n%s", err, stderr)
	}
	pids := childPIDs(t, stderr)
	assertGone(t, pids)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailed || !strings.Contains(stderr, "context canceled") {
		t.Errorf("exit %v, want %d for the interrupted run:\n%s", err, exitFailed, stderr)
	}
	if len(pids) != 4 {
		t.Errorf("started %d children before the signal, want 4:\n%s", len(pids), stderr)
	}
}

// TestBenchThroughputProcesses runs the pipeline on two TaskManager processes and on the mini-cluster
// with two TaskManagers, with few records: both figures and the ratio come out, and no child is left.
func TestBenchThroughputProcesses(t *testing.T) {
	stdout, stderr, code := runCLI(t, "bench", "throughput", "--processes", "2", "--records", "20000", "--runs", "2", "--json")
	pids := childPIDs(t, stderr)
	assertGone(t, pids)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if len(pids) != 3 {
		t.Errorf("started %d children, want a JobManager and 2 TaskManagers:\n%s", len(pids), stderr)
	}
	var r processThroughput
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if r.Processes != 2 || r.Parallelism != 2 || r.Records != 20000 || r.Runs != 2 || len(r.ClusterWall) != 2 || len(r.MiniClusterWall) != 2 ||
		r.ClusterRPS <= 0 || r.MiniClusterRPS <= 0 || r.Ratio != r.ClusterRPS/r.MiniClusterRPS {
		t.Fatalf("%s", stdout)
	}
	for _, tc := range []struct{ args, want string }{
		{"--processes 2 --runs 0", "invalid --runs 0"},
		{"--processes -1", "invalid --processes -1"},
	} {
		if _, stderr, code := runCLI(t, append([]string{"bench", "throughput"}, strings.Fields(tc.args)...)...); code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, %s", tc.args, code, stderr)
		}
	}
}

// TestBenchCheckpointsFailover compares the checkpointed pipeline under task failover with region failover
// (few records): both figures and their ratio come out; an unknown strategy is a usage error.
func TestBenchCheckpointsFailover(t *testing.T) {
	stdout, stderr, code := runCLI(t, "bench", "checkpoints", "--failover", "task", "--records", "200000", "--runs", "1",
		"--interval", "20ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	var r struct {
		Failover    string  `json:"failover"`
		RegionRPS   float64 `json:"region_rps"`
		StrategyRPS float64 `json:"strategy_rps"`
		Ratio       float64 `json:"ratio"`
		Interval    int64   `json:"checkpoint_interval_ms"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if r.Failover != "task" || r.RegionRPS <= 0 || r.StrategyRPS <= 0 || r.Interval != 20 || r.Ratio != r.StrategyRPS/r.RegionRPS {
		t.Fatalf("%s", stdout)
	}
	if _, stderr, code := runCLI(t, "bench", "checkpoints", "--failover", "nope"); code != exitUsage || !strings.Contains(stderr, `invalid --failover "nope"`) {
		t.Errorf("unknown strategy: exit %d, %s", code, stderr)
	}
}

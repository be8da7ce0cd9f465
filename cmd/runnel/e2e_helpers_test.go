package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// throttleProgram is Go source the end-to-end tests' user programs end with: a map, chained to the
// source, that passes records on at no more than rate per second, so that a run lasts long enough for a
// failure to land mid-run and records wait in the source rather than in buffers that hold back barriers.
const throttleProgram = `
// throttle passes records on at no more than rate per second.
type throttle struct {
	runnel.RichBase
	rate  float64
	start time.Time
	n     float64
}

func (t *throttle) Map(v kv) (kv, error) {
	if t.rate <= 0 {
		return v, nil
	}
	if t.start.IsZero() {
		t.start = time.Now()
	}
	t.n++
	if ahead := time.Duration(t.n/t.rate*float64(time.Second)) - time.Since(t.start); ahead > 2*time.Millisecond {
		time.Sleep(ahead)
	}
	return v, nil
}
`

// killMidRun waits (60 s at most) until the cluster's one job runs with a completed checkpoint and ready
// says the run is far enough, SIGKILLs the TaskManager that runs subtask 0 of the vertex named vertex,
// and checks that the job finished after one failover naming that TaskManager (finishedAfterKill), which
// it returns. what says in a failure what ready waits for.
func killMidRun(t *testing.T, tc *testCluster, sub *process, report, vertex, what string, ready func() bool) string {
	t.Helper()
	victim := killWhenReady(t, tc, vertex, what, ready)
	finishedAfterKill(t, sub, report, victim)
	return victim
}

// finishedAfterKill waits for the submitting process sub to exit 0 and checks in the report it wrote that
// the job finished after one failover naming the TaskManager victim.
func finishedAfterKill(t *testing.T, sub *process, report, victim string) {
	t.Helper()
	if code := sub.exited(t, 120*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, sub.Stderr())
	}
	r := readReport(t, report)
	named := 0
	for _, f := range r.Failovers {
		if f.TaskManager == victim {
			named++
		}
	}
	if r.Status != "FINISHED" || named != 1 {
		t.Fatalf("%s with failovers %+v: want one naming %s", r.Status, r.Failovers, victim)
	}
}

// killWhenReady waits (60 s at most) until the cluster's one job runs with a completed checkpoint and
// ready says the run is far enough, then SIGKILLs the TaskManager that runs subtask 0 of the vertex named
// vertex, and returns its name.
func killWhenReady(t *testing.T, tc *testCluster, vertex, what string, ready func() bool) string {
	t.Helper()
	var jobs struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	var live clusterReport
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint completed with %s: %+v", what, live)
		}
		tc.get(t, "/v1/jobs", &jobs)
		if len(jobs.Jobs) == 1 {
			tc.get(t, "/v1/jobs/"+jobs.Jobs[0].ID, &live)
			if live.Status == "RUNNING" && live.Checkpoints != nil && live.Checkpoints.Completed > 0 && ready() {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	before, _ := live.where()
	victim := ""
	for st, tm := range before {
		if strings.Contains(st, vertex) && strings.HasSuffix(st, "[0]") {
			victim = tm
		}
	}
	p := tc.taskManager(victim)
	if p == nil {
		t.Fatalf("subtask 0 of %s runs on %q, not one of the test's TaskManagers: %v", vertex, victim, before)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return victim
}

// runningSums are the running sums per key of the values 0..n-1, value i under key i%keys, in order.
func runningSums(n, keys int64) map[int64][]int64 {
	sums, want := map[int64]int64{}, map[int64][]int64{}
	for i := range n {
		sums[i%keys] += i
		want[i%keys] = append(want[i%keys], sums[i%keys])
	}
	return want
}

// checkRunningSums fails the test unless got holds every running sum of want once and in order; what
// names the reader.
func checkRunningSums(t *testing.T, what string, got, want map[int64][]int64) {
	t.Helper()
	for k, w := range want {
		g := got[k]
		if len(g) != len(w) {
			t.Fatalf("key %d: %s read %d running sums, want %d each once", k, what, len(g), len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("key %d: running sum %d is %d, want %d", k, i, g[i], w[i])
			}
		}
	}
}

// checkRunningSumPrefixes fails the test unless got holds, per key, a prefix of want's running sums, each
// once and in order: what a job that ended before its input did may have committed.
func checkRunningSumPrefixes(t *testing.T, what string, got, want map[int64][]int64) {
	t.Helper()
	for k, g := range got {
		w := want[k]
		if len(g) > len(w) {
			t.Fatalf("key %d: %s read %d running sums, more than the %d of the input", k, what, len(g), len(w))
		}
		for i := range g {
			if g[i] != w[i] {
				t.Fatalf("key %d: running sum %d is %d, want %d: not a prefix, each once", k, i, g[i], w[i])
			}
		}
	}
}

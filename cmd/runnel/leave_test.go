package main

import (
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// TestTerminatedTaskManagerLeaves SIGTERMs the TaskManager that runs source -> map[1] once a checkpoint
// completed, as Kubernetes does to the TaskManager of a pod being deleted: it tells the JobManager it is
// leaving before it stops its tasks, so the job fails over at once, in one failover whose cause names it
// and says it left (not a consumer's failure that its stopping tasks caused: under approximate failover
// each of those would be a failover of its own), onto the slots that remain, and finishes: with region
// failover every record exactly once, with approximate the checker's loss within the reported one. The
// TaskManager exits with code 0.
func TestTerminatedTaskManagerLeaves(t *testing.T) {
	for _, failover := range []string{"region", "approximate"} {
		t.Run(failover, func(t *testing.T) { terminateTaskManager(t, failover) })
	}
}

func terminateTaskManager(t *testing.T, failover string) {
	c := startCluster(t, 3, 2)
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	// 4 sources at 4000 records/s: about 3 s, so the SIGTERM lands mid-run.
	sub := start(t, "submit", nil, "submit", "sequence", "--jobmanager", c.addr, "--report", report,
		"--records", "48000", "--rate", "4000", "--parallelism", "4", "--failover", failover,
		"--checkpoint-interval", "50ms", "--checkpoint-storage", filepath.Join(dir, "chk"))
	_, victim, p := c.awaitMap1(t)
	termAt := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exited(t, 10*time.Second); code != 0 {
		t.Errorf("the SIGTERMed %s exited %d, want 0", victim, code)
	}
	if code := sub.exited(t, 60*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, sub.Stderr())
	}
	r := readReport(t, report)
	if r.Status != "FINISHED" || len(r.Failovers) != 1 {
		t.Fatalf("%s with failovers %+v: want one, %s's leave", r.Status, r.Failovers, victim)
	}
	f := r.Failovers[0]
	if want := "TaskManager " + victim + " is leaving (shutting down)"; f.Cause != want || f.TaskManager != victim {
		t.Errorf("failover cause %q on %q, want %q", f.Cause, f.TaskManager, want)
	}
	// At once: long before the heartbeat timeout (1.5 s).
	if d := f.FailedAt.Sub(termAt); d > time.Second {
		t.Errorf("failed over %v after the SIGTERM of %s, want at once", d, victim)
	} else {
		t.Logf("failed over %v after the SIGTERM of %s", d.Round(time.Millisecond), victim)
	}
	if f.CheckpointRestored == nil {
		t.Errorf("failover %+v restored no checkpoint", f)
	}
	switch v := r.Checker.Verdict; {
	case failover == "region" && (v != "OK" || r.Checker.Records != 48000):
		t.Errorf("checker %+v, want every record exactly once", r.Checker)
	case failover == "approximate" && (v != "OK" && v != "OK_APPROXIMATE" || uint64(r.Checker.Lost) > r.FailoverTotals.RecordsLost):
		t.Errorf("checker %+v with %d records reported lost", r.Checker, r.FailoverTotals.RecordsLost)
	}
	after, _ := r.where()
	for st, tm := range after {
		if tm == victim {
			t.Errorf("%s runs on %s, which left", st, victim)
		}
	}
	p.waitFor(t, leavingLine, time.Second)
	c.jm.waitFor(t, leftLine(victim), time.Second)
}

// leavingLine is what a TaskManager logs when it shuts down; leftLine what the JobManager logs when it
// hears that one is leaving.
var leavingLine = regexp.MustCompile(`telling the JobManager this TaskManager is leaving`)

func leftLine(tm string) *regexp.Regexp {
	return regexp.MustCompile(`TaskManager leaving.*taskmanager=` + regexp.QuoteMeta(tm) + ` .*reason="shutting down"`)
}

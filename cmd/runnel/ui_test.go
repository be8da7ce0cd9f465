package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/ui/uitest"
)

// TestDashboardShowsALostTaskManager runs a job on a JobManager and three TaskManager processes, reads
// the JobManager's dashboard (on its REST address) in a browser, and SIGKILLs the TaskManager that runs
// source -> map[1]: the TaskManagers page keeps it listed, marked LOST as GET /v1/taskmanagers says, the
// others registered; the job's page shows the failover that the loss caused, on that TaskManager.
func TestDashboardShowsALostTaskManager(t *testing.T) {
	b := uitest.Start(t)
	// The directory first, so that it is removed after the cluster stopped writing checkpoints into it
	// (cleanups run last registered first).
	dir := t.TempDir()
	c := startCluster(t, 3, 2)
	// 4 sources at 2000 records/s: about 8 s, so the kill lands mid-run.
	start(t, "submit", nil, "submit", "sequence", "--jobmanager", c.addr, "--report", filepath.Join(dir, "r.json"),
		"--records", "64000", "--rate", "2000", "--parallelism", "4", "--failover", "region",
		"--checkpoint-interval", "100ms", "--checkpoint-storage", filepath.Join(dir, "chk"))
	base := "http://" + c.rest

	b.Open(base + "/#/taskmanagers")
	b.Await("three TaskManagers", `document.querySelectorAll('#tm-table tbody tr').length === 3`, 10*time.Second)
	b.Await("every TaskManager registered", `[...document.querySelectorAll('#tm-table tbody tr')].every((r) => r.getAttribute('data-tm-state') === 'REGISTERED')`, 10*time.Second)
	b.Screenshot("cluster-taskmanagers")

	id, victim, p := c.awaitMap1(t)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	b.Await(victim+" is shown lost", fmt.Sprintf(`(() => { const r = document.querySelector('#tm-table [data-tm=%q]'); return r !== null && r.getAttribute('data-tm-state') === 'LOST' && r.classList.contains('lost'); })()`, victim), 20*time.Second)
	var tms struct {
		TaskManagers []map[string]any `json:"taskmanagers"`
	}
	c.get(t, "/v1/taskmanagers", &tms)
	for _, tm := range tms.TaskManagers {
		want := "REGISTERED"
		if tm["name"] == victim {
			want = "LOST"
		}
		if tm["state"] != want {
			t.Errorf("the API has %s %v, want %s", tm["name"], tm["state"], want)
		}
	}
	b.Await("the page agrees with the API on every TaskManager", `[...document.querySelectorAll('#tm-table tbody tr')].map((r) => r.getAttribute('data-tm') + ' ' + r.getAttribute('data-tm-state')).join(',') === `+
		fmt.Sprintf("%q", states(tms.TaskManagers)), 5*time.Second)
	b.Screenshot("cluster-taskmanagers-lost")

	b.Go("#/jobs/"+id, "page-job")
	b.Await("the job's page shows the failover of "+victim, fmt.Sprintf(`document.querySelector('#failover-list .failover[data-taskmanager=%q]') !== null`, victim), 20*time.Second)
	b.Screenshot("cluster-job")
	if errs := b.ConsoleErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
}

// states is "name STATE,..." of the API's TaskManagers, in its order.
func states(tms []map[string]any) string {
	s := ""
	for i, tm := range tms {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%v %v", tm["name"], tm["state"])
	}
	return s
}

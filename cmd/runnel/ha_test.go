package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/ha"
	"github.com/runnel-dev/runnel/internal/ha/hatest"
)

// haJobManager is one JobManager process of an HA test, with the addresses it listens at.
type haJobManager struct {
	*process
	addr, rest string
}

// startHAJobManager starts a JobManager of cluster on etcd, with a lease of 1 s and the flags extra.
func startHAJobManager(t *testing.T, name, etcd, cluster string, extra ...string) *haJobManager {
	t.Helper()
	return startHAJobManagerOf(t, binary, name, etcd, cluster, extra...)
}

// startHAJobManagerOf is startHAJobManager with the binary bin (a user's job binary).
func startHAJobManagerOf(t *testing.T, bin, name, etcd, cluster string, extra ...string) *haJobManager {
	t.Helper()
	p := startBin(t, bin, name, append([]string{"jobmanager", "--addr", "127.0.0.1:0", "--rest-addr", "127.0.0.1:0",
		"--ha", etcd, "--ha-cluster", cluster, "--ha-ttl", "1s"}, extra...)...)
	m := p.waitFor(t, listening, 30*time.Second)
	return &haJobManager{process: p, addr: m[1], rest: m[2]}
}

// startHAPair starts two JobManagers of cluster on etcd (with the flags extra) and returns them once one
// leads.
func startHAPair(t *testing.T, etcd, cluster string, extra ...string) (leader, standby *haJobManager) {
	t.Helper()
	a := startHAJobManager(t, "jm-a", etcd, cluster, extra...)
	b := startHAJobManager(t, "jm-b", etcd, cluster, extra...)
	if leader = awaitLeader(t, a, b); leader == a {
		return a, b
	}
	return b, a
}

// startHATaskManagers starts n TaskManagers tm-1 ... tm-n with 2 slots each, which find the leader of
// cluster through etcd.
func startHATaskManagers(t *testing.T, etcd, cluster string, n int) []*process {
	t.Helper()
	return startHATaskManagersOf(t, binary, etcd, cluster, n)
}

// startHATaskManagersOf is startHATaskManagers with the binary bin.
func startHATaskManagersOf(t *testing.T, bin, etcd, cluster string, n int) []*process {
	t.Helper()
	var tms []*process
	for i := range n {
		name := fmt.Sprintf("tm-%d", i+1)
		tms = append(tms, startBin(t, bin, name, "taskmanager", "--ha", etcd, "--ha-cluster", cluster, "--name", name, "--slots", "2"))
	}
	return tms
}

// leaderDoc is GET /v1/leader.
type leaderDoc struct {
	HA      bool   `json:"ha"`
	Cluster string `json:"cluster"`
	Leading bool   `json:"leading"`
	Addr    string `json:"addr"`
	REST    string `json:"rest"`
	Epoch   int64  `json:"epoch"`
}

// getJSON GETs path of a REST address and decodes the body into v (nil: not at all); it returns the status.
func getJSON(t *testing.T, rest, path string, v any) int {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + rest + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	return resp.StatusCode
}

// awaitLeader waits (20 s at most) until one of jms is ready (GET /healthz/ready) and returns it.
func awaitLeader(t *testing.T, jms ...*haJobManager) *haJobManager {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, jm := range jms {
			if getJSON(t, jm.rest, "/healthz/ready", nil) == http.StatusOK {
				return jm
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no JobManager ready after 20 s")
	return nil
}

// awaitTaskManagers waits (20 s at most) until jm has n TaskManagers registered.
func awaitTaskManagers(t *testing.T, jm *haJobManager, n int) {
	t.Helper()
	var doc struct {
		TaskManagers []struct{ Name string } `json:"taskmanagers"`
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if getJSON(t, jm.rest, "/v1/taskmanagers", &doc) == http.StatusOK && len(doc.TaskManagers) == n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s has %d TaskManagers after 20 s, want %d", jm.Name, len(doc.TaskManagers), n)
}

// TestJobManagerHA runs two JobManagers of one cluster on a real etcd member and a TaskManager that finds
// the leader through etcd: one JobManager leads (ready, and both name it in GET /v1/leader), the other
// stands by (live, not ready, refuses submissions naming the leader); a job submitted through etcd runs
// on the leader. SIGKILL the leader: the standby leads within a few seconds (a lease of 1 s, 2 s in
// etcd), in a later term, the TaskManager registers with it, and a job submitted through etcd runs there.
func TestJobManagerHA(t *testing.T) {
	etcd := hatest.Start(t)
	leader, standby := startHAPair(t, etcd.Address, "ha-test")
	var onLeader, onStandby leaderDoc
	getJSON(t, leader.rest, "/v1/leader", &onLeader)
	getJSON(t, standby.rest, "/v1/leader", &onStandby)
	if !onLeader.Leading || onStandby.Leading || onLeader.Addr != leader.addr || onStandby.Addr != leader.addr ||
		onStandby.REST != leader.rest || onStandby.Epoch != onLeader.Epoch || onStandby.Cluster != "ha-test" {
		t.Fatalf("leader says %+v, standby says %+v; want both to name %s (REST %s)", onLeader, onStandby, leader.addr, leader.rest)
	}
	if code := getJSON(t, standby.rest, "/healthz/ready", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("the standby's readiness: %d, want 503", code)
	}
	if code := getJSON(t, standby.rest, "/healthz", nil); code != http.StatusOK {
		t.Fatalf("the standby's liveness: %d, want 200", code)
	}
	startHATaskManagers(t, etcd.Address, "ha-test", 1)
	awaitTaskManagers(t, leader, 1)

	// A submission to the standby directly is refused, naming the leader.
	if _, stderr, code := runCLI(t, "submit", "sequence", "--jobmanager", standby.addr, "--records", "10"); code == 0 ||
		!strings.Contains(stderr, "stands by") || !strings.Contains(stderr, leader.addr) {
		t.Fatalf("submit to the standby: exit %d, stderr:\n%s\nwant a refusal naming %s", code, stderr, leader.addr)
	}
	submit := func(what string) {
		t.Helper()
		report := filepath.Join(t.TempDir(), "r.json")
		if _, stderr, code := runCLI(t, "submit", "sequence", "--ha", etcd.Address, "--ha-cluster", "ha-test",
			"--records", "20000", "--parallelism", "2", "--report", report); code != 0 {
			t.Fatalf("submit %s: exit %d:\n%s", what, code, stderr)
		}
		if r := readReport(t, report); r.Status != "FINISHED" || r.Checker.Verdict != "OK" {
			t.Fatalf("submit %s: %s, checker %+v", what, r.Status, r.Checker)
		}
	}
	submit("to the first leader")

	killed := time.Now()
	if err := leader.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	next := awaitLeader(t, standby)
	took := time.Since(killed)
	var now leaderDoc
	getJSON(t, next.rest, "/v1/leader", &now)
	if !now.Leading || now.Addr != next.addr || now.Epoch <= onLeader.Epoch {
		t.Fatalf("after the kill: %+v, want %s leading in a term after %d", now, next.addr, onLeader.Epoch)
	}
	awaitTaskManagers(t, next, 1)
	t.Logf("the standby led %s after the leader was killed (term %d after %d)", took.Round(10*time.Millisecond), now.Epoch, onLeader.Epoch)
	submit("to the new leader")
}

// TestJobManagerHAMistakes: an etcd that does not answer stops a JobManager at once (exit 1), naming the
// endpoints; flags of HA given wrong are exit 2, naming the flag.
func TestJobManagerHAMistakes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"jobmanager", "--addr", "127.0.0.1:0", "--rest-addr", "", "--ha", "etcd://" + dead, "--ha-cluster", "c"}, 1, "etcd at " + dead + " does not answer"},
		{[]string{"jobmanager", "--ha", "http://" + dead, "--ha-cluster", "c"}, 2, "invalid --ha"},
		{[]string{"jobmanager", "--ha", "etcd://" + dead}, 2, "--ha-cluster"},
		{[]string{"jobmanager", "--ha-cluster", "c"}, 2, "--ha-cluster \"c\" without --ha"},
		{[]string{"jobmanager", "--ha", "etcd://" + dead, "--ha-cluster", "c", "--ha-ttl", "1500ms"}, 2, "whole seconds"},
		{[]string{"taskmanager", "--ha", "etcd://" + dead, "--ha-cluster", "c"}, 1, "etcd at " + dead + " does not answer"},
		{[]string{"submit", "sequence", "--ha", "etcd://" + dead, "--ha-cluster", "c"}, 1, "etcd at " + dead + " does not answer"},
		{[]string{"cancel", "0123456789abcdef0123456789abcdef", "--ha", "etcd:/" + dead, "--ha-cluster", "c"}, 2, "invalid --ha"},
	} {
		t.Run(strings.Join(tc.args[:1], " ")+fmt.Sprint(tc.code), func(t *testing.T) {
			t.Parallel() // an etcd that does not answer takes 5 s to give up on
			_, stderr, code := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("%q: exit %d, stderr:\n%s\nwant exit %d with %q", tc.args, code, stderr, tc.code, tc.want)
			}
		})
	}
}

// TestJobManagerHAKeepsTasks: two JobManagers and three TaskManagers; the leader is SIGKILLed while a
// job with checkpoints runs. With task continuity (the default) the TaskManagers keep the tasks running
// and report them to the standby once it leads, which takes them over: every task keeps its attempt and
// TaskManager, no failover, and `runnel submit`, which follows the leader through etcd, reports FINISHED
// with every record once and the change of leader. With --ha-continuity=false the new leader restarts
// the job from the newest checkpoint instead (Flink's behaviour), exactly once too. Either way the
// checkpoint pointer on etcd is the last checkpoint the job completed.
func TestJobManagerHAKeepsTasks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		continuity bool
	}{{"continuity", true}, {"continuity off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			etcd := hatest.Start(t)
			cluster := "ha-keep"
			leader, standby := startHAPair(t, etcd.Address, cluster, fmt.Sprintf("--ha-continuity=%v", tc.continuity))
			startHATaskManagers(t, etcd.Address, cluster, 3)
			awaitTaskManagers(t, leader, 3)
			run := submitSequenceHA(t, etcd.Address, cluster, leader)
			var before clusterReport
			getJSON(t, leader.rest, "/v1/jobs/"+run.id, &before)
			killed := time.Now()
			if err := leader.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			awaitLeader(t, standby)
			took := time.Since(killed)
			r := run.finished(t)
			rs := r.Resumed
			if rs == nil || rs.PreviousLeader != leader.addr || rs.Leader != standby.addr || rs.Epoch <= rs.PreviousEpoch || rs.PreviousEpoch == 0 {
				t.Fatalf("resumed %+v: want the change from %s to %s, in a later term", rs, leader.addr, standby.addr)
			}
			if tc.continuity {
				if !rs.TasksKept || rs.Fallback != "" || r.RestoredFrom != nil || len(r.Failovers) != 0 {
					t.Fatalf("resumed %+v, restored from %+v, failovers %+v: want the tasks taken over, nothing restarted", rs, r.RestoredFrom, r.Failovers)
				}
				tmBefore, attemptBefore := before.where()
				tmAfter, attemptAfter := r.where()
				for s, a := range attemptAfter {
					if a != 0 || attemptBefore[s] != 0 || tmAfter[s] != tmBefore[s] {
						t.Fatalf("subtask %s: attempt %d on %s, before the kill %d on %s: want attempt 0 on the same TaskManager",
							s, a, tmAfter[s], attemptBefore[s], tmBefore[s])
					}
				}
			} else if rs.TasksKept || r.RestoredFrom == nil || r.RestoredFrom.CheckpointID == 0 || len(r.Failovers) != 1 ||
				!strings.Contains(r.Failovers[0].Cause, "JobManager that led the job was lost") || r.Failovers[0].Fallback != "" {
				t.Fatalf("resumed %+v, restored from %+v, failovers %+v: want a restart from a checkpoint, the leader's loss its failover", rs, r.RestoredFrom, r.Failovers)
			}
			var resumed struct {
				Jobs []struct{ ID, Status string } `json:"jobs"`
			}
			getJSON(t, standby.rest, "/v1/jobs", &resumed)
			if len(resumed.Jobs) != 1 || resumed.Jobs[0].ID != run.id || resumed.Jobs[0].Status != "FINISHED" {
				t.Fatalf("the new leader's jobs %+v: want %s FINISHED, under the id it was submitted with", resumed.Jobs, run.id)
			}
			// Each checkpoint counted as completed only once recorded on etcd: the pointer is the job's last.
			hc, err := ha.Open(context.Background(), ha.Config{Endpoints: []string{etcd.Endpoint}, Cluster: cluster})
			if err != nil {
				t.Fatal(err)
			}
			defer hc.Close()
			ptr, err := hc.Checkpoint(context.Background(), run.id)
			if err != nil || ptr == nil || ptr.ID != r.Checkpoints.LastCompletedID || ptr.Location != run.storage {
				t.Fatalf("checkpoint pointer %+v, %v: want the last completed, %d, in %s", ptr, err, r.Checkpoints.LastCompletedID, run.storage)
			}
			t.Logf("the standby led %s after the kill; tasks kept %v; %d records checked; etcd points at checkpoint %d",
				took.Round(10*time.Millisecond), rs.TasksKept, r.Checker.Records, ptr.ID)
		})
	}
}

// TestJobManagerHAKilledInCheckpoint: the leader is SIGKILLed while a checkpoint is in progress (its
// REST API counts one, with 100 000 keys of state to snapshot). The new leader takes the tasks over,
// aborts the checkpoint the tasks heard of above the last completed one, continues above it, and the job
// finishes exactly once with no failover.
func TestJobManagerHAKilledInCheckpoint(t *testing.T) {
	etcd := hatest.Start(t)
	cluster := "ha-inckpt"
	leader, standby := startHAPair(t, etcd.Address, cluster)
	startHATaskManagers(t, etcd.Address, cluster, 2)
	awaitTaskManagers(t, leader, 2)
	run := submitSequenceHA(t, etcd.Address, cluster, leader, "--keys", "100000")
	var live clusterReport
	deadline := time.Now().Add(30 * time.Second)
	for getJSON(t, leader.rest, "/v1/jobs/"+run.id, &live); live.Checkpoints == nil || live.Checkpoints.InProgress == 0; getJSON(t, leader.rest, "/v1/jobs/"+run.id, &live) {
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint in progress seen in 30 s")
		}
	}
	if err := leader.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitLeader(t, standby)
	r := run.finished(t)
	if rs := r.Resumed; rs == nil || !rs.TasksKept || len(r.Failovers) != 0 {
		t.Fatalf("resumed %+v, failovers %+v: want the tasks taken over", rs, r.Failovers)
	}
	m := regexp.MustCompile(`job taken over: its tasks kept running.* completed=(\d+) heard=(\d+)`).FindStringSubmatch(standby.Stderr())
	if m == nil {
		t.Fatalf("the new leader did not log the takeover:\n%s", standby.LastLines())
	}
	completed, _ := strconv.ParseInt(m[1], 10, 64)
	heard, _ := strconv.ParseInt(m[2], 10, 64)
	if heard <= completed {
		t.Fatalf("taken over with checkpoint %d completed and %d the highest heard of: want one in flight", completed, heard)
	}
	t.Logf("killed with checkpoint %d in flight (%d completed); %d records checked", heard, completed, r.Checker.Records)
}

// TestJobManagerHAEtcdLost: etcd's only member stops while a job with checkpoints runs. The leader cannot
// renew its lease, steps down and exits 1, leaving the tasks running; the TaskManagers keep them (their
// grace period restarts while etcd cannot be reached) and output goes on while checkpoints pause. etcd
// comes back, a JobManager leads (one started again, as a supervisor would) and takes the tasks over; the
// job finishes exactly once, no task restarted.
func TestJobManagerHAEtcdLost(t *testing.T) {
	etcd := hatest.Start(t)
	cluster := "ha-etcd-lost"
	leader := startHAJobManager(t, "jm-a", etcd.Address, cluster)
	awaitLeader(t, leader)
	startHATaskManagers(t, etcd.Address, cluster, 2)
	awaitTaskManagers(t, leader, 2)
	run := submitSequenceHA(t, etcd.Address, cluster, leader)
	var before clusterReport
	getJSON(t, leader.rest, "/v1/jobs/"+run.id, &before)
	etcd.Stop()
	if code := leader.exited(t, 60*time.Second); code != 1 || !strings.Contains(leader.Stderr(), "lost the leadership") {
		t.Fatalf("the leader exited %d, want 1 saying it lost the leadership:\n%s", code, leader.LastLines())
	}
	stepped := time.Now()
	etcd.Restart(t)
	next := startHAJobManager(t, "jm-b", etcd.Address, cluster)
	awaitLeader(t, next)
	t.Logf("etcd back and a leader %s after the old one stepped down", time.Since(stepped).Round(10*time.Millisecond))
	r := run.finished(t)
	if rs := r.Resumed; rs == nil || !rs.TasksKept || len(r.Failovers) != 0 {
		t.Fatalf("resumed %+v, failovers %+v: want the tasks taken over", rs, r.Failovers)
	}
	tmBefore, _ := before.where()
	tmAfter, attempts := r.where()
	for s, a := range attempts {
		if a != 0 || tmAfter[s] != tmBefore[s] {
			t.Fatalf("subtask %s: attempt %d on %s (before: %s), want its first attempt where it ran", s, a, tmAfter[s], tmBefore[s])
		}
	}
	t.Logf("the tasks ran on through etcd's loss; %d records checked", r.Checker.Records)
}

// tcpProxy forwards connections from its listener to a target until cut, which closes the listener and
// every connection: a process that reaches the target only through it loses the target, others do not.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			for _, pair := range [][2]net.Conn{{c, u}, {u, c}} {
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					_, _ = io.Copy(pair[0], pair[1])
					pair[0].Close()
				}()
			}
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// cut closes the proxy's listener and connections, and waits for its goroutines.
func (p *tcpProxy) cut() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// TestJobManagerHALeaderCutOffFromEtcd: the leader reaches etcd through a proxy, and the proxy is cut while
// a job with checkpoints runs; the TaskManagers and the standby still reach etcd, and the TaskManagers still
// reach the old leader. The old leader's lease runs out, the standby leads, and the TaskManagers, seeing a
// later term, leave the deposed leader at once and register with the new one, which resumes the job; the
// deposed leader's checkpoints cannot complete (their record on etcd fails), it notices its term ended and
// exits 1. The job finishes exactly once, and `runnel submit` reports it.
func TestJobManagerHALeaderCutOffFromEtcd(t *testing.T) {
	etcd := hatest.Start(t)
	proxy := startProxy(t, etcd.Endpoint)
	a := startHAJobManager(t, "jm-a", "etcd://"+proxy.addr(), "ha-cut")
	awaitLeader(t, a) // a leads: it started first
	b := startHAJobManager(t, "jm-b", etcd.Address, "ha-cut")
	startHATaskManagers(t, etcd.Address, "ha-cut", 2)
	awaitTaskManagers(t, a, 2)
	run := submitSequenceHA(t, etcd.Address, "ha-cut", a)
	proxy.cut()
	cut := time.Now()
	awaitLeader(t, b)
	t.Logf("the standby led %s after the leader was cut off from etcd", time.Since(cut).Round(10*time.Millisecond))
	if code := a.exited(t, 60*time.Second); code != 1 || !strings.Contains(a.Stderr(), "lost the leadership") {
		t.Fatalf("the deposed leader exited %d, want 1 saying it lost the leadership:\n%s", code, a.LastLines())
	}
	r := run.finished(t)
	if rs := r.Resumed; rs == nil || !rs.TasksKept || len(r.Failovers) != 0 {
		t.Fatalf("resumed %+v, failovers %+v: want the tasks taken over by the new leader\ndeposed leader:\n%s", rs, r.Failovers, a.Stderr())
	}
	t.Logf("the tasks were taken over; %d records checked", r.Checker.Records)
}

// haRun is a sequence job submitted through etcd.
type haRun struct {
	sub             *process
	id              string // the job's id, as the leader gave it
	report, storage string
}

// haRecords is how many records haRun's job checks: at 5000 records/s per subtask, a dozen seconds.
const haRecords = 60_000

// submitSequenceHA submits the sequence job with checkpoints every 100 ms (and the flags extra) through
// etcd to cluster, and
// returns once the leader jm has completed three of its checkpoints (30 s at most).
func submitSequenceHA(t *testing.T, etcd, cluster string, jm *haJobManager, extra ...string) *haRun {
	t.Helper()
	dir := t.TempDir()
	run := &haRun{report: filepath.Join(dir, "r.json"), storage: filepath.Join(dir, "chk")}
	run.sub = start(t, "submit", nil, append([]string{"submit", "sequence", "--ha", etcd, "--ha-cluster", cluster,
		"--records", fmt.Sprint(haRecords), "--rate", "5000", "--keys", "8", "--parallelism", "2",
		"--checkpoint-interval", "100ms", "--checkpoint-storage", run.storage, "--report", run.report}, extra...)...)
	var jobs struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	var live clusterReport
	deadline := time.Now().Add(30 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint completed on the leader after 30 s: %+v\n%s", live, run.sub.Stderr())
		}
		if getJSON(t, jm.rest, "/v1/jobs", &jobs) == http.StatusOK && len(jobs.Jobs) == 1 {
			getJSON(t, jm.rest, "/v1/jobs/"+jobs.Jobs[0].ID, &live)
			if live.Checkpoints != nil && live.Checkpoints.Completed > 2 {
				run.id = jobs.Jobs[0].ID
				return run
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finished waits for the submission to exit 0 and returns its report, which must say FINISHED with every
// record once.
func (run *haRun) finished(t *testing.T) clusterReport {
	t.Helper()
	if code := run.sub.exited(t, 120*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, run.sub.Stderr())
	}
	r := readReport(t, run.report)
	if r.Status != "FINISHED" || r.Checker.Verdict != "OK" || r.Checker.Records != haRecords {
		t.Fatalf("%s, checker %+v: want FINISHED with every record once", r.Status, r.Checker)
	}
	return r
}

// TestJobManagerHAKilledTwice: three JobManagers; the leader is SIGKILLed while a job runs, and then the
// next one once it resumed the job and took checkpoints of its own: the third resumes it again, and the job
// finishes exactly once.
func TestJobManagerHAKilledTwice(t *testing.T) {
	etcd := hatest.Start(t)
	jms := []*haJobManager{
		startHAJobManager(t, "jm-a", etcd.Address, "ha-twice"),
		startHAJobManager(t, "jm-b", etcd.Address, "ha-twice"),
		startHAJobManager(t, "jm-c", etcd.Address, "ha-twice"),
	}
	first := awaitLeader(t, jms...)
	startHATaskManagers(t, etcd.Address, "ha-twice", 2)
	awaitTaskManagers(t, first, 2)
	run := submitSequenceHA(t, etcd.Address, "ha-twice", first)
	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rest := slices.DeleteFunc(slices.Clone(jms), func(jm *haJobManager) bool { return jm == first })
	second := awaitLeader(t, rest...)
	awaitCheckpoints(t, second, run.id, 3)
	if err := second.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	third := awaitLeader(t, slices.DeleteFunc(rest, func(jm *haJobManager) bool { return jm == second })...)
	r := run.finished(t)
	if rs := r.Resumed; rs == nil || rs.PreviousLeader != second.addr || rs.Leader != third.addr || !rs.TasksKept || len(r.Failovers) != 0 {
		t.Fatalf("resumed %+v, failovers %+v: want the change from %s to %s, the tasks taken over", rs, r.Failovers, second.addr, third.addr)
	}
	if _, attempts := r.where(); len(attempts) == 0 || slices.ContainsFunc(slices.Collect(maps.Values(attempts)), func(a int) bool { return a != 0 }) {
		t.Fatalf("attempts %v: want every task's first attempt, twice taken over", attempts)
	}
	t.Logf("the tasks were taken over twice; %d records checked", r.Checker.Records)
}

// TestJobManagerHATaskManagerLostWithoutLeader: the leader is SIGKILLed, and before a standby leads a
// TaskManager is SIGKILLed too: the new leader resumes the job on the TaskManager that is left, from the
// newest checkpoint, exactly once.
func TestJobManagerHATaskManagerLostWithoutLeader(t *testing.T) {
	etcd := hatest.Start(t)
	leader, standby := startHAPair(t, etcd.Address, "ha-tm")
	tms := startHATaskManagers(t, etcd.Address, "ha-tm", 2)
	awaitTaskManagers(t, leader, 2)
	run := submitSequenceHA(t, etcd.Address, "ha-tm", leader)
	if err := leader.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := tms[1].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitLeader(t, standby)
	r := run.finished(t)
	if rs := r.Resumed; rs == nil || rs.TasksKept || rs.Fallback == "" || r.RestoredFrom == nil || len(r.Failovers) == 0 ||
		r.Failovers[0].Fallback != rs.Fallback {
		t.Fatalf("resumed %+v, restored from %+v, failovers %+v: want a restart from a checkpoint, and why the tasks could not be taken over in its failovers",
			rs, r.RestoredFrom, r.Failovers)
	}
	t.Logf("restarted from checkpoint %d: %s", r.RestoredFrom.CheckpointID, r.Resumed.Fallback)
	for _, v := range r.Vertices {
		for _, s := range v.Subtasks {
			if s.TaskManager != "tm-1" {
				t.Fatalf("subtask %s[%d] ran on %s, want tm-1, the TaskManager left", v.Name, s.Index, s.TaskManager)
			}
		}
	}
}

// awaitCheckpoints waits (30 s at most) until job id on jm has completed n checkpoints.
func awaitCheckpoints(t *testing.T, jm *haJobManager, id string, n int64) {
	t.Helper()
	var live clusterReport
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if getJSON(t, jm.rest, "/v1/jobs/"+id, &live) == http.StatusOK && live.Checkpoints != nil && live.Checkpoints.Completed >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("job %s on %s: checkpoints %+v after 30 s, want %d completed", id, jm.Name, live.Checkpoints, n)
}

package main

import (
	be "encoding/binary"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel/internal/ha/hatest"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

// TestKafkaExactlyOnceLeaderKilled runs Kafka → running sums → Kafka with the exactly-once sink on two
// JobManagers with HA and three TaskManagers (a user's job binary), and SIGKILLs the leader once the output
// holds committed records and records of an open transaction. The standby takes the tasks over: the open
// transaction stays open across the change of leader and a later checkpoint's completion commits it, so a
// read_committed reader reads every running sum of every key once and in order, no transaction stays
// open, and no task restarted.
func TestKafkaExactlyOnceLeaderKilled(t *testing.T) {
	b := kafkabroker.Start(t)
	const n, keys = 20_000, 13
	bin := buildUserBinary(t, []byte(kafkaSumProgram))
	in, out, prefix := b.Name("ha-in"), b.Name("ha-out"), b.Name("ha")
	b.CreateTopic(t, in, 3)
	b.CreateTopic(t, out, 3)
	produceKeyed(t, b, in, n, keys)
	etcd := hatest.Start(t)
	const cluster = "ha-kafka"
	a := startHAJobManagerOf(t, bin, "jm-a", etcd.Address, cluster)
	leader := awaitLeader(t, a)
	standby := startHAJobManagerOf(t, bin, "jm-b", etcd.Address, cluster)
	startHATaskManagersOf(t, bin, etcd.Address, cluster, 3)
	awaitTaskManagers(t, leader, 3)
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	// 2 source subtasks at 2500 records/s each: about 4 s, so that the kill lands mid-run.
	sub := startBin(t, bin, "submit", "submit", "kafkasum", "--ha", etcd.Address, "--ha-cluster", cluster,
		"--brokers", b.Addr, "--in", in, "--out", out, "--prefix", prefix, "--rate", "2500",
		"--parallelism", "2", "--checkpoint-interval", "100ms", "--checkpoint-storage", filepath.Join(dir, "chk"), "--report", report)

	adm := b.Admin(t)
	deadline := time.Now().Add(60 * time.Second)
	for !committedAndOpen(t, adm, out, prefix) {
		if time.Now().After(deadline) {
			t.Fatalf("no committed and open records in %s after 60 s:\n%s", out, sub.Stderr())
		}
		time.Sleep(5 * time.Millisecond)
	}
	var jobs struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	if getJSON(t, leader.rest, "/v1/jobs", &jobs) != http.StatusOK || len(jobs.Jobs) != 1 {
		t.Fatalf("the leader runs %+v, want the job", jobs.Jobs)
	}
	if err := leader.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitLeader(t, standby)
	if code := sub.exited(t, 120*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, sub.Stderr())
	}
	r := readReport(t, report)
	if rs := r.Resumed; r.Status != "FINISHED" || rs == nil || !rs.TasksKept || len(r.Failovers) != 0 {
		t.Fatalf("%s, resumed %+v, failovers %+v: want FINISHED, the tasks taken over", r.Status, rs, r.Failovers)
	}
	got := map[int64][]int64{}
	recs := b.ReadTopic(t, out, kgo.ReadCommitted())
	for _, rec := range recs {
		k := int64(be.BigEndian.Uint64(rec.Key))
		got[k] = append(got[k], int64(be.BigEndian.Uint64(rec.Value)))
	}
	checkRunningSums(t, "read_committed", got, runningSums(n, keys))
	if open := b.OngoingTransactions(t, prefix+"-"); len(open) != 0 {
		t.Fatalf("transactions left Ongoing after the job ended: %+v", open)
	}
	t.Logf("%d running sums committed, each once, across the change of leader (job %s)", len(recs), jobs.Jobs[0].ID)
}

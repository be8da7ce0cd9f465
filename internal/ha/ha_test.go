package ha_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/ha"
	"github.com/runnel-dev/runnel/internal/ha/hatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"etcd://127.0.0.1:2379", []string{"127.0.0.1:2379"}, ""},
		{"etcd://a:2379,b:2380/", []string{"a:2379", "b:2380"}, ""},
		{"etcd://[::1]:2379", []string{"[::1]:2379"}, ""},
		{"http://a:2379", nil, "want etcd://HOST:PORT"},
		{"etcd://a", nil, `"a" is not HOST:PORT`},
		{"etcd://a:2379,", nil, `"" is not HOST:PORT`},
		{"etcd://a:2379/x", nil, `"a:2379/x" is not HOST:PORT`},
	} {
		got, err := ha.ParseAddress(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	eps := []string{"a:1"}
	for _, tc := range []struct {
		cfg ha.Config
		err string
	}{
		{ha.Config{Endpoints: eps, Cluster: "c"}, ""},
		{ha.Config{Endpoints: eps, Cluster: "c", TTL: 2 * time.Second}, ""},
		{ha.Config{Cluster: "c"}, "at least one endpoint"},
		{ha.Config{Endpoints: eps}, "--ha-cluster"},
		{ha.Config{Endpoints: eps, Cluster: "a/b"}, "no slashes"},
		{ha.Config{Endpoints: eps, Cluster: "c", TTL: 1500 * time.Millisecond}, "whole seconds"},
	} {
		err := tc.cfg.Validate()
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.err)
		}
	}
}

// TestOpenUnreachable: an etcd that does not answer is an error at once (within the dial timeout) that
// names the endpoints.
func TestOpenUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	start := time.Now()
	_, err = ha.Open(context.Background(), ha.Config{Endpoints: []string{addr}, Cluster: "c"})
	if !errors.Is(err, ha.ErrUnreachable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("%v: want ErrUnreachable naming %s", err, addr)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("took %s to give up", d)
	}
}

func open(t *testing.T, s *hatest.Server) *ha.Client {
	t.Helper()
	c, err := ha.Open(context.Background(), ha.Config{Endpoints: []string{s.Endpoint}, Cluster: "test", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// campaign campaigns on a goroutine of its own and returns a channel that gets the term.
func campaign(t *testing.T, ctx context.Context, c *ha.Client, addr string) <-chan *ha.Leadership {
	t.Helper()
	ch := make(chan *ha.Leadership, 1)
	go func() {
		l, err := c.Campaign(ctx, ha.Candidate{Addr: addr})
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("campaign of %s: %v", addr, err)
			}
			close(ch)
			return
		}
		ch <- l
	}()
	return ch
}

// TestElectionAndFencing: one of two JobManagers leads, the other stands by; Leader says who leads and in
// which term; when the leader resigns the standby leads in a later term, and the deposed leader's writes
// are refused while the new leader's apply.
func TestElectionAndFencing(t *testing.T) {
	s := hatest.Start(t)
	a, b := open(t, s), open(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.Leader(ctx); !errors.Is(err, ha.ErrNoLeader) {
		t.Fatalf("before any campaign: %v, want ErrNoLeader", err)
	}
	la, err := a.Campaign(ctx, ha.Candidate{Addr: "jm-a:6123", REST: "rest-jm-a:6123"})
	if err != nil {
		t.Fatal(err)
	}
	standby := campaign(t, ctx, b, "jm-b:6123")
	info, err := b.Leader(ctx)
	if err != nil || info.Addr != "jm-a:6123" || info.REST != "rest-jm-a:6123" || info.Epoch != la.Epoch() {
		t.Fatalf("leader %+v, %v; want jm-a:6123 in term %d", info, err, la.Epoch())
	}
	select {
	case <-standby:
		t.Fatal("the standby leads while the leader is alive")
	case <-time.After(200 * time.Millisecond):
	}
	job := ha.Job{ID: "j1", Name: "sequence", Args: []string{"--records", "10"}, Status: "RUNNING"}
	if err := la.PutJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-standby
	if lb == nil {
		t.Fatal("the standby's campaign failed")
	}
	if lb.Epoch() <= la.Epoch() {
		t.Fatalf("new term %d, old %d: want a later one", lb.Epoch(), la.Epoch())
	}
	if info, err := a.Leader(ctx); err != nil || info.Addr != "jm-b:6123" || info.Epoch != lb.Epoch() {
		t.Fatalf("leader %+v, %v; want jm-b:6123 in term %d", info, err, lb.Epoch())
	}
	job.Status = "FAILED"
	if err := la.PutJob(ctx, job); !errors.Is(err, ha.ErrNotLeader) {
		t.Fatalf("a write of the deposed leader: %v, want ErrNotLeader", err)
	}
	jobs, err := b.Jobs(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].Status != "RUNNING" || jobs[0].Args[1] != "10" {
		t.Fatalf("jobs %+v, %v: want j1 RUNNING as the first leader wrote it", jobs, err)
	}
	job.Status = "FINISHED"
	if err := lb.PutJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := lb.DeleteJob(ctx, "j1"); err != nil {
		t.Fatal(err)
	}
	if jobs, err := a.Jobs(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("jobs %+v, %v after the delete", jobs, err)
	}
}

// TestLeaderDiesStandbyTakesOver: a leader that dies without resigning (its client gone, its lease no
// longer kept alive) is replaced within the lease's TTL.
func TestLeaderDiesStandbyTakesOver(t *testing.T) {
	s := hatest.Start(t)
	a, b := open(t, s), open(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.Campaign(ctx, ha.Candidate{Addr: "jm-a", REST: "rest-jm-a"}); err != nil {
		t.Fatal(err)
	}
	standby := campaign(t, ctx, b, "jm-b")
	died := time.Now()
	_ = a.Close() // no resignation: the lease runs out
	lb := <-standby
	if lb == nil {
		t.Fatal("the standby's campaign failed")
	}
	// etcd raises a lease of 1 s to its minimum (1.5 election timeouts: 2 s here) and checks expiries
	// every half second.
	if d := time.Since(died); d > 5*time.Second {
		t.Fatalf("the standby took %s to lead, with a lease of 1 s (2 s in etcd)", d)
	} else {
		t.Logf("the standby led %s after the leader died", d.Round(10*time.Millisecond))
	}
}

// TestLeaderLosesEtcd: a leader cut off from etcd for longer than its lease ends its term (Done), and its
// writes are refused once etcd is back; a standby then leads.
func TestLeaderLosesEtcd(t *testing.T) {
	s := hatest.Start(t)
	a := open(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	la, err := a.Campaign(ctx, ha.Candidate{Addr: "jm-a", REST: "rest-jm-a"})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	select {
	case <-la.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the term did not end 20 s after etcd was lost")
	}
	s.Restart(t)
	if err := la.PutJob(ctx, ha.Job{ID: "j"}); !errors.Is(err, ha.ErrNotLeader) {
		t.Fatalf("a write after the term ended: %v, want ErrNotLeader", err)
	}
	b := open(t, s)
	select {
	case lb := <-campaign(t, ctx, b, "jm-b"):
		if lb == nil || lb.Epoch() <= la.Epoch() {
			t.Fatalf("new term %v after %d", lb, la.Epoch())
		}
	case <-ctx.Done():
		t.Fatal("no new leader after etcd came back")
	}
}

// TestCheckpointPointer: the pointer to a job's newest completed checkpoint only goes forward, and a new
// leader reads what the old one wrote and carries on from it.
func TestCheckpointPointer(t *testing.T) {
	s := hatest.Start(t)
	a, b := open(t, s), open(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	la, err := a.Campaign(ctx, ha.Candidate{Addr: "jm-a", REST: "rest-jm-a"})
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := a.Checkpoint(ctx, "j"); err != nil || cp != nil {
		t.Fatalf("%v, %v before any: want none", cp, err)
	}
	for _, id := range []int64{3, 5, 5} {
		if err := la.PutCheckpoint(ctx, "j", ha.CheckpointPointer{ID: id, Location: "/chk"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := la.PutCheckpoint(ctx, "j", ha.CheckpointPointer{ID: 4, Location: "/chk"}); err == nil || !strings.Contains(err.Error(), "older than the recorded 5") {
		t.Fatalf("pointer back to 4: %v, want refused", err)
	}
	standby := campaign(t, ctx, b, "jm-b")
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-standby
	if cp, err := b.Checkpoint(ctx, "j"); err != nil || cp == nil || cp.ID != 5 || cp.Location != "/chk" {
		t.Fatalf("the new leader reads %+v, %v; want checkpoint 5 in /chk", cp, err)
	}
	if err := la.PutCheckpoint(ctx, "j", ha.CheckpointPointer{ID: 6}); !errors.Is(err, ha.ErrNotLeader) {
		t.Fatalf("the deposed leader's pointer: %v, want ErrNotLeader", err)
	}
	if err := lb.PutCheckpoint(ctx, "j", ha.CheckpointPointer{ID: 6, Location: "/chk"}); err != nil {
		t.Fatal(err)
	}
}

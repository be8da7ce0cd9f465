package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/cmd/runnel/internal/proccluster"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/mtls/mtlstest"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// testCA is a certificate authority of a test with its PEM files in dir: ca.pem, and a certificate and a
// key for every process it issued TLS flags to.
type testCA struct {
	*mtlstest.CA
	dir string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	ca := &testCA{CA: mtlstest.NewCA(t, name), dir: t.TempDir()}
	ca.WriteCA(t, ca.dir)
	return ca
}

// flags are the TLS flags of a process named name, with a certificate of ca, trusting ca.
func (ca *testCA) flags(t *testing.T, name string) []string { return ca.mixedFlags(t, name, ca) }

// TestMutualTLSCluster runs a job on a cluster whose every connection is mutual TLS: it finishes with every
// record once; a TaskManager whose certificate another authority signed never registers; a client with a
// valid certificate that asks for a partition with a forged credential and a higher consumer attempt is
// refused, and the job's own consumers are not disturbed.
func TestMutualTLSCluster(t *testing.T) {
	ca, other := newTestCA(t, "runnel-test-ca"), newTestCA(t, "intruder-ca")
	c := startClusterWith(t, proccluster.Spec{JobManagerArgs: ca.flags(t, "jobmanager")})
	for _, name := range []string{"tm-1", "tm-2"} {
		c.addTaskManager(t, name, 2, ca.flags(t, name)...)
	}
	intruder := start(t, "tm-intruder", nil, append([]string{"taskmanager", "--jobmanager", c.addr, "--name", "tm-intruder"},
		other.flags(t, "tm-intruder")...)...)

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(t, "rest-client", ca.CA)}, Timeout: 5 * time.Second}
	for _, path := range []string{"/v1/jobs", "/", "/ui/app.js"} {
		if _, err := http.Get("https://" + c.rest + path); err == nil {
			t.Errorf("the REST address answered GET %s of a client without a certificate", path)
		}
	}
	// The dashboard is served on the REST API's listener, behind the same mutual TLS.
	if resp, err := hc.Get("https://" + c.rest + "/"); err != nil {
		t.Fatalf("GET / with a certificate: %v", err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / with a certificate: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	restGet := func(path string, v any) {
		t.Helper()
		resp, err := hc.Get("https://" + c.rest + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}

	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	sub := start(t, "submit", nil, append([]string{"submit", "sequence", "--jobmanager", c.addr, "--report", report,
		"--records", "30000", "--rate", "5000", "--parallelism", "4", "--failover", "approximate",
		"--checkpoint-interval", "50ms", "--checkpoint-storage", filepath.Join(dir, "chk")}, ca.flags(t, "submit")...)...)

	var jobs struct {
		Jobs []struct{ ID, Status string } `json:"jobs"`
	}
	for deadline := time.Now().Add(30 * time.Second); len(jobs.Jobs) == 0 || jobs.Jobs[0].Status != "RUNNING"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not start: %+v", jobs)
		}
		restGet("/v1/jobs", &jobs)
	}
	var tms struct {
		TaskManagers []struct {
			Name        string `json:"name"`
			DataAddress string `json:"data_address"`
		} `json:"taskmanagers"`
	}
	restGet("/v1/taskmanagers", &tms)
	if len(tms.TaskManagers) != 2 {
		t.Fatalf("registered TaskManagers %+v, want tm-1 and tm-2 only", tms.TaskManagers)
	}
	job, err := protocol.ParseJobID(jobs.Jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool := network.NewBufferPool("intruder", network.DefaultBufferSize, 2)
	defer pool.Destroy()
	owner := ident.Attempt{Subtask: ident.Subtask{Vertex: 1}, Number: 7}
	ch, err := network.DialRemoteChannel(ctx, tms.TaskManagers[0].DataAddress, ident.PartitionID{}, 0, owner, pool, 2, nil,
		network.DialOptions{Job: job, Credential: [network.CredentialSize]byte{1, 2, 3}, TLS: ca.ClientConfig(t, "intruder", ca.CA), Timeout: 5 * time.Second})
	if err == nil {
		ch.Release()
		t.Fatal("a forged credential was admitted")
	}
	if !errors.Is(err, network.ErrBadCredential) {
		t.Errorf("forged credential: %v, want %v", err, network.ErrBadCredential)
	}

	if code := sub.exited(t, 60*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, sub.Stderr())
	}
	r := readReport(t, report)
	if r.Status != "FINISHED" || len(r.Failovers) != 0 || r.Checker.Verdict != "OK" {
		t.Fatalf("%s, failovers %+v, checker %+v", r.Status, r.Failovers, r.Checker)
	}
	if strings.Contains(intruder.Stderr(), "registered with the JobManager") {
		t.Errorf("a TaskManager with another authority's certificate registered:\n%s", intruder.Stderr())
	}
	intruder.waitFor(t, regexp.MustCompile(`certificate|tls`), 5*time.Second)
}

// mixedFlags are the TLS flags of a process whose certificate ca issued and which trusts the authority of
// trust.
func (ca *testCA) mixedFlags(t *testing.T, name string, trust *testCA) []string {
	t.Helper()
	cert, key := ca.WriteIssued(t, ca.dir, name)
	return []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", filepath.Join(trust.dir, "ca.pem")}
}

// floodTLS makes n TLS handshakes with cfg to addr, each of which the server refuses, and returns how long
// they took.
func floodTLS(t *testing.T, addr string, cfg *tls.Config, n int) time.Duration {
	t.Helper()
	start := time.Now()
	for range n {
		conn, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatalf("flood %s: %v", addr, err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
			t.Fatalf("flood %s: the server's answer to a foreign certificate: %v", addr, err)
		}
		conn.Close()
	}
	return time.Since(start)
}

// linesWith returns the lines of text that match re.
func linesWith(text string, re *regexp.Regexp) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// TestTLSRefusalsSayWhy: with mutual TLS, every client that the other side refuses, or that refuses the
// other side, says TLS and why, and every server logs it at WARN with the peer's address, a bounded number
// of times however many come. Real processes: a TaskManager whose certificate another authority signed
// keeps failing to register, saying that the JobManager refused its certificate, and exits after
// --jobmanager-wait saying so; `runnel submit` and `runnel cancel` with such a certificate exit 1 saying
// so; a submit that does not trust the JobManager's certificate says that it refused it. The JobManager
// logs the refusals of its control plane and its REST API, and a TaskManager those of its data server and
// its metrics; a flood of 50 bad handshakes on each adds at most one line per listener.
func TestTLSRefusalsSayWhy(t *testing.T) {
	ca, other := newTestCA(t, "runnel-test-ca"), newTestCA(t, "intruder-ca")
	jm := start(t, "jobmanager", nil, append([]string{"jobmanager", "--addr", "127.0.0.1:0", "--rest-addr", "127.0.0.1:0"}, ca.flags(t, "jobmanager")...)...)
	m := jm.waitFor(t, listening, 30*time.Second)
	addr, rest := m[1], m[2]
	tm := start(t, "tm-1", nil, append([]string{"taskmanager", "--jobmanager", addr, "--name", "tm-1", "--metrics-addr", "127.0.0.1:0"},
		ca.flags(t, "tm-1")...)...)
	tm.waitFor(t, registered, 30*time.Second)
	metricsAddr := tm.waitFor(t, tmMetricsLine, 10*time.Second)[1]

	refused := "TLS handshake with the JobManager at " + addr + " failed: it refused our certificate (remote error: tls: unknown certificate authority)"
	intruder := start(t, "tm-intruder", nil, append([]string{"taskmanager", "--jobmanager", addr, "--name", "tm-intruder",
		"--jobmanager-wait", "2s"}, other.mixedFlags(t, "tm-intruder", ca)...)...)
	if code := intruder.exited(t, 30*time.Second); code != exitFailed {
		t.Errorf("the TaskManager of another authority exited %d, want %d", code, exitFailed)
	}
	retries := linesWith(intruder.Stderr(), regexp.MustCompile(`level=WARN msg="no session with the JobManager; registering again"`))
	if len(retries) == 0 {
		t.Fatalf("the TaskManager of another authority never said why it could not register:\n%s", intruder.Stderr())
	}
	for _, l := range retries {
		if !strings.Contains(l, refused) {
			t.Fatalf("a failed registration says %q, want it to say %q", l, refused)
		}
	}
	if s := intruder.Stderr(); !strings.Contains(s, "(--jobmanager-wait): "+refused) {
		t.Errorf("the TaskManager's last words do not say %q:\n%s", refused, s)
	}

	dir := t.TempDir()
	submit := []string{"submit", "sequence", "--jobmanager", addr, "--records", "100", "--checkpoint-interval", "50ms",
		"--checkpoint-storage", filepath.Join(dir, "chk")}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"submit with a certificate of another authority", append(submit, other.mixedFlags(t, "submit", ca)...), refused},
		{"cancel with a certificate of another authority", append([]string{"cancel", "0123456789abcdef0123456789abcdef", "--jobmanager", addr},
			other.mixedFlags(t, "cancel", ca)...), refused},
		{"submit that does not trust the JobManager", append(submit, ca.mixedFlags(t, "submit", other)...),
			"TLS handshake with the JobManager at " + addr + " failed: we refused its certificate (tls: failed to verify certificate: x509: certificate signed by unknown authority"},
	} {
		_, stderr, code := runCLI(t, tc.args...)
		if code != exitFailed || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, want %d, saying %q:\n%s", tc.name, code, exitFailed, tc.want, stderr)
		}
	}

	// Every server's refusals: one WARN line first, with the peer's address and why; a flood adds at most
	// one (a line per peer host per 10 s, and the flood, from one host, takes less).
	bad := other.ClientConfig(t, "flood", ca.CA)
	bad.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &bad.Certificates[0], nil }
	var tms struct {
		TaskManagers []struct {
			DataAddress string `json:"data_address"`
		} `json:"taskmanagers"`
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(t, "rest-client", ca.CA)}, Timeout: 5 * time.Second}
	resp, err := hc.Get("https://" + rest + "/v1/taskmanagers")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&tms)
	resp.Body.Close()
	if err != nil || len(tms.TaskManagers) != 1 {
		t.Fatalf("registered TaskManagers %+v (%v), want tm-1 only", tms.TaskManagers, err)
	}
	const peer = `peer=127\.0\.0\.1:\d+ `
	const theirs = `reason="we refused its certificate \(tls: failed to verify certificate: x509: certificate signed by unknown authority`
	for _, s := range []struct {
		what, addr string
		p          *process
		line       *regexp.Regexp
	}{
		{"control plane", addr, jm, regexp.MustCompile(`level=WARN msg="TLS handshake failed; connection closed" listener="control plane" ` + peer + theirs)},
		{"REST API", rest, jm, regexp.MustCompile(`level=WARN msg="TLS handshake failed; connection closed" listener="REST API" ` + peer + theirs)},
		{"metrics", metricsAddr, tm, regexp.MustCompile(`level=WARN msg="TLS handshake failed; connection closed" listener=metrics ` + peer + theirs)},
		{"data server", tms.TaskManagers[0].DataAddress, tm, regexp.MustCompile(
			`level=WARN msg="data server closed a connection whose TLS handshake failed" .*remote=127\.0\.0\.1:\d+ reason=".*x509: certificate signed by unknown authority`)},
	} {
		if s.what == "REST API" || s.what == "metrics" || s.what == "data server" {
			floodTLS(t, s.addr, bad, 1) // no refusal came there yet
		}
		s.p.waitFor(t, s.line, 10*time.Second)
		before := len(linesWith(s.p.Stderr(), s.line))
		took := floodTLS(t, s.addr, bad, 50)
		time.Sleep(200 * time.Millisecond) // the server logs after its side of the handshake
		after := len(linesWith(s.p.Stderr(), s.line))
		if took < 10*time.Second && after > before+1 {
			t.Errorf("%s: 50 bad handshakes in %v added %d log lines, want at most 1:\n%s", s.what, took, after-before, s.p.Stderr())
		}
	}
}

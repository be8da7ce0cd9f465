package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// testCA is a certificate authority of a test, writing PEM files into a directory.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key}
	ca.write(t, "ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue makes a certificate for 127.0.0.1, good as server and client, and returns the cert and key files.
func (ca *testCA) issue(t *testing.T, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.write(t, name+".pem", "CERTIFICATE", der), ca.write(t, name+".key", "PRIVATE KEY", kder)
}

func (ca *testCA) flags(t *testing.T, name string) []string {
	cert, key := ca.issue(t, name)
	return []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", filepath.Join(ca.dir, "ca.pem")}
}

func (ca *testCA) clientConfig(t *testing.T, name string) *tls.Config {
	cert, key := ca.issue(t, name)
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS13}
}

// TestMutualTLSCluster runs a job on a cluster whose every connection is mutual TLS: it finishes with every
// record once; a TaskManager whose certificate another authority signed never registers; a client with a
// valid certificate that asks for a partition with a forged credential and a higher consumer attempt is
// refused, and the job's own consumers are not disturbed.
func TestMutualTLSCluster(t *testing.T) {
	ca, other := newTestCA(t, "runnel-test-ca"), newTestCA(t, "intruder-ca")
	jm := start(t, "jobmanager", nil, append([]string{"jobmanager", "--addr", "127.0.0.1:0", "--rest-addr", "127.0.0.1:0"}, ca.flags(t, "jobmanager")...)...)
	m := jm.waitFor(t, listening, 30*time.Second)
	c := &testCluster{jm: jm, addr: m[1], rest: m[2]}
	for _, name := range []string{"tm-1", "tm-2"} {
		c.addTaskManager(t, name, 2, ca.flags(t, name)...)
	}
	intruder := start(t, "tm-intruder", nil, append([]string{"taskmanager", "--jobmanager", c.addr, "--name", "tm-intruder"},
		other.flags(t, "tm-intruder")...)...)

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.clientConfig(t, "rest-client")}, Timeout: 5 * time.Second}
	if _, err := http.Get("https://" + c.rest + "/v1/jobs"); err == nil {
		t.Error("the REST API answered a client without a certificate")
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
		network.DialOptions{Job: job, Credential: [network.CredentialSize]byte{1, 2, 3}, TLS: ca.clientConfig(t, "intruder"), Timeout: 5 * time.Second})
	if err == nil {
		ch.Release()
		t.Fatal("a forged credential was admitted")
	}
	if !errors.Is(err, network.ErrBadCredential) {
		t.Errorf("forged credential: %v, want %v", err, network.ErrBadCredential)
	}

	if code := sub.exited(t, 60*time.Second); code != 0 {
		t.Fatalf("submit exited %d:\n%s", code, sub.stderr.String())
	}
	r := readReport(t, report)
	if r.Status != "FINISHED" || len(r.Failovers) != 0 || r.Checker.Verdict != "OK" {
		t.Fatalf("%s, failovers %+v, checker %+v", r.Status, r.Failovers, r.Checker)
	}
	if strings.Contains(intruder.stderr.String(), "registered with the JobManager") {
		t.Errorf("a TaskManager with another authority's certificate registered:\n%s", intruder.stderr.String())
	}
	intruder.waitFor(t, regexp.MustCompile(`certificate|tls`), 5*time.Second)
}

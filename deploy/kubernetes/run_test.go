package kubernetes

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/runnel-dev/runnel/internal/ha/hatest"
)

// Pod addresses on loopback for TestManifestsRunACluster: each process binds its own, so the
// manifests' fixed ports do not collide.
var podIPs = map[string]string{"jobmanager-a": "127.0.0.2", "jobmanager-b": "127.0.0.3", "taskmanager": "127.0.0.4"}

// TestManifestsRunACluster runs what the manifests describe as real processes of the runnel binary,
// without TLS and with tls/ applied: two JobManagers and a TaskManager with the containers' arguments as
// the kubelet expands them, a real etcd in place of etcd:2379, and a pod address on loopback for each,
// which a process binds where its manifest binds every interface. The probes, carried out as the
// kubelet does, find both JobManagers live, and without TLS exactly one ready; the standby names the
// leader at its advertised addresses, and the TaskManager registers with the leader at its advertised
// data address. With TLS the Secret's files are a certificate that names only "runnel", no address,
// as README.md makes it: --tls-server-name is what lets the processes verify each other.
func TestManifestsRunACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the runnel binary and starts four processes")
	}
	bin := filepath.Join(t.TempDir(), "runnel")
	build := exec.Command("go", "build", "-o", bin, "github.com/runnel-dev/runnel/cmd/runnel")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Run("base", func(t *testing.T) { runCluster(t, bin, newSet(t, ".")) })
	t.Run("tls", func(t *testing.T) { runCluster(t, bin, newSet(t, ".", "tls")) })
}

// runCluster runs the set s of manifests as processes of bin, on a new etcd, and checks them.
func runCluster(t *testing.T, bin string, s *set) {
	etcd := hatest.Start(t)
	jmc := &s.deployments["jobmanager"].Spec.Template.Spec.Containers[0]
	tmc := &s.deployments["taskmanager"].Spec.Template.Spec.Containers[0]
	c := &cluster{bin: bin, set: s, etcd: etcd.Address, scheme: "http", client: &http.Client{Timeout: 10 * time.Second}}
	if slices.ContainsFunc(jmc.Args, func(a string) bool { return strings.HasPrefix(a, "--tls-cert=") }) {
		c.secrets = writeTLSSecret(t)
		c.scheme = "https"
		c.client.Transport = &http.Transport{TLSClientConfig: c.secrets.client}
	}

	for _, name := range []string{"jobmanager-a", "jobmanager-b"} {
		c.start(t, name, jmc, s.deployments["jobmanager"].Spec.Template.Spec.Volumes)
	}
	var leader, standby string
	var lastErr error
	deadline := time.Now().Add(30 * time.Second)
	for leader == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no JobManager leads after 30 s (jobmanager-a's GET /v1/leader: %v)", lastErr)
		}
		time.Sleep(50 * time.Millisecond)
		var who leaderDoc
		if lastErr = c.get("jobmanager-a", "/v1/leader", &who); lastErr != nil || who.Addr == "" {
			continue
		}
		for name, ip := range podIPs {
			if who.Addr == ip+":6123" {
				leader, standby = name, map[string]string{"jobmanager-a": "jobmanager-b", "jobmanager-b": "jobmanager-a"}[name]
			}
		}
		if leader == "" {
			t.Fatalf("jobmanager-a says %+v leads: no JobManager's pod address", who)
		}
	}
	for _, name := range []string{leader, standby} {
		eventually(t, name+"'s liveness probe", func() error { return probe(jmc.LivenessProbe, jmc, podIPs[name]) })
	}
	eventually(t, "the leader's readiness probe", func() error { return probe(jmc.ReadinessProbe, jmc, podIPs[leader]) })
	err := probe(jmc.ReadinessProbe, jmc, podIPs[standby])
	switch {
	case jmc.ReadinessProbe.HTTPGet != nil && (err == nil || !strings.Contains(err.Error(), "503")):
		t.Errorf("the standby's readiness probe: %v, want 503", err)
	case jmc.ReadinessProbe.HTTPGet == nil && err != nil:
		t.Errorf("the standby's readiness probe (TCP): %v", err)
	}
	var who leaderDoc
	if err := c.get(standby, "/v1/leader", &who); err != nil {
		t.Fatal(err)
	}
	if who.Leading || who.Addr != podIPs[leader]+":6123" || who.REST != podIPs[leader]+":8081" {
		t.Errorf("the standby says %+v, want the leader at %s:6123 (REST :8081)", who, podIPs[leader])
	}

	c.start(t, "taskmanager", tmc, s.deployments["taskmanager"].Spec.Template.Spec.Volumes)
	var tms struct {
		TaskManagers []struct {
			Name        string
			DataAddress string `json:"data_address"`
			Slots       int
		}
	}
	for deadline := time.Now().Add(30 * time.Second); len(tms.TaskManagers) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the TaskManager did not register with the leader within 30 s")
		}
		if err := c.get(leader, "/v1/taskmanagers", &tms); err != nil {
			t.Fatal(err)
		}
	}
	if tm := tms.TaskManagers[0]; tm.Name != podName || tm.DataAddress != podIPs["taskmanager"]+":6121" || tm.Slots != 2 {
		t.Errorf("the leader lists %+v, want %s with data address %s:6121 and 2 slots", tm, podName, podIPs["taskmanager"])
	}
	for what, p := range map[string]*corev1.Probe{"liveness": tmc.LivenessProbe, "readiness": tmc.ReadinessProbe} {
		eventually(t, "the TaskManager's "+what+" probe", func() error { return probe(p, tmc, podIPs["taskmanager"]) })
	}
}

// eventually waits (30 s at most) until check passes, as the kubelet probes until a probe succeeds.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v after 30 s", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leaderDoc is the JobManager's GET /v1/leader.
type leaderDoc struct {
	Leading    bool
	Addr, REST string
}

// cluster is what the processes of one run share.
type cluster struct {
	bin, etcd string
	set       *set
	secrets   *tlsSecret // nil without TLS
	scheme    string
	client    *http.Client
}

// get GETs path from the REST API of the JobManager pod name and decodes the JSON body into v.
func (c *cluster) get(name, path string, v any) error {
	resp, err := c.client.Get(c.scheme + "://" + podIPs[name] + ":8081" + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// tlsSecret is the Secret runnel-tls of README.md, written to dir, and a client that REST calls use.
type tlsSecret struct {
	dir    string
	client *tls.Config
}

// writeTLSSecret makes a CA and a certificate for DNS name "runnel" alone (no address), for servers and
// clients, and writes them as the Secret's keys tls.crt, tls.key and ca.crt.
func writeTLSSecret(t *testing.T) *tlsSecret {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, key := newKey(), newKey()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "runnel-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "runnel"}, DNSNames: []string{"runnel"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for file, block := range map[string]*pem.Block{"ca.crt": {Type: "CERTIFICATE", Bytes: caDER},
		"tls.crt": {Type: "CERTIFICATE", Bytes: leafDER}, "tls.key": {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cert := tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
	return &tlsSecret{dir: dir, client: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool,
		ServerName: "runnel", MinVersion: tls.VersionTLS13}}
}

// proc is a process started from a manifest; its stderr is logged if the test fails.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
}

// output is what the process wrote to stderr so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

// start starts the container c of pod name as a process: its arguments expanded with the pod's address,
// --ha pointed at etcd, the pod's address bound in place of every interface, and the files of a
// Secret's volume read from the test's copy of the Secret.
func (cl *cluster) start(t *testing.T, name string, c *corev1.Container, volumes []corev1.Volume) *proc {
	t.Helper()
	ip := podIPs[name]
	args, err := expandWith(c, cl.set.configMaps, ip)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range args {
		if strings.HasPrefix(a, "--ha=") {
			args[i] = "--ha=" + cl.etcd
		}
		args[i] = strings.Replace(args[i], "=0.0.0.0:", "="+ip+":", 1)
		for _, m := range c.VolumeMounts {
			for _, v := range volumes {
				if v.Name == m.Name && v.Secret != nil && cl.secrets != nil {
					args[i] = strings.Replace(args[i], "="+filepath.Clean(m.MountPath)+"/", "="+cl.secrets.dir+"/", 1)
				}
			}
		}
	}
	p := &proc{cmd: exec.Command(cl.bin, args...)}
	p.cmd.Stderr = p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s %q:\n%s", name, args, p.output())
		}
	})
	return p
}

// probe carries out p against the container c of the pod at ip as the kubelet does: an HTTP GET
// succeeds with a status from 200 to 399, a TCP probe when the connection opens.
func probe(p *corev1.Probe, c *corev1.Container, ip string) error {
	var port int32
	for _, cp := range c.Ports {
		switch {
		case p.HTTPGet != nil && (cp.Name == p.HTTPGet.Port.StrVal || cp.ContainerPort == p.HTTPGet.Port.IntVal),
			p.TCPSocket != nil && (cp.Name == p.TCPSocket.Port.StrVal || cp.ContainerPort == p.TCPSocket.Port.IntVal):
			port = cp.ContainerPort
		}
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	if p.TCPSocket != nil {
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			_ = conn.Close()
		}
		return err
	}
	resp, err := (&http.Client{Timeout: timeout}).Get("http://" + addr + p.HTTPGet.Path)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", p.HTTPGet.Path, resp.Status)
	}
	return nil
}

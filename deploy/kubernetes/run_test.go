package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
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

// TestManifestsRunACluster runs what the base manifests describe as real processes of the runnel
// binary: two JobManagers and a TaskManager with the containers' arguments as the kubelet expands
// them, a real etcd in place of etcd:2379, and a pod address on loopback for each, which a process
// binds where its manifest binds every interface. The probes, carried out as the kubelet does, find
// both JobManagers live and exactly one ready; the standby names the leader at its advertised
// addresses, and the TaskManager registers with the leader at its advertised data address.
func TestManifestsRunACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the runnel binary and starts four processes")
	}
	bin := filepath.Join(t.TempDir(), "runnel")
	build := exec.Command("go", "build", "-o", bin, "github.com/runnel-dev/runnel/cmd/runnel")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	etcd := hatest.Start(t)
	s := newSet(t, ".")
	jmc := &s.deployments["jobmanager"].Spec.Template.Spec.Containers[0]
	tmc := &s.deployments["taskmanager"].Spec.Template.Spec.Containers[0]

	jms := map[string]*proc{}
	for _, name := range []string{"jobmanager-a", "jobmanager-b"} {
		jms[name] = startPod(t, bin, name, jmc, s, etcd.Address)
	}
	// Both live; one leads (ready), the other stands by (live, not ready).
	var leader, standby string
	deadline := time.Now().Add(30 * time.Second)
	for leader == "" || standby == "" {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: leader %q, standby %q", leader, standby)
		}
		leader, standby = "", ""
		for name := range jms {
			if err := probe(jmc.LivenessProbe, jmc, podIPs[name]); err != nil {
				continue
			}
			if probe(jmc.ReadinessProbe, jmc, podIPs[name]) == nil {
				leader = name
			} else {
				standby = name
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := probe(jmc.ReadinessProbe, jmc, podIPs[standby]); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("the standby's readiness: %v, want 503", err)
	}
	var who struct {
		Leading    bool
		Addr, REST string
	}
	getJSON(t, podIPs[standby]+":8081", "/v1/leader", &who)
	if who.Leading || who.Addr != podIPs[leader]+":6123" || who.REST != podIPs[leader]+":8081" {
		t.Errorf("the standby says %+v, want the leader at %s:6123 (REST :8081)", who, podIPs[leader])
	}

	startPod(t, bin, "taskmanager", tmc, s, etcd.Address)
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
		getJSON(t, podIPs[leader]+":8081", "/v1/taskmanagers", &tms)
	}
	if tm := tms.TaskManagers[0]; tm.Name != podName || tm.DataAddress != podIPs["taskmanager"]+":6121" || tm.Slots != 2 {
		t.Errorf("the leader lists %+v, want %s with data address %s:6121 and 2 slots", tm, podName, podIPs["taskmanager"])
	}
	for what, p := range map[string]*corev1.Probe{"liveness": tmc.LivenessProbe, "readiness": tmc.ReadinessProbe} {
		if err := probe(p, tmc, podIPs["taskmanager"]); err != nil {
			t.Errorf("taskmanager's %s probe: %v", what, err)
		}
	}
}

// proc is a process started from a manifest; its stderr is logged if the test fails.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

// startPod starts the container c of pod name as a process: its arguments expanded with the pod's
// address, --ha pointed at etcd, and the pod's address bound in place of every interface.
func startPod(t *testing.T, bin, name string, c *corev1.Container, s *set, etcd string) *proc {
	t.Helper()
	ip := podIPs[name]
	args, err := expandWith(c, s.configMaps, ip)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range args {
		if strings.HasPrefix(a, "--ha=") {
			args[i] = "--ha=" + etcd
		}
		args[i] = strings.Replace(args[i], "=0.0.0.0:", "="+ip+":", 1)
	}
	p := &proc{cmd: exec.Command(bin, args...)}
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
			p.mu.Lock()
			t.Logf("%s %q:\n%s", name, args, p.stderr.String())
			p.mu.Unlock()
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

func getJSON(t *testing.T, hostPort, path string, v any) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + hostPort + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

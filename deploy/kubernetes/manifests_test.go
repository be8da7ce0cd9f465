package kubernetes

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/runnel-dev/runnel/internal/cli"
)

// The JobManager's health endpoints (docs/cluster.md §6.2): a standby is live but not ready.
const (
	livenessPath  = "/healthz"
	readinessPath = "/healthz/ready"
)

// set is the objects of one way to deploy: the base manifests, or the base with an overlay applied.
type set struct {
	configMaps  map[string]*corev1.ConfigMap
	services    []*corev1.Service
	deployments map[string]*appsv1.Deployment // by the component label of its pods
}

// readDir decodes every manifest of dir (not below it) strictly, by file name.
func readDir(t *testing.T, dir string) map[string][]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", dir)
	}
	out := map[string][]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decode(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		out[f] = objs
	}
	return out
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decode decodes each YAML document of data into the k8s.io/api type of its kind, refusing any field
// that type does not have and any field given twice.
func decode(data []byte) ([]any, error) {
	var objs []any
	for i, doc := range docSeparator.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		var obj any
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "apps/v1 Deployment":
			obj = &appsv1.Deployment{}
		default:
			return nil, fmt.Errorf("document %d: kind %q of apiVersion %q: the test decodes no such object (add it to decode)", i+1, meta.Kind, meta.APIVersion)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i+1, meta.Kind, err)
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no object")
	}
	return objs, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// newSet gathers the objects of the given directories' manifests; an object of a later directory
// replaces the one of the same kind and name (as kubectl apply of the overlay after the base does).
func newSet(t *testing.T, dirs ...string) *set {
	t.Helper()
	type key struct{ kind, name string }
	byKey := map[key]any{}
	var order []key
	for _, dir := range dirs {
		files := readDir(t, dir)
		for _, f := range slices.Sorted(maps.Keys(files)) {
			for _, obj := range files[f] {
				var k key
				switch o := obj.(type) {
				case *corev1.ConfigMap:
					k = key{"ConfigMap", o.Name}
				case *corev1.Service:
					k = key{"Service", o.Name}
				case *appsv1.Deployment:
					k = key{"Deployment", o.Name}
				}
				if k.name == "" {
					t.Errorf("%s: a %s without a name", f, k.kind)
				}
				if _, ok := byKey[k]; !ok {
					order = append(order, k)
				}
				byKey[k] = obj
			}
		}
	}
	s := &set{configMaps: map[string]*corev1.ConfigMap{}, deployments: map[string]*appsv1.Deployment{}}
	for _, k := range order {
		switch o := byKey[k].(type) {
		case *corev1.ConfigMap:
			s.configMaps[o.Name] = o
		case *corev1.Service:
			s.services = append(s.services, o)
		case *appsv1.Deployment:
			component := o.Spec.Template.Labels["app.kubernetes.io/component"]
			if _, dup := s.deployments[component]; dup || component == "" {
				t.Errorf("Deployment %s: component label %q is missing or taken by another Deployment", o.Name, component)
			}
			s.deployments[component] = o
		}
	}
	return s
}

// flagsOf returns the flag set of a role's command line, what cli.Main's jobmanager and taskmanager
// commands parse (internal/cli/daemons.go), and the role's check of the parsed values; nil for a word
// that is no role.
func flagsOf(role string) (*pflag.FlagSet, func() error) {
	fs := pflag.NewFlagSet(role, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var check func() error
	switch role {
	case "jobmanager":
		config := cli.AddJobManagerFlags(fs)
		check = func() error { _, err := config(); return err }
	case "taskmanager":
		config := cli.AddTaskManagerFlags(fs)
		check = func() error { _, err := config(); return err }
	default:
		return nil, nil
	}
	fs.Bool("verbose", false, "DEBUG logs") // added by mainJobManager and mainTaskManager
	return fs, check
}

// Stand-ins for the values the downward API gives a pod.
const (
	podIP   = "10.1.2.3"
	podName = "runnel-pod-x7k2q"
)

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand resolves the $(VAR) references of a container's arguments against its environment, as the
// kubelet does; one that names no variable of the container fails (the kubelet would pass it on as
// the literal "$(VAR)").
func expand(c *corev1.Container, cms map[string]*corev1.ConfigMap) ([]string, error) {
	return expandWith(c, cms, podIP)
}

// expandWith is expand for the pod at ip.
func expandWith(c *corev1.Container, cms map[string]*corev1.ConfigMap, ip string) ([]string, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			switch p := e.ValueFrom.FieldRef.FieldPath; p {
			case "status.podIP":
				env[e.Name] = ip
			case "metadata.name":
				env[e.Name] = podName
			default:
				return nil, fmt.Errorf("env %s: fieldPath %q has no stand-in in the test", e.Name, p)
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := cms[ref.Name]
			if !ok {
				return nil, fmt.Errorf("env %s: no ConfigMap %q among the manifests", e.Name, ref.Name)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				return nil, fmt.Errorf("env %s: ConfigMap %s has no key %q", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		default:
			return nil, fmt.Errorf("env %s: a source the test does not resolve", e.Name)
		}
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		var missing []string
		args[i] = varRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v, ok := env[name]
			if !ok {
				missing = append(missing, name)
			}
			return v
		})
		if missing != nil {
			return nil, fmt.Errorf("argument %q names %v, which the container's env does not define", a, missing)
		}
	}
	return args, nil
}

// role is one container that runs a Runnel role, its arguments parsed.
type role struct {
	name      string
	container *corev1.Container
	pod       *corev1.PodSpec
	flags     *pflag.FlagSet
}

// parseRole parses the arguments of the one container of d with its role's flag set.
func parseRole(t *testing.T, s *set, d *appsv1.Deployment) *role {
	t.Helper()
	pod := &d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment %s: %d containers, want one", d.Name, len(pod.Containers))
	}
	c := &pod.Containers[0]
	if len(c.Command) != 0 {
		t.Errorf("Deployment %s: command %q replaces the image's entry point (the job's binary): give the role in args", d.Name, c.Command)
	}
	if len(c.Args) == 0 {
		t.Fatalf("Deployment %s: no args", d.Name)
	}
	fs, check := flagsOf(c.Args[0])
	if fs == nil {
		t.Fatalf("Deployment %s: first argument %q is not a role (jobmanager, taskmanager)", d.Name, c.Args[0])
	}
	args, err := expand(c, s.configMaps)
	if err != nil {
		t.Fatalf("Deployment %s: %v", d.Name, err)
	}
	args = args[1:]
	if err := fs.Parse(args); err != nil {
		t.Fatalf("Deployment %s: %s %q: %v", d.Name, c.Args[0], args, err)
	}
	if fs.NArg() != 0 {
		t.Errorf("Deployment %s: %s takes no arguments, got %q", d.Name, c.Args[0], fs.Args())
	}
	if err := check(); err != nil {
		t.Errorf("Deployment %s: %v", d.Name, err)
	}
	return &role{name: c.Args[0], container: c, pod: pod, flags: fs}
}

// value is the value of a flag the manifest sets, or "".
func (r *role) value(name string) string {
	f := r.flags.Lookup(name)
	if f == nil || !f.Changed {
		return ""
	}
	return f.Value.String()
}

// portOf is the port of the address flag name, which the manifest must set.
func (r *role) portOf(t *testing.T, name string) int32 {
	t.Helper()
	addr := r.value(name)
	if addr == "" {
		t.Fatalf("%s: --%s is not set (its default listens on loopback only)", r.name, name)
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: --%s=%s: %v", r.name, name, addr, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil || n == 0 {
		t.Fatalf("%s: --%s=%s: a fixed port is needed (the pod declares it)", r.name, name, addr)
	}
	return int32(n)
}

// port finds the container port p names (by name or number).
func (r *role) port(p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range r.container.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

// checkPorts checks that the container declares exactly the ports of the address flags, by name.
func (r *role) checkPorts(t *testing.T, want map[string]string) {
	t.Helper()
	if len(r.container.Ports) != len(want) {
		t.Errorf("%s: %d container ports, want %d (one for each of %v)", r.name, len(r.container.Ports), len(want), want)
	}
	for name, flag := range want {
		cp, ok := r.port(intstr.FromString(name))
		if !ok {
			t.Errorf("%s: no container port named %q (for --%s)", r.name, name, flag)
			continue
		}
		if p := r.portOf(t, flag); cp.ContainerPort != p {
			t.Errorf("%s: container port %s is %d, --%s listens on %d", r.name, name, cp.ContainerPort, flag, p)
		}
	}
}

// probePort is the container port a probe reaches, and whether it asks for an HTTP path.
func (r *role) probePort(t *testing.T, what string, p *corev1.Probe) (port corev1.ContainerPort, path string) {
	t.Helper()
	if p == nil {
		t.Fatalf("%s: no %s probe", r.name, what)
	}
	var ref intstr.IntOrString
	switch {
	case p.HTTPGet != nil:
		ref, path = p.HTTPGet.Port, p.HTTPGet.Path
	case p.TCPSocket != nil:
		ref = p.TCPSocket.Port
	default:
		t.Fatalf("%s: %s probe is neither httpGet nor tcpSocket", r.name, what)
	}
	port, ok := r.port(ref)
	if !ok {
		t.Fatalf("%s: %s probe's port %s is no container port", r.name, what, ref.String())
	}
	return port, path
}

// tls reports whether the role runs with mutual TLS, and checks that its files come from a Secret.
func (r *role) tls(t *testing.T) bool {
	t.Helper()
	files := []string{r.value("tls-cert"), r.value("tls-key"), r.value("tls-ca")}
	if slices.Equal(files, []string{"", "", ""}) {
		return false
	}
	if slices.Contains(files, "") {
		t.Errorf("%s: --tls-cert, --tls-key and --tls-ca go together, got %q", r.name, files)
	}
	if r.value("tls-server-name") == "" {
		t.Errorf("%s: TLS without --tls-server-name: peers are dialled at pod addresses, which no certificate can name", r.name)
	}
	for _, f := range files {
		if !r.fromSecret(f) {
			t.Errorf("%s: TLS file %s is not in a volume mounted from a Secret", r.name, f)
		}
	}
	return true
}

func (r *role) fromSecret(file string) bool {
	for _, m := range r.container.VolumeMounts {
		if filepath.Dir(file) != filepath.Clean(m.MountPath) {
			continue
		}
		for _, v := range r.pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return true
			}
		}
	}
	return false
}

// checkVolumes checks that every mount names a volume of the pod.
func (r *role) checkVolumes(t *testing.T) {
	t.Helper()
	for _, m := range r.container.VolumeMounts {
		if !slices.ContainsFunc(r.pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
			t.Errorf("%s: mount %s names no volume of the pod", r.name, m.Name)
		}
	}
}

// checkSet checks one way to deploy against the CLI; it returns the parsed roles.
func checkSet(t *testing.T, s *set) (jm, tm *role) {
	t.Helper()
	if len(s.configMaps) == 0 || len(s.services) == 0 || s.deployments["jobmanager"] == nil || s.deployments["taskmanager"] == nil {
		t.Fatalf("want a ConfigMap, a Service and the jobmanager and taskmanager Deployments, got %d, %d and %v",
			len(s.configMaps), len(s.services), slices.Sorted(maps.Keys(s.deployments)))
	}
	for component, d := range s.deployments {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Deployment %s (%s): its selector %v does not select its own pods (%v)", d.Name, component, d.Spec.Selector, err)
		}
	}
	jm = parseRole(t, s, s.deployments["jobmanager"])
	tm = parseRole(t, s, s.deployments["taskmanager"])
	if jm.name != "jobmanager" || tm.name != "taskmanager" {
		t.Fatalf("the jobmanager Deployment runs %s and the taskmanager one %s", jm.name, tm.name)
	}

	// HA: two JobManagers elect a leader in etcd, and the TaskManagers find it there.
	jmd := s.deployments["jobmanager"]
	if jmd.Spec.Replicas == nil || *jmd.Spec.Replicas != 2 {
		t.Errorf("JobManager Deployment: replicas %s, want 2 (a leader and a standby)", replicas(jmd))
	}
	checkRollout(t, jmd)
	for _, r := range []*role{jm, tm} {
		if ha := r.value("ha"); !strings.HasPrefix(ha, "etcd://") {
			t.Errorf("%s: --ha=%q, want etcd://HOST:PORT[,HOST:PORT...]", r.name, ha)
		}
		if r.value("ha-cluster") == "" {
			t.Errorf("%s: --ha given without --ha-cluster", r.name)
		}
		if r.name == "taskmanager" && (r.value("ha") != jm.value("ha") || r.value("ha-cluster") != jm.value("ha-cluster")) {
			t.Errorf("taskmanager: --ha=%s --ha-cluster=%s, the JobManager's are %s and %s", r.value("ha"), r.value("ha-cluster"), jm.value("ha"), jm.value("ha-cluster"))
		}
		if r.value("jobmanager") != "" {
			t.Errorf("%s: --jobmanager with --ha: the leader is found through etcd", r.name)
		}
	}

	// Ports and probes.
	jmPorts := map[string]string{"rpc": "addr", "rest": "rest-addr"}
	if jm.value("health-addr") != "" {
		jmPorts["health"] = "health-addr"
	}
	jm.checkPorts(t, jmPorts)
	tmPorts := map[string]string{"data": "data-addr"}
	if tm.value("metrics-addr") != "" {
		tmPorts["metrics"] = "metrics-addr"
	}
	tm.checkPorts(t, tmPorts)
	// Others dial what a process advertises: its pod's address, at the port it listens on.
	for _, a := range []struct {
		r         *role
		addr, adv string
		needed    bool
	}{
		{jm, "addr", "advertise-addr", true},           // the address the leader campaigns with
		{jm, "rest-addr", "rest-advertise-addr", true}, // the REST address /v1/leader gives
		{tm, "data-addr", "data-advertise", false},
	} {
		adv := a.r.value(a.adv)
		if adv == "" {
			if a.needed {
				t.Errorf("%s: --%s is not set: with --ha the JobManager campaigns with it", a.r.name, a.adv)
			}
			continue
		}
		host, p, err := net.SplitHostPort(adv)
		if err != nil || p != strconv.Itoa(int(a.r.portOf(t, a.addr))) || host != podIP {
			t.Errorf("%s: --%s=%s, want the pod's IP (downward API) and --%s's port", a.r.name, a.adv, adv, a.addr)
		}
	}
	jmTLS, tmTLS := jm.tls(t), tm.tls(t)
	// Probes are HTTP on the REST API, or, with mutual TLS (which refuses the kubelet: it has no client
	// certificate), on the plain health listener (--health-addr), which serves nothing else.
	probeFlag := "rest-addr"
	if jmTLS {
		probeFlag = "health-addr"
	}
	probePort := jm.portOf(t, probeFlag)
	for what, p := range map[string]*corev1.Probe{"liveness": jm.container.LivenessProbe, "readiness": jm.container.ReadinessProbe} {
		port, path := jm.probePort(t, what, p)
		if port.ContainerPort != probePort {
			t.Errorf("jobmanager: %s probe on port %d, --%s is on %d", what, port.ContainerPort, probeFlag, probePort)
		}
		want := map[string]string{"liveness": livenessPath, "readiness": readinessPath}[what]
		if p.HTTPGet == nil || path != want {
			t.Errorf("jobmanager: %s probe asks for %q over HTTP, want %q", what, path, want)
		}
	}
	for what, p := range map[string]*corev1.Probe{"liveness": tm.container.LivenessProbe, "readiness": tm.container.ReadinessProbe} {
		port, path := tm.probePort(t, what, p)
		switch {
		case tmTLS && p.HTTPGet != nil:
			t.Errorf("taskmanager: %s probe is httpGet with mutual TLS: the metrics server refuses the kubelet, which has no client certificate", what)
		case tmTLS && port.Name == "data":
			t.Errorf("taskmanager: %s probe connects to the data server with mutual TLS: it logs each such probe as a failed TLS handshake at WARN", what)
		case p.HTTPGet != nil && (port.Name != "metrics" || path != "/metrics"):
			t.Errorf("taskmanager: %s probe asks for %s on port %s: a TaskManager serves HTTP only at /metrics on --metrics-addr", what, path, port.Name)
		}
	}
	jm.checkVolumes(t)
	tm.checkVolumes(t)

	// Each Service reaches the JobManagers' pods, at ports they declare.
	for _, svc := range s.services {
		if !selects(svc.Spec.Selector, jmd.Spec.Template.Labels) {
			t.Errorf("Service %s: selector %v does not select the JobManagers' pods (%v)", svc.Name, svc.Spec.Selector, jmd.Spec.Template.Labels)
		}
		if selects(svc.Spec.Selector, s.deployments["taskmanager"].Spec.Template.Labels) {
			t.Errorf("Service %s: selector %v selects the TaskManagers too", svc.Name, svc.Spec.Selector)
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.Type != intstr.String {
				t.Errorf("Service %s: port %s targets %s by number: name a container port, so the two cannot drift apart", svc.Name, p.Name, p.TargetPort.String())
				continue
			}
			if _, ok := jm.port(p.TargetPort); !ok {
				t.Errorf("Service %s: port %s targets %q, which no JobManager container port is named", svc.Name, p.Name, p.TargetPort.StrVal)
			}
		}
	}
	return jm, tm
}

// selects reports whether a Service's selector selects pods labelled podLabels (an empty one selects
// no pod: such a Service has no endpoints but those given by hand).
func selects(selector, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

// TestManifests checks the manifests against the k8s.io/api types and the CLI, without TLS and with the
// tls/ overlay applied on top.
func TestManifests(t *testing.T) {
	t.Run("base", func(t *testing.T) {
		jm, tm := checkSet(t, newSet(t, "."))
		if jm.value("tls-cert") != "" || tm.value("tls-cert") != "" {
			t.Error("the base manifests run with TLS: it belongs in tls/")
		}
	})
	t.Run("tls", func(t *testing.T) {
		s := newSet(t, ".", "tls")
		jm, tm := checkSet(t, s)
		if jm.value("tls-cert") == "" || tm.value("tls-cert") == "" {
			t.Fatal("tls/ leaves a role without mutual TLS")
		}
		// The overlay is the base plus TLS: it must not drift from it.
		b := newSet(t, ".")
		for component, d := range s.deployments {
			want := b.deployments[component].Spec.Template.Spec.Containers[0].Args
			got := d.Spec.Template.Spec.Containers[0].Args
			var extra []string
			for _, a := range got {
				if !slices.Contains(want, a) {
					extra = append(extra, a)
				}
			}
			for _, a := range extra {
				if !strings.HasPrefix(a, "--tls-") && !strings.HasPrefix(a, "--health-addr=") {
					t.Errorf("tls/ %s: argument %q is not in the base manifest", component, a)
				}
			}
			for _, a := range want {
				if !slices.Contains(got, a) {
					t.Errorf("tls/ %s: lacks the base manifest's argument %q", component, a)
				}
			}
		}
	})
}

// TestDecodeIsStrict shows that the decoding refuses what the API server would drop or refuse: an
// unknown field, a field of the wrong type, a field given twice, a kind the test does not know.
func TestDecodeIsStrict(t *testing.T) {
	data, err := os.ReadFile("jobmanager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decode(data); err != nil {
		t.Fatalf("jobmanager.yaml: %v", err)
	}
	for name, edit := range map[string]struct{ old, new string }{
		"unknown field":   {"  replicas: 2\n", "  replicas: 2\n  replica: 2\n"},
		"misplaced field": {"          imagePullPolicy:", "          port: 80\n          imagePullPolicy:"},
		"wrong type":      {"  replicas: 2\n", "  replicas: two\n"},
		"duplicate field": {"  replicas: 2\n", "  replicas: 2\n  replicas: 3\n"},
		"unknown kind":    {"kind: Deployment", "kind: Deploymnet"},
	} {
		t.Run(name, func(t *testing.T) {
			broken := bytes.Replace(data, []byte(edit.old), []byte(edit.new), 1)
			if bytes.Equal(broken, data) {
				t.Fatalf("jobmanager.yaml has no %q to edit", edit.old)
			}
			if _, err := decode(broken); err == nil {
				t.Fatalf("decoded with %q in place of %q", edit.new, edit.old)
			} else {
				t.Log(err)
			}
		})
	}
}

func replicas(d *appsv1.Deployment) string {
	if d.Spec.Replicas == nil {
		return "unset (1)"
	}
	return strconv.Itoa(int(*d.Spec.Replicas))
}

// checkRollout checks that a rollout of the JobManagers can finish although a standby is never ready:
// a rolling update that keeps any old pod until new ones are ready would keep the old leader for ever
// (old pods that are not ready, the standby, go first), and the progress deadline would report a
// rollout that cannot make every replica available as failed.
func checkRollout(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	n := 1
	if d.Spec.Replicas != nil {
		n = int(*d.Spec.Replicas)
	}
	if st := d.Spec.Strategy; st.Type != appsv1.RecreateDeploymentStrategyType {
		if st.RollingUpdate == nil || st.RollingUpdate.MaxUnavailable == nil {
			t.Errorf("Deployment %s: a rolling update with the default maxUnavailable (25%%) never replaces the leader", d.Name)
		} else if u, err := intstr.GetScaledValueFromIntOrPercent(st.RollingUpdate.MaxUnavailable, n, true); err != nil || u < n {
			t.Errorf("Deployment %s: maxUnavailable %s of %d replicas keeps an old pod until a new one is ready, which a standby never is", d.Name, st.RollingUpdate.MaxUnavailable.String(), n)
		}
	}
	if p := d.Spec.ProgressDeadlineSeconds; p == nil || *p != math.MaxInt32 {
		t.Errorf("Deployment %s: progressDeadlineSeconds %s: with a standby that is never ready every rollout ends ProgressDeadlineExceeded; %d turns the deadline off", d.Name, seconds(p), math.MaxInt32)
	}
}

func seconds(p *int32) string {
	if p == nil {
		return "unset (600)"
	}
	return strconv.Itoa(int(*p))
}

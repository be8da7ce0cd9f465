package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runnel-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "runnel")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("go build: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func TestExamplesList(t *testing.T) {
	out, _, code := runCLI(t, "examples")
	if code != 0 || !strings.Contains(out, "wordcount") || !strings.Contains(out, "clickstream") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

func TestRunWordCountReport(t *testing.T) {
	dir := t.TempDir()
	in, out, report := filepath.Join(dir, "in.txt"), filepath.Join(dir, "out.txt"), filepath.Join(dir, "report.json")
	text := strings.Repeat("Größe naïve abc123 the THE the\nx y, z! Größe\n", 40)
	if err := os.WriteFile(in, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "run", "wordcount", "--input", in, "--output", out,
		"--parallelism", "2", "--taskmanagers", "2", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	// Not a terminal: plain log lines, and the final line says how the job ended.
	if !strings.Contains(stderr, "msg=progress") || !strings.Contains(stderr, "job wordcount FINISHED") {
		t.Fatalf("stderr:\n%s", stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "abc123\t40\ngröße\t80\nnaïve\t40\nthe\t120\nx\t40\ny\t40\nz\t40\n"
	if string(got) != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}

	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Job      string `json:"job"`
		Status   string `json:"status"`
		Error    string `json:"error"`
		WallMS   *int64 `json:"wall_ms"`
		Vertices []struct {
			Name        string   `json:"name"`
			Operators   []string `json:"operators"`
			Parallelism int      `json:"parallelism"`
			Inputs      []struct {
				From    string `json:"from"`
				Pattern string `json:"pattern"`
			} `json:"inputs"`
			RecordsIn  *uint64 `json:"records_in"`
			RecordsOut *uint64 `json:"records_out"`
			Subtasks   []struct {
				Index       *int   `json:"index"`
				Attempt     *int   `json:"attempt"`
				TaskManager string `json:"taskmanager"`
			} `json:"subtasks"`
		} `json:"vertices"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Job != "wordcount" || r.Status != "FINISHED" || r.Error != "" || r.WallMS == nil {
		t.Fatalf("report: %s", b)
	}
	byName := map[string]int{}
	for i, v := range r.Vertices {
		byName[v.Name] = i
		if v.RecordsIn == nil || v.RecordsOut == nil || len(v.Subtasks) != v.Parallelism || len(v.Operators) == 0 {
			t.Fatalf("vertex %s: %s", v.Name, b)
		}
		for i, st := range v.Subtasks {
			if st.Index == nil || *st.Index != i || st.Attempt == nil || *st.Attempt != 0 || !strings.HasPrefix(st.TaskManager, "tm-") {
				t.Fatalf("vertex %s subtask %d: %s", v.Name, i, b)
			}
		}
	}
	src, ok1 := byName["source -> tokenize"]
	cnt, ok2 := byName["count"]
	sink, ok3 := byName["sink"]
	if !ok1 || !ok2 || !ok3 || len(r.Vertices) != 3 {
		t.Fatalf("vertices %v:\n%s", byName, b)
	}
	vs := r.Vertices
	if vs[src].Parallelism != 2 || len(vs[src].Inputs) != 0 || strings.Join(vs[src].Operators, ",") != "source,tokenize" {
		t.Fatalf("source vertex: %+v", vs[src])
	}
	if c := vs[cnt]; c.Parallelism != 2 || len(c.Inputs) != 1 || c.Inputs[0].From != "source -> tokenize" || c.Inputs[0].Pattern != "hash" ||
		*c.RecordsIn != 40*10 || *c.RecordsOut != 7 {
		t.Fatalf("count vertex: %+v in %d out %d", c, *c.RecordsIn, *c.RecordsOut)
	}
	if s := vs[sink]; s.Parallelism != 1 || len(s.Inputs) != 1 || s.Inputs[0].From != "count" || *s.RecordsIn != 7 {
		t.Fatalf("sink vertex: %+v", s)
	}
	tms := map[string]bool{}
	for _, st := range vs[cnt].Subtasks {
		tms[st.TaskManager] = true
	}
	if len(tms) != 2 {
		t.Fatalf("count subtasks on %v, want both TaskManagers", tms)
	}
}

func TestRunNoChainingAndDuration(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	_, stderr, code := runCLI(t, "run", "clickstream", "--duration", "700ms", "--rate", "5000", "--no-chaining", "--report", report)
	if code != 0 || !strings.Contains(stderr, "CANCELED") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	var r struct {
		Status   string                  `json:"status"`
		Vertices []struct{ Name string } `json:"vertices"`
	}
	b, _ := os.ReadFile(report)
	if err := json.Unmarshal(b, &r); err != nil || r.Status != "CANCELED" || len(r.Vertices) != 3 {
		t.Fatalf("%v %s", err, b)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "wordcount", "--parallelism", "0"}, "--parallelism"},
		{[]string{"run", "wordcount", "--taskmanagers", "-1"}, "--taskmanagers"},
		{[]string{"run", "wordcount", "--input", "/does/not/exist"}, "--input"},
		{[]string{"run", "wordcount", "--bogus"}, "--bogus"},
		{[]string{"run", "nosuch"}, "unknown example"},
		{[]string{"run", "clickstream", "--users", "0"}, "--users"},
		{[]string{"bench", "throughput", "--records", "0"}, "--records"},
	} {
		_, stderr, code := runCLI(t, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want non-zero and %q", tc.args, code, stderr, tc.want)
		}
	}
}

func TestBenchJSON(t *testing.T) {
	out, stderr, code := runCLI(t, "bench", "throughput", "--records", "20000", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r map[string]float64
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	for _, k := range []string{"engine_rps", "baseline_rps", "ratio", "allocs_per_record"} {
		if _, ok := r[k]; !ok {
			t.Fatalf("missing %s in %s", k, out)
		}
	}
}

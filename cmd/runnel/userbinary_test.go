package main

import (
	"context"
	"encoding/json"
	"errors"
	"go/format"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/cmd/runnel/internal/proccluster"
)

// TestUserBinary builds the program README.md shows under "Your own job" as a user would, in a module of
// its own that requires Runnel, and runs it: a binary that calls runnel.Main has the runnel command's
// command line (help, run with the flags of every run beside the job's own, the roles of a cluster and
// submit), its mistakes exit 2 before anything runs, and its job's End sees the job's results wherever
// the job ran.
func TestUserBinary(t *testing.T) {
	bin := buildUserBinary(t, readmeProgram(t))
	dir := t.TempDir()

	t.Run("help", func(t *testing.T) {
		for _, args := range [][]string{{"--help"}, {"-h"}} {
			out, stderr, code := runBinary(t, bin, dir, args...)
			if code != 0 || stderr != "" {
				t.Fatalf("%q: exit %d, stderr:\n%s", args, code, stderr)
			}
			for _, want := range []string{"myjob run [JOB]", "myjob submit [JOB] --jobmanager HOST:PORT", "myjob cancel JOBID",
				"myjob jobmanager", "myjob taskmanager", "--parallelism", "--checkpoint-interval", "--failover", "Exit codes"} {
				if !strings.Contains(out, want) {
					t.Errorf("%q: the help lacks %q:\n%s", args, want, out)
				}
			}
			if !regexp.MustCompile(`(?m)^\s+clicks\s+count generated clicks per page$`).MatchString(out) {
				t.Errorf("%q: the help does not list the job with its description:\n%s", args, out)
			}
		}
		for _, args := range [][]string{{"run", "--help"}, {"run", "clicks", "--help"}, {"clicks", "-h"}, {"submit", "clicks", "--help"}} {
			out, stderr, code := runBinary(t, bin, dir, args...)
			if code != 0 || stderr != "" {
				t.Fatalf("%q: exit %d, stderr:\n%s", args, code, stderr)
			}
			// The job's own flags come first, then those of every run, with the job's defaults.
			own, every := strings.Index(out, "Flags of clicks:"), strings.Index(out, "Flags of every ")
			if own < 0 || every < own {
				t.Fatalf("%q: no job flags before the run's:\n%s", args, out)
			}
			for _, re := range []string{`--clicks int\s+clicks to generate \(default 100000\)`, `--pages int`, `--rate float`} {
				if !regexp.MustCompile(re).MatchString(out[own:every]) {
					t.Errorf("%q: the job's flags lack %s:\n%s", args, re, out)
				}
			}
			for _, re := range []string{`--parallelism int\s+default parallelism of the job's operators \(default 2\)`, `--checkpoint-interval duration`, `--inject-failure`} {
				if !regexp.MustCompile(re).MatchString(out[every:]) {
					t.Errorf("%q: the run's flags lack %s:\n%s", args, re, out)
				}
			}
		}
	})

	t.Run("run with checkpoints and a failure", func(t *testing.T) {
		report := filepath.Join(dir, "r.json")
		// --rate stretches the run to about 1.7 s, so that checkpoints complete before count[0] (which gets
		// about 500 clicks at parallelism 3) fails at its 300th.
		out, stderr, code := runBinary(t, bin, dir, "run", "clicks", "--clicks", "5000", "--rate", "1000", "--parallelism", "3",
			"--checkpoint-interval", "50ms", "--failover", "region", "--inject-failure", "count[0]@300", "--report", report)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, stderr)
		}
		// Every click counted once, though the job failed over: End saw the restored and replayed counts.
		if out != "counted 5000 clicks\n" || !strings.Contains(stderr, "job clicks FINISHED") {
			t.Fatalf("stdout:\n%s\nstderr:\n%s", out, stderr)
		}
		r := readUserReport(t, report)
		if r.Job != "clicks" || r.Status != "FINISHED" || r.ClicksCounted == nil || *r.ClicksCounted != 5000 || len(r.Vertices) != 2 {
			t.Fatalf("report: %+v", r)
		}
		countVertex := ""
		for _, v := range r.Vertices {
			if v.Parallelism != 3 || len(v.Subtasks) != 3 {
				t.Errorf("vertex %s: parallelism %d with %d subtasks, want --parallelism 3", v.Name, v.Parallelism, len(v.Subtasks))
			}
			if len(v.Operators) > 0 && v.Operators[0] == "count" {
				countVertex = v.Name
			}
		}
		if c := r.Checkpoints; c == nil || c.Completed < 1 {
			t.Errorf("checkpoints: %+v", r.Checkpoints)
		}
		if len(r.Failovers) != 1 {
			t.Fatalf("failovers: %+v", r.Failovers)
		}
		if f := r.Failovers[0]; countVertex == "" || f.Failed != countVertex+"[0]" || f.Strategy != "region" || f.CheckpointRestored == nil {
			t.Errorf("failover (count runs in %q): %+v", countVertex, f)
		}
	})

	t.Run("the job named after flags, or not at all", func(t *testing.T) {
		for _, args := range [][]string{{"--clicks", "100", "--pages", "3"}, {"run", "--parallelism", "1", "clicks", "--clicks", "100"}} {
			out, stderr, code := runBinary(t, bin, dir, args...)
			if code != 0 || out != "counted 100 clicks\n" {
				t.Errorf("%q: exit %d, stdout:\n%s\nstderr:\n%s", args, code, out, stderr)
			}
		}
	})

	t.Run("mistakes", func(t *testing.T) {
		// Each asks for a report, which a run that started would write.
		report := filepath.Join(dir, "never.json")
		for _, tc := range []struct {
			args []string
			says string
		}{
			{[]string{"run", "clicks", "--report", report, "--nope"}, "unknown flag: --nope"},
			{[]string{"run", "clicks", "--report", report, "--clicks", "abc"}, `invalid argument "abc" for "--clicks" flag`},
			{[]string{"run", "clicks", "--report", report, "--clicks", "0"}, "--clicks 0"},
			{[]string{"run", "clicks", "--report", report, "--parallelism", "0"}, "invalid --parallelism 0"},
			{[]string{"run", "clicks", "--report", report, "--failover", "some"}, `invalid --failover "some"`},
			{[]string{"run", "clicks", "--report", report, "--inject-failure", "nosuch[0]@10"}, "--inject-failure"},
			{[]string{"run", "clicks", "--report", report, "stray"}, `unexpected arguments ["stray"]`},
			{[]string{"clicks", "--report", report, "--", "stray"}, `unexpected arguments ["stray"]`},
			{[]string{"frobnicate", "--report", report}, `"frobnicate" is neither a role nor a job`},
			{[]string{"submit", "clicks", "--report", report, "--taskmanagers", "2"}, "--taskmanagers is not a flag of submit"},
		} {
			out, stderr, code := runBinary(t, bin, dir, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.says) {
				t.Errorf("%q: exit %d, want %d, with %q in:\n%s", tc.args, code, exitUsage, tc.says, stderr)
			}
			// Nothing ran: no job started, End did not print, no report was written.
			if out != "" || strings.Contains(stderr, "job starting") || strings.Contains(stderr, "submitting the job") {
				t.Errorf("%q: something ran; stdout:\n%s\nstderr:\n%s", tc.args, out, stderr)
			}
			if _, err := os.Stat(report); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%q wrote its report: %v", tc.args, err)
			}
		}
	})

	t.Run("submit to a cluster of the binary", func(t *testing.T) {
		c := startClusterWith(t, proccluster.Spec{TaskManagers: 2, Slots: 2, Process: proccluster.Options{Binary: bin, Dir: dir}})
		report := filepath.Join(dir, "r2.json")
		out, stderr, code := runBinary(t, bin, dir, "submit", "clicks", "--jobmanager", c.addr, "--clicks", "3000",
			"--parallelism", "2", "--checkpoint-interval", "50ms", "--checkpoint-storage", filepath.Join(dir, "checkpoints"), "--report", report)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, stderr)
		}
		// The sink ran in the TaskManagers; its counts reached submit's End as an accumulator.
		if out != "counted 3000 clicks\n" || !strings.Contains(stderr, "job clicks FINISHED") {
			t.Fatalf("stdout:\n%s\nstderr:\n%s", out, stderr)
		}
		r := readUserReport(t, report)
		if r.Status != "FINISHED" || r.ClicksCounted == nil || *r.ClicksCounted != 3000 {
			t.Fatalf("report: %+v", r)
		}
		for _, v := range r.Vertices {
			if v.Parallelism != 2 {
				t.Errorf("vertex %s: parallelism %d, want 2", v.Name, v.Parallelism)
			}
			for _, s := range v.Subtasks {
				if s.TaskManager != "tm-1" && s.TaskManager != "tm-2" {
					t.Errorf("%s[%d] ran on %q, not on a TaskManager of the cluster", v.Name, s.Index, s.TaskManager)
				}
			}
		}
	})
}

// userReport is what the test reads of the program's --report: the job's result and End's field.
type userReport struct {
	runnel.JobResult
	ClicksCounted *int64 `json:"clicks_counted"`
}

func readUserReport(t *testing.T, path string) userReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r userReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

// readmeProgram returns the Go program of README.md's "Your own job", which must be gofmt'd as it stands.
func readmeProgram(t *testing.T) []byte {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n### Your own job\n")
	if !ok {
		t.Fatal(`README.md has no section "### Your own job"`)
	}
	_, code, ok := strings.Cut(section, "\n```go\n")
	if !ok {
		t.Fatal(`README.md's "Your own job" shows no Go program`)
	}
	code, _, ok = strings.Cut(code, "\n```\n")
	if !ok {
		t.Fatal(`README.md's "Your own job": the Go program's block does not end`)
	}
	src := []byte(code + "\n")
	if formatted, err := format.Source(src); err != nil || string(formatted) != string(src) {
		t.Fatalf("README.md's Go program is not gofmt'd (%v); gofmt would make it:\n%s", err, formatted)
	}
	return src
}

// buildUserBinary builds main.go in a module of its own, example.com/myjob, that requires Runnel and
// replaces it by this checkout, and returns the binary (called myjob, as its help shows).
//
// The build must not need the network: the module has the checkout's go.sum, which holds every module
// Runnel needs, and GOPROXY=off makes Go take them from the module cache, where building this test put
// them. -mod=mod lets the build write the requirements it finds into the module's go.mod, as "go mod
// tidy" does for a user; GOWORK=off and GOTOOLCHAIN=local keep a workspace or another Go out of it.
func buildUserBinary(t *testing.T, mainGo []byte) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	rootMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(rootMod)
	if !strings.HasPrefix(string(rootMod), "module github.com/runnel-dev/runnel\n") || goLine == nil {
		t.Fatalf("%s is not Runnel's go.mod:\n%s", filepath.Join(root, "go.mod"), rootMod)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	goMod := "module example.com/myjob\n\n" + string(goLine) + "\n\nrequire github.com/runnel-dev/runnel v0.0.0\n\n" +
		"replace github.com/runnel-dev/runnel => " + root + "\n"
	for name, b := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sum, "main.go": mainGo} {
		if err := os.WriteFile(filepath.Join(mod, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "myjob")
	args := []string{"build", "-mod=mod", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of README.md's program: %v\n%s", err, out)
	}
	return bin
}

// runBinary runs bin with args in dir and returns its output and exit code.
func runBinary(t *testing.T, bin, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	// A bound, so that a command that hangs fails the test instead of stalling the suite.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
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

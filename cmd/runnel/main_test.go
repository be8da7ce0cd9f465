package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runnel-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "runnel")
	// The binary honours RUNNEL_TEST_FINGERPRINT, so that a test can start a TaskManager of "another build".
	args := []string{"build", "-o", binary, "-ldflags", "-X github.com/runnel-dev/runnel/internal/buildinfo.honourTestEnv=yes"}
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
	return runCLIIn(t, "", args...)
}

// runCLIIn runs the command in directory dir ("": the test's).
func runCLIIn(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runBinary(t, binary, dir, args...)
}

func TestExamplesList(t *testing.T) {
	out, _, code := runCLI(t, "examples")
	if code != 0 || !strings.Contains(out, "wordcount") || !strings.Contains(out, "clickstream") || !strings.Contains(out, "sequence") {
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

// TestBadFlags: every usage error, whether cobra finds it (parsing) or the command does (validation), exits
// with code 2 and names what is wrong.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuch"}, `"nosuch" is neither a role nor a job of this program`},
		{[]string{"run", "wordcount", "--parallelism", "two"}, "--parallelism"},
		{[]string{"run", "wordcount", "--parallelism"}, "--parallelism"},
		{[]string{"run", "sequence", "--duration", "soon"}, "--duration"},
		{[]string{"run", "sequence", "stray"}, `unexpected arguments ["stray"]: the example takes flags only`},
		{[]string{"examples", "stray"}, `unexpected arguments ["stray"]`},
		{[]string{"bench", "throughput", "--records", "-5"}, "--records"},
		{[]string{"bench", "throughput", "--keys", "0"}, "--keys"},
		{[]string{"run", "sequence", "--taskmanagers", "100000"}, "--taskmanagers: between 1 and 1024 TaskManagers"},
		{[]string{"run", "sequence", "--max-parallelism", "0"}, "--max-parallelism: must be between 1 and 32768, got 0"},
		{[]string{"run", "sequence", "--max-parallelism", "40000"}, "--max-parallelism: must be between 1 and 32768, got 40000"},
		{[]string{"run", "sequence", "--keys", "8", "--parallelism", "3", "--max-parallelism", "2"},
			"parallelism 3 exceeds max parallelism 2 (the number of key groups); raise --max-parallelism"},
		{[]string{"run", "wordcount", "--parallelism", "0"}, "--parallelism"},
		{[]string{"run", "wordcount", "--taskmanagers", "-1"}, "--taskmanagers"},
		{[]string{"run", "wordcount", "--input", "/does/not/exist"}, "--input"},
		{[]string{"run", "wordcount", "--bogus"}, "--bogus"},
		{[]string{"run", "nosuch"}, `job "nosuch" is not registered in this binary; registered: bench-throughput, clickstream`},
		{[]string{"run"}, "name the job: the jobs are bench-throughput, clickstream"},
		{[]string{"run", "sequence", "--", "--records", "5"}, `unexpected arguments ["--records" "5"]`},
		{[]string{"submit", "sequence", "--taskmanagers", "2"}, "--taskmanagers is not a flag of submit: the cluster's TaskManagers are its own"},
		{[]string{"cancel"}, "cancel: want one JOBID"},
		{[]string{"jobmanager", "stray"}, `jobmanager: unexpected arguments ["stray"]`},
		{[]string{"run", "clickstream", "--users", "0"}, "--users"},
		{[]string{"bench", "throughput", "--records", "0"}, "--records"},
		{[]string{"run", "sequence", "--failover", "bogus"}, "--failover"},
		{[]string{"run", "sequence", "--inject-failure", "x"}, "--inject-failure"},
		{[]string{"run", "sequence", "--inject-failure", "map[0]@0"}, "--inject-failure"},
		{[]string{"run", "sequence", "--inject-failure", "nosuch[0]@5"}, "--inject-failure"},
		{[]string{"run", "sequence", "--inject-failure", "map[7]@5"}, "--inject-failure"},
		{[]string{"run", "sequence", "--checkpoint-interval", "-1s"}, "--checkpoint-interval"},
		{[]string{"run", "sequence", "--checkpoint-mode", "twice"}, "--checkpoint-mode"},
		{[]string{"run", "sequence", "--unaligned-checkpoints"}, "--unaligned-checkpoints is set but checkpointing is off"},
		{[]string{"run", "sequence", "--checkpoint-interval", "1s", "--aligned-checkpoint-timeout", "10ms"}, "set --unaligned-checkpoints too"},
		{[]string{"run", "sequence", "--checkpoint-interval", "1s", "--unaligned-checkpoints", "--checkpoint-mode", "at-least-once"}, "unaligned checkpoints are exactly once"},
		{[]string{"run", "sequence", "--checkpoint-interval", "1s", "--unaligned-checkpoints", "--aligned-checkpoint-timeout", "-1s"}, "--aligned-checkpoint-timeout"},
		{[]string{"run", "sequence", "--restart-strategy", "sometimes"}, "--restart-strategy"},
		{[]string{"run", "sequence", "--state-backend", "floppy"}, "--state-backend"},
		{[]string{"run", "sequence", "--keys", "1", "--parallelism", "2"}, "--keys"},
		{[]string{"run", "wordcount", "--metrics-addr", "no-port"}, "--metrics-addr"},
		{[]string{"run", "wordcount", "--heap-budget", "4096"}, "invalid --heap-budget 4096: at least 1 MiB"},
		{[]string{"run", "wordcount", "--heap-budget", "-2"}, "invalid --heap-budget -2"},
		{[]string{"bench", "throughput", "--heap-budget", "10"}, "invalid --heap-budget 10"},
		{[]string{"submit", "sequence", "--heap-budget", "-1"}, "--heap-budget is not a flag of submit: it paces the collector"},
		{[]string{"run", "wordcount", "--ui", "no-port"}, "--ui"},
		{[]string{"submit", "wordcount", "--ui", "127.0.0.1:8081"}, "the JobManager serves the dashboard"},
		{[]string{"bench", "recovery", "--scenario", "sideways"}, "unknown scenario"},
		{[]string{"bench", "recovery", "--plot", "/does/not/exist/recovery.svg"}, "invalid --plot: open /does/not/exist/recovery.svg"},
		{[]string{"bench", "recovery", "--series-bucket", "1500us"}, "series bucket must be a positive multiple"},
	} {
		_, stderr, code := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tc.args, code, stderr, tc.want)
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

func TestRunSequenceRecovery(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	// --rate keeps the job running (about a second; the failure 0.6 s in, on a loaded machine too) long enough for checkpoints to complete before
	// the injected failure, so that recovery restores one rather than starting over.
	out, stderr, code := runCLI(t, "run", "sequence", "--records", "20000", "--keys", "8", "--parallelism", "2",
		"--taskmanagers", "2", "--rate", "10000", "--checkpoint-interval", "30ms", "--inject-failure", "map[0]@6000",
		"--restart-strategy", "fixed-delay:attempts=3,delay=10ms", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "msg=failover") || !strings.Contains(stderr, "job sequence FINISHED") {
		t.Fatalf("stderr:\n%s", stderr)
	}
	if !strings.Contains(out, "checker: 20000 records (of 20000) over 8 keys; lost 0, duplicated 0, out of order 0: OK") {
		t.Fatalf("stdout:\n%s", out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Status   string `json:"status"`
		Vertices []struct {
			Name      string   `json:"name"`
			Operators []string `json:"operators"`
			Subtasks  []struct {
				Attempt int `json:"attempt"`
			} `json:"subtasks"`
		} `json:"vertices"`
		Checkpoints *struct {
			Completed       *int64 `json:"completed"`
			Failed          *int64 `json:"failed"`
			Aborted         *int64 `json:"aborted"`
			LastCompletedID *int64 `json:"last_completed_id"`
		} `json:"checkpoints"`
		Failovers []struct {
			Failed             string   `json:"failed"`
			Strategy           string   `json:"strategy"`
			Restarted          []string `json:"restarted"`
			CheckpointRestored *int64   `json:"checkpoint_restored"`
			RecoveryMS         *int64   `json:"recovery_ms"`
		} `json:"failovers"`
		Checker *struct {
			Records    *int64 `json:"records"`
			Lost       *int64 `json:"lost"`
			Duplicated *int64 `json:"duplicated"`
			OutOfOrder *int64 `json:"out_of_order"`
		} `json:"checker"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "FINISHED" {
		t.Fatalf("report: %s", b)
	}
	if c := r.Checker; c == nil || c.Records == nil || *c.Records != 20000 || c.Lost == nil || *c.Lost != 0 ||
		c.Duplicated == nil || *c.Duplicated != 0 || c.OutOfOrder == nil || *c.OutOfOrder != 0 {
		t.Fatalf("checker: %s", b)
	}
	if c := r.Checkpoints; c == nil || c.Completed == nil || *c.Completed < 1 || c.Failed == nil || c.Aborted == nil || c.LastCompletedID == nil {
		t.Fatalf("checkpoints: %s", b)
	}
	mapVertex := ""
	for _, v := range r.Vertices {
		for _, op := range v.Operators {
			if op == "map" {
				mapVertex = v.Name
			}
		}
	}
	if len(r.Failovers) != 1 {
		t.Fatalf("failovers: %s", b)
	}
	f := r.Failovers[0]
	if mapVertex == "" || f.Failed != mapVertex+"[0]" || f.Strategy != "region" || len(f.Restarted) == 0 ||
		f.CheckpointRestored == nil || f.RecoveryMS == nil {
		t.Fatalf("failover (map runs in %q): %s", mapVertex, b)
	}
	// Every restarted subtask shows its restart in its attempt.
	restarted := 0
	for _, v := range r.Vertices {
		for _, st := range v.Subtasks {
			if st.Attempt > 0 {
				restarted++
			}
		}
	}
	if restarted != len(f.Restarted) {
		t.Fatalf("%d subtasks with attempt > 0, %d restarted: %s", restarted, len(f.Restarted), b)
	}
}

func TestRunFailureWithoutRestartFails(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	_, stderr, code := runCLI(t, "run", "sequence", "--records", "20000", "--keys", "4", "--inject-failure", "check[1]@100",
		"--report", report)
	if code != 1 || !strings.Contains(stderr, "FAILED") || !strings.Contains(stderr, "injected failure") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	var r struct {
		Status  string          `json:"status"`
		Checker json.RawMessage `json:"checker"`
	}
	b, _ := os.ReadFile(report)
	if err := json.Unmarshal(b, &r); err != nil || r.Status != "FAILED" || r.Checker == nil {
		t.Fatalf("%v %s", err, b)
	}
}

// TestRunRepeatedInjectionsAllFire gives one subtask several --inject-failure specs: each of them fires, in
// the order of its trigger, each failing one attempt of the subtask. (Specs due at the same record, which
// fire in back-to-back attempts, are covered by the operator package's test: in a whole job the second
// failure would overlap the first failover, which is a different subject.)
func TestRunRepeatedInjectionsAllFire(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []string
		want  []string // the specs named by the failovers' causes, in order for each subtask
	}{
		{"two record counts", []string{"map[0]@5000", "map[0]@1000"}, []string{"map[0]@1000", "map[0]@5000"}},
		{"two subtasks, two each", []string{"check[1]@2500", "map[1]@1500", "check[1]@1000", "map[1]@8000"},
			[]string{"check[1]@1000", "check[1]@2500", "map[1]@1500", "map[1]@8000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			report := filepath.Join(t.TempDir(), "r.json")
			args := []string{"run", "sequence", "--records", "20000", "--keys", "8", "--rate", "20000",
				"--checkpoint-interval", "20ms", "--restart-strategy", "fixed-delay:attempts=10,delay=0s", "--report", report}
			for _, s := range tc.specs {
				args = append(args, "--inject-failure", s)
			}
			out, stderr, code := runCLI(t, args...)
			if code != 0 || !strings.Contains(out, "lost 0, duplicated 0, out of order 0: OK") {
				t.Fatalf("exit %d:\n%s\n%s", code, out, stderr)
			}
			b, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				Failovers []struct {
					Failed string `json:"failed"`
					Cause  string `json:"cause"`
				} `json:"failovers"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if len(r.Failovers) != len(tc.want) {
				t.Fatalf("%d failovers, want %d: %s\n%s", len(r.Failovers), len(tc.want), b, stderr)
			}
			// Failures of different subtasks may come in either order; each subtask's come in its order.
			fired := map[string][]string{} // subtask spec prefix ("map[1]") -> specs, in the order they fired
			for _, f := range r.Failovers {
				_, spec, ok := strings.Cut(f.Cause, "injected failure ")
				if !ok {
					t.Fatalf("failover %+v was not injected", f)
				}
				sub := spec[:strings.Index(spec, "@")]
				if op := sub[:strings.Index(sub, "[")]; !strings.Contains(f.Failed, op) {
					t.Errorf("failover of %s caused by %s", f.Failed, spec)
				}
				fired[sub] = append(fired[sub], spec)
			}
			want := map[string][]string{}
			for _, spec := range tc.want {
				sub := spec[:strings.Index(spec, "@")]
				want[sub] = append(want[sub], spec)
			}
			if fmt.Sprint(fired) != fmt.Sprint(want) {
				t.Fatalf("fired %v, want %v", fired, want)
			}
		})
	}
}

// TestMistakesFailAtStart gives paths that cannot work: each is refused before the job runs (an unbounded
// run that would otherwise last --duration ends at once), with exit code 2 and a message naming the flag
// and the path, and nothing is created where it should not be.
func TestMistakesFailAtStart(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "plain-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	unbounded := []string{"run", "sequence", "--duration", "10s"}
	for _, tc := range []struct {
		name      string
		args      []string
		want      []string
		notExists string // a path the run must not create
	}{
		{"restore from a missing directory", append(unbounded, "--from-savepoint", filepath.Join(tmp, "nosuch-sp")),
			[]string{"--from-savepoint", `directory "` + filepath.Join(tmp, "nosuch-sp") + `" does not exist`}, filepath.Join(tmp, "nosuch-sp")},
		{"checkpoint storage file:// without a path", append(unbounded, "--checkpoint-interval", "50ms", "--checkpoint-storage", "file://"),
			[]string{"--checkpoint-storage", `"file://" names no directory`}, ""},
		{"report in a missing directory", append(unbounded, "--report", filepath.Join(tmp, "nosuch", "r.json")),
			[]string{"--report", filepath.Join(tmp, "nosuch", "r.json"), "does not exist"}, ""},
		{"report is a directory", append(unbounded, "--report", tmp), []string{"--report", tmp, "is a directory"}, ""},
		{"savepoint under a file", append(unbounded, "--savepoint-on-stop", filepath.Join(file, "sp")),
			[]string{"--savepoint-on-stop", filepath.Join(file, "sp")}, ""},
		{"output in a missing directory", []string{"run", "wordcount", "--output", filepath.Join(tmp, "nosuch", "o.txt")},
			[]string{"--output", filepath.Join(tmp, "nosuch", "o.txt"), "does not exist"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cwd := t.TempDir()
			start := time.Now()
			_, stderr, code := runCLIIn(t, cwd, tc.args...)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("refused only after %s: the job ran", took)
			}
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not name %q:\n%s", w, stderr)
				}
			}
			if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
				t.Errorf("the run wrote into its current directory: %v", entries)
			}
			if tc.notExists != "" {
				if _, err := os.Stat(tc.notExists); err == nil {
					t.Errorf("%s was created", tc.notExists)
				}
			}
		})
	}
}

// TestSignalStopsCleanly sends SIGINT or SIGTERM to a running job: both stop it the same way, with the
// savepoint asked for, the temporary checkpoint and spill directories removed, and the signal's exit code.
func TestSignalStopsCleanly(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
		code int
	}{
		{syscall.SIGINT, "SIGINT", 130},
		{syscall.SIGTERM, "SIGTERM", 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir() // the run's TMPDIR: where its temporary directories go
			sp := filepath.Join(t.TempDir(), "sp")
			cmd := exec.Command(binary, "run", "sequence", "--records", "0", "--rate", "20000", "--checkpoint-interval", "20ms",
				"--progress-interval", "50ms", "--savepoint-on-stop", sp)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Wait until a checkpoint completed (the job runs, and its temporary directories exist), keep
			// draining stderr after that.
			running := make(chan struct{})
			var log strings.Builder
			drained := make(chan struct{})
			go func() {
				defer close(drained)
				sc := bufio.NewScanner(stderr)
				once := sync.Once{}
				for sc.Scan() {
					line := sc.Text()
					log.WriteString(line + "\n")
					if strings.Contains(line, "msg=progress") && strings.Contains(line, "status=RUNNING") && !strings.Contains(line, "checkpoints=0") {
						once.Do(func() { close(running) })
					}
				}
			}()
			select {
			case <-running:
			case <-drained:
				cmd.Wait()
				t.Fatalf("the job ended before it ran a checkpoint:\n%s", log.String())
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				<-drained
				cmd.Wait()
				t.Fatalf("no checkpoint within 30s:\n%s", log.String())
			}
			if entries, _ := os.ReadDir(tmp); len(entries) == 0 {
				t.Fatal("the running job made no temporary directories: the test would prove nothing")
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			<-drained
			err = cmd.Wait()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != tc.code || !strings.Contains(log.String(), "CANCELED") || !strings.Contains(log.String(), "stopped by "+tc.name) {
				t.Fatalf("exit %d (%v), want %d:\n%s", code, err, tc.code, log.String())
			}
			if _, err := os.Stat(filepath.Join(sp, "_metadata")); err != nil {
				t.Errorf("no savepoint: %v\n%s", err, log.String())
			}
			if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("left in the temporary directory: %v", names)
			}
		})
	}
}

// TestMaxParallelismFlag: --max-parallelism sets the key groups, so a parallelism up to it runs.
func TestMaxParallelismFlag(t *testing.T) {
	out, stderr, code := runCLI(t, "run", "sequence", "--records", "3000", "--keys", "8", "--parallelism", "3", "--max-parallelism", "3")
	if code != 0 || !strings.Contains(out, "checker: 3000 records (of 3000) over 8 keys; lost 0, duplicated 0, out of order 0: OK") {
		t.Fatalf("exit %d:\n%s\n%s", code, out, stderr)
	}
}

// TestRunStoppedShortIsIncomplete stops a bounded sequence run by --duration long before its input ends:
// the verdict says it is incomplete (not a violation), in the summary and in the report.
func TestRunStoppedShortIsIncomplete(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	out, stderr, code := runCLI(t, "run", "sequence", "--records", "1000000", "--rate", "2000", "--duration", "400ms", "--report", report)
	if code != 0 || !strings.Contains(out, "lost 0, duplicated 0, out of order 0: INCOMPLETE: stopped before the end of the input (job CANCELED)") ||
		strings.Contains(out, "VIOLATION") {
		t.Fatalf("exit %d:\n%s\n%s", code, out, stderr)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Checker struct {
			Verdict string `json:"verdict"`
		} `json:"checker"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Checker.Verdict != "INCOMPLETE" {
		t.Fatalf("%v: %s", err, b)
	}
}

// TestRunHelp: the help tells the restart default and the exit codes.
func TestRunHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--help"}, []string{"SIGTERM stops the job cleanly", "Exit codes: 0 the job finished", "2 a mistake in the command line", "Jobs: bench-throughput, clickstream"}},
		{[]string{"--help"}, []string{"submit [JOB] --jobmanager HOST:PORT", "sequence          semantics checker", "examples  list the bundled example jobs", "--checkpoint-interval"}},
		{[]string{}, []string{"Usage:", "Jobs:"}},
		{[]string{"run", "nexmark", "--help"}, []string{"Flags of nexmark:", "--query string", "--events uint", "Flags of every run:", "(default 2)"}},
		{[]string{"submit", "sequence", "--help"}, []string{"--jobmanager string", "--records uint", "follows it to its end"}},
		{[]string{"taskmanager", "--help"}, []string{"--slots int"}},
		{[]string{"run", "sequence", "--help"}, []string{"the first restart of a failure is immediate", "immediate=1", "--max-parallelism"}},
	} {
		out, _, code := runCLI(t, tc.args...)
		for _, want := range tc.want {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("%v: exit %d, help lacks %q:\n%s", tc.args, code, want, out)
			}
		}
	}
}

// TestRunSequenceUnaligned: the sequence example with --unaligned-checkpoints and a slowed checker, a map
// subtask failing after 6000 records: every record once, and the report's checkpoint history shows
// checkpoints that held records in flight.
func TestRunSequenceUnaligned(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.json")
	out, stderr, code := runCLI(t, "run", "sequence", "--records", "20000", "--keys", "8", "--parallelism", "2",
		"--rate", "20000", "--check-rate", "8000", "--checkpoint-interval", "30ms", "--unaligned-checkpoints",
		"--inject-failure", "map[0]@6000", "--restart-strategy", "fixed-delay:attempts=3,delay=10ms", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if !strings.Contains(out, "checker: 20000 records (of 20000) over 8 keys; lost 0, duplicated 0, out of order 0: OK") {
		t.Fatalf("stdout:\n%s", out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		History []struct {
			Status            string `json:"status"`
			ChannelStateBytes int64  `json:"channel_state_bytes"`
		} `json:"checkpoint_history"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, c := range r.History {
		if c.Status == "COMPLETED" && c.ChannelStateBytes > 0 {
			held++
		}
	}
	if held == 0 {
		t.Fatalf("no completed checkpoint held records in flight: %s", b)
	}
}

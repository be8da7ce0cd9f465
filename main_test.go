package runnel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

const mainTestJob = "main-test"

func init() {
	runnel.RegisterJob(mainTestJob, "doubles generated numbers", func(fs *pflag.FlagSet) runnel.Job {
		records := fs.Uint64("records", 1000, "records")
		return runnel.BuildFunc(func(env *runnel.Environment, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected arguments %q: the job takes flags only", args)
			}
			src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) uint64 { return seq },
				connector.GeneratorOptions{TotalRecords: *records})).Name("source")
			runnel.Map(src, func(v uint64) (uint64, error) { return v * 2, nil }).Name("double").SinkTo(connector.Discard[uint64]()).Name("sink")
			return nil
		})
	}, runnel.WithParallelism(2))
}

// syncWriter is a stderr that goroutines write and the test reads.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func waitForLine(t *testing.T, w *syncWriter, re *regexp.Regexp) []string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(w.String()); m != nil {
			return m
		}
	}
	t.Fatalf("no %q in:\n%s", re, w.String())
	return nil
}

// TestMainRoles runs a registered job through Main's roles: in the mini-cluster (run), and on a JobManager
// with two TaskManagers (jobmanager, taskmanager, submit with the job's flags and those of a run), each
// role on real sockets; command-line mistakes exit with 2.
func TestMainRoles(t *testing.T) {
	var out syncWriter
	runReport := filepath.Join(t.TempDir(), "run.json")
	if code := runnel.MainWith(context.Background(), []string{"run", mainTestJob, "--records", "3000", "--parallelism", "3", "--report", runReport}, &out, &out); code != 0 {
		t.Fatalf("run: exit %d:\n%s", code, out.String())
	}
	if r := readReport(t, runReport); r.Status != "FINISHED" || r.Vertex("sink").RecordsIn != 3000 || len(r.Vertex("sink").Subtasks) != 3 {
		t.Fatalf("run with --parallelism 3: %s, sink took %d records in %d subtasks", r.Status, r.Vertex("sink").RecordsIn, len(r.Vertex("sink").Subtasks))
	}
	var jobHelp syncWriter
	if code := runnel.MainWith(context.Background(), []string{"run", mainTestJob, "--help"}, &jobHelp, &jobHelp); code != 0 ||
		!regexp.MustCompile(`--records uint +records \(default 1000\)`).MatchString(jobHelp.String()) ||
		!regexp.MustCompile(`--parallelism int +default parallelism of the job's operators \(default 2\)`).MatchString(jobHelp.String()) {
		t.Errorf("run %s --help: exit %d, want the job's flag and its default parallelism:\n%s", mainTestJob, code, jobHelp.String())
	}
	for _, help := range [][]string{{"--help"}, {"-h"}, {"help"}, {"run", "--help"}} {
		var w syncWriter
		if code := runnel.MainWith(context.Background(), help, &w, &w); code != 0 || !strings.Contains(w.String(), "Usage:") ||
			!strings.Contains(w.String(), mainTestJob) || strings.Contains(w.String(), "job "+mainTestJob) {
			t.Errorf("%q: exit %d, want 0 and the usage with the registered jobs, no job run:\n%s", help, code, w.String())
		}
	}
	for _, tc := range [][]string{{"run"}, {"run", mainTestJob, "--no-such-flag"}, {"submit", mainTestJob, "stray"}, {"run", mainTestJob, "--", "--records", "3"},
		{"taskmanager", "--slots", "0"}, {"no-such-job"}, {"run", "no-such-job"}, {"submit", mainTestJob, "--taskmanagers", "2"}} {
		var w syncWriter
		if code := runnel.MainWith(context.Background(), tc, &w, &w); code != 2 {
			t.Errorf("%q: exit %d, want 2:\n%s", tc, code, w.String())
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	codes := make(chan int, 3)
	daemon := func(w *syncWriter, args ...string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- runnel.MainWith(ctx, args, w, w)
		}()
	}
	var jmOut syncWriter
	daemon(&jmOut, "jobmanager", "--addr", "127.0.0.1:0", "--rest-addr", "")
	addr := waitForLine(t, &jmOut, regexp.MustCompile(`JobManager listening on (\S+)`))[1]
	tmOut := []*syncWriter{{}, {}}
	for i, w := range tmOut {
		daemon(w, "taskmanager", "--jobmanager", addr, "--name", []string{"tm-a", "tm-b"}[i], "--slots", "1")
		waitForLine(t, w, regexp.MustCompile(`registered with the JobManager`))
	}
	report := filepath.Join(t.TempDir(), "r.json")
	var sub syncWriter
	if code := runnel.MainWith(ctx, []string{"submit", mainTestJob, "--jobmanager", addr, "--report", report, "--records", "4000"}, &sub, &sub); code != 0 {
		t.Fatalf("submit: exit %d:\n%s\n%s", code, sub.String(), jmOut.String())
	}
	r := readReport(t, report)
	tms := map[string]bool{}
	for _, v := range r.Vertices {
		for _, st := range v.Subtasks {
			tms[st.TaskManager] = true
		}
	}
	if r.Status != "FINISHED" || r.Vertex("sink").RecordsIn != 4000 || !tms["tm-a"] || !tms["tm-b"] {
		t.Fatalf("result %s, sink took %d records, TaskManagers %v", r.Status, r.Vertex("sink").RecordsIn, tms)
	}
	cancel()
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != 0 {
			t.Errorf("a daemon exited %d after its context ended", code)
		}
	}
}

func readReport(t *testing.T, path string) runnel.JobResult {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r runnel.JobResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTaskManagerRegistersAgain stops a JobManager under a TaskManager and starts another on the same
// address: the TaskManager, which cancelled everything when its session ended, registers with the new one
// and runs its jobs.
func TestTaskManagerRegistersAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel() // the daemons end with ctx
		wg.Wait()
	}()
	startJM := func() (context.CancelFunc, *syncWriter) {
		jctx, jcancel := context.WithCancel(ctx)
		var w syncWriter
		wg.Add(1)
		go func() {
			defer wg.Done()
			runnel.MainWith(jctx, []string{"jobmanager", "--addr", addr, "--rest-addr", ""}, &w, &w)
		}()
		waitForLine(t, &w, regexp.MustCompile(`JobManager listening on`))
		return jcancel, &w
	}
	stopFirst, _ := startJM()
	var tm syncWriter
	wg.Add(1)
	go func() {
		defer wg.Done()
		runnel.MainWith(ctx, []string{"taskmanager", "--jobmanager", addr, "--name", "tm-again", "--slots", "2"}, &tm, &tm)
	}()
	waitForLine(t, &tm, regexp.MustCompile(`registered with the JobManager`))
	stopFirst()
	waitForLine(t, &tm, regexp.MustCompile(`every task cancelled`))
	_, _ = startJM()
	waitForLine(t, &tm, regexp.MustCompile(`(?s)registered with the JobManager.*registered with the JobManager`))
	var sub syncWriter
	if code := runnel.MainWith(ctx, []string{"submit", mainTestJob, "--jobmanager", addr, "--records", "2000"}, &sub, &sub); code != 0 {
		t.Fatalf("submit to the second JobManager: exit %d:\n%s\n%s", code, sub.String(), tm.String())
	}
}

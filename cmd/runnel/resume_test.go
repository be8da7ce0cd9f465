package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRunResumeOfAFinishedJob runs sequence to its end with checkpoints into a storage directory, then
// again with --from-savepoint on that directory, whose newest checkpoint is the final one: the second run
// says that the job had already finished in it, naming the checkpoint, in the job's line, the checker's
// and the report, and exits 0. Before, it printed "FINISHED in 2ms" and then a VIOLATION with every
// record lost.
func TestRunResumeOfAFinishedJob(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkpoints")
	args := []string{"run", "sequence", "--records", "20000", "--checkpoint-interval", "50ms", "--checkpoint-storage", dir}
	out, stderr, code := runCLI(t, args...)
	if code != 0 || !strings.Contains(out, ": OK: every record exactly once, in order") {
		t.Fatalf("first run: exit %d:\n%s\n%s", code, out, stderr)
	}
	report := filepath.Join(t.TempDir(), "r.json")
	out, stderr, code = runCLI(t, append(args, "--from-savepoint", dir, "--report", report)...)
	if code != 0 || strings.Contains(out+stderr, "VIOLATION") {
		t.Fatalf("resumed run: exit %d:\n%s\n%s", code, out, stderr)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		RestoredFrom struct {
			CheckpointID int64 `json:"checkpoint_id"`
			Finished     bool  `json:"finished"`
		} `json:"restored_from"`
		Checker struct {
			Records int64  `json:"records"`
			Lost    int64  `json:"lost"`
			Verdict string `json:"verdict"`
		} `json:"checker"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if !r.RestoredFrom.Finished || r.RestoredFrom.CheckpointID == 0 || r.Checker.Verdict != "ALREADY_FINISHED" ||
		r.Checker.Records != 0 || r.Checker.Lost != 0 {
		t.Fatalf("report: %s", b)
	}
	chk := "checkpoint " + strconv.FormatInt(r.RestoredFrom.CheckpointID, 10) + " of " + dir
	if !strings.Contains(stderr, "job sequence FINISHED in ") || !strings.Contains(stderr, "it had already finished in "+chk) ||
		!strings.Contains(out, "checker: nothing to check: the job had already finished in "+chk) {
		t.Fatalf("the resumed run does not say that the job had already finished in %s:\n%s\n%s", chk, out, stderr)
	}
}

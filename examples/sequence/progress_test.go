package sequence_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/internal/run"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// TestProgressLogsEveryReport: with ProgressDir the sink's one writer logs one line per report it received,
// in order and within the run, after a header naming the writer; the checker still counts every record once.
func TestProgressLogsEveryReport(t *testing.T) {
	const records, keys, p, every = 20_000, 8, 2, 10
	dir := t.TempDir()
	job := sequence.New(nil)
	job.Records, job.Keys, job.EmitEvery, job.ProgressDir = records, keys, every, dir
	began := time.Now()
	res := runJob(t, job, runnel.WithParallelism(p), runnel.WithTaskManagers(2))
	ended := time.Now()
	checkExact(t, job, res, records, keys, p)
	files, err := filepath.Glob(filepath.Join(dir, "sink-0-0-*.log"))
	if err != nil || len(files) != 1 {
		t.Fatalf("progress files %v (%v): want one, of sink subtask 0, attempt 0", files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if !strings.HasPrefix(lines[0], sequence.ProgressHeader+" pid=") || !strings.Contains(lines[0], " subtask=0 attempt=0 start=") {
		t.Fatalf("header %q", lines[0])
	}
	// Every key reports every 10th record and once at the end of input.
	if got, want := len(lines)-1, records/every+keys; got != want {
		t.Fatalf("%d reports logged, want %d", got, want)
	}
	prev := began.UnixMicro()
	for _, l := range lines[1:] {
		us, err := strconv.ParseInt(l, 10, 64)
		if err != nil || us < prev || us > ended.UnixMicro() {
			t.Fatalf("line %q: want a time in microseconds, not before %d nor after the run", l, prev)
		}
		prev = us
	}
}

// TestProgressDirMustExist: a --progress-dir that is not a directory is refused when the job is built.
func TestProgressDirMustExist(t *testing.T) {
	job := sequence.New(nil)
	job.ProgressDir = filepath.Join(t.TempDir(), "missing")
	if err := job.Build(runnel.NewEnvironment(runnel.WithParallelism(2)), run.Options{}); err == nil || !strings.Contains(err.Error(), "--progress-dir") {
		t.Fatalf("err %v, want one naming --progress-dir", err)
	}
}

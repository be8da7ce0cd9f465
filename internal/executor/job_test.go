package executor

import (
	"slices"
	"strings"
	"testing"
)

// TestCheckSharedStorage: a checkpointed job on a cluster needs storage every process reaches; a job
// without checkpoints needs none.
func TestCheckSharedStorage(t *testing.T) {
	for _, tc := range []struct {
		checkpointing bool
		storage       string
		want          string // "" no error, else a part of it
	}{
		{false, "", ""},
		{false, "mem://x", ""},
		{true, "/shared/checkpoints", ""},
		{true, "s3://bucket/prefix", ""},
		{true, "", "a per-process temporary directory cannot be"},
		{true, "mem://x", "mem://x (memory of one process) cannot be"},
	} {
		job := &Job{Name: "j", Recovery: Recovery{Checkpointing: tc.checkpointing, Storage: tc.storage}}
		err := job.CheckSharedStorage()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("checkpointing %v, storage %q: %v, want no error", tc.checkpointing, tc.storage, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `job "j"`)):
			t.Errorf("checkpointing %v, storage %q: %v, want an error naming the job with %q", tc.checkpointing, tc.storage, err, tc.want)
		}
	}
}

// TestSameBuild: builds agree only with equal fingerprints, and the refusal says why.
func TestSameBuild(t *testing.T) {
	a, b := [32]byte{1}, [32]byte{2}
	if err := SameBuild("j", a, a); err != nil {
		t.Fatal(err)
	}
	if err := SameBuild("j", a, b); err == nil || !strings.Contains(err.Error(), "depends on something other than its arguments") {
		t.Fatalf("different fingerprints: %v", err)
	}
}

// TestUndoReleasesLastFirst: what a run opened is released in the reverse order, as deferred calls are
// (the metrics server before the storage it reads, the storage before its temporary directory).
func TestUndoReleasesLastFirst(t *testing.T) {
	var got []int
	func() {
		var u undo
		defer u.run() // as Run releases: pushed after the defer statement
		for i := range 3 {
			u.push(func() { got = append(got, i) })
		}
	}()
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("released %v, want %v", got, want)
	}
}

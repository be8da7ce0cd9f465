package wordcount

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSortedSinkKeepsCheckpointedCounts restores the sink from a checkpoint taken inside the burst of
// counts at the end of the input: the restored writer writes the counts from before the checkpoint and
// those after it, not those the failed attempt got after it.
func TestSortedSinkKeepsCheckpointedCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.txt")
	s := &sortedSink{path: path}
	w := &sortedWriter{s: s}
	for _, c := range []WordCount{{"b", 2}, {"größe", 7}} {
		if err := w.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := w.SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(WordCount{"lost", 1}) // after the checkpoint: comes again if it belongs to the output
	w2 := &sortedWriter{s: s, attempt: 1}
	if err := w2.RestoreState(snap); err != nil {
		t.Fatal(err)
	}
	w2.Write(WordCount{"a", 3})
	if err := w2.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "a\t3\nb\t2\ngröße\t7\n" {
		t.Fatalf("output %q, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {5}, snap[:len(snap)-1], append(snap, 0)} {
		if err := (&sortedWriter{s: s}).RestoreState(bad); err == nil || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("restore of % x: %v, want a malformed-state error", bad, err)
		}
	}
}

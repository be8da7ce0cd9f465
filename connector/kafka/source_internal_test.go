package kafka

import (
	"fmt"
	"strings"
	"testing"
)

// TestJavaHash pins javaHash to Java's String.hashCode (values computed by the JVM), including a string
// outside the BMP (two UTF-16 code units) and one whose hash overflows 32 bits.
func TestJavaHash(t *testing.T) {
	for s, want := range map[string]int32{"": 0, "in": 3365, "hello": 99162322, "orders-2026": -1815790870, "ü🙂": 2015137} {
		if got := javaHash(s); got != want {
			t.Errorf("javaHash(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestOwnerSpreadsEvenly checks the assignment rule: every subtask of every parallelism gets the
// partitions of a topic in turn (counts differ by at most one), from a start that depends on the topic.
func TestOwnerSpreadsEvenly(t *testing.T) {
	starts := map[int]bool{}
	for _, topic := range []string{"in", "orders", "clicks-eu", "a", "ü🙂"} {
		for n := 1; n <= 7; n++ {
			for parts := int32(1); parts <= 20; parts++ {
				count := make([]int, n)
				for p := range parts {
					count[owner(tp{topic, p}, n)]++
				}
				lo, hi := count[0], count[0]
				for _, c := range count {
					lo, hi = min(lo, c), max(hi, c)
				}
				if hi-lo > 1 {
					t.Fatalf("topic %q, %d partitions over %d subtasks: %v", topic, parts, n, count)
				}
			}
			// Partition p+1 goes to the subtask after partition p's.
			if a, b := owner(tp{topic, 0}, n), owner(tp{topic, 1}, n); b != (a+1)%n {
				t.Fatalf("topic %q at %d: partition 0 to %d, 1 to %d", topic, n, a, b)
			}
		}
		starts[owner(tp{topic, 0}, 7)] = true
	}
	if len(starts) < 2 {
		t.Fatalf("every topic starts at the same subtask: %v", starts)
	}
	// As Flink's KafkaSourceEnumerator computes it on the JVM: ((3365*31) & 0x7FFFFFFF) % 3 = 104315 % 3 = 2.
	if got := fmt.Sprint(owner(tp{"in", 0}, 3), owner(tp{"in", 5}, 3)); got != "2 1" {
		t.Fatalf("owners of in[0] and in[5] at 3: %s, want 2 1", got)
	}
}

// TestRestoreOldFormat restores the reader bytes of the source before its offsets were list state (per
// partition of its one topic, the offset of the next record, as uvarints): they become the topic's
// restored offsets, and the job counts as started (partitions they do not list start at their first
// record). A source of several topics refuses them, naming why.
func TestRestoreOldFormat(t *testing.T) {
	old := []byte{2, 0, 7, 3, 0x90, 0x4e} // partition 0 at 7, partition 3 at 10000
	r := &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Topic: "in"}}, restored: map[tp]int64{}}
	if err := r.RestoreState(old); err != nil {
		t.Fatal(err)
	}
	if want := map[tp]int64{{"in", 0}: 7, {"in", 3}: 10000}; fmt.Sprint(r.restored) != fmt.Sprint(want) || !r.wasStarted {
		t.Fatalf("restored %v (started %v), want %v", r.restored, r.wasStarted, want)
	}
	if err := r.RestoreState(old[:4]); err == nil {
		t.Fatal("a truncated state restored")
	}
	r = &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Topics: []string{"a", "b"}}}, restored: map[tp]int64{}}
	if err := r.RestoreState(old); err == nil || !strings.Contains(err.Error(), "restore it with its one topic first") {
		t.Fatalf("two topics: %v", err)
	}
}

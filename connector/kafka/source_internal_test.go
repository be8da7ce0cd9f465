package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
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
	r := &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Topic: "in"}}, restored: map[tp]int64{}, ctx: fakeCtx{i: 0, p: 3}}
	if err := r.RestoreState(old); err != nil {
		t.Fatal(err)
	}
	if want := map[tp]int64{{"in", 0}: 7, {"in", 3}: 10000}; fmt.Sprint(r.restored) != fmt.Sprint(want) || !r.wasStarted {
		t.Fatalf("restored %v (started %v), want %v", r.restored, r.wasStarted, want)
	}
	// The old checkpoint split the partitions by p mod P: this run keeps that rule (in[3] is subtask 0's
	// at 3, where the new rule gives it to subtask 2).
	if !r.mine(tp{"in", 0}) || !r.mine(tp{"in", 3}) || r.mine(tp{"in", 1}) || owner(tp{"in", 3}, 3) != 2 {
		t.Fatal("a reader restored from the old format does not keep the p mod P assignment")
	}
	if err := r.RestoreState(old[:4]); err == nil {
		t.Fatal("a truncated state restored")
	}
	r = &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Topics: []string{"a", "b"}}}, restored: map[tp]int64{}}
	if err := r.RestoreState(old); err == nil || !strings.Contains(err.Error(), "restore it with its one topic first") {
		t.Fatalf("two topics: %v", err)
	}
}

type fakeCtx struct {
	runnel.RuntimeContext
	i, p int
}

func (c fakeCtx) SubtaskIndex() int { return c.i }
func (c fakeCtx) Parallelism() int  { return c.p }

type fakeList struct{ vs []partOffset }

func (l *fakeList) Get() []partOffset      { return l.vs }
func (l *fakeList) Add(v partOffset)       { l.vs = append(l.vs, v) }
func (l *fakeList) Update(vs []partOffset) { l.vs = append([]partOffset(nil), vs...) }
func (l *fakeList) Clear()                 { l.vs = nil }

// TestSnapshotBeforeFirstPoll takes a checkpoint of readers that have not polled yet: one restored after
// a rescale (union state: every old subtask's offsets) passes on the offsets of its own partitions, and
// only those (another subtask's newer ones must not meet stale copies at the next restore); one of a job
// that never started writes nothing, not even that it started, so that a restore starts at StartAt.
func TestSnapshotBeforeFirstPoll(t *testing.T) {
	union := []partOffset{{Partition: -1}, {"in", 0, 10}, {"in", 2, 12}, {"in", 4, 14}, {Partition: -1}, {"in", 1, 11}, {"in", 3, 13}, {"in", 5, 15}}
	for i := range 3 {
		l := &fakeList{vs: union}
		r := &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Topic: "in"}}, ctx: fakeCtx{i: i, p: 3}, state: l, restored: map[tp]int64{}}
		if _, err := r.SnapshotState(1); err != nil {
			t.Fatal(err)
		}
		want := []partOffset{{Partition: -1}}
		for p := range int32(6) {
			if owner(tp{"in", p}, 3) == i {
				want = append(want, partOffset{"in", p, 10 + int64(p)})
			}
		}
		if fmt.Sprint(l.vs) != fmt.Sprint(want) {
			t.Fatalf("subtask %d of 3 snapshot %v, want %v", i, l.vs, want)
		}
	}
	l := &fakeList{}
	r := &sourceReader[int]{src: &source[int]{cfg: SourceConfig{Topic: "in"}}, ctx: fakeCtx{i: 0, p: 2}, state: l, restored: map[tp]int64{}}
	if _, err := r.SnapshotState(1); err != nil || len(l.vs) != 0 {
		t.Fatalf("a reader that never started snapshot %v, %v; want nothing", l.vs, err)
	}
}

// collected is a runnel.Collector that keeps what it is given.
type collected struct{ vs []int64 }

func (c *collected) Collect(v int64) { c.vs = append(c.vs, v) }

// TestPollEmitsAtMostMaxPollRecords polls a bounded reader whose fetch goroutine handed over batches of
// 7 and 3 records of one partition: each poll emits at most MaxPollRecords, in offset order, keeps the
// rest of its batch for the next poll, and the partition reaches its stopping offset (the batch's
// reached list) only with its batch's last record.
func TestPollEmitsAtMostMaxPollRecords(t *testing.T) {
	p := tp{"in", 0}
	recs := func(from, to int64) []*kgo.Record {
		var rs []*kgo.Record
		for o := from; o < to; o++ {
			rs = append(rs, &kgo.Record{Topic: "in", Partition: 0, Offset: o})
		}
		return rs
	}
	// reach pauses the partition's fetching: a client that never connects anywhere takes that.
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tc := range []struct {
		max   int
		polls []int // records emitted by each poll
	}{
		{0, []int{7, 3}},       // the default bound is above both batches
		{10, []int{7, 3}},      // a poll never spans two batches
		{3, []int{3, 3, 1, 3}}, // the rest of a batch comes first
		{1, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	} {
		r := &sourceReader[int64]{
			src: &source[int64]{cfg: SourceConfig{Topic: "in", Bounded: true, MaxPollRecords: tc.max},
				decode: func(rec Record) (int64, error) { return rec.Offset, nil }},
			started: true, cl: cl, offsets: map[tp]int64{p: 0}, end: map[tp]int64{p: 10}, done: map[tp]bool{},
			fetched: []fetched{{recs: recs(0, 7)}, {recs: recs(7, 10), reached: []tp{p}}},
		}
		var polls []int
		out := &collected{}
		for st := runnel.MoreAvailable; st != runnel.EndOfInput; {
			if len(polls) > 20 {
				t.Fatalf("MaxPollRecords %d: no end after polls %v", tc.max, polls)
			}
			before := len(out.vs)
			var err error
			if st, err = r.PollNext(out); err != nil {
				t.Fatal(err)
			}
			polls = append(polls, len(out.vs)-before)
			if st != runnel.EndOfInput && r.done[p] {
				t.Fatalf("MaxPollRecords %d: partition done before its end, after polls %v", tc.max, polls)
			}
		}
		if fmt.Sprint(polls) != fmt.Sprint(tc.polls) || fmt.Sprint(out.vs) != "[0 1 2 3 4 5 6 7 8 9]" {
			t.Errorf("MaxPollRecords %d: polls %v emitted %v, want polls %v of 0..9 in order", tc.max, polls, out.vs, tc.polls)
		}
	}
}

// TestFetchWaitsForTheTaskToTakeABatch holds the fetch goroutine's wait to the task's polls: with
// maxBacklog batches waiting it waits, a poll that takes a whole batch signals it (one that takes part
// of a batch does not), and the wait then returns with a batch fewer waiting.
func TestFetchWaitsForTheTaskToTakeABatch(t *testing.T) {
	p := tp{"in", 0}
	var waiting []fetched
	for o := range int64(maxBacklog) {
		waiting = append(waiting, fetched{recs: []*kgo.Record{{Topic: "in", Offset: 2 * o}, {Topic: "in", Offset: 2*o + 1}}})
	}
	r := &sourceReader[int64]{
		src: &source[int64]{cfg: SourceConfig{Topic: "in", MaxPollRecords: 1},
			decode: func(rec Record) (int64, error) { return rec.Offset, nil }},
		started: true, offsets: map[tp]int64{p: 0}, done: map[tp]bool{},
		fetched: slices.Clone(waiting), ready: make(chan struct{}, 1), taken: make(chan struct{}, 1),
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if n, ok := r.awaitRoom(ended); ok || n != maxBacklog {
		t.Fatalf("awaitRoom with %d batches waiting = %d, %v; want it to wait", maxBacklog, n, ok)
	}
	out := &collected{}
	for i, signalled := range []bool{false, true} { // half of the first batch, then the rest
		if _, err := r.PollNext(out); err != nil {
			t.Fatal(err)
		}
		if got := len(r.taken) == 1; got != signalled {
			t.Fatalf("after poll %d: taken signalled %v, want %v", i+1, got, signalled)
		}
	}
	if n, ok := r.awaitRoom(context.Background()); !ok || n != maxBacklog-1 {
		t.Fatalf("awaitRoom after a batch was taken = %d, %v; want %d, true", n, ok, maxBacklog-1)
	}
	if fmt.Sprint(out.vs) != "[0 1]" {
		t.Fatalf("polls emitted %v, want [0 1]", out.vs)
	}
}

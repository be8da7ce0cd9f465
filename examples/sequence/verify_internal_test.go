package sequence

import (
	"strings"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/internal/run"
)

// A violation makes the run fail (the command exits 1); every other verdict passes.
func TestVerify(t *testing.T) {
	finished := &runnel.JobResult{Status: "FINISHED"}
	for _, tc := range []struct {
		name string
		c    Checker
		want string // "" for no error
	}{
		{"ok", Checker{Records: 10, ExpectedRecords: 10, Verdict: VerdictOK}, ""},
		{"incomplete", Checker{Records: 4, ExpectedRecords: 10, Verdict: VerdictIncomplete}, ""},
		{"approximate", Checker{Records: 8, Lost: 2, ExpectedRecords: 10, Verdict: VerdictApproximateOK}, ""},
		{"violation", Checker{Records: 9, Duplicated: 3, ExpectedRecords: 10, Verdict: VerdictViolation}, "VIOLATION: 9 records of 10, lost 0 (the failovers reported 0), duplicated 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := verify(tc.c, finished)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("verify: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("verify: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestCheckerCountsStaleKeysLost: at the end of a bounded run every key in a check subtask's state is
// reported final. Under approximate recovery a check subtask restarted without a checkpoint that gets none
// of a key's records leaves that key's older counters, from the attempt whose state is gone, at the sink:
// the key's records are all lost, which is what the failovers report. Counting its old counters instead
// judged a correct run a VIOLATION (records and loss adding up to less than the records generated).
func TestCheckerCountsStaleKeysLost(t *testing.T) {
	// 2 keys from 1 source subtask, 10 records each; the approximate failover reported key 1's 10 lost.
	res := &runnel.JobResult{Status: "FINISHED", Failovers: []runnel.FailoverResult{{Strategy: "approximate"}},
		FailoverTotals: runnel.FailoverTotals{Edges: []runnel.EdgeLossResult{{From: "map", To: checkName, RecordsLost: 10}}}}
	j := &Job{gen: generator{keys: 2, p: 1, records: 20}}
	j.sink = run.NewLatestSink(func(c Counters) int64 { return c.Key }, newer)
	w, err := j.sink.CreateWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Counters{
		{Key: 0, Records: 10, Seen: 10, Last: 9, Attempt: 1, Final: true},
		{Key: 1, Records: 4, Seen: 4, Last: 3, Attempt: 0}, // the failed attempt's last report of key 1
	} {
		if err := w.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got := j.Checker(res)
	want := Checker{Records: 10, Lost: 10, Keys: 2, ExpectedRecords: 20, Verdict: VerdictApproximateOK}
	if got != want {
		t.Fatalf("checker %+v, want %+v", got, want)
	}
}

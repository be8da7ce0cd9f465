package sequence_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/internal/run"
	"github.com/runnel-dev/runnel/examples/sequence"
)

func TestObserveRules(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		seqs                          []int64
		records, lost, dup, ooo, last int64
		gaps                          []int64
		anomalies                     int
	}{
		{"in order", []int64{0, 1, 2, 3}, 4, 0, 0, 0, 3, nil, 0},
		{"first record late", []int64{2, 3}, 2, 2, 0, 0, 3, []int64{0, 1}, 1},
		{"gap", []int64{0, 1, 5, 6}, 4, 3, 0, 0, 6, []int64{2, 4}, 1},
		{"repeat of last", []int64{0, 1, 1, 2}, 3, 0, 1, 0, 2, nil, 1},
		{"replay of a run", []int64{0, 1, 2, 3, 1, 2, 3, 4}, 5, 0, 3, 0, 4, nil, 3},
		{"swap", []int64{0, 2, 1, 3}, 4, 0, 0, 1, 3, nil, 2},
		{"late into middle of gap", []int64{0, 5, 2}, 3, 3, 0, 1, 5, []int64{1, 1, 3, 4}, 2},
		{"gap filled from both ends", []int64{0, 4, 1, 3, 2}, 5, 0, 0, 3, 4, nil, 4},
		{"late then duplicate of late", []int64{0, 3, 1, 1}, 3, 1, 1, 1, 3, []int64{2, 2}, 3},
		{"negative seq", []int64{0, -1}, 1, 0, 1, 0, 0, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sequence.NewKeyState()
			anomalies := 0
			for _, q := range tc.seqs {
				if s.Observe(q) {
					anomalies++
				}
			}
			if s.Records != tc.records || s.Lost != tc.lost || s.Duplicated != tc.dup || s.OutOfOrder != tc.ooo ||
				s.Last != tc.last || !slices.Equal(s.Gaps, tc.gaps) || anomalies != tc.anomalies || s.Seen != int64(len(tc.seqs)) {
				t.Fatalf("%+v, %d anomalies; want records %d lost %d dup %d ooo %d last %d gaps %v, %d anomalies",
					s, anomalies, tc.records, tc.lost, tc.dup, tc.ooo, tc.last, tc.gaps, tc.anomalies)
			}
		})
	}
}

func TestEndInputCountsMissingTail(t *testing.T) {
	s := sequence.NewKeyState()
	for _, q := range []int64{0, 1, 2} {
		s.Observe(q)
	}
	s.EndInput(5)
	if s.Lost != 2 || s.Records != 3 || s.Last != 4 {
		t.Fatalf("%+v", s)
	}
	s.EndInput(5) // idempotent
	if s.Lost != 2 {
		t.Fatalf("%+v", s)
	}
}

func TestGapsAreBounded(t *testing.T) {
	s := sequence.NewKeyState()
	for i := int64(0); i < 3*sequence.MaxGaps; i++ {
		s.Observe(2 * i) // every odd seq is skipped
	}
	if len(s.Gaps) != 2*sequence.MaxGaps {
		t.Fatalf("%d gap bounds, want %d", len(s.Gaps), 2*sequence.MaxGaps)
	}
	// seq 1 was forgotten: it counts as duplicated, not as late.
	s.Observe(1)
	if s.Duplicated != 1 || s.OutOfOrder != 0 {
		t.Fatalf("%+v", s)
	}
	// The newest gap is still known.
	s.Observe(s.Last - 1)
	if s.OutOfOrder != 1 {
		t.Fatalf("%+v", s)
	}
}

func TestExpectedSplitsRecords(t *testing.T) {
	for _, tc := range []struct {
		records uint64
		keys, p int
	}{{20_000, 8, 2}, {1001, 7, 3}, {5, 16, 4}, {3, 3, 3}, {100, 5, 1}} {
		var sum int64
		for k := int64(0); k < int64(tc.keys); k++ {
			sum += sequence.Expected(tc.records, tc.keys, tc.p, k)
		}
		if sum != int64(tc.records) {
			t.Errorf("%+v: expected records sum to %d", tc, sum)
		}
	}
}

func runJob(t *testing.T, job *sequence.Job, opts ...runnel.Option) *runnel.JobResult {
	t.Helper()
	env := runnel.NewEnvironment(opts...)
	if err := job.Build(env, run.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "sequence")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "FINISHED" {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	return res
}

// checkExact asserts that the checker saw every generated record exactly once and that each key's final
// counters match what the generator implies.
func checkExact(t *testing.T, job *sequence.Job, res *runnel.JobResult, records uint64, keys, p int) {
	t.Helper()
	c := job.Checker(res)
	want := sequence.Checker{Records: int64(records), Keys: keys, ExpectedRecords: int64(records), Verdict: sequence.VerdictOK}
	if c != want || !c.OK() {
		t.Fatalf("checker %+v, want %+v", c, want)
	}
	for k, v := range job.Latest() {
		n := sequence.Expected(records, keys, p, k)
		if !v.Final || v.Records != n || v.Seen != n || v.Last != n-1 {
			t.Fatalf("key %d: %+v, want %d records", k, v, n)
		}
	}
	var b strings.Builder
	job.Summary(&b, res)
	if !strings.Contains(b.String(), "OK") {
		t.Fatalf("summary: %s", b.String())
	}
}

func TestSequenceBounded(t *testing.T) {
	const records, keys, p = 20_000, 8, 2
	job := sequence.New(nil)
	job.Records, job.Keys = records, keys
	res := runJob(t, job, runnel.WithParallelism(p), runnel.WithTaskManagers(2))
	checkExact(t, job, res, records, keys, p)
	if len(res.Failovers) != 0 {
		t.Fatalf("failovers without failures: %+v", res.Failovers)
	}
	for _, name := range []string{"source", "map", "check", "sink"} {
		if res.Vertex(name) == nil {
			t.Fatalf("no vertex holds operator %q", name)
		}
	}
}

func TestSequenceRejectsFewerKeysThanSubtasks(t *testing.T) {
	job := sequence.New(nil)
	job.Keys = 2
	env := runnel.NewEnvironment(runnel.WithParallelism(3))
	if err := job.Build(env, run.Options{}); err == nil || !strings.Contains(err.Error(), "--keys") {
		t.Fatalf("err %v", err)
	}
}

func TestSequenceExactlyOnceAfterFailure(t *testing.T) {
	const records, keys, p = 20_000, 8, 2
	job := sequence.New(nil)
	job.Records, job.Keys = records, keys
	// The failure waits for checkpoint 2, so that the failover restores one however loaded the machine
	// is; the rate keeps the job running past it (a second).
	job.Rate = 20_000
	res := runJob(t, job, runnel.WithParallelism(p), runnel.WithTaskManagers(2),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 30 * time.Millisecond}),
		runnel.WithFailureInjection("map[0]@chk-2"),
		runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=10ms"))
	checkExact(t, job, res, records, keys, p)
	if len(res.Failovers) != 1 {
		t.Fatalf("failovers %+v, want 1", res.Failovers)
	}
	f := res.Failovers[0]
	if v := res.Vertex("map"); v == nil || f.Failed != v.Name+"[0]" {
		t.Fatalf("failover %+v: want the vertex of map, subtask 0", f)
	}
	if f.CheckpointRestored == nil {
		t.Fatalf("failover %+v restored no checkpoint", f)
	}
	if res.Checkpoints == nil || res.Checkpoints.Completed < 1 {
		t.Fatalf("checkpoints %+v", res.Checkpoints)
	}
	// The restarted check subtasks emitted the final counters from a later attempt.
	restarted := false
	for _, v := range job.Latest() {
		restarted = restarted || v.Attempt > 0
	}
	if !restarted {
		t.Fatal("no final counters came from a restarted attempt")
	}
}

// TestApproximateFailureOfTheChecker fails a check subtask with approximate local recovery: it and the sink
// restart, nothing upstream does, and the checker's loss is exactly the loss reported on the channels into
// check. The failover also reports the counter reports check[1] lost to the restarted sink, which are no
// sequence records (the soak run that found this counted them and cried VIOLATION).
func TestApproximateFailureOfTheChecker(t *testing.T) {
	const records, keys, p = 40_000, 8, 2
	job := sequence.New(nil)
	job.Records, job.Keys, job.Rate = records, keys, 20_000
	res := runJob(t, job, runnel.WithParallelism(p), runnel.WithChaining(false), runnel.WithTaskManagers(2),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 30 * time.Millisecond, ApproximateLocalRecovery: true}),
		runnel.WithFailureInjection("check[0]@5000"),
		runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"))
	if len(res.Failovers) != 1 {
		t.Fatalf("failovers %+v, want 1", res.Failovers)
	}
	f := res.Failovers[0]
	if f.Strategy != "approximate" || fmt.Sprint(f.Restarted) != "[check[0] sink[0]]" {
		t.Fatalf("failover %+v", f)
	}
	c := job.Checker(res)
	lost := sequence.CheckedLoss(res)
	if c.Duplicated != 0 || c.OutOfOrder != 0 || uint64(c.Lost) != lost || c.Records+c.Lost != records || lost == 0 {
		t.Fatalf("checker %+v, loss into check %d, failover %+v", c, lost, f)
	}
	var sum uint64
	for _, ch := range f.Channels {
		sum += ch.RecordsLost
	}
	if sum != f.RecordsLost {
		t.Fatalf("channels add up to %d records lost, the failover reports %d", sum, f.RecordsLost)
	}
	var out strings.Builder
	if err := job.Summary(&out, res); err != nil || !strings.Contains(out.String(), "OK for approximate recovery") {
		t.Fatalf("summary %q, %v", out.String(), err)
	}
}

// TestApproximateLocalRecovery fails one map subtask with approximate local recovery: only it and what is
// downstream of it restart, the sources and the other map subtask never stop, and the checker's loss is
// exactly the loss the failover reports.
func TestApproximateLocalRecovery(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []runnel.Option
	}{
		{"tcp", []runnel.Option{runnel.WithTaskManagers(2)}},
		{"local", []runnel.Option{runnel.WithTaskManagers(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const records, keys, p = 40_000, 8, 2
			job := sequence.New(nil)
			job.Records, job.Keys, job.Rate = records, keys, 20_000
			res := runJob(t, job, append([]runnel.Option{runnel.WithParallelism(p), runnel.WithChaining(false),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 30 * time.Millisecond, ApproximateLocalRecovery: true}),
				runnel.WithFailureInjection("map[0]@8000"),
				runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s")}, tc.opts...)...)
			if len(res.Failovers) != 1 {
				t.Fatalf("failovers %+v, want 1", res.Failovers)
			}
			f := res.Failovers[0]
			if f.Strategy != "approximate" || fmt.Sprint(f.Restarted) != "[map[0] check[0] check[1] sink[0]]" {
				t.Fatalf("failover %+v", f)
			}
			for _, v := range res.Vertices {
				for _, s := range v.Subtasks {
					want := 1
					if v.Name == "source" || (v.Name == "map" && s.Index == 1) {
						want = 0
					}
					if s.Attempt != want {
						t.Errorf("%s[%d] attempt %d, want %d", v.Name, s.Index, s.Attempt, want)
					}
				}
			}
			c := job.Checker(res)
			if c.Duplicated != 0 || c.OutOfOrder != 0 {
				t.Fatalf("checker %+v: approximate recovery lost records but must not duplicate or reorder", c)
			}
			if uint64(c.Lost) != f.RecordsLost || c.Records+c.Lost != records || sequence.CheckedLoss(res) != f.RecordsLost {
				t.Fatalf("checker %+v, failover reports %d lost (%d on sequence channels)", c, f.RecordsLost, sequence.CheckedLoss(res))
			}
			var out strings.Builder
			if err := job.Summary(&out, res); err != nil || !strings.Contains(out.String(), "OK for approximate recovery") {
				t.Fatalf("summary %q, %v", out.String(), err)
			}
			if f.RecordsLost == 0 || f.OutageMillis <= 0 {
				t.Fatalf("failover %+v: expected a loss and an outage", f)
			}
			if res.Checkpoints.Completed < 2 {
				t.Fatalf("checkpoints %+v", res.Checkpoints)
			}
		})
	}
}

// TestJudge covers the verdicts: a run that ended is judged in full, a run stopped short only on what it
// checked, and an anomaly is a violation either way.
func TestJudge(t *testing.T) {
	approx := func(status string, lost uint64) *runnel.JobResult {
		return &runnel.JobResult{Status: status, Failovers: []runnel.FailoverResult{{Strategy: "approximate", RecordsLost: lost,
			Channels: []runnel.ChannelLossResult{{From: "map[0]", To: "check[1]", RecordsLost: lost}}}},
			FailoverTotals: runnel.FailoverTotals{Failovers: 1, RecordsLost: lost,
				Edges: []runnel.EdgeLossResult{{From: "map", To: "check", RecordsLost: lost}}}}
	}
	// The sink restarted too and lost 3 of check's counter reports: the totals of a key may be stale.
	reportsLost := approx("FINISHED", 7)
	reportsLost.FailoverTotals.Edges = append(reportsLost.FailoverTotals.Edges, runnel.EdgeLossResult{From: "check", To: "sink", RecordsLost: 3})
	finished := &runnel.JobResult{Status: "FINISHED"}
	canceled := &runnel.JobResult{Status: "CANCELED"}
	for _, tc := range []struct {
		name string
		c    sequence.Checker
		res  *runnel.JobResult
		want sequence.Verdict
	}{
		{"finished exact", sequence.Checker{Records: 100, ExpectedRecords: 100}, finished, sequence.VerdictOK},
		{"finished short", sequence.Checker{Records: 90, Lost: 10, ExpectedRecords: 100}, finished, sequence.VerdictViolation},
		{"finished duplicated", sequence.Checker{Records: 100, Duplicated: 1, ExpectedRecords: 100}, finished, sequence.VerdictViolation},
		{"finished approximate, loss as reported", sequence.Checker{Records: 93, Lost: 7, ExpectedRecords: 100}, approx("FINISHED", 7), sequence.VerdictApproximateOK},
		{"finished approximate, loss beyond the report", sequence.Checker{Records: 92, Lost: 8, ExpectedRecords: 100}, approx("FINISHED", 7), sequence.VerdictViolation},
		{"finished approximate, final reports lost with the sink", sequence.Checker{Records: 80, Lost: 7, ExpectedRecords: 100}, reportsLost, sequence.VerdictApproximateOK},
		{"finished approximate, reports lost, loss beyond the report", sequence.Checker{Records: 80, Lost: 8, ExpectedRecords: 100}, reportsLost, sequence.VerdictViolation},
		{"finished approximate, no report lost, totals short", sequence.Checker{Records: 80, Lost: 7, ExpectedRecords: 100}, approx("FINISHED", 7), sequence.VerdictViolation},
		{"stopped by --duration, clean", sequence.Checker{Records: 4000, ExpectedRecords: 1_000_000}, canceled, sequence.VerdictIncomplete},
		{"stopped, unbounded, clean", sequence.Checker{Records: 4000}, canceled, sequence.VerdictIncomplete},
		{"stopped with a gap", sequence.Checker{Records: 4000, Lost: 1, ExpectedRecords: 1_000_000}, canceled, sequence.VerdictViolation},
		{"stopped with a reorder", sequence.Checker{Records: 4000, OutOfOrder: 1, ExpectedRecords: 1_000_000}, canceled, sequence.VerdictViolation},
		{"stopped approximate, part of the reported loss seen", sequence.Checker{Records: 4000, Lost: 3}, approx("CANCELED", 7), sequence.VerdictIncomplete},
		{"stopped approximate, more lost than reported", sequence.Checker{Records: 4000, Lost: 8}, approx("CANCELED", 7), sequence.VerdictViolation},
		{"failed, clean so far", sequence.Checker{Records: 10, ExpectedRecords: 100}, &runnel.JobResult{Status: "FAILED"}, sequence.VerdictIncomplete},
		{"no result", sequence.Checker{Records: 10, ExpectedRecords: 100}, nil, sequence.VerdictIncomplete},
	} {
		if got := sequence.Judge(tc.c, tc.res); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

package recovery

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
)

// TestApproximateAndFull runs the benchmark briefly with approximate and full failover and checks that
// the figures are sane: who restarted, what was lost, and that the loss the engine reports is the loss
// the checker sees.
func TestApproximateAndFull(t *testing.T) {
	const rate = 40_000
	rs, err := Run(context.Background(), Config{
		Failovers: []string{"approximate", "full"}, Duration: 2 * time.Second, FailAfter: 700 * time.Millisecond,
		Rate: rate, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	for _, r := range rs {
		t.Logf("%s: outage %d ms, sink gap %.1f ms (baseline %.1f), upstream ratio %.3f, lost %d (checker %d), restarted %v",
			r.Failover, r.OutageMS, r.SinkGapMS, r.BaselineMaxStallMS, r.UpstreamRatio, r.RecordsLost, r.CheckerRecordsLost, r.Restarted)
		if r.Engine != "runnel" || r.JobStatus != "CANCELED" || r.Failovers != 1 || r.Failed != "map[1]" || r.Subtasks != 16 {
			t.Errorf("%s: engine %q, status %s, %d failovers, failed %q, %d subtasks", r.Failover, r.Engine, r.JobStatus, r.Failovers, r.Failed, r.Subtasks)
		}
		if r.RestartedSubtasks != r.SubtasksWithNewAttempt || r.RestartedSubtasks != len(r.Restarted) {
			t.Errorf("%s: restarted_subtasks %d, subtasks with a new attempt %d, restarted %v", r.Failover, r.RestartedSubtasks, r.SubtasksWithNewAttempt, r.Restarted)
		}
		if r.KeysChecked != DefaultKeys || r.RecordsDuplicated != 0 {
			t.Errorf("%s: %d keys checked, %d duplicated", r.Failover, r.KeysChecked, r.RecordsDuplicated)
		}
		if r.CheckerRecordsLost != int64(r.RecordsLost) {
			t.Errorf("%s: the engine reports %d records lost, the checker saw %d", r.Failover, r.RecordsLost, r.CheckerRecordsLost)
		}
		if !r.OutageRecovered || r.SinkGapMS <= 0 || r.OutageMS < 0 || r.RecoveryMS < 0 || r.OutageMS > 1500 {
			t.Errorf("%s: outage %d ms, sink gap %.1f ms, recovered %v", r.Failover, r.OutageMS, r.SinkGapMS, r.OutageRecovered)
		}
		// The engine times the end of the outage by the restarted tails' first output (noted after the
		// buffer that held it), the sinks by their first write: the same event, seen from two sides, apart
		// by the processing of a buffer at most (milliseconds under -race on a loaded machine).
		if d := r.SinksFailureToOutputMS - float64(r.OutageMS); r.SinksFailureToOutputMS <= 0 || d < -15 || d > 15 {
			t.Errorf("%s: the sinks saw output again %.1f ms after the failure, the engine %d ms", r.Failover, r.SinksFailureToOutputMS, r.OutageMS)
		}
		if r.SourceRPSBefore < rate/2 || r.SourceRPSBefore > rate*3/2 || r.UpstreamRatio <= 0 || r.UpstreamRatio > 2 {
			t.Errorf("%s: sources emitted %d records/s before the failure (rate %d), ratio %.3f", r.Failover, r.SourceRPSBefore, rate, r.UpstreamRatio)
		}
		if r.CheckpointRestored == nil || r.CheckpointsCompleted < 1 {
			t.Errorf("%s: checkpoint restored %v, %d completed", r.Failover, r.CheckpointRestored, r.CheckpointsCompleted)
		}
		checkSeries(t, r, rate)
	}
	approx, full := rs[0], rs[1]
	want := []string{"map[1]", "check[0]", "check[1]", "check[2]", "check[3]", "sink[0]", "sink[1]", "sink[2]", "sink[3]"}
	got := slices.Clone(approx.Restarted)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("approximate restarted %v, want %v", approx.Restarted, want)
	}
	if approx.RecordsLost == 0 {
		t.Error("approximate: no records lost, but the restarted checkers rolled back to a checkpoint while the sources ran on")
	}
	if full.RestartedSubtasks != 16 || full.RecordsLost != 0 || full.RecordsDropped != 0 {
		t.Errorf("full: %d restarted, %d lost, %d dropped", full.RestartedSubtasks, full.RecordsLost, full.RecordsDropped)
	}

	var buf bytes.Buffer
	if err := WriteTable(&buf, rs); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"approximate", "full", "outage_ms", "upstream_throughput_ratio", "full / approximate outage"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, buf.String())
		}
	}
}

// checkSeries checks the throughput series of a run against the source rate: over the 500 ms before the
// failure, the sources emitted and the sinks received about rate records per second, a quarter of them on
// the affected path.
func checkSeries(t *testing.T, r *Result, rate int64) {
	t.Helper()
	s := r.Series
	if s == nil || s.BucketMS != DefaultSeriesBucket.Milliseconds() || s.StartMS > -500 || len(s.SinksRPS) != len(s.SourcesRPS) ||
		s.StartMS+float64(int64(len(s.SourcesRPS))*s.BucketMS) < 500 {
		t.Fatalf("%s: series %+v", r.Failover, s)
	}
	from := int(-(s.StartMS + 500) / float64(s.BucketMS))
	mean := func(vs []int64) int64 {
		var sum int64
		for _, v := range vs[from : from+int(500/s.BucketMS)] {
			sum += v
		}
		return sum / (500 / s.BucketMS)
	}
	src, sink, path := mean(s.SourcesRPS), mean(s.SinksRPS), mean(s.SinksAffectedRPS)
	if src < rate/2 || src > rate*3/2 || sink < rate/2 || sink > rate*3/2 || path < sink/8 || path > sink/2 {
		t.Errorf("%s: before the failure the sources emitted %d records/s, the sinks received %d (%d on the affected path), rate %d",
			r.Failover, src, sink, path, rate)
	}
}

// TestAfterState runs the scenario where the failing map is downstream of the keyed state: approximate
// recovery restarts map[1] and sink[1] only, and the sink-side checker sees exactly the loss the engine
// reports; full failover restarts everything and loses nothing.
func TestAfterState(t *testing.T) {
	rs, err := Run(context.Background(), Config{
		Failovers: []string{"approximate", "full"}, Duration: 2 * time.Second, FailAfter: 700 * time.Millisecond,
		Rate: 40_000, Scenario: ScenarioAfterState, StateBytes: 64, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	approx, full := rs[0], rs[1]
	for _, r := range rs {
		t.Logf("%s: outage %d ms, sink gap %.1f ms, lost %d (checker %d), restarted %v", r.Failover, r.OutageMS, r.SinkGapMS, r.RecordsLost, r.CheckerRecordsLost, r.Restarted)
		if r.SinksFailureToOutputMS <= 0 {
			t.Errorf("%s: no restarted sink wrote a record of the affected path", r.Failover)
		}
		if r.Scenario != ScenarioAfterState || r.StateBytesPerKey != 64 || r.Failed != "map[1]" || !r.OutageRecovered {
			t.Errorf("%s: scenario %q, %d state bytes, failed %q, recovered %v", r.Failover, r.Scenario, r.StateBytesPerKey, r.Failed, r.OutageRecovered)
		}
		if r.CheckerRecordsLost != int64(r.RecordsLost) || r.RecordsDuplicated != 0 {
			t.Errorf("%s: the engine reports %d records lost, the sink-side checker saw %d (%d duplicated)", r.Failover, r.RecordsLost, r.CheckerRecordsLost, r.RecordsDuplicated)
		}
	}
	got := slices.Clone(approx.Restarted)
	slices.Sort(got)
	if want := []string{"map[1]", "sink[1]"}; !slices.Equal(got, want) || approx.RecordsLost == 0 {
		t.Errorf("approximate restarted %v (want %v), lost %d", approx.Restarted, want, approx.RecordsLost)
	}
	if full.RestartedSubtasks != 16 || full.RecordsLost != 0 {
		t.Errorf("full: %d restarted, %d lost", full.RestartedSubtasks, full.RecordsLost)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Failovers: []string{"partial"}},
		{Parallelism: 1},
		{Keys: 6},
		{Rate: -1},
		{Duration: time.Second, FailAfter: 2 * time.Second},
		{Scenario: "sideways"},
		{StateBytes: -1},
		{StateBackend: "tape", Duration: time.Second, FailAfter: 500 * time.Millisecond},
	} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func TestSilences(t *testing.T) {
	epoch := time.Now().Add(-time.Hour)
	s := newSilences(epoch, 2, time.Millisecond, 4)
	s.observe(0)
	s.observe(1)
	time.Sleep(3 * time.Millisecond)
	s.observe(0)
	s.observe(0)
	end := s.last[0].Load() // path 0's last record; path 1's was 3 ms before
	got := s.finish(end)
	if len(got) != 2 {
		t.Fatalf("silences %+v, want one on each path", got)
	}
	for _, x := range got {
		if x.length() < int64(3*time.Millisecond) || x.open != (x.path == 1) {
			t.Errorf("silence %+v", x)
		}
	}
	if s.dropped.Load() != 0 {
		t.Errorf("%d dropped", s.dropped.Load())
	}
	full := newSilences(epoch, 1, 0, 1)
	for i := 0; i < 5; i++ {
		full.observe(0)
		time.Sleep(time.Microsecond)
	}
	if len(full.finish(int64(time.Since(epoch)))) != 1 || full.dropped.Load() == 0 {
		t.Errorf("a full buffer keeps %d, dropped %d", full.n.Load(), full.dropped.Load())
	}
}

func TestNoAllocationPerRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gaps    bool
		attempt int
	}{{"timing", false, 0}, {"timing, restarted attempt", false, 1}, {"timing and gaps", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			pr := newProbes(time.Now(), 4, 8, 16)
			w, err := (&timingSink{pr: pr, gaps: tc.gaps}).CreateWriter(sinkContext{subtask: 1, attempt: tc.attempt})
			if err != nil {
				t.Fatal(err)
			}
			var i int64
			for ; i < 8; i++ { // every key seen once: the gap checker's map has them all
				_ = w.Write(Checked{Key: i, Seq: i, Seen: i})
			}
			if n := testing.AllocsPerRun(1000, func() {
				i++
				_ = w.Write(Checked{Key: i % 8, Seq: i, Seen: i})
			}); n != 0 {
				t.Errorf("%v allocations per record at the sink", n)
			}
			if got := pr.restartedOutput[1].Load() != 0; got != (tc.attempt > 0) {
				t.Errorf("first output of attempt %d noted: %v", tc.attempt, got)
			}
		})
	}
}

// sinkContext is the runtime context of a sink writer under test.
type sinkContext struct{ subtask, attempt int }

func (c sinkContext) JobName() string             { return "test" }
func (c sinkContext) OperatorName() string        { return "sink" }
func (c sinkContext) TaskName() string            { return "sink" }
func (c sinkContext) SubtaskIndex() int           { return c.subtask }
func (c sinkContext) Parallelism() int            { return 4 }
func (c sinkContext) MaxParallelism() int         { return 128 }
func (c sinkContext) Attempt() int                { return c.attempt }
func (c sinkContext) Logger() *slog.Logger        { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func (c sinkContext) Done() <-chan struct{}       { return nil }
func (c sinkContext) Checkpointing() bool         { return false }
func (c sinkContext) Metrics() runnel.MetricGroup { return nil }

func TestEmittedAt(t *testing.T) {
	ss := []sample{{t: 10, n: 0}, {t: 20, n: 100}, {t: 40, n: 100}, {t: 50, n: 200}}
	for _, c := range []struct {
		t    int64
		want float64
	}{{0, 0}, {10, 0}, {15, 50}, {20, 100}, {30, 100}, {45, 150}, {60, 200}} {
		if got := emittedAt(ss, c.t); got != c.want {
			t.Errorf("emittedAt(%d) = %v, want %v", c.t, got, c.want)
		}
	}
	if f := firstEmission(ss); f != 10 {
		t.Errorf("firstEmission = %d, want 10", f)
	}
}

func TestSpeedup(t *testing.T) {
	if x, ok := Speedup(100, 5); !ok || x != 20 {
		t.Errorf("Speedup(100, 5) = %v, %v", x, ok)
	}
	if x, ok := Speedup(100, 0); ok || x != 100 {
		t.Errorf("Speedup(100, 0) = %v, %v", x, ok)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/examples/sequence"
)

// writes returns the times at ms milliseconds after at(0).
func writes(ms ...int64) []time.Time {
	var out []time.Time
	for _, m := range ms {
		out = append(out, at(m))
	}
	return out
}

func TestParseProgress(t *testing.T) {
	start := at(-5000)
	header := fmt.Sprintf("%s pid=7 subtask=0 attempt=1 start=%d\n", sequence.ProgressHeader, start.UnixMicro())
	for _, tc := range []struct {
		name, data string
		want       []time.Time
		wantErr    string
	}{
		{name: "reports", data: header + fmt.Sprintf("%d\n%d\n", at(-10).UnixMicro(), at(20).UnixMicro()), want: writes(-10, 20)},
		{name: "only the header", data: header},
		{name: "a line being written is left out", data: header + fmt.Sprintf("%d\n17", at(1).UnixMicro()), want: writes(1)},
		{name: "empty", data: "", wantErr: "no header line"},
		{name: "no start", data: sequence.ProgressHeader + " pid=7\n", wantErr: "names no start"},
		{name: "a bad start", data: sequence.ProgressHeader + " start=x\n", wantErr: "start"},
		{name: "a bad line", data: header + "12\nnope\n", wantErr: `line 3 "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := parseProgress("sink-0.log", []byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "sink-0.log") {
					t.Fatalf("err %v, want one naming the file and saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !l.Start.Equal(start) || len(l.Writes) != len(tc.want) {
				t.Fatalf("start %v, writes %v; want %v, %v", l.Start, l.Writes, start, tc.want)
			}
			for i := range tc.want {
				if !l.Writes[i].Equal(tc.want[i]) {
					t.Fatalf("write %d at %v, want %v", i, l.Writes[i], tc.want[i])
				}
			}
		})
	}
}

func TestMeasureJMLoss(t *testing.T) {
	steady := at(-3000)
	// A writer of the first leader's run, reporting every 10 ms until it stops 15 ms before the kill; its
	// silences before steady state do not count.
	old := progressLog{Name: "old", Start: at(-4000), Writes: writes(-3500, -3010, -2990, -2900, -2890, -15)}
	for _, tc := range []struct {
		name     string
		logs     []progressLog
		takeover int64
		want     jmLossSample
		wantErr  string
	}{
		{name: "restart: a new writer after the takeover", takeover: 2000,
			logs: []progressLog{old, {Name: "new", Start: at(2500), Writes: writes(3100, 3110, 3300)}},
			want: jmLossSample{TakeoverMillis: 2000, FirstOutputMillis: 3100, FirstOutputWriter: "new", LongestGapMillis: 3115, GapStartMillis: -15,
				OutputResumedMillis: 3100, BaselineMaxGapMillis: 2875, SinkWriters: 2}},
		{name: "continuity: the kept writer goes on through the takeover", takeover: 2000,
			logs: []progressLog{{Name: "kept", Start: at(-4000), Writes: writes(-2990, -2900, -100, 0, 90, 1990, 2001, 2100)}},
			want: jmLossSample{TakeoverMillis: 2000, FirstOutputMillis: 2001, FirstOutputWriter: "kept", LongestGapMillis: 1900, GapStartMillis: 90,
				OutputResumedMillis: 1990, BaselineMaxGapMillis: 2800, KeptWriterReportsAfterKill: 4, SinkWriters: 1}},
		{name: "the old writer still reports after the takeover, then a new one", takeover: 1000,
			logs: []progressLog{{Name: "old", Start: at(-4000), Writes: writes(-2990, -10, 1000, 1005)}, {Name: "new", Start: at(1500), Writes: writes(2500)}},
			want: jmLossSample{TakeoverMillis: 1000, FirstOutputMillis: 1000, FirstOutputWriter: "kept", LongestGapMillis: 1495, GapStartMillis: 1005,
				OutputResumedMillis: 2500, BaselineMaxGapMillis: 2980, KeptWriterReportsAfterKill: 2, SinkWriters: 2}},
		{name: "nothing after the takeover", takeover: 2000, logs: []progressLog{old}, wantErr: "nothing after the takeover"},
		{name: "nothing before the kill", takeover: 10,
			logs: []progressLog{{Name: "new", Start: at(5), Writes: writes(20)}}, wantErr: "nothing before the kill"},
		{name: "a takeover before the kill", takeover: -1, logs: []progressLog{old}, wantErr: "before the kill"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := measureJMLoss(tc.logs, steady, at(0), at(tc.takeover))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.KilledAt = at(0)
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tc.want)
			if string(gj) != string(wj) {
				t.Fatalf("got  %s\nwant %s", gj, wj)
			}
		})
	}
}

func TestAddChecker(t *testing.T) {
	ok := sequence.Checker{Records: 100, ExpectedRecords: 100, Verdict: sequence.VerdictOK}
	short := sequence.Checker{Records: 90, Lost: 10, ExpectedRecords: 100, Verdict: sequence.VerdictViolation}
	for _, tc := range []struct {
		name string
		r    jmLossReport
		want bool
	}{
		{name: "finished, every record once", r: jmLossReport{Status: "FINISHED", Checker: ok}, want: true},
		{name: "records lost", r: jmLossReport{Status: "FINISHED", Checker: short}},
		{name: "not finished", r: jmLossReport{Status: "CANCELED", Checker: ok}},
		{name: "nothing expected", r: jmLossReport{Status: "FINISHED", Checker: sequence.Checker{Verdict: sequence.VerdictOK}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s jmLossSample
			addChecker(&s, tc.r)
			if s.ExactlyOnce != tc.want || s.RecordsChecked != tc.r.Checker.Records || s.RecordsLost != tc.r.Checker.Lost ||
				s.Verdict != string(tc.r.Checker.Verdict) || s.CheckpointRestored != nil || s.Resumed {
				t.Fatalf("%+v, want exactly once %v", s, tc.want)
			}
		})
	}
}

func TestSummarizeJMLoss(t *testing.T) {
	samples := []jmLossSample{
		{TakeoverMillis: 2100, FirstOutputMillis: 3300, LongestGapMillis: 3310, BaselineMaxGapMillis: 100, ExactlyOnce: true},
		{TakeoverMillis: 1900, FirstOutputMillis: 2900, LongestGapMillis: 2950, BaselineMaxGapMillis: 140, ExactlyOnce: true},
		{TakeoverMillis: 2000, FirstOutputMillis: 4100, LongestGapMillis: 4000, BaselineMaxGapMillis: 90},
	}
	r := summarizeJMLoss(modeRestart, 2*time.Second, samples)
	if r.Mode != modeRestart || r.Runs != 3 || r.HATTLMillis != 2000 || r.TakeoverMillis != 2000 || r.FirstOutputMillis != 3300 ||
		r.LongestGapMillis != 3310 || r.BaselineMaxGapMillis != 100 || r.ExactlyOnceRuns != 2 ||
		r.Ranges.LongestGapMillis != (jmLossFigure{Median: 3310, Min: 2950, Max: 4000}) || r.Ranges.TakeoverMillis.Min != 1900 {
		t.Fatalf("%+v", r)
	}
	if r := summarizeJMLoss(modeContinuity, time.Second, nil); r.Runs != 0 || r.LongestGapMillis != 0 || r.Ranges.TakeoverMillis != (jmLossFigure{}) {
		t.Fatalf("no samples: %+v", r)
	}
}

func TestJMLossModes(t *testing.T) {
	for _, tc := range []struct {
		names   []string
		known   bool
		want    string
		wantErr string
	}{
		{names: []string{"restart"}, want: "restart [] []"},
		{names: []string{"restart", "continuity"}, known: true,
			want: "restart [--ha-continuity=false] [--ha-grace=0s]; continuity [--ha-continuity=true] [--ha-grace=30s]"},
		{names: []string{"continuity"}, wantErr: "no --ha-continuity"},
		{names: []string{"fast"}, known: true, wantErr: `invalid --mode "fast"`},
		{wantErr: "names no mode"},
	} {
		t.Run(strings.Join(tc.names, ","), func(t *testing.T) {
			ms, err := jmLossModes(tc.names, tc.known, 30*time.Second)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			var got []string
			for _, m := range ms {
				got = append(got, fmt.Sprintf("%s %v %v", m.name, m.jmArgs, m.tmArgs))
			}
			if err != nil || strings.Join(got, "; ") != tc.want {
				t.Fatalf("%q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestBenchJMLoss runs one small jm-loss run per mode for real: etcd, two JobManagers, three TaskManagers and
// the submission as processes, the leader SIGKILLed; the standby takes over and the job finishes exactly
// once in both modes. Under restart the sink is silent from the kill until after the takeover, and a new
// sink writer reports; under continuity the sink writer that ran before the kill goes on reporting through
// the takeover, and its longest silence is shorter than the time without a leader. No child is left.
func TestBenchJMLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster for about 30 s")
	}
	stdout, stderr, code := runCLI(t, "bench", "jm-loss", "--runs", "1", "--mode", "restart,continuity", "--duration", "6s",
		"--kill-after", "1s", "--rate", "500", "--json")
	pids := childPIDs(t, stderr)
	assertGone(t, pids)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	// Per mode: etcd, 2 JobManagers, 3 TaskManagers, the submission.
	if len(pids) != 14 {
		t.Errorf("started %d children, want 14:\n%s", len(pids), stderr)
	}
	res := map[string]jmLossResult{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var r jmLossResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
		if r.Runs != 1 || len(r.Samples) != 1 || r.ExactlyOnceRuns != 1 {
			t.Fatalf("%s", stdout)
		}
		s := r.Samples[0]
		if !s.ExactlyOnce || s.RecordsChecked != 6*500*4 || s.RecordsLost+s.RecordsDuplicated+s.RecordsOutOfOrder != 0 ||
			s.TakeoverMillis < 500 || s.FirstOutputMillis < s.TakeoverMillis || s.Mode != r.Mode {
			t.Errorf("%s: %+v", r.Mode, s)
		}
		res[r.Mode] = r
	}
	// Restart: the sink falls silent before the takeover (at the kill: the TaskManagers cancel at once), and
	// a new writer reports after it.
	if s := res[modeRestart].Samples; len(s) != 1 || s[0].GapStartMillis >= s[0].TakeoverMillis || s[0].OutputResumedMillis < s[0].TakeoverMillis ||
		s[0].FirstOutputWriter != "new" || s[0].SinkWriters < 2 || !s[0].Resumed || s[0].CheckpointRestored == nil {
		t.Errorf("restart: %+v", s)
	}
	// Continuity: the writer of before the kill goes on through the takeover.
	if s := res[modeContinuity].Samples; len(s) != 1 || s[0].FirstOutputWriter != "kept" || s[0].KeptWriterReportsAfterKill == 0 ||
		s[0].LongestGapMillis >= s[0].TakeoverMillis {
		t.Errorf("continuity: %+v", s)
	}
	if _, stderr, code := runCLI(t, "bench", "jm-loss", "--duration", "1s", "--kill-after", "2s"); code != exitUsage || !strings.Contains(stderr, "must run past the kill") {
		t.Errorf("--kill-after past --duration: exit %d, %s", code, stderr)
	}
}

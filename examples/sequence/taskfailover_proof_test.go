package sequence_test

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// The rest of the proof of task failover (docs/taskfailover.md §9): failures during a checkpoint,
// failures while an earlier task recovery still restarts or replays, a failure together with its
// upstream, and an in-flight log past its budget. Each run is judged by the checker (every record exactly
// once and in order per key) and by its failovers: a task failover restarted the failed subtask alone, and
// a fallback to region failover says why.

// proofJob is a run of the sequence job under task failover: records at rate per source subtask, over
// proofKeys keys at parallelism proofP, without chaining, checkpoints every interval.
type proofJob struct {
	records  uint64
	rate     float64
	interval time.Duration
	restart  string // the restart strategy ("": no backoff)
}

const proofKeys, proofP = 8, 2

// standard is the job of most of the proof: a second of input, a checkpoint every 30 ms.
var standard = proofJob{records: 60_000, rate: 30_000, interval: 30 * time.Millisecond}

// run runs j with the given failures injected, checks that the checker saw every record exactly once and
// in order, and returns the result.
func (j proofJob) run(t *testing.T, inject []string, opts ...runnel.Option) *runnel.JobResult {
	t.Helper()
	job := sequence.New(nil)
	job.Records, job.Keys, job.Rate = j.records, proofKeys, j.rate
	res := runJob(t, job, append([]runnel.Option{runnel.WithParallelism(proofP), runnel.WithFailover("task"),
		runnel.WithChaining(false),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: j.interval}),
		runnel.WithFailureInjection(inject...),
		runnel.WithRestartStrategy(cmp.Or(j.restart, "fixed-delay:attempts=6,delay=0s"))}, opts...)...)
	checkExact(t, job, res, j.records, proofKeys, proofP)
	return res
}

// want describes one expected failover: the subtask that failed, and for a fallback a word its reason
// must contain ("" for a task failover of the failed subtask alone, anyReason for a fallback that gives
// one).
type want struct {
	failed   string
	fallback string
}

// anyReason is a want's fallback when any stated reason will do.
const anyReason = "\x00any"

// checkFailovers compares the run's failovers with ws, in order: a task failover restarted exactly the
// failed subtask and lost nothing; a fallback is a region failover whose reason contains the word asked
// for. Then every subtask's attempt must be at most the number of restarts that named it, and above 0
// when one did.
func checkFailovers(t *testing.T, res *runnel.JobResult, ws ...want) {
	t.Helper()
	if len(res.Failovers) != len(ws) {
		t.Fatalf("%d failovers, want %d: %s", len(res.Failovers), len(ws), describe(res.Failovers))
	}
	restarts := map[string]int{}
	for i, f := range res.Failovers {
		w := ws[i]
		if !strings.HasPrefix(f.Failed, w.failed[:strings.Index(w.failed, "[")]) || !strings.HasSuffix(f.Failed, w.failed[strings.Index(w.failed, "["):]) {
			t.Fatalf("failover %d: %s failed, want %s: %s", i, f.Failed, w.failed, describe(res.Failovers))
		}
		if f.RecordsLost != 0 {
			t.Fatalf("failover %d lost %d records: %s", i, f.RecordsLost, describe(res.Failovers))
		}
		switch {
		case w.fallback == "":
			if f.Strategy != "task" || f.Fallback != "" || len(f.Restarted) != 1 || f.Restarted[0] != f.Failed {
				t.Fatalf("failover %d: want a task failover of %s alone: %s", i, f.Failed, describe(res.Failovers))
			}
		default:
			if f.Strategy != "region" || f.Fallback == "" || (w.fallback != anyReason && !strings.Contains(f.Fallback, w.fallback)) || len(f.Restarted) < 2 {
				t.Fatalf("failover %d: want a fallback to region failover because of %q: %s", i, w.fallback, describe(res.Failovers))
			}
		}
		for _, r := range f.Restarted {
			restarts[r]++
		}
	}
	// Failovers merged into one restart (a failure while an earlier one still stops its subtasks) give
	// the subtasks they share one new attempt, not two: the attempt is at most the count, and at least 1
	// for every subtask any failover restarted.
	for _, v := range res.Vertices {
		for _, s := range v.Subtasks {
			name := fmt.Sprintf("%s[%d]", v.Name, s.Index)
			if n := restarts[name]; s.Attempt > n || (n > 0) != (s.Attempt > 0) {
				t.Fatalf("%s runs attempt %d after %d restarts: %s", name, s.Attempt, n, describe(res.Failovers))
			}
		}
	}
}

// describe prints failovers for a failure message.
func describe(fs []runnel.FailoverResult) string {
	var b strings.Builder
	for i, f := range fs {
		fmt.Fprintf(&b, "\n  %d: failed %s, strategy %s, restarted %v, checkpoint %v, fallback %q, cause %q",
			i, f.Failed, f.Strategy, f.Restarted, ptr(f.CheckpointRestored), f.Fallback, f.Cause)
	}
	return b.String()
}

func ptr(p *int64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// TestTaskFailoverLogOverflowFallsBack gives the in-flight logs one chunk of memory each (1 MiB per
// logged subpartition of the TaskManager: 8 of them on one, 4 on each of two, so that every log has room
// before its consumer connects) and no disk to spill to, and lets no checkpoint complete before the
// failure, so that the logs must hold everything since the start. At the failure the logs the failed
// subtask needs hold 1.3 to 2.6 MB each, more than their share: they overflowed, and are incomplete. The
// failure then falls back to region failover, its producers restarting too, exactly once, and says the
// log was incomplete. Without the fallback the new attempt failed on the incomplete log again and again,
// until the restart strategy gave up.
func TestTaskFailoverLogOverflowFallsBack(t *testing.T) {
	overflow := proofJob{records: 400_000, rate: 200_000, interval: 10 * time.Second}
	for _, tc := range []struct {
		name   string
		opts   []runnel.Option
		inject string
		disk   int64 // WithInflightLogDisk
	}{
		{"map, local", []runnel.Option{runnel.WithInflightLogMemory(8 << 20)}, "map[0]@150000", runnel.NoInflightLogDisk},
		{"source, tcp", []runnel.Option{runnel.WithTaskManagers(2), runnel.WithInflightLogMemory(4 << 20)}, "source[1]@150000", runnel.NoInflightLogDisk},
		// The control: the same memory with room on disk spills, and the task failover works.
		{"map, local, spilling", []runnel.Option{runnel.WithInflightLogMemory(8 << 20)}, "map[0]@150000", 64 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := overflow.run(t, []string{tc.inject}, append([]runnel.Option{runnel.WithInflightLogDisk(tc.disk)}, tc.opts...)...)
			failed := tc.inject[:strings.Index(tc.inject, "@")]
			if tc.disk > 0 {
				checkFailovers(t, res, want{failed, ""})
				return
			}
			// The task failover is tried (the job master does not know the log overflowed); its new
			// attempt finds the log incomplete and falls back.
			checkFailovers(t, res, want{failed, ""}, want{failed, "in-flight log its replay needs was incomplete"})
			if f := res.Failovers[1]; !slices.Contains(f.Restarted, "source[0]") {
				t.Fatalf("the fallback restarted %v: the producers of the incomplete logs must restart too", f.Restarted)
			}
		})
	}
}

// TestTaskFailoverNextToAnotherRecovery fails a subtask while an earlier task failover is still in
// progress: its subtask waits out its backoff (restarting), or replays, or is the failed subtask itself,
// failing again in its replay. A neighbour's failure (a producer or consumer of the recovering subtask) is a
// task failover of its own, the two recovering together, each alone: a takeover leaves the stream its
// readers have as it is. So is the failure of a subtask not connected to it, and a failure after the
// earlier recovery is done. A subtask failing in its own replay fails over by task once more, and falls
// back to region failover the second time. Exactly once in every case.
func TestTaskFailoverNextToAnotherRecovery(t *testing.T) {
	backoff := standard
	backoff.restart = "fixed-delay:attempts=6,delay=500ms"
	for _, tc := range []struct {
		name   string
		job    proofJob
		opts   []runnel.Option
		inject []string
		want   []want
		// restartedToo must be in the fallback's restart: the consumers of the subtask a task failover
		// had put in the plan alone.
		restartedToo []string
	}{
		// map[0] waits 500 ms to restart; its source goes on, and fails 5000 records later (170 ms).
		{"upstream while it restarts", backoff, nil, []string{"map[0]@15000", "source[0]@20000"},
			[]want{{"map[0]", ""}, {"source[0]", ""}}, nil},
		// check[0] reads map[1] too, and fails 1500 records later (100 ms).
		{"consumer while its producer restarts, tcp", backoff, []runnel.Option{runnel.WithTaskManagers(2)},
			[]string{"map[0]@15000", "check[0]@24000"},
			[]want{{"map[0]", ""}, {"check[0]", ""}}, nil},
		// A producer and its consumer failing close together, in whatever order, each while the other
		// may still replay (want nil: each a task failover alone, in the order the job master heard them).
		{"producer and consumer close together", standard, nil,
			[]string{"map[0]@15000", "check[1]@7600", "map[0]@17000"}, nil, nil},
		// source[0]'s consumer fails after the source's task failover (it fell back before: a restarted
		// source never reported the end of a replay, and counted as replaying for the rest of the job).
		{"consumer of a restarted source", standard, nil, []string{"source[0]@10000", "map[0]@25000"},
			[]want{{"source[0]", ""}, {"map[0]", ""}}, nil},
		{"not connected to a restarted source, tcp", standard, []runnel.Option{runnel.WithTaskManagers(2)},
			[]string{"source[0]@10000", "map[1]@12000"}, []want{{"source[0]", ""}, {"map[1]", ""}}, nil},
		// The second injection fires at the first record the new attempt takes, in its replay: a failure
		// of the replay's own, which fails over by task once more; the third fires in that replay too,
		// and falls back.
		{"itself while it replays", standard, nil, []string{"map[0]@15000", "map[0]@15000"},
			[]want{{"map[0]", ""}, {"map[0]", ""}}, nil},
		{"itself twice while it replays", standard, nil, []string{"map[0]@15000", "map[0]@15000", "map[0]@15000"},
			[]want{{"map[0]", ""}, {"map[0]", ""}, {"map[0]", "it failed twice while restarting under task failover"}}, []string{"check[0]", "check[1]"}},
		{"two not connected at once, tcp", standard, []runnel.Option{runnel.WithTaskManagers(2)}, []string{"map[0]@15000", "map[1]@15000"},
			nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.job.run(t, tc.inject, tc.opts...)
			if tc.want == nil {
				// The order of two failures at once is the order the job master heard them in.
				ws := make([]want, len(res.Failovers))
				for i, f := range res.Failovers {
					ws[i] = want{failed: f.Failed}
				}
				checkFailovers(t, res, ws...)
				if len(ws) != len(tc.inject) {
					t.Fatalf("failovers %s, want one for each of %v", describe(res.Failovers), tc.inject)
				}
				return
			}
			checkFailovers(t, res, tc.want...)
			last := res.Failovers[len(res.Failovers)-1]
			for _, r := range tc.restartedToo {
				if !slices.Contains(last.Restarted, r) {
					t.Fatalf("the fallback restarted %v, not %s: %s", last.Restarted, r, describe(res.Failovers))
				}
			}
		})
	}
}

// TestTaskFailoverDuringACheckpoint fails a checker, a map and a source subtask one after the other while
// checkpoints follow each other back to back (one triggered as soon as the last completed, about one a
// millisecond), so that each failure strikes a checkpoint in progress: the failed subtask may have
// acknowledged it already (a source or map, which the checker's slower snapshot makes wait, on pebble
// above all), or not (the checker, aligning its two inputs or snapshotting), while the job master waits
// for the rest of the acknowledgements. The checkpoint in progress is aborted; the next ones complete;
// every failure, the later ones too, is a task failover of the failed subtask alone; exactly once.
func TestTaskFailoverDuringACheckpoint(t *testing.T) {
	busy := standard
	busy.interval = time.Millisecond
	inject := []string{"check[0]@15000", "map[0]@18000", "source[1]@25000"}
	for _, tc := range []struct {
		name string
		opts []runnel.Option
	}{
		{"memory, local", nil},
		{"memory, tcp", []runnel.Option{runnel.WithTaskManagers(2)}},
		{"pebble, local", []runnel.Option{runnel.WithStateBackend("pebble")}},
		{"pebble, tcp", []runnel.Option{runnel.WithStateBackend("pebble"), runnel.WithTaskManagers(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := busy.run(t, inject, tc.opts...)
			// Alone on a machine the three failures come in the order given, a checkpoint or more apart,
			// and each is a task failover. Under load (the whole -race suite, pebble) the checker lags
			// behind the maps, and the failures come in another order and closer together, each still a
			// task failover of its own (a consumer replays the buffers its producer's log holds, whatever
			// the producer does); a fallback says why (docs/taskfailover.md §7). Exactly once either way.
			ws := make([]want, len(res.Failovers))
			failed := map[string]bool{}
			for i, f := range res.Failovers {
				ws[i] = want{failed: f.Failed}
				if f.Strategy != "task" {
					ws[i].fallback = anyReason
				}
				failed[f.Failed] = true
			}
			checkFailovers(t, res, ws...)
			if len(failed) != len(inject) || res.Failovers[0].Strategy != "task" {
				t.Fatalf("failovers %s: want a task failover of each of %v", describe(res.Failovers), inject)
			}
			cp := res.Checkpoints
			// A failure between two checkpoints aborts none; three of them in a row between checkpoints
			// that leave well under a millisecond between them do not happen.
			if cp.Aborted < 1 {
				t.Fatalf("checkpoints %+v: no failure struck a checkpoint in progress", *cp)
			}
			for i, f := range res.Failovers {
				// The checkpoint restored (none: 0), the one the failure aborted, and at least one after it.
				if restored := cmp.Or(f.CheckpointRestored, new(int64)); cp.LastCompletedID < *restored+2 {
					t.Fatalf("failover %d restored checkpoint %s, the last completed is %d: no checkpoint completed after it",
						i, ptr(f.CheckpointRestored), cp.LastCompletedID)
				}
			}
			t.Logf("checkpoints %+v", *cp)
		})
	}
}

// TestTaskFailoverOfASourceTwice: a source subtask fails before the first checkpoint (its task failover
// restores none), then again after checkpoint 2, which it took after its first restart. Both failovers
// restart it alone. A restarted source replays by its reader, not by its determinant log; its log must
// still mark the checkpoints it takes from then on, or the second failover finds no mark of the
// checkpoint it restores and falls back ("its determinant log does not reach back", issue 28's V2).
// Chained (the source with its map, as V2 ran) and not.
func TestTaskFailoverOfASourceTwice(t *testing.T) {
	j := proofJob{records: 120_000, rate: 60_000, interval: 20 * time.Millisecond}
	for _, chained := range []bool{true, false} {
		t.Run(fmt.Sprintf("chained=%v", chained), func(t *testing.T) {
			res := j.run(t, []string{"source[0]@500", "source[0]@chk-2"}, runnel.WithChaining(chained))
			failed := "source[0]"
			if chained {
				failed = "source -> map[0]"
			}
			checkFailovers(t, res, want{failed: failed}, want{failed: failed})
		})
	}
}

package sequence_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// TestTaskFailoverExactlyOnce runs the sequence job under task failover (docs/taskfailover.md) with
// failures injected in a map subtask, a keyed checker subtask (two inputs, whose buffers arrive
// interleaved: the replay must take them in the recorded order) and a source subtask, twice in one
// subtask, and in two subtasks one after the other; local and TCP channels, memory and pebble state,
// chained and not. The checker must see every record exactly once and in order per key; only the failed
// subtasks have new attempts, one per failure; every failover says "task" and restarted just the failed
// subtask, and lost nothing.
func TestTaskFailoverExactlyOnce(t *testing.T) {
	const records, keys, p = 60_000, 8, 2
	// Each failure of a task with inputs replays what its producers sent since the restored checkpoint: over
	// the cases that must have happened. (What its consumers drop as duplicates may be nothing: with
	// checkpoints this frequent they often had nothing of it since the barrier, which flushes.)
	var replayed, dropped uint64
	defer func() {
		if !t.Failed() && replayed == 0 {
			t.Errorf("over every failover, %d records replayed (%d duplicates dropped): replays should be counted", replayed, dropped)
		}
	}()
	for _, tc := range []struct {
		name   string
		opts   []runnel.Option
		inject []string
		rate   float64 // per source subtask; 0 for 30,000 records/s
	}{
		{"map, local", []runnel.Option{runnel.WithChaining(false)}, []string{"map[0]@20000"}, 0},
		{"checker, tcp", []runnel.Option{runnel.WithChaining(false), runnel.WithTaskManagers(2)}, []string{"check[1]@15000"}, 0},
		{"source, pebble", []runnel.Option{runnel.WithChaining(false), runnel.WithStateBackend("pebble")}, []string{"source[0]@10000"}, 0},
		{"checker twice, chained, tcp, pebble", []runnel.Option{runnel.WithTaskManagers(2), runnel.WithStateBackend("pebble")},
			[]string{"check[0]@10000", "check[0]@30000"}, 0},
		// Slower, so that check[1] has replayed its input before map[0] fails (about 1.2 s later): a failure
		// next to a subtask still replaying falls back to region failover (docs/taskfailover.md), and
		// on a loaded machine the replay took longer than the 0.4 s between the two at full rate.
		{"checker then map", []runnel.Option{runnel.WithChaining(false), runnel.WithTaskManagers(2)}, []string{"check[1]@12000", "map[0]@25000"}, 10_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := sequence.New(nil)
			job.Records, job.Keys, job.Rate = records, keys, 30_000
			if tc.rate > 0 {
				job.Rate = tc.rate
			}
			opts := append([]runnel.Option{runnel.WithParallelism(p), runnel.WithFailover("task"),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 30 * time.Millisecond}),
				runnel.WithFailureInjection(tc.inject...),
				runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=10ms")}, tc.opts...)
			res := runJob(t, job, opts...)
			checkExact(t, job, res, records, keys, p)
			if len(res.Failovers) != len(tc.inject) {
				t.Fatalf("%d failovers, want %d: %+v", len(res.Failovers), len(tc.inject), res.Failovers)
			}
			failures := map[string]int{}
			for i, f := range res.Failovers {
				want := tc.inject[i][:strings.Index(tc.inject[i], "@")]
				if f.Strategy != "task" || len(f.Restarted) != 1 || f.RecordsLost+f.RecordsDropped+f.BuffersDropped != 0 || !strings.HasSuffix(f.Failed, want[strings.Index(want, "["):]) {
					t.Fatalf("failover %d: %+v, want task failover of %s alone, nothing lost or dropped", i, f, want)
				}
				if f.Restarted[0] != f.Failed {
					t.Fatalf("failover %d restarted %v, not the failed %s", i, f.Restarted, f.Failed)
				}
				failures[f.Failed]++
				checkReplayReport(t, i, f)
				replayed, dropped = replayed+f.RecordsReplayed, dropped+f.DuplicatesDropped
			}
			if tot := res.FailoverTotals; tot.RecordsReplayed != sumOf(res.Failovers, true) || tot.DuplicatesDropped != sumOf(res.Failovers, false) {
				t.Fatalf("totals replayed %d, dropped %d; the failovers say %d, %d", tot.RecordsReplayed, tot.DuplicatesDropped,
					sumOf(res.Failovers, true), sumOf(res.Failovers, false))
			}
			for _, v := range res.Vertices {
				for _, s := range v.Subtasks {
					name := fmt.Sprintf("%s[%d]", v.Name, s.Index)
					if int(s.Attempt) != failures[name] {
						t.Fatalf("%s runs attempt %d after %d failures of its own", name, s.Attempt, failures[name])
					}
				}
			}
		})
	}
}

// checkReplayReport checks the replay part of task failover i's report: records replayed only on channels
// into the failed subtask, duplicates dropped only on channels out of it, per channel adding up to the
// failover's totals.
func checkReplayReport(t *testing.T, i int, f runnel.FailoverResult) {
	t.Helper()
	var replayed, dropped uint64
	for _, c := range f.Replay {
		if (c.RecordsReplayed > 0 && c.To != f.Failed) || (c.DuplicatesDropped > 0 && c.From != f.Failed) {
			t.Fatalf("failover %d of %s reports %+v: replayed records are read by the failed subtask, duplicates are its own", i, f.Failed, c)
		}
		replayed, dropped = replayed+c.RecordsReplayed, dropped+c.DuplicatesDropped
	}
	if replayed != f.RecordsReplayed || dropped != f.DuplicatesDropped {
		t.Fatalf("failover %d: channels add up to %d replayed, %d dropped; it reports %d, %d", i, replayed, dropped, f.RecordsReplayed, f.DuplicatesDropped)
	}
	t.Logf("failover %d of %s: %d records replayed, %d duplicates dropped, by channel %+v", i, f.Failed, f.RecordsReplayed, f.DuplicatesDropped, f.Replay)
}

// sumOf sums the failovers' records replayed (replayed) or duplicates dropped.
func sumOf(fs []runnel.FailoverResult, replayed bool) uint64 {
	var n uint64
	for _, f := range fs {
		if replayed {
			n += f.RecordsReplayed
		} else {
			n += f.DuplicatesDropped
		}
	}
	return n
}

//go:build ucbugs

package sequence_test

import (
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// The smallest runs found that break exactly once with unaligned checkpoints (issue 33), each failing in
// most runs on the 2-core machine (the timing decides). They are behind the ucbugs build tag until the
// engine passes them:
//
//	go test -tags ucbugs -run UnalignedBug -v ./examples/sequence
//
// The tag also makes TestUnalignedProperty fail check subtasks under task failover, and runs
// TestUnalignedFailureDuringACheckpoint and the task failovers of keyed operators in
// TestNexmarkUnalignedUnderFailures (unalignedKnownBugs). Once these pass, the tag goes.

func init() { unalignedKnownBugs = true }

// unalignedBugJob runs the sequence job at parallelism 2, unchained, on one TaskManager, with unaligned
// checkpoints every interval and the failures inject, and requires every record exactly once.
func unalignedBugJob(t *testing.T, failover string, records uint64, rate, check float64, interval time.Duration, inject ...string) *runnel.JobResult {
	t.Helper()
	const keys, p = 16, 2
	job := sequence.New(nil)
	job.Records, job.Keys, job.Rate, job.CheckRate = records, keys, rate, check
	res := runJob(t, job, runnel.WithParallelism(p), runnel.WithChaining(false), runnel.WithTaskManagers(1),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: interval, Unaligned: true}),
		runnel.WithFailover(failover), runnel.WithFailureInjection(inject...),
		runnel.WithRestartStrategy("fixed-delay:attempts=20,delay=0s"))
	t.Logf("checkpoints %+v; failovers:\n%s", *res.Checkpoints, describeFailovers(res))
	checkExact(t, job, res, records, keys, p)
	return res
}

// TestUnalignedBugRegionLosesARecord: a check subtask fails after 3000 records under region (or full)
// failover; the restore of an unaligned checkpoint loses one record (two on some runs) on a channel into
// check, and the failover itself reports it lost ("lost 1" on map[i] -> check[i]), which a region
// failover never should. Found by TestUnalignedProperty, UNALIGNED_SEED=2 run 3 and UNALIGNED_SEED=4
// run 11.
func TestUnalignedBugRegionLosesARecord(t *testing.T) {
	for _, failover := range []string{"region", "full"} {
		t.Run(failover, func(t *testing.T) {
			res := unalignedBugJob(t, failover, 39_000, 65_000, 13_000, 90*time.Millisecond, "check[1]@3000")
			for _, f := range res.Failovers {
				if f.RecordsLost != 0 {
					t.Fatalf("a %s failover lost %d records", f.Strategy, f.RecordsLost)
				}
			}
		})
	}
}

// TestUnalignedBugTaskFailoverOfTheChecker: a check subtask fails under task failover. Its new attempt's
// replay diverges at once ("at step 2 the log says buffer(1), the channel has a event buffer"), and the
// fallback to region failover restarts only check[0] and the sink, not its producers, and loses the
// records in flight to it (thousands): exactly once is broken. A map's failure in the same job
// (TestUnalignedExactlyOnce) is a clean task failover.
func TestUnalignedBugTaskFailoverOfTheChecker(t *testing.T) {
	res := unalignedBugJob(t, "task", 60_000, 40_000, 20_000, 30*time.Millisecond, "check[0]@12000")
	if len(res.Failovers) != 1 || res.Failovers[0].Strategy != "task" || res.Failovers[0].Fallback != "" {
		t.Fatalf("want one task failover of check[0] alone:\n%s", describeFailovers(res))
	}
}

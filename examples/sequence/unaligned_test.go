package sequence_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// TestUnalignedExactlyOnce runs the sequence job with unaligned checkpoints and a slowed checker, which
// backpressures the maps and sources, under each failover strategy: a map subtask fails after checkpoint
// 2. Every record is checked exactly once (approximate: none twice, and the checker's loss is the loss the
// failover reports), and the checkpoints are unaligned: they hold records in flight.
func TestUnalignedExactlyOnce(t *testing.T) {
	for _, tc := range []struct {
		failover string
		tms      int
	}{
		{"region", 2}, {"region", 1}, {"task", 1}, {"task", 2}, {"approximate", 2}, {"full", 1},
	} {
		t.Run(fmt.Sprintf("%s/%dtm", tc.failover, tc.tms), func(t *testing.T) {
			const records, keys, p = 60_000, 8, 2
			job := sequence.New(nil)
			job.Records, job.Keys, job.Rate, job.CheckRate = records, keys, 40_000, 20_000
			res := runJob(t, job, runnel.WithParallelism(p), runnel.WithTaskManagers(tc.tms), runnel.WithChaining(false),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 50 * time.Millisecond, Unaligned: true}),
				runnel.WithFailover(tc.failover),
				runnel.WithFailureInjection("map[0]@chk-2"),
				runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=10ms"))
			if len(res.Failovers) != 1 {
				t.Fatalf("failovers %+v, want 1", res.Failovers)
			}
			if tc.failover == "approximate" {
				c := job.Checker(res)
				f := res.Failovers[0]
				if c.Duplicated != 0 || c.OutOfOrder != 0 || uint64(c.Lost) != f.RecordsLost || c.Records+c.Lost != records {
					t.Fatalf("checker %+v, failover reports %d lost", c, f.RecordsLost)
				}
			} else {
				checkExact(t, job, res, records, keys, p)
			}
			if res.Checkpoints == nil || res.Checkpoints.Completed < 2 {
				t.Fatalf("checkpoints %+v", res.Checkpoints)
			}
			t.Logf("failover %+v; checkpoints %+v", res.Failovers[0], res.Checkpoints)
		})
	}
}

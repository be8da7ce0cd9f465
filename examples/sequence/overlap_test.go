package sequence_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// TestApproximateLossExactUnderOverlappingFailures injects two or three failures close together (a map, a
// checker and sometimes a source subtask, within a few hundred records of each other, so that a failure
// often strikes while an earlier failover is still restarting or just restarted the same consumers) under
// approximate recovery, and requires the loss the failovers report to equal, record for record, the loss
// the checker's surviving state shows, with nothing duplicated or reordered. The schedule is drawn from a
// seeded generator, so a failing run is reproduced by its subtest name's specs; OVERLAP_SEED and
// OVERLAP_RUNS (default 6) pick other and more schedules.
func TestApproximateLossExactUnderOverlappingFailures(t *testing.T) {
	seed := envInt(t, "OVERLAP_SEED", 1)
	runs := envInt(t, "OVERLAP_RUNS", 6)
	rng := rand.New(rand.NewPCG(uint64(seed), 11))
	overlapping := 0
	for i := range runs {
		base := 3000 + rng.IntN(12000)
		targets := []string{fmt.Sprintf("map[%d]", rng.IntN(2)), fmt.Sprintf("check[%d]", rng.IntN(2))}
		if rng.IntN(3) == 0 {
			targets = append(targets, fmt.Sprintf("source[%d]", rng.IntN(2)))
		}
		rng.Shuffle(len(targets), func(a, b int) { targets[a], targets[b] = targets[b], targets[a] })
		var specs []string
		for j, tg := range targets {
			specs = append(specs, fmt.Sprintf("%s@%d", tg, base+j*rng.IntN(400)))
		}
		tms := 1 + rng.IntN(2)
		t.Run(fmt.Sprintf("%d/%s/tms=%d", i, strings.Join(specs, ","), tms), func(t *testing.T) {
			const records = 60_000
			job := sequence.New(nil)
			job.Records, job.Keys, job.Rate = records, 16, 30_000
			res := runJob(t, job, runnel.WithParallelism(2), runnel.WithChaining(false), runnel.WithTaskManagers(tms),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 50 * time.Millisecond}), runnel.WithFailover("approximate"),
				runnel.WithFailureInjection(specs...), runnel.WithRestartStrategy("fixed-delay:attempts=10,delay=0s"))
			c := job.Checker(res)
			reported := sequence.CheckedLoss(res)
			if c.Duplicated != 0 || c.OutOfOrder != 0 || c.Lost != int64(reported) || c.Records+c.Lost != c.ExpectedRecords {
				t.Fatalf("checker %+v, reported loss %d, failovers %+v", c, reported, res.Failovers)
			}
			if len(res.Failovers) >= 2 {
				overlapping++
			}
		})
	}
	t.Logf("%d of %d runs had two or more failovers", overlapping, runs)
}

// envInt reads a non-negative integer test setting from the environment (def when unset).
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

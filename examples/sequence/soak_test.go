//go:build soak

package sequence_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// TestSoak runs the checker job many times with one failure injected at a random subtask and record count,
// under every failover strategy, over local channels and TCP, and requires the checker's verdict each time:
// exactly once for full, region and task failover (which must also have restarted the failed subtask alone,
// or said why it fell back), the reported loss exactly for approximate recovery. It is
// behind the soak build tag (a few minutes):
//
//	go test -tags soak -run Soak -v ./examples/sequence
//
// SOAK_SEED picks another sequence of runs; SOAK_RUNS sets how many per strategy (default 12).
func TestSoak(t *testing.T) {
	seed := envInt(t, "SOAK_SEED", 1)
	runs := envInt(t, "SOAK_RUNS", 12)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	ops := []string{"source", "map", "check"}
	for _, failover := range []string{"full", "region", "approximate", "task"} {
		for i := range runs {
			op := fmt.Sprintf("%s[%d]@%d", ops[rng.IntN(len(ops))], rng.IntN(2), 2000+rng.IntN(30000))
			tms := 1 + rng.IntN(2)
			t.Run(fmt.Sprintf("%s/%d/%s/tms=%d", failover, i, op, tms), func(t *testing.T) {
				const records = 40_000
				job := sequence.New(nil)
				job.Records, job.Keys, job.Rate = records, 16, 40_000
				res := runJob(t, job, runnel.WithParallelism(2), runnel.WithChaining(false), runnel.WithTaskManagers(tms),
					runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 50 * time.Millisecond}), runnel.WithFailover(failover),
					runnel.WithFailureInjection(op), runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"))
				var out strings.Builder
				if err := job.Summary(&out, res); err != nil {
					t.Fatal(err)
				}
				// Exactly once under full and region failover; under approximate recovery the loss must be
				// exactly the reported one (which may be none: a failed source rewinds with its downstream).
				verdict := job.Checker(res).Verdict
				if verdict != sequence.VerdictOK && (failover != "approximate" || verdict != sequence.VerdictApproximateOK) {
					t.Fatalf("%s (failovers %+v)", out.String(), res.Failovers)
				}
				if failover == "task" {
					for _, f := range res.Failovers {
						if (f.Strategy != "task" || len(f.Restarted) != 1) && f.Fallback == "" {
							t.Fatalf("task failover %+v restarted more than the failed subtask without saying why", f)
						}
					}
				}
			})
		}
	}
}

// TestFailoverPropertySoak is the long version of TestFailoverProperty: PROPERTY_RUNS (default 50) seeded
// runs per failover strategy of PROPERTY_RECORDS (default 1,000,000) records each, the fallbacks counted by reason:
//
//	go test -tags soak -run FailoverPropertySoak -v ./examples/sequence
func TestFailoverPropertySoak(t *testing.T) {
	propertyTest(t, envInt(t, "PROPERTY_SEED", 1), envInt(t, "PROPERTY_RUNS", 50), uint64(envInt(t, "PROPERTY_RECORDS", 1_000_000)))
}

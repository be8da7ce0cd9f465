package sequence_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// propertyRun is one seeded run of the property test: the job's shape and the failures injected.
type propertyRun struct {
	failover string
	chained  bool
	tms      int
	backend  string
	records  uint64
	interval time.Duration
	inject   []string
}

func (r propertyRun) String() string {
	chain := "unchained"
	if r.chained {
		chain = "chained"
	}
	return fmt.Sprintf("%s/%s/tms=%d/%s/chk=%v/%s", r.failover, chain, r.tms, r.backend, r.interval, strings.Join(r.inject, ","))
}

// drawPropertyRun draws a run: a shape of the sequence job, and one to four failures at random subtasks,
// after random record counts or checkpoints. About one run in three puts its failures within a few hundred
// records of each other, so that they overlap: a failure while an earlier failover still stops, restarts or
// replays its neighbour or the same subtask, and failures before the first checkpoint completed.
func drawPropertyRun(rng *rand.Rand, failover string, records uint64) propertyRun {
	r := propertyRun{failover: failover, chained: rng.IntN(2) == 0, tms: 1 + rng.IntN(2), records: records,
		interval: time.Duration(10+rng.IntN(90)) * time.Millisecond}
	r.backend = "memory"
	if rng.IntN(3) == 0 {
		r.backend = "pebble"
	}
	ops := []string{"source", "map", "check"}
	perSubtask := int(records / 2)
	n := 1 + rng.IntN(4)
	overlap := rng.IntN(3) == 0
	base := 1 + rng.IntN(perSubtask*3/4)
	for range n {
		target := fmt.Sprintf("%s[%d]", ops[rng.IntN(len(ops))], rng.IntN(2))
		var when string
		switch {
		case overlap:
			when = fmt.Sprint(base + rng.IntN(400))
		case rng.IntN(4) == 0:
			when = fmt.Sprintf("chk-%d", 1+rng.IntN(4))
		default:
			when = fmt.Sprint(1 + rng.IntN(perSubtask*9/10))
		}
		r.inject = append(r.inject, target+"@"+when)
	}
	return r
}

// propertyTally counts, over the runs of a property test, the failovers and the fallbacks by reason.
type propertyTally struct {
	mu        sync.Mutex
	runs      int
	failovers map[string]int
	fallbacks map[string]int
}

// fallbackReason names a fallback's reason by its first words, so that reasons that differ only in the
// subtasks or the error they quote count together.
func fallbackReason(why string) string {
	for _, k := range []string{
		"which it reads from, restarted under task failover after",
		"which it reads from or writes to, is restarting too",
		"which it reads from or writes to, is still replaying its input",
		"its replay diverged",
		"its determinant log does not reach back",
		"an in-flight log its replay needs was incomplete",
		"it failed twice while restarting",
		"it is a source that cannot replay",
		"a failover in progress restarts by region already",
		"was lost, and its in-flight and determinant logs with it",
	} {
		if strings.Contains(why, k) {
			return k
		}
	}
	return why
}

func (p *propertyTally) add(res *runnel.JobResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	for _, f := range res.Failovers {
		p.failovers[f.Strategy]++
		if f.Fallback != "" {
			p.fallbacks[fallbackReason(f.Fallback)]++
		}
	}
}

func (p *propertyTally) log(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("%d runs; failovers by strategy %v", p.runs, p.failovers)
	var reasons []string
	for k := range p.fallbacks {
		reasons = append(reasons, k)
	}
	slices.SortFunc(reasons, func(a, b string) int { return p.fallbacks[b] - p.fallbacks[a] })
	for _, k := range reasons {
		t.Logf("fallback %3d × %s", p.fallbacks[k], k)
	}
}

// runProperty runs the sequence job as r says and requires the checker's verdict: every record exactly
// once and in order (full, region, task), or, under approximate recovery, nothing duplicated or reordered
// and the records missing exactly those the failovers reported lost (sequence.Judge). Under task failover every failover
// restarted the failed subtask alone or says why it fell back.
func runProperty(t *testing.T, r propertyRun, tally *propertyTally) {
	t.Helper()
	job := sequence.New(nil)
	job.Records, job.Keys = r.records, 64
	res := runJob(t, job, runnel.WithParallelism(2), runnel.WithChaining(r.chained), runnel.WithTaskManagers(r.tms),
		runnel.WithStateBackend(r.backend),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: r.interval}), runnel.WithFailover(r.failover),
		runnel.WithFailureInjection(r.inject...), runnel.WithRestartStrategy("fixed-delay:attempts=20,delay=0s"))
	tally.add(res)
	c := job.Checker(res)
	ok := c.Verdict == sequence.VerdictOK || (r.failover == "approximate" && c.Verdict == sequence.VerdictApproximateOK)
	if !ok {
		t.Fatalf("checker %+v (reported loss %d); failovers:\n%s", c, sequence.CheckedLoss(res), describeFailovers(res))
	}
	if len(res.UnfiredInjections) > 0 {
		t.Logf("unfired: %v", res.UnfiredInjections)
	}
	if r.failover == "task" {
		for _, f := range res.Failovers {
			if f.Fallback == "" && (f.Strategy != "task" || len(f.Restarted) != 1) {
				t.Fatalf("task failover restarted %v for %s without saying why", f.Restarted, f.Failed)
			}
		}
	}
}

func describeFailovers(res *runnel.JobResult) string {
	var b strings.Builder
	for _, f := range res.Failovers {
		restored := "none"
		if f.CheckpointRestored != nil {
			restored = fmt.Sprint(*f.CheckpointRestored)
		}
		fmt.Fprintf(&b, "  %s %s restarted %v restored %s dropped %d replayed %d lost %d %s\n", f.Failed, f.Strategy,
			f.Restarted, restored, f.DuplicatesDropped, f.RecordsReplayed, f.RecordsLost, f.Fallback)
	}
	return b.String()
}

// propertyTest runs runs seeded runs per failover strategy (records each).
func propertyTest(t *testing.T, seed, runs int, records uint64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 28))
	tally := &propertyTally{failovers: map[string]int{}, fallbacks: map[string]int{}}
	defer tally.log(t)
	for i := range runs {
		for _, failover := range []string{"task", "approximate", "region", "full"} {
			r := drawPropertyRun(rng, failover, records)
			t.Run(fmt.Sprintf("%d/%s", i, r), func(t *testing.T) { runProperty(t, r, tally) })
		}
	}
}

// TestFailoverProperty is the short version of the property test of every failover strategy: seeded
// random shapes of the sequence job (chained or not, one or two TaskManagers, memory or pebble state) with
// one to four failures at random subtasks and times, overlapping ones among them, each judged by the
// checker. PROPERTY_SEED picks other runs, PROPERTY_RUNS sets how many per strategy (default 2); the long
// version is TestFailoverPropertySoak (soak tag).
func TestFailoverProperty(t *testing.T) {
	if testing.Short() {
		t.Skip("whole jobs")
	}
	propertyTest(t, envInt(t, "PROPERTY_SEED", 1), envInt(t, "PROPERTY_RUNS", 2), uint64(envInt(t, "PROPERTY_RECORDS", 100_000)))
}

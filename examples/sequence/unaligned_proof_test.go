package sequence_test

import (
	"cmp"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// The proof of unaligned checkpoints beyond the randomized test (unaligned_property_test.go): failures
// that strike an unaligned checkpoint in progress, and approximate recovery's loss accounting when the
// checker itself fails and restores channel state.

// TestUnalignedFailureDuringACheckpoint fails a checker, a map and a source subtask one after the other
// while unaligned checkpoints follow each other back to back (one triggered as soon as the last completed)
// and a slowed checker keeps the queues before it full, so that each failure strikes a checkpoint whose
// channel state is being stored: the barriers overtook full queues, and the failed subtask may be storing
// what its channels deliver until their barriers come, or writing it, while the job master waits for the
// rest. Under task, region and full failover, locally and over TCP, on both state backends. The checkpoint
// struck is aborted; later ones complete, and hold records in flight; every record is checked exactly
// once; under task failover each failure is a task failover of the failed subtask, or a fallback that says
// why.
func TestUnalignedFailureDuringACheckpoint(t *testing.T) {
	for _, tc := range []struct {
		failover string
		backend  string
		tms      int
	}{
		{"task", "memory", 1},
		{"task", "pebble", 2},
		{"region", "memory", 2},
		{"region", "pebble", 1},
		{"full", "memory", 1},
	} {
		t.Run(fmt.Sprintf("%s/%s/%dtm", tc.failover, tc.backend, tc.tms), func(t *testing.T) {
			failDuringUnalignedCheckpoints(t, tc.failover, tc.backend, tc.tms)
		})
	}
}

// failDuringUnalignedCheckpoints is a run of TestUnalignedFailureDuringACheckpoint.
func failDuringUnalignedCheckpoints(t *testing.T, failover, backend string, tms int) {
	t.Helper()
	const records, keys, p = 60_000, 8, 2
	inject := []string{"check[0]@12000", "map[0]@18000", "source[1]@25000"}
	job := sequence.New(nil)
	job.Records, job.Keys, job.Rate, job.CheckRate = records, keys, 40_000, 20_000
	res := runJob(t, job, runnel.WithParallelism(p), runnel.WithChaining(false), runnel.WithTaskManagers(tms),
		runnel.WithStateBackend(backend), runnel.WithFailover(failover),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Millisecond, Unaligned: true}),
		runnel.WithFailureInjection(inject...),
		runnel.WithRestartStrategy("fixed-delay:attempts=6,delay=0s"))
	completed, held, maxBytes := channelState(res)
	cp := res.Checkpoints
	t.Logf("checkpoints %+v, of the last %d completed %d held records in flight, at most %d bytes; failovers:%s",
		*cp, completed, held, maxBytes, describe(res.Failovers))
	checkExact(t, job, res, records, keys, p)
	failed := map[string]bool{}
	for i, f := range res.Failovers {
		failed[f.Failed] = true
		switch {
		case failover == "task" && f.Fallback == "" && (f.Strategy != "task" || len(f.Restarted) != 1 || f.Restarted[0] != f.Failed):
			t.Fatalf("failover %d: a task failover restarted %v for %s without saying why", i, f.Restarted, f.Failed)
		case failover != "task" && f.Strategy != failover:
			t.Fatalf("failover %d: strategy %s, want %s", i, f.Strategy, failover)
		case f.RecordsLost != 0:
			t.Fatalf("failover %d lost %d records", i, f.RecordsLost)
		}
		// The checkpoint restored (none: 0), the one the failure aborted, and at least one after it.
		if restored := cmp.Or(f.CheckpointRestored, new(int64)); cp.LastCompletedID < *restored+2 {
			t.Fatalf("failover %d restored checkpoint %s, the last completed is %d: no checkpoint completed after it",
				i, ptr(f.CheckpointRestored), cp.LastCompletedID)
		}
	}
	// A later injection into a subtask a failover restarted still fires, in its new attempt: every
	// injection makes a failover of its own.
	if len(failed) != len(inject) {
		t.Fatalf("failovers %s: want one of each of %v", describe(res.Failovers), inject)
	}
	if cp.Aborted < 1 {
		t.Fatalf("checkpoints %+v: no failure struck a checkpoint in progress", *cp)
	}
	if held == 0 {
		t.Fatalf("none of the last %d checkpoints completed held records in flight", completed)
	}
}

// TestUnalignedApproximateFailureOfTheChecker fails a check subtask (and once a source) under approximate
// local recovery with unaligned checkpoints and a slowed checker: the restarted check subtask restores its
// channel state, whose records are not lost, and loses what was in flight to it after the checkpoint. The
// checker's loss must be exactly the loss the failover reports on the channels into check, none
// duplicated or reordered; the per-channel losses add up to the failover's.
func TestUnalignedApproximateFailureOfTheChecker(t *testing.T) {
	const records, keys, p = 40_000, 8, 2
	for _, tc := range []struct {
		inject    string
		tms       int
		restarted string // the failover's restarted subtasks
	}{
		{"check[0]@chk-2", 2, "[check[0] sink[0]]"},
		{"check[1]@5000", 1, "[check[1] sink[0]]"},
		{"source[0]@chk-3", 1, "[source[0] map[0] check[0] check[1] sink[0]]"},
	} {
		t.Run(fmt.Sprintf("%s/%dtm", tc.inject, tc.tms), func(t *testing.T) {
			job := sequence.New(nil)
			job.Records, job.Keys, job.Rate, job.CheckRate = records, keys, 30_000, 12_000
			res := runJob(t, job, runnel.WithParallelism(p), runnel.WithChaining(false), runnel.WithTaskManagers(tc.tms),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 30 * time.Millisecond, Unaligned: true, ApproximateLocalRecovery: true}),
				runnel.WithFailureInjection(tc.inject),
				runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"))
			if len(res.Failovers) != 1 {
				t.Fatalf("failovers %s, want 1", describe(res.Failovers))
			}
			f := res.Failovers[0]
			c := job.Checker(res)
			lost := sequence.CheckedLoss(res)
			completed, held, maxBytes := channelState(res)
			t.Logf("checker %+v, loss on sequence channels %d; checkpoints %+v, of the last %d completed %d held records in flight, at most %d bytes; failover %+v",
				c, lost, *res.Checkpoints, completed, held, maxBytes, f)
			if f.Strategy != "approximate" || fmt.Sprint(f.Restarted) != tc.restarted {
				t.Fatalf("failover %+v, want an approximate one restarting %s", f, tc.restarted)
			}
			if strings.Contains(tc.inject, "chk-") && f.CheckpointRestored == nil {
				t.Fatalf("failover %+v restored no checkpoint", f)
			}
			if c.Duplicated != 0 || c.OutOfOrder != 0 || uint64(c.Lost) != lost || c.Records+c.Lost != records {
				t.Fatalf("checker %+v, loss into map and check %d, failover %+v", c, lost, f)
			}
			if strings.HasPrefix(tc.inject, "check") && lost == 0 {
				t.Fatalf("checker %+v: a restarted checker under backpressure lost nothing in flight", c)
			}
			var sum uint64
			for _, ch := range f.Channels {
				sum += ch.RecordsLost
			}
			if sum != f.RecordsLost {
				t.Fatalf("channels add up to %d records lost, the failover reports %d", sum, f.RecordsLost)
			}
			if res.Checkpoints.Completed < 2 || held == 0 {
				t.Fatalf("checkpoints %+v, %d of the last %d completed held records in flight: want checkpoints with channel state", *res.Checkpoints, held, completed)
			}
		})
	}
}

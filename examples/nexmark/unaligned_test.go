package nexmark_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/internal/run"
	"github.com/runnel-dev/runnel/examples/nexmark"
)

// pacedEvents passes the events on at rate per subtask: a slow stage between the file source and the
// query, which backpressures the source, so that the queues in front of it are full whenever a barrier
// comes. The wall clock only paces; the results depend on event time alone.
type pacedEvents struct {
	runnel.RichBase
	rate  float64
	n     int64
	start time.Time
}

func (p *pacedEvents) Map(e nexmark.Event) (nexmark.Event, error) {
	if p.n == 0 {
		p.start = time.Now()
	}
	p.n++
	if p.n%32 == 0 {
		if d := time.Until(p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
	}
	return e, nil
}

// channelState sums up the checkpoint history of res (its newest 64 checkpoints): how many completed,
// how many of those held records in flight, and the most bytes of records in flight one held.
func channelState(res *runnel.JobResult) (completed, held int, maxBytes int64) {
	for _, c := range res.CheckpointHistory {
		if c.Status != "COMPLETED" {
			continue
		}
		completed++
		if c.ChannelStateBytes > 0 {
			held++
		}
		maxBytes = max(maxBytes, c.ChannelStateBytes)
	}
	return completed, held, maxBytes
}

// runPaced runs query q over the events of input, read by one subtask and passed through a "slow" stage
// at parallelism 2 that takes rate events per second per subtask, into the example's exactly-once file
// sink; it returns the result lines and the job's result.
func runPaced(t *testing.T, q, input string, rate float64, opts ...runnel.Option) ([]string, *runnel.JobResult) {
	t.Helper()
	out := filepath.Join(t.TempDir(), q+".jsonl")
	env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	events := nexmark.Events(env, nexmark.JSONFile(input), 1, nexmark.DefaultOutOfOrderness)
	slow := runnel.MapWith(events, func() runnel.MapFunction[nexmark.Event, nexmark.Event] { return &pacedEvents{rate: rate} }).
		Name("slow").WithCodec(nexmark.EventCodec())
	res, err := nexmark.Build(q, slow)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.PrepareParts(out, false); err != nil {
		t.Fatal(err)
	}
	res.ToFile(run.PartsDir(out))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jr, err := env.Execute(ctx, "nexmark-"+q)
	if err != nil || jr.Status != "FINISHED" {
		t.Fatalf("%s: %v: %+v", q, err, jr)
	}
	if _, err := run.JoinParts(out, true); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"), jr
}

// TestNexmarkUnalignedUnderFailures runs q3, q5, q7 and q8 with unaligned checkpoints every 10 ms behind
// a slow stage (the events at 3,000 per second per subtask, a few times slower than the queries take
// them), which keeps the queues in front of it full, and fails their stateful operators and the slow
// stage itself under region, task and full failover, on both state backends, locally and over TCP (the
// task failovers of the keyed operators among them). The
// output must equal the reference exactly, every line once; each run failed over and restored a
// checkpoint (or, under task failover, replayed); checkpoints completed, and some held records in
// flight. One run in each of q5 and q7 takes checkpoints that start aligned and turn unaligned after
// 5 ms.
func TestNexmarkUnalignedUnderFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("whole jobs")
	}
	// As TestNexmarkExactlyOnceUnderFailures: four minutes of event time, shuffled within 2 s. Without
	// failures, at parallelism 2, count and highest-per-auction get 4,290 and 6,750 bids, new-users 205
	// and 755 records, join 138 and 231; slow gets 6,000 events each.
	evs := generate(t, nexmark.GeneratorConfig{Seed: 11, Rate: 50}, 12_000)
	input := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(input, jsonLines(shuffleWithin(evs, 2000, 11)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		query    string
		failover string
		backend  string
		tms      int
		timeout  time.Duration // AlignedCheckpointTimeout
		inject   []string
	}{
		{"q5", "region", "memory", 1, 0, []string{"count[1]@3000", "slow[0]@4500"}},
		{"q5", "full", "pebble", 2, 5 * time.Millisecond, []string{"hottest[1]@chk-2"}},
		{"q7", "region", "pebble", 2, 0, []string{"highest-per-auction[1]@4500"}},
		{"q7", "full", "memory", 1, 5 * time.Millisecond, []string{"slow[1]@3000"}},
		{"q8", "region", "memory", 2, 0, []string{"new-users[1]@500"}},
		{"q3", "full", "memory", 1, 0, []string{"join[1]@160"}},
		// Task failover: the failed subtask restarts alone, its inputs replayed from the in-flight logs.
		{"q5", "task", "memory", 2, 0, []string{"slow[1]@3000"}},
		{"q5", "task", "pebble", 1, 0, []string{"count[0]@3800"}},
		{"q7", "task", "memory", 2, 0, []string{"highest-per-auction[1]@4500"}},
	} {
		t.Run(fmt.Sprintf("%s %s %s %dTM act=%v", tc.query, tc.failover, tc.backend, tc.tms, tc.timeout), func(t *testing.T) {
			want := references[tc.query](evs)
			if len(want) == 0 {
				t.Fatalf("%s: the reference has no results on this input: the test would prove nothing", tc.query)
			}
			got, res := runPaced(t, tc.query, input, 3000, runnel.WithParallelism(2), runnel.WithTaskManagers(tc.tms),
				runnel.WithStateBackend(tc.backend), runnel.WithFailover(tc.failover),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: true,
					AlignedCheckpointTimeout: tc.timeout, Storage: filepath.Join(t.TempDir(), "chk")}),
				runnel.WithRestartStrategy("fixed-delay:attempts=8,delay=10ms"),
				runnel.WithFailureInjection(tc.inject...))
			completed, held, maxBytes := channelState(res)
			t.Logf("checkpoints %+v, of the last %d completed %d held records in flight, at most %d bytes", *res.Checkpoints, completed, held, maxBytes)
			if len(res.Failovers) == 0 || len(res.Failovers) > len(tc.inject) {
				t.Fatalf("%d failovers for %d injected failures: %+v", len(res.Failovers), len(tc.inject), res.Failovers)
			}
			restored := false
			for i, f := range res.Failovers {
				t.Logf("failover %d: %s of %s, restarted %v, checkpoint %v, replayed %d, dropped %d %s", i, f.Strategy, f.Failed, f.Restarted,
					f.CheckpointRestored != nil, f.RecordsReplayed, f.DuplicatesDropped, f.Fallback)
				if f.Strategy != tc.failover || !strings.Contains(f.Cause, "injected failure") || f.RecordsLost != 0 {
					t.Fatalf("failover %+v, want strategy %s for an injected failure, nothing lost", f, tc.failover)
				}
				if tc.failover == "task" && (len(f.Restarted) != 1 || f.Restarted[0] != f.Failed) {
					t.Fatalf("task failover of %s restarted %v: want the failed subtask alone", f.Failed, f.Restarted)
				}
				restored = restored || f.CheckpointRestored != nil || (tc.failover == "task" && f.RecordsReplayed > 0)
			}
			if !restored {
				t.Fatalf("no failover restored a checkpoint: %+v", res.Failovers)
			}
			sameLines(t, tc.query, got, want)
			if res.Checkpoints.Completed < 2 || held == 0 {
				t.Fatalf("checkpoints %+v, %d of the last %d completed held records in flight: want unaligned checkpoints with channel state",
					*res.Checkpoints, held, completed)
			}
		})
	}
}

package sessions_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/internal/run"
	"github.com/runnel-dev/runnel/examples/sessions"
)

// reference computes the sessions of clicks 0 … n−1 of g directly: per user, the clicks sorted by time,
// a new session wherever a click comes more than gap after the session's last click (one exactly gap after
// touches the session's window and extends it, as Flink merges windows that touch).
func reference(g sessions.Generator, n uint64) []string {
	byUser := map[int64][]sessions.Click{}
	for i := range n {
		c := g.Click(i)
		byUser[c.User] = append(byUser[c.User], c)
	}
	gap := g.Gap.Milliseconds()
	var out []string
	for user, cs := range byUser {
		sort.SliceStable(cs, func(a, b int) bool { return cs[a].Time < cs[b].Time })
		var cur sessions.Session
		pages := map[int32]bool{}
		flush := func() {
			cur.Pages = int64(len(pages))
			out = append(out, cur.Line())
		}
		for i, c := range cs {
			if i > 0 && c.Time > cur.End {
				flush()
			}
			if i == 0 || c.Time > cur.End {
				cur = sessions.Session{User: user, Start: c.Time}
				clear(pages)
			}
			cur.End = c.Time + gap
			cur.Clicks++
			pages[c.Page] = true
		}
		flush()
	}
	slices.Sort(out)
	return out
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	slices.Sort(lines)
	return lines
}

// TestSessionsMatchReference runs the sessionizer (locally and over TCP, with and without --output) and
// compares its sessions with the reference: every line once with --output, the summary's counts without.
// Under failures injected into the session windows and the file sink with checkpoints, region and full
// failover, memory and pebble, locally and over TCP, --output still holds every session exactly once.
func TestSessionsMatchReference(t *testing.T) {
	const records, users = 20_000, 25
	const gap, bound = 200 * time.Millisecond, 100 * time.Millisecond
	g := sessions.Generator{Seed: 5, Users: users, Gap: gap, Jitter: bound}
	want := reference(g, records)
	// The input must be out of order and have sessions of many lengths, or the test proves little.
	late, multi := 0, 0
	for i := uint64(1); i < records; i++ {
		if g.Click(i).Time < g.Click(i-1).Time {
			late++
		}
	}
	for _, l := range want {
		if !strings.Contains(l, `"clicks":1,`) {
			multi++
		}
	}
	if late < records/10 || multi < len(want)/2 || len(want) < 500 {
		t.Fatalf("the input has %d clicks out of order and %d of %d sessions with more than one click", late, multi, len(want))
	}
	for _, tc := range []struct {
		name   string
		output bool
		opts   []runnel.Option
		rate   float64
		inject []string
	}{
		{name: "local summary", opts: []runnel.Option{runnel.WithParallelism(2)}},
		{name: "tcp output", output: true, opts: []runnel.Option{runnel.WithParallelism(3), runnel.WithTaskManagers(2)}},
		// The failures wait for checkpoints (chk-N), so that a failover has one to restore also when the
		// machine is loaded: with record counts, under the whole -race suite on two cores, both failures once
		// came before any checkpoint (every 20 ms) completed. At 10k clicks a second per source the run lasts
		// a second, long enough for the checkpoints they wait for.
		{name: "region failover memory tcp", output: true, rate: 10_000, inject: []string{"sessions[1]@chk-2"},
			opts: []runnel.Option{runnel.WithParallelism(2), runnel.WithTaskManagers(2), runnel.WithFailover("region")}},
		{name: "full failover pebble local", output: true, rate: 10_000, inject: []string{"sessions[0]@chk-2", "output[0]@chk-4"},
			opts: []runnel.Option{runnel.WithParallelism(2), runnel.WithStateBackend("pebble"), runnel.WithFailover("full")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := sessions.New(nil)
			j.Records, j.Users, j.Gap, j.OutOfOrderness, j.Seed, j.Rate = records, users, gap, bound, 5, tc.rate
			dir := t.TempDir()
			if tc.output {
				j.Output = filepath.Join(dir, "sessions.jsonl")
			}
			opts := append([]runnel.Option{runnel.WithLogger(slog.New(slog.DiscardHandler)), runnel.WithWatermarkInterval(5 * time.Millisecond)}, tc.opts...)
			if len(tc.inject) > 0 {
				opts = append(opts, runnel.WithFailureInjection(tc.inject...), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=10ms"),
					runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond, Storage: filepath.Join(dir, "chk")}))
			}
			env := runnel.NewEnvironment(opts...)
			if err := j.Build(env, run.Options{}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "sessions")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v %+v", err, res)
			}
			var summary strings.Builder
			if err := j.Summary(&summary, res); err != nil {
				t.Fatal(err)
			}
			if err := j.Verify(res); err != nil {
				t.Fatal(err)
			}
			if len(tc.inject) > 0 {
				restored := false
				for _, f := range res.Failovers {
					restored = restored || f.CheckpointRestored != nil
				}
				if len(res.Failovers) == 0 || !restored {
					t.Fatalf("no failover restored a checkpoint (checkpoints %+v): %+v", res.Checkpoints, res.Failovers)
				}
			}
			if tc.output {
				got := readLines(t, j.Output)
				if !slices.Equal(got, want) {
					t.Fatalf("%d sessions, want %d; first differences: %v", len(got), len(want), firstDiff(got, want))
				}
				if _, err := os.Stat(j.Output + ".parts"); !os.IsNotExist(err) {
					t.Errorf("the parts directory is still there after the job finished (%v)", err)
				}
			}
			st, err := j.Stats(res)
			if err != nil {
				t.Fatal(err)
			}
			if st.Sessions != int64(len(want)) || st.Clicks != records || len(st.Users) != users {
				t.Fatalf("stats: %d sessions of %d users, %d clicks; want %d of %d, %d", st.Sessions, len(st.Users), st.Clicks, len(want), users, records)
			}
			if !strings.Contains(summary.String(), "sessions of 25 users (20000 clicks, gap 200ms)") || !strings.Contains(summary.String(), "longest: user ") {
				t.Fatalf("summary:\n%s", summary.String())
			}
		})
	}
}

func firstDiff(got, want []string) []string {
	count := map[string]int{}
	for _, l := range want {
		count[l]++
	}
	for _, l := range got {
		count[l]--
	}
	var d []string
	for l, n := range count {
		if n != 0 {
			d = append(d, l)
		}
	}
	slices.Sort(d)
	return d[:min(5, len(d))]
}

// TestGeneratorIsDeterministic: click i is a function of the generator and i, within the jitter before
// its nominal time, and another seed makes other clicks. (TestSessionsMatchReference runs the job at
// parallelism 2 and 3 against one reference: the stream does not depend on the parallelism.)
func TestGeneratorIsDeterministic(t *testing.T) {
	g := sessions.Generator{Seed: 1, Users: 10, Gap: time.Second, Jitter: 50 * time.Millisecond}
	for i := range uint64(1000) {
		c := g.Click(i)
		nominal := sessions.BaseTime + int64(i)*sessions.ClickSpacing.Milliseconds()
		if c.Time > nominal || c.Time < nominal-50 || c.User < 0 || c.User >= 10 || c.Page < 0 || c.Page >= sessions.Pages {
			t.Fatalf("click %d: %+v (nominal time %d)", i, c, nominal)
		}
		if c != g.Click(i) {
			t.Fatalf("click %d is not deterministic", i)
		}
	}
	other := g
	other.Seed = 2
	same := 0
	for i := range uint64(1000) {
		if g.Click(i) == other.Click(i) {
			same++
		}
	}
	if same > 100 {
		t.Fatalf("seeds 1 and 2 share %d of 1000 clicks", same)
	}
}

package nexmark_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/examples/nexmark"
)

// committed returns the lines of the committed part files in dir, counted.
func committed(t *testing.T, dir string) map[string]int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	for _, e := range entries {
		// Hidden parts are not output: in progress or pending. (An attempt that fails before the sink's
		// first checkpoint leaves its in-progress part behind: a restarted sink without state cannot know
		// the failed run's name. That is the FileSink's business, not the sources'.)
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		for _, l := range readLines(t, filepath.Join(dir, e.Name())) {
			lines[l]++
		}
	}
	return lines
}

// TestSourcesExactlyOnceAcrossFailures runs the generator source and the JSON lines source in real jobs
// with checkpoints and injected failures (region and full failover, local and TCP channels) into a
// FileSink: every event of the stream is committed exactly once, so a restored source rewound exactly to
// its checkpointed n or byte offset.
func TestSourcesExactlyOnceAcrossFailures(t *testing.T) {
	const events = 12_000
	cfg := nexmark.GeneratorConfig{Seed: 11, Events: events, Rate: 40_000}
	want := map[string]int{}
	input := filepath.Join(t.TempDir(), "input.jsonl")
	data := jsonLines(generate(t, cfg, events))
	if err := os.WriteFile(input, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		want[l]++
	}
	for _, tc := range []struct {
		name         string
		file         bool
		failover     string
		taskManagers int
		inject       []string
	}{
		{name: "generator region local", failover: "region", taskManagers: 1, inject: []string{"map[0]@2500", "map[1]@4000"}},
		{name: "generator full tcp", failover: "full", taskManagers: 2, inject: []string{"map[1]@3000"}},
		{name: "file region tcp", file: true, failover: "region", taskManagers: 2, inject: []string{"map[0]@2000", "map[1]@4500"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithTaskManagers(tc.taskManagers),
				runnel.WithLogger(slog.New(slog.DiscardHandler)), runnel.WithChaining(false),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond}),
				runnel.WithFailover(tc.failover), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"),
				runnel.WithFailureInjection(tc.inject...))
			var src *runnel.Stream[nexmark.Event]
			if tc.file {
				// One reader for the file, rebalanced.
				src = runnel.FromSource(env, nexmark.JSONFile(input)).Name("source").SetParallelism(1).WithCodec(nexmark.EventCodec()).Rebalance()
			} else {
				src = runnel.FromSource(env, nexmark.Source(cfg)).Name("source").WithCodec(nexmark.EventCodec())
			}
			runnel.Map(src, func(e nexmark.Event) (nexmark.Event, error) {
				if tc.file && e.Kind == nexmark.KindPerson {
					// Pace the file's one reader (1 event in 50 is a person) so that checkpoints fall
					// inside the file, as the generator's rate does for the generated stream.
					time.Sleep(time.Millisecond)
				}
				return e, nil
			}).Name("map").WithCodec(nexmark.EventCodec()).
				SinkTo(connector.FileSink(dir, func(e nexmark.Event) string { return string(nexmark.AppendEvent(nil, &e)) })).Name("sink")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "nexmark-sources")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v: %+v", err, res)
			}
			if len(res.Failovers) != len(tc.inject) {
				t.Fatalf("%d failovers, want %d: %+v", len(res.Failovers), len(tc.inject), res.Failovers)
			}
			got := committed(t, dir)
			if len(got) != len(want) {
				t.Errorf("%d distinct events committed, want %d", len(got), len(want))
			}
			for l, n := range want {
				if got[l] != n {
					t.Fatalf("event committed %d times, want %d: %.120s", got[l], n, l)
				}
			}
		})
	}
}

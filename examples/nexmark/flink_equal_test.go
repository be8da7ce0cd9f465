package nexmark_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/nexmark"
)

// TestNexmarkEqualsFlink runs every query on one input file through Runnel (the example's job, at
// parallelism 2 without chaining) and through Flink 2.3's SQL planner (bench/flink's `nexmark --input
// --output`, at parallelism 2), and compares the two outputs line for line as multisets, both after
// comparableOutput (q4: the final average per category, the last line per category of Runnel's update
// stream; Flink's output is already its changelog's final state, which that keeps). The inputs are the
// generated stream shuffled out of order within 2 s (under the 4 s bound both engines use), and the same
// stream rewritten so that windows tie on the highest count and price. Skipped unless RUNNEL_FLINK_JAR
// names the built jar; bench/flink/nexmark-equal.sh builds it and runs this test.
func TestNexmarkEqualsFlink(t *testing.T) {
	jar := os.Getenv("RUNNEL_FLINK_JAR")
	if jar == "" {
		t.Skip("RUNNEL_FLINK_JAR is not set")
	}
	generated := generate(t, nexmark.GeneratorConfig{Seed: 7, Rate: 50}, 6000)
	for _, in := range []struct {
		name string
		evs  []nexmark.Event
	}{{"generated", generated}, {"ties", tied(generated)}} {
		dir := t.TempDir()
		input := filepath.Join(dir, in.name+".jsonl")
		if err := os.WriteFile(input, jsonLines(shuffleWithin(in.evs, 2000, 7)), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, q := range nexmark.Queries {
			t.Run(in.name+"/"+q, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "flink-"+q+".jsonl")
				cmd := exec.Command("java", "-jar", jar, "nexmark", "--query", q, "--input", input, "--output", out, "--parallelism", "2")
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("%v: %v\n%s", cmd, err, lastLines(stderr.String(), 20))
				}
				b, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				var flink []string
				if s := strings.TrimSuffix(string(b), "\n"); s != "" {
					flink = strings.Split(s, "\n")
				}
				if _, ok := emptyOn[in.name+"/"+q]; len(flink) == 0 && !ok {
					t.Fatalf("%s: Flink wrote no lines: the comparison would prove nothing", q)
				}
				got := runQuery(t, q, input, runnel.WithParallelism(2), runnel.WithChaining(false))
				if c, ok := comparableOutput[q]; ok {
					got, flink = c(t, got), c(t, flink)
				}
				sameLines(t, q+" (Runnel against Flink)", got, flink)
			})
		}
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

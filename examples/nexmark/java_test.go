package nexmark_test

import (
	"bytes"
	"os/exec"
	"testing"

	"github.com/runnel-dev/runnel/examples/nexmark"
)

// TestGeneratorEqualsJava runs bench/flink's `nexmark-generate` and compares its output with the Go
// generator's over a stream much longer than the golden files, seeded and at a rate that spaces the
// timestamps (every channel of the table is drawn many times). Skipped unless RUNNEL_FLINK_JAR names the
// built jar (`mvn -q -f bench/flink package`; see flinkJar).
func TestGeneratorEqualsJava(t *testing.T) {
	jar := flinkJar(t)
	const events = 200_000
	cfg := nexmark.GeneratorConfig{Seed: 0xfeedface, Rate: 30_000, BaseTime: 1_600_000_000_000}
	cmd := exec.Command("java", "-jar", jar, "nexmark-generate", "--events", "200000",
		"--seed", "4277009102", "--rate", "30000", "--base-time", "1600000000000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, stderr.String())
	}
	want := jsonLines(generate(t, cfg, events))
	if bytes.Equal(got, want) {
		return
	}
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := range min(len(g), len(w)) {
		if !bytes.Equal(g[i], w[i]) {
			t.Fatalf("event %d differs:\njava %s\n  go %s", i, g[i], w[i])
		}
	}
	t.Fatalf("java wrote %d lines, go %d", len(g), len(w))
}

package wordcount_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/internal/run"
	"github.com/runnel-dev/runnel/examples/wordcount"
)

const text = `Die Größe der GRÖSSE ist naïve; naïve Naïve!
abc123 ABC123 abc 123 x86-64
東京 and 東京, café CAFÉ straße

  trailing words without newline at end? word word
` + "windows\r\nline\r\n" + "last line no newline Größe"

// want counts the words of text directly, independent of the example's tokenizer.
func want(text string) map[string]int64 {
	m := map[string]int64{}
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		m[strings.ToLower(w)]++
	}
	return m
}

func runJob(t *testing.T, job *wordcount.Job, opts ...runnel.Option) *runnel.JobResult {
	t.Helper()
	env := runnel.NewEnvironment(opts...)
	if err := job.Build(env, run.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "wordcount")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "FINISHED" {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	return res
}

func TestWordCountFile(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.txt"), filepath.Join(dir, "out.txt")
	// Repeat the text so that both subtasks get several lines.
	full := strings.Repeat(text+"\n", 50) + text
	if err := os.WriteFile(in, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	job := wordcount.New(nil)
	job.Input, job.Output = in, out
	res := runJob(t, job, runnel.WithParallelism(2), runnel.WithTaskManagers(2))

	exp := want(full)
	var words []string
	for w := range exp {
		words = append(words, w)
	}
	sort.Strings(words)
	var b strings.Builder
	for _, w := range words {
		fmt.Fprintf(&b, "%s\t%d\n", w, exp[w])
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != b.String() {
		t.Fatalf("output:\n%s\nwant:\n%s", got, b.String())
	}
	for _, w := range []string{"größe", "naïve", "abc123", "東京", "café"} {
		if exp[w] == 0 {
			t.Fatalf("test text lacks %q", w)
		}
	}
	// The data crossed TaskManagers: the count vertex ran on both.
	v := res.Vertex("count")
	if v == nil || v.Parallelism != 2 || v.RecordsIn == 0 {
		t.Fatalf("count vertex: %+v", v)
	}
	tms := map[string]bool{}
	for _, st := range v.Subtasks {
		tms[st.TaskManager] = true
	}
	if len(tms) != 2 {
		t.Fatalf("count subtasks on %v, want 2 TaskManagers", tms)
	}
	if s := res.Vertex("sink"); s == nil || s.Parallelism != 1 || s.RecordsIn != uint64(len(exp)) {
		t.Fatalf("sink vertex: %+v, want %d records in", s, len(exp))
	}
}

func TestWordCountGeneratedIndependentOfParallelism(t *testing.T) {
	dir := t.TempDir()
	var outputs []string
	for _, p := range []int{1, 3} {
		job := wordcount.New(nil)
		job.Lines = 3000
		job.Output = filepath.Join(dir, fmt.Sprintf("out-%d.txt", p))
		runJob(t, job, runnel.WithParallelism(p), runnel.WithTaskManagers(2))
		b, err := os.ReadFile(job.Output)
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, string(b))
	}
	if outputs[0] != outputs[1] {
		t.Fatal("generated word count differs between parallelism 1 and 3")
	}
	// Check against a direct count of the generated text.
	var all strings.Builder
	for i := range uint64(3000) {
		all.WriteString(wordcount.GeneratedLine(i))
		all.WriteByte('\n')
	}
	exp := want(all.String())
	lines := strings.Split(strings.TrimSuffix(outputs[0], "\n"), "\n")
	if len(lines) != len(exp) {
		t.Fatalf("%d lines, want %d", len(lines), len(exp))
	}
	for _, l := range lines {
		var w string
		var n int64
		i := strings.IndexByte(l, '\t')
		w = l[:i]
		fmt.Sscan(l[i+1:], &n)
		if exp[w] != n {
			t.Fatalf("%q: %d, want %d", w, n, exp[w])
		}
	}
}

func TestWordCountPrintsTop(t *testing.T) {
	var b strings.Builder
	job := wordcount.New(nil)
	job.Lines = 500
	env := runnel.NewEnvironment(runnel.WithParallelism(2))
	if err := job.Build(env, run.Options{Out: &b}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Execute(context.Background(), "wordcount"); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(b.String(), "\n"); lines != 11 {
		t.Fatalf("printed %d lines, want header + 10:\n%s", lines, b.String())
	}
}

// TestWordCountFileWithFailures injects failures into a bounded word count; the output must still be
// exact: with checkpoints (pipelined exchange) and with blocking exchange (region restarts).
func TestWordCountFileWithFailures(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	full := strings.Repeat(text+"\n", 3000)
	if err := os.WriteFile(in, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	exp := want(full)
	cases := []struct {
		name string
		opts []runnel.Option
	}{
		{"checkpoints", []runnel.Option{runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 5 * time.Millisecond})}},
		{"blocking", []runnel.Option{runnel.WithExchangeMode("blocking")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, tc.name+".txt")
			job := wordcount.New(nil)
			job.Input, job.Output = in, out
			opts := append([]runnel.Option{runnel.WithParallelism(2), runnel.WithTaskManagers(2),
				runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"),
				runnel.WithFailureInjection("tokenize[0]@2000", "count[1]@20000")}, tc.opts...)
			res := runJob(t, job, opts...)
			// A failure that strikes while the other failover is still cancelling belongs to that failover, and
			// its injection fires again in the next attempt: each makes a failover.
			if len(res.Failovers) != 2 {
				t.Fatalf("%d failovers, want 2: %+v", len(res.Failovers), res.Failovers)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			counts := map[string]int64{}
			for _, line := range strings.Split(strings.TrimSuffix(string(got), "\n"), "\n") {
				var w string
				var n int64
				parts := strings.Split(line, "\t")
				w = parts[0]
				fmt.Sscan(parts[1], &n)
				counts[w] = n
			}
			if fmt.Sprint(counts) != fmt.Sprint(exp) {
				t.Fatalf("counts differ after failures:\n got %v\nwant %v", counts, exp)
			}
		})
	}
}

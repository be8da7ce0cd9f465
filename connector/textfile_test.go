package connector_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// textFiles are the contents the TextFile tests read, by name.
func textFiles() []struct{ name, content string } {
	long := func(c string, n int) string { return strings.Repeat(c, n) }
	var many, oneByte, mixed strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&many, "line %d %s\n", i, long("m", i%37))
	}
	for i := range 200 {
		oneByte.WriteByte(byte('a' + i%26))
		oneByte.WriteByte('\n')
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"x", "é", "日本", "🙂", " ", "\t"}
	for range 1500 {
		for range rng.IntN(40) {
			mixed.WriteString(pieces[rng.IntN(len(pieces))])
		}
		if rng.IntN(3) == 0 {
			mixed.WriteString("\r\n")
		} else {
			mixed.WriteString("\n")
		}
	}
	return []struct{ name, content string }{
		{"empty", ""},
		{"one line without newline", "hello world"},
		{"one line with newline", "hello world\n"},
		{"one byte without newline", "x"},
		{"only newlines", "\n\n\n\n\n"},
		{"empty lines between", "a\n\n\nb\n\n"},
		{"crlf", "alpha\r\nbeta\r\n\r\ngamma\r\ndelta\r\n"},
		{"crlf without final newline", "alpha\r\nbeta\r\ngamma"},
		{"one-byte lines", oneByte.String()},
		{"utf-8", "héllo wörld\n日本語のテキスト\n🙂🙃🙂\nñ\n€\nκόσμε\n"},
		{"boundary on newline", "aaaaa\nbbb\n"},
		{"boundary after newline", "aaaa\nbbbb\n"},
		{"boundary mid-line", "aaaaaaa\nb\n"},
		{"long line only", long("L", 200<<10)},
		{"long lines", long("a", 70<<10) + "\nshort\n" + long("b", 130<<10) + "\n\n" + long("c", 65<<10) + "\nend"},
		{"long line at the end", "first\nsecond\n" + long("z", 100<<10) + "\n"},
		{"many lines", many.String()},
		{"mixed utf-8 and crlf", mixed.String()},
	}
}

// linesOf splits content the way TextFile documents it: lines end at "\n", and a "\r" before it is part
// of the terminator; a final line without "\n" is a line too.
func linesOf(content string) []string {
	var lines []string
	for content != "" {
		i := strings.IndexByte(content, '\n')
		if i < 0 {
			lines = append(lines, content)
			break
		}
		lines = append(lines, strings.TrimSuffix(content[:i], "\r"))
		content = content[i+1:]
	}
	return lines
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readSplits reads every subtask's split of path with parallelism p, by driving the readers directly.
func readSplits(t *testing.T, path string, p int) [][]string {
	t.Helper()
	splits := make([][]string, p)
	for i := range p {
		splits[i] = drain(t, newReader(t, connector.TextFile(path), ctxOf(i, p)))
	}
	return splits
}

// TestTextFileSplitsCoverEveryLineOnce reads each file with many parallelisms; for small files these
// include p = size, which puts a split boundary at every byte.
func TestTextFileSplitsCoverEveryLineOnce(t *testing.T) {
	for _, f := range textFiles() {
		t.Run(f.name, func(t *testing.T) {
			path := writeFile(t, f.content)
			want := linesOf(f.content)
			maxP := 8
			if len(f.content) <= 64 {
				maxP = len(f.content) + 2
			}
			for p := 1; p <= maxP; p++ {
				var got []string
				for _, split := range readSplits(t, path, p) {
					got = append(got, split...)
				}
				// Splits are consecutive byte ranges, so their concatenation is the file in order.
				if !slices.Equal(got, want) {
					t.Fatalf("p=%d: %s", p, firstDiff(got, want))
				}
			}
		})
	}
}

// TestTextFileSplitOwnership checks which subtask gets which line: the one whose range holds its first
// byte.
func TestTextFileSplitOwnership(t *testing.T) {
	tests := []struct {
		name    string
		content string
		p       int
		want    [][]string
	}{
		// 10 bytes, p=2: subtask 1's range starts at byte 5.
		{"boundary on newline", "aaaaa\nbbb\n", 2, [][]string{{"aaaaa"}, {"bbb"}}},
		{"boundary after newline", "aaaa\nbbbb\n", 2, [][]string{{"aaaa"}, {"bbbb"}}},
		{"boundary before newline", "aaaaaa\nbb\n", 2, [][]string{{"aaaaaa"}, {"bb"}}},
		{"boundary mid-line", "aaaaaaa\nb\n", 2, [][]string{{"aaaaaaa"}, {"b"}}},
		{"boundary at line start", "aa\nb\ncc\nd\n", 2, [][]string{{"aa", "b"}, {"cc", "d"}}},
		{"boundary on newline of a short line", "a\nb\nc\nd\ne\n", 2, [][]string{{"a", "b", "c"}, {"d", "e"}}},
		{"crlf boundary between cr and lf", "aaaa\r\nbb\r\n", 2, [][]string{{"aaaa"}, {"bb"}}},
		{"one line, many subtasks", "aaaaaaaaaa\n", 3, [][]string{{"aaaaaaaaaa"}, nil, nil}},
		// Ranges [0,0) [0,1) [1,1) [1,2) [2,3).
		{"more subtasks than bytes", "a\nb", 5, [][]string{nil, {"a"}, nil, nil, {"b"}}},
		{"empty file", "", 3, [][]string{nil, nil, nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := readSplits(t, writeFile(t, tc.content), tc.p)
			for i := range tc.p {
				if !slices.Equal(got[i], tc.want[i]) {
					t.Errorf("subtask %d: got %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestTextFileJob(t *testing.T) {
	for _, f := range textFiles() {
		t.Run(f.name, func(t *testing.T) {
			path := writeFile(t, f.content)
			want := linesOf(f.content)
			for p := 1; p <= 5; p++ {
				env := runnel.NewEnvironment(quietEnv(runnel.WithParallelism(p))...)
				sink := connector.NewCollect[string]()
				runnel.FromSource(env, connector.TextFile(path)).SinkTo(sink)
				execute(t, env)
				sameMultiset(t, sink.Records(), want)
			}
		})
	}
}

func TestTextFileMissing(t *testing.T) {
	_, err := connector.TextFile(filepath.Join(t.TempDir(), "nope")).CreateReader(ctxOf(0, 1))
	if !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("CreateReader of a missing file: %v, want a not-exist error", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

// TestTextFileRestore snapshots every subtask's reader after each number of polls (from before the first
// to after the end), restores a new reader from it and checks that it emits exactly the rest of the split.
func TestTextFileRestore(t *testing.T) {
	for _, f := range textFiles() {
		t.Run(f.name, func(t *testing.T) {
			path := writeFile(t, f.content)
			src := connector.TextFile(path)
			for _, p := range []int{1, 2, 3, 5} {
				for i, split := range readSplits(t, path, p) {
					polls := len(split)/512 + 2
					for k := range polls + 1 {
						before := newReader(t, src, ctxOf(i, p))
						first, _ := pollN(t, before, k)
						state := snapshot(t, before)
						after := newReader(t, src, ctxOf(i, p))
						if err := checkpointed(t, after).RestoreState(state); err != nil {
							t.Fatalf("p=%d subtask %d, %d polls: RestoreState(% x): %v", p, i, k, state, err)
						}
						if got := append(first, drain(t, after)...); !slices.Equal(got, split) {
							t.Fatalf("p=%d subtask %d, %d polls: before + after restore: %s", p, i, k, firstDiff(got, split))
						}
					}
				}
			}
		})
	}
}

// TestTextFileRestoreBatchEndingPastSplit covers a batch whose last line starts inside the split and ends
// past it: the position snapshotted then lies beyond the split's end and must still restore.
func TestTextFileRestoreBatchEndingPastSplit(t *testing.T) {
	// Subtask 0 of 2 gets 511 two-byte lines and one long line that crosses the middle of the file.
	var b strings.Builder
	for range 511 {
		b.WriteString("x\n")
	}
	b.WriteString(strings.Repeat("L", 2000) + "\n")
	b.WriteString("after\n")
	path := writeFile(t, b.String())
	src := connector.TextFile(path)

	before := newReader(t, src, ctxOf(0, 2))
	first, ended := pollN(t, before, 1)
	if len(first) != 512 || ended {
		t.Fatalf("first poll: %d lines, ended %v; want a full batch of 512 that does not end the split", len(first), ended)
	}
	after := newReader(t, src, ctxOf(0, 2))
	if err := checkpointed(t, after).RestoreState(snapshot(t, before)); err != nil {
		t.Fatalf("RestoreState: %v", err)
	}
	if rest := drain(t, after); len(rest) != 0 {
		t.Fatalf("after restore: %d more lines, want none", len(rest))
	}
}

func TestTextFileBadState(t *testing.T) {
	content := "0123456789\nabcdefghij\nklmnopqrst\n" // 33 bytes
	varint := func(v int64) []byte { return binary.AppendVarint(nil, v) }
	tests := []struct {
		name  string
		state []byte
	}{
		{"empty", nil},
		{"truncated varint", []byte{0x80}},
		{"trailing bytes", append(varint(11), 0)},
		{"negative", varint(-1)},
		{"past the end of the file", varint(34)},
		{"far past the end of the file", varint(1 << 40)},
	}
	path := writeFile(t, content)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newReader(t, connector.TextFile(path), ctxOf(0, 2))
			if err := checkpointed(t, r).RestoreState(tc.state); err == nil {
				t.Fatalf("RestoreState(% x) succeeded", tc.state)
			}
		})
	}
}

// sinkJob writes the records 0..n-1 of a Collection with parallelism p to a TextFileSink at path.
func sinkJob(p int, n int64, path string, opts ...runnel.Option) *runnel.Environment {
	env := runnel.NewEnvironment(quietEnv(append(opts, runnel.WithParallelism(p))...)...)
	runnel.FromSource(env, connector.Collection(int64s(0, n))).
		SinkTo(connector.TextFileSink(path, func(v int64) string { return fmt.Sprintf("rec-%d", v) }))
	return env
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestTextFileSink(t *testing.T) {
	const n = 2500
	for _, p := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.txt")
			execute(t, sinkJob(p, n, path))

			var wantFiles []string
			if p == 1 {
				wantFiles = []string{"out.txt"}
			} else {
				for i := range p {
					wantFiles = append(wantFiles, fmt.Sprintf("out.txt-%d", i))
				}
			}
			if got := dirNames(t, dir); !slices.Equal(got, wantFiles) {
				t.Fatalf("files %q, want %q", got, wantFiles)
			}
			for i, name := range wantFiles {
				data, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				// The sink is chained to the Collection, so file i holds subtask i's items in order.
				var want strings.Builder
				for v := i; v < n; v += p {
					fmt.Fprintf(&want, "rec-%d\n", v)
				}
				if string(data) != want.String() {
					t.Fatalf("%s: %s", name, firstDiff(linesOf(string(data)), linesOf(want.String())))
				}
			}
		})
	}
}

func TestTextFileSinkReplacesOldOutput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.txt")
	if err := os.WriteFile(path, []byte(strings.Repeat("stale\n", 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	execute(t, sinkJob(1, 2, path))
	if data, err := os.ReadFile(path); err != nil || string(data) != "rec-0\nrec-1\n" {
		t.Fatalf("output %q, %v; want the new job's two lines", data, err)
	}
}

// TestTextFileSinkFailedJob fails a job whose unbounded source never ends, so no sink subtask reaches its
// end of input: nothing may be left in the directory, neither target nor temporary file.
func TestTextFileSinkFailedJob(t *testing.T) {
	for _, p := range []int{1, 2} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			dir := t.TempDir()
			env := runnel.NewEnvironment(quietEnv(runnel.WithParallelism(p), runnel.WithRestartStrategy("none"),
				runnel.WithFailureInjection("map[0]@3000"))...)
			src := runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) }, connector.GeneratorOptions{}))
			mapped := runnel.Map(src, func(v int64) (int64, error) { return v, nil }).Name("map")
			mapped.SinkTo(connector.TextFileSink(filepath.Join(dir, "out.txt"), func(v int64) string { return fmt.Sprint(v) }))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := env.Execute(ctx, "fails"); err == nil || !strings.Contains(err.Error(), "injected failure") {
				t.Fatalf("Execute: got error %v, want the injected failure", err)
			}
			if names := dirNames(t, dir); len(names) != 0 {
				t.Fatalf("a failed job left %q behind", names)
			}
		})
	}
}

func TestTextFileSinkInvalid(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		sink    runnel.Sink[int64]
		wantErr string
	}{
		{"nil format", connector.TextFileSink[int64](filepath.Join(dir, "out.txt"), nil), "format is nil"},
		{"missing directory", connector.TextFileSink(filepath.Join(dir, "no", "out.txt"), func(v int64) string { return fmt.Sprint(v) }), "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.sink.CreateWriter(ctxOf(0, 1)); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CreateWriter: got error %v, want one containing %q", err, tc.wantErr)
			}
			env := runnel.NewEnvironment(quietEnv()...)
			runnel.FromSource(env, connector.Collection([]int64{1, 2})).SinkTo(tc.sink)
			if _, err := env.Execute(context.Background(), "invalid"); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Execute: got error %v, want one containing %q", err, tc.wantErr)
			}
			if names := dirNames(t, dir); len(names) != 0 {
				t.Fatalf("left %q behind", names)
			}
		})
	}
}

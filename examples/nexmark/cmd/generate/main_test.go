package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerateWritesTheGoldenStream: the command's default output is the golden file; --output writes
// the same bytes to a file; bad flags are refused.
func TestGenerateWritesTheGoldenStream(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("..", "..", "testdata", "generator-1000.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"--events", "1000"}, &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatal("stdout differs from testdata/generator-1000.jsonl")
	}
	seeded, err := os.ReadFile(filepath.Join("..", "..", "testdata", "generator-seed42-rate1000-300.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out.jsonl")
	if err := run([]string{"--events", "300", "--seed", "42", "--rate", "1000", "--output", path}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, seeded) {
		t.Fatalf("--output file differs from the seeded golden file (%v)", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--events", "0"}, "must be positive"},
		{[]string{"--rate", "-1"}, "negative rate"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--output", filepath.Join(t.TempDir(), "no", "such", "dir")}, "no such file"},
	} {
		if err := run(tc.args, &out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

package writable

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.txt")
	if err := os.WriteFile(existing, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want string // error substring; empty: writable
	}{
		{filepath.Join(dir, "new.txt"), ""},
		{existing, ""},
		{"", "no file name"},
		{dir, "is a directory"},
		{filepath.Join(dir, "nosuch", "out.txt"), "directory " + filepath.Join(dir, "nosuch") + " does not exist"},
		{filepath.Join(existing, "out.txt"), "cannot create " + filepath.Join(existing, "out.txt")},
	} {
		err := Check(tc.path)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Check(%q) = %v, want %q", tc.path, err, tc.want)
		}
	}
	// Nothing was left behind or changed.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "existing.txt" {
		t.Fatalf("directory holds %v", entries)
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep" {
		t.Fatalf("existing file now %q", b)
	}
}

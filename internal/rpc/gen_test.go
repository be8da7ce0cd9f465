package rpc

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestGeneratedCodeIsFresh fails when runnel.proto changed but pb/ was not regenerated: gen.sh stamps
// the .proto's SHA-256 into every generated file, and CI never runs buf itself.
func TestGeneratedCodeIsFresh(t *testing.T) {
	src, err := os.ReadFile("runnel.proto")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	want := hex.EncodeToString(sum[:])
	stamp := regexp.MustCompile(`(?m)^// runnel\.proto sha256: ([0-9a-f]{64}) `)
	files, err := filepath.Glob(filepath.Join("pb", "*.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("pb/ holds %v, want the two files gen.sh writes", files)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		m := stamp.FindSubmatch(b)
		switch {
		case m == nil:
			t.Errorf("%s has no runnel.proto stamp: regenerate it with internal/rpc/gen.sh", name)
		case string(m[1]) != want:
			t.Errorf("%s was generated from another runnel.proto (sha256 %s, the file's is now %s): run internal/rpc/gen.sh", name, m[1], want)
		}
	}
}

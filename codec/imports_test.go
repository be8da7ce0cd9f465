package codec

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoRunnelImports holds the layering rule: codec sits below everything else in Runnel and imports
// none of it (its tests may import codec itself).
func TestNoRunnelImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/runnel-dev/runnel") && path != "github.com/runnel-dev/runnel/codec" {
				t.Errorf("%s imports %s; package codec must not depend on the rest of Runnel", name, path)
			}
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	c := MustStruct[record]()
	v := sampleRecord()
	want, _ := c.Append(nil, v)
	done := make(chan error)
	for range 4 {
		go func() {
			var err error
			buf := make([]byte, 0, len(want))
			for range 200 {
				var got record
				buf, _ = c.Append(buf[:0], v)
				if err = c.Decode(buf, &got); err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

package barrier

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPurity holds the package to its rules: it imports only pure standard packages (nothing from Runnel),
// starts no goroutine and uses no channel, so every behaviour is decided by the caller's events alone.
func TestPurity(t *testing.T) {
	allowed := map[string]bool{"fmt": true, "slices": true, "strings": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %q: package barrier may import only fmt, slices and strings", fset.Position(imp.Pos()), path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s starts a goroutine: the aligner is driven by its caller", fset.Position(n.Pos()))
			case *ast.ChanType, *ast.SelectStmt, *ast.SendStmt:
				t.Errorf("%s uses a channel: the aligner is driven by its caller", fset.Position(n.Pos()))
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}

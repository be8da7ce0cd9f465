package scheduler

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPurity holds the package to its rules: imports only graph, ident and pure parts of the standard library,
// starts no goroutines, reads no clock and sleeps nowhere.
func TestPurity(t *testing.T) {
	allowed := map[string]bool{
		"cmp": true, "errors": true, "fmt": true, "math": true, "slices": true, "strconv": true, "strings": true,
		"time": true, // durations in RestartConfig only; see forbidden below
		"github.com/runnel-dev/runnel/internal/graph": true,
		"github.com/runnel-dev/runnel/internal/ident": true,
	}
	forbidden := map[string]bool{
		"time.Now": true, "time.Since": true, "time.Until": true, "time.Sleep": true, "time.After": true,
		"time.AfterFunc": true, "time.Tick": true, "time.NewTimer": true, "time.NewTicker": true,
	}
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
				t.Errorf("%s imports %q: the scheduler may import only graph, ident and pure standard packages", fset.Position(imp.Pos()), path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s starts a goroutine: the scheduler is driven by its caller", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && forbidden[x.Name+"."+n.Sel.Name] {
					t.Errorf("%s uses %s.%s: time is passed in", fset.Position(n.Pos()), x.Name, n.Sel.Name)
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}

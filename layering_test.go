package runnel_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayering holds the import rules of the design: every package may import only the Runnel packages
// listed for it, so the layers point downward and the pure cores stay free of the runtime around them.
func TestLayering(t *testing.T) {
	const mod = "github.com/runnel-dev/runnel"
	allowed := map[string][]string{
		"codec":               {},
		"internal/ident":      {},
		"internal/barrier":    {},
		"internal/checkpoint": {"internal/ident"},
		"internal/graph":      {"internal/ident"},
		"internal/network":    {"internal/ident"},
		"internal/state":      {"codec"},
		"internal/scheduler":  {"internal/graph", "internal/ident"},
		"internal/task":       {"internal/barrier", "internal/checkpoint", "internal/ident", "internal/network"},
		"internal/operator":   {"codec", "internal/graph", "internal/ident", "internal/network", "internal/state", "internal/task"},
		"internal/jobmaster":  {"internal/checkpoint", "internal/graph", "internal/ident", "internal/network", "internal/scheduler", "internal/task"},
		"internal/cluster":    {"internal/ident", "internal/network", "internal/task"},
		// Connectors and examples are built on the public API only, like a user's code.
		"connector":            {"", "codec"},
		"connector/kafka":      {""},
		"examples/wordcount":   {"", "codec", "connector", "examples/internal/run"},
		"examples/clickstream": {"", "codec", "connector", "examples/internal/run"},
		"examples/sequence":    {"", "codec", "connector", "examples/internal/run"},
	}
	for dir, ok := range allowed {
		pkg, err := build.ImportDir(filepath.FromSlash(dir), 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		set := map[string]bool{}
		for _, a := range ok {
			set[a] = true
		}
		for _, imp := range pkg.Imports {
			if imp != mod && !strings.HasPrefix(imp, mod+"/") {
				continue
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(imp, mod), "/")
			if !set[rel] {
				t.Errorf("%s imports %s, which the layering does not allow", dir, imp)
			}
		}
	}
}

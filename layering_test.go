package runnel_test

import (
	"errors"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLayering holds the import rules of the design: every package may import only the Runnel packages
// listed for it, so the layers point downward and the pure cores stay free of the runtime around them.
func TestLayering(t *testing.T) {
	const mod = "github.com/runnel-dev/runnel"
	allowed := map[string][]string{
		"codec":                 {},
		"internal/ident":        {},
		"internal/barrier":      {},
		"internal/watermark":    {},
		"internal/determinants": {},
		"internal/checkpoint":   {"internal/barrier", "internal/ident"},
		"internal/graph":        {"internal/ident"},
		"internal/network":      {"internal/ident", "internal/mtls"},
		"internal/mtls":         {},
		"internal/state":        {"codec"},
		"internal/scheduler":    {"internal/graph", "internal/ident"},
		// The data between the job master and a task attempt: leaf types that the core and the runtime share.
		"internal/deploy":   {"internal/checkpoint", "internal/ident"},
		"internal/task":     {"internal/barrier", "internal/checkpoint", "internal/deploy", "internal/determinants", "internal/ident", "internal/network", "internal/watermark"},
		"internal/operator": {"codec", "internal/deploy", "internal/graph", "internal/ident", "internal/network", "internal/state", "internal/task", "internal/watermark"},
		// The job master's core describes deployments with internal/deploy, never with the runtime that runs them.
		"internal/jobcore": {"internal/barrier", "internal/checkpoint", "internal/deploy", "internal/graph", "internal/ident", "internal/scheduler"},
		// The session's plain data; a TaskManager's report of the tasks it kept carries the core's KeptTask.
		"internal/protocol":  {"internal/jobcore"},
		"internal/jobmaster": {"internal/checkpoint", "internal/graph", "internal/ident", "internal/jobcore", "internal/network", "internal/protocol", "internal/scheduler", "internal/deploy", "internal/buildinfo"},
		"internal/cluster":   {"internal/barrier", "internal/checkpoint", "internal/deploy", "internal/determinants", "internal/ident", "internal/jobcore", "internal/network", "internal/protocol", "internal/scheduler", "internal/task"},
		// The REST API serves what its Source returns: it reaches into no loop, core or cluster package.
		"internal/rest": {},
		// The dashboard's files read everything from the REST API in the browser.
		"internal/ui":        {},
		"internal/buildinfo": {"internal/protocol"},
		"internal/rpc":       {"internal/barrier", "internal/checkpoint", "internal/deploy", "internal/ident", "internal/jobcore", "internal/mtls", "internal/protocol", "internal/rpc/pb"},
		// The executor runs a compiled job and the roles run the processes of a cluster; neither imports
		// the root package, the API a job author imports, which calls them.
		"internal/report":   {"internal/ident", "internal/jobcore"},
		"internal/metrics":  {"internal/cluster", "internal/report"},
		"internal/executor": {"internal/checkpoint", "internal/cluster", "internal/graph", "internal/ident", "internal/jobcore", "internal/jobmaster", "internal/metrics", "internal/operator", "internal/protocol", "internal/report", "internal/rest", "internal/rpc", "internal/scheduler", "internal/task", "internal/ui"},
		"internal/roles":    {"internal/buildinfo", "internal/cluster", "internal/executor", "internal/ha", "internal/jobmaster", "internal/metrics", "internal/mtls", "internal/protocol", "internal/report", "internal/rest", "internal/rpc", "internal/ui"},
		"internal/cli":      {"internal/executor", "internal/ha", "internal/heapbudget", "internal/report", "internal/roles", "internal/scheduler", "internal/writable"},
		"internal/writable": {},
		// The collector's pacing knows the Go runtime only.
		"internal/heapbudget": {},
		// Connectors and examples are built on the public API only, like a user's code.
		// The benches' and the CLI tests' child-process cluster reads job results, nothing below the API.
		"cmd/runnel/internal/proccluster": {""},
		"connector":                       {"", "codec"},
		"connector/kafka":                 {"", "codec"},
		"connector/nats":                  {""},
		"examples/wordcount":              {"", "codec", "connector", "examples/internal/run"},
		"examples/clickstream":            {"", "codec", "connector", "examples/internal/run"},
		"examples/sequence":               {"", "codec", "connector", "examples/internal/run"},
		"examples/nexmark":                {"", "codec", "connector", "examples/internal/run"},
		"examples/fraud":                  {"", "codec", "connector", "examples/internal/run"},
		"examples/sessions":               {"", "codec", "connector", "examples/internal/run"},
		// Test certificates import no Runnel package, so that internal/mtls's own tests may use them.
		"internal/mtls/mtlstest": {},
		// High availability on etcd knows etcd, not the job master or the roles that use it; its test
		// etcd member imports nothing of Runnel's.
		"internal/ha":        {},
		"internal/ha/hatest": {},
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
	// The job master's core and the descriptors it sends reach the task runtime by no path, direct or not:
	// a decision about a deployment must not depend on the code that carries it out.
	for _, dir := range []string{"internal/jobcore", "internal/deploy"} {
		if path := reaches(t, mod, dir, "internal/task"); path != nil {
			t.Errorf("%s reaches internal/task through %s", dir, strings.Join(path, " -> "))
		}
	}
	// Packages for tests only: no package's own (non-test) files import them, listed above or not.
	testOnly := []string{mod + "/internal/mtls/mtlstest", mod + "/internal/ha/hatest"}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, imp := range pkg.Imports {
			if slices.Contains(testOnly, imp) {
				t.Errorf("%s imports %s, which is for tests only", filepath.ToSlash(path), imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// reaches returns the chain of imports by which the module's package from reaches to (from first), or nil.
func reaches(t *testing.T, mod, from, to string) []string {
	t.Helper()
	seen := map[string]bool{}
	var walk func(dir string) []string
	walk = func(dir string) []string {
		if dir == to {
			return []string{dir}
		}
		if seen[dir] {
			return nil
		}
		seen[dir] = true
		pkg, err := build.ImportDir(filepath.FromSlash(dir), 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, imp := range pkg.Imports {
			if !strings.HasPrefix(imp, mod+"/") {
				continue
			}
			if rest := walk(strings.TrimPrefix(imp, mod+"/")); rest != nil {
				return append([]string{dir}, rest...)
			}
		}
		return nil
	}
	return walk(from)
}

// TestRootIsTheAPI holds the root package to what a job author imports it for: it brings in no RPC, command
// line or metrics library (gRPC, cobra, Prometheus); the executor, the process roles and the command line
// that use them live in internal packages it calls. pflag is the one exception, as the type a job declares
// its flags on (RegisterJob): it is what a Go command line's flags are written with.
func TestRootIsTheAPI(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"google.golang.org/grpc", "github.com/spf13/cobra", "github.com/prometheus/"}
	for _, imp := range pkg.Imports {
		for _, f := range forbidden {
			if strings.HasPrefix(imp, f) {
				t.Errorf("the root package imports %s: it is the job-writing API; put what needs it in an internal package", imp)
			}
		}
	}
}

// TestPureCores holds the pure decision packages to their rules (docs/architecture.md: decisions are
// values, I/O is at the edge): they import only the listed packages, start no goroutine, and, where said,
// use no channel and read no clock, so every behaviour is decided by the caller's events alone.
func TestPureCores(t *testing.T) {
	const mod = "github.com/runnel-dev/runnel/"
	clock := []string{"time.Now", "time.Since", "time.Until", "time.Sleep", "time.After", "time.AfterFunc",
		"time.Tick", "time.NewTimer", "time.NewTicker"}
	for _, core := range []struct {
		dir        string
		imports    []string
		noChannels bool
		forbidden  []string
	}{
		{dir: "internal/barrier", imports: []string{"fmt", "slices", "strings"}, noChannels: true},
		// Event-time decisions: time.Duration only in the constructors' bounds, the time itself is passed in.
		{dir: "internal/watermark", imports: []string{"fmt", "math", "strconv", "strings", "time"}, noChannels: true, forbidden: clock},
		{dir: "internal/scheduler", imports: []string{"cmp", "errors", "fmt", "math", "slices", "strconv", "strings",
			"time",                                                     // durations in RestartConfig only: the clock is forbidden below
			mod + "internal/graph", mod + "internal/ident"}, forbidden: clock},
		// The job master's decisions: no lock (sync is not in the list), no channel, no clock; time.Time
		// appears only as report fields computed from the job's start, which the driver passes in.
		{dir: "internal/jobcore", imports: []string{"cmp", "errors", "fmt", "math", "math/rand/v2", "slices", "sort", "strings", "time",
			mod + "internal/barrier", mod + "internal/checkpoint", mod + "internal/deploy", mod + "internal/graph", mod + "internal/ident", mod + "internal/scheduler"},
			noChannels: true, forbidden: clock},
		// The deployment descriptor and the attempt's reports: data only, no channel, no clock.
		{dir: "internal/deploy", imports: []string{"context", "errors", "fmt", "time", mod + "internal/checkpoint", mod + "internal/ident"},
			noChannels: true, forbidden: clock},
	} {
		files, err := filepath.Glob(filepath.Join(filepath.FromSlash(core.dir), "*.go"))
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
				if !slices.Contains(core.imports, path) {
					t.Errorf("%s imports %q: %s may import only %v", fset.Position(imp.Pos()), path, core.dir, core.imports)
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					t.Errorf("%s starts a goroutine: %s is driven by its caller", fset.Position(n.Pos()), core.dir)
				case *ast.ChanType, *ast.SelectStmt, *ast.SendStmt:
					if core.noChannels {
						t.Errorf("%s uses a channel: %s is driven by its caller", fset.Position(n.Pos()), core.dir)
					}
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && slices.Contains(core.forbidden, x.Name+"."+n.Sel.Name) {
						t.Errorf("%s uses %s.%s: time is passed in", fset.Position(n.Pos()), x.Name, n.Sel.Name)
					}
				}
				return true
			})
		}
		if checked == 0 {
			t.Fatalf("%s: no source files checked", core.dir)
		}
	}
}

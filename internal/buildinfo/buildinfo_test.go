package buildinfo

import (
	"errors"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/protocol"
)

func baseInfo() *debug.BuildInfo {
	return &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: modulePath, Version: "v0.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "9e2d1a3b4c5d6e7f8091a2b3c4d5e6f708192a3b"},
			{Key: "vcs.modified", Value: "false"},
		},
	}
}

func mustOf(t *testing.T, exe string, bi *debug.BuildInfo, testValue string) protocol.Build {
	t.Helper()
	b, err := Of(strings.NewReader(exe), bi, testValue)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOfDiffersPerInput: the Sum is the same for the same inputs and differs when any one of them does.
func TestOfDiffersPerInput(t *testing.T) {
	base := mustOf(t, "ELF binary", baseInfo(), "")
	if again := mustOf(t, "ELF binary", baseInfo(), ""); again != base {
		t.Fatalf("the same inputs gave %v and %v", base, again)
	}
	cases := []struct {
		name      string
		exe       string
		change    func(bi *debug.BuildInfo) *debug.BuildInfo
		testValue string
	}{
		{name: "executable", exe: "ELF binarY"},
		{name: "go version", change: func(bi *debug.BuildInfo) *debug.BuildInfo { bi.GoVersion = "go1.26.9"; return bi }},
		{name: "module version", change: func(bi *debug.BuildInfo) *debug.BuildInfo { bi.Main.Version = "v0.4.1"; return bi }},
		{name: "main module", change: func(bi *debug.BuildInfo) *debug.BuildInfo { bi.Main.Path = "example.com/clicks"; return bi }},
		{name: "revision", change: func(bi *debug.BuildInfo) *debug.BuildInfo { bi.Settings[0].Value = "11b0"; return bi }},
		{name: "modified tree", change: func(bi *debug.BuildInfo) *debug.BuildInfo { bi.Settings[1].Value = "true"; return bi }},
		{name: "no build information", change: func(*debug.BuildInfo) *debug.BuildInfo { return nil }},
		{name: "test fingerprint", testValue: "other"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exe, bi := "ELF binary", baseInfo()
			if tc.exe != "" {
				exe = tc.exe
			}
			if tc.change != nil {
				bi = tc.change(bi)
			}
			if got := mustOf(t, exe, bi, tc.testValue); got.Sum == base.Sum {
				t.Fatalf("a different %s gave the same Sum", tc.name)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	cases := []struct {
		name      string
		bi        func() *debug.BuildInfo
		testValue string
		want      string
	}{
		{"runnel itself", baseInfo, "", "runnel v0.4.0, revision 9e2d1a3b4c5d, go1.26.8"},
		{"modified", func() *debug.BuildInfo { bi := baseInfo(); bi.Settings[1].Value = "true"; return bi }, "",
			"runnel v0.4.0, revision 9e2d1a3b4c5d+modified, go1.26.8"},
		{"a program embedding runnel", func() *debug.BuildInfo {
			bi := baseInfo()
			bi.Main = debug.Module{Path: "example.com/clicks", Version: "v1.2.0"}
			bi.Deps = []*debug.Module{{Path: "golang.org/x/sys", Version: "v0.1.0"}, {Path: modulePath, Version: "v0.4.0"}}
			return bi
		}, "", "example.com/clicks v1.2.0 (runnel v0.4.0), revision 9e2d1a3b4c5d, go1.26.8"},
		{"runnel replaced by a directory", func() *debug.BuildInfo {
			bi := baseInfo()
			bi.Main = debug.Module{Path: "example.com/clicks", Version: "(devel)"}
			bi.Deps = []*debug.Module{{Path: modulePath, Version: "v0.4.0", Replace: &debug.Module{Path: "../runnel"}}}
			bi.Settings = nil
			return bi
		}, "", "example.com/clicks (devel) (runnel replaced by ../runnel), go1.26.8"},
		{"no revision", func() *debug.BuildInfo { bi := baseInfo(); bi.Settings = nil; return bi }, "", "runnel v0.4.0, go1.26.8"},
		{"test fingerprint", baseInfo, "b", `runnel v0.4.0, revision 9e2d1a3b4c5d, go1.26.8 (test fingerprint "b")`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustOf(t, "x", tc.bi(), tc.testValue).Describe; got != tc.want {
				t.Fatalf("Describe = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMismatch(t *testing.T) {
	a := mustOf(t, "a", baseInfo(), "")
	newer := baseInfo()
	newer.Main.Version = "v0.4.1"
	b := mustOf(t, "b", newer, "")
	sameVersion := mustOf(t, "c", baseInfo(), "")
	cases := []struct {
		name         string
		theirs, ours protocol.Build
		want         string
	}{
		{"same build", a, a, ""},
		{"other version", a, b, "TaskManager tm-b3 runs " + Short(a.Sum) + " (runnel v0.4.0, revision 9e2d1a3b4c5d, go1.26.8), " +
			"the JobManager runs " + Short(b.Sum) + " (runnel v0.4.1, revision 9e2d1a3b4c5d, go1.26.8): start every process of a cluster from the same build"},
		{"same version, other executable", a, sameVersion, "TaskManager tm-b3 runs " + Short(a.Sum) + " (runnel v0.4.0, revision 9e2d1a3b4c5d, go1.26.8), " +
			"the JobManager runs " + Short(sameVersion.Sum) + " (runnel v0.4.0, revision 9e2d1a3b4c5d, go1.26.8) " +
			"(the versions agree but the executables differ: another program, or a rebuild): start every process of a cluster from the same build"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Mismatch("TaskManager tm-b3", tc.theirs, "the JobManager", tc.ours); got != tc.want {
				t.Fatalf("Mismatch =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	if !strings.HasPrefix(Short(a.Sum), "sha256:") || len(Short(a.Sum)) != len("sha256:")+12+len("…") {
		t.Fatalf("Short = %q", Short(a.Sum))
	}
}

// TestComputeReadsTheRunningExecutable: the build of this test binary is that of its own file, the test
// override counts only in a test binary, and an unreadable executable is an error that says so.
func TestComputeReadsTheRunningExecutable(t *testing.T) {
	path, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bi, _ := debug.ReadBuildInfo()
	want, err := Of(f, bi, "")
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(v string) func(string) string {
		return func(k string) string {
			if k == TestFingerprintEnv {
				return v
			}
			return ""
		}
	}
	cases := []struct {
		name    string
		env     string
		isTest  bool
		same    bool
		wantErr string
	}{
		{name: "plain", isTest: true, same: true},
		{name: "override in a test binary", env: "other", isTest: true, same: false},
		{name: "override ignored outside tests", env: "other", isTest: false, same: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := compute(openExecutable, debug.ReadBuildInfo, getenv(tc.env), tc.isTest)
			if err != nil {
				t.Fatal(err)
			}
			if (got == want) != tc.same {
				t.Fatalf("compute = %v, the file's build %v; want same=%v", got, want, tc.same)
			}
		})
	}
	_, err = compute(func() (io.ReadCloser, error) { return nil, errors.New("permission denied") }, debug.ReadBuildInfo, getenv(""), true)
	if err == nil || !strings.Contains(err.Error(), "build fingerprint: permission denied") {
		t.Fatalf("an unreadable executable: err = %v", err)
	}
	c1, err1 := Current()
	c2, err2 := Current()
	if err1 != nil || err2 != nil || c1 != c2 {
		t.Fatalf("Current twice: %v %v, %v %v", c1, err1, c2, err2)
	}
	if os.Getenv(TestFingerprintEnv) == "" && c1 != want {
		t.Fatalf("Current = %v, want the file's build %v", c1, want)
	}
}

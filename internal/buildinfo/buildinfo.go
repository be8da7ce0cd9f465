// Package buildinfo tells which build of the program this process runs: the SHA-256 of its executable and of
// its build information (module versions, VCS revision, Go version), and a line for people. Every process of
// a cluster must run one build, since the job's code is the binary's; the JobManager refuses a TaskManager
// or a client whose build differs, with the sentence Mismatch makes.
//
// It owns reading the process's own executable once; it must not import the public runnel package or
// anything that runs jobs (it sits beside internal/protocol, whose Build it fills).
package buildinfo

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/runnel-dev/runnel/internal/protocol"
)

// TestFingerprintEnv names the environment variable that makes a test binary pose as another build: when it
// is set and the process is a test binary (testing.Testing), its value is hashed into the Sum and shown in
// Describe. An ordinary binary ignores it, so no deployment can be talked into accepting another build.
const TestFingerprintEnv = "RUNNEL_TEST_FINGERPRINT"

// modulePath is the Runnel module, whose version Describe names whichever program embeds it.
const modulePath = "github.com/runnel-dev/runnel"

// sumVersion starts what the Sum hashes, so a change of what is hashed never makes two builds agree.
const sumVersion = "runnel-build-v1"

// honourTestEnv, set to "yes" with -ldflags -X by a test that builds a binary of its own (cmd/runnel's
// cluster tests), makes that binary honour TestFingerprintEnv as a test binary does. An ordinary build
// leaves it empty.
var honourTestEnv string

var current = sync.OnceValues(func() (protocol.Build, error) {
	return compute(openExecutable, debug.ReadBuildInfo, os.Getenv, testing.Testing() || honourTestEnv == "yes")
})

// Current returns the build of this process, computed at the first call (reading the executable once) and
// the same at every later one. The error says why the executable could not be read; a process that cannot
// tell its build must not join a cluster.
func Current() (protocol.Build, error) { return current() }

// openExecutable opens the file this process runs. On Linux /proc/self/exe is the running image even when
// the file at its path has been replaced or removed since (a deploy that overwrites the binary under a running
// process): the running code is what must match, not whatever the path holds now.
func openExecutable() (io.ReadCloser, error) {
	if runtime.GOOS == "linux" {
		if f, err := os.Open("/proc/self/exe"); err == nil {
			return f, nil
		}
	}
	path, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this process's executable: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading this process's executable: %w", err)
	}
	return f, nil
}

// compute is Current with its inputs passed in.
func compute(open func() (io.ReadCloser, error), read func() (*debug.BuildInfo, bool), getenv func(string) string, isTest bool) (protocol.Build, error) {
	f, err := open()
	if err != nil {
		return protocol.Build{}, fmt.Errorf("build fingerprint: %w", err)
	}
	defer f.Close()
	bi, _ := read()
	testValue := ""
	if isTest {
		testValue = getenv(TestFingerprintEnv)
	}
	b, err := Of(f, bi, testValue)
	if err != nil {
		return protocol.Build{}, fmt.Errorf("build fingerprint: %w", err)
	}
	return b, nil
}

// Of returns the build of an executable whose bytes exe yields, with build information bi (nil: none
// embedded) and, for tests that pose as another build, testValue ("" none). It reads exe to its end.
func Of(exe io.Reader, bi *debug.BuildInfo, testValue string) (protocol.Build, error) {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s;", len(s), s) }
	field(sumVersion)
	fh := sha256.New()
	if _, err := io.Copy(fh, exe); err != nil {
		return protocol.Build{}, fmt.Errorf("reading the executable: %w", err)
	}
	field(string(fh.Sum(nil)))
	info := describe(bi)
	field(info.goVersion)
	field(info.mainPath)
	field(info.mainVersion)
	field(info.runnelVersion)
	field(info.revision)
	field(testValue)
	var b protocol.Build
	h.Sum(b.Sum[:0])
	b.Describe = info.String()
	if testValue != "" {
		b.Describe += fmt.Sprintf(" (test fingerprint %q)", testValue)
	}
	return b, nil
}

// version is what the build information says about a build, for people.
type version struct {
	mainPath, mainVersion string // the program's module
	runnelVersion         string // "" when the program is Runnel's own module
	revision              string // VCS revision, shortened, "+modified" when the tree was dirty; "" unknown
	goVersion             string
}

func describe(bi *debug.BuildInfo) version {
	if bi == nil {
		return version{goVersion: runtime.Version()}
	}
	v := version{mainPath: bi.Main.Path, mainVersion: bi.Main.Version, goVersion: bi.GoVersion}
	if v.mainPath != modulePath {
		v.runnelVersion = "(not linked)"
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				v.runnelVersion = d.Version
				if d.Replace != nil {
					v.runnelVersion = d.Replace.Version
					if v.runnelVersion == "" {
						v.runnelVersion = "replaced by " + d.Replace.Path
					}
				}
			}
		}
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.revision = s.Value
			if len(v.revision) > 12 {
				v.revision = v.revision[:12]
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && v.revision != "" {
		v.revision += "+modified"
	}
	return v
}

// String is "runnel v0.4.0, revision 9e2d1a3b4c5d, go1.26.8", or for a program that embeds Runnel
// "example.com/clicks v1.2.0 (runnel v0.4.0), revision …, go1.26.8".
func (v version) String() string {
	var parts []string
	switch {
	case v.mainPath == "":
		parts = append(parts, "no build information")
	case v.mainPath == modulePath:
		parts = append(parts, "runnel "+v.mainVersion)
	default:
		parts = append(parts, fmt.Sprintf("%s %s (runnel %s)", v.mainPath, v.mainVersion, v.runnelVersion))
	}
	if v.revision != "" {
		parts = append(parts, "revision "+v.revision)
	}
	parts = append(parts, v.goVersion)
	return strings.Join(parts, ", ")
}

// Short is how Mismatch shows a Sum: "sha256:" and its first 12 hexadecimal digits.
func Short(sum [32]byte) string { return "sha256:" + hex.EncodeToString(sum[:6]) + "…" }

// Mismatch returns "" when the two builds are one, and otherwise the sentence that refuses the peer:
// "TaskManager tm-b3 runs sha256:4f1c… (runnel v0.4.0, …), the JobManager runs sha256:a07e… (runnel v0.4.1,
// …): start every process of a cluster from the same build". peer and self name the two sides ("TaskManager
// tm-b3", "the JobManager"). When the descriptions agree the sentence says the binaries differ all the same
// (a rebuild with local changes, or two programs of one version).
func Mismatch(peer string, theirs protocol.Build, self string, ours protocol.Build) string {
	if theirs.Sum == ours.Sum {
		return ""
	}
	hint := ""
	if theirs.Describe == ours.Describe {
		hint = " (the versions agree but the executables differ: another program, or a rebuild)"
	}
	return fmt.Sprintf("%s runs %s (%s), %s runs %s (%s)%s: start every process of a cluster from the same build",
		peer, Short(theirs.Sum), theirs.Describe, self, Short(ours.Sum), ours.Describe, hint)
}

package sequence

import (
	"strings"
	"testing"

	"github.com/runnel-dev/runnel"
)

// A violation makes the run fail (the command exits 1); every other verdict passes.
func TestVerify(t *testing.T) {
	finished := &runnel.JobResult{Status: "FINISHED"}
	for _, tc := range []struct {
		name string
		c    Checker
		want string // "" for no error
	}{
		{"ok", Checker{Records: 10, ExpectedRecords: 10, Verdict: VerdictOK}, ""},
		{"incomplete", Checker{Records: 4, ExpectedRecords: 10, Verdict: VerdictIncomplete}, ""},
		{"approximate", Checker{Records: 8, Lost: 2, ExpectedRecords: 10, Verdict: VerdictApproximateOK}, ""},
		{"violation", Checker{Records: 9, Duplicated: 3, ExpectedRecords: 10, Verdict: VerdictViolation}, "VIOLATION: 9 records of 10, lost 0 (the failovers reported 0), duplicated 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := verify(tc.c, finished)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("verify: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("verify: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

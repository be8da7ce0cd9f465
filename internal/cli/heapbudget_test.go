package cli

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestHeapBudgetFlag: --heap-budget takes bytes plain or with a binary unit, and names what is wrong.
func TestHeapBudgetFlag(t *testing.T) {
	for _, tc := range []struct {
		arg     string
		want    uint64 // the budget
		wantErr string
	}{
		{"268435456", 256 << 20, ""},
		{"512MiB", 512 << 20, ""},
		{"512mib", 512 << 20, ""},
		{"2GiB", 2 << 30, ""},
		{"2g", 2 << 30, ""},
		{"1024k", 1 << 20, ""},
		{"1 GiB", 1 << 30, ""},
		{"0", 256 << 20, ""}, // the default
		{"-1", 0, ""},        // none
		{"4096", 0, "invalid --heap-budget 4096: at least 1 MiB"},
		{"1023KiB", 0, "invalid --heap-budget 1047552: at least 1 MiB"},
		{"-2", 0, "invalid --heap-budget -2"},
		{"1.5GiB", 0, "want a whole number of bytes"},
		{"2GB", 0, `unknown unit "GB"`},
		{"-1GiB", 0, "out of range"},
		{"99999999999t", 0, "out of range"},
		{"", 0, "want a whole number of bytes"},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			AddHeapBudgetFlag(fs) // its function would start the pacer: the budget is checked without it
			err := fs.Parse([]string{"--heap-budget=" + tc.arg})
			var got uint64
			if err == nil {
				got, err = heapBudget(int64(*fs.Lookup("heap-budget").Value.(*byteSize)))
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one with %q", err, tc.wantErr)
			case tc.wantErr == "" && got != tc.want:
				t.Fatalf("budget %d, want %d", got, tc.want)
			}
		})
	}
}

package task

import (
	"testing"
	"time"
)

// TestAlignmentTiming: an alignment takes from its first barrier to the snapshot, and nothing when the
// first barrier completes it or the snapshot is of another checkpoint.
func TestAlignmentTiming(t *testing.T) {
	for _, tc := range []struct {
		name     string
		barriers []int64 // the barriers, with a pause before the last one
		snapshot int64
		aligned  bool
	}{
		{"one channel", []int64{4}, 4, false},
		{"two channels", []int64{4, 4}, 4, true},
		{"a newer checkpoint starts anew", []int64{4, 5}, 5, false},
		{"a source's trigger", nil, 4, false},
		{"another checkpoint's barriers", []int64{3, 3}, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a alignment
			for i, id := range tc.barriers {
				if i == len(tc.barriers)-1 && i > 0 {
					time.Sleep(5 * time.Millisecond)
				}
				a.barrier(id, 0, 0)
			}
			got := a.took(tc.snapshot)
			if tc.aligned && got < 5*time.Millisecond || !tc.aligned && got != 0 {
				t.Fatalf("took %v; want at least 5ms: %v", got, tc.aligned)
			}
		})
	}
}

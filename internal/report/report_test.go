package report

import (
	"testing"
	"time"
)

// TestCeilMillis: durations round up to whole milliseconds, so that a figure is never lower than what
// happened and a sub-millisecond recovery does not read as "not measured".
func TestCeilMillis(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0}, {0, 0}, {time.Nanosecond, 1}, {300 * time.Microsecond, 1},
		{time.Millisecond, 1}, {time.Millisecond + 1, 2}, {1500 * time.Millisecond, 1500},
	} {
		if got := CeilMillis(tc.d); got != tc.want {
			t.Errorf("CeilMillis(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

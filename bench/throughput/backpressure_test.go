package throughput

import (
	"context"
	"strings"
	"testing"
)

// TestBackpressureSummary checks the medians, ranges and ratio taken over the runs of each mode.
func TestBackpressureSummary(t *testing.T) {
	r := &BackpressureResult{Runs: []BackpressureRun{
		{Mode: Aligned, DurationsMillis: []int64{300, 500}, StateBytes: []int64{10, 10}, AlignmentMillis: []int64{1, 3}, SinkRPS: 100},
		{Mode: Unaligned, DurationsMillis: []int64{20, 10, 30}, StateBytes: []int64{50, 70, 60}, AlignmentMillis: []int64{0, 0, 0}, SinkRPS: 90},
		{Mode: Aligned, DurationsMillis: []int64{400}, StateBytes: []int64{12}, AlignmentMillis: []int64{2}, SinkRPS: 110, Incomplete: 1},
		{Mode: Unaligned, DurationsMillis: []int64{}, StateBytes: []int64{}, AlignmentMillis: []int64{}, SinkRPS: 80},
	}}
	r.summarize()
	if r.AlignedMillis != 400 || r.AlignedRangeMillis != [2]int64{300, 500} || r.AlignedCheckpoints != 3 || r.AlignedIncomplete != 1 ||
		r.AlignedStateBytes != 10 || r.AlignedAlignmentMillis != 2 || r.AlignedSinkRPS != 105 {
		t.Errorf("aligned: %+v", r)
	}
	if r.UnalignedMillis != 20 || r.UnalignedRangeMillis != [2]int64{10, 30} || r.UnalignedCheckpoints != 3 ||
		r.UnalignedStateBytes != 60 || r.UnalignedSinkRPS != 85 || r.Ratio != 20 {
		t.Errorf("unaligned: %+v", r)
	}
}

func TestBackpressureBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  BackpressureConfig
		want string
	}{
		{BackpressureConfig{Modes: []string{"sideways"}}, `mode "sideways"`},
		{BackpressureConfig{SourceFactor: 0.5}, "source factor at least 1"},
		{BackpressureConfig{Warmup: -1}, "warm-up at least 0"},
	} {
		if _, err := RunBackpressure(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

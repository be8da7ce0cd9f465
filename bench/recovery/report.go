package recovery

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Targets of approximate local recovery (issue 4).
const (
	TargetApproximateOutageMS = 100  // approximate outage under 100 ms
	TargetUpstreamRatio       = 0.95 // upstream throughput during recovery at least 0.95 of before
	TargetOutageSpeedup       = 10   // approximate outage at least 10 times shorter than full
)

// WriteTable prints the results as a table, followed by the comparison of full and approximate failover
// and the targets, when both ran.
func WriteTable(w io.Writer, rs []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\toutage_ms\tsinks_failure_to_output_ms\tsink_gap_ms\tupstream_throughput_ratio\trecords_lost\tchecker_lost\trestarted_subtasks\tbaseline_stall_ms\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.3f\t%d\t%d\t%d/%d\t%.1f\t\n", r.Failover, r.OutageMS, r.SinksFailureToOutputMS, r.SinkGapMS, r.UpstreamRatio,
			r.RecordsLost, r.CheckerRecordsLost, r.RestartedSubtasks, r.Subtasks, r.BaselineMaxStallMS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rs) > 0 {
		r := rs[0]
		load := "n/a"
		if r.LoadAvg1m != nil {
			load = fmt.Sprintf("%.2f", *r.LoadAvg1m)
		}
		mode := "aligned"
		if r.UnalignedCheckpoints {
			mode = "unaligned"
			if r.AlignedCheckpointTimeoutMS > 0 {
				mode = fmt.Sprintf("unaligned after %d ms aligned", r.AlignedCheckpointTimeoutMS)
			}
		}
		fmt.Fprintf(w, "(scenario %s, parallelism %d, %d keys, %d payload bytes per key in %s state, %d records/s over all sources, "+
			"%s checkpoints every %d ms, buffer timeout %d ms, %d TaskManager(s), map[%d] fails after %d ms of %d; %d cores, load %s)\n",
			r.Scenario, r.Parallelism, r.Keys, r.StateBytesPerKey, r.StateBackend, r.SourceRateRPS,
			mode, r.CheckpointIntervalMS, r.BufferTimeoutMS, r.TaskManagers, FailedSubtask, r.FailAfterMS, r.DurationMS, r.Cores, load)
	}
	var full, approx *Result
	for _, r := range rs {
		switch r.Failover {
		case "full":
			full = r
		case "approximate":
			approx = r
		}
	}
	if approx != nil {
		fmt.Fprintf(w, "approximate outage < %d ms:            %s (outage_ms %d, sinks_failure_to_output_ms %.1f)\n", TargetApproximateOutageMS,
			verdict(approx.OutageMS < TargetApproximateOutageMS && approx.SinksFailureToOutputMS < TargetApproximateOutageMS), approx.OutageMS, approx.SinksFailureToOutputMS)
		fmt.Fprintf(w, "approximate upstream ratio >= %.2f:     %s (%.3f)\n", TargetUpstreamRatio,
			verdict(approx.UpstreamRatio >= TargetUpstreamRatio), approx.UpstreamRatio)
	}
	if full != nil && approx != nil {
		// The outage runs from the failure until the restarted path writes again (issue 4): sink_gap_ms also
		// holds the silence before the failure, which with a large state can be a stall of a checkpoint, so
		// the sinks' figure here is the time to the first record a restarted sink wrote.
		byReport, okReport := Speedup(float64(full.OutageMS), float64(approx.OutageMS))
		bySink, okSink := Speedup(full.SinksFailureToOutputMS, approx.SinksFailureToOutputMS)
		fmt.Fprintf(w, "full / approximate outage >= %d:        %s (outage_ms %s, sinks_failure_to_output_ms %s)\n", TargetOutageSpeedup,
			verdict(byReport >= TargetOutageSpeedup && bySink >= TargetOutageSpeedup),
			speedupString(byReport, okReport), speedupString(bySink, okSink))
	}
	return nil
}

// Speedup returns full / approximate; ok is false when the approximate figure is 0 (below the resolution),
// and then the speedup returned is full / 1 ms, a lower bound.
func Speedup(full, approx float64) (float64, bool) {
	if approx <= 0 {
		return full, false
	}
	return full / approx, true
}

func speedupString(x float64, ok bool) string {
	if !ok {
		return fmt.Sprintf(">= %.1fx", x)
	}
	return fmt.Sprintf("%.1fx", x)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/runnel-dev/runnel/internal/report"
)

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress shows job snapshots: a refreshing block on a terminal, one log line per snapshot otherwise.
type progress struct {
	w           io.Writer
	interactive bool
	log         *slog.Logger
	lines       int // lines of the block drawn last
	last        time.Time
	prev        map[string][2]uint64
	failovers   int // failovers logged so far
}

func newProgress(w io.Writer, interactive bool, log *slog.Logger) *progress {
	return &progress{w: w, interactive: interactive, log: log, prev: map[string][2]uint64{}}
}

// update is called from the runtime's progress goroutine, and once more with the final result; calls do
// not overlap.
func (p *progress) update(res *report.JobResult) {
	now := time.Now()
	dt := now.Sub(p.last).Seconds()
	if p.last.IsZero() {
		dt = float64(res.WallMillis) / 1000
	}
	p.last = now
	type row struct {
		name, status    string
		inRate, outRate float64
		in, out         uint64
	}
	rows := make([]row, 0, len(res.Vertices))
	for _, v := range res.Vertices {
		pr := p.prev[v.Name]
		r := row{name: v.Name, status: subtaskStatus(v), in: v.RecordsIn, out: v.RecordsOut}
		if terminal(res.Status) && res.WallMillis > 0 {
			// The final snapshot may come right after the last one: show the averages of the run (of the
			// current attempts, whose counters start at 0).
			secs := float64(res.WallMillis) / 1000
			r.inRate, r.outRate = float64(v.RecordsIn)/secs, float64(v.RecordsOut)/secs
		} else if dt > 0 {
			r.inRate = float64(v.RecordsIn-min(pr[0], v.RecordsIn)) / dt
			r.outRate = float64(v.RecordsOut-min(pr[1], v.RecordsOut)) / dt
		}
		p.prev[v.Name] = [2]uint64{v.RecordsIn, v.RecordsOut}
		rows = append(rows, r)
	}
	elapsed := time.Duration(res.WallMillis) * time.Millisecond
	if !p.interactive {
		// A failover is logged once it is complete (its restarted subtasks run again), or at the end.
		for _, f := range res.Failovers[min(p.failovers, len(res.Failovers)):] {
			if f.RecoveryMillis == 0 && !terminal(res.Status) {
				break
			}
			p.log.Info("failover", failoverAttrs(f)...)
			p.failovers++
		}
		parts := make([]string, len(rows))
		for i, r := range rows {
			parts[i] = fmt.Sprintf("%s [%s] in %s/s out %s/s", r.name, r.status, human(r.inRate), human(r.outRate))
		}
		attrs := []any{"job", res.Job, "status", res.Status, "elapsed", elapsed.Round(time.Second).String()}
		if c := res.Checkpoints; c != nil {
			attrs = append(attrs, "checkpoints", c.Completed)
		}
		if n := len(res.Failovers); n > 0 {
			attrs = append(attrs, "failovers", n)
		}
		p.log.Info("progress", append(attrs, "vertices", strings.Join(parts, "; "))...)
		return
	}
	var b strings.Builder
	if p.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.lines) // back to the top of the previous block
	}
	width := len("vertex")
	for _, r := range rows {
		width = max(width, len(r.name))
	}
	fmt.Fprintf(&b, "\x1b[2Kjob %s  %s  %s%s\n", res.Job, res.Status, elapsed.Round(100*time.Millisecond), recoveryStatus(res))
	fmt.Fprintf(&b, "\x1b[2K  %-*s  %-22s %12s %12s %14s %14s\n", width, "vertex", "status", "in/s", "out/s", "in", "out")
	for _, r := range rows {
		fmt.Fprintf(&b, "\x1b[2K  %-*s  %-22s %12s %12s %14d %14d\n", width, r.name, r.status, human(r.inRate), human(r.outRate), r.in, r.out)
	}
	p.lines = 2 + len(rows)
	io.WriteString(p.w, b.String())
}

// terminal reports whether a job status is final.
func terminal(status string) bool {
	return status == "FINISHED" || status == "FAILED" || status == "CANCELED"
}

// failoverAttrs describes a failover for a log line.
func failoverAttrs(f report.FailoverResult) []any {
	restored := "none"
	if f.CheckpointRestored != nil {
		restored = fmt.Sprint(*f.CheckpointRestored)
	}
	attrs := []any{"failed", f.Failed, "strategy", f.Strategy, "restarted", strings.Join(f.Restarted, ","),
		"checkpoint_restored", restored}
	if f.RecoveryMillis > 0 {
		attrs = append(attrs, "recovery", (time.Duration(f.RecoveryMillis) * time.Millisecond).String())
	}
	if f.Fallback != "" {
		attrs = append(attrs, "fallback", f.Fallback)
	}
	if f.RecordsReplayed+f.DuplicatesDropped > 0 {
		attrs = append(attrs, "records_replayed", f.RecordsReplayed, "duplicates_dropped", f.DuplicatesDropped)
	}
	return append(attrs, "cause", f.Cause)
}

// recoveryStatus is the part of the status block's title about checkpoints and failovers.
func recoveryStatus(res *report.JobResult) string {
	var b strings.Builder
	if c := res.Checkpoints; c != nil {
		fmt.Fprintf(&b, "  checkpoints %d", c.Completed)
		if c.Completed > 0 {
			fmt.Fprintf(&b, " (last #%d)", c.LastCompletedID)
		}
		if c.Failed+c.Aborted > 0 {
			fmt.Fprintf(&b, ", %d failed, %d aborted", c.Failed, c.Aborted)
		}
	}
	if n := len(res.Failovers); n > 0 {
		last := res.Failovers[n-1]
		fmt.Fprintf(&b, "  failovers %d (last: %s, %s)", n, last.Failed, last.Strategy)
	}
	return b.String()
}

// subtaskStatus summarizes the states of a vertex's subtasks, e.g. "RUNNING 2/2" or "RUNNING 1/2 FINISHED 1/2",
// and the highest attempt when a subtask was restarted ("RUNNING 2/2 attempt 1").
func subtaskStatus(v report.VertexResult) string {
	var order []string
	count := map[string]int{}
	for _, st := range v.Subtasks {
		if count[st.State] == 0 {
			order = append(order, st.State)
		}
		count[st.State]++
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%s %d/%d", s, count[s], len(v.Subtasks))
	}
	attempt := 0
	for _, st := range v.Subtasks {
		attempt = max(attempt, st.Attempt)
	}
	if attempt > 0 {
		parts = append(parts, fmt.Sprintf("attempt %d", attempt))
	}
	return strings.Join(parts, " ")
}

// human formats a rate with a k/M suffix.
func human(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	default:
		return fmt.Sprintf("%.0f", x)
	}
}

// alreadyFinished says, for a job restored from a checkpoint in which it had already finished, that it had
// and which checkpoint that was: the run read and emitted nothing.
func alreadyFinished(res *report.JobResult) string {
	r := res.RestoredFrom
	if r == nil || !r.Finished {
		return ""
	}
	return fmt.Sprintf(": it had already finished in checkpoint %d of %s, which it was restored from; nothing was read or emitted again",
		r.CheckpointID, r.Location)
}

// recoverySummary says how many checkpoints completed and failovers happened, if any.
func recoverySummary(res *report.JobResult) string {
	var parts []string
	if c := res.Checkpoints; c != nil {
		parts = append(parts, plural(c.Completed, "checkpoint")+" completed")
	}
	if n := len(res.Failovers); n > 0 {
		parts = append(parts, plural(int64(n), "failover"))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func plural(n int64, what string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

package barrier

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestAligner runs scripts: each line is an event and the action it must return, "EVENT -> ACTION", or
// "state -> STATE" for the aligner's String. Events: "barrier CH #ID", "ubarrier CH #ID" (an unaligned
// checkpoint's), "cancel CH #ID", "end CH", "abort #ID" and "abort up to #ID" (the job master's),
// "reset CH", "timeout #ID" (the aligned checkpoint timeout).
func TestAligner(t *testing.T) {
	cases := []struct {
		name   string
		n      int
		mode   Mode
		script string
	}{
		// Exactly-once alignment.
		{"three channels align", 3, ExactlyOnce, `
			state        -> exactly-once, 3 channels, idle
			barrier 0 #1 -> block [0]
			state        -> exactly-once, 3 channels, aligning #1 (received [0], blocked [0])
			barrier 2 #1 -> block [2]
			barrier 1 #1 -> snapshot #1, unblock all
			state        -> exactly-once, 3 channels, idle, completed #1
			barrier 1 #2 -> block [1]
			barrier 0 #2 -> block [0]
			barrier 2 #2 -> snapshot #2, unblock all`},
		{"single channel snapshots at once", 1, ExactlyOnce, `
			barrier 0 #1 -> snapshot #1
			barrier 0 #2 -> snapshot #2
			barrier 0 #2 -> dropped
			barrier 0 #1 -> dropped
			state        -> exactly-once, 1 channel, idle, completed #2`},
		{"duplicate barrier dropped", 2, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			barrier 0 #1 -> dropped
			barrier 1 #1 -> snapshot #1, unblock all
			barrier 0 #1 -> dropped`},
		{"ids below 1 dropped", 2, ExactlyOnce, `
			barrier 0 #0  -> dropped
			cancel 1 #-1  -> dropped
			abort #0      -> dropped
			state         -> exactly-once, 2 channels, idle`},
		{"older barrier during alignment dropped", 3, ExactlyOnce, `
			barrier 0 #5 -> block [0]
			barrier 1 #4 -> dropped
			cancel 2 #3  -> dropped
			state        -> exactly-once, 3 channels, aligning #5 (received [0], blocked [0])`},
		{"newer barrier subsumes the pending one", 3, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			barrier 1 #2 -> abort #1 (subsumed), unblock all, block [1]
			state        -> exactly-once, 3 channels, aligning #2 (received [1], blocked [1]), done #1
			barrier 2 #1 -> dropped
			barrier 0 #1 -> dropped
			barrier 0 #2 -> block [0]
			barrier 2 #2 -> snapshot #2, unblock all
			state        -> exactly-once, 3 channels, idle, completed #2`},
		{"newer barrier skipping ids", 2, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			barrier 1 #4 -> abort #1 (subsumed), unblock all, block [1]
			barrier 0 #3 -> dropped
			barrier 0 #4 -> snapshot #4, unblock all`},

		// Cancel markers.
		{"cancel marker for the pending checkpoint", 3, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			barrier 1 #1 -> block [1]
			cancel 2 #1  -> abort #1 (cancel marker), unblock all
			state        -> exactly-once, 3 channels, idle, done #1
			barrier 2 #1 -> dropped
			cancel 0 #1  -> dropped
			barrier 0 #2 -> block [0]`},
		{"cancel marker before any barrier of its checkpoint", 3, ExactlyOnce, `
			cancel 1 #1  -> abort #1 (cancel marker)
			barrier 0 #1 -> dropped
			barrier 2 #1 -> dropped
			cancel 0 #1  -> dropped
			barrier 0 #2 -> block [0]`},
		{"cancel marker for a future id while idle", 2, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			barrier 1 #1 -> snapshot #1, unblock all
			cancel 0 #3  -> abort #3 (cancel marker)
			state        -> exactly-once, 2 channels, idle, completed #1, done #3
			barrier 1 #2 -> dropped
			barrier 1 #3 -> dropped
			barrier 1 #4 -> block [1]
			barrier 0 #4 -> snapshot #4, unblock all`},
		{"cancel marker for a future id while aligning", 3, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			cancel 1 #2  -> abort #1 (subsumed), abort #2 (cancel marker), unblock all
			barrier 2 #1 -> dropped
			barrier 2 #2 -> dropped
			barrier 0 #2 -> dropped
			barrier 2 #3 -> block [2]`},

		// End of partition.
		{"end of partition completes the alignment", 3, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			barrier 1 #1 -> block [1]
			end 2        -> snapshot #1, unblock all
			state        -> exactly-once, 3 channels, idle, ended [2], completed #1
			barrier 0 #2 -> block [0]
			barrier 1 #2 -> snapshot #2, unblock all`},
		{"end of partition before the barrier", 2, ExactlyOnce, `
			end 1        -> nothing
			barrier 0 #1 -> snapshot #1`},
		{"end of partition on the only unaligned channel of two", 2, ExactlyOnce, `
			barrier 1 #7 -> block [1]
			end 0        -> snapshot #7, unblock all
			end 1        -> nothing
			state        -> exactly-once, 2 channels, idle, ended [0 1], completed #7`},
		{"end of partition on a channel read although blocked", 3, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			end 0        -> nothing
			state        -> exactly-once, 3 channels, aligning #1 (received [0]), ended [0]
			barrier 1 #1 -> block [1]
			barrier 2 #1 -> snapshot #1, unblock all`},
		{"nothing counts after end of partition", 2, ExactlyOnce, `
			end 0        -> nothing
			barrier 0 #1 -> dropped
			cancel 0 #1  -> dropped
			end 0        -> dropped
			barrier 1 #1 -> snapshot #1`},

		// The job master's aborts.
		{"abort of the pending checkpoint", 2, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			abort #1     -> abort #1 (job master), unblock all
			barrier 1 #1 -> dropped
			abort #1     -> dropped
			barrier 1 #2 -> block [1]`},
		{"abort of a future checkpoint is remembered", 2, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			abort #3     -> nothing
			abort #2     -> nothing
			state        -> exactly-once, 2 channels, aligning #1 (received [0], blocked [0]), aborted ahead [2 3]
			barrier 1 #1 -> snapshot #1, unblock all
			barrier 0 #2 -> dropped
			barrier 1 #2 -> dropped
			barrier 1 #3 -> dropped
			barrier 0 #3 -> dropped
			state        -> exactly-once, 2 channels, idle, completed #1, done #3
			barrier 0 #4 -> block [0]`},
		{"barrier of an aborted checkpoint still subsumes the pending one", 3, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			abort #2     -> nothing
			barrier 1 #2 -> abort #1 (subsumed), unblock all
			barrier 0 #2 -> dropped
			barrier 2 #3 -> block [2]`},
		{"a barrier passes remembered aborts below it", 2, ExactlyOnce, `
			abort #2     -> nothing
			abort #5     -> nothing
			barrier 0 #3 -> block [0]
			state        -> exactly-once, 2 channels, aligning #3 (received [0], blocked [0]), aborted ahead [5]
			barrier 1 #3 -> snapshot #3, unblock all
			barrier 1 #5 -> dropped`},
		{"abort of an old checkpoint dropped", 2, ExactlyOnce, `
			barrier 0 #4 -> block [0]
			abort #3     -> dropped
			barrier 1 #4 -> snapshot #4, unblock all
			abort #4     -> dropped`},

		{"restarted task skips the checkpoints triggered before it", 2, ExactlyOnce, `
			abort up to #4 -> nothing
			state          -> exactly-once, 2 channels, idle, done #4
			barrier 0 #4   -> dropped
			barrier 1 #3   -> dropped
			barrier 1 #5   -> block [1]
			abort up to #4 -> dropped
			barrier 0 #5   -> snapshot #5, unblock all`},
		{"abort up to a pending checkpoint", 2, ExactlyOnce, `
			abort #6       -> nothing
			abort #9       -> nothing
			barrier 0 #2   -> block [0]
			abort up to #6 -> abort #2 (job master), unblock all
			state          -> exactly-once, 2 channels, idle, done #6, aborted ahead [9]
			barrier 1 #7   -> block [1]`},

		// Restarted producers (approximate local recovery).
		{"reset of an unaligned channel", 3, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			barrier 1 #1 -> block [1]
			reset 2      -> abort #1 (channel reset), unblock all
			barrier 2 #1 -> dropped
			barrier 2 #2 -> block [2]`},
		{"reset of a blocked channel", 2, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			reset 0      -> abort #1 (channel reset), unblock all
			state        -> exactly-once, 2 channels, idle, done #1`},
		{"reset while idle", 2, ExactlyOnce, `
			reset 1      -> nothing
			barrier 0 #1 -> block [0]
			barrier 1 #1 -> snapshot #1, unblock all`},
		{"reset of an ended channel makes it live again", 2, ExactlyOnce, `
			end 1        -> nothing
			reset 1      -> nothing
			state        -> exactly-once, 2 channels, idle
			barrier 0 #1 -> block [0]
			barrier 1 #1 -> snapshot #1, unblock all`},
		{"checkpoints continue after a failover", 2, ExactlyOnce, `
			barrier 0 #1 -> block [0]
			barrier 1 #1 -> snapshot #1, unblock all
			barrier 0 #2 -> block [0]
			reset 1      -> abort #2 (channel reset), unblock all
			abort #2     -> dropped
			abort #3     -> nothing
			barrier 0 #3 -> dropped
			barrier 1 #4 -> block [1]
			barrier 0 #4 -> snapshot #4, unblock all
			state        -> exactly-once, 2 channels, idle, completed #4`},

		// At-least-once.
		{"at-least-once never blocks", 3, AtLeastOnce, `
			barrier 0 #1 -> nothing
			barrier 2 #1 -> nothing
			state        -> at-least-once, 3 channels, aligning #1 (received [0 2])
			barrier 2 #1 -> dropped
			barrier 1 #1 -> snapshot #1`},
		{"at-least-once single channel", 1, AtLeastOnce, `
			barrier 0 #1 -> snapshot #1`},
		{"at-least-once newer barrier subsumes", 2, AtLeastOnce, `
			barrier 0 #1 -> nothing
			barrier 0 #2 -> abort #1 (subsumed)
			barrier 1 #1 -> dropped
			barrier 1 #2 -> snapshot #2`},
		{"at-least-once cancel marker", 2, AtLeastOnce, `
			barrier 0 #1 -> nothing
			cancel 1 #1  -> abort #1 (cancel marker)
			cancel 1 #2  -> abort #2 (cancel marker)
			barrier 0 #2 -> dropped`},
		{"at-least-once end of partition", 3, AtLeastOnce, `
			barrier 0 #1 -> nothing
			end 1        -> nothing
			end 2        -> snapshot #1`},
		// Unaligned checkpoints.
		{"unaligned snapshots at the first barrier", 3, Unaligned, `
			ubarrier 1 #1 -> snapshot #1 unaligned
			state         -> exactly-once, 3 channels, storing channel state of #1 (received [1]), completed #1
			ubarrier 1 #1 -> dropped
			ubarrier 0 #1 -> nothing
			ubarrier 2 #1 -> complete #1
			state         -> exactly-once, 3 channels, idle, completed #1
			ubarrier 2 #1 -> dropped`},
		{"unaligned on one channel", 1, Unaligned, `
			ubarrier 0 #1 -> snapshot #1 unaligned, complete #1
			ubarrier 0 #2 -> snapshot #2 unaligned, complete #2`},
		{"unaligned completed by ends of partition", 3, Unaligned, `
			end 2         -> nothing
			ubarrier 0 #1 -> snapshot #1 unaligned
			end 1         -> complete #1`},
		{"unaligned subsumed, cancelled, aborted", 2, Unaligned, `
			ubarrier 0 #1 -> snapshot #1 unaligned
			ubarrier 0 #2 -> abort #1 (subsumed), snapshot #2 unaligned
			ubarrier 1 #1 -> dropped
			cancel 1 #2   -> abort #2 (cancel marker)
			ubarrier 1 #3 -> snapshot #3 unaligned
			abort #3      -> abort #3 (job master)
			ubarrier 0 #3 -> dropped`},
		{"savepoint barriers align in unaligned mode", 2, Unaligned, `
			barrier 0 #1  -> block [0]
			barrier 1 #1  -> snapshot #1, unblock all
			ubarrier 1 #2 -> snapshot #2 unaligned
			ubarrier 0 #2 -> complete #2`},
		{"aligned checkpoint timeout", 3, ExactlyOnce, `
			barrier 0 #1  -> block [0]
			timeout #2    -> dropped
			barrier 2 #1  -> block [2]
			timeout #1    -> snapshot #1 unaligned, unblock all
			state         -> exactly-once, 3 channels, storing channel state of #1 (received [0 2]), completed #1
			timeout #1    -> dropped
			barrier 1 #1  -> complete #1
			timeout #1    -> dropped`},
		{"at-least-once ignores unaligned barriers", 2, AtLeastOnce, `
			ubarrier 0 #1 -> nothing
			timeout #1    -> dropped
			ubarrier 1 #1 -> snapshot #1`},
		{"at-least-once reset and abort", 2, AtLeastOnce, `
			barrier 0 #1 -> nothing
			reset 1      -> abort #1 (channel reset)
			barrier 1 #2 -> nothing
			abort #2     -> abort #2 (job master)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := New(tc.n, tc.mode)
			for i, line := range strings.Split(strings.TrimSpace(tc.script), "\n") {
				cmd, want, ok := strings.Cut(line, "->")
				if !ok {
					t.Fatalf("line %d: %q has no ->", i+1, line)
				}
				cmd, want = strings.TrimSpace(cmd), strings.TrimSpace(want)
				if got := run(t, a, cmd); got != want {
					t.Fatalf("line %d: %s -> %s, want %s\nstate: %s", i+1, cmd, got, want, a)
				}
			}
		})
	}
}

// run carries out one script command and returns what it printed.
func run(t *testing.T, a *Aligner, cmd string) string {
	t.Helper()
	f := strings.Fields(cmd)
	num := func(i int) int64 {
		t.Helper()
		if i >= len(f) {
			t.Fatalf("%q: missing argument %d", cmd, i)
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(f[i], "#"), 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", cmd, err)
		}
		return n
	}
	switch f[0] {
	case "state":
		return a.String()
	case "barrier":
		return a.OnBarrier(int(num(1)), cp(num(2))).String()
	case "ubarrier":
		c := cp(num(2))
		c.Unaligned = true
		return a.OnBarrier(int(num(1)), c).String()
	case "timeout":
		return a.OnAlignmentTimeout(num(1)).String()
	case "cancel":
		return a.OnCancelMarker(int(num(1)), num(2)).String()
	case "end":
		return a.OnEndOfPartition(int(num(1))).String()
	case "abort":
		if len(f) == 4 && f[1] == "up" && f[2] == "to" {
			return a.OnAbortUpTo(num(3)).String()
		}
		return a.OnAbort(num(1)).String()
	case "reset":
		return a.OnChannelReset(int(num(1))).String()
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}

func cp(id int64) Checkpoint { return Checkpoint{ID: id, TimestampMillis: 1000 * id} }

func TestSnapshotCarriesTheBarrier(t *testing.T) {
	a := New(2, ExactlyOnce)
	b := Checkpoint{ID: 9, TimestampMillis: 123456, Flags: 0x5}
	a.OnBarrier(1, b)
	act := a.OnBarrier(0, b)
	if act.Snapshot == nil || *act.Snapshot != b {
		t.Fatalf("snapshot %v, want %+v", act, b)
	}
	if id, ok := a.Pending(); ok || id != 0 {
		t.Fatalf("Pending() = %d, %v after the snapshot", id, ok)
	}
	if a.LastCompleted() != 9 {
		t.Fatalf("LastCompleted() = %d", a.LastCompleted())
	}
}

func TestQueries(t *testing.T) {
	a := New(3, ExactlyOnce)
	a.OnBarrier(1, cp(2))
	a.OnEndOfPartition(2)
	if id, ok := a.Pending(); !ok || id != 2 {
		t.Errorf("Pending() = %d, %v, want 2, true", id, ok)
	}
	for ch, want := range []bool{false, true, false} {
		if a.Blocked(ch) != want {
			t.Errorf("Blocked(%d) = %v", ch, !want)
		}
	}
	for ch, want := range []bool{false, false, true} {
		if a.Ended(ch) != want {
			t.Errorf("Ended(%d) = %v", ch, !want)
		}
	}
	if a.NumChannels() != 3 || a.Mode() != ExactlyOnce || a.LastCompleted() != 0 {
		t.Errorf("NumChannels %d, Mode %s, LastCompleted %d", a.NumChannels(), a.Mode(), a.LastCompleted())
	}
}

// The job master may abort many checkpoints whose barriers are still on their way; the aligner remembers the
// newest MaxAbortedIDs of them.
func TestAbortedIDsBounded(t *testing.T) {
	a := New(2, ExactlyOnce)
	a.OnBarrier(0, cp(1))
	for id := int64(2); id < 2+2*MaxAbortedIDs; id++ {
		if act := a.OnAbort(id); act.String() != "nothing" {
			t.Fatalf("abort #%d: %s", id, act)
		}
	}
	if len(a.aborted) != MaxAbortedIDs {
		t.Fatalf("remembers %d aborted ids, want %d", len(a.aborted), MaxAbortedIDs)
	}
	a.OnBarrier(1, cp(1))
	oldest := int64(2 + MaxAbortedIDs) // the oldest one remembered
	if act := a.OnBarrier(0, cp(oldest-1)); act.String() != "block [0]" {
		t.Errorf("barrier of forgotten #%d: %s, want block [0]", oldest-1, act)
	}
	want := fmt.Sprintf("abort #%d (subsumed), unblock all", oldest-1) // and no alignment for #oldest
	if act := a.OnBarrier(1, cp(oldest)); act.String() != want {
		t.Errorf("barrier of remembered #%d: %s, want %s", oldest, act, want)
	}
	if _, ok := a.Pending(); ok {
		t.Errorf("aligning after the barrier of an aborted checkpoint: %s", a)
	}
}

func TestInvalidUse(t *testing.T) {
	for name, f := range map[string]func(){
		"no channels":        func() { New(0, ExactlyOnce) },
		"unknown mode":       func() { New(2, Mode(7)) },
		"negative channel":   func() { New(2, ExactlyOnce).OnBarrier(-1, cp(1)) },
		"channel too large":  func() { New(2, ExactlyOnce).OnCancelMarker(2, 1) },
		"end out of range":   func() { New(1, AtLeastOnce).OnEndOfPartition(1) },
		"reset out of range": func() { New(1, AtLeastOnce).OnChannelReset(5) },
		"blocked out of range": func() {
			New(1, AtLeastOnce).Blocked(1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p == nil || !strings.HasPrefix(fmt.Sprint(p), "barrier: ") {
					t.Errorf("panic %v, want one starting with \"barrier: \"", p)
				}
			}()
			f()
		})
	}
}

// TestParseMode: String's spelling parses back, the underscored one of older checkpoint metadata too, and
// nothing else does.
func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		ok   bool
	}{
		{ExactlyOnce.String(), ExactlyOnce, true},
		{AtLeastOnce.String(), AtLeastOnce, true},
		{Unaligned.String(), Unaligned, true},
		{"exactly_once", ExactlyOnce, true},
		{"at_least_once", AtLeastOnce, true},
		{"", 0, false},
		{"EXACTLY_ONCE", 0, false},
		{"exactlyonce", 0, false},
		{Mode(9).String(), 0, false},
	} {
		got, err := ParseMode(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseMode(%q) = %s, %v; want %s, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok != got.Valid() && tc.ok {
			t.Errorf("ParseMode(%q) = %s, not Valid", tc.in, got)
		}
	}
	if Mode(3).Valid() {
		t.Error("Mode(3) is Valid")
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{ExactlyOnce.String(), "exactly-once"},
		{AtLeastOnce.String(), "at-least-once"},
		{Mode(9).String(), "mode(9)"},
		{AbortReason(0).String(), "reason(0)"},
		{Abort{ID: 3, Reason: AbortJobMaster}.String(), "abort #3 (job master)"},
		{Action{}.String(), "nothing"},
		{Action{Dropped: true}.String(), "dropped"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

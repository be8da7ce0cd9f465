package jobcore

import (
	"fmt"
	"testing"
	"time"
)

func TestLiveness(t *testing.T) {
	const ms = time.Millisecond
	// A step is one call: heard (tm, at), forget (tm) or tick (at), and after it the next deadline ("none"
	// when there is none) and, for a tick, who it declared lost.
	type step struct {
		op       string
		tm       TaskManagerID
		at       time.Duration
		lost     string
		deadline string
	}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		steps   []step
	}{
		{"silence for more than the timeout is a loss, reported once", 1500 * ms, []step{
			{op: "heard", tm: 1, at: 0, deadline: "1.500000001s"},
			{op: "tick", at: 1500 * ms, lost: "[]", deadline: "1.500000001s"},
			{op: "tick", at: 1500*ms + 1, lost: "[1]", deadline: "none"},
			{op: "tick", at: 9000 * ms, lost: "[]", deadline: "none"},
		}},
		{"any sign of life moves the deadline", 1500 * ms, []step{
			{op: "heard", tm: 1, at: 0, deadline: "1.500000001s"},
			{op: "heard", tm: 1, at: 1000 * ms, deadline: "2.500000001s"},
			{op: "tick", at: 2000 * ms, lost: "[]", deadline: "2.500000001s"},
			// A late-arriving older time does not take the deadline back.
			{op: "heard", tm: 1, at: 200 * ms, deadline: "2.500000001s"},
			{op: "tick", at: 2600 * ms, lost: "[1]", deadline: "none"},
		}},
		{"the deadline is that of the longest silent, losses come longest silent first", 100 * ms, []step{
			{op: "heard", tm: 3, at: 20 * ms, deadline: "120.000001ms"},
			{op: "heard", tm: 1, at: 50 * ms, deadline: "120.000001ms"},
			{op: "heard", tm: 2, at: 20 * ms, deadline: "120.000001ms"},
			{op: "heard", tm: 4, at: 90 * ms, deadline: "120.000001ms"},
			{op: "tick", at: 151 * ms, lost: "[2 3 1]", deadline: "190.000001ms"},
			{op: "heard", tm: 3, at: 160 * ms, deadline: "190.000001ms"},
			{op: "tick", at: 300 * ms, lost: "[4 3]", deadline: "none"},
		}},
		{"a forgotten TaskManager is not reported", 100 * ms, []step{
			{op: "heard", tm: 1, at: 0, deadline: "100.000001ms"},
			{op: "heard", tm: 2, at: 50 * ms, deadline: "100.000001ms"},
			{op: "forget", tm: 1, deadline: "150.000001ms"},
			{op: "forget", tm: 7, deadline: "150.000001ms"},
			{op: "tick", at: time.Second, lost: "[2]", deadline: "none"},
		}},
		{"a zero timeout declares no one lost", 0, []step{
			{op: "heard", tm: 1, at: 0, deadline: "none"},
			{op: "tick", at: time.Hour, lost: "[]", deadline: "none"},
		}},
		{"a negative timeout is zero", -time.Second, []step{
			{op: "heard", tm: 1, at: 0, deadline: "none"},
			{op: "tick", at: time.Hour, lost: "[]", deadline: "none"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLiveness(tc.timeout)
			for i, st := range tc.steps {
				switch st.op {
				case "heard":
					l.Heard(st.tm, st.at)
					if at, ok := l.LastHeard(st.tm); !ok || at < st.at {
						t.Errorf("step %d: LastHeard(%d) = %v, %v after hearing it at %v", i, st.tm, at, ok, st.at)
					}
				case "forget":
					l.Forget(st.tm)
					if _, ok := l.LastHeard(st.tm); ok {
						t.Errorf("step %d: %d still watched after Forget", i, st.tm)
					}
				case "tick":
					lost := l.Tick(st.at)
					if got := fmt.Sprint(lost); got != st.lost {
						t.Errorf("step %d: Tick(%v) lost %s, want %s", i, st.at, got, st.lost)
					}
					for _, tm := range lost {
						if _, ok := l.LastHeard(tm); ok {
							t.Errorf("step %d: %d still watched after it was reported lost", i, tm)
						}
					}
				default:
					t.Fatalf("step %d: unknown op %q", i, st.op)
				}
				got := "none"
				if d, ok := l.NextDeadline(); ok {
					got = d.String()
				}
				if got != st.deadline {
					t.Errorf("step %d (%s): next deadline %s, want %s", i, st.op, got, st.deadline)
				}
			}
		})
	}
}

// TestLivenessDeadlineIsWhenTickReports checks the contract a driver's timer relies on: a Tick at
// NextDeadline reports a loss, and one a nanosecond earlier reports none, so a timer set at the deadline
// neither misses a loss nor spins.
func TestLivenessDeadlineIsWhenTickReports(t *testing.T) {
	for _, timeout := range []time.Duration{1, time.Millisecond, 1500 * time.Millisecond} {
		l := NewLiveness(timeout)
		l.Heard(1, 7*time.Millisecond)
		d, ok := l.NextDeadline()
		if !ok {
			t.Fatalf("timeout %v: no deadline", timeout)
		}
		if lost := l.Tick(d - 1); len(lost) != 0 {
			t.Errorf("timeout %v: Tick(%v), before the deadline, lost %v", timeout, d-1, lost)
		}
		if lost := l.Tick(d); len(lost) != 1 {
			t.Errorf("timeout %v: Tick(%v), at the deadline, lost %v, want [1]", timeout, d, lost)
		}
	}
}

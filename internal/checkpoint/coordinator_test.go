package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/ident"
)

// The test job: two sources (v0), two maps (v1) each fed by its source (forward), one sink (v2) fed by
// both maps.
func att(v ident.VertexID, i, n int32) ident.Attempt {
	return ident.Attempt{Subtask: ident.Subtask{Vertex: v, Index: i}, Number: n}
}

var (
	src0, src1 = att(0, 0, 0), att(0, 1, 0)
	map0, map1 = att(1, 0, 0), att(1, 1, 0)
	sink0      = att(2, 0, 0)
	all        = []ident.Attempt{src0, src1, map0, map1, sink0}
)

func testTasks() []Task {
	return []Task{
		{Attempt: sink0, Name: "sink", Upstream: []ident.Subtask{map0.Subtask, map1.Subtask}}, // order does not matter
		{Attempt: src0, Name: "gen", Source: true},
		{Attempt: src1, Name: "gen", Source: true},
		{Attempt: map0, Name: "map", Upstream: []ident.Subtask{src0.Subtask}},
		{Attempt: map1, Name: "map", Upstream: []ident.Subtask{src1.Subtask}},
	}
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.IntervalMillis = 1000
	cfg.TimeoutMillis = 500
	cfg.TolerableFailed = 5
	return cfg
}

// step is one event and the trace of the Ready it must return.
type step struct {
	do   func(t *testing.T, c *Coordinator) Ready
	want string
}

func tick(now int64) func(*testing.T, *Coordinator) Ready {
	return func(_ *testing.T, c *Coordinator) Ready { return c.Tick(now) }
}

func ack(now, id int64, from ...ident.Attempt) func(*testing.T, *Coordinator) Ready {
	return func(_ *testing.T, c *Coordinator) Ready {
		var rd Ready
		for _, a := range from {
			rd = rd.Merge(c.Ack(now, id, a, StateHandle{Inline: []byte(a.String())}))
		}
		return rd
	}
}

func decline(now, id int64, from ident.Attempt, err error) func(*testing.T, *Coordinator) Ready {
	return func(_ *testing.T, c *Coordinator) Ready { return c.Decline(now, id, from, err) }
}

func persisted(now, id int64, err error) func(*testing.T, *Coordinator) Ready {
	return func(_ *testing.T, c *Coordinator) Ready { return c.Persisted(now, id, err) }
}

func failed(now int64, a ident.Attempt) func(*testing.T, *Coordinator) Ready {
	return func(_ *testing.T, c *Coordinator) Ready { return c.TaskFailed(now, a, errors.New("boom")) }
}

func restarted(now int64, as ...ident.Attempt) func(*testing.T, *Coordinator) Ready {
	return func(t *testing.T, c *Coordinator) Ready {
		rd, err := c.TasksRestarted(now, as, errors.New("failover"))
		if err != nil {
			t.Fatalf("TasksRestarted: %v", err)
		}
		return rd
	}
}

func finished(now int64, as ...ident.Attempt) func(*testing.T, *Coordinator) Ready {
	return func(_ *testing.T, c *Coordinator) Ready {
		var rd Ready
		for _, a := range as {
			rd = rd.Merge(c.TaskFinished(now, a))
		}
		return rd
	}
}

func inputEnded(now int64, as ...ident.Attempt) func(*testing.T, *Coordinator) Ready {
	return func(_ *testing.T, c *Coordinator) Ready {
		var rd Ready
		for _, a := range as {
			rd = rd.Merge(c.TaskInputEnded(now, a))
		}
		return rd
	}
}

func triggerNow(now int64) func(*testing.T, *Coordinator) Ready {
	return func(t *testing.T, c *Coordinator) Ready {
		rd, err := c.TriggerNow(now)
		if err != nil {
			return Ready{Ignored: []Ignored{{Event: "trigger-now: " + err.Error()}}}
		}
		return rd
	}
}

func triggerSavepoint(now int64) func(*testing.T, *Coordinator) Ready {
	return func(t *testing.T, c *Coordinator) Ready {
		rd, err := c.TriggerSavepoint(now)
		if err != nil {
			return Ready{Ignored: []Ignored{{Event: "trigger-savepoint: " + err.Error()}}}
		}
		return rd
	}
}

func stop(now int64) func(*testing.T, *Coordinator) Ready {
	return func(_ *testing.T, c *Coordinator) Ready { return c.Stop(now) }
}

func attempts(as []ident.Attempt) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, " ")
}

// trace renders a Ready one action per line, in the order the caller carries them out.
func trace(rd Ready) string {
	var out []string
	for _, cp := range rd.Persist {
		var hs []string
		for _, h := range cp.States {
			s := h.Attempt.String()
			if h.Finished {
				s += ":finished"
			}
			hs = append(hs, s)
		}
		out = append(out, fmt.Sprintf("persist %d @%d [%s]", cp.ID, cp.TimestampMillis, strings.Join(hs, " ")))
	}
	for _, cp := range rd.Completed {
		out = append(out, fmt.Sprintf("completed %d", cp.ID))
	}
	for _, a := range rd.Aborted {
		out = append(out, fmt.Sprintf("abort %d %s", a.ID, a.Reason))
	}
	for i := 0; i < len(rd.Notifications); {
		n := rd.Notifications[i]
		var to []ident.Attempt
		for i < len(rd.Notifications) && rd.Notifications[i].Kind == n.Kind && rd.Notifications[i].CheckpointID == n.CheckpointID {
			to = append(to, rd.Notifications[i].To)
			i++
		}
		out = append(out, fmt.Sprintf("notify %s %d -> %s", n.Kind, n.CheckpointID, attempts(to)))
	}
	for _, t := range rd.Triggers {
		out = append(out, fmt.Sprintf("trigger %d @%d %s -> %s", t.ID, t.TimestampMillis, t.Mode, attempts(t.Targets)))
	}
	for _, ig := range rd.Ignored {
		if ig.Reason == 0 {
			out = append(out, ig.Event)
			continue
		}
		if ig.Event == "persisted" {
			out = append(out, fmt.Sprintf("ignore %s %d: %s", ig.Event, ig.ID, ig.Reason))
			continue
		}
		out = append(out, fmt.Sprintf("ignore %s %d from %s: %s", ig.Event, ig.ID, ig.From, ig.Reason))
	}
	if rd.FailJob != nil {
		out = append(out, "fail-job")
	}
	return strings.Join(out, "\n")
}

func lines(ls ...string) string { return strings.Join(ls, "\n") }

// completeAll acks checkpoint id (triggered at trig) from every attempt given and persists it at now.
func completeAll(trig, now, id int64, as ...ident.Attempt) []step {
	return []step{
		{ack(now, id, as...), fmt.Sprintf("persist %d @%d [%s]", id, trig, attempts(as))},
		{persisted(now, id, nil), lines(
			fmt.Sprintf("completed %d", id),
			fmt.Sprintf("notify complete %d -> %s", id, attempts(as)))},
	}
}

func TestCoordinator(t *testing.T) {
	errDisk := errors.New("disk full")
	map1b, sink0b := att(1, 1, 1), att(2, 0, 1)
	map1c := att(1, 1, 2)
	cases := []struct {
		name  string
		cfg   func(*Config)
		steps [][]step
		want  Counts
	}{
		{
			name: "normal completion",
			steps: [][]step{{
				{tick(0), ""},
				{tick(999), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{tick(1050), ""},
				{ack(1060, 1, src0, src1, map0, map1), ""},
				{ack(1100, 1, sink0), "persist 1 @1000 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
				{tick(1200), ""}, // persisting counts against MaxConcurrent
				{persisted(1210, 1, nil), lines(
					"completed 1",
					"notify complete 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
				{tick(1999), ""},
				{tick(2000), "trigger 2 @2000 exactly-once -> v0[0]#0 v0[1]#0"},
			}},
			want: Counts{Completed: 1, LastCompletedID: 1},
		},
		{
			name: "at-least-once mode travels with the trigger",
			cfg:  func(c *Config) { c.Mode = barrier.AtLeastOnce },
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 at-least-once -> v0[0]#0 v0[1]#0"},
			}},
		},
		{
			name: "unaligned mode travels with the trigger, a savepoint's is aligned",
			cfg:  func(c *Config) { c.Mode = barrier.Unaligned },
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 unaligned -> v0[0]#0 v0[1]#0"},
				{triggerSavepoint(1001), "trigger 2 @1001 exactly-once -> v0[0]#0 v0[1]#0"},
			}},
		},
		{
			name: "checkpoint timeout",
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(1100, 1, src0, map0), ""},
				{tick(1499), ""},
				{tick(1500), lines(
					"abort 1 timeout",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
				{ack(1600, 1, sink0), "ignore ack 1 from v2[0]#0: checkpoint aborted"},
				{tick(2000), "trigger 2 @2000 exactly-once -> v0[0]#0 v0[1]#0"},
			}, completeAll(2000, 2100, 2, all...)},
			want: Counts{Completed: 1, Failed: 1, LastCompletedID: 2},
		},
		{
			name: "late ack from an old attempt",
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(1010, 1, src0, src1, map0), ""},
				{failed(1020, map1), lines(
					"abort 1 task failed",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v2[0]#0")},
				{tick(2000), ""}, // map1 is down: no trigger
				{ack(2001, 1, map1), "ignore ack 1 from v1[1]#0: checkpoint aborted"},
				{restarted(2100, map1b), ""},
				{tick(2100), "trigger 2 @2100 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(2150, 2, map1), "ignore ack 2 from v1[1]#0: not the current attempt"},
				{decline(2150, 2, map1, errors.New("late")), "ignore decline 2 from v1[1]#0: not the current attempt"},
				{ack(2150, 2, att(1, 1, 7)), "ignore ack 2 from v1[1]#7: not the current attempt"},
				{ack(2150, 2, att(9, 0, 0)), "ignore ack 2 from v9[0]#0: unknown task"},
			}, completeAll(2100, 2200, 2, src0, src1, map0, map1b, sink0)},
			want: Counts{Completed: 1, Aborted: 1, LastCompletedID: 2},
		},
		{
			name: "ack for an aborted, unknown or completed id",
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{decline(1010, 1, map0, errors.New("snapshot failed")), lines(
					"abort 1 declined",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
				{ack(1020, 1, src0), "ignore ack 1 from v0[0]#0: checkpoint aborted"},
				{ack(1020, 99, src0), "ignore ack 99 from v0[0]#0: unknown checkpoint"},
				{ack(1020, 0, src0), "ignore ack 0 from v0[0]#0: unknown checkpoint"},
				{tick(2000), "trigger 2 @2000 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(2010, 2, src0), ""},
				{ack(2010, 2, src0), "ignore ack 2 from v0[0]#0: duplicate"},
				{persisted(2010, 2, nil), "ignore persisted 2: checkpoint not waiting to be persisted"},
				{ack(2100, 2, src1, map0, map1, sink0), "persist 2 @2000 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
				{ack(2110, 2, map0), "ignore ack 2 from v1[0]#0: checkpoint already complete"},
				{persisted(2120, 2, nil), lines(
					"completed 2",
					"notify complete 2 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
				{ack(2200, 2, map0), "ignore ack 2 from v1[0]#0: checkpoint already complete"},
				{persisted(2200, 2, nil), "ignore persisted 2: checkpoint already complete"},
				{persisted(2200, 1, nil), "ignore persisted 1: checkpoint aborted"},
			}},
			want: Counts{Completed: 1, Failed: 1, LastCompletedID: 2},
		},
		{
			name: "failure during a checkpoint",
			cfg:  func(c *Config) { c.TolerableFailed = 0 },
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(1010, 1, src0, src1, map0, map1), ""},
				{failed(1020, sink0), lines(
					"abort 1 task failed",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0")}, // no fail-job: not a checkpoint failure
				{failed(1030, sink0), ""}, // already down: nothing in progress
				{failed(1030, att(2, 0, 5)), "ignore task-failed 0 from v2[0]#5: not the current attempt"},
				{tick(3000), ""},
				{restarted(3100, sink0b), ""},
				{tick(3100), "trigger 2 @3100 exactly-once -> v0[0]#0 v0[1]#0"},
			}, completeAll(3100, 3200, 2, src0, src1, map0, map1, sink0b)},
			want: Counts{Completed: 1, Aborted: 1, LastCompletedID: 2},
		},
		{
			name: "max concurrent",
			cfg: func(c *Config) {
				c.IntervalMillis = 100
				c.TimeoutMillis = 10_000
				c.MaxConcurrent = 2
			},
			steps: [][]step{{
				{tick(0), ""},
				{tick(100), "trigger 1 @100 exactly-once -> v0[0]#0 v0[1]#0"},
				{tick(200), "trigger 2 @200 exactly-once -> v0[0]#0 v0[1]#0"},
				{tick(300), ""},
				{tick(400), ""},
			}, completeAll(100, 450, 1, all...), {
				{tick(450), "trigger 3 @450 exactly-once -> v0[0]#0 v0[1]#0"},
				{tick(550), ""},
			}},
			want: Counts{Completed: 1, LastCompletedID: 1},
		},
		{
			name: "min pause",
			cfg: func(c *Config) {
				c.IntervalMillis = 100
				c.MinPauseMillis = 250
				c.MaxConcurrent = 3 // a pause means one at a time anyway
			},
			steps: [][]step{{
				{tick(0), ""},
				{tick(100), "trigger 1 @100 exactly-once -> v0[0]#0 v0[1]#0"},
				{tick(200), ""},
			}, completeAll(100, 230, 1, all...), {
				{tick(300), ""},
				{tick(479), ""},
				{tick(480), "trigger 2 @480 exactly-once -> v0[0]#0 v0[1]#0"},
			}},
			want: Counts{Completed: 1, LastCompletedID: 1},
		},
		{
			name: "tolerable failures exceeded",
			cfg:  func(c *Config) { c.TolerableFailed = 1 },
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{tick(1500), lines(
					"abort 1 timeout",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
				{tick(2000), "trigger 2 @2000 exactly-once -> v0[0]#0 v0[1]#0"},
				{tick(2500), lines(
					"abort 2 timeout",
					"notify abort 2 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0",
					"fail-job")},
			}},
			want: Counts{Failed: 2},
		},
		{
			name: "a completion resets the failure run",
			cfg:  func(c *Config) { c.TolerableFailed = 1 },
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{decline(1010, 1, src0, errors.New("x")), lines(
					"abort 1 declined",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
				{tick(2000), "trigger 2 @2000 exactly-once -> v0[0]#0 v0[1]#0"},
			}, completeAll(2000, 2100, 2, all...), {
				{tick(3000), "trigger 3 @3000 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(3050, 3, all...), "persist 3 @3000 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
				{persisted(3060, 3, errDisk), lines(
					"abort 3 persist failed",
					"notify abort 3 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
			}},
			want: Counts{Completed: 1, Failed: 2, LastCompletedID: 2},
		},
		{
			name: "persist failure beyond tolerance fails the job",
			cfg:  func(c *Config) { c.TolerableFailed = 0 },
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(1050, 1, all...), "persist 1 @1000 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
				{persisted(1060, 1, errDisk), lines(
					"abort 1 persist failed",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0",
					"fail-job")},
			}},
			want: Counts{Failed: 1},
		},
		{
			name: "a task that is not ready aborts without failing",
			cfg:  func(c *Config) { c.TolerableFailed = 0 },
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{decline(1001, 1, src1, fmt.Errorf("restoring: %w", ErrTaskNotReady)), lines(
					"abort 1 task not ready",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
			}},
			want: Counts{Aborted: 1},
		},
		{
			name: "approximate partial restart",
			cfg:  func(c *Config) { c.MaxConcurrent = 2; c.IntervalMillis = 200; c.TimeoutMillis = 10_000 },
			steps: [][]step{{
				{tick(0), ""},
				{tick(200), "trigger 1 @200 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(250, 1, src0, src1, map0, map1), ""},
				{tick(400), "trigger 2 @400 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(410, 2, src0, map1), ""},
				// map1 fails; approximate recovery restarts it and the sink downstream, nothing upstream.
				{failed(420, map1), lines(
					"abort 1 task failed",
					"abort 2 task failed",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v2[0]#0",
					"notify abort 2 -> v0[0]#0 v0[1]#0 v1[0]#0 v2[0]#0")},
				{tick(600), ""},
				{restarted(650, map1b, sink0b), ""},
				{ack(651, 2, sink0), "ignore ack 2 from v2[0]#0: not the current attempt"},
				{tick(651), "trigger 3 @651 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(700, 3, src0, src1, map0, map1b), ""},
				{ack(700, 3, sink0), "ignore ack 3 from v2[0]#0: not the current attempt"},
				{ack(751, 3, sink0b), "persist 3 @651 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#1 v2[0]#1]"},
				{persisted(751, 3, nil), lines(
					"completed 3",
					"notify complete 3 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#1 v2[0]#1")},
			}, {
				{tick(851), "trigger 4 @851 exactly-once -> v0[0]#0 v0[1]#0"},
			}},
			want: Counts{Completed: 1, Aborted: 2, LastCompletedID: 3},
		},
		{
			name: "restart while persisting leaves the complete checkpoint alone",
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(1100, 1, all...), "persist 1 @1000 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
				{restarted(1150, map1b, sink0b), ""},
				// Only attempts still live hear of the completion.
				{persisted(1200, 1, nil), lines(
					"completed 1",
					"notify complete 1 -> v0[0]#0 v0[1]#0 v1[0]#0")},
				{restarted(1300, map1c), ""},
			}},
			want: Counts{Completed: 1, LastCompletedID: 1},
		},
		{
			name: "newer completion subsumes older checkpoints in progress",
			cfg:  func(c *Config) { c.MaxConcurrent = 2; c.IntervalMillis = 100; c.TimeoutMillis = 10_000 },
			steps: [][]step{{
				{tick(0), ""},
				{tick(100), "trigger 1 @100 exactly-once -> v0[0]#0 v0[1]#0"},
				{tick(200), "trigger 2 @200 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(300, 1, src0), ""},
				{ack(300, 2, all...), "persist 2 @200 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
				{persisted(310, 2, nil), lines(
					"completed 2",
					"abort 1 subsumed",
					"notify complete 2 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
			}},
			want: Counts{Completed: 1, Aborted: 1, LastCompletedID: 2},
		},
		{
			name: "bounded job: finished tasks",
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(1010, 1, src1, map0, map1, sink0), ""},
				// src0 ran out of input before its trigger arrived.
				{finished(1100, src0), "persist 1 @1000 [v0[0]#0:finished v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
				{persisted(1110, 1, nil), lines(
					"completed 1",
					"notify complete 1 -> v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
				// map0, whose only upstream finished, is a new source of what still runs.
				{tick(2000), "trigger 2 @2000 exactly-once -> v0[1]#0 v1[0]#0"},
				{ack(2010, 2, src0), "ignore ack 2 from v0[0]#0: subtask not part of the checkpoint"},
				{ack(2010, 2, src1, map0, map1), ""},
				// The sink finishes before the barrier reaches it: the checkpoint completes without it.
				{finished(2020, sink0), "persist 2 @2000 [v0[0]#0:finished v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0:finished]"},
				{persisted(2030, 2, nil), lines(
					"completed 2",
					"notify complete 2 -> v0[1]#0 v1[0]#0 v1[1]#0")},
			}},
			want: Counts{Completed: 2, LastCompletedID: 2},
		},
		{
			name: "checkpoints go on at the new sources once the sources finished",
			steps: [][]step{{
				{tick(0), ""},
				{finished(10, src0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[1]#0 v1[0]#0"},
				{ack(1005, 1, src1), ""},
				{finished(1010, src1), ""},
				{ack(1020, 1, map0, map1, sink0), "persist 1 @1000 [v0[0]#0:finished v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
				{persisted(1030, 1, nil), lines(
					"completed 1",
					"notify complete 1 -> v1[0]#0 v1[1]#0 v2[0]#0")},
				{finished(1500, map0), ""},
				// The sink waits for map1 still: it is no target yet.
				{tick(2000), "trigger 2 @2000 exactly-once -> v1[1]#0"},
				// A finishing subtask acknowledges what it took before it reports its end.
				{ack(2005, 2, map1), ""},
				{finished(2010, map1), ""},
				{ack(2020, 2, sink0), lines(
					"persist 2 @2000 [v0[0]#0:finished v0[1]#0:finished v1[0]#0:finished v1[1]#0 v2[0]#0]")},
				{persisted(2030, 2, nil), lines(
					"completed 2",
					"notify complete 2 -> v2[0]#0")},
				{tick(3000), "trigger 3 @3000 exactly-once -> v2[0]#0"},
				{finished(3010, sink0), "persist 3 @3000 [v0[0]#0:finished v0[1]#0:finished v1[0]#0:finished v1[1]#0:finished v2[0]#0:finished]"},
				{persisted(3020, 3, nil), "completed 3"},
				{tick(5000), ""},
				{triggerNow(5000), "trigger-now: trigger checkpoint: every subtask has finished"},
				{finished(5010, sink0), ""}, // a repeated report changes nothing
			}},
			want: Counts{Completed: 3, LastCompletedID: 3},
		},
		{
			name: "a checkpoint whose barrier can no longer come is aborted",
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(1010, 1, src1, map1), ""},
				// src0 finished as its trigger arrived, without taking it: map0 cannot take the
				// checkpoint, and the sink cannot complete it.
				{finished(1020, src0), lines(
					"abort 1 task not ready",
					"notify abort 1 -> v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
				// map0, whose upstream finished, is a target of the next one.
				{tick(2000), "trigger 2 @2000 exactly-once -> v0[1]#0 v1[0]#0"},
				{ack(2010, 2, src1, map0, map1, sink0), "persist 2 @2000 [v0[0]#0:finished v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
			}},
			want: Counts{Aborted: 1},
		},
		{
			name: "a finished upstream subtask does not cut off one that has another",
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(1010, 1, src0, src1, map0), ""},
				// map1 finishes without the barrier; the sink still gets map0's.
				{finished(1020, map1), ""},
				{ack(1030, 1, sink0), "persist 1 @1000 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0:finished v2[0]#0]"},
			}},
			want: Counts{},
		},
		{
			name: "final checkpoint at once when every input ended",
			steps: [][]step{
				append([]step{
					{tick(0), ""},
					{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"}},
					completeAll(1000, 1100, 1, all...)...),
				{
					{inputEnded(1200, src0, src1, map0, map1), ""},
					{tick(1250), ""},
					{inputEnded(1300, sink0), "trigger 2 @1300 exactly-once -> v0[0]#0 v0[1]#0"},
					// Input-ended sources stay the targets until they finish.
					{ack(1310, 2, all...), "persist 2 @1300 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
					{persisted(1320, 2, nil), lines(
						"completed 2",
						"notify complete 2 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
					{finished(1330, all...), ""},
					{tick(5000), ""},
				},
			},
			want: Counts{Completed: 2, LastCompletedID: 2},
		},
		{
			name: "final checkpoint waits for the one in progress, then goes at once",
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{inputEnded(1010, all...), ""}, // one checkpoint at a time
				{ack(1020, 1, all...), "persist 1 @1000 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
				{persisted(1030, 1, nil), lines(
					"completed 1",
					"notify complete 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0",
					"trigger 2 @1030 exactly-once -> v0[0]#0 v0[1]#0")},
				{tick(1040), ""}, // owed once
			}},
			want: Counts{Completed: 1, LastCompletedID: 1},
		},
		{
			name: "final checkpoint freed by a decline",
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{inputEnded(1010, all...), ""},
				{decline(1020, 1, src0, ErrTaskNotReady), lines(
					"abort 1 task not ready",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0",
					"trigger 2 @1020 exactly-once -> v0[0]#0 v0[1]#0")},
			}},
			want: Counts{Aborted: 1},
		},
		{
			name: "final checkpoint ignores the pause, not the one in progress",
			cfg:  func(c *Config) { c.MinPauseMillis = 5000 },
			steps: [][]step{
				append([]step{
					{tick(0), ""},
					{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"}},
					completeAll(1000, 1100, 1, all...)...),
				{
					{inputEnded(1200, all...), "trigger 2 @1200 exactly-once -> v0[0]#0 v0[1]#0"},
				},
			},
			want: Counts{Completed: 1, LastCompletedID: 1},
		},
		{
			name: "a failed final checkpoint is retried on the periodic schedule",
			steps: [][]step{{
				{tick(0), ""},
				{inputEnded(500, all...), "trigger 1 @500 exactly-once -> v0[0]#0 v0[1]#0"},
				{decline(510, 1, map1, errDisk), lines(
					"abort 1 declined",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
				{tick(1000), ""},
				{tick(1499), ""},
				{tick(1500), "trigger 2 @1500 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(1600, 2, all...), "persist 2 @1500 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0]"},
			}},
			want: Counts{Failed: 1},
		},
		{
			name: "a restart after every input ended owes a new final checkpoint",
			steps: [][]step{{
				{tick(0), ""},
				{inputEnded(100, all...), "trigger 1 @100 exactly-once -> v0[0]#0 v0[1]#0"},
				{failed(110, sink0), lines(
					"abort 1 task failed",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0")},
				{inputEnded(120, sink0), "ignore task-input-ended 0 from v2[0]#0: subtask not part of the checkpoint"},
				{restarted(130, map1b, sink0b), ""},
				{inputEnded(140, map1b), ""},
				{inputEnded(150, sink0), "ignore task-input-ended 0 from v2[0]#0: not the current attempt"},
				{tick(160), ""},
				{inputEnded(170, sink0b), "trigger 2 @170 exactly-once -> v0[0]#0 v0[1]#0"},
			}},
			want: Counts{Aborted: 1},
		},
		{
			name: "a finished subtask completes the final checkpoint in its place",
			steps: [][]step{{
				{tick(0), ""},
				{inputEnded(100, all...), "trigger 1 @100 exactly-once -> v0[0]#0 v0[1]#0"},
				{ack(110, 1, src0, src1, map0, map1), ""},
				{finished(120, sink0), "persist 1 @100 [v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0:finished]"},
				{inputEnded(140, sink0), "ignore task-input-ended 0 from v2[0]#0: subtask not part of the checkpoint"},
			}},
		},
		{
			name: "no final checkpoint with periodic checkpoints off",
			cfg:  func(c *Config) { c.IntervalMillis = 0 },
			steps: [][]step{{
				{tick(0), ""},
				{inputEnded(100, all...), ""},
				{tick(100_000), ""},
				{triggerNow(100_001), "trigger 1 @100001 exactly-once -> v0[0]#0 v0[1]#0"},
			}},
		},
		{
			name: "trigger now ignores interval and max concurrent",
			cfg:  func(c *Config) { c.IntervalMillis = 0 },
			steps: [][]step{{
				{tick(0), ""},
				{tick(100_000), ""}, // no periodic checkpoints
				{triggerNow(100_001), "trigger 1 @100001 exactly-once -> v0[0]#0 v0[1]#0"},
				{triggerNow(100_002), "trigger 2 @100002 exactly-once -> v0[0]#0 v0[1]#0"},
			}},
		},
		{
			name: "stop aborts and ends triggering",
			steps: [][]step{{
				{tick(0), ""},
				{tick(1000), "trigger 1 @1000 exactly-once -> v0[0]#0 v0[1]#0"},
				{stop(1100), lines(
					"abort 1 coordinator stopped",
					"notify abort 1 -> v0[0]#0 v0[1]#0 v1[0]#0 v1[1]#0 v2[0]#0")},
				{tick(5000), ""},
				{triggerNow(5000), "trigger-now: trigger checkpoint: checkpoint coordinator is stopped"},
			}},
			want: Counts{Aborted: 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			c, err := NewCoordinator(cfg, testTasks(), 1)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, group := range tc.steps {
				for _, s := range group {
					n++
					rd := s.do(t, c)
					if got := trace(rd); got != s.want {
						t.Fatalf("step %d:\ngot:\n%s\nwant:\n%s", n, got, s.want)
					}
					if rd.FailJob != nil && !errors.Is(rd.FailJob, ErrTooManyFailures) {
						t.Fatalf("step %d: FailJob %v does not wrap ErrTooManyFailures", n, rd.FailJob)
					}
					checkInvariants(t, c, n)
				}
			}
			if got := c.Counts(); got != tc.want {
				t.Errorf("counts %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	ok := testConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"negative interval", func(c *Config) { c.IntervalMillis = -1 }, "interval"},
		{"unknown mode", func(c *Config) { c.Mode = 7 }, "mode"},
		{"zero timeout", func(c *Config) { c.TimeoutMillis = 0 }, "timeout"},
		{"negative pause", func(c *Config) { c.MinPauseMillis = -5 }, "min pause"},
		{"zero concurrency", func(c *Config) { c.MaxConcurrent = 0 }, "max concurrent"},
		{"unbounded concurrency", func(c *Config) { c.MaxConcurrent = MaxConcurrentLimit + 1 }, "max concurrent"},
		{"negative tolerance", func(c *Config) { c.TolerableFailed = -1 }, "tolerable"},
		{"nothing retained", func(c *Config) { c.Retained = 0 }, "retained"},
	}
	for _, tc := range cases {
		cfg := testConfig()
		tc.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", tc.name, err, tc.want)
		}
		if _, err := NewCoordinator(cfg, testTasks(), 1); err == nil {
			t.Errorf("%s: NewCoordinator accepted the config", tc.name)
		}
	}
}

func TestNewCoordinatorRejectsBadTasks(t *testing.T) {
	cases := []struct {
		name  string
		tasks []Task
		want  string
	}{
		{"no tasks", nil, "no tasks"},
		{"duplicate", []Task{{Attempt: src0, Name: "gen", Source: true}, {Attempt: att(0, 0, 1), Name: "gen", Source: true}}, "twice"},
		{"no name", []Task{{Attempt: src0, Source: true}}, "no vertex name"},
		{"two names", []Task{{Attempt: src0, Name: "gen", Source: true}, {Attempt: src1, Name: "other", Source: true}}, "named both"},
		{"gap in indices", []Task{{Attempt: src0, Name: "gen", Source: true}, {Attempt: att(0, 2, 0), Name: "gen", Source: true}}, "no index 1"},
		{"negative attempt", []Task{{Attempt: att(0, 0, -1), Name: "gen", Source: true}}, "invalid attempt"},
		{"no upstream", []Task{{Attempt: src0, Name: "gen", Source: true}, {Attempt: map0, Name: "map"}}, "lists no upstream"},
		{"source with upstream", []Task{{Attempt: src0, Name: "gen", Source: true, Upstream: []ident.Subtask{map0.Subtask}},
			{Attempt: map0, Name: "map", Upstream: []ident.Subtask{src0.Subtask}}}, "source subtask v0[0] lists 1 upstream"},
		{"unknown upstream", []Task{{Attempt: src0, Name: "gen", Source: true}, {Attempt: map0, Name: "map", Upstream: []ident.Subtask{att(7, 0, 0).Subtask}}}, "not another subtask"},
		{"own upstream", []Task{{Attempt: src0, Name: "gen", Source: true}, {Attempt: map0, Name: "map", Upstream: []ident.Subtask{map0.Subtask}}}, "not another subtask"},
	}
	for _, tc := range cases {
		_, err := NewCoordinator(testConfig(), tc.tasks, 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestTasksRestartedValidation(t *testing.T) {
	c, err := NewCoordinator(testConfig(), testTasks(), 1)
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(0)
	c.Tick(1000) // checkpoint 1 in progress
	bad := [][]ident.Attempt{
		{att(9, 0, 1)},               // unknown subtask
		{map1},                       // not newer
		{att(1, 1, 1), att(1, 1, 2)}, // twice
		{att(1, 0, 1), att(2, 0, 0)}, // second one not newer: nothing may change
	}
	for _, as := range bad {
		if _, err := c.TasksRestarted(10, as, nil); err == nil {
			t.Errorf("TasksRestarted(%v) succeeded", as)
		}
	}
	if a, _ := c.Attempt(map0.Subtask); a != map0 {
		t.Fatalf("a rejected restart changed map0 to %s", a)
	}
	if got := c.InProgress(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("a rejected restart aborted checkpoints: in progress %v", got)
	}
}

func TestCompletedCheckpointContent(t *testing.T) {
	cfg := testConfig()
	cfg.Mode = barrier.AtLeastOnce
	c, err := NewCoordinator(cfg, testTasks(), 41)
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(0)
	rd := c.Tick(1000)
	if len(rd.Triggers) != 1 || rd.Triggers[0].ID != 41 {
		t.Fatalf("first trigger %+v, want id 41 (nextID)", rd.Triggers)
	}
	blob := BlobRef{Key: "v1-0-a0-state", Size: 30, CRC: 7}
	for i, a := range all {
		h := StateHandle{Attempt: att(5, 5, 5), Finished: true, Inline: []byte{byte(i)}}
		if a == map0 {
			h.Blobs = []BlobRef{blob}
		}
		rd = c.Ack(int64(1100+i), 41, a, h)
	}
	if len(rd.Persist) != 1 {
		t.Fatalf("no checkpoint to persist after all acks: %s", trace(rd))
	}
	cp := rd.Persist[0]
	if cp.ID != 41 || cp.TimestampMillis != 1000 || cp.CompletedMillis != 1104 || cp.Mode != barrier.AtLeastOnce {
		t.Fatalf("checkpoint header %d @%d..%d %s", cp.ID, cp.TimestampMillis, cp.CompletedMillis, cp.Mode)
	}
	wantV := []Vertex{{0, "gen", 2, nil}, {1, "map", 2, nil}, {2, "sink", 1, nil}}
	if fmt.Sprint(cp.Vertices) != fmt.Sprint(wantV) {
		t.Fatalf("vertices %v, want %v", cp.Vertices, wantV)
	}
	h, ok := cp.State(map0.Subtask)
	if !ok || h.Attempt != map0 || h.Finished || len(h.Blobs) != 1 || h.Blobs[0] != blob || h.Inline[0] != 2 {
		t.Fatalf("state of map0: %+v", h)
	}
	if err := cp.Validate(); err != nil {
		t.Fatalf("coordinator built an invalid checkpoint: %v", err)
	}
	if _, err := EncodeMetadata(cp); err != nil {
		t.Fatal(err)
	}
	if c.LatestCompleted() != nil {
		t.Fatal("LatestCompleted before Persisted")
	}
	c.Persisted(1200, 41, nil)
	if c.LatestCompleted() != cp {
		t.Fatal("LatestCompleted is not the persisted checkpoint")
	}
}

func TestNextDeadline(t *testing.T) {
	cfg := testConfig()
	cfg.MinPauseMillis = 300
	c, err := NewCoordinator(cfg, testTasks(), 1)
	if err != nil {
		t.Fatal(err)
	}
	expect := func(want int64, wantOK bool) {
		t.Helper()
		got, ok := c.NextDeadline()
		if got != want || ok != wantOK {
			t.Fatalf("NextDeadline = %d, %v; want %d, %v", got, ok, want, wantOK)
		}
	}
	expect(0, true) // not started: tick now
	c.Tick(0)
	expect(1000, true) // first trigger
	c.Tick(1000)
	expect(1500, true) // only the timeout of checkpoint 1
	c.Ack(1100, 1, src0, StateHandle{})
	c.TaskFailed(1200, map0, errors.New("x"))
	expect(0, false) // a task is down: only an event can help
	c.TasksRestarted(1300, []ident.Attempt{att(1, 0, 1)}, nil)
	expect(2000, true)
	if rd := c.Tick(2000); len(rd.Triggers) != 1 || rd.Triggers[0].ID != 2 {
		t.Fatalf("Tick(2000): %s", trace(rd))
	}
	for _, a := range []ident.Attempt{src0, src1, att(1, 0, 1), map1, sink0} {
		c.Ack(2100, 2, a, StateHandle{})
	}
	expect(0, false) // persisting: no timeout, no trigger
	c.Persisted(2800, 2, nil)
	expect(3100, true) // the pause outlasts the interval
}

func TestFencedMessagesAreCounted(t *testing.T) {
	c, err := NewCoordinator(testConfig(), testTasks(), 1)
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(0)
	c.Ack(1, 1, src0, StateHandle{})
	c.Decline(1, 2, src0, errors.New("x"))
	c.TaskFinished(1, att(0, 0, 3))
	if s := c.Stats(); s.Ignored != 3 || s.InProgress != 0 {
		t.Fatalf("stats %+v, want 3 ignored", s)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	cfg := testConfig()
	cfg.IntervalMillis = 10
	c, err := NewCoordinator(cfg, testTasks(), 1)
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(0)
	for now := int64(10); now <= 10*5*historyLimit; now += 10 {
		rd := c.Tick(now)
		for _, tr := range rd.Triggers {
			c.Decline(now, tr.ID, src0, ErrTaskNotReady)
		}
	}
	if len(c.history) > 2*historyLimit+1 {
		t.Fatalf("history holds %d ids, limit %d", len(c.history), 2*historyLimit)
	}
	rd := c.Ack(0, 1, src0, StateHandle{})
	if len(rd.Ignored) != 1 || rd.Ignored[0].Reason != IgnoreUnknownCheckpoint {
		t.Fatalf("ack for a forgotten id: %s", trace(rd))
	}
	last := c.nextID - 1
	rd = c.Ack(0, last, src0, StateHandle{})
	if len(rd.Ignored) != 1 || rd.Ignored[0].Reason != IgnoreAborted {
		t.Fatalf("ack for a recent aborted id: %s", trace(rd))
	}
}

func TestRestored(t *testing.T) {
	c, err := NewCoordinator(testConfig(), testTasks(), 1)
	if err != nil {
		t.Fatal(err)
	}
	old := &CompletedCheckpoint{ID: 7}
	c.Restored(old)
	if c.LatestCompleted() != old {
		t.Fatal("LatestCompleted is not the restored checkpoint")
	}
	c.Tick(0)
	rd := c.Tick(1000)
	if len(rd.Triggers) != 1 || rd.Triggers[0].ID != 8 {
		t.Fatalf("first trigger after restoring 7: %s", trace(rd))
	}
	c.Ack(1100, 8, src0, StateHandle{})
	c.Ack(1100, 8, src1, StateHandle{})
	c.Ack(1100, 8, map0, StateHandle{})
	c.Ack(1100, 8, map1, StateHandle{})
	c.Ack(1100, 8, sink0, StateHandle{})
	c.Persisted(1200, 8, nil)
	if got := c.LatestCompleted(); got == nil || got.ID != 8 {
		t.Fatalf("LatestCompleted after a new completion: %+v", got)
	}
	c.Restored(old) // older: ignored
	if got := c.LatestCompleted(); got.ID != 8 {
		t.Fatalf("an older restore replaced the latest checkpoint")
	}
	if got := c.Counts(); got != (Counts{Completed: 1, LastCompletedID: 8}) {
		t.Fatalf("counts %+v", got)
	}
}

// The report's "checkpoints" object is a contract.
func TestCountsJSON(t *testing.T) {
	b, err := json.Marshal(Counts{Completed: 3, Failed: 1, Aborted: 2, LastCompletedID: 9})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"completed":3,"failed":1,"aborted":2,"last_completed_id":9}`; string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
}

// checkInvariants recounts what the coordinator keeps incrementally and checks that a checkpoint collecting
// acks only waits for live attempts.
func checkInvariants(t *testing.T, c *Coordinator, step int) {
	t.Helper()
	down, running, open := 0, 0, 0
	for _, st := range c.tasks {
		switch {
		case st.status == statusDown:
			down++
		case st.status == statusRunning:
			running++
			if !st.ended {
				open++
			}
		case st.ended:
			t.Fatalf("step %d: %s is %d and still marked as ended", step, st.Attempt, st.status)
		}
	}
	if down != c.down || running != c.running || open != c.open {
		t.Fatalf("step %d: counters down=%d running=%d open=%d, recount %d, %d and %d", step, c.down, c.running, c.open, down, running, open)
	}
	if all := down == 0 && open == 0 && running > 0; all != c.allEnded || (c.finalOwed && !all) {
		t.Fatalf("step %d: allEnded=%v finalOwed=%v, but recount says %v", step, c.allEnded, c.finalOwed, all)
	}
	if _, ok := c.nextTrigger(); c.finalOwed && ok {
		t.Fatalf("step %d: the final checkpoint is owed and nothing holds it back, but it was not triggered", step)
	}
	for id, p := range c.pending {
		if p.persisting != nil {
			continue
		}
		for sub, a := range p.waiting {
			if !c.isLive(a) {
				t.Fatalf("step %d: checkpoint %d waits for %s, which is not live", step, id, a)
			}
			if _, acked := p.acks[sub]; acked {
				t.Fatalf("step %d: checkpoint %d both waits for and has %s", step, id, sub)
			}
		}
		if len(p.waiting)+len(p.acks) != len(c.order) {
			t.Fatalf("step %d: checkpoint %d accounts for %d of %d subtasks", step, id, len(p.waiting)+len(p.acks), len(c.order))
		}
	}
	if len(c.pending) > max(c.cfg.MaxConcurrent, 2) { // TriggerNow may exceed the limit by design
		t.Fatalf("step %d: %d checkpoints in progress", step, len(c.pending))
	}
}

// TestRandomEvents drives the coordinator with seeded random event sequences (acks, declines, late
// messages, failures, restarts, ended inputs, finishes, persist results, ticks) and checks after every event that the
// invariants hold and that every triggered checkpoint is accounted for exactly once.
func TestRandomEvents(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		cfg := testConfig()
		cfg.IntervalMillis = 50
		cfg.TimeoutMillis = 400
		cfg.MaxConcurrent = 1 + rng.IntN(3)
		cfg.TolerableFailed = rng.IntN(3)
		if rng.IntN(3) == 0 {
			cfg.MinPauseMillis = 80
		}
		c, err := NewCoordinator(cfg, testTasks(), 1)
		if err != nil {
			t.Fatal(err)
		}
		var (
			now       int64
			triggered int64
			persist   []int64 // waiting for Persisted
			completed = map[int64]bool{}
		)
		current := func() []ident.Attempt {
			var as []ident.Attempt
			for _, sub := range c.order {
				as = append(as, c.tasks[sub].Attempt)
			}
			return as
		}
		for step := 1; step <= 400; step++ {
			now += int64(rng.IntN(40))
			as := current()
			a := as[rng.IntN(len(as))]
			if rng.IntN(5) == 0 { // an old or future attempt
				a.Number += int32(rng.IntN(3)) - 1
			}
			id := c.nextID - 1 - int64(rng.IntN(3))
			if ids := c.InProgress(); len(ids) > 0 && rng.IntN(5) != 0 {
				id = ids[rng.IntN(len(ids))]
			}
			var rd Ready
			switch r := rng.IntN(1000); {
			case r < 300:
				rd = c.Tick(now)
			case r < 850:
				rd = c.Ack(now, id, a, StateHandle{})
			case r < 865:
				rd = c.Decline(now, id, a, errors.New("random"))
			case r < 880:
				rd = c.TaskFailed(now, a, errors.New("random"))
			case r < 910:
				// Restart whatever is down (as the job master would) and some others (a region, say).
				var rs []ident.Attempt
				for _, sub := range c.order {
					if st := c.tasks[sub]; st.status == statusDown || rng.IntN(4) == 0 {
						x := st.Attempt
						x.Number++
						rs = append(rs, x)
					}
				}
				rd, err = c.TasksRestarted(now, rs, nil)
				if err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
			case r < 913:
				rd = c.TaskFinished(now, a)
			case r < 930:
				rd = c.TaskInputEnded(now, a)
			default:
				if len(persist) > 0 {
					i := rng.IntN(len(persist))
					var perr error
					if rng.IntN(4) == 0 {
						perr = errors.New("disk")
					}
					rd = c.Persisted(now, persist[i], perr)
					persist = append(persist[:i], persist[i+1:]...)
				}
			}
			triggered += int64(len(rd.Triggers))
			for _, cp := range rd.Persist {
				if err := cp.Validate(); err != nil {
					t.Fatalf("seed %d step %d: invalid checkpoint to persist: %v", seed, step, err)
				}
				persist = append(persist, cp.ID)
			}
			for _, cp := range rd.Completed {
				if completed[cp.ID] {
					t.Fatalf("seed %d step %d: checkpoint %d completed twice", seed, step, cp.ID)
				}
				completed[cp.ID] = true
			}
			checkInvariants(t, c, step)
			s := c.Stats()
			if got := s.Completed + s.Failed + s.Aborted + int64(s.InProgress); got != triggered {
				t.Fatalf("seed %d step %d: %d triggered, %+v accounts for %d", seed, step, triggered, s, got)
			}
		}
	}
}

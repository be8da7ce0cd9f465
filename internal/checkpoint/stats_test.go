package checkpoint

import (
	"errors"
	"testing"
)

// TestStatsHistory follows three checkpoints through the statistics history: one completed, whose state
// is all new; one completed that refers to a blob of the first again (incremental) and whose slowest
// subtask aligned for 7 ms; one that expired (a failure). And the history stays within MaxStatsHistory.
func TestStatsHistory(t *testing.T) {
	c, err := NewCoordinator(testConfig(), testTasks(), 1)
	if err != nil {
		t.Fatal(err)
	}
	shared := BlobRef{Key: "shared-1", Size: 1000, Shared: true}
	ackAll := func(now, id int64, extra BlobRef, alignment map[int]int64) {
		for i, a := range all {
			h := StateHandle{Inline: []byte("ab")}
			if a == map0 {
				h.Blobs = []BlobRef{shared}
				if extra.Key != "" {
					h.Blobs = append(h.Blobs, extra)
				}
			}
			c.AckWith(now, id, a, h, AckStats{AlignmentNanos: alignment[i]})
		}
	}
	c.Tick(0)
	c.Tick(1000)
	if h := c.History(); len(h) != 1 || h[0].Status != StatsInProgress || h[0].Expected != 5 || h[0].Acknowledged != 0 || h[0].TriggerMillis != 1000 {
		t.Fatalf("history after the first trigger: %+v", h)
	}
	ackAll(1050, 1, BlobRef{}, nil)
	c.Persisted(1080, 1, nil)
	c.Tick(2000)
	ackAll(2030, 2, BlobRef{Key: "delta-2", Size: 40}, map[int]int64{3: 7e6, 4: 2e6})
	c.Persisted(2070, 2, nil)
	c.Tick(3000)
	c.Ack(3010, 3, src0, StateHandle{})
	c.Tick(3500) // the timeout is 500 ms
	want := []CheckpointStats{
		{ID: 1, Status: StatsCompleted, TriggerMillis: 1000, EndMillis: 1080, Acknowledged: 5, Expected: 5, StateBytes: 1010, NewBytes: 1010},
		{ID: 2, Status: StatsCompleted, TriggerMillis: 2000, EndMillis: 2070, Acknowledged: 5, Expected: 5, StateBytes: 1050, NewBytes: 50,
			MaxAlignmentNanos: 7e6},
		{ID: 3, Status: StatsFailed, TriggerMillis: 3000, EndMillis: 3500, Acknowledged: 1, Expected: 5,
			Reason: "checkpoint 3 expired after 500 ms: 4 of 5 subtasks missing: v0[1]#0, v1[0]#0, v1[1]#0, v2[0]#0"},
	}
	got := c.History()
	if len(got) != len(want) {
		t.Fatalf("history %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("checkpoint %d: %+v, want %+v", want[i].ID, got[i], want[i])
		}
	}
	got[0].Status = StatsAborted
	if c.History()[0].Status != StatsCompleted {
		t.Fatal("History shares the coordinator's slice")
	}
	c.TaskFailed(3600, src0, errors.New("x"))
	for i := 0; i < 2*MaxStatsHistory; i++ {
		c.statsTriggered(&pending{id: int64(10 + i)})
	}
	if h := c.History(); len(h) != MaxStatsHistory || h[0].ID != 10+MaxStatsHistory || h[len(h)-1].ID != 9+2*MaxStatsHistory {
		t.Fatalf("history of %d from %d to %d, want the last %d", len(h), h[0].ID, h[len(h)-1].ID, MaxStatsHistory)
	}
}

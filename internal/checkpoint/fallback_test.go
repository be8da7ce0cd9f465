package checkpoint

import "testing"

// FallBackTo moves the restore point back to an older checkpoint (the newer one is damaged), unlike
// Restored, and ids keep rising above the damaged one.
func TestFallBackTo(t *testing.T) {
	c, err := NewCoordinator(testConfig(), testTasks(), 1)
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(0)
	for _, id := range []int64{1, 2} {
		rd := c.Tick(int64(id) * 1000)
		if len(rd.Triggers) != 1 || rd.Triggers[0].ID != id {
			t.Fatalf("trigger %d: %s", id, trace(rd))
		}
		for _, a := range testTasks() {
			c.Ack(int64(id)*1000+100, id, a.Attempt, StateHandle{})
		}
		c.Persisted(int64(id)*1000+200, id, nil)
	}
	if got := c.LatestCompleted(); got == nil || got.ID != 2 {
		t.Fatalf("latest %+v, want 2", got)
	}
	one := &CompletedCheckpoint{ID: 1}
	c.Restored(one)
	if c.LatestCompleted().ID != 2 {
		t.Fatal("Restored moved the latest checkpoint back")
	}
	c.FallBackTo(one)
	if c.LatestCompleted() != one {
		t.Fatalf("after FallBackTo(1) latest is %+v", c.LatestCompleted())
	}
	rd := c.Tick(3000)
	if len(rd.Triggers) != 1 || rd.Triggers[0].ID != 3 {
		t.Fatalf("the trigger after a fallback reuses an id: %s", trace(rd))
	}
	c.FallBackTo(nil)
	if c.LatestCompleted() != one {
		t.Fatal("FallBackTo(nil) changed the restore point")
	}
}

package jobmaster

import (
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc"
)

// TestLeavingTaskManagerLeavesAtOnce: a TaskManager that says it is leaving is out of the dispatcher's
// tables (and its slots out of the pool) at once, while its session is still open on its side and long
// before the heartbeat timeout; the dispatcher closes the session, saying why. The other TaskManager stays.
func TestLeavingTaskManagerLeavesAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := NewDispatcher(DispatcherConfig{Logger: slog.New(slog.DiscardHandler), HeartbeatInterval: time.Minute, HeartbeatTimeout: 4 * time.Minute})
	defer d.Close()
	register := func(name string) protocol.Session {
		jm, tm := rpc.Pipe()
		d.Attach(jm)
		if err := tm.Send(protocol.Envelope{Body: protocol.Register{Version: protocol.Version, Name: name, Slots: 2, DataAddress: "127.0.0.1:1"}}); err != nil {
			t.Fatal(err)
		}
		if env, err := tm.Recv(); err != nil {
			t.Fatal(err)
		} else if _, ok := env.Body.(protocol.Registered); !ok {
			t.Fatalf("%s: answered %T", name, env.Body)
		}
		return tm
	}
	stays := register("tm-1")
	defer stays.Close(nil)
	leaves := register("tm-2")
	if !d.WaitTaskManagers(2, nil) {
		t.Fatal("the TaskManagers did not register")
	}
	if err := stays.Send(protocol.Envelope{Body: protocol.Heartbeat{HeapBytes: 3 << 20, MemoryBytes: 9 << 20}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := leaves.Send(protocol.Envelope{Body: protocol.Leaving{Reason: "shutting down"}}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := leaves.Recv()
		if err == nil {
			continue // a heartbeat
		}
		if want := "TaskManager tm-2 is leaving (shutting down)"; err.Error() != want {
			t.Fatalf("the leaving TaskManager's session ended with %q, want %q", err, want)
		}
		break
	}
	// The session is closed first, then the tables change: wait for them.
	tms := d.TaskManagers()
	for deadline := time.Now().Add(5 * time.Second); len(tms) != 1 && time.Now().Before(deadline); tms = d.TaskManagers() {
		time.Sleep(time.Millisecond)
	}
	if len(tms) != 1 || tms[0].Name != "tm-1" || tms[0].Free != 2 || tms[0].State != TaskManagerRegistered {
		t.Fatalf("TaskManagers after tm-2 left: %+v, want tm-1 alone with its 2 slots free", tms)
	}
	for deadline := time.Now().Add(5 * time.Second); d.TaskManagers()[0].MemoryBytes == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if tm := d.TaskManagers()[0]; tm.HeapBytes != 3<<20 || tm.MemoryBytes != 9<<20 {
		t.Errorf("tm-1's memory %d/%d, want what its heartbeat said", tm.HeapBytes, tm.MemoryBytes)
	}
	if dep := d.Departed(); len(dep) != 1 || dep[0].Name != "tm-2" || dep[0].State != TaskManagerLeft || dep[0].Reason != "shutting down" ||
		dep[0].At.Before(start) || dep[0].Slots != 2 {
		t.Errorf("departed TaskManagers %+v, want tm-2, left, shutting down", dep)
	}
	d.mu.Lock()
	pooled := d.pool.TaskManagers()
	d.mu.Unlock()
	if len(pooled) != 1 || pooled[0].Name != "tm-1" {
		t.Errorf("the slot pool holds %+v after tm-2 left, want tm-1's slots only", pooled)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("tm-2 left the tables %v after its notice", el)
	}
}

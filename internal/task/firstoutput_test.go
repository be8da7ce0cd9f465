package task

import (
	"encoding/binary"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
)

// slowPollSource emits its records in one poll that goes on for pause after the first of them, as a
// source decoding a large batch does.
type slowPollSource struct {
	*finishChain
	pause   time.Duration
	emitted time.Time // when the first record went out (read once the task ended)
}

func (c *slowPollSource) PollSource() (SourceStatus, error) {
	select {
	case <-c.release:
	default:
		return NothingAvailable, nil
	}
	for i := range c.records {
		if err := c.rt.Outputs[0].EmitRecord(0, binary.AppendUvarint(nil, uint64(i))); err != nil {
			return 0, err
		}
		c.rt.Counters.Out++
		if i == 0 {
			c.emitted = time.Now()
			time.Sleep(c.pause)
		}
	}
	return EndOfInput, nil
}

// TestFirstOutputIsStampedBeforeItsWork pins the time a task reports its first output at: from before the
// poll (or buffer) that emitted it, not from after it, since readers see the record as it is emitted. A
// restarted task's first output ends the outage the job master reports; stamped after the work, the end of
// the outage came late by the rest of that work (on a loaded machine, tens of milliseconds of a buffer).
func TestFirstOutputIsStampedBeforeItsWork(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newFinishHarness(t)
	c := &slowPollSource{finishChain: &finishChain{source: true, records: 3, release: make(chan struct{})}, pause: 200 * time.Millisecond}
	cfg := sourceConfig(c.finishChain, h.setup(false))
	cfg.Chain = func(rt *Runtime) (Chain, error) { c.rt = rt; return c, nil }
	_, wait := h.start(cfg)
	stop := make(chan struct{})
	out := h.read(ident.PartitionID{Result: 2, Producer: finishSource}, stop)
	close(c.release)
	var first *deploy.Observation
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case u := <-h.updates:
			if o := u.Observation; o != nil {
				if o.Kind == deploy.FirstOutput {
					first = o
				}
				continue
			}
			if u.State.Terminal() {
				if u.State != deploy.Finished {
					t.Fatalf("task ended %s (%v)", u.State, u.Err)
				}
				done = true
			}
		case <-timeout:
			t.Fatal("timed out waiting for the task to finish")
		}
	}
	wait()
	close(stop)
	if got := out.got(); got != "records, end-of-partition" {
		t.Errorf("output %q", got)
	}
	if first == nil {
		t.Fatal("no first output reported")
	}
	if late := first.At.Sub(c.emitted); late > 0 {
		t.Errorf("first output reported at %v, %v after the record went out (the poll went on for %v after it)", first.At, late, c.pause)
	}
	h.pm.ReleaseAll()
}

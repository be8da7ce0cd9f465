package roles

import (
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// TestOffers: a TaskManager that offers again replaces its offer; decide returns as soon as the offers of
// every wanted run settle it, or at its bound; an offer after the decision is refused.
func TestOffers(t *testing.T) {
	run := protocol.JobID{1}
	offer := func(name string, subtasks ...int32) jobmaster.KeptOffer {
		k := jobmaster.KeptOffer{Name: name, Job: protocol.KeptJob{Job: run}}
		for _, i := range subtasks {
			var kt protocol.KeptTask
			kt.Attempt.Index = i
			k.Job.Tasks = append(k.Job.Tasks, kt)
		}
		return k
	}
	o := newOffers()
	if !o.take(offer("tm-1", 0)) || !o.take(offer("tm-1", 0, 1)) {
		t.Fatal("an offer before the decision was refused")
	}
	decided := make(chan map[protocol.JobID][]jobmaster.KeptOffer, 1)
	go func() { decided <- o.decide(map[protocol.JobID]int{run: 3}, time.Minute, nil) }()
	select {
	case <-decided:
		t.Fatal("decided with subtask 2 of 3 not offered")
	case <-time.After(50 * time.Millisecond):
	}
	o.take(offer("tm-2", 2))
	got := <-decided
	if len(got[run]) != 2 || len(got[run][0].Job.Tasks) != 2 {
		t.Fatalf("decided on %+v, want tm-1's second offer (2 tasks) and tm-2's", got[run])
	}
	if o.take(offer("tm-3", 0)) {
		t.Fatal("an offer after the decision was taken")
	}
	if got := newOffers().decide(map[protocol.JobID]int{run: 1}, 10*time.Millisecond, nil); len(got) != 0 {
		t.Fatalf("decided at the bound on %+v, want nothing", got)
	}
}

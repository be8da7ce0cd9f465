package roles

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/executor"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// Task continuity on the JobManager's side (docs/cluster.md §7): the TaskManagers of a lost leader keep
// its jobs' tasks running and offer them to the JobManager they register with next. A JobManager collects
// the offers from its start until, leading, it decided what to take over: it waits for the offers of
// every job recorded as running on etcd until they cover all of the job's subtasks, for at most
// adoptWait, and then takes over each job whose offers reconcile (Dispatcher.Reconcile); the others restart
// from their latest checkpoint, saying why, and their TaskManagers drop the tasks they kept. An offer
// that comes after the decision, or for a job no record names, is dropped at once.

// adoptWait bounds how long a new leader waits for the TaskManagers of the jobs it resumes to offer the
// tasks they kept: they look the leader up on etcd every 250 ms while they keep tasks, so all that are
// alive offer theirs within a second of the takeover; one that does not within adoptWait is taken as lost.
const adoptWait = 10 * time.Second

// offers are the jobs TaskManagers kept running, collected by run until the JobManager decided.
type offers struct {
	mu   sync.Mutex
	done bool
	// byRun holds the offers by run, one per TaskManager name (a TaskManager that registers again
	// replaces its offer): bounded by the TaskManagers times the jobs they kept.
	byRun map[protocol.JobID][]jobmaster.KeptOffer
	// changed has one token: an offer came.
	changed chan struct{}
}

func newOffers() *offers {
	return &offers{byRun: map[protocol.JobID][]jobmaster.KeptOffer{}, changed: make(chan struct{}, 1)}
}

// take implements jobmaster.DispatcherConfig.Kept: it keeps the offer until the decision.
func (o *offers) take(k jobmaster.KeptOffer) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return false
	}
	list := o.byRun[k.Job.Job]
	if i := slices.IndexFunc(list, func(o jobmaster.KeptOffer) bool { return o.Name == k.Name }); i >= 0 {
		list[i] = k // the same TaskManager, registered again
	} else {
		list = append(list, k)
	}
	o.byRun[k.Job.Job] = list
	select {
	case o.changed <- struct{}{}:
	default:
	}
	return true
}

// decide waits until the offers of every run in want (its subtasks by run) cover its subtasks, or for
// wait, or until stop closes; then it stops collecting and returns every offer it holds.
func (o *offers) decide(want map[protocol.JobID]int, wait time.Duration, stop <-chan struct{}) map[protocol.JobID][]jobmaster.KeptOffer {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for !o.settled(want) {
		select {
		case <-o.changed:
			continue
		case <-deadline.C:
		case <-stop:
		}
		break
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done = true
	got := o.byRun
	o.byRun = nil
	return got
}

// settled reports whether the offers of every run in want settle its takeover (jobmaster.OffersDecide).
func (o *offers) settled(want map[protocol.JobID]int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for run, n := range want {
		if !jobmaster.OffersDecide(o.byRun[run], n) {
			return false
		}
	}
	return true
}

// takeover reconciles the offers of r's run and takes the slots its tasks run in: the takeover for
// executor.Run, or why the tasks cannot be taken over (the caller then drops the offers).
func (jm *jobManager) takeover(r resumed, list []jobmaster.KeptOffer) (*executor.Takeover, error) {
	run, job, graph := r.run, r.job, r.graph
	if len(list) == 0 {
		return nil, fmt.Errorf("no TaskManager kept its tasks (lost too, or it gave them up)")
	}
	thisRun, err := jm.thisRun(r)
	if err != nil {
		return nil, err
	}
	a, err := jm.disp.Reconcile(run, job.Graph, graph, job.Settings.NoSlotSharing, list)
	if err != nil {
		return nil, err
	}
	setup := list[0].Job.Setup
	restored := int64(0)
	for _, k := range list {
		restored = max(restored, k.Job.Restored)
	}
	return &executor.Takeover{Core: a, Secret: setup.Secret, Start: time.Unix(0, setup.Start), Savepoint: setup.Savepoint,
		Restored: restored, ThisRun: thisRun}, nil
}

// dropOffers tells the TaskManagers of offers that their tasks are not taken over.
func (jm *jobManager) dropOffers(list []jobmaster.KeptOffer, reason string) {
	for _, k := range list {
		jm.disp.Drop(k.TaskManager, k.Job.Job, reason)
	}
}

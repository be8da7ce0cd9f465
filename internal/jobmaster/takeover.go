package jobmaster

import (
	"bytes"
	"fmt"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// OffersDecide reports whether the offers of one run settle whether it can be taken over: they name each
// of its subtasks (that many), or a task that failed or was cancelled (then it cannot, whatever comes
// next).
func OffersDecide(list []KeptOffer, subtasks int) bool {
	seen := map[ident.Subtask]bool{}
	for _, k := range list {
		for _, t := range k.Job.Tasks {
			switch t.State {
			case deploy.Failed, deploy.Canceled, deploy.Canceling:
				return true
			}
			seen[t.Attempt.Subtask] = true
		}
	}
	return len(seen) >= subtasks
}

// Reconcile decides whether the offers of run, a run of job graph jg (build fingerprint fingerprint)
// describe all of it running (jobcore.Reconcile) and, if so, takes the slots its tasks run in (Adopt): the
// core's adoption, without its restore point, or why the run cannot be taken over.
func (d *Dispatcher) Reconcile(run protocol.JobID, jg *graph.JobGraph, fingerprint [32]byte, noSlotSharing bool, list []KeptOffer) (*jobcore.Adoption, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("no TaskManager kept its tasks")
	}
	setup := list[0].Job.Setup
	reports := make([]jobcore.KeptReport, 0, len(list))
	for _, k := range list {
		if k.Job.Setup.Graph != fingerprint {
			return nil, fmt.Errorf("TaskManager %s runs another build of the job", k.Name)
		}
		if !bytes.Equal(k.Job.Setup.Secret, setup.Secret) || k.Job.Setup.Start != setup.Start {
			return nil, fmt.Errorf("TaskManagers %s and %s disagree on the run's setup", list[0].Name, k.Name)
		}
		reports = append(reports, jobcore.KeptReport{TaskManager: k.TaskManager, Name: k.Name, DataAddress: k.DataAddress,
			Secret: k.Job.Setup.Secret, Checkpoint: k.Job.Checkpoint, Tasks: k.Job.Tasks})
	}
	a, err := jobcore.Reconcile(jg, noSlotSharing, reports)
	if err != nil {
		return nil, err
	}
	if a.Slots, err = d.Adopt(run, a.Placement); err != nil {
		return nil, err
	}
	return a, nil
}

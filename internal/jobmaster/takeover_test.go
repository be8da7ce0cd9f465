package jobmaster

import (
	"testing"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// TestOffersDecide: the offers of a run settle its takeover once they name every subtask, or a failed one.
func TestOffersDecide(t *testing.T) {
	task := func(i int32, st deploy.State) jobcore.KeptTask {
		return jobcore.KeptTask{Attempt: ident.Attempt{Subtask: ident.Subtask{Index: i}, Number: 2}, State: st}
	}
	offer := func(ts ...jobcore.KeptTask) KeptOffer { return KeptOffer{Job: protocol.KeptJob{Tasks: ts}} }
	for _, tc := range []struct {
		name string
		list []KeptOffer
		want bool
	}{
		{"none", nil, false},
		{"some", []KeptOffer{offer(task(0, deploy.Running))}, false},
		{"all over two", []KeptOffer{offer(task(0, deploy.Running)), offer(task(1, deploy.Finished), task(2, deploy.Deploying))}, true},
		{"the same subtask twice counts once", []KeptOffer{offer(task(0, deploy.Running), task(1, deploy.Running)), offer(task(1, deploy.Running))}, false},
		{"a failed one", []KeptOffer{offer(task(0, deploy.Failed))}, true},
		{"a cancelled one", []KeptOffer{offer(task(2, deploy.Canceled))}, true},
	} {
		if got := OffersDecide(tc.list, 3); got != tc.want {
			t.Errorf("%s: OffersDecide = %v, want %v", tc.name, got, tc.want)
		}
	}
}

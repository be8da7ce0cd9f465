package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/determinants"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/network"
)

// TestReplayFailureOfAnError: the TaskManager tells why a replay did not hold from the error's types,
// however deeply wrapped, and never from its text: a message that only quotes "in-flight log incomplete"
// or "replay diverged" is no reason (the job master would restart the producers, or give up the replay,
// for a user function's exception).
func TestReplayFailureOfAnError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want jobcore.ReplayFailure
	}{
		{"user exception", errors.New("map: division by zero"), jobcore.ReplayFine},
		{"text of an incomplete log only", errors.New("parse: unexpected 'network: in-flight log incomplete'"), jobcore.ReplayFine},
		{"text of a divergence only", fmt.Errorf("task map [1/1] #2 failed: %s", deploy.ErrReplayDiverged.Error()), jobcore.ReplayFine},
		{"incomplete log", fmt.Errorf("task check [1/2] #1 failed: connect input 0: %w",
			fmt.Errorf("subpartition r1/0 requested by check[0]#1 from checkpoint 3: %w: %w", network.ErrLogIncomplete, errors.New("truncated"))),
			jobcore.ReplayLogIncomplete},
		{"diverged", fmt.Errorf("task map [1/1] #2 failed: %w: at step 4", deploy.ErrReplayDiverged), jobcore.ReplayDiverged},
		{"source that cannot replay", fmt.Errorf("replay: %w", deploy.ErrCannotReplay), jobcore.ReplaySourceCannotReplay},
		{"broken determinant log", fmt.Errorf("replay: %w: 65 marks", determinants.ErrBroken), jobcore.ReplayDeterminantsBroken},
		{"determinant log without the mark", fmt.Errorf("replay: %w", noMark(t)), jobcore.ReplayDeterminantsBroken},
		{"incomplete log and divergence", errors.Join(fmt.Errorf("%w", deploy.ErrReplayDiverged), network.ErrLogIncomplete), jobcore.ReplayLogIncomplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := replayFailure(tc.err); got != tc.want {
				t.Fatalf("replayFailure(%q) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// noMark is the error of a determinant log asked for a checkpoint it has no mark of.
func noMark(t *testing.T) error {
	t.Helper()
	l, err := determinants.New(determinants.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReaderAt(7); err != nil {
		return err
	}
	t.Fatal("a new determinant log has a mark of checkpoint 7")
	return nil
}

package runnel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// intervalSink refuses jobs whose checkpoint interval is longer than max, and counts its writers.
type intervalSink struct {
	max     time.Duration
	seen    *runnel.JobSettings
	writers int
}

func (s *intervalSink) CheckJob(js runnel.JobSettings) error {
	s.seen = &js
	if js.Checkpoint.Interval == 0 || js.Checkpoint.Interval > s.max {
		return errors.New("checkpoint interval too long")
	}
	return nil
}

func (s *intervalSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[int64], error) {
	s.writers++
	return connector.NewCollect[int64]().CreateWriter(nil)
}

// TestJobCheckerRefusesAtSubmission runs a sink's JobChecker with the job's checkpoint configuration: a
// refusal fails Execute naming the job and the sink before any writer is made; an accepted job runs.
func TestJobCheckerRefusesAtSubmission(t *testing.T) {
	for _, interval := range []time.Duration{0, time.Hour, 50 * time.Millisecond} {
		env := runnel.NewEnvironment(runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: interval, Storage: t.TempDir()}))
		s := &intervalSink{max: time.Second}
		runnel.FromSource(env, connector.Collection([]int64{1, 2, 3})).SinkTo(s).Name("guarded")
		_, err := env.Execute(context.Background(), "checked")
		if s.seen == nil || s.seen.Name != "checked" || s.seen.Checkpoint.Interval != interval {
			t.Fatalf("interval %s: CheckJob saw %+v", interval, s.seen)
		}
		if interval > time.Second || interval == 0 {
			if err == nil || !strings.Contains(err.Error(), `job "checked": sink "guarded": checkpoint interval too long`) {
				t.Fatalf("interval %s: %v", interval, err)
			}
			if s.writers != 0 {
				t.Fatalf("interval %s: a refused job made %d writers", interval, s.writers)
			}
			continue
		}
		if err != nil || s.writers == 0 {
			t.Fatalf("interval %s: %v, %d writers", interval, err, s.writers)
		}
	}
}

package runnel_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// abortListeningSink records, per subtask, the checkpoints its writer snapshotted, heard complete and heard
// aborted; subtask 1 declines every third checkpoint (its snapshot fails), which aborts it.
type abortListeningSink struct {
	mu                            sync.Mutex
	snapshots, completed, aborted map[int][]int64
	declined                      []int64
}

func (s *abortListeningSink) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[int64], error) {
	return &abortListeningWriter{s: s, sub: ctx.SubtaskIndex()}, nil
}

type abortListeningWriter struct {
	s   *abortListeningSink
	sub int
}

func (w *abortListeningWriter) Write(int64) error { return nil }
func (w *abortListeningWriter) Flush() error      { return nil }
func (w *abortListeningWriter) Close() error      { return nil }
func (w *abortListeningWriter) SnapshotState(id int64) ([]byte, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.sub == 1 && id%3 == 0 {
		w.s.declined = append(w.s.declined, id)
		return nil, fmt.Errorf("snapshot %d refused by the test", id)
	}
	w.s.snapshots[w.sub] = append(w.s.snapshots[w.sub], id)
	return nil, nil
}
func (w *abortListeningWriter) RestoreState([]byte) error { return nil }
func (w *abortListeningWriter) NotifyCheckpointComplete(id int64) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.completed[w.sub] = append(w.s.completed[w.sub], id)
	return nil
}
func (w *abortListeningWriter) NotifyCheckpointAborted(id int64) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.aborted[w.sub] = append(w.s.aborted[w.sub], id)
	return nil
}

// TestCheckpointAbortNotifications pins that a sink writer implementing runnel.CheckpointAbortListener
// hears of the checkpoints that were aborted (here declined by the other subtask), and never of one that
// completed: the job master decides each checkpoint once.
func TestCheckpointAbortNotifications(t *testing.T) {
	sink := &abortListeningSink{snapshots: map[int][]int64{}, completed: map[int][]int64{}, aborted: map[int][]int64{}}
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet), runnel.WithChaining(false),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 15 * time.Millisecond, TolerableFailed: 1000}))
	src := runnel.FromSource(env, connector.Generator(func(_ int, s uint64) int64 { return int64(s) },
		connector.GeneratorOptions{RecordsPerSubtask: 3000, RatePerSubtask: 10_000}))
	src.SinkTo(sink).Name("sink")
	res, err := env.Execute(context.Background(), "notify aborts")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.declined) == 0 || res.Checkpoints.Failed == 0 {
		t.Fatalf("no checkpoint was declined (%+v): the test tests nothing", res.Checkpoints)
	}
	got := sink.aborted[0]
	if len(got) == 0 {
		t.Fatalf("subtask 0 heard of no aborted checkpoint; subtask 1 declined %v", sink.declined)
	}
	for _, id := range got {
		if !slices.Contains(sink.declined, id) {
			t.Fatalf("subtask 0 heard checkpoint %d aborted, which subtask 1 did not decline (%v)", id, sink.declined)
		}
	}
	for sub := range 2 {
		for _, id := range sink.aborted[sub] {
			if slices.Contains(sink.completed[sub], id) {
				t.Fatalf("subtask %d heard checkpoint %d both aborted and complete", sub, id)
			}
		}
	}
	t.Logf("declined %d checkpoints; subtask 0 heard %d aborts, %d completions", len(sink.declined), len(got), len(sink.completed[0]))
}

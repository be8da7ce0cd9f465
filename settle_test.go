package runnel_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// stagingSink is a two-phase-commit sink over an in-memory external system: a writer stages the records
// of each checkpoint epoch under the checkpoint's id, a completion commits what was staged up to it, and a
// restore (or Settle) commits what its state lists and drops everything else the subtask staged. Its
// writers of subtask failSub fail at their first record after a snapshot whose completion they have not
// heard (from checkpoint failFrom on), so that the failed writer leaves a checkpoint staged whose fate it
// never hears; or, failInCommit, at the completion of checkpoint failFrom, before they commit it.
type stagingSink struct {
	failSub      int
	failFrom     int64
	failInCommit bool

	mu        sync.Mutex
	staged    map[int]map[int64][]int64 // by subtask, by checkpoint: records staged and not yet committed or dropped
	epochs    map[int]map[int64][]int64 // every epoch staged, by subtask and checkpoint (the reference)
	committed map[int][]int64
	open      int // writers created and not closed
	failed    bool
	settled   []runnel.Settlement
	problems  []string
}

func newStagingSink(failSub int, failFrom int64) *stagingSink {
	return &stagingSink{failSub: failSub, failFrom: failFrom, staged: map[int]map[int64][]int64{},
		epochs: map[int]map[int64][]int64{}, committed: map[int][]int64{}}
}

func (s *stagingSink) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[int64], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open++
	sub := ctx.SubtaskIndex()
	if s.staged[sub] == nil {
		s.staged[sub], s.epochs[sub] = map[int64][]int64{}, map[int64][]int64{}
	}
	return &stagingWriter{s: s, sub: sub}, nil
}

// Settle implements runnel.Settler.
func (s *stagingSink) Settle(_ context.Context, st runnel.Settlement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open != 0 {
		s.problems = append(s.problems, fmt.Sprintf("Settle of subtask %d with %d writers open", st.Subtask, s.open))
	}
	s.settled = append(s.settled, st)
	return s.settleLocked(st.Subtask, st.State)
}

// settleLocked commits the checkpoints state lists that are still staged and drops the rest of the
// subtask's staged records.
func (s *stagingSink) settleLocked(sub int, state []byte) error {
	for len(state) > 0 {
		id, n := binary.Varint(state)
		if n <= 0 {
			return errors.New("staging sink: bad state")
		}
		state = state[n:]
		if recs, ok := s.staged[sub][id]; ok {
			s.committed[sub] = append(s.committed[sub], recs...)
			delete(s.staged[sub], id)
		}
	}
	clear(s.staged[sub])
	return nil
}

type stagingWriter struct {
	s         *stagingSink
	sub       int
	cur       []int64
	completed int64
	snapped   int64 // the last checkpoint snapshotted
}

func (w *stagingWriter) Write(v int64) error {
	if w.sub == w.s.failSub && !w.s.failInCommit && w.snapped >= w.s.failFrom && w.completed < w.snapped {
		w.s.mu.Lock()
		w.s.failed = true
		w.s.mu.Unlock()
		return fmt.Errorf("staging sink: failing with checkpoint %d staged and undecided", w.snapped)
	}
	w.cur = append(w.cur, v)
	return nil
}
func (w *stagingWriter) Flush() error { return nil }
func (w *stagingWriter) Close() error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.open--
	return nil
}

// SnapshotState stages the epoch's records and lists every checkpoint of the subtask still staged.
func (w *stagingWriter) SnapshotState(id int64) ([]byte, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.staged[w.sub][id] = w.cur
	w.s.epochs[w.sub][id] = w.cur
	w.cur, w.snapped = nil, id
	var b []byte
	for _, c := range slices.Sorted(mapKeys(w.s.staged[w.sub])) {
		b = binary.AppendVarint(b, c)
	}
	return b, nil
}

func (w *stagingWriter) RestoreState(b []byte) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.settleLocked(w.sub, b)
}

func (w *stagingWriter) NotifyCheckpointComplete(id int64) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.sub == w.s.failSub && w.s.failInCommit && id >= w.s.failFrom {
		w.s.failed = true
		return fmt.Errorf("staging sink: failing before the commit of checkpoint %d", id)
	}
	w.completed = id
	for c, recs := range w.s.staged[w.sub] {
		if c <= id {
			w.s.committed[w.sub] = append(w.s.committed[w.sub], recs...)
			delete(w.s.staged[w.sub], c)
		}
	}
	return nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestSettleAfterJobFailed runs a job whose sink subtask 0 fails with a checkpoint staged whose fate it
// never hears, with no restart: the job fails, and once its tasks stopped every sink subtask that had not
// finished is settled from the newest completed checkpoint. Nothing stays staged, and each subtask's
// committed records are exactly the epochs of the checkpoints up to that one, each once (the reference is
// what the writers staged, not what the settling did). A job that finishes settles nothing.
func TestSettleAfterJobFailed(t *testing.T) {
	run := func(t *testing.T, sink *stagingSink, records uint64, opts ...runnel.Option) (*runnel.JobResult, error) {
		env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet),
			runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond}), runnel.WithRestartStrategy("none")}, opts...)...)
		runnel.FromSource(env, connector.Generator(func(sub int, seq uint64) int64 { return int64(sub)<<40 | int64(seq) },
			connector.GeneratorOptions{RecordsPerSubtask: records, RatePerSubtask: 20_000})).
			SinkTo(sink).Name("staging")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		return env.Execute(ctx, "settle")
	}
	for _, tc := range []struct {
		name     string
		inCommit bool
	}{{"failed with a checkpoint undecided", false}, {"failed before a commit", true}} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newStagingSink(0, 3)
			sink.failInCommit = tc.inCommit
			res, err := run(t, sink, 1<<40)
			if err == nil || res == nil || res.Status != "FAILED" {
				t.Fatalf("%v, %+v: want the job failed by its sink", err, res)
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if !sink.failed {
				t.Fatalf("the sink never failed: %v", err)
			}
			if len(sink.problems) > 0 {
				t.Fatal(sink.problems)
			}
			rp := res.Checkpoints.LastCompletedID
			if tc.inCommit && rp < 3 {
				t.Fatalf("checkpoints %+v: want checkpoint 3, whose commit failed, completed", *res.Checkpoints)
			}
			if len(sink.settled) != 2 {
				t.Fatalf("settled %+v: want both sink subtasks", sink.settled)
			}
			for _, st := range sink.settled {
				if st.CheckpointID != rp || st.Parallelism != 2 {
					t.Fatalf("settled %+v: want checkpoint %d (the newest completed) at parallelism 2", st, rp)
				}
			}
			for sub := range 2 {
				if n := len(sink.staged[sub]); n != 0 {
					t.Fatalf("subtask %d: %d checkpoints still staged after the job ended: %v", sub, n, slices.Sorted(mapKeys(sink.staged[sub])))
				}
				var want []int64
				for _, c := range slices.Sorted(mapKeys(sink.epochs[sub])) {
					if c <= rp {
						want = append(want, sink.epochs[sub][c]...)
					}
				}
				got := slices.Clone(sink.committed[sub])
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("subtask %d: committed %d records, want the %d of the epochs up to checkpoint %d, each once", sub, len(got), len(want), rp)
				}
			}
			t.Logf("checkpoints %+v; subtask 0 staged up to %d", *res.Checkpoints, slices.Max(slices.Collect(mapKeys(sink.epochs[0]))))
		})
	}
	t.Run("finished", func(t *testing.T) {
		sink := newStagingSink(-1, 0)
		res, err := run(t, sink, 2000)
		if err != nil || res.Status != "FINISHED" {
			t.Fatalf("%v, %+v", err, res)
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if len(sink.settled) != 0 {
			t.Fatalf("a finished job settled %+v", sink.settled)
		}
	})
}

package runnel_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// txnStore is the external system a two-phase-commit sink writes to: it commits a transaction at most once,
// by its id, as a transactional system does for a transaction that is committed again after a restore.
type txnStore[T comparable] struct {
	mu        sync.Mutex
	committed map[string]bool
	records   map[T]int // committed record -> how many times
	n         int
}

func newTxnStore[T comparable]() *txnStore[T] {
	return &txnStore[T]{committed: map[string]bool{}, records: map[T]int{}}
}

func (s *txnStore[T]) commit(txn string, recs []T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.committed[txn] {
		return
	}
	s.committed[txn] = true
	for _, r := range recs {
		s.records[r]++
		s.n++
	}
}

// check compares the committed records with want (each exactly once) and names what differs.
func (s *txnStore[T]) check(want []T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	missing, duplicated := 0, 0
	var example []string
	seen := make(map[T]bool, len(want))
	for _, w := range want {
		seen[w] = true
		switch n := s.records[w]; {
		case n == 0:
			missing++
			if len(example) < 3 {
				example = append(example, fmt.Sprintf("%v missing", w))
			}
		case n > 1:
			duplicated += n - 1
			if len(example) < 3 {
				example = append(example, fmt.Sprintf("%v committed %d times", w, n))
			}
		}
	}
	unexpected := 0
	for r := range s.records {
		if !seen[r] {
			unexpected++
		}
	}
	if missing+duplicated+unexpected > 0 {
		return fmt.Errorf("%d records committed for %d expected: %d missing, %d duplicated, %d unexpected (%s)",
			s.n, len(want), missing, duplicated, unexpected, strings.Join(example, "; "))
	}
	return nil
}

// twoPhaseSink is a two-phase-commit sink written against the public API only. Each writer stages what it
// writes in an open transaction; SnapshotState pre-commits it under the checkpoint's id (the staged
// transactions are the writer's checkpointed state); NotifyCheckpointComplete commits every staged
// transaction up to that id; a restored writer commits the transactions staged in the checkpoint it
// restores (they belong to a completed checkpoint). Nothing is committed at Flush or Close: a record is
// committed only through a checkpoint that covers it, so exactly once, provided the job's last records are
// covered by a checkpoint whose completion the sink hears.
type twoPhaseSink[T comparable] struct {
	store *txnStore[T]
	codec codec.Codec[T]
	// failFlush, when set, makes the first Flush (the sink's end of input) that finds it true fail, once.
	failFlush *atomic.Bool
	// failCommit, when set, makes the first commit of a checkpoint the writer snapshotted after its end of
	// input that finds it true fail, once (the external system refused the final transaction's commit).
	failCommit *atomic.Bool
}

func (s *twoPhaseSink[T]) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[T], error) {
	return &twoPhaseWriter[T]{s: s, sub: ctx.SubtaskIndex()}, nil
}

type stagedTxn[T any] struct {
	checkpoint int64
	records    []T
}

type twoPhaseWriter[T comparable] struct {
	s      *twoPhaseSink[T]
	sub    int
	open   []T
	staged []stagedTxn[T] // by ascending checkpoint id
	ended  bool
	// endSnap is the first checkpoint snapshotted after the end of input (0: none yet).
	endSnap int64
}

func (w *twoPhaseWriter[T]) Write(v T) error { w.open = append(w.open, v); return nil }

func (w *twoPhaseWriter[T]) Flush() error {
	if f := w.s.failFlush; f != nil && f.CompareAndSwap(true, false) {
		return errors.New("injected failure at the end of input")
	}
	w.ended = true
	return nil
}

func (w *twoPhaseWriter[T]) Close() error { return nil } // the open transaction is abandoned

func (w *twoPhaseWriter[T]) txnID(checkpoint int64) string {
	return fmt.Sprintf("%d/%d", w.sub, checkpoint)
}

func (w *twoPhaseWriter[T]) SnapshotState(id int64) ([]byte, error) {
	if w.ended && w.endSnap == 0 {
		w.endSnap = id
	}
	w.staged = append(w.staged, stagedTxn[T]{checkpoint: id, records: w.open})
	w.open = nil
	b := binary.AppendUvarint(nil, uint64(len(w.staged)))
	for _, txn := range w.staged {
		b = binary.AppendUvarint(b, uint64(txn.checkpoint))
		b = binary.AppendUvarint(b, uint64(len(txn.records)))
		for _, r := range txn.records {
			enc, err := w.s.codec.Append(nil, r)
			if err != nil {
				return nil, err
			}
			b = binary.AppendUvarint(b, uint64(len(enc)))
			b = append(b, enc...)
		}
	}
	return b, nil
}

func (w *twoPhaseWriter[T]) RestoreState(b []byte) error {
	next := func() (uint64, error) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, errors.New("two-phase sink: malformed state")
		}
		b = b[k:]
		return v, nil
	}
	n, err := next()
	if err != nil {
		return err
	}
	for range n {
		id, err := next()
		if err != nil {
			return err
		}
		m, err := next()
		if err != nil {
			return err
		}
		txn := stagedTxn[T]{checkpoint: int64(id)}
		for range m {
			l, err := next()
			if err != nil || l > uint64(len(b)) {
				return errors.New("two-phase sink: malformed state")
			}
			var v T
			if err := w.s.codec.Decode(b[:l], &v); err != nil {
				return err
			}
			b = b[l:]
			txn.records = append(txn.records, v)
		}
		// Staged in the checkpoint this writer restores from, which completed: commit (again, harmlessly,
		// if the notification had come before the failure).
		w.s.store.commit(w.txnID(txn.checkpoint), txn.records)
	}
	return nil
}

func (w *twoPhaseWriter[T]) NotifyCheckpointComplete(id int64) error {
	if f := w.s.failCommit; f != nil && w.endSnap > 0 && id >= w.endSnap && f.CompareAndSwap(true, false) {
		return fmt.Errorf("injected failure: commit of checkpoint %d refused", id)
	}
	i := 0
	for ; i < len(w.staged) && w.staged[i].checkpoint <= id; i++ {
		w.s.store.commit(w.txnID(w.staged[i].checkpoint), w.staged[i].records)
	}
	w.staged = w.staged[i:]
	return nil
}

var _ runnel.CheckpointListener = (*twoPhaseWriter[int64])(nil)

// TestTwoPhaseCommitSinkCommitsEverythingOnce runs a bounded job into a two-phase-commit sink: every record
// must be committed exactly once, to the last one, without failures and with a failure near the end (on
// the last records of a subtask, or in the sink's own end of input, after every source ended) under full
// and region failover. It needs the final checkpoint: a task whose input ended waits for a checkpoint
// covering its end, and the sink hears of its completion before the job is FINISHED.
func TestTwoPhaseCommitSinkCommitsEverythingOnce(t *testing.T) {
	const perSubtask, p = 3000, 2
	var want []int64
	for sub := range p {
		for s := range perSubtask {
			want = append(want, int64(sub*perSubtask+s))
		}
	}
	tcp := []runnel.Option{runnel.WithTaskManagers(2), runnel.WithChaining(false)}
	cases := []struct {
		name      string
		failover  string
		inject    []string
		failFlush bool
		// failCommit fails the sink's commit of the final checkpoint, after every input ended and the
		// checkpoint completed: the restarted sources restore it and must not emit again.
		failCommit bool
		opts       []runnel.Option
	}{
		{name: "no failure, chained", failover: "region"},
		{name: "no failure, tcp", failover: "region", opts: tcp},
		// The sink's subtasks get perSubtask records each (rebalance); fail on one of the last few.
		{name: "region, sink near the end", failover: "region", inject: []string{fmt.Sprintf("sink[0]@%d", perSubtask-3)}, opts: tcp},
		{name: "full, sink near the end", failover: "full", inject: []string{fmt.Sprintf("sink[0]@%d", perSubtask-3)}, opts: tcp},
		{name: "region, map at its last record", failover: "region", inject: []string{fmt.Sprintf("map[1]@%d", perSubtask)}, opts: tcp},
		{name: "full, map at its last record", failover: "full", inject: []string{fmt.Sprintf("map[1]@%d", perSubtask)}, opts: tcp},
		{name: "region, sink at its end of input", failover: "region", failFlush: true, opts: tcp},
		{name: "full, sink at its end of input", failover: "full", failFlush: true, opts: tcp},
		{name: "region, the final commit fails", failover: "region", failCommit: true, opts: tcp},
		{name: "full, the final commit fails", failover: "full", failCommit: true, opts: tcp},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := newTxnStore[int64]()
			sink := &twoPhaseSink[int64]{store: store, codec: codec.Int64()}
			if tc.failFlush {
				sink.failFlush = new(atomic.Bool)
				sink.failFlush.Store(true)
			}
			if tc.failCommit {
				sink.failCommit = new(atomic.Bool)
				sink.failCommit.Store(true)
			}
			opts := append([]runnel.Option{runnel.WithParallelism(p), runnel.WithLogger(quiet),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond}),
				runnel.WithFailover(tc.failover), runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"),
				runnel.WithFailureInjection(tc.inject...)}, tc.opts...)
			env := runnel.NewEnvironment(opts...)
			src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) int64 { return int64(sub*perSubtask) + int64(s) },
				connector.GeneratorOptions{RecordsPerSubtask: perSubtask, RatePerSubtask: 20_000})).Name("source")
			m := runnel.Map(src, func(v int64) (int64, error) { return v, nil }).Name("map")
			m.Rebalance().SinkTo(sink).Name("sink")
			res, err := env.Execute(context.Background(), "two-phase")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v, %+v", err, res)
			}
			if failures := len(tc.inject); (failures > 0 || tc.failFlush || tc.failCommit) && len(res.Failovers) == 0 {
				t.Fatalf("no failover happened: %+v", res)
			}
			if err := store.check(want); err != nil {
				t.Fatalf("%v (checkpoints %+v, failovers %d)", err, res.Checkpoints, len(res.Failovers))
			}
			if tc.failCommit {
				// The restarted sources restored a checkpoint taken after their end: no replay.
				for _, st := range res.Vertex("source").Subtasks {
					if st.Attempt == 0 || st.RecordsOut != 0 {
						t.Errorf("source[%d]: attempt %d emitted %d records; want a restart that emits none", st.Index, st.Attempt, st.RecordsOut)
					}
				}
			}
		})
	}
}

// TestWordCountCommitsEachCountOnce is the word count end to end with a committing sink: lines (a bounded,
// rate-limited source, so that checkpoints complete while it runs) -> tokenize -> keyBy(word) -> running
// count -> two-phase-commit sink, with failures near the end (on one of the sink's last records, then in
// its end of input). Every running count (word, k) for k = 1..n(word) must be committed exactly once: the
// duplicated tail seen when a failure near the end restarted finished subtasks from a checkpoint older
// than their end must not happen, nor may the tail be missing.
func TestWordCountCommitsEachCountOnce(t *testing.T) {
	type count = codec.Tuple2[string, int64]
	const lines, p = 4000, 2
	words := strings.Fields("the quick brown fox jumps over the lazy dog and the cat naps by the old mill stream")
	line := func(i uint64) string {
		var b strings.Builder
		for j := range 3 + i%5 {
			b.WriteString(words[(i*7+j*3)%uint64(len(words))])
			b.WriteByte(' ')
		}
		return b.String()
	}
	totals := map[string]int64{}
	for i := range uint64(lines) {
		for _, w := range strings.Fields(line(i)) {
			totals[w]++
		}
	}
	var want []count
	for w, n := range totals {
		for k := int64(1); k <= n; k++ {
			want = append(want, count{F0: w, F1: k})
		}
	}
	pairCodec := codec.Pair(codec.String(), codec.Int64())
	for _, failover := range []string{"region", "full"} {
		t.Run(failover, func(t *testing.T) {
			store := newTxnStore[count]()
			flush := new(atomic.Bool)
			flush.Store(true)
			sink := &twoPhaseSink[count]{store: store, codec: pairCodec, failFlush: flush}
			env := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithTaskManagers(2), runnel.WithLogger(quiet),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Millisecond}),
				runnel.WithFailover(failover), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"),
				// The sink (parallelism 1) gets every count: fail on one of the last ones, then once more at
				// its end of input.
				runnel.WithFailureInjection(fmt.Sprintf("sink[0]@%d", len(want)-20)))
			text := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) string { return line(s*p + uint64(sub)) },
				connector.GeneratorOptions{TotalRecords: lines, RatePerSubtask: 20_000})).Name("source")
			toks := runnel.FlatMap(text, func(line string, out runnel.Collector[count]) error {
				for _, w := range strings.Fields(line) {
					out.Collect(count{F0: w, F1: 1})
				}
				return nil
			}).Name("tokenize").WithCodec(pairCodec)
			counts := runnel.Reduce(runnel.KeyBy(toks, func(c count) string { return c.F0 }), func(acc, c count) (count, error) {
				acc.F1 += c.F1
				return acc, nil
			}).Name("count").WithCodec(pairCodec)
			counts.SinkTo(sink).Name("sink").SetParallelism(1)
			res, err := env.Execute(context.Background(), "wordcount")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v, %+v", err, res)
			}
			if len(res.Failovers) < 2 || res.Failovers[0].CheckpointRestored == nil {
				t.Fatalf("want two failovers, the first from a checkpoint: %+v", res.Failovers)
			}
			if err := store.check(want); err != nil {
				t.Fatalf("%v (checkpoints %+v, failovers %d)", err, res.Checkpoints, len(res.Failovers))
			}
		})
	}
}

// TestFinalCheckpointDoesNotWaitForTheInterval runs a short bounded job with an interval far longer than the
// job: the final checkpoint is triggered as soon as every input ended, so the job ends at once, with every
// record committed.
func TestFinalCheckpointDoesNotWaitForTheInterval(t *testing.T) {
	const n = 2000
	store := newTxnStore[int64]()
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Hour}))
	runnel.FromSource(env, connector.Generator(func(sub int, s uint64) int64 { return int64(sub*n) + int64(s) },
		connector.GeneratorOptions{RecordsPerSubtask: n})).Name("source").
		Rebalance().SinkTo(&twoPhaseSink[int64]{store: store, codec: codec.Int64()}).Name("sink")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	res, err := env.Execute(ctx, "final")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("after %s: %v, %+v", time.Since(start), err, res)
	}
	if res.Checkpoints == nil || res.Checkpoints.Completed != 1 {
		t.Fatalf("checkpoints %+v, want the final one only", res.Checkpoints)
	}
	var want []int64
	for i := range 2 * n {
		want = append(want, int64(i))
	}
	if err := store.check(want); err != nil {
		t.Fatal(err)
	}
}

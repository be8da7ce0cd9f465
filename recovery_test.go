package runnel_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

type keyed = codec.Tuple2[int64, int64]

var keyedCodec = codec.Pair(codec.Int64(), codec.Int64())

// latest keeps the last value the sink saw per key: the final result of a running aggregate, whatever
// was replayed before it.
func latest(recs []keyed) map[int64]int64 {
	m := map[int64]int64{}
	for _, r := range recs {
		m[r.F0] = r.F1
	}
	return m
}

// sumJob builds generator -> map -> keyBy -> sum -> sink with a bounded, rate-limited generator, so that
// checkpoints complete while it runs.
func sumJob(env *runnel.Environment, perSubtask uint64, keys int64) *connector.Collect[keyed] {
	src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed {
		return keyed{F0: int64(s) % keys, F1: 1}
	}, connector.GeneratorOptions{RecordsPerSubtask: perSubtask, RatePerSubtask: 20000})).Name("source")
	m := runnel.Map(src, func(v keyed) (keyed, error) { return v, nil }).Name("map").WithCodec(keyedCodec)
	sums := runnel.Reduce(runnel.KeyBy(m, func(v keyed) int64 { return v.F0 }), func(a, b keyed) (keyed, error) {
		a.F1 += b.F1
		return a, nil
	}).Name("sum").WithCodec(keyedCodec)
	sink := connector.NewCollect[keyed]()
	sums.SinkTo(sink).Name("sink")
	return sink
}

func TestExactlyOnceUnderFailures(t *testing.T) {
	const perSubtask, keys, p = 6000, 13, 2
	for _, tp := range []struct {
		name string
		opts []runnel.Option
	}{
		{"local", nil},
		{"tcp", []runnel.Option{runnel.WithTaskManagers(2), runnel.WithChaining(false)}},
	} {
		for _, failover := range []string{"full", "region", "region+pebble"} {
			t.Run(tp.name+"/"+failover, func(t *testing.T) {
				backend := "memory"
				if strings.HasSuffix(failover, "+pebble") {
					failover, backend = strings.TrimSuffix(failover, "+pebble"), "pebble"
				}
				opts := append([]runnel.Option{
					runnel.WithStateBackend(backend),
					runnel.WithParallelism(p), runnel.WithLogger(quiet),
					runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 30 * time.Millisecond}),
					runnel.WithFailover(failover), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=10ms"),
					runnel.WithFailureInjection("map[0]@2000", "sum[1]@1500", "source[1]@800", "sink[0]@100ms"),
				}, tp.opts...)
				env := runnel.NewEnvironment(opts...)
				sink := sumJob(env, perSubtask, keys)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				res, err := env.Execute(ctx, "exactly-once")
				if err != nil {
					t.Fatal(err)
				}
				want := map[int64]int64{}
				for s := 0; s < p; s++ {
					for i := uint64(0); i < perSubtask; i++ {
						want[int64(i)%keys]++
					}
				}
				got := latest(sink.Records())
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("per-key results %v, want %v", got, want)
				}
				// Four failures are injected. One that strikes while an earlier failover is still cancelling its
				// subtask is part of that failover, and fires again in the next attempt: four failover events.
				if len(res.Failovers) != 4 {
					t.Fatalf("%d failovers, want 4: %+v", len(res.Failovers), res.Failovers)
				}
				for _, f := range res.Failovers {
					if f.Strategy != failover || len(f.Restarted) == 0 || !strings.Contains(f.Cause, "injected failure") {
						t.Fatalf("failover record %+v", f)
					}
				}
				if res.Checkpoints == nil || res.Checkpoints.Completed == 0 {
					t.Fatalf("no completed checkpoints: %+v", res.Checkpoints)
				}
				attempts := 0
				for _, v := range res.Vertices {
					for _, s := range v.Subtasks {
						attempts += s.Attempt
					}
				}
				if attempts == 0 {
					t.Fatal("no subtask shows a restart in its attempt number")
				}
			})
		}
	}
}

// TestRegionFailoverRestartsOnlyItsRegion runs two disconnected pipelines; a failure in one restarts only
// that one, which the attempt numbers show.
func TestRegionFailoverRestartsOnlyItsRegion(t *testing.T) {
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 30 * time.Millisecond}),
		runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"),
		runnel.WithFailureInjection("a-map[1]@1000"))
	var sinks []*connector.Collect[keyed]
	for _, name := range []string{"a", "b"} {
		src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed { return keyed{F0: int64(s % 5), F1: 1} },
			connector.GeneratorOptions{RecordsPerSubtask: 3000, RatePerSubtask: 20000})).Name(name + "-source")
		m := runnel.Map(src, func(v keyed) (keyed, error) { return v, nil }).Name(name + "-map")
		sum := runnel.Reduce(runnel.KeyBy(m.WithCodec(keyedCodec), func(v keyed) int64 { return v.F0 }),
			func(a, b keyed) (keyed, error) { a.F1 += b.F1; return a, nil }).Name(name + "-sum")
		sink := connector.NewCollect[keyed]()
		sum.SinkTo(sink).Name(name + "-sink")
		sinks = append(sinks, sink)
	}
	res, err := env.Execute(context.Background(), "regions")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Vertices {
		for _, s := range v.Subtasks {
			restarted := s.Attempt > 0
			if strings.HasPrefix(v.Name, "b-") && restarted {
				t.Errorf("%s[%d] of the other pipeline restarted (attempt %d)", v.Name, s.Index, s.Attempt)
			}
			if strings.HasPrefix(v.Name, "a-") && !restarted {
				t.Errorf("%s[%d] of the failed region did not restart", v.Name, s.Index)
			}
		}
	}
	for i, sink := range sinks {
		got := latest(sink.Records())
		for k := int64(0); k < 5; k++ {
			if got[k] != 2*600 {
				t.Fatalf("pipeline %d key %d = %d, want 1200", i, k, got[k])
			}
		}
	}
}

// TestSavepointStopAndResume stops an unbounded job with a savepoint, resumes a second job from it, and
// checks that the keyed sums continue exactly where the first run left off.
func TestSavepointStopAndResume(t *testing.T) {
	dir := t.TempDir() + "/sp"
	const keys = 7
	build := func(opts ...runnel.Option) (*runnel.Environment, *connector.Collect[keyed]) {
		env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet)}, opts...)...)
		src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed { return keyed{F0: int64(s) % keys, F1: 1} },
			connector.GeneratorOptions{RecordsPerSubtask: 4000, RatePerSubtask: 8000})).Name("source")
		sums := runnel.Reduce(runnel.KeyBy(src.WithCodec(keyedCodec), func(v keyed) int64 { return v.F0 }),
			func(a, b keyed) (keyed, error) { a.F1 += b.F1; return a, nil }).Name("sum").WithCodec(keyedCodec)
		sink := connector.NewCollect[keyed]()
		sums.SinkTo(sink).Name("sink")
		return env, sink
	}
	env, _ := build(runnel.WithSavepointOnStop(dir))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := env.Execute(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "CANCELED" || res.Savepoint != dir {
		t.Fatalf("status %s, savepoint %q", res.Status, res.Savepoint)
	}
	env2, sink := build(runnel.WithRestoreFrom(dir))
	if _, err := env2.Execute(context.Background(), "second"); err != nil {
		t.Fatal(err)
	}
	got := latest(sink.Records())
	for k := int64(0); k < keys; k++ {
		want := int64(0)
		for i := int64(0); i < 4000; i++ {
			if i%keys == k {
				want += 2
			}
		}
		if got[k] != want {
			t.Fatalf("key %d = %d after resuming, want %d (all %v)", k, got[k], want, got)
		}
	}
	// A job whose operators do not match is refused.
	env3 := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet), runnel.WithRestoreFrom(dir))
	runnel.FromSource(env3, connector.Collection([]int64{1})).Name("other").SinkTo(connector.Discard[int64]())
	if _, err := env3.Execute(context.Background(), "third"); err == nil || !strings.Contains(err.Error(), "savepoint") {
		t.Fatalf("incompatible restore: %v", err)
	}
}

func TestBadRecoveryConfig(t *testing.T) {
	cases := []struct {
		opt  runnel.Option
		want string
	}{
		{runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Second, Unaligned: true, Mode: runnel.AtLeastOnce}), "CheckpointConfig.Unaligned with Mode AtLeastOnce"},
		{runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Second, AlignedCheckpointTimeout: time.Second}), "CheckpointConfig.AlignedCheckpointTimeout"},
		{runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Second, Unaligned: true, AlignedCheckpointTimeout: -time.Second}), "CheckpointConfig.AlignedCheckpointTimeout: must not be negative"},
		{runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Second, Mode: "sometimes"}), "CheckpointConfig.Mode"},
		{runnel.WithFailover("bogus"), "WithFailover"},
		{runnel.WithRestartStrategy("fixed-delay:tries=3"), "WithRestartStrategy"},
		{runnel.WithStateBackend("rocksdb"), "WithStateBackend"},
		{runnel.WithFailureInjection("map"), "WithFailureInjection"},
		{runnel.WithFailureInjection("source[0]@chk-0"), "chk-N needs a checkpoint number N of at least 1"},
		{runnel.WithFailureInjection("source[0]@chk-x"), "chk-N needs a checkpoint number N of at least 1"},
		{runnel.WithFailureInjection("source[0]@soon"), "a checkpoint (chk-3)"},
		{runnel.WithFailureInjection("nosuch[0]@10"), `no operator is named "nosuch"`},
		{runnel.WithFailureInjection("source[5]@10"), "parallelism"},
		{runnel.WithTaskManagers(runnel.MaxTaskManagers + 1), "WithTaskManagers: between 1 and 1024 TaskManagers"},
		{runnel.WithInflightLogMemory(1000), "WithInflightLogMemory: 1000 bytes is below the 1 MiB chunk"},
		{runnel.WithInflightLogDisk(1000), "WithInflightLogDisk: 1000 bytes is below the 1 MiB chunk"},
		{runnel.WithInflightLogDisk(-2), "WithInflightLogDisk: -2 bytes is below the 1 MiB chunk"},
		{runnel.WithAllowNonRestoredState(), "AllowNonRestoredState (--allow-non-restored-state) applies to a restore"},
	}
	for _, tc := range cases {
		env := runnel.NewEnvironment(tc.opt, runnel.WithLogger(quiet))
		runnel.FromSource(env, connector.Collection([]int64{1})).Name("source").SinkTo(connector.Discard[int64]())
		_, err := env.Execute(context.Background(), "bad")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want it to contain %q", err, tc.want)
		}
	}
}

// TestBlockingRegionFailover runs a bounded job whose shuffle is blocking: every task is its own region, a
// failed consumer restarts alone and re-reads its finished producers' partitions.
func TestBlockingRegionFailover(t *testing.T) {
	for _, tp := range []struct {
		name string
		opts []runnel.Option
	}{
		{"local", nil},
		{"tcp", []runnel.Option{runnel.WithTaskManagers(2)}},
	} {
		t.Run(tp.name, func(t *testing.T) {
			const n, keys = 20000, 11
			env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet),
				runnel.WithExchangeMode("blocking"), runnel.WithRestartStrategy("fixed-delay:attempts=2,delay=0s"),
				runnel.WithFailureInjection("sum[1]@3000")}, tp.opts...)...)
			src := runnel.FromSource(env, connector.Collection(seq(n))).Name("source")
			pairs := runnel.Map(src, func(v int64) (keyed, error) { return keyed{F0: v % keys, F1: v}, nil }).Name("map").WithCodec(keyedCodec)
			sums := runnel.Reduce(runnel.KeyBy(pairs, func(p keyed) int64 { return p.F0 }),
				func(a, b keyed) (keyed, error) { a.F1 += b.F1; return a, nil }).Name("sum").WithCodec(keyedCodec)
			sink := connector.NewCollect[keyed]()
			sums.SinkTo(sink).Name("sink")
			res, err := env.Execute(context.Background(), "blocking")
			if err != nil {
				t.Fatal(err)
			}
			want := map[int64]int64{}
			for i := int64(0); i < n; i++ {
				want[i%keys] += i
			}
			if got := latest(sink.Records()); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("results %v, want %v", got, want)
			}
			if len(res.Failovers) != 1 || fmt.Sprint(res.Failovers[0].Restarted) != "[sum -> sink[1]]" {
				t.Fatalf("failovers %+v", res.Failovers)
			}
			for _, v := range res.Vertices {
				for _, s := range v.Subtasks {
					restarted := s.Attempt > 0
					if restarted != (v.Name == "sum -> sink" && s.Index == 1) {
						t.Errorf("%s[%d] attempt %d", v.Name, s.Index, s.Attempt)
					}
				}
			}
		})
	}
}

// TestResumeFromRetainedCheckpointSkipsCorruptOne cancels a job, damages its newest retained checkpoint,
// and resumes from the storage directory: the damaged checkpoint is reported and passed over, the one before
// it restored, and the results are still exact.
func TestResumeFromRetainedCheckpointSkipsCorruptOne(t *testing.T) {
	dir := t.TempDir()
	const keys, per = 5, 4000
	build := func(rate float64, opts ...runnel.Option) (*runnel.Environment, *connector.Collect[keyed]) {
		env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet)}, opts...)...)
		src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed { return keyed{F0: int64(s) % keys, F1: 1} },
			connector.GeneratorOptions{RecordsPerSubtask: per, RatePerSubtask: rate})).Name("source")
		sums := runnel.Reduce(runnel.KeyBy(src.WithCodec(keyedCodec), func(v keyed) int64 { return v.F0 }),
			func(a, b keyed) (keyed, error) { a.F1 += b.F1; return a, nil }).Name("sum").WithCodec(keyedCodec)
		sink := connector.NewCollect[keyed]()
		sums.SinkTo(sink).Name("sink")
		return env, sink
	}
	env, _ := build(4000, runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond, Retained: 3, Storage: dir}))
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	res, err := env.Execute(ctx, "first")
	if err != nil || res.Status != "CANCELED" {
		t.Fatalf("first run: %v %v", res, err)
	}
	if res.Checkpoints.Completed < 2 {
		t.Fatalf("only %d checkpoints completed", res.Checkpoints.Completed)
	}
	newest := fmt.Sprintf("%s/chk-%d", dir, res.Checkpoints.LastCompletedID)
	entries, err := os.ReadDir(newest)
	if err != nil {
		t.Fatal(err)
	}
	damaged := false
	for _, e := range entries {
		if e.Name() != "_metadata" && !e.IsDir() {
			p := newest + "/" + e.Name()
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0xff
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			damaged = true
			break
		}
	}
	if !damaged {
		t.Fatalf("no state blob in %s", newest)
	}
	var logs lockedBuffer
	env2, sink := build(0, runnel.WithRestoreFrom(dir), runnel.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	res2, err := env2.Execute(context.Background(), "second")
	if err != nil {
		t.Fatal(err)
	}
	if r := res2.RestoredFrom; r == nil || r.CheckpointID >= res.Checkpoints.LastCompletedID || len(r.Skipped) == 0 ||
		!strings.Contains(strings.Join(r.Skipped, " "), fmt.Sprintf("chk-%d", res.Checkpoints.LastCompletedID)) {
		t.Fatalf("restored from %+v, newest was %d", res2.RestoredFrom, res.Checkpoints.LastCompletedID)
	}
	// The fallback is logged at WARN, naming the damaged checkpoint, its problem and the one restored.
	warned := false
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, fmt.Sprintf("skipped=chk-%d ", res.Checkpoints.LastCompletedID)) &&
			strings.Contains(line, "checksum mismatch") && strings.Contains(line, fmt.Sprintf("restoring=chk-%d", res2.RestoredFrom.CheckpointID)) {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no WARN about chk-%d:\n%s", res.Checkpoints.LastCompletedID, logs.String())
	}
	got := latest(sink.Records())
	for k := int64(0); k < keys; k++ {
		if got[k] != 2*per/keys {
			t.Fatalf("key %d = %d, want %d (all %v)", k, got[k], 2*per/keys, got)
		}
	}
}

// countingSink is a sink with checkpointed state that is not keyed: the number of records it wrote.
type countingSink struct{}

func (countingSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[keyed], error) {
	return &countingWriter{}, nil
}

type countingWriter struct{ n uint64 }

func (w *countingWriter) Write(keyed) error { w.n++; return nil }
func (w *countingWriter) Flush() error      { return nil }
func (w *countingWriter) Close() error      { return nil }
func (w *countingWriter) SnapshotState(int64) ([]byte, error) {
	return binary.AppendUvarint(nil, w.n), nil
}
func (w *countingWriter) RestoreState(b []byte) error {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return errors.New("bad count")
	}
	w.n = n
	return nil
}

// TestRescaleFromSavepoint stops a keyed sum at parallelism 2 with a savepoint and resumes it at 3 and at
// 1: each new subtask takes the keyed state of the old subtasks whose key groups overlap its own, and the
// sums come out exact. A source cannot change its parallelism (its positions cannot be split), nor can an
// operator with state that is not keyed; both are refused with the operator named.
func TestRescaleFromSavepoint(t *testing.T) {
	dir := t.TempDir() + "/sp"
	const keys, perSubtask = 50, 4000
	build := func(p int, sink runnel.Sink[keyed], opts ...runnel.Option) *runnel.Environment {
		env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(p), runnel.WithLogger(quiet)}, opts...)...)
		src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed { return keyed{F0: int64(s*2+uint64(sub)) % keys, F1: 1} },
			connector.GeneratorOptions{RecordsPerSubtask: perSubtask, RatePerSubtask: 8000})).Name("source").SetParallelism(2)
		sums := runnel.Reduce(runnel.KeyBy(src.WithCodec(keyedCodec), func(v keyed) int64 { return v.F0 }),
			func(a, b keyed) (keyed, error) { a.F1 += b.F1; return a, nil }).Name("sum").WithCodec(keyedCodec)
		sums.SinkTo(sink).Name("sink")
		return env
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := build(2, connector.Discard[keyed](), runnel.WithSavepointOnStop(dir)).Execute(ctx, "first")
	if err != nil || res.Status != "CANCELED" || res.Savepoint != dir {
		t.Fatalf("first run: %v, %+v", err, res)
	}
	want := map[int64]int64{}
	for sub := uint64(0); sub < 2; sub++ {
		for s := uint64(0); s < perSubtask; s++ {
			want[int64(s*2+sub)%keys]++
		}
	}
	for _, p := range []int{3, 1} {
		t.Run(fmt.Sprintf("to %d", p), func(t *testing.T) {
			sink := connector.NewCollect[keyed]()
			res, err := build(p, sink, runnel.WithRestoreFrom(dir)).Execute(context.Background(), "rescaled")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("rescaled run: %v, %+v", err, res)
			}
			if got := latest(sink.Records()); !maps.Equal(got, want) {
				t.Fatalf("sums after rescaling to %d: %v, want %v", p, got, want)
			}
		})
	}
	t.Run("source", func(t *testing.T) {
		env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet), runnel.WithRestoreFrom(dir))
		src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed { return keyed{} },
			connector.GeneratorOptions{RecordsPerSubtask: 1})).Name("source").SetParallelism(3)
		runnel.Reduce(runnel.KeyBy(src.WithCodec(keyedCodec), func(v keyed) int64 { return v.F0 }),
			func(a, b keyed) (keyed, error) { return a, nil }).Name("sum").WithCodec(keyedCodec).SinkTo(connector.Discard[keyed]()).Name("sink")
		_, err := env.Execute(context.Background(), "rescaled source")
		if err == nil || !strings.Contains(err.Error(), `"source" parallelism 2 in checkpoint, 3 in job (a source`) {
			t.Fatalf("rescaled source: %v", err)
		}
	})
	t.Run("state that is not keyed", func(t *testing.T) {
		dir := t.TempDir() + "/sp"
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if res, err := build(2, countingSink{}, runnel.WithSavepointOnStop(dir),
			runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Hour})).Execute(ctx, "first"); err != nil || res.Savepoint != dir {
			t.Fatalf("first run: %v, %+v", err, res)
		}
		res, err := build(3, countingSink{}, runnel.WithRestoreFrom(dir)).Execute(context.Background(), "rescaled")
		if err == nil {
			err = errors.New(res.Error)
		}
		if !strings.Contains(err.Error(), `operator "sink" keeps state that is not keyed`) {
			t.Fatalf("rescaled sink with state: %v (%+v)", err, res)
		}
	})
}

// listeningSink records, per subtask, the checkpoints its writer snapshotted and those it heard complete.
type listeningSink struct {
	mu        sync.Mutex
	snapshots map[int][]int64
	completed map[int][]int64
}

func (s *listeningSink) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[int64], error) {
	return &listeningWriter{s: s, sub: ctx.SubtaskIndex()}, nil
}

type listeningWriter struct {
	s   *listeningSink
	sub int
}

func (w *listeningWriter) Write(int64) error { return nil }
func (w *listeningWriter) Flush() error      { return nil }
func (w *listeningWriter) Close() error      { return nil }
func (w *listeningWriter) SnapshotState(id int64) ([]byte, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.snapshots[w.sub] = append(w.s.snapshots[w.sub], id)
	return nil, nil
}
func (w *listeningWriter) RestoreState([]byte) error { return nil }
func (w *listeningWriter) NotifyCheckpointComplete(id int64) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.completed[w.sub] = append(w.s.completed[w.sub], id)
	return nil
}

// TestCheckpointCompleteNotifications pins that a sink writer implementing runnel.CheckpointListener hears
// of completed checkpoints, in order, each after it snapshotted it, and never of one that did not complete.
func TestCheckpointCompleteNotifications(t *testing.T) {
	for _, tms := range []int{1, 2} {
		t.Run(fmt.Sprint("taskmanagers ", tms), func(t *testing.T) {
			sink := &listeningSink{snapshots: map[int][]int64{}, completed: map[int][]int64{}}
			env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithTaskManagers(tms), runnel.WithLogger(quiet),
				runnel.WithChaining(false), runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 15 * time.Millisecond}))
			src := runnel.FromSource(env, connector.Generator(func(_ int, s uint64) int64 { return int64(s) },
				connector.GeneratorOptions{RecordsPerSubtask: 3000, RatePerSubtask: 10_000}))
			src.SinkTo(sink).Name("sink")
			res, err := env.Execute(context.Background(), "notify")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v, %+v", err, res)
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			for sub := range 2 {
				got := sink.completed[sub]
				if len(got) == 0 {
					t.Fatalf("subtask %d heard of no completed checkpoint (%d completed)", sub, res.Checkpoints.Completed)
				}
				for i, id := range got {
					if i > 0 && id <= got[i-1] {
						t.Fatalf("subtask %d: notifications out of order: %v", sub, got)
					}
					if !slices.Contains(sink.snapshots[sub], id) {
						t.Fatalf("subtask %d heard checkpoint %d complete without having snapshotted it (%v)", sub, id, sink.snapshots[sub])
					}
					if id > res.Checkpoints.LastCompletedID {
						t.Fatalf("subtask %d heard checkpoint %d complete; the last completed is %d", sub, id, res.Checkpoints.LastCompletedID)
					}
				}
			}
		})
	}
}

// lockedBuffer is a strings.Builder that several goroutines (a logger's) may write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

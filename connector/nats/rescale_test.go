package nats_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/connector/nats"
)

// TestRescaleRestore sums a stream of six subjects by key at parallelism 2, stops it with a savepoint in
// the middle of its input, and resumes it from the savepoint at parallelism 3 and (on a stream that keeps
// acknowledged messages, from the same savepoint again) at 1: each subject's position goes to the subject's
// new subtask, which reads subjects from several old subtasks at once, and every message is summed exactly
// once (a subject read again from an older position would count twice, one not restored would be missed).
// The consumers of the run at parallelism 2 are deleted as the rescaled runs start (on the work queue,
// whose consumers' subjects must not overlap, they would keep the new ones out; on a stream with interest
// retention, each once the new consumers cover its subjects, or its messages would go), and those of a
// rescaled run as it finishes: none is left, and neither the work queue nor the interest stream holds a
// message at the end.
func TestRescaleRestore(t *testing.T) {
	for _, tc := range []struct {
		retention jetstream.RetentionPolicy
		restoreAt []int
	}{{jetstream.LimitsPolicy, []int{3, 1}}, {jetstream.WorkQueuePolicy, []int{3}}, {jetstream.InterestPolicy, []int{3}}} {
		t.Run(tc.retention.String(), func(t *testing.T) {
			url := startServer(t)
			js := client(t, url)
			createStream(t, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}, Retention: tc.retention})
			subjects := []string{"in.0", "in.1", "in.2", "in.3", "in.4", "in.5"}
			const n, keys = 1200, 11
			interest := tc.retention == jetstream.InterestPolicy
			if !interest {
				publish(t, js, n/2, subjects...)
			}
			dir := t.TempDir()
			sp := filepath.Join(dir, "sp")
			var seen atomic.Int64
			var buildWith func(p int, bounded bool, subjects []string, opts ...runnel.Option) (*runnel.Environment, *connector.Collect[kv])
			// build makes the job at parallelism p. Without periodic checkpoints (the interval is long) the
			// stop's savepoint is the only checkpoint of the first run, and nothing is acknowledged before
			// it: with at most maxPending messages unacknowledged, each consumer of the first run stops after
			// its first maxPending messages, in the middle of the input.
			const maxPending = 40
			build := func(p int, bounded bool, opts ...runnel.Option) (*runnel.Environment, *connector.Collect[kv]) {
				return buildWith(p, bounded, subjects, opts...)
			}
			buildWith = func(p int, bounded bool, subjects []string, opts ...runnel.Option) (*runnel.Environment, *connector.Collect[kv]) {
				pending := 0
				if !bounded {
					pending = maxPending
				}
				env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(p), runnel.WithLogger(quiet),
					runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Hour, Storage: filepath.Join(dir, fmt.Sprint("chk", p))})}, opts...)...)
				src := runnel.FromSource(env, nats.Source(nats.SourceConfig{URL: url, Stream: "IN", Subjects: subjects, Bounded: bounded, MaxAckPending: pending},
					func(m nats.Msg) (kv, error) {
						v, err := decodeValue(m)
						return kv{F0: v % keys, F1: v}, err
					})).Name("nats").WithCodec(codec.MustStruct[kv]())
				counted := runnel.Map(src, func(v kv) (kv, error) { seen.Add(1); return v, nil }).Name("seen")
				sums := runnel.Reduce(runnel.KeyBy(counted, func(v kv) int64 { return v.F0 }),
					func(a, b kv) (kv, error) { a.F1 += b.F1; return a, nil }).Name("sum").Uid("sum")
				sink := connector.NewCollect[kv]()
				sums.SinkTo(sink).Name("collect").SetParallelism(1)
				return env, sink
			}
			env, _ := build(2, false, runnel.WithSavepointOnStop(sp))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan *runnel.JobResult, 1)
			go func() { res, _ := env.Execute(ctx, "sum"); done <- res }()
			deadline := time.Now().Add(20 * time.Second)
			if interest {
				// A stream with interest retention keeps a message only for the consumers there when
				// it comes: publish once the first run's two consumers are.
				for consumerCount(t, js, "IN") < 2 {
					if time.Now().After(deadline) {
						t.Fatal("the first run's consumers not there after 20 s")
					}
					time.Sleep(time.Millisecond)
				}
				publish(t, js, n/2, subjects...)
			}
			for seen.Load() < 2*maxPending {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d messages read after 20 s", seen.Load(), 2*maxPending)
				}
				time.Sleep(time.Millisecond)
			}
			cancel()
			if res := <-done; res == nil || res.Status != "CANCELED" || res.Savepoint != sp {
				t.Fatalf("first run: %+v", res)
			}
			// The savepoint's completion acknowledges what it covers, and the consumers may deliver more
			// before the job is cancelled.
			if s := seen.Load(); s > 4*maxPending {
				t.Fatalf("the first run read %d messages, want at most %d (%d per consumer before and after the savepoint)", s, 4*maxPending, maxPending)
			}
			publish(t, js, n/2, subjects...) // the same values again: each counts twice in the sums
			want := map[int64]int64{}
			for i := range int64(n / 2) {
				want[i%keys] += 2 * i
			}
			for _, p := range tc.restoreAt {
				env, sink := build(p, true, runnel.WithRestoreFrom(sp))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := env.Execute(ctx, "sum")
				cancel()
				if err != nil || res.Status != "FINISHED" {
					t.Fatalf("run at %d: %v, %+v", p, err, res)
				}
				for _, s := range res.Vertex("nats").Subtasks {
					if s.RecordsOut == 0 {
						t.Fatalf("subtask %d of %d read nothing: %+v", s.Index, p, res.Vertex("nats").Subtasks)
					}
				}
				got := map[int64]int64{}
				for _, r := range sink.Records() {
					got[r.F0] = r.F1 // the running sums only grow: the last one a key got is its total
				}
				for k, w := range want {
					if got[k] != w {
						t.Fatalf("run at %d: sum of key %d = %d, want %d (every message once across the rescale)", p, k, got[k], w)
					}
				}
				checkNoConsumers(t, js, "IN") // the run at 2's too
			}
			// Other subject filters are refused: the savepoint has no position for a new one.
			env, _ = buildWith(2, true, append(subjects[:5:5], "in.6"), runnel.WithRestoreFrom(sp), runnel.WithRestartStrategy("none"))
			ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "sum")
			if err == nil && res.Status == "FINISHED" {
				t.Fatal("a restore with other subject filters finished")
			}
			if err == nil {
				err = errors.New(res.Error)
			}
			if !strings.Contains(err.Error(), `the checkpoint read subject filter "in.5"`) && !strings.Contains(err.Error(), `subject filter "in.6" of stream "IN"`) {
				t.Fatalf("a restore with other subject filters failed with %v, want it to name the filter", err)
			}
			if tc.retention != jetstream.LimitsPolicy {
				if got := streamInfo(t, js, "IN").State.Msgs; got != 0 {
					t.Fatalf("the %s stream holds %d messages at the end, want 0", tc.retention, got)
				}
			}
		})
	}
}

// TestInterestConsumersOfOtherRuns reads a stream with interest retention whose messages are held only by
// the consumers of a run at parallelism 2 (made by hand here): the run at 1 deletes the one whose subjects
// its own consumer has, keeps the one with a subject it does not read (its messages would go with it), reads
// every message, and deletes its own consumer when it finished. Its consumer has no InactiveThreshold.
func TestInterestConsumersOfOtherRuns(t *testing.T) {
	url := startServer(t)
	js := client(t, url)
	createStream(t, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}, Retention: jetstream.InterestPolicy})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, filters := range map[string][]string{"p_0_2": {"in.0", "in.2"}, "p_1_2": {"in.1", "in.9"}} {
		if _, err := js.CreateConsumer(ctx, "IN", jetstream.ConsumerConfig{Durable: name, FilterSubjects: filters, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 400
	publish(t, js, n, "in.0", "in.1", "in.2", "in.9")
	var threshold atomic.Int64
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Millisecond}))
	src := runnel.FromSource(env, nats.Source(nats.SourceConfig{URL: url, Stream: "IN", Subjects: []string{"in.0", "in.1", "in.2"},
		ConsumerPrefix: "p", Bounded: true}, decodeValue)).Name("nats")
	runnel.Map(src, func(v int64) (int64, error) {
		if threshold.Load() == 0 {
			c, err := js.Consumer(context.Background(), "IN", "p_0_1")
			if err != nil {
				return 0, err
			}
			threshold.Store(int64(c.CachedInfo().Config.InactiveThreshold) + 1)
		}
		return v, nil
	}).Name("look").SinkTo(connector.Discard[int64]()).Name("discard")
	res, err := env.Execute(ctx, "interest")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if got := res.Vertex("nats").Subtasks[0].RecordsOut; got != 3*n/4 {
		t.Fatalf("read %d messages, want %d", got, 3*n/4)
	}
	if got := time.Duration(threshold.Load() - 1); got != 0 {
		t.Fatalf("the consumer on the interest stream had InactiveThreshold %s, want none", got)
	}
	st, err := js.Stream(ctx, "IN")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range st.ConsumerNames(ctx).Name() {
		names = append(names, name)
	}
	if len(names) != 1 || names[0] != "p_1_2" {
		t.Fatalf("consumers %q left, want the one with subject in.9 the run does not read (p_1_2)", names)
	}
}

// TestWorkQueueFreshRunWithOtherFilters cancels a job on a work-queue stream, whose consumers stay, and
// starts the job afresh (no restore) at the same parallelism with other subject filters: swapped, each
// subtask's consumer now wants the subjects its sibling's consumer of the first run holds; fewer, subtask
// 0 wants the subjects of subtask 1's old consumer, and subtask 1 reads nothing. A work queue lets no two
// consumers overlap, and the fresh run must not be kept out: it reads every message of its subjects that
// the first run left unacknowledged (all: no checkpoint completed) once, and leaves no consumer behind.
func TestWorkQueueFreshRunWithOtherFilters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		again []string
	}{{"swapped", []string{"in.1", "in.0"}}, {"fewer", []string{"in.1"}}} {
		t.Run(tc.name, func(t *testing.T) {
			url := startServer(t)
			js := client(t, url)
			createStream(t, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}, Retention: jetstream.WorkQueuePolicy})
			const n = 400
			publish(t, js, n, "in.0", "in.1")
			var seen atomic.Int64
			build := func(subjects []string, bounded bool) (*runnel.Environment, *connector.Collect[int64]) {
				env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet), runnel.WithRestartStrategy("none"),
					runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Hour}))
				src := runnel.FromSource(env, nats.Source(nats.SourceConfig{URL: url, Stream: "IN", Subjects: subjects, Bounded: bounded}, decodeValue)).
					Name("nats")
				sink := connector.NewCollect[int64]()
				runnel.Map(src, func(v int64) (int64, error) { seen.Add(1); return v, nil }).Name("seen").SinkTo(sink).Name("collect")
				return env, sink
			}
			env, _ := build([]string{"in.0", "in.1"}, false)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan *runnel.JobResult, 1)
			go func() { res, _ := env.Execute(ctx, "wq"); done <- res }()
			deadline := time.Now().Add(20 * time.Second)
			for seen.Load() < 10 {
				if time.Now().After(deadline) {
					t.Fatalf("%d messages read after 20 s", seen.Load())
				}
				time.Sleep(time.Millisecond)
			}
			cancel()
			if res := <-done; res == nil || res.Status != "CANCELED" {
				t.Fatalf("first run: %+v", res)
			}
			env, sink := build(tc.again, true)
			ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel2()
			res, err := env.Execute(ctx2, "wq")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("the fresh run with subjects %q: %v, %+v", tc.again, err, res)
			}
			var want []int64
			for i := range int64(n) {
				if slices.Contains(tc.again, fmt.Sprint("in.", i%2)) {
					want = append(want, i)
				}
			}
			got := sink.Records()
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("the fresh run read %d messages, want the %d of subjects %q once", len(got), len(want), tc.again)
			}
			if left := streamInfo(t, js, "IN").State.Msgs; left != uint64(n-len(want)) {
				t.Fatalf("the work queue holds %d messages at the end, want the %d of the other subjects", left, n-len(want))
			}
			checkNoConsumers(t, js, "IN")
		})
	}
}

// consumerCount returns the number of consumers of stream.
func consumerCount(t *testing.T, js jetstream.JetStream, stream string) int {
	t.Helper()
	return len(consumerNames(t, js, stream))
}

package nats_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/connector/nats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startServer runs a nats-server with JetStream on a random loopback port, stopped at the test's end.
func startServer(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server not ready after 10 s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

// client connects to url, closed at the test's end.
func client(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func createStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// publish stores n messages: message i has the 8-byte value i and the subject subjects[i%len(subjects)].
func publish(t *testing.T, js jetstream.JetStream, n int, subjects ...string) {
	t.Helper()
	for i := range n {
		// A loaded machine acknowledges slowly: wait for room among the pending publishes.
		if _, err := js.PublishAsync(subjects[i%len(subjects)], binary.BigEndian.AppendUint64(nil, uint64(i)), jetstream.WithStallWait(20*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(20 * time.Second):
		t.Fatal("publishes not acknowledged after 20 s")
	}
}

func streamInfo(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

type kv = codec.Tuple2[int64, int64]

func decodeValue(m nats.Msg) (int64, error) {
	if len(m.Data) != 8 {
		return 0, fmt.Errorf("%d bytes", len(m.Data))
	}
	return int64(binary.BigEndian.Uint64(m.Data)), nil
}

func decodeKV(m nats.Msg) (kv, error) {
	if len(m.Data) != 16 {
		return kv{}, fmt.Errorf("%d bytes", len(m.Data))
	}
	return kv{F0: int64(binary.BigEndian.Uint64(m.Data)), F1: int64(binary.BigEndian.Uint64(m.Data[8:]))}, nil
}

func encodeKV(v kv) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(v.F0)), uint64(v.F1))
}

// readAll reads a whole stream with the source (bounded, one subtask).
func readAll[T any](t *testing.T, url, stream string, decode func(nats.Msg) (T, error)) []T {
	t.Helper()
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet))
	back := connector.NewCollect[T]()
	runnel.FromSource(env, nats.Source(nats.SourceConfig{URL: url, Stream: stream, Bounded: true}, decode)).SinkTo(back)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if res, err := env.Execute(ctx, "read back "+stream); err != nil || res.Status != "FINISHED" {
		t.Fatalf("read back: %v, %+v", err, res)
	}
	return back.Records()
}

// TestExactlyOnceThroughFailures reads a stream of four subjects with two source subtasks into a keyed
// count that fails twice, and writes each key's running count to another stream with ids from the
// records (key and count, which a replay repeats in whatever order the keys' records come): every message
// is counted once, the output stream holds each count exactly once, and at the end no source consumer is
// left (nor one of the bounded read back, without checkpoints).
func TestExactlyOnceThroughFailures(t *testing.T) {
	url := startServer(t)
	js := client(t, url)
	createStream(t, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.>"}})
	createStream(t, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}, Duplicates: time.Minute})
	const n, keys = 6000, 13
	subjects := []string{"in.0", "in.1", "in.2", "in.3"}
	publish(t, js, n, subjects...)

	const interval = 20 * time.Millisecond
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: interval}),
		runnel.WithFailureInjection("count[0]@1000", "count[0]@2000"), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"))
	src := runnel.FromSource(env, nats.Source(nats.SourceConfig{URL: url, Stream: "IN", Subjects: subjects, Bounded: true},
		func(m nats.Msg) (kv, error) {
			v, err := decodeValue(m)
			return kv{F0: v % keys, F1: 1}, err
		})).Name("nats").WithCodec(codec.MustStruct[kv]())
	counts := runnel.Reduce(runnel.KeyBy(src, func(v kv) int64 { return v.F0 }),
		func(a, b kv) (kv, error) { a.F1 += b.F1; return a, nil }).Name("count")
	counts.SinkTo(nats.Sink(nats.SinkConfig{URL: url, Stream: "OUT", Subject: "out"},
		func(v kv) (nats.Msg, error) {
			return nats.Msg{Data: encodeKV(v), ID: fmt.Sprintf("%d:%d", v.F0, v.F1)}, nil
		})).Name("out")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "count")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if len(res.Failovers) != 2 {
		t.Fatalf("failovers %+v, want 2", res.Failovers)
	}
	want := map[int64]int64{}
	for i := range int64(n) {
		want[i%keys]++
	}
	seen := map[kv]int{}
	last := map[int64]int64{}
	for _, r := range readAll(t, url, "OUT", decodeKV) {
		seen[r]++
		last[r.F0] = max(last[r.F0], r.F1)
	}
	for r, c := range seen {
		if c != 1 || r.F1 < 1 || r.F1 > want[r.F0] {
			t.Fatalf("count %d of key %d in the output %d times (the key has %d messages)", r.F1, r.F0, c, want[r.F0])
		}
	}
	for k, w := range want {
		if last[k] != w {
			t.Fatalf("key %d counted %d, want %d", k, last[k], w)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct counts in the output, want %d", len(seen), n)
	}
	if got := streamInfo(t, js, "OUT").State.Msgs; got != n {
		t.Fatalf("the output stream holds %d messages, want %d", got, n)
	}
	checkNoConsumers(t, js, "IN")
	checkNoConsumers(t, js, "OUT") // read back without checkpoints
}

// checkNoConsumers requires stream to have no consumers: a bounded job that finished deletes its own.
func checkNoConsumers(t *testing.T, js jetstream.JetStream, stream string) {
	t.Helper()
	if names := consumerNames(t, js, stream); len(names) > 0 {
		t.Fatalf("stream %s still has consumers %q after the job finished", stream, names)
	}
}

// consumerNames returns the names of the consumers of stream.
func consumerNames(t *testing.T, js jetstream.JetStream, stream string) []string {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	lister := st.ConsumerNames(context.Background())
	for name := range lister.Name() {
		names = append(names, name)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestPositionalIDsThroughFailures runs a chain that replays the same records in the same order (one
// subtask, one channel) through two failures: the sink's ids come from its position, and the output
// stream holds each record once. It reads a stream that keeps acknowledged messages and a work queue,
// which deletes them: the work queue is empty at the end (the final checkpoint's acknowledgements came
// before the job finished), and no consumer is left.
func TestPositionalIDsThroughFailures(t *testing.T) {
	for _, retention := range []jetstream.RetentionPolicy{jetstream.LimitsPolicy, jetstream.WorkQueuePolicy} {
		t.Run(retention.String(), func(t *testing.T) {
			url := startServer(t)
			js := client(t, url)
			createStream(t, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}, Retention: retention})
			createStream(t, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.*"}})
			const n = 5000
			publish(t, js, n, "in")
			env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 15 * time.Millisecond}),
				runnel.WithFailureInjection("double[0]@1200", "double[0]@3100"), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"))
			src := runnel.FromSource(env, nats.Source(nats.SourceConfig{URL: url, Stream: "IN", Bounded: true}, decodeValue)).Name("nats")
			doubled := runnel.Map(src, func(v int64) (int64, error) { return 2 * v, nil }).Name("double")
			doubled.SinkTo(nats.Sink(nats.SinkConfig{URL: url, Stream: "OUT"},
				func(v int64) (nats.Msg, error) {
					return nats.Msg{Subject: fmt.Sprintf("out.%d", v%3), Data: binary.BigEndian.AppendUint64(nil, uint64(v))}, nil
				})).Name("out")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "double")
			if err != nil || res.Status != "FINISHED" || len(res.Failovers) != 2 {
				t.Fatalf("%v, %+v", err, res)
			}
			seen := make([]int, n)
			for _, v := range readAll(t, url, "OUT", decodeValue) {
				if v%2 != 0 || v < 0 || v/2 >= n {
					t.Fatalf("value %d in the output", v)
				}
				seen[v/2]++
			}
			for i, c := range seen {
				if c != 1 {
					t.Fatalf("value %d written %d times", 2*i, c)
				}
			}
			t.Logf("duplicates the stream dropped after the last restore: %d", res.Vertex("out").Subtasks[0].Metrics["out/duplicates"])
			want := uint64(n)
			if retention == jetstream.WorkQueuePolicy {
				want = 0
			}
			if got := streamInfo(t, js, "IN").State.Msgs; got != want {
				t.Fatalf("the input stream holds %d messages at the end, want %d", got, want)
			}
			checkNoConsumers(t, js, "IN")
		})
	}
}

// TestSinkReplayIsDropped runs one job three times: the second run repeats the first one's ids, and the
// stream drops every message it writes; the third has another IDPrefix and is written.
func TestSinkReplayIsDropped(t *testing.T) {
	url := startServer(t)
	js := client(t, url)
	createStream(t, js, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out"}})
	const n = 3000
	items := make([]int64, n)
	for i := range items {
		items[i] = int64(i)
	}
	run := func(prefix string) int64 {
		env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet))
		runnel.FromSource(env, connector.Collection(items)).SinkTo(nats.Sink(nats.SinkConfig{URL: url, Stream: "OUT", Subject: "out", IDPrefix: prefix},
			func(v int64) (nats.Msg, error) {
				return nats.Msg{Data: binary.BigEndian.AppendUint64(nil, uint64(v))}, nil
			})).Name("out")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := env.Execute(ctx, "write")
		if err != nil || res.Status != "FINISHED" {
			t.Fatalf("%v, %+v", err, res)
		}
		var dups int64
		for _, s := range res.Vertex("out").Subtasks {
			dups += s.Metrics["out/duplicates"]
		}
		return dups
	}
	for i, tc := range []struct {
		prefix     string
		dups, msgs int64
	}{{"a", 0, n}, {"a", n, n}, {"b", 0, 2 * n}} {
		dups := run(tc.prefix)
		msgs := int64(streamInfo(t, js, "OUT").State.Msgs)
		if dups != tc.dups || msgs != tc.msgs {
			t.Fatalf("run %d (prefix %q): %d duplicates, %d messages in the stream; want %d and %d", i+1, tc.prefix, dups, msgs, tc.dups, tc.msgs)
		}
	}
}

// TestSourceDropsRedeliveries acknowledges far later than AckWait: the server delivers messages again
// while the source still reads (it holds at most a few thousand messages at a time, so it pulls all along),
// and the source drops them by sequence; each message is counted once. On a work queue, whose messages
// go as they are acknowledged, the stream is empty at the end: the redelivered copies were acknowledged
// as well.
func TestSourceDropsRedeliveries(t *testing.T) {
	for _, retention := range []jetstream.RetentionPolicy{jetstream.LimitsPolicy, jetstream.WorkQueuePolicy} {
		t.Run(retention.String(), func(t *testing.T) {
			url := startServer(t)
			js := client(t, url)
			createStream(t, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}, Retention: retention})
			const n = 8000
			publish(t, js, n, "in")
			env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 300 * time.Millisecond}))
			src := runnel.FromSource(env, nats.Source(nats.SourceConfig{URL: url, Stream: "IN", Bounded: true, AckWait: 30 * time.Millisecond}, decodeValue)).Name("nats")
			slow := runnel.Map(src, func(v int64) (int64, error) {
				if v%80 == 0 {
					time.Sleep(time.Millisecond) // about 100 ms in all: several AckWaits
				}
				return v, nil
			}).Name("slow")
			sink := connector.NewCollect[int64]()
			slow.SinkTo(sink)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "redeliveries")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v, %+v", err, res)
			}
			seen := make([]int, n)
			for _, v := range sink.Records() {
				seen[v]++
			}
			for i, c := range seen {
				if c != 1 {
					t.Fatalf("message %d emitted %d times", i, c)
				}
			}
			if d := res.Vertex("nats").Subtasks[0].Metrics["nats/redeliveries_dropped"]; d == 0 {
				t.Fatal("no redelivery came: the test did not test dropping them")
			}
			if got := streamInfo(t, js, "IN").State.Msgs; retention == jetstream.WorkQueuePolicy && got != 0 {
				t.Fatalf("the work queue holds %d messages at the end, want 0", got)
			}
			checkNoConsumers(t, js, "IN")
		})
	}
}

// TestBadInput pins the errors of a source or sink that cannot work: each names the server and stream. A
// sink's are refused at submission (runnel.JobChecker), before anything runs.
func TestBadInput(t *testing.T) {
	url := startServer(t)
	js := client(t, url)
	createStream(t, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in"}})
	createStream(t, js, jetstream.StreamConfig{Name: "SHORT", Subjects: []string{"short"}, Duplicates: 200 * time.Millisecond})
	const unreachable = "nats://127.0.0.1:1"
	source := func(cfg nats.SourceConfig) func(*runnel.Environment) {
		return func(env *runnel.Environment) {
			runnel.FromSource(env, nats.Source(cfg, decodeValue)).SinkTo(connector.Discard[int64]())
		}
	}
	sink := func(cfg nats.SinkConfig) func(*runnel.Environment) {
		return func(env *runnel.Environment) {
			runnel.FromSource(env, connector.Collection([]int64{1})).SinkTo(nats.Sink(cfg,
				func(v int64) (nats.Msg, error) {
					return nats.Msg{Data: binary.BigEndian.AppendUint64(nil, uint64(v))}, nil
				}))
		}
	}
	for _, tc := range []struct {
		name  string
		build func(*runnel.Environment)
		want  []string
	}{
		{"missing stream", source(nats.SourceConfig{URL: url, Stream: "NOPE", Bounded: true}), []string{`stream "NOPE" does not exist at ` + url}},
		{"unreachable server", source(nats.SourceConfig{URL: unreachable, Stream: "IN"}), []string{"connect to " + unreachable, `stream "IN"`}},
		{"overlapping subjects", source(nats.SourceConfig{URL: url, Stream: "IN", Subjects: []string{"in.*", "in.a"}}), []string{`"in.*" and Subjects[1] "in.a" overlap`}},
		{"sink missing stream", sink(nats.SinkConfig{URL: url, Stream: "NOPE", Subject: "in"}), []string{`stream "NOPE" does not exist at ` + url}},
		{"sink unreachable server", sink(nats.SinkConfig{URL: unreachable, Stream: "IN", Subject: "in"}), []string{"connect to " + unreachable, `stream "IN"`}},
		{"sink subject outside the stream", sink(nats.SinkConfig{URL: url, Stream: "IN", Subject: "elsewhere"}), []string{`subject "elsewhere" is not one of the subjects ["in"]`}},
		{"sink duplicate window too short", sink(nats.SinkConfig{URL: url, Stream: "SHORT", Subject: "short"}),
			[]string{"duplicate window of stream \"SHORT\" at " + url + " is 200ms", "checkpoint interval 1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithRestartStrategy("none"),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: time.Second}))
			tc.build(env)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "bad")
			if strings.HasPrefix(tc.name, "sink") && (err == nil || res != nil) {
				t.Fatalf("a sink's mistake ran the job: %v, %+v", err, res)
			}
			if err == nil {
				if res.Status == "FINISHED" {
					t.Fatal("the job finished")
				}
				err = errors.New(res.Error)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %v, want %q in it", err, w)
				}
			}
		})
	}
}

// TestSubjectWatermarks reads a stream whose two subjects run at very different event times (from the
// payload) with one subtask, into event-time windows: each subject filter is a split with its own
// watermark, so the fast subject does not make the slow one's records late. The message's stored time
// reaches the timestamp assigner as recordTs.
func TestSubjectWatermarks(t *testing.T) {
	url := startServer(t)
	js := client(t, url)
	createStream(t, js, jetstream.StreamConfig{Name: "TIMES", Subjects: []string{"t.*"}})
	const n = 1000
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	before := time.Now()
	for i := range n {
		for s, step := range []time.Duration{time.Second, time.Millisecond} { // t.0 fast, t.1 slow
			ts := base.Add(time.Duration(i) * step).UnixMilli()
			if _, err := js.PublishAsync(fmt.Sprintf("t.%d", s), encodeKV(kv{F0: int64(s), F1: ts})); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(20 * time.Second):
		t.Fatal("publishes not acknowledged after 20 s")
	}
	after := time.Now()
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet), runnel.WithWatermarkInterval(time.Millisecond))
	var badRecordTs atomic.Int64
	src := runnel.FromSource(env, nats.Source(nats.SourceConfig{URL: url, Stream: "TIMES", Subjects: []string{"t.0", "t.1"}, Bounded: true}, decodeKV)).
		Name("nats").WithTimestamps(runnel.MonotonousTimestamps[kv]().WithTimestampAssigner(func(v kv, recordTs int64) int64 {
		if recordTs < before.Add(-time.Second).UnixMilli() || recordTs > after.Add(time.Second).UnixMilli() {
			badRecordTs.Add(1)
		}
		return v.F1
	}))
	counts := runnel.WindowAggregate(runnel.Window(runnel.KeyBy(src, func(r kv) int64 { return r.F0 }), runnel.TumblingEventTimeWindows(time.Second)),
		runnel.AggregateFunction[kv, kv, kv](countPerKey{})).Name("window")
	sink := connector.NewCollect[kv]()
	counts.SinkTo(sink)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "subject watermarks")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if dropped := res.Vertex("window").Subtasks[0].Metrics["window/late_records_dropped"]; dropped != 0 {
		t.Fatalf("%d records dropped as late: one subject's watermark ran ahead of the other's records", dropped)
	}
	if b := badRecordTs.Load(); b != 0 {
		t.Fatalf("%d records had a recordTs outside the time they were published", b)
	}
	total := map[int64]int64{}
	for _, c := range sink.Records() {
		total[c.F0] += c.F1
	}
	if total[0] != n || total[1] != n {
		t.Fatalf("counted %v, want %d per subject", total, n)
	}
}

// countPerKey counts a window's records: F0 the key, F1 the count.
type countPerKey struct{}

func (countPerKey) CreateAccumulator() kv { return kv{} }
func (countPerKey) Add(v kv, acc kv) kv   { return kv{F0: v.F0, F1: acc.F1 + 1} }
func (countPerKey) Result(acc kv) kv      { return acc }
func (countPerKey) Merge(a, b kv) kv      { return kv{F0: a.F0, F1: a.F1 + b.F1} }

// TestUnboundedFromLatest reads a stream without end from its newest message on, with two subtasks and
// one subject filter: the messages stored before the source started are skipped, those stored while it
// runs all arrive (the reader wakes when they come), the subtask without a filter idles instead of
// finishing, and checkpoints complete. The consumer outlives the cancelled job, for a restore.
func TestUnboundedFromLatest(t *testing.T) {
	url := startServer(t)
	js := client(t, url)
	createStream(t, js, jetstream.StreamConfig{Name: "IN", Subjects: []string{"in.*"}})
	const before, n = 100, 500
	publish(t, js, before, "in.a")
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Millisecond}))
	var seen, early atomic.Int64 // the collect sink hands records over only in batches or at the end
	src := runnel.FromSource(env, nats.Source(nats.SourceConfig{URL: url, Stream: "IN", Subjects: []string{"in.a"}, StartAt: nats.Latest,
		ConsumerPrefix: "latest"}, decodeValue)).Name("nats")
	runnel.Map(src, func(v int64) (int64, error) {
		if seen.Add(1); v < before {
			early.Add(1)
		}
		return v, nil
	}).Name("count").SinkTo(connector.Discard[int64]()).Name("sink")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *runnel.JobResult, 1)
	go func() { res, _ := env.Execute(ctx, "latest"); done <- res }()
	// Publish once the source's consumer stands after the messages stored before.
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := js.Consumer(context.Background(), "IN", "latest_0_2")
		if err == nil && c.CachedInfo().AckFloor.Stream == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source's consumer is not at sequence %d after 20 s: %v", before, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range n {
		if _, err := js.Publish(context.Background(), "in.a", binary.BigEndian.AppendUint64(nil, uint64(before+i))); err != nil {
			t.Fatal(err)
		}
	}
	for seen.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages after 20 s", seen.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a few checkpoints, and time for a message too many
	cancel()
	res := <-done
	if res == nil || res.Status != "CANCELED" || res.Checkpoints == nil || res.Checkpoints.Completed == 0 {
		t.Fatalf("result %+v", res)
	}
	if seen.Load() != n || early.Load() != 0 {
		t.Fatalf("%d messages read, %d of them stored before the source started; want %d and 0", seen.Load(), early.Load(), n)
	}
	for _, s := range res.Vertex("nats").Subtasks {
		if s.State == "FINISHED" {
			t.Fatalf("subtask %d of an unbounded source finished", s.Index)
		}
	}
	// A cancelled job may be restored: its consumer stays, until it was inactive for a day.
	c, err := js.Consumer(context.Background(), "IN", "latest_0_2")
	if err != nil {
		t.Fatalf("the consumer of the cancelled job: %v", err)
	}
	if got := c.CachedInfo().Config.InactiveThreshold; got != nats.DefaultInactiveThreshold {
		t.Fatalf("the consumer's InactiveThreshold is %s, want %s", got, nats.DefaultInactiveThreshold)
	}
}

package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/connector/kafka"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(stopSharedBroker{m}) }

// stopSharedBroker runs the tests, then stops the Kafka broker they shared (kafkabroker.Shared), if any.
type stopSharedBroker struct{ *testing.M }

func (s stopSharedBroker) Run() int {
	code := s.M.Run()
	if err := kafkabroker.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// cluster starts an in-process Kafka cluster (kfake speaks the real protocol over TCP) with the topics.
func cluster(t *testing.T, partitions int32, topics ...string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// produce writes n records to topic: key i%keys and value i, both 8-byte big-endian, spread over the
// partitions by key.
func produce(t *testing.T, brokers []string, topic string, n, keys int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range n {
		rec := &kgo.Record{Key: binary.BigEndian.AppendUint64(nil, uint64(i%keys)), Value: binary.BigEndian.AppendUint64(nil, uint64(i))}
		cl.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

type kv = codec.Tuple2[int64, int64]

// checkEachOnce checks that recs hold every value 0..n-1 exactly once, each with the key value % keys.
func checkEachOnce(t *testing.T, recs []kv, n, keys int64) {
	t.Helper()
	seen := make([]int, n)
	for _, r := range recs {
		if r.F1 < 0 || r.F1 >= n || r.F0 != r.F1%keys {
			t.Fatalf("record %+v", r)
		}
		seen[r.F1]++
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("value %d seen %d times", i, c)
		}
	}
}

func decode(r kafka.Record) (kv, error) {
	if len(r.Key) != 8 || len(r.Value) != 8 {
		return kv{}, fmt.Errorf("record of %d+%d bytes", len(r.Key), len(r.Value))
	}
	return kv{F0: int64(binary.BigEndian.Uint64(r.Key)), F1: int64(binary.BigEndian.Uint64(r.Value))}, nil
}

// TestSourceReadsEveryRecordOnce reads a 4-partition topic to its end with 2 and 3 subtasks (one of them
// then reads two partitions, another one), over local and TCP channels.
func TestSourceReadsEveryRecordOnce(t *testing.T) {
	brokers := cluster(t, 4, "in")
	const n = 20_000
	produce(t, brokers, "in", n, 97)
	for _, p := range []int{2, 3} {
		t.Run(fmt.Sprint("parallelism ", p), func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithTaskManagers(2), runnel.WithLogger(quiet))
			src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", Bounded: true}, decode)).Name("kafka")
			sink := connector.NewCollect[kv]()
			src.Rebalance().SinkTo(sink).Name("collect")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "read")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("%v, %+v", err, res)
			}
			checkEachOnce(t, sink.Records(), n, 97)
		})
	}
}

// TestSourceExactlyOnceUnderFailures sums a topic by key with checkpoints while the sum fails twice: the
// source rewinds to its checkpointed offsets with the state, and the sums come out exact. Both failures hit
// one subtask (it sees 20769 of the 30000 records, so its second one always comes, in a later attempt):
// one on each subtask could come while the job restarts for the other, which that failover then absorbs.
func TestSourceExactlyOnceUnderFailures(t *testing.T) {
	brokers := cluster(t, 3, "in")
	const n, keys = 30_000, 13
	produce(t, brokers, "in", n, keys)
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond}),
		runnel.WithFailureInjection("sum[0]@4000", "sum[0]@12000"), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"))
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", Bounded: true}, decode)).Name("kafka").WithCodec(codec.MustStruct[kv]())
	sums := runnel.Reduce(runnel.KeyBy(src, func(v kv) int64 { return v.F0 }),
		func(a, b kv) (kv, error) { a.F1 += b.F1; return a, nil }).Name("sum")
	sink := connector.NewCollect[kv]()
	sums.SinkTo(sink).Name("collect")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "sum")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if len(res.Failovers) != 2 {
		t.Fatalf("failovers %+v, want 2", res.Failovers)
	}
	want := map[int64]int64{}
	for i := range int64(n) {
		want[i%keys] += i
	}
	got := map[int64]int64{}
	for _, r := range sink.Records() {
		got[r.F0] = r.F1 // the running sums only grow: the last one a key got is its total
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("sum of key %d = %d, want %d", k, got[k], w)
		}
	}
}

// TestSinkWritesEveryRecord writes a bounded stream to a topic and reads it back.
func TestSinkWritesEveryRecord(t *testing.T) {
	brokers := cluster(t, 2, "out")
	const n = 10_000
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet))
	src := runnel.FromSource(env, connector.Generator(func(sub int, seq uint64) int64 { return int64(seq)*2 + int64(sub) },
		connector.GeneratorOptions{TotalRecords: n}))
	src.SinkTo(kafka.Sink(kafka.SinkConfig{Brokers: brokers, Topic: "out"}, func(v int64, key, value []byte) ([]byte, []byte, error) {
		return binary.BigEndian.AppendUint64(key, uint64(v%7)), binary.BigEndian.AppendUint64(value, uint64(v)), nil
	})).Name("kafka")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, err := env.Execute(ctx, "write"); err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	// Read the topic back with the source.
	env2 := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet))
	back := connector.NewCollect[kv]()
	runnel.FromSource(env2, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "out", Bounded: true}, decode)).SinkTo(back)
	if res, err := env2.Execute(ctx, "read back"); err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	checkEachOnce(t, back.Records(), n, 7)
}

// TestBadConfigAndMissingTopic pins the errors a user sees for a source or sink that cannot work.
func TestBadConfigAndMissingTopic(t *testing.T) {
	brokers := cluster(t, 1, "in")
	for _, tc := range []struct {
		name string
		src  kafka.SourceConfig
		want string
	}{
		{"no brokers", kafka.SourceConfig{Topic: "in"}, "no brokers"},
		{"no topic", kafka.SourceConfig{Brokers: brokers}, "no topic"},
		{"missing topic", kafka.SourceConfig{Brokers: brokers, Topic: "nope", Bounded: true}, `topic "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithLogger(quiet))
			runnel.FromSource(env, kafka.Source(tc.src, decode)).SinkTo(connector.Discard[kv]())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "bad")
			if err == nil {
				err = errors.New(res.Error)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	env := runnel.NewEnvironment(runnel.WithLogger(quiet))
	runnel.FromSource(env, connector.Collection([]int64{1})).SinkTo(kafka.Sink(kafka.SinkConfig{Topic: "out"},
		func(v int64, k, val []byte) ([]byte, []byte, error) { return k, val, nil }))
	if _, err := env.Execute(context.Background(), "bad sink"); err == nil || !strings.Contains(err.Error(), "kafka sink: no brokers") {
		t.Fatalf("sink without brokers: %v", err)
	}
}

// TestSourceRefusesAnIncompleteOffsetsAnswer answers a bounded source's question for its partitions' end
// offsets without one of them: the job fails naming it, where the subtask would otherwise have taken the
// partition for read and finished without its records.
func TestSourceRefusesAnIncompleteOffsetsAnswer(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	produce(t, c.ListenAddrs(), "in", 300, 7)
	c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		lreq := req.(*kmsg.ListOffsetsRequest)
		resp := lreq.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range lreq.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions[:len(rt.Partitions)-1] { // the last one left out
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.Offset = rp.Partition, 0
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithRestartStrategy("none"))
	runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: c.ListenAddrs(), Topic: "in", Bounded: true}, decode)).SinkTo(connector.Discard[kv]())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "incomplete offsets")
	if err == nil {
		err = errors.New(res.Error)
	}
	if !strings.Contains(err.Error(), "no offset for partition 2") {
		t.Fatalf("error %v, want one naming partition 2", err)
	}
}

// TestIdleSubtaskWithoutPartitions runs an unbounded source with more subtasks than partitions: the subtask
// without a partition idles instead of finishing, checkpoints complete, and the records all arrive.
func TestIdleSubtaskWithoutPartitions(t *testing.T) {
	brokers := cluster(t, 1, "in")
	produce(t, brokers, "in", 500, 5)
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Millisecond}))
	var seen atomic.Int64 // the collect sink hands records over only in batches or at the end
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in"}, decode)).Name("kafka").
		WithCodec(codec.MustStruct[kv]()).Rebalance()
	runnel.Map(src, func(v kv) (kv, error) { seen.Add(1); return v, nil }).Name("count").SinkTo(connector.Discard[kv]()).Name("sink")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *runnel.JobResult, 1)
	go func() { res, _ := env.Execute(ctx, "idle"); done <- res }()
	deadline := time.Now().Add(20 * time.Second)
	for seen.Load() < 500 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 500 records after 20 s", seen.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a few checkpoints
	cancel()
	res := <-done
	if res == nil || res.Status != "CANCELED" || res.Checkpoints == nil || res.Checkpoints.Completed == 0 {
		t.Fatalf("result %+v", res)
	}
	for _, s := range res.Vertex("kafka").Subtasks {
		if s.State == "FINISHED" {
			t.Fatalf("subtask %d of an unbounded source finished", s.Index)
		}
	}
}

// TestPartitionWatermarks reads a topic whose two partitions run at very different event times with one
// source subtask, into event-time windows: each partition has its own watermark (runnel.SplitOutput), so
// the fast partition does not make the slow one's records late, and the timestamps come from the Kafka
// records (the assigner's recordTs). Every record is counted in its window; none is dropped as late.
func TestPartitionWatermarks(t *testing.T) {
	brokers := cluster(t, 2, "times")
	const n = 2000
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("times"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		for p, step := range []time.Duration{time.Second, time.Millisecond} { // partition 0 fast, 1 slow
			rec := &kgo.Record{Partition: int32(p), Key: binary.BigEndian.AppendUint64(nil, uint64(p)),
				Value: binary.BigEndian.AppendUint64(nil, uint64(i)), Timestamp: base.Add(time.Duration(i) * step)}
			cl.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Error(err)
				}
			})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet), runnel.WithWatermarkInterval(time.Millisecond))
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "times", Bounded: true}, decode)).Name("kafka").
		WithTimestamps(runnel.MonotonousTimestamps[kv]().WithTimestampAssigner(func(_ kv, recordTs int64) int64 { return recordTs }))
	counts := runnel.WindowAggregate(runnel.Window(runnel.KeyBy(src, func(r kv) int64 { return r.F0 }), runnel.TumblingEventTimeWindows(time.Second)),
		runnel.AggregateFunction[kv, kv, kv](countPerKey{})).Name("window")
	sink := connector.NewCollect[kv]()
	counts.SinkTo(sink)
	res, err := env.Execute(ctx, "partition watermarks")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if dropped := res.Vertex("window").Subtasks[0].Metrics["window/late_records_dropped"]; dropped != 0 {
		t.Fatalf("%d records dropped as late: one partition's watermark ran ahead of the other's records", dropped)
	}
	total := map[int64]int64{}
	for _, c := range sink.Records() {
		total[c.F0] += c.F1
	}
	if total[0] != n || total[1] != n {
		t.Fatalf("counted %v, want %d per partition", total, n)
	}
}

// countPerKey counts a window's records: F0 the key, F1 the count.
type countPerKey struct{}

func (countPerKey) CreateAccumulator() kv { return kv{} }
func (countPerKey) Add(v kv, acc kv) kv   { return kv{F0: v.F0, F1: acc.F1 + 1} }
func (countPerKey) Result(acc kv) kv      { return acc }
func (countPerKey) Merge(a, b kv) kv      { return kv{F0: a.F0, F1: a.F1 + b.F1} }

package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/connector/kafka"
)

// rec is a record of key k and value v (8-byte big-endian each) for partition p.
func rec(p int32, k, v int64) *kgo.Record {
	return &kgo.Record{Partition: p, Key: binary.BigEndian.AppendUint64(nil, uint64(k)), Value: binary.BigEndian.AppendUint64(nil, uint64(v))}
}

// produceTo writes recs to topic, each to its own Partition, and waits for their acknowledgement.
func produceTo(t *testing.T, brokers []string, topic string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// admin returns an admin client of the cluster, closed with the test.
func admin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// waitFor polls cond until it holds, failing the test with what() after d.
func waitFor(t *testing.T, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runJob executes env until it ends or ctx is done, in the background; wait returns its result.
func runJob(ctx context.Context, env *runnel.Environment, name string) (wait func() (*runnel.JobResult, error)) {
	type out struct {
		res *runnel.JobResult
		err error
	}
	done := make(chan out, 1)
	go func() { res, err := env.Execute(ctx, name); done <- out{res, err} }()
	return func() (*runnel.JobResult, error) { o := <-done; return o.res, o.err }
}

// seenValues is a concurrent set of the values a job's map saw, with a count per value.
type seenValues struct {
	mu sync.Mutex
	m  map[int64]int
	n  atomic.Int64
}

func (s *seenValues) add(v int64) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[int64]int{}
	}
	s.m[v]++
	s.mu.Unlock()
	s.n.Add(1)
}

func (s *seenValues) count(v int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[v]
}

// TestSourceRescaleRestore sums a topic of 6 partitions by key at parallelism 2, stops it with a savepoint
// in the middle of its input, and resumes it at parallelism 3: the offsets go over to the partitions' new
// subtasks with the keyed state, and every record is counted exactly once across both runs (a partition
// restarted at its start would count twice, one not restored would be missed). Every new subtask reads.
func TestSourceRescaleRestore(t *testing.T) {
	brokers := cluster(t, 6, "in")
	const keys = 11
	var recs []*kgo.Record
	for i := range int64(1200) {
		recs = append(recs, rec(int32(i%6), i%keys, i))
	}
	produceTo(t, brokers, "in", recs[:600]...)
	dir := t.TempDir()
	sp := filepath.Join(dir, "sp")
	var seen seenValues
	build := func(p int, bounded bool, opts ...runnel.Option) (*runnel.Environment, *connector.Collect[kv]) {
		env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(p), runnel.WithLogger(quiet),
			runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond, Storage: filepath.Join(dir, fmt.Sprint("chk", p))})}, opts...)...)
		src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", Bounded: bounded}, decode)).
			Name("kafka").WithCodec(codec.MustStruct[kv]())
		counted := runnel.Map(src, func(v kv) (kv, error) { seen.add(v.F1); return v, nil }).Name("seen")
		sums := runnel.Reduce(runnel.KeyBy(counted, func(v kv) int64 { return v.F0 }),
			func(a, b kv) (kv, error) { a.F1 += b.F1; return a, nil }).Name("sum").Uid("sum")
		sink := connector.NewCollect[kv]()
		sums.SinkTo(sink).Name("collect").SetParallelism(1)
		return env, sink
	}
	env, _ := build(2, false, runnel.WithSavepointOnStop(sp))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := runJob(ctx, env, "first")
	waitFor(t, 20*time.Second, func() bool { return seen.n.Load() >= 600 }, func() string { return fmt.Sprintf("%d of 600 records", seen.n.Load()) })
	cancel()
	res, err := wait()
	if err != nil || res.Status != "CANCELED" || res.Savepoint != sp {
		t.Fatalf("first run: %v, %+v", err, res)
	}
	produceTo(t, brokers, "in", recs[600:]...)
	env, sink := build(3, true, runnel.WithRestoreFrom(sp))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	res, err = env.Execute(ctx2, "rescaled")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("rescaled run: %v, %+v", err, res)
	}
	for _, s := range res.Vertex("kafka").Subtasks {
		if s.RecordsOut == 0 || s.Metrics["kafka/partitions"] != 2 {
			t.Fatalf("subtask %d of 3 read %d records of %d partitions, want some of 2: %+v", s.Index, s.RecordsOut, s.Metrics["kafka/partitions"], res.Vertex("kafka").Subtasks)
		}
	}
	want := map[int64]int64{}
	for i := range int64(1200) {
		want[i%keys] += i
	}
	got := map[int64]int64{}
	for _, r := range sink.Records() {
		got[r.F0] = r.F1 // the running sums only grow: the last one a key got is its total
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("sum of key %d = %d, want %d (every record once across the rescale)", k, got[k], w)
		}
	}
}

// TestSourceDiscoversPartitionsAndTopics reads the topics matching a pattern with two subtasks and a
// discovery interval of 50 ms; while the job runs, a partition is added to the topic and a second topic
// matching the pattern is created (and one that does not match): the records written to the new
// partitions are read from their first, within a few intervals, and the other topic's are not.
func TestSourceDiscoversPartitionsAndTopics(t *testing.T) {
	brokers := cluster(t, 2, "ev-a", "other")
	produceTo(t, brokers, "ev-a", rec(0, 0, 0), rec(1, 1, 1))
	var seen seenValues
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet))
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, TopicPattern: regexp.MustCompile(`^ev-`),
		DiscoveryInterval: 50 * time.Millisecond}, decode)).Name("kafka").WithCodec(codec.MustStruct[kv]())
	runnel.Map(src, func(v kv) (kv, error) { seen.add(v.F1); return v, nil }).SinkTo(connector.Discard[kv]())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := runJob(ctx, env, "discover")
	waitFor(t, 20*time.Second, func() bool { return seen.n.Load() == 2 }, func() string { return fmt.Sprintf("%d of 2 records", seen.n.Load()) })

	adm := admin(t, brokers)
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer acancel()
	if _, err := adm.CreatePartitions(actx, 1, "ev-a"); err != nil {
		t.Fatal(err)
	}
	if r, err := adm.CreateTopic(actx, 3, 1, nil, "ev-b"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	if r, err := adm.CreateTopic(actx, 1, 1, nil, "nope-c"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	// Written right away: the records are there before a subtask sees the partitions, and are read all
	// the same, from the partitions' start.
	added := time.Now()
	produceTo(t, brokers, "ev-a", rec(2, 2, 2))
	produceTo(t, brokers, "ev-b", rec(0, 0, 10), rec(1, 1, 11), rec(2, 2, 12))
	produceTo(t, brokers, "nope-c", rec(0, 0, 20))
	waitFor(t, 10*time.Second, func() bool { return seen.n.Load() >= 6 }, func() string { return fmt.Sprintf("%d of 6 records", seen.n.Load()) })
	t.Logf("new partitions read %s after they were added", time.Since(added).Round(time.Millisecond))
	produceTo(t, brokers, "ev-b", rec(2, 2, 13))
	waitFor(t, 10*time.Second, func() bool { return seen.n.Load() >= 7 }, func() string { return fmt.Sprintf("%d of 7 records", seen.n.Load()) })
	cancel()
	if res, _ := wait(); res == nil || res.Status != "CANCELED" {
		t.Fatalf("result %+v", res)
	}
	for _, v := range []int64{0, 1, 2, 10, 11, 12, 13} {
		if c := seen.count(v); c != 1 {
			t.Fatalf("value %d seen %d times", v, c)
		}
	}
	if c := seen.count(20); c != 0 {
		t.Fatalf("the record of the topic that does not match was read %d times", c)
	}
}

// timedRecs writes n records to each of partitions 0 and 1 of topic, value i at base + i s (partition 1's
// values are offset by 1000).
func timedRecs(t *testing.T, brokers []string, topic string, base time.Time, n int64) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		for p := range int64(2) {
			r := rec(int32(p), p, p*1000+i)
			r.Timestamp = base.Add(time.Duration(i) * time.Second)
			recs = append(recs, r)
		}
	}
	produceTo(t, brokers, topic, recs...)
}

// readAll runs a bounded source of cfg at parallelism 2 to its end and returns the values it read.
func readAll(t *testing.T, cfg kafka.SourceConfig, opts ...runnel.Option) []int64 {
	t.Helper()
	cfg.Bounded = true
	env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet)}, opts...)...)
	sink := connector.NewCollect[kv]()
	runnel.FromSource(env, kafka.Source(cfg, decode)).Name("kafka").SinkTo(sink)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "read all")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	var vs []int64
	for _, r := range sink.Records() {
		vs = append(vs, r.F1)
	}
	return vs
}

// valueSet checks that vs holds each value once and returns them as a set.
func valueSet(t *testing.T, vs []int64) map[int64]bool {
	t.Helper()
	m := map[int64]bool{}
	for _, v := range vs {
		if m[v] {
			t.Fatalf("value %d read twice", v)
		}
		m[v] = true
	}
	return m
}

// TestSourceStartsAtTimestamp starts at a time: each partition from its first record at or after it, and
// a partition whose records are all older (partition 1 of "late") from its end.
func TestSourceStartsAtTimestamp(t *testing.T) {
	brokers := cluster(t, 2, "in", "late")
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	timedRecs(t, brokers, "in", base, 100)
	produceTo(t, brokers, "late", func() []*kgo.Record {
		a, b := rec(0, 0, 5000), rec(1, 1, 6000)
		a.Timestamp, b.Timestamp = base.Add(time.Hour), base
		return []*kgo.Record{a, b}
	}()...)
	got := valueSet(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topics: []string{"in", "late"}, StartAt: kafka.Timestamp,
		StartTimestamp: base.Add(60 * time.Second)}))
	want := map[int64]bool{5000: true}
	for i := int64(60); i < 100; i++ {
		want[i], want[1000+i] = true, true
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for v := range want {
		if !got[v] {
			t.Fatalf("value %d not read", v)
		}
	}
}

// TestSourceStartsAtGroupOffsets starts at the offsets a group committed (partition 0 at 40), and a
// partition the group has none for (partition 1) at the fallback: its start, or its end.
func TestSourceStartsAtGroupOffsets(t *testing.T) {
	brokers := cluster(t, 2, "in")
	timedRecs(t, brokers, "in", time.Now(), 100)
	adm := admin(t, brokers)
	var offs kadm.Offsets
	offs.AddOffset("in", 0, 40, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := adm.CommitOffsets(ctx, "g", offs); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
	if n := len(readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: "in", StartAt: kafka.GroupOffsets, Group: "new", GroupFallback: kafka.Latest})); n != 0 {
		t.Fatalf("a group that never committed, falling back to Latest: read %d records, want none", n)
	}
	for _, tc := range []struct {
		fallback kafka.StartAt
		want     int
	}{{kafka.Earliest, 160}, {kafka.Latest, 60}} {
		t.Run(tc.fallback.String(), func(t *testing.T) {
			got := valueSet(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: "in", StartAt: kafka.GroupOffsets, Group: "g", GroupFallback: tc.fallback}))
			if len(got) != tc.want {
				t.Fatalf("read %d records, want %d", len(got), tc.want)
			}
			for i := int64(40); i < 100; i++ {
				if !got[i] {
					t.Fatalf("value %d of partition 0 (from the group's offset 40 on) not read", i)
				}
			}
			if got[39] {
				t.Fatal("value 39, before the group's offset, read")
			}
		})
	}
}

// groupOffsets returns the offsets group committed for topic, by partition.
func groupOffsets(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // kfake's answer for a group that never committed
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for p, o := range resp[topic] {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		out[p] = o.At
	}
	return out
}

// TestSourceCommitsToGroupOnCheckpoint reads with a group: with checkpoints, the offsets of completed
// checkpoints are committed to it, up to the partitions' ends (a dashboard shows no lag); without, the
// group gets nothing, however much is read. The job never reads the group back: a job that starts at
// Earliest with the group's offsets at the end reads everything.
func TestSourceCommitsToGroupOnCheckpoint(t *testing.T) {
	brokers := cluster(t, 3, "in")
	produce(t, brokers, "in", 3000, 7)
	adm := admin(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, "in")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: "in", Group: "nochk"})); n != 3000 {
		t.Fatalf("read %d records, want 3000", n)
	}
	if got := groupOffsets(t, adm, "nochk", "in"); len(got) != 0 {
		t.Fatalf("without checkpoints the group got offsets %v", got)
	}

	var seen seenValues
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond}))
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", Group: "dash"}, decode)).Name("kafka").WithCodec(codec.MustStruct[kv]())
	runnel.Map(src, func(v kv) (kv, error) { seen.add(v.F1); return v, nil }).SinkTo(connector.Discard[kv]())
	jctx, jcancel := context.WithCancel(context.Background())
	defer jcancel()
	wait := runJob(jctx, env, "commit")
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	var last map[int32]int64
	waitFor(t, 20*time.Second, func() bool {
		last = groupOffsets(t, adm, "dash", "in")
		for p, w := range want {
			if last[p] != w {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("group offsets %v, want the ends %v", last, want) })
	jcancel()
	if res, _ := wait(); res == nil || res.Status != "CANCELED" {
		t.Fatalf("result %+v", res)
	}
	if n := seen.n.Load(); n != 3000 {
		t.Fatalf("read %d records, want 3000", n)
	}
	if n := len(readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: "in", Group: "dash"})); n != 3000 {
		t.Fatalf("a job starting at Earliest with the group at the end read %d records, want 3000", n)
	}
}

// badRecordCluster returns a cluster whose topic "in" has 20 good records on each of 2 partitions and a
// bad one (3 bytes) at offset 7 of partition 1.
func badRecordCluster(t *testing.T) []string {
	brokers := cluster(t, 2, "in")
	var recs []*kgo.Record
	for i := range int64(21) {
		for p := range int32(2) {
			r := rec(p, int64(p), int64(p)*100+i)
			if p == 1 && i == 7 {
				r.Value = []byte{1, 2, 3}
			}
			recs = append(recs, r)
		}
	}
	produceTo(t, brokers, "in", recs...)
	return brokers
}

// TestSourceDecodeErrorFailsNamingTheRecord: a record decode fails on fails the job with an error that
// names its topic, partition and offset.
func TestSourceDecodeErrorFailsNamingTheRecord(t *testing.T) {
	brokers := badRecordCluster(t)
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet), runnel.WithRestartStrategy("none"))
	runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", Bounded: true}, decode)).Name("kafka").SinkTo(connector.Discard[kv]())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "decode error")
	if err == nil {
		err = errors.New(res.Error)
	}
	const want = `cannot decode the record at offset 7 of partition 1 of topic "in": record of 8+3 bytes`
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one with %q", err, want)
	}
}

// TestSourceDecodeErrorsToSideOutput routes the records decode fails on to a side output: the job
// finishes, the main output has every good record, the side output the bad one with its error.
func TestSourceDecodeErrorsToSideOutput(t *testing.T) {
	brokers := badRecordCluster(t)
	bad := runnel.NewOutputTag[kafka.DecodeError]("undecodable")
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet))
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", Bounded: true, DecodeErrors: bad}, decode)).Name("kafka")
	good := connector.NewCollect[kv]()
	src.SinkTo(good)
	dead := connector.NewCollect[kafka.DecodeError]()
	runnel.SideOutput(src, bad).SinkTo(dead).SetParallelism(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, err := env.Execute(ctx, "dead letters"); err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if n := len(valueSet(t, func() (vs []int64) {
		for _, r := range good.Records() {
			vs = append(vs, r.F1)
		}
		return vs
	}())); n != 41 {
		t.Fatalf("%d good records, want 41", n)
	}
	d := dead.Records()
	if len(d) != 1 || d[0].Record.Topic != "in" || d[0].Record.Partition != 1 || d[0].Record.Offset != 7 ||
		string(d[0].Record.Value) != "\x01\x02\x03" || d[0].Err != "record of 8+3 bytes" {
		t.Fatalf("side output %+v, want the record at offset 7 of partition 1 with its error", d)
	}
}

// TestSourceReadsCommittedByDefault writes a committed and an aborted transaction: by default (and at
// the end of a bounded read, which ends right after a transaction marker) only the committed records are
// read; with ReadUncommitted, both.
func TestSourceReadsCommittedByDefault(t *testing.T) {
	brokers := cluster(t, 1, "in")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("in"), kgo.TransactionalID("tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range int64(10) {
			if err := cl.ProduceSync(ctx, rec(0, 0, int64(i)*100+j)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	got := valueSet(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: "in"}))
	if len(got) != 10 || !got[0] || !got[9] {
		t.Fatalf("read committed: %v, want 0..9", got)
	}
	if got := valueSet(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: "in", ReadUncommitted: true})); len(got) != 20 || !got[109] {
		t.Fatalf("read uncommitted: %v, want 0..9 and 100..109", got)
	}
}

// TestSourceRefusesBadInput pins the errors of a source that cannot read: each names what is wrong and
// where, at the start of the job.
func TestSourceRefusesBadInput(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "secret"), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "reader", "pw", kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "in", Pattern: kmsg.ACLResourcePatternTypeLiteral,
			Operation: kmsg.ACLOperationAll, Allow: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	addr := strings.Join(brokers, ",")
	reader := []kgo.Opt{kgo.SASL(plain.Auth{User: "reader", Pass: "pw"}.AsMechanism())}
	super := []kgo.Opt{kgo.SASL(plain.Auth{User: "admin", Pass: "admin"}.AsMechanism())}
	closed := closedPort(t)
	for _, tc := range []struct {
		name string
		cfg  kafka.SourceConfig
		want string
	}{
		{"unreachable brokers", kafka.SourceConfig{Brokers: []string{closed}, Topic: "in"},
			"cannot get the metadata of the topics from the brokers " + closed},
		{"missing topic", kafka.SourceConfig{Brokers: brokers, Topic: "nope", ClientOptions: super},
			`topic "nope" does not exist on the brokers ` + addr},
		{"no permission", kafka.SourceConfig{Brokers: brokers, Topics: []string{"in", "secret"}, ClientOptions: reader},
			`not authorized to describe topic "secret" on the brokers ` + addr},
		{"pattern and topic", kafka.SourceConfig{Brokers: brokers, Topic: "in", TopicPattern: regexp.MustCompile("x")}, "set one of them"},
		{"timestamp without time", kafka.SourceConfig{Brokers: brokers, Topic: "in", StartAt: kafka.Timestamp}, "StartAt Timestamp without a StartTimestamp"},
		{"group offsets without group", kafka.SourceConfig{Brokers: brokers, Topic: "in", StartAt: kafka.GroupOffsets}, "StartAt GroupOffsets without a Group"},
		{"bad fallback", kafka.SourceConfig{Brokers: brokers, Topic: "in", GroupFallback: kafka.Timestamp}, "GroupFallback Timestamp is neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithRestartStrategy("none"))
			runnel.FromSource(env, kafka.Source(tc.cfg, decode)).SinkTo(connector.Discard[kv]())
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := time.Now()
			res, err := env.Execute(ctx, "bad")
			if err == nil {
				err = errors.New(res.Error)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestSourceIdlePartitionsDoNotHoldBackWindows reads four partitions with one subtask while only two of
// them get records, one every millisecond at one second of event time each: with idleness the empty
// partitions go idle and the windows of the other two fire while the job runs. Without idleness the
// watermark would wait for the empty ones for ever (the second half checks that it does).
func TestSourceIdlePartitionsDoNotHoldBackWindows(t *testing.T) {
	for _, idleness := range []time.Duration{50 * time.Millisecond, 0} {
		t.Run(fmt.Sprint("idleness ", idleness), func(t *testing.T) {
			brokers := cluster(t, 4, "in")
			base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet), runnel.WithWatermarkInterval(time.Millisecond))
			strategy := runnel.MonotonousTimestamps[kv]().WithTimestampAssigner(func(_ kv, recordTs int64) int64 { return recordTs })
			if idleness > 0 {
				strategy = strategy.WithIdleness(idleness)
			}
			src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in"}, decode)).Name("kafka").WithTimestamps(strategy)
			counts := runnel.WindowAggregate(runnel.Window(runnel.KeyBy(src, func(r kv) int64 { return r.F0 }), runnel.TumblingEventTimeWindows(10*time.Second)),
				runnel.AggregateFunction[kv, kv, kv](countPerKey{})).Name("window")
			var fired seenValues
			runnel.Map(counts, func(c kv) (kv, error) { fired.add(c.F1); return c, nil }).SinkTo(connector.Discard[kv]())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := runJob(ctx, env, "idle partitions")
			// Records keep coming to partitions 0 and 1 while the test runs.
			stop := make(chan struct{})
			produced := make(chan struct{})
			go func() {
				defer close(produced)
				cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
				if err != nil {
					t.Error(err)
					return
				}
				defer cl.Close()
				for i := int64(0); ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
					for p := range int32(2) {
						r := rec(p, int64(p), i)
						r.Timestamp = base.Add(time.Duration(i) * time.Second)
						if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}()
			defer func() { close(stop); <-produced }()
			if idleness > 0 {
				// Two windows of 10 records per key.
				waitFor(t, 20*time.Second, func() bool { return fired.count(10) >= 4 }, func() string { return fmt.Sprintf("%d windows fired", fired.n.Load()) })
			} else {
				time.Sleep(300 * time.Millisecond) // some 300 s of event time on partitions 0 and 1
				if n := fired.n.Load(); n != 0 {
					t.Fatalf("%d windows fired while two partitions had no watermark and no idleness", n)
				}
			}
			cancel()
			if res, err := wait(); res == nil || res.Status != "CANCELED" {
				t.Fatalf("result %+v, %v", res, err)
			}
		})
	}
}

// TestSourceExactlyOnceWithDiscoveryAndFailure sums an unbounded topic by key with checkpoints while a
// partition is added: the new partition is discovered and read, and then the job fails (once, in the
// middle of the new partition's records) and restarts from its last checkpoint, which holds the new
// partition's offset. Every key's sum comes out exact: no record of an old or a new partition is counted
// twice or lost.
func TestSourceExactlyOnceWithDiscoveryAndFailure(t *testing.T) {
	brokers := cluster(t, 2, "in")
	const keys = 13
	var recs []*kgo.Record
	for i := range int64(4000) {
		recs = append(recs, rec(int32(i%2), i%keys, i))
	}
	produceTo(t, brokers, "in", recs...)
	want := map[int64]int64{}
	for i := range int64(4000) {
		want[i%keys] += i
	}
	var failed atomic.Bool
	var seen seenValues
	var mu sync.Mutex
	got := map[int64]int64{}
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond}), runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"))
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", DiscoveryInterval: 20 * time.Millisecond}, decode)).
		Name("kafka").WithCodec(codec.MustStruct[kv]())
	checked := runnel.Map(src, func(v kv) (kv, error) {
		seen.add(v.F1)
		if v.F1 >= 100_000 && v.F1%10 == 0 {
			time.Sleep(time.Millisecond) // the new partition's records take a while: checkpoints complete among them
		}
		if v.F1 == 103_000 && !failed.Swap(true) {
			return v, errors.New("injected failure in the middle of the new partition")
		}
		return v, nil
	}).Name("check")
	sums := runnel.Reduce(runnel.KeyBy(checked, func(v kv) int64 { return v.F0 }),
		func(a, b kv) (kv, error) { a.F1 += b.F1; return a, nil }).Name("sum")
	runnel.Map(sums, func(v kv) (kv, error) {
		mu.Lock()
		got[v.F0] = v.F1 // the running sums only grow: the last one a key got is its total
		mu.Unlock()
		return v, nil
	}).Name("last").SinkTo(connector.Discard[kv]())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := runJob(ctx, env, "discovery and failure")
	waitFor(t, 20*time.Second, func() bool { return seen.n.Load() >= 4000 }, func() string { return fmt.Sprintf("%d of 4000 records", seen.n.Load()) })

	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer acancel()
	if _, err := admin(t, brokers).CreatePartitions(actx, 1, "in"); err != nil {
		t.Fatal(err)
	}
	recs = recs[:0]
	for i := int64(100_000); i < 106_000; i++ {
		recs = append(recs, rec(2, i%keys, i))
		want[i%keys] += i
	}
	produceTo(t, brokers, "in", recs...)
	equal := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k, w := range want {
			if got[k] != w {
				return false
			}
		}
		return true
	}
	waitFor(t, 30*time.Second, equal, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("sums %v, want %v", got, want)
	})
	cancel()
	res, err := wait()
	if res == nil || res.Status != "CANCELED" || len(res.Failovers) != 1 {
		t.Fatalf("result %+v, %v: want one failover", res, err)
	}
	if !equal() {
		t.Fatalf("sums %v after the end, want %v", got, want)
	}
}

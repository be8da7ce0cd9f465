package kafka_test

// Where the source starts and stops: explicit start offsets, stopping at a time or at offsets, and a
// bounded read whose last offsets hold nothing the reader sees (aborted transactions, whose marker may lie
// past the stopping offset); and the record fields the decode function gets (headers). Each on kfake and,
// where Kafka's own behaviour is the point, on the real broker (internal/kafkabroker).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/connector/kafka"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

// checkValues checks that got holds exactly the values of want, each once.
func checkValues(t *testing.T, got []int64, want ...[]int64) {
	t.Helper()
	var w []int64
	for _, vs := range want {
		w = append(w, vs...)
	}
	set := valueSet(t, got)
	if len(set) != len(w) {
		g := slices.Sorted(func(yield func(int64) bool) {
			for v := range set {
				if !yield(v) {
					return
				}
			}
		})
		t.Fatalf("read %d values %v, want %d: %v", len(g), g, len(w), w)
	}
	for _, v := range w {
		if !set[v] {
			t.Fatalf("value %d not read (read %d values)", v, len(set))
		}
	}
}

// twoPartitions writes n records to each of the 2 partitions of topic: partition p gets values p*1000+i.
func twoPartitions(t *testing.T, brokers []string, topic string, n int64) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, rec(0, 0, i), rec(1, 1, 1000+i))
	}
	produceTo(t, brokers, topic, recs...)
}

// runErr runs a job reading cfg and returns its error (the job's or its result's).
func runErr(t *testing.T, cfg kafka.SourceConfig) error {
	t.Helper()
	env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithRestartStrategy("none"))
	runnel.FromSource(env, kafka.Source(cfg, decode)).SinkTo(connector.Discard[kv]())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "bad")
	if err == nil && res.Status != "FINISHED" {
		err = errors.New(res.Error)
	}
	return err
}

// TestSourceStartsAtOffsets starts at named offsets: partition 0 at 3, and partition 1, not named, at
// GroupFallback (earliest, then latest). An offset at the high watermark reads nothing of its partition.
func TestSourceStartsAtOffsets(t *testing.T) {
	brokers := cluster(t, 2, "in")
	twoPartitions(t, brokers, "in", 10)
	cfg := kafka.SourceConfig{Brokers: brokers, Topic: "in", StartAt: kafka.Offsets,
		StartOffsets: map[kafka.TopicPartition]int64{{Topic: "in", Partition: 0}: 3}}
	checkValues(t, readAll(t, cfg), span(3, 10), span(1000, 1010))
	cfg.GroupFallback = kafka.Latest
	checkValues(t, readAll(t, cfg), span(3, 10))
	cfg.StartOffsets = map[kafka.TopicPartition]int64{{Topic: "in", Partition: 0}: 10, {Topic: "in", Partition: 1}: 0}
	checkValues(t, readAll(t, cfg), span(1000, 1010))
}

// TestSourceRefusesBadOffsets pins the errors of start and stop offsets that cannot be right: each names
// the entry and why, before or when the job starts.
func TestSourceRefusesBadOffsets(t *testing.T) {
	brokers := cluster(t, 2, "in", "other")
	twoPartitions(t, brokers, "in", 10)
	at := func(topic string, p int32, off int64) map[kafka.TopicPartition]int64 {
		return map[kafka.TopicPartition]int64{{Topic: topic, Partition: p}: off}
	}
	for _, tc := range []struct {
		name string
		cfg  kafka.SourceConfig
		want string
	}{
		{"start offset above the end", kafka.SourceConfig{StartAt: kafka.Offsets, StartOffsets: at("in", 1, 11)},
			"StartOffsets has offset 11 for in[1], outside its records: its log starts at offset 0 and ends before 10"},
		{"start partition of another topic", kafka.SourceConfig{StartAt: kafka.Offsets, StartOffsets: at("other", 0, 0)},
			`StartOffsets names partition other[0], but the source does not read topic "other" (it reads "in")`},
		{"start partition beyond the topic's", kafka.SourceConfig{StartAt: kafka.Offsets, StartOffsets: at("in", 2, 0)},
			`StartOffsets names partition in[2], but topic "in" has 2 partitions (0 to 1)`},
		{"negative start offset", kafka.SourceConfig{StartAt: kafka.Offsets, StartOffsets: at("in", 0, -1)},
			"StartOffsets has offset -1 for in[0]: offsets count from 0"},
		{"start offsets without StartAt Offsets", kafka.SourceConfig{StartOffsets: at("in", 0, 1)},
			"StartOffsets with StartAt Earliest: set StartAt Offsets"},
		{"StartAt Offsets without offsets", kafka.SourceConfig{StartAt: kafka.Offsets}, "StartAt Offsets without StartOffsets"},
		{"stop partition beyond the topic's", kafka.SourceConfig{Bounded: true, StopAt: kafka.StopOffsets, StopOffsets: at("in", 5, 1)},
			`StopOffsets names partition in[5], but topic "in" has 2 partitions (0 to 1)`},
		{"stop offsets without StopAt", kafka.SourceConfig{Bounded: true, StopOffsets: at("in", 0, 1)},
			"StopOffsets with StopAt StopLatest: set StopAt StopOffsets"},
		{"stop without Bounded", kafka.SourceConfig{StopAt: kafka.StopTimestamp, StopTimestamp: time.Now()},
			"StopAt StopTimestamp without Bounded"},
		{"stop at a time without one", kafka.SourceConfig{Bounded: true, StopAt: kafka.StopTimestamp}, "StopAt StopTimestamp without a StopTimestamp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Brokers, tc.cfg.Topic = brokers, "in"
			err := runErr(t, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSourceStopsAtOffsets stops partition 0 before offset 4 and reads partition 1, not named, to its end;
// a stopping offset at or below the start offset reads nothing of the partition.
func TestSourceStopsAtOffsets(t *testing.T) {
	brokers := cluster(t, 2, "in")
	twoPartitions(t, brokers, "in", 10)
	cfg := kafka.SourceConfig{Brokers: brokers, Topic: "in", StopAt: kafka.StopOffsets,
		StopOffsets: map[kafka.TopicPartition]int64{{Topic: "in", Partition: 0}: 4}}
	checkValues(t, readAll(t, cfg), span(0, 4), span(1000, 1010))
	cfg.StartAt, cfg.StartOffsets = kafka.Offsets, map[kafka.TopicPartition]int64{{Topic: "in", Partition: 0}: 6}
	checkValues(t, readAll(t, cfg), span(1000, 1010))
}

// TestSourceStopsAtOffsetsNotWrittenYet stops partition 0 at offset 15 while it holds 10 records: the job
// reads them and waits for the next 5, then finishes without the 5 after them.
func TestSourceStopsAtOffsetsNotWrittenYet(t *testing.T) {
	brokers := cluster(t, 2, "in")
	twoPartitions(t, brokers, "in", 10)
	var seen seenValues
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet))
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", Bounded: true, StopAt: kafka.StopOffsets,
		StopOffsets: map[kafka.TopicPartition]int64{{Topic: "in", Partition: 0}: 15}}, decode))
	runnel.Map(src, func(v kv) (kv, error) { seen.add(v.F1); return v, nil }).SinkTo(connector.Discard[kv]())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wait := runJob(ctx, env, "stop ahead")
	waitFor(t, 30*time.Second, func() bool { return seen.n.Load() == 20 }, func() string { return fmt.Sprintf("%d of 20 records", seen.n.Load()) })
	var more []*kgo.Record
	for i := int64(10); i < 20; i++ {
		more = append(more, rec(0, 0, i))
	}
	produceTo(t, brokers, "in", more...)
	if res, err := wait(); err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	for v := int64(0); v < 20; v++ {
		if want := v < 15; (seen.count(v) == 1) != want || seen.count(v) > 1 {
			t.Fatalf("value %d read %d times", v, seen.count(v))
		}
	}
}

// TestSourceStopsAtTimestamp stops each partition before its first record at or after a time, and a
// partition without one (all of "early") at its end.
func TestSourceStopsAtTimestamp(t *testing.T) {
	brokers := cluster(t, 2, "in", "early")
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	timedRecs(t, brokers, "in", base, 100)
	timedRecs(t, brokers, "early", base.Add(-time.Hour), 3)
	got := readAll(t, kafka.SourceConfig{Brokers: brokers, Topics: []string{"in", "early"}, StopAt: kafka.StopTimestamp,
		StopTimestamp: base.Add(60 * time.Second)})
	// "early" holds the values 0..2 and 1000..1002 too: every value of both is read once, but "in" only
	// up to second 59.
	counts := map[int64]int{}
	for _, v := range got {
		counts[v]++
	}
	for p := int64(0); p < 2; p++ {
		for i := int64(0); i < 100; i++ {
			want := 0
			if i < 60 {
				want = 1
			}
			if i < 3 {
				want++
			}
			if counts[p*1000+i] != want {
				t.Fatalf("value %d read %d times, want %d", p*1000+i, counts[p*1000+i], want)
			}
		}
	}
}

// TestSourceRecordHeaders hands the decode function every field of the record, its headers included.
func TestSourceRecordHeaders(t *testing.T) {
	brokers := cluster(t, 1, "in")
	ts := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	r := &kgo.Record{Key: []byte("k"), Value: []byte("v"), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "trace", Value: nil}, {Key: "z", Value: []byte{}}}}
	produceTo(t, brokers, "in", r, &kgo.Record{Value: []byte("bare")})
	var mu sync.Mutex
	var got []kafka.Record
	env := runnel.NewEnvironment(runnel.WithLogger(quiet))
	runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", Bounded: true}, func(r kafka.Record) (int, error) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		return 0, nil
	})).SinkTo(connector.Discard[int]())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, err := env.Execute(ctx, "headers"); err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if len(got) != 2 {
		t.Fatalf("%d records, want 2", len(got))
	}
	a := got[0]
	if a.Topic != "in" || a.Partition != 0 || a.Offset != 0 || string(a.Key) != "k" || string(a.Value) != "v" || !a.Timestamp.Equal(ts) ||
		len(a.Headers) != 3 || a.Headers[0].Key != "trace" || string(a.Headers[0].Value) != "abc" || a.Headers[1].Key != "trace" ||
		len(a.Headers[1].Value) != 0 || a.Headers[2].Key != "z" {
		t.Fatalf("record %+v", a)
	}
	if b := got[1]; b.Offset != 1 || len(b.Headers) != 0 || b.Key != nil {
		t.Fatalf("record %+v, want no key and no headers", b)
	}
}

// abortedBeforeOpen writes to partition 0 of topic, with two transactional producers: a committed
// transaction (values 0..4, offsets 0..4, its marker at 5), then transaction A (values 100..104 at 6..10),
// then transaction B (value 200 at 11), then aborts A: its marker lands at 12, past B's first record. With
// B open the last stable offset is 11, so a read_committed bounded read ends there, and the last offsets
// below it (6..10) hold only aborted records: nothing the reader gets tells it that it reached 11. It
// returns B's client, whose transaction is still open.
func abortedBeforeOpen(t *testing.T, brokers []string, topic string) *kgo.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	newTx := func(id string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID(id),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	a, b := newTx(topic+"-a"), newTx(topic+"-b")
	txn := func(cl *kgo.Client, vs ...int64) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if err := cl.ProduceSync(ctx, rec(0, 0, v)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	txn(a, span(0, 5)...)
	if err := a.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	txn(a, span(100, 105)...)
	txn(b, 200)
	if err := a.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	// EndTransaction returns before the marker is written: wait until the last stable offset has moved
	// past A to B's first record.
	adm := kadm.NewClient(a)
	waitFor(t, 30*time.Second, func() bool {
		l, err := adm.ListCommittedOffsets(ctx, topic)
		o, ok := l.Lookup(topic, 0)
		return err == nil && ok && o.Err == nil && o.Offset == 11
	}, func() string { return "the last stable offset did not reach 11" })
	return b
}

// TestSourceBoundedEndsAfterAbortedRecords reads a partition whose last offsets below the last stable
// offset hold aborted records only: the bounded read ends with the committed records, while the open
// transaction that holds the last stable offset back stays open (on kfake, then on the real broker).
func TestSourceBoundedEndsAfterAbortedRecords(t *testing.T) {
	t.Run("kfake", func(t *testing.T) { boundedEndsAfterAbortedRecords(t, cluster(t, 1, "in"), "in") })
	t.Run("broker", func(t *testing.T) {
		b := kafkabroker.Shared(t)
		topic := b.Name("src-aborted-tail")
		b.CreateTopic(t, topic, 1)
		boundedEndsAfterAbortedRecords(t, []string{b.Addr}, topic)
	})
}

func boundedEndsAfterAbortedRecords(t *testing.T, brokers []string, topic string) {
	open := abortedBeforeOpen(t, brokers, topic)
	checkValues(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: topic}), span(0, 5))
	// A stopping offset inside the aborted transaction: the reader's position passes it with A's marker.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := open.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	checkValues(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: topic, StopAt: kafka.StopOffsets,
		StopOffsets: map[kafka.TopicPartition]int64{{Topic: topic, Partition: 0}: 8}}), span(0, 5))
	checkValues(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: topic}), span(0, 5), []int64{200})
}

// TestBrokerSourceStopsInCompactedRange reads a compacted topic on the real broker whose records at offsets
// 3 and 4 the cleaner removed (keys written again at 5 and 6), with the stopping offset 5: the reader
// fetches 0..2, then 5, whose offset is past the stop, and the partition is done with 0..2 (the offsets
// just below the stop hold nothing). Read to its end, the topic gives every record the cleaner kept.
func TestBrokerSourceStopsInCompactedRange(t *testing.T) {
	b := kafkabroker.Shared(t)
	topic := b.Name("src-compacted")
	b.CreateTopic(t, topic, 1)
	adm := b.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	set := func(name, value string) kadm.AlterConfig {
		return kadm.AlterConfig{Op: kadm.SetConfig, Name: name, Value: &value}
	}
	// Small segments that roll after 100 ms, cleaned as soon as anything in them is superseded.
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("cleanup.policy", "compact"), set("segment.ms", "100"),
		set("min.cleanable.dirty.ratio", "0.001"), set("min.compaction.lag.ms", "0")}, topic)
	if err == nil {
		_, err = resp.On(topic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	brokers := []string{b.Addr}
	for v := range int64(7) {
		k := v // keys 0..4, then 3 and 4 again
		if v >= 5 {
			k = v - 2
		}
		produceTo(t, brokers, topic, rec(0, k, v))
	}
	// A record after segment.ms rolls the segment of 0..6, which makes it cleanable.
	time.Sleep(200 * time.Millisecond)
	produceTo(t, brokers, topic, rec(0, 9, 7))
	// The cleaner looks every 15 s (log.cleaner.backoff.ms); wait until offsets 3 and 4 are gone.
	for deadline := time.Now().Add(75 * time.Second); ; time.Sleep(time.Second) {
		var offs []int64
		for _, r := range b.ReadTopic(t, topic, kgo.ReadUncommitted()) {
			offs = append(offs, r.Offset)
		}
		if slices.Equal(offs, []int64{0, 1, 2, 5, 6, 7}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the topic holds offsets %v after 75 s, want the cleaner to have removed 3 and 4", offs)
		}
	}
	checkValues(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: topic, StopAt: kafka.StopOffsets,
		StopOffsets: map[kafka.TopicPartition]int64{{Topic: topic, Partition: 0}: 5}}), span(0, 3))
	checkValues(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: topic, StopAt: kafka.StopOffsets,
		StopOffsets: map[kafka.TopicPartition]int64{{Topic: topic, Partition: 0}: 4}}), span(0, 3))
	checkValues(t, readAll(t, kafka.SourceConfig{Brokers: brokers, Topic: topic}), span(0, 3), span(5, 8))
}

// fetchCounter counts the records the client decoded from fetches, per partition.
type fetchCounter struct {
	mu sync.Mutex
	n  map[int32]int
}

func (c *fetchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, p int32, m kgo.FetchBatchMetrics) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[int32]int{}
	}
	c.n[p] += m.NumRecords
}

func (c *fetchCounter) get(p int32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[p]
}

// TestSourceStopsFetchingADonePartition reads, with one subtask, partition 0 up to offset 5 of its 20000
// records and partition 1 up to offset 15 of 10 at first: while the subtask waits for partition 1's next
// records, its client does not go on fetching partition 0 (only to drop what it fetched).
func TestSourceStopsFetchingADonePartition(t *testing.T) {
	brokers := cluster(t, 2, "in")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1024))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range int64(20_000) {
		recs = append(recs, rec(0, 0, i))
	}
	for i := range int64(10) {
		recs = append(recs, rec(1, 1, 100_000+i))
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	counter := &fetchCounter{}
	var seen seenValues
	env := runnel.NewEnvironment(runnel.WithLogger(quiet))
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", Bounded: true, StopAt: kafka.StopOffsets,
		StopOffsets:   map[kafka.TopicPartition]int64{{Topic: "in", Partition: 0}: 5, {Topic: "in", Partition: 1}: 15},
		ClientOptions: []kgo.Opt{kgo.FetchMaxPartitionBytes(1024), kgo.WithHooks(counter)}}, decode))
	runnel.Map(src, func(v kv) (kv, error) { seen.add(v.F1); return v, nil }).SinkTo(connector.Discard[kv]())
	wait := runJob(ctx, env, "stop fetching")
	waitFor(t, 30*time.Second, func() bool { return seen.n.Load() == 15 }, func() string { return fmt.Sprintf("%d of 15 records", seen.n.Load()) })
	// Time for a client that went on fetching partition 0 to fetch much of it (kfake answers at once).
	time.Sleep(500 * time.Millisecond)
	fetched := counter.get(0)
	var more []*kgo.Record
	for i := int64(10); i < 15; i++ {
		more = append(more, rec(1, 1, 100_000+i))
	}
	if err := cl.ProduceSync(ctx, more...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if res, err := wait(); err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if seen.n.Load() != 20 {
		t.Fatalf("read %d records, want 20", seen.n.Load())
	}
	if fetched > 2000 {
		t.Fatalf("the client fetched %d records of partition 0, which ends at offset 5", fetched)
	}
	t.Logf("fetched %d records of partition 0", fetched)
}

// TestSourceRestoredBoundedKeepsItsStop fails a bounded job over after records were written past the end it
// started with: the restored source stops where the job started to (its checkpoint holds the stopping
// offsets), so the records written since are not read, whatever attempt reads the partition.
func TestSourceRestoredBoundedKeepsItsStop(t *testing.T) {
	brokers := cluster(t, 2, "in")
	// Small batches (some 40 records), fetched one at a time: checkpoints come between them, while a
	// subtask reads.
	const n = 300
	small := func(from int64) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerBatchMaxBytes(1024), kgo.ProducerBatchCompression(kgo.NoCompression()))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, rec(0, 0, i), rec(1, 1, 1000+i))
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Error(err)
		}
	}
	small(0)
	var extra sync.Once
	var seen seenValues
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Millisecond}),
		runnel.WithFailureInjection("check[0]@chk-1"), runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"))
	src := runnel.FromSource(env, kafka.Source(kafka.SourceConfig{Brokers: brokers, Topic: "in", Bounded: true,
		ClientOptions: []kgo.Opt{kgo.FetchMaxPartitionBytes(1024)}}, decode)).Name("kafka")
	runnel.Map(src, func(v kv) (kv, error) {
		seen.add(v.F1)
		// Once both source subtasks emitted a record (and so worked out where to stop), more arrive.
		seen.mu.Lock()
		both := seen.m[0] > 0 && seen.m[1000] > 0
		seen.mu.Unlock()
		if both {
			extra.Do(func() { small(n) })
		}
		time.Sleep(2 * time.Millisecond) // so that the checkpoints and the failure come before the end
		return v, nil
	}).Name("check").SinkTo(connector.Discard[kv]())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "restored stop")
	if err != nil || res.Status != "FINISHED" || len(res.Failovers) != 1 || res.Failovers[0].CheckpointRestored == nil {
		t.Fatalf("%v, %+v (checkpoints %+v): want one failover, from a checkpoint", err, res, res.Checkpoints)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for v := range int64(n) {
		if seen.m[v] == 0 || seen.m[1000+v] == 0 {
			t.Fatalf("value %d or %d not read", v, 1000+v)
		}
	}
	if len(seen.m) != 2*n {
		t.Fatalf("%d distinct values read, want the %d written before the job started", len(seen.m), 2*n)
	}
}

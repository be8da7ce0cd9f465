// Package kafka holds Runnel's Apache Kafka source and sink, built on franz-go (github.com/twmb/franz-go).
//
// The source splits a topic's partitions over its subtasks (partition p goes to subtask p mod P, no
// consumer group) and checkpoints, per partition, the offset after the last record it emitted, so that a
// restored job reads every record again from exactly there: with checkpoints on, each record affects the
// job's state exactly once. Without a checkpoint a subtask starts at the start or the end of its partitions
// (SourceConfig.StartAt). A bounded source stops at the end offsets the partitions had when it started.
//
// The sink produces asynchronously and waits for every record to be acknowledged at each checkpoint and at
// the end of input: at least once, never lost once a checkpoint completed; a record may be written twice
// when the job restarts from a checkpoint taken before it was.
//
// The package uses only Runnel's public API; it owns the Kafka clients of its subtasks and the goroutine
// each source subtask fetches with, and stops them when the subtask closes.
package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/runnel-dev/runnel"
)

// Record is a Kafka record as the source hands it to the decode function. Key and Value belong to the
// record: the decode function may keep them.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Timestamp time.Time
}

// StartAt says where a source subtask starts reading a partition for which no checkpoint holds an offset.
type StartAt int

const (
	// Earliest starts at the oldest record the partition still holds.
	Earliest StartAt = iota
	// Latest starts after the newest record: only records produced from now on.
	Latest
)

// SourceConfig configures a Kafka source.
type SourceConfig struct {
	// Brokers are the seed brokers ("host:port"); required.
	Brokers []string
	// Topic is the topic to read; required.
	Topic string
	// StartAt is where partitions without a checkpointed offset start (default Earliest).
	StartAt StartAt
	// Bounded stops each subtask once it has read its partitions up to the end offsets they had when it
	// started; otherwise the source never ends.
	Bounded bool
	// ClientOptions are passed to every Kafka client the source makes (TLS, SASL, timeouts ...).
	ClientOptions []kgo.Opt
}

func (c *SourceConfig) check() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("kafka source: no brokers: set SourceConfig.Brokers"))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("kafka source: no topic: set SourceConfig.Topic"))
	}
	if c.StartAt != Earliest && c.StartAt != Latest {
		errs = append(errs, fmt.Errorf("kafka source: StartAt %d is neither Earliest nor Latest", c.StartAt))
	}
	return errors.Join(errs...)
}

// Source reads cfg.Topic; decode turns each record into a T (an error fails the job, naming the record).
func Source[T any](cfg SourceConfig, decode func(Record) (T, error)) runnel.Source[T] {
	return &source[T]{cfg: cfg, decode: decode}
}

type source[T any] struct {
	cfg    SourceConfig
	decode func(Record) (T, error)
}

// pollBatch bounds the records one fetch hands over, and so one PollNext.
const pollBatch = 1000

// CreateReader implements runnel.Source. The client connects at the first poll, after a restore.
func (s *source[T]) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[T], error) {
	if err := s.cfg.check(); err != nil {
		return nil, err
	}
	if s.decode == nil {
		return nil, errors.New("kafka source: nil decode function")
	}
	return &sourceReader[T]{src: s, ctx: ctx, offsets: map[int32]int64{}, ready: make(chan struct{}, 1)}, nil
}

type sourceReader[T any] struct {
	src *source[T]
	ctx runnel.RuntimeContext

	started bool
	cl      *kgo.Client
	stop    context.CancelFunc
	done    chan struct{} // closed when the fetch goroutine ended

	// offsets holds, per assigned partition, the offset of the next record to emit; restored ones come
	// from a checkpoint.
	offsets map[int32]int64
	// announced says the partitions were announced to a SplitOutput (a stream with event time).
	announced bool
	// end holds, for a bounded source, the offset each assigned partition ends at.
	end map[int32]int64

	mu      sync.Mutex
	fetched [][]*kgo.Record // batches the fetch goroutine handed over, oldest first
	err     error           // the fetch goroutine's failure
	ready   chan struct{}   // signalled when a batch or an error arrives
}

// start assigns the partitions, decides where each starts and starts fetching.
func (r *sourceReader[T]) start() error {
	r.started = true
	cfg := r.src.cfg
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.ClientOptions...)...)
	if err != nil {
		return fmt.Errorf("kafka source: %w", err)
	}
	defer admin.Close()
	parts, err := partitions(ctx, admin, cfg.Topic)
	if err != nil {
		return err
	}
	p, i := int32(r.ctx.Parallelism()), int32(r.ctx.SubtaskIndex())
	var mine []int32
	for _, part := range parts {
		if part%p == i {
			mine = append(mine, part)
		}
	}
	for part := range r.offsets {
		if !slices.Contains(mine, part) {
			return fmt.Errorf("kafka source: the checkpoint has an offset for partition %d of %q, which is not this subtask's (%d of %d)", part, cfg.Topic, i, p)
		}
	}
	if cfg.Bounded {
		if r.end, err = listOffsets(ctx, admin, cfg.Topic, mine, -1); err != nil {
			return err
		}
		// Where partitions without a checkpointed offset start, so that a bounded subtask knows it is done
		// also when there is nothing to read.
		from := int64(-2) // the oldest record
		if cfg.StartAt == Latest {
			from = -1
		}
		starts, err := listOffsets(ctx, admin, cfg.Topic, mine, from)
		if err != nil {
			return err
		}
		for _, part := range mine {
			if _, ok := r.offsets[part]; !ok {
				r.offsets[part] = starts[part]
			}
		}
	}
	assign := map[int32]kgo.Offset{}
	for _, part := range mine {
		if off, ok := r.offsets[part]; ok {
			assign[part] = kgo.NewOffset().At(off)
		} else if cfg.StartAt == Latest {
			assign[part] = kgo.NewOffset().AtEnd()
		} else {
			assign[part] = kgo.NewOffset().AtStart()
		}
	}
	if len(assign) == 0 {
		return nil // more subtasks than partitions: this one reads nothing
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: assign}),
		kgo.FetchMaxWait(100 * time.Millisecond)}, cfg.ClientOptions...)
	if r.cl, err = kgo.NewClient(opts...); err != nil {
		return fmt.Errorf("kafka source: %w", err)
	}
	fctx, stop := context.WithCancel(context.Background())
	r.stop, r.done = stop, make(chan struct{})
	go r.fetch(fctx)
	return nil
}

// fetch runs on its own goroutine until stopped: it polls batches of records and hands them over.
func (r *sourceReader[T]) fetch(ctx context.Context) {
	defer close(r.done)
	for {
		fs := r.cl.PollRecords(ctx, pollBatch)
		if ctx.Err() != nil {
			return
		}
		var ferr error
		fs.EachError(func(topic string, part int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("kafka source: fetch %s[%d]: %w", topic, part, err)
			}
		})
		var recs []*kgo.Record
		fs.EachRecord(func(rec *kgo.Record) { recs = append(recs, rec) })
		if len(recs) == 0 && ferr == nil {
			continue
		}
		r.mu.Lock()
		if len(recs) > 0 {
			r.fetched = append(r.fetched, recs)
		}
		if ferr != nil && r.err == nil {
			r.err = ferr
		}
		backlog := len(r.fetched)
		r.mu.Unlock()
		select {
		case r.ready <- struct{}{}:
		default:
		}
		if ferr != nil {
			return
		}
		// Do not run far ahead of the task: wait while a few batches are waiting to be emitted.
		for backlog >= 4 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Millisecond):
			}
			r.mu.Lock()
			backlog = len(r.fetched)
			r.mu.Unlock()
		}
	}
}

// PollNext implements runnel.SourceReader: it emits one fetched batch.
func (r *sourceReader[T]) PollNext(out runnel.Collector[T]) (runnel.InputStatus, error) {
	if !r.started {
		if err := r.start(); err != nil {
			return runnel.EndOfInput, err
		}
	}
	if r.cl == nil {
		// More subtasks than partitions: this one has none. A bounded source is done; an unbounded one
		// idles (and takes part in checkpoints) like a subtask whose partitions are quiet.
		if r.src.cfg.Bounded {
			return runnel.EndOfInput, nil
		}
		return runnel.NothingAvailable, nil
	}
	if r.finished() {
		return runnel.EndOfInput, nil
	}
	r.mu.Lock()
	err := r.err
	var batch []*kgo.Record
	if len(r.fetched) > 0 {
		batch = r.fetched[0]
		r.fetched = r.fetched[1:]
	}
	more := len(r.fetched) > 0
	r.mu.Unlock()
	if batch == nil {
		if err != nil {
			return runnel.EndOfInput, err
		}
		return runnel.NothingAvailable, nil
	}
	// On a stream with event time each partition gets its own watermark (runnel.SplitOutput), and the
	// record's Kafka timestamp is the assigner's recordTs.
	splits, _ := out.(runnel.SplitOutput[T])
	if splits != nil && !r.announced {
		// Every assigned partition counts from the start, so that one read first does not carry the
		// watermark past the records of those not read yet.
		r.announced = true
		for part := range r.offsets {
			if end, ok := r.end[part]; ok && r.offsets[part] >= end {
				continue // already at its end: nothing will come
			}
			splits.ForSplit(int(part))
		}
	}
	for _, rec := range batch {
		if end, ok := r.end[rec.Partition]; ok && rec.Offset >= end {
			continue // past the end of a bounded partition
		}
		v, err := r.src.decode(Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset,
			Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp})
		if err != nil {
			return runnel.EndOfInput, fmt.Errorf("kafka source: decode %s[%d]@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
		if splits != nil {
			c := splits.ForSplit(int(rec.Partition))
			if tc, ok := c.(runnel.TimestampedCollector[T]); ok {
				tc.CollectWithTimestamp(v, rec.Timestamp.UnixMilli())
			} else {
				c.Collect(v)
			}
		} else {
			out.Collect(v)
		}
		r.offsets[rec.Partition] = rec.Offset + 1
		if end, ok := r.end[rec.Partition]; ok && splits != nil && rec.Offset+1 >= end {
			splits.ReleaseSplit(int(rec.Partition)) // a bounded partition that ended stops counting
		}
	}
	if r.finished() {
		return runnel.EndOfInput, nil
	}
	if more {
		return runnel.MoreAvailable, nil
	}
	return runnel.NothingAvailable, nil
}

// finished reports whether a bounded source has emitted everything up to its end offsets.
func (r *sourceReader[T]) finished() bool {
	if !r.src.cfg.Bounded {
		return false
	}
	for part, end := range r.end {
		if r.offsets[part] < end {
			return false
		}
	}
	return true
}

// Available implements runnel.SourceReader.
func (r *sourceReader[T]) Available() <-chan struct{} { return r.ready }

// ReplaysDeterministically implements runnel.DeterministicReader, for a subtask restored with the offset
// of exactly one partition: the records of one partition come in offset order. With several, they are
// merged in the order the fetches return them, which a replay would not repeat; with none restored (a
// failure before the first checkpoint) the partitions are not known yet. Either way task failover falls
// back to region failover for this subtask.
func (r *sourceReader[T]) ReplaysDeterministically() bool { return len(r.offsets) == 1 }

// SnapshotState implements runnel.CheckpointedReader: per partition, the offset of the next record.
func (r *sourceReader[T]) SnapshotState(int64) ([]byte, error) {
	parts := make([]int32, 0, len(r.offsets))
	for p := range r.offsets {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	b := binary.AppendUvarint(nil, uint64(len(parts)))
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(p))
		b = binary.AppendUvarint(b, uint64(r.offsets[p]))
	}
	return b, nil
}

// RestoreState implements runnel.CheckpointedReader.
func (r *sourceReader[T]) RestoreState(b []byte) error {
	bad := fmt.Errorf("kafka source: malformed checkpointed offsets % x", b)
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return bad
	}
	b = b[k:]
	for range n {
		p, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return bad
		}
		off, k2 := binary.Uvarint(b[k1:])
		if k2 <= 0 || p > 1<<31-1 {
			return bad
		}
		r.offsets[int32(p)] = int64(off)
		b = b[k1+k2:]
	}
	if len(b) != 0 {
		return bad
	}
	return nil
}

// Close implements runnel.SourceReader: it stops the fetch goroutine and closes the client.
func (r *sourceReader[T]) Close() error {
	if r.stop != nil {
		r.stop()
		<-r.done
	}
	if r.cl != nil {
		r.cl.Close()
	}
	return nil
}

// partitions returns the partitions of topic, or an error that names it when it does not exist.
func partitions(ctx context.Context, cl *kgo.Client, topic string) ([]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafka source: metadata of topic %q: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return nil, fmt.Errorf("kafka source: metadata of topic %q: %d topics in the reply", topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return nil, fmt.Errorf("kafka source: topic %q: %w", topic, err)
	}
	var parts []int32
	for _, p := range resp.Topics[0].Partitions {
		parts = append(parts, p.Partition)
	}
	slices.Sort(parts)
	return parts, nil
}

// listOffsets returns, for each of the partitions, the offset after the newest record (at -1) or of the
// oldest record (at -2).
func listOffsets(ctx context.Context, cl *kgo.Client, topic string, parts []int32, at int64) (map[int32]int64, error) {
	ends := map[int32]int64{}
	if len(parts) == 0 {
		return ends, nil
	}
	req := kmsg.NewPtrListOffsetsRequest()
	t := kmsg.NewListOffsetsRequestTopic()
	t.Topic = topic
	for _, p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = at
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	shards := cl.RequestSharded(ctx, req)
	for _, sh := range shards {
		if sh.Err != nil {
			return nil, fmt.Errorf("kafka source: offsets of %q: %w", topic, sh.Err)
		}
		for _, rt := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return nil, fmt.Errorf("kafka source: offset of %s[%d]: %w", topic, rp.Partition, err)
				}
				ends[rp.Partition] = rp.Offset
			}
		}
	}
	for _, p := range parts {
		if _, ok := ends[p]; !ok {
			// A bounded subtask would take the partition for done and finish without reading it.
			return nil, fmt.Errorf("kafka source: offsets of %q: the broker's answer has no offset for partition %d", topic, p)
		}
	}
	return ends, nil
}

package kafka

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// StartAt says where a source subtask starts reading a partition for which no checkpoint holds an offset,
// when the job starts without a checkpoint. Partitions found later (discovery, or a job restored from a
// checkpoint that does not list them) start at their earliest record, whatever StartAt says: they are
// new, and what was written to them since they appeared belongs to the job's input (Flink does the same).
type StartAt int

const (
	// Earliest starts at the oldest record the partition still holds.
	Earliest StartAt = iota
	// Latest starts after the newest record: only records produced from now on.
	Latest
	// Timestamp starts at the first record whose Kafka timestamp is at or after SourceConfig.StartTimestamp;
	// a partition without one starts at its end.
	Timestamp
	// GroupOffsets starts at the offsets SourceConfig.Group committed; a partition the group has no offset
	// for starts at SourceConfig.GroupFallback.
	GroupOffsets
	// Offsets starts each partition SourceConfig.StartOffsets names at its offset there (Flink's
	// OffsetsInitializer.offsets), and the partitions it does not name at SourceConfig.GroupFallback. An
	// entry for a partition the source does not read, or an offset outside the partition's records (below
	// its log start offset, or above its high watermark), fails the job when it starts, naming the
	// partition, the offset and the partition's range: such an offset asks for records that are gone or
	// not written yet, and reading others instead would hide the mistake. (Flink resets such an offset by
	// its offset reset strategy instead, earliest by default.)
	Offsets
)

func (s StartAt) String() string {
	switch s {
	case Earliest:
		return "Earliest"
	case Latest:
		return "Latest"
	case Timestamp:
		return "Timestamp"
	case GroupOffsets:
		return "GroupOffsets"
	case Offsets:
		return "Offsets"
	}
	return fmt.Sprintf("StartAt(%d)", int(s))
}

// StopAt says where a bounded source (SourceConfig.Bounded) stops reading each partition: before the
// stopping offset, which it works out when a subtask starts (Flink's setBounded with an
// OffsetsInitializer). The stopping offsets go into checkpoints, as Flink keeps them in its splits: a
// subtask restored from one stops where the job was going to (a failover does not add the records
// written since the job started), and works out only those of partitions the checkpoint does not list
// (a job restarted before its first checkpoint works them out afresh). A partition is done once the reader's position, the offset after the last record
// or transaction marker it fetched, reaches its stopping offset: records compacted away, records of
// aborted transactions and markers at the end of a partition do not keep the source waiting for records
// that never come.
type StopAt int

const (
	// StopLatest stops at the end offset each partition has when the job starts: its high watermark, or
	// with read_committed its last stable offset (an open transaction's records are not waited for).
	StopLatest StopAt = iota
	// StopTimestamp stops each partition before its first record whose Kafka timestamp is at or after
	// SourceConfig.StopTimestamp (the offset Kafka's ListOffsets gives for the time); a partition without
	// such a record stops as StopLatest does.
	StopTimestamp
	// StopOffsets stops each partition SourceConfig.StopOffsets names before its offset there, and the
	// others as StopLatest does. A stopping offset past the partition's end waits for the records up to it;
	// one at or below where the partition starts reads nothing of it.
	StopOffsets
)

func (s StopAt) String() string {
	switch s {
	case StopLatest:
		return "StopLatest"
	case StopTimestamp:
		return "StopTimestamp"
	case StopOffsets:
		return "StopOffsets"
	}
	return fmt.Sprintf("StopAt(%d)", int(s))
}

// DefaultDiscoveryInterval is how often an unbounded source looks for new partitions and topics when
// SourceConfig.DiscoveryInterval is zero. (Flink's KafkaSource checks every 5 minutes by default; a
// metadata request every 30 s per subtask costs a broker nothing, and a partition added to a running
// topic is then read within half a minute.)
const DefaultDiscoveryInterval = 30 * time.Second

// DefaultMaxPollRecords is the bound on the records of one poll when SourceConfig.MaxPollRecords is zero.
const DefaultMaxPollRecords = 500

// SourceConfig configures a Kafka source.
type SourceConfig struct {
	// Brokers are the seed brokers ("host:port"); required.
	Brokers []string
	// Topic, Topics and TopicPattern say what to read: the topic Topic and the topics Topics (each must
	// exist when a subtask starts), or every topic whose name TopicPattern matches (Go regexp syntax, so
	// anchor it: `^orders-.*$`), including topics created while the job runs. A pattern excludes the other
	// two; internal topics (__consumer_offsets, ...) are never matched.
	Topic        string
	Topics       []string
	TopicPattern *regexp.Regexp
	// StartAt is where partitions start when the job starts without a checkpoint (default Earliest).
	StartAt StartAt
	// StartTimestamp is the time StartAt Timestamp starts at.
	StartTimestamp time.Time
	// StartOffsets are the offsets StartAt Offsets starts at: per partition, the offset of the first record
	// to read.
	StartOffsets map[TopicPartition]int64
	// GroupFallback is where StartAt GroupOffsets starts a partition the group committed no offset for, and
	// StartAt Offsets a partition StartOffsets does not name: Earliest (the default) or Latest.
	GroupFallback StartAt
	// Group is the consumer group the source commits its offsets to when a checkpoint completes, so that
	// lag dashboards and tools see how far the job got; StartAt GroupOffsets also reads it. The source
	// never joins the group (its subtasks are assigned partitions by the rule in the package doc), and the
	// committed offsets play no part in recovery: a restore takes its offsets from the checkpoint. Empty:
	// nothing is committed.
	Group string
	// ReadUncommitted reads records of open and aborted transactions too. By default the source reads
	// with isolation level read_committed, as Flink's KafkaSource does: it sees only records of committed
	// transactions (and every non-transactional one), and so only what an exactly-once Kafka sink
	// committed.
	ReadUncommitted bool
	// DiscoveryInterval is how often each subtask of an unbounded source looks for new partitions of its
	// topics and for new topics matching TopicPattern (default DefaultDiscoveryInterval); negative: never.
	// A bounded source reads the partitions that exist when it starts.
	DiscoveryInterval time.Duration
	// Bounded stops each subtask once it has read its partitions up to their stopping offsets (StopAt);
	// otherwise the source never ends.
	Bounded bool
	// StopAt is where a Bounded source stops (default StopLatest: the end offsets the partitions had when
	// the job started, with read_committed the last stable offsets).
	StopAt StopAt
	// StopTimestamp is the time StopAt StopTimestamp stops at.
	StopTimestamp time.Time
	// StopOffsets are the offsets StopAt StopOffsets stops at: per partition, the offset of the first
	// record not to read. An entry for a partition the source does not read fails the job when it starts.
	StopOffsets map[TopicPartition]int64
	// MaxPollRecords bounds the records one poll of a subtask emits (default DefaultMaxPollRecords, as the
	// Kafka consumer's max.poll.records). The task takes checkpoint barriers, timers and the buffer
	// timeout's flushes between polls, so a bound keeps a fetch of many thousand records, or slow
	// functions chained to the source, from holding them back.
	MaxPollRecords int
	// DecodeErrors, when its id is set (runnel.NewOutputTag), sends each record the decode function fails
	// on to that side output of the source, with the error, instead of failing the job; read it with
	// runnel.SideOutput(source, tag). The record counts as read (its offset is checkpointed).
	DecodeErrors runnel.OutputTag[DecodeError]
	// ClientOptions are passed to every Kafka client the source makes (TLS, SASL, timeouts ...), after the
	// source's own, which they may override.
	ClientOptions []kgo.Opt
}

// DecodeError is a record the decode function failed on, as the source sends it to the side output
// SourceConfig.DecodeErrors.
type DecodeError struct {
	Record Record
	// Err is the decode function's error message.
	Err string
}

// topics returns the topics of Topic and Topics, without duplicates, in order.
func (c *SourceConfig) topics() []string {
	var ts []string
	for _, t := range append([]string{c.Topic}, c.Topics...) {
		if t != "" && !contains(ts, t) {
			ts = append(ts, t)
		}
	}
	return ts
}

func contains(ts []string, t string) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func (c *SourceConfig) check() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("kafka source: no brokers: set SourceConfig.Brokers"))
	}
	switch {
	case c.TopicPattern == nil && len(c.topics()) == 0:
		errs = append(errs, errors.New("kafka source: no topic: set SourceConfig.Topic, Topics or TopicPattern"))
	case c.TopicPattern != nil && len(c.topics()) > 0:
		errs = append(errs, fmt.Errorf("kafka source: both topics %q and TopicPattern %q: set one of them", c.topics(), c.TopicPattern))
	}
	for _, t := range c.Topics {
		if t == "" {
			errs = append(errs, errors.New("kafka source: an empty name in SourceConfig.Topics"))
			break
		}
	}
	switch c.StartAt {
	case Earliest, Latest:
	case Timestamp:
		if c.StartTimestamp.IsZero() {
			errs = append(errs, errors.New("kafka source: StartAt Timestamp without a StartTimestamp"))
		}
	case GroupOffsets:
		if c.Group == "" {
			errs = append(errs, errors.New("kafka source: StartAt GroupOffsets without a Group"))
		}
	case Offsets:
		if len(c.StartOffsets) == 0 {
			errs = append(errs, errors.New("kafka source: StartAt Offsets without StartOffsets"))
		}
	default:
		errs = append(errs, fmt.Errorf("kafka source: StartAt %d is none of Earliest, Latest, Timestamp, GroupOffsets, Offsets", c.StartAt))
	}
	if c.StartAt != Offsets && len(c.StartOffsets) > 0 {
		errs = append(errs, fmt.Errorf("kafka source: StartOffsets with StartAt %s: set StartAt Offsets to start at them", c.StartAt))
	}
	errs = append(errs, checkOffsets("StartOffsets", c.StartOffsets)...)
	switch c.StopAt {
	case StopLatest:
	case StopTimestamp:
		if c.StopTimestamp.IsZero() {
			errs = append(errs, errors.New("kafka source: StopAt StopTimestamp without a StopTimestamp"))
		}
	case StopOffsets:
		if len(c.StopOffsets) == 0 {
			errs = append(errs, errors.New("kafka source: StopAt StopOffsets without StopOffsets"))
		}
	default:
		errs = append(errs, fmt.Errorf("kafka source: StopAt %d is none of StopLatest, StopTimestamp, StopOffsets", c.StopAt))
	}
	if c.StopAt != StopLatest && !c.Bounded {
		errs = append(errs, fmt.Errorf("kafka source: StopAt %s without Bounded: set Bounded for the source to stop", c.StopAt))
	}
	if c.StopAt != StopOffsets && len(c.StopOffsets) > 0 {
		errs = append(errs, fmt.Errorf("kafka source: StopOffsets with StopAt %s: set StopAt StopOffsets to stop at them", c.StopAt))
	}
	errs = append(errs, checkOffsets("StopOffsets", c.StopOffsets)...)
	if c.MaxPollRecords < 0 {
		errs = append(errs, fmt.Errorf("kafka source: negative MaxPollRecords %d", c.MaxPollRecords))
	}
	if c.GroupFallback != Earliest && c.GroupFallback != Latest {
		errs = append(errs, fmt.Errorf("kafka source: GroupFallback %s is neither Earliest nor Latest", c.GroupFallback))
	}
	return errors.Join(errs...)
}

// checkOffsets checks the entries of StartOffsets or StopOffsets (name) that are wrong whatever the topics
// hold: a partition without a topic name, a negative partition or offset.
func checkOffsets(name string, offs map[TopicPartition]int64) []error {
	var errs []error
	ps := make([]tp, 0, len(offs))
	for p := range offs {
		ps = append(ps, tp{p.Topic, p.Partition})
	}
	sortTPs(ps)
	for _, p := range ps {
		off := offs[TopicPartition{p.topic, p.part}]
		switch {
		case p.topic == "":
			errs = append(errs, fmt.Errorf("kafka source: %s has an entry for partition %d without a topic", name, p.part))
		case p.part < 0:
			errs = append(errs, fmt.Errorf("kafka source: %s names partition %d of topic %q: partitions count from 0", name, p.part, p.topic))
		case off < 0:
			errs = append(errs, fmt.Errorf("kafka source: %s has offset %d for %s: offsets count from 0", name, off, p))
		}
	}
	return errs
}

// discoveryInterval is how often an unbounded source looks for partitions; 0: never.
func (c *SourceConfig) discoveryInterval() time.Duration {
	switch {
	case c.Bounded || c.DiscoveryInterval < 0:
		return 0
	case c.DiscoveryInterval == 0:
		return DefaultDiscoveryInterval
	}
	return c.DiscoveryInterval
}

// maxPollRecords is MaxPollRecords or its default.
func (c *SourceConfig) maxPollRecords() int {
	if c.MaxPollRecords == 0 {
		return DefaultMaxPollRecords
	}
	return c.MaxPollRecords
}

// Source reads the topics of cfg; decode turns each record into a T. An error of decode fails the job,
// naming the topic, partition and offset of the record, unless cfg.DecodeErrors routes such records to a
// side output.
func Source[T any](cfg SourceConfig, decode func(Record) (T, error)) runnel.Source[T] {
	return &source[T]{cfg: cfg, decode: decode}
}

type source[T any] struct {
	cfg    SourceConfig
	decode func(Record) (T, error)
}

// Rescalable implements runnel.RescalableSource: the offsets are union list state, which a restore at
// another parallelism hands to every subtask, and each keeps the partitions the assignment rule gives it.
func (s *source[T]) Rescalable() bool { return true }

// offsetsState names the union list state of the offsets.
const offsetsState = "kafka-offsets"

// stopsState names the union list state of a bounded source's stopping offsets (partOffset elements, the
// offset the partition stops before), so that a restored job stops where the job that started did, as
// Flink keeps the stopping offset in each split: with StopLatest, records written since do not join the
// input because the job failed over.
const stopsState = "kafka-stops"

// partOffset is one element of the offsets state: the offset of the next record of a partition. A
// snapshot also holds one element with Partition -1 (started), so that a restored subtask knows the job
// started before, even if no subtask had a partition then.
type partOffset struct {
	Topic     string
	Partition int32
	Offset    int64
}

// CreateReader implements runnel.Source. The client connects at the first poll, after a restore (the
// offsets state is restored after CreateReader declares it).
func (s *source[T]) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[T], error) {
	if err := s.cfg.check(); err != nil {
		return nil, err
	}
	if s.decode == nil {
		return nil, errors.New("kafka source: nil decode function")
	}
	st, err := runnel.NewUnionListState[partOffset](ctx, offsetsState, codec.MustStruct[partOffset]())
	if err != nil {
		return nil, fmt.Errorf("kafka source: %w", err)
	}
	r := &sourceReader[T]{src: s, ctx: ctx, state: st, offsets: map[tp]int64{}, splits: map[tp]int{},
		restored: map[tp]int64{}, restoredEnd: map[tp]int64{}, ready: make(chan struct{}, 1),
		taken: make(chan struct{}, 1)}
	if s.cfg.Bounded {
		if r.stops, err = runnel.NewUnionListState[partOffset](ctx, stopsState, codec.MustStruct[partOffset]()); err != nil {
			return nil, fmt.Errorf("kafka source: %w", err)
		}
	}
	// The subtask's share of the partitions (to see the assignment), and the commits to the group that
	// failed (they are only logged otherwise).
	m := ctx.Metrics()
	m.Gauge("partitions", func() int64 { return int64(len(r.offsets)) })
	if s.cfg.Group != "" {
		m.Gauge("commit_failures", r.commitFailures.Load)
	}
	return r, nil
}

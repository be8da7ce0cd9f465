// Package kafka holds Runnel's Apache Kafka source and sink, built on franz-go (github.com/twmb/franz-go).
//
// The source reads a topic, a list of topics (SourceConfig.Topic, Topics) or every topic matching a
// pattern (TopicPattern), with isolation level read_committed unless ReadUncommitted. Its subtasks share
// the partitions without a consumer group: partition p of topic t goes to subtask
// ((hashCode(t)*31 & 0x7FFFFFFF) % P + p) % P, with Java's String.hashCode, the rule of Flink's
// KafkaSourceEnumerator, so each topic's partitions spread evenly and every subtask works out its share
// alone. An unbounded source looks for new partitions and matching topics every DiscoveryInterval
// (default 30 s) and reads them from their first record. Each checkpoint holds, per partition, the offset
// after the last record emitted, in union list state: a restored job reads every record again from exactly
// there (with checkpoints, each record affects the job's state exactly once), and a job restored at another
// parallelism hands each partition with its offset to its subtask under the new parallelism. Without a
// checkpoint partitions start at SourceConfig.StartAt: Earliest, Latest, Timestamp, the offsets a
// consumer group committed (GroupOffsets, with GroupFallback), or offsets named per partition (Offsets:
// one outside the partition's records fails the job at its start, naming it); partitions found later
// start at their first record. With SourceConfig.Group the offsets of each completed checkpoint are committed to that
// group, for lag dashboards only: the source never reads them back unless StartAt says GroupOffsets. The
// decode function gets the whole record (Record: topic, partition, offset, key, value, timestamp,
// headers). A record it fails on fails the job, naming its topic, partition and offset, unless
// SourceConfig.DecodeErrors routes such records to a side output. Unreachable brokers, a missing topic or
// one the principal may not describe fail the job when a subtask starts, naming the topic and the brokers.
// A bounded source stops each partition at a stopping offset it works out when the job starts
// (SourceConfig.StopAt): the end offset then (read_committed: the last stable offset), the first offset at
// or after a time, or an offset named per partition; checkpoints hold the stopping offsets, so a restored
// job stops where it was going to, not at records written since. A partition is done when the reader's fetch position
// (the offset after the last record or transaction marker fetched) reaches it, as in Flink, not when a
// record at the offset before it arrives: offsets that hold nothing the reader sees (records compacted
// away or of aborted transactions) end a bounded read too.
//
// The sink produces asynchronously, with the delivery guarantee SinkConfig.Guarantee says. AtLeastOnce (the
// default) waits for every record to be acknowledged at each checkpoint and at the end of input: never lost
// once a checkpoint completed; a record may be written twice when the job restarts from a checkpoint taken
// before it was. ExactlyOnce writes each checkpoint epoch's records in a Kafka transaction that commits when
// the checkpoint completes (a two-phase commit, as Flink's KafkaSink; see docs/checkpoints.md): a
// read_committed reader sees every record once. A job stopped with a savepoint, cancelled or failed for
// good leaves no transaction open: a transaction is committed when its checkpoint completes and aborted
// once no checkpoint that lists it can complete (runnel.CheckpointAbortListener). What a sink subtask that
// failed itself, or whose TaskManager was lost, prepared for checkpoints whose fate it did not hear is
// settled by the restore, or, when the job ends with no restore, by the sink's Settle (runnel.Settler),
// which the process that ran the job (the JobManager of a cluster, which must then reach the brokers) calls
// once the tasks stopped: it commits what the job's restore point lists and aborts the rest. None waits
// for nothing. Records have keys (hashed to a
// partition as Kafka's Java producer does, or placed by SinkConfig.Partition), headers (RecordSink), and on
// a stream with event time the record's event time as their timestamp.
//
// The package uses only Runnel's public API; it owns the Kafka clients of its subtasks and the goroutines
// of each source subtask (fetch, discovery, group commits), and stops them when the subtask closes.
package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record is a Kafka record as the source hands it to the decode function. Key, Value and Headers belong
// to the record: the decode function may keep them.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Timestamp time.Time
	// Headers are the record's headers, in the order the producer wrote them (nil when it has none).
	Headers []kgo.RecordHeader
}

// TopicPartition names one partition of a topic, in SourceConfig.StartOffsets and StopOffsets.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (p TopicPartition) String() string { return tp{p.Topic, p.Partition}.String() }

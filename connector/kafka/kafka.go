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

import "time"

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

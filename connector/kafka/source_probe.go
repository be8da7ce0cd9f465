package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A bounded partition is done when the reader's fetch position reaches its stopping offset, as in Flink's
// KafkaPartitionSplitReader, which compares the consumer's position with it. The position is the offset
// after the last record or control batch fetched, and it can run ahead of every record the client
// delivers: the records before the stopping offset may have been compacted away (a batch keeps its last
// offset when the cleaner empties it), belong to aborted transactions (read_committed skips them, and
// their abort marker may lie past the stopping offset), or be absent for a stopping offset in a gap. franz-go
// advances its position past such offsets but reports it only with the next record it delivers, which may
// never come. So when a poll brings nothing for probeIdle while a partition is short of its stopping
// offset, the fetch goroutine fetches that partition itself from the position of the last record it
// handed over, with the client's isolation level, and processes the answer as the client does
// (kgo.ProcessFetchPartition): if nothing the client would deliver lies before the stopping offset and the
// fetch position gets there, the partition is done. Records the client still buffers lie at or after that
// position, so the probe sees them too and waits for them.

// probeIdle is how long a poll of a bounded source brings nothing before the fetch goroutine probes the
// partitions short of their stopping offset.
const probeIdle = 200 * time.Millisecond

// maxProbeWait bounds the backoff between probes of a partition whose probe found it not done (records
// still to come, or a stopping offset past the partition's end).
const maxProbeWait = 5 * time.Second

// probeBytes bounds one probe fetch.
const probeBytes = 1 << 20

// prober tracks, on the fetch goroutine, the position of each partition of a bounded source (the offset
// after the last record handed over) and probes those short of their stopping offset.
type prober struct {
	pos  map[tp]int64
	end  map[tp]int64 // read-only: the reader's stopping offsets
	next map[tp]time.Time
	wait map[tp]time.Duration
	ids  map[string][16]byte // topic ids, for fetch versions that name topics by id
}

func newProber(end map[tp]int64) *prober {
	return &prober{pos: map[tp]int64{}, end: end, next: map[tp]time.Time{}, wait: map[tp]time.Duration{}, ids: map[string][16]byte{}}
}

// waiting reports whether a partition is short of its stopping offset (false for a nil prober).
func (pr *prober) waiting() bool {
	if pr == nil {
		return false
	}
	for p, pos := range pr.pos {
		if pos < pr.end[p] {
			return true
		}
	}
	return false
}

// saw moves the positions past recs.
func (pr *prober) saw(recs []*kgo.Record) {
	for i, rec := range recs {
		if next := i + 1; next < len(recs) && recs[next].Partition == rec.Partition && recs[next].Topic == rec.Topic {
			continue // a partition's records come in a run, in offset order: its last one says where it stands
		}
		p := tp{rec.Topic, rec.Partition}
		if pos, ok := pr.pos[p]; ok && rec.Offset >= pos {
			pr.pos[p] = rec.Offset + 1
			delete(pr.wait, p) // it moves: probe it promptly when it stops again
		}
	}
}

// probe probes the partitions short of their stopping offset whose backoff has passed, and returns those
// that reached it. A failed probe is tried again later: the client's own fetches report real failures.
func (pr *prober) probe(ctx context.Context, r interface {
	probeEnd(ctx context.Context, ids map[string][16]byte, p tp, from, end int64) (int64, bool, error)
}) []tp {
	var reached []tp
	now := time.Now()
	for p, pos := range pr.pos {
		end := pr.end[p]
		if pos >= end || now.Before(pr.next[p]) {
			continue
		}
		next, done, err := r.probeEnd(ctx, pr.ids, p, pos, end)
		if done {
			pr.pos[p] = end
			reached = append(reached, p)
			continue
		}
		if err == nil && next > pos {
			pr.pos[p] = next // nothing before next but what is skipped: the next probe starts there
		}
		w := min(max(2*pr.wait[p], probeIdle), maxProbeWait)
		pr.wait[p], pr.next[p] = w, now.Add(w)
	}
	sortTPs(reached)
	return reached
}

// probeEnd fetches partition p from offset from until it finds a record the client delivers before end
// (not done: the client delivers it), reaches end (done), or gets no further (not done; next is how far
// it got with nothing to deliver).
func (r *sourceReader[T]) probeEnd(ctx context.Context, ids map[string][16]byte, p tp, from, end int64) (next int64, done bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	id, ok := ids[p.topic]
	if !ok {
		if id, err = r.topicID(ctx, p.topic); err != nil {
			return from, false, err
		}
		ids[p.topic] = id
	}
	opts := kgo.ProcessFetchPartitionOpts{KeepControlRecords: true, Offset: from, Topic: p.topic, Partition: p.part,
		IsolationLevel: kgo.ReadUncommitted()}
	if !r.src.cfg.ReadUncommitted {
		opts.IsolationLevel = kgo.ReadCommitted()
	}
	for from < end {
		leader, _, err := r.cl.PartitionLeader(p.topic, p.part)
		if err != nil || leader < 0 {
			return from, false, fmt.Errorf("kafka source: no leader known for %s: %v", p, err)
		}
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MinBytes = 0
		req.MaxBytes = probeBytes
		req.IsolationLevel = r.isolation()
		req.SessionID, req.SessionEpoch = 0, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = p.topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p.part, from, probeBytes
		rp.CurrentLeaderEpoch, rp.LogStartOffset, rp.LastFetchedEpoch = -1, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := r.cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			return from, false, err
		}
		resp := kresp.(*kmsg.FetchResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return from, false, err
		}
		var part *kmsg.FetchResponseTopicPartition
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				if resp.Topics[i].Partitions[j].Partition == p.part {
					part = &resp.Topics[i].Partitions[j]
				}
			}
		}
		if part == nil {
			return from, false, fmt.Errorf("kafka source: the probe fetch of %s got no answer for it", p)
		}
		if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
			return from, false, err
		}
		opts.Offset = from
		fp, n := kgo.ProcessFetchPartition(opts, part, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return from, false, fp.Err
		}
		for _, rec := range fp.Records {
			if rec.Offset < end {
				return from, false, nil // the client delivers it
			}
		}
		if n <= from {
			return from, false, nil // nothing fetched: the partition ends before the stopping offset, for now
		}
		from = n
	}
	return from, true, nil
}

// topicID returns the id of topic, which fetches from version 13 on name topics by.
func (r *sourceReader[T]) topicID(ctx context.Context, topic string) ([16]byte, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, r.cl)
	if err != nil {
		return [16]byte{}, err
	}
	for _, t := range resp.Topics {
		if t.Topic != nil && *t.Topic == topic {
			return t.TopicID, kerr.ErrorForCode(t.ErrorCode)
		}
	}
	return [16]byte{}, fmt.Errorf("kafka source: the metadata has no topic %q", topic)
}

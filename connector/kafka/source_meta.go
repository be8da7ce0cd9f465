package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// owner returns the subtask of parallelism n that reads partition p: the partitions of a topic go round
// robin over the subtasks, from a subtask that depends on the topic's name, so that each topic's
// partitions are spread evenly (counts differ by at most one) and topics with few partitions do not all
// start at subtask 0. It is the rule of Flink's KafkaSourceEnumerator, with Java's String.hashCode, so a
// partition is read by the subtask of the same index as in Flink:
//
//	((hashCode(topic) * 31) & 0x7FFFFFFF) % n + partition) % n
//
// The rule depends on nothing but the topic, the partition and n, so every subtask computes the same
// assignment alone (no coordinator), also for partitions found later and after a rescale.
func owner(p tp, n int) int {
	start := int((javaHash(p.topic)*31)&0x7FFFFFFF) % n
	return (start + int(p.part)) % n
}

// javaHash is Java's String.hashCode of s: over its UTF-16 code units, h = 31*h + c, in 32-bit arithmetic.
func javaHash(s string) int32 {
	var h int32
	for _, c := range utf16.Encode([]rune(s)) {
		h = 31*h + int32(c)
	}
	return h
}

// findPartitions returns the partitions of the topics cfg subscribes to, by topic. At the start (strict)
// a listed topic that does not exist, may not be described, or whose metadata has another error fails,
// with an error that names the topic and the brokers; during discovery such a topic is left out for now.
// Unreachable brokers fail either way.
func findPartitions(ctx context.Context, cl *kgo.Client, cfg *SourceConfig, strict bool) (map[string][]tp, error) {
	brokers := strings.Join(cfg.Brokers, ",")
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	listed := cfg.topics()
	if cfg.TopicPattern == nil {
		for _, t := range listed {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
	} else {
		req.Topics = nil // all topics
	}
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
				err = fmt.Errorf("no answer within %s: %w", startTimeout, err)
			}
			return nil, fmt.Errorf("kafka source: cannot get the metadata of the topics from the brokers %s: %w", brokers, err)
		}
		found := map[string][]tp{}
		var retry error
		for _, t := range resp.Topics {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			if cfg.TopicPattern != nil && (t.IsInternal || !cfg.TopicPattern.MatchString(name)) {
				continue
			}
			if cfg.TopicPattern == nil && !contains(listed, name) {
				continue
			}
			if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
				switch {
				case !strict || cfg.TopicPattern != nil:
					continue // a topic being created or deleted; the next discovery sees it settled
				case errors.Is(err, kerr.UnknownTopicOrPartition):
					return nil, fmt.Errorf("kafka source: topic %q does not exist on the brokers %s", name, brokers)
				case errors.Is(err, kerr.TopicAuthorizationFailed):
					return nil, fmt.Errorf("kafka source: not authorized to describe topic %q on the brokers %s (the principal needs DESCRIBE and READ on it; "+
						"Kafka says so also of a topic that does not exist, to one who may not describe it): %w", name, brokers, err)
				case kerr.IsRetriable(err):
					retry = fmt.Errorf("kafka source: topic %q on the brokers %s: %w", name, brokers, err)
					continue
				default:
					return nil, fmt.Errorf("kafka source: topic %q on the brokers %s: %w", name, brokers, err)
				}
			}
			for _, p := range t.Partitions {
				found[name] = append(found[name], tp{name, p.Partition})
			}
		}
		if strict && cfg.TopicPattern == nil && retry == nil {
			for _, t := range listed {
				if _, ok := found[t]; !ok {
					return nil, fmt.Errorf("kafka source: the brokers %s did not describe topic %q", brokers, t)
				}
			}
		}
		if retry == nil {
			return found, nil
		}
		// A topic just created may have no leader for a moment.
		select {
		case <-ctx.Done():
			return nil, retry
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// listOffsets returns, for each of the partitions, the offset after the newest record (at -1), of the
// oldest record (at -2), or of the first record at or after the time at (in ms; -1 when there is none).
// isolation 1 (read_committed) makes the end the last stable offset.
func listOffsets(ctx context.Context, cl *kgo.Client, parts []tp, at int64, isolation int8) (map[tp]int64, error) {
	out := map[tp]int64{}
	if len(parts) == 0 {
		return out, nil
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	byTopic := map[string]int{}
	for _, p := range parts {
		i, ok := byTopic[p.topic]
		if !ok {
			i = len(req.Topics)
			byTopic[p.topic] = i
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = p.topic
			req.Topics = append(req.Topics, t)
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p.part
		rp.Timestamp = at
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			return nil, fmt.Errorf("kafka source: list offsets: %w", sh.Err)
		}
		for _, rt := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return nil, fmt.Errorf("kafka source: offset of partition %d of topic %q: %w", rp.Partition, rt.Topic, err)
				}
				out[tp{rt.Topic, rp.Partition}] = rp.Offset
			}
		}
	}
	for _, p := range parts {
		if _, ok := out[p]; !ok {
			// A bounded subtask would take the partition for done and finish without reading it.
			return nil, fmt.Errorf("kafka source: offsets of %q: the broker's answer has no offset for partition %d", p.topic, p.part)
		}
	}
	return out, nil
}

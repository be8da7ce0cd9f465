package main

import (
	be "encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

// TestBenchKafka runs `runnel bench kafka` at a tiny size on the real broker, both guarantees, and keeps
// its topics: the figures must be sane, and each output topic, read read_committed, must hold every input
// record exactly once, with each key's running counts 1, 2, 3, ... in order (the keyed state saw each
// record once too).
func TestBenchKafka(t *testing.T) {
	b := kafkabroker.Start(t)
	const records, keys = 3000, 7
	in := b.Name("bench-in")
	stdout, stderr, code := runCLI(t, "bench", "kafka", "--bootstrap", b.Addr, "--input-topic", in, "--records", "3000",
		"--keys", "7", "--rounds", "1", "--warmup=false", "--checkpoint-interval", "200ms",
		"--rate", "1000", "--latency-duration", "6s", "--latency-skip", "500ms", "--keep-topics", "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var res kafkaBenchResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, stdout)
	}
	if res.Engine != "runnel" || res.Records != records || res.Keys != keys || res.Parallelism != 2 || res.CheckpointIntervalMs != 200 ||
		res.InputTopic != in || len(res.Throughput) != 2 || len(res.Latency) != 2 || res.Cores < 1 {
		t.Fatalf("unexpected result: %+v", res)
	}
	if res.RatioEOSALO <= 0 {
		t.Errorf("ratio_eos_alo %v, want positive", res.RatioEOSALO)
	}
	for _, r := range res.Throughput {
		if r.RecordsPerS <= 0 || r.ElapsedMs <= 0 || r.Records != records || r.Duplicates != 0 || r.Checkpoints < 1 {
			t.Errorf("throughput run %+v: want positive records/s, %d records, no duplicates and a checkpoint (the final one)", r, records)
		}
	}
	for _, r := range res.Latency {
		// 1000/s for 6 s; the first 500 ms are not measured, nor what came before the first output (a
		// slow start on a loaded machine can take seconds, so only some samples are certain).
		if r.Produced != 6000 || r.Samples < 1 || r.Samples > 6000 || r.P50Ms <= 0 || r.P50Ms > r.P99Ms || r.P99Ms > r.MaxMs || r.Duplicates != 0 {
			t.Errorf("latency run %+v: want 6000 produced, 1-6000 samples, 0 < p50 <= p99 <= max, no duplicates", r)
		}
	}
	// Exactly once: a read_committed reader sees a record only once its checkpoint completed, about
	// half an interval later on average.
	eos, alo := res.Summary["exactly-once"], res.Summary["at-least-once"]
	if eos.RecordsPerS <= 0 || alo.RecordsPerS <= 0 || eos.P50Ms <= 0 || alo.P50Ms <= 0 {
		t.Errorf("summary %+v: want both guarantees' throughput and latency", res.Summary)
	}
	if eos.P99Ms < 50 {
		t.Errorf("exactly-once p99 latency %.1f ms with checkpoints every 200 ms: records were visible before their checkpoint completed", eos.P99Ms)
	}

	check := func(topic string, want int64) {
		t.Helper()
		recs := b.ReadTopic(t, topic, kgo.ReadCommitted())
		if int64(len(recs)) != want {
			t.Errorf("%s holds %d committed records, want %d", topic, len(recs), want)
		}
		seen := make([]bool, want)
		counts := map[uint64]uint64{}
		for _, r := range recs {
			if len(r.Key) != 8 || len(r.Value) != kafkaBenchOutValue {
				t.Fatalf("%s: record of %d+%d bytes", topic, len(r.Key), len(r.Value))
			}
			seq, count, key := be.BigEndian.Uint64(r.Value[8:]), be.BigEndian.Uint64(r.Value[16:]), be.BigEndian.Uint64(r.Key)
			if seq >= uint64(want) || seen[seq] {
				t.Fatalf("%s: sequence number %d out of range or twice", topic, seq)
			}
			seen[seq] = true
			if seq%keys != key {
				t.Fatalf("%s: sequence number %d under key %d", topic, seq, key)
			}
			// A key's records are in one partition, in the order they were counted.
			counts[key]++
			if count != counts[key] {
				t.Fatalf("%s: key %d has count %d where %d was due", topic, key, count, counts[key])
			}
		}
	}
	for _, r := range res.Throughput {
		if r.Guarantee == "exactly-once" {
			check(r.OutputTopic, records)
			if open := b.OngoingTransactions(t, r.OutputTopic); len(open) != 0 {
				t.Errorf("transactions left open by the finished exactly-once run: %v", open)
			}
		}
	}
	for _, r := range res.Latency {
		if r.Guarantee == "exactly-once" {
			check(r.OutputTopic, r.Produced)
		}
	}
	if !strings.Contains(stderr, "round 1 exactly-once") {
		t.Errorf("no progress on stderr:\n%s", stderr)
	}
}

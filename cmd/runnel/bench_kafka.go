package main

import (
	"context"
	be "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector/kafka"
	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

// kafkaBenchConfig configures `runnel bench kafka`.
type kafkaBenchConfig struct {
	bootstrap   string
	serve       bool
	inputTopic  string
	records     int64
	keys        int64
	guarantee   string
	eosFirst    bool
	interval    time.Duration
	unaligned   unalignedFlags
	parallelism int
	rounds      int
	warmup      bool
	rate        float64
	latencyDur  time.Duration
	latencySkip time.Duration
	keepTopics  bool
	cpuProfile  string
}

// The record format, shared with the Flink harness (bench/flink, job kafka). Input: key = the key as 8
// bytes big endian; value = the produce wall time (Unix nanoseconds) and the record's sequence number,
// 8 bytes each. Output: the same key; value = produce time, sequence number and the key's running count.
const (
	kafkaBenchInValue  = 16
	kafkaBenchOutValue = 24
	// kafkaBenchPartitions is the partition count of every topic of the benchmark.
	kafkaBenchPartitions = 3
)

// kafkaBenchRec is the record of the benchmark's pipeline.
type kafkaBenchRec struct {
	Key      int64
	Seq      int64
	Produced int64 // Unix nanoseconds
	Count    int64
}

// kafkaThroughputRun is one throughput measurement.
type kafkaThroughputRun struct {
	Round       int     `json:"round"`
	Guarantee   string  `json:"guarantee"`
	Records     int64   `json:"records"`
	ElapsedMs   float64 `json:"elapsed_ms"`
	RecordsPerS float64 `json:"records_per_s"`
	JobMs       float64 `json:"job_ms"`
	Checkpoints int64   `json:"checkpoints"`
	Duplicates  int64   `json:"duplicates"`
	OutputTopic string  `json:"output_topic"`
}

// kafkaLatencyRun is one latency measurement.
type kafkaLatencyRun struct {
	Round     int     `json:"round"`
	Guarantee string  `json:"guarantee"`
	Rate      float64 `json:"rate"`
	Produced  int64   `json:"produced"`
	Samples   int     `json:"samples"`
	// FirstOutputMs is the time from the start of the input to the first output record read.
	FirstOutputMs float64 `json:"first_output_ms"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	MaxMs         float64 `json:"max_ms"`
	Duplicates    int64   `json:"duplicates"`
	InputTopic    string  `json:"input_topic"`
	OutputTopic   string  `json:"output_topic"`
}

// kafkaSummary is the medians and ranges of one guarantee's runs.
type kafkaSummary struct {
	RecordsPerS    float64 `json:"records_per_s"`
	RecordsPerSMin float64 `json:"records_per_s_min"`
	RecordsPerSMax float64 `json:"records_per_s_max"`
	P50Ms          float64 `json:"p50_ms"`
	P50MsMin       float64 `json:"p50_ms_min"`
	P50MsMax       float64 `json:"p50_ms_max"`
	P99Ms          float64 `json:"p99_ms"`
	P99MsMin       float64 `json:"p99_ms_min"`
	P99MsMax       float64 `json:"p99_ms_max"`
}

// kafkaBenchResult is what `runnel bench kafka --json` prints; the Flink harness's kafka job prints the
// same fields.
type kafkaBenchResult struct {
	Engine               string                  `json:"engine"`
	Bootstrap            string                  `json:"bootstrap"`
	InputTopic           string                  `json:"input_topic"`
	Records              int64                   `json:"records"`
	Keys                 int64                   `json:"keys"`
	Parallelism          int                     `json:"parallelism"`
	CheckpointIntervalMs int64                   `json:"checkpoint_interval_ms"`
	Throughput           []kafkaThroughputRun    `json:"throughput"`
	Latency              []kafkaLatencyRun       `json:"latency"`
	Summary              map[string]kafkaSummary `json:"summary"`
	// RatioEOSALO is the median exactly-once throughput over the median at-least-once one.
	RatioEOSALO float64 `json:"ratio_eos_alo,omitempty"`
	LoadAvg1m   float64 `json:"load_avg_1m"`
	Cores       int     `json:"cores"`
}

const kafkaBenchLong = `Kafka source (3 partitions, read_committed) -> keyBy -> running count per key (Reduce) -> Kafka sink, at
--parallelism with checkpoints every --checkpoint-interval, under the sink's at-least-once and exactly-once
guarantees, on the real broker (internal/kafkabroker, started here) or on --bootstrap.

Two measurements per round, each guarantee in turn (at-least-once first, or exactly-once with --eos-first):

  throughput  the input topic is filled once with --records records (key = record % --keys) before any
              run; each run reads it all (a bounded source) into a fresh output topic. records/s =
              records / (the time a read_committed reader of the output has seen every record - the
              first record the source decoded). Under exactly-once the last records become visible
              when the final checkpoint commits their transaction: that tail is part of the time.
  latency     a fresh input topic is produced at a steady --rate for --latency-duration while the
              job runs (unbounded source); each record carries its produce wall time, and a
              read_committed reader of the output takes, per record, the time from produce to when
              it reads the record. p50/p99 of the records produced after --latency-skip (the job's
              start) and after the reader read the first output record (the pipeline runs end to
              end) are reported; first_output_ms says when that was. Under exactly-once a record becomes visible when the checkpoint
              after it completes and its transaction commits: about half the checkpoint interval on
              average, at most the interval plus the checkpoint's duration.

With --rounds R: a discarded warm-up (unless --warmup=false: a throughput run of each guarantee over the
same input), then R rounds; medians and ranges are printed, and the ratio of the exactly-once throughput
to the at-least-once one. Output topics are deleted after each run unless --keep-topics.

--serve starts the broker (or uses --bootstrap), fills --input-topic with --records records, prints one
JSON line {"bootstrap","input_topic","records"} and waits for SIGINT or SIGTERM: for bench/flink/kafka.sh,
which runs this command and the Flink harness's kafka job on the same broker and the same input.`

func newKafkaBenchCmd() *cobra.Command {
	var cfg kafkaBenchConfig
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "kafka",
		Short: "Kafka -> keyed running count -> Kafka on the real broker: exactly-once vs at-least-once throughput, read_committed latency",
		Long:  kafkaBenchLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.validate(); err != nil {
				return usageError(err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopProfile, err := startCPUProfile(cfg.cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			out := cmd.OutOrStdout()
			addr := cfg.bootstrap
			if addr == "" {
				b, stopBroker, err := kafkabroker.StartMain()
				if err != nil {
					return fmt.Errorf("bench kafka: starting the Kafka broker (or give --bootstrap HOST:PORT): %w", err)
				}
				defer stopBroker()
				addr = b.Addr
			}
			bk, err := newKafkaBench(addr, cfg)
			if err != nil {
				return err
			}
			defer bk.close()
			if cfg.serve {
				return bk.serve(ctx, out)
			}
			res, err := bk.run(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(out).Encode(res)
			}
			writeKafkaBench(out, res)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.bootstrap, "bootstrap", "", "an external broker HOST:PORT (default: start the real broker, internal/kafkabroker)")
	fl.BoolVar(&cfg.serve, "serve", false, "start the broker, fill --input-topic, print its address and wait for a signal (for bench/flink/kafka.sh)")
	fl.StringVar(&cfg.inputTopic, "input-topic", "", "the throughput input topic: used as it is when it exists (it must hold --records records), else created and filled (default: a fresh topic, deleted at the end)")
	fl.Int64Var(&cfg.records, "records", 10_000_000, "records of the throughput input (0: no throughput runs)")
	fl.Int64Var(&cfg.keys, "keys", 1000, "distinct keys")
	fl.StringVar(&cfg.guarantee, "guarantee", "both", "the sink's delivery guarantee: exactly-once, at-least-once or both (alternating)")
	fl.BoolVar(&cfg.eosFirst, "eos-first", false, "with --guarantee both: exactly-once first in each round (bench/flink/kafka.sh alternates the order)")
	fl.DurationVar(&cfg.interval, "checkpoint-interval", time.Second, "checkpoint interval")
	cfg.unaligned.register(fl, "every run")
	fl.IntVar(&cfg.parallelism, "parallelism", 2, "parallelism of every operator")
	fl.IntVar(&cfg.rounds, "rounds", 3, "measured rounds; medians and ranges are reported")
	fl.BoolVar(&cfg.warmup, "warmup", true, "run a discarded throughput run of each guarantee first")
	fl.Float64Var(&cfg.rate, "rate", 20_000, "latency runs: records per second produced to the input")
	fl.DurationVar(&cfg.latencyDur, "latency-duration", 10*time.Second, "latency runs: how long the input is produced (0: no latency runs)")
	fl.DurationVar(&cfg.latencySkip, "latency-skip", 2*time.Second, "latency runs: records produced this soon after the start are not measured (the job's start)")
	fl.BoolVar(&cfg.keepTopics, "keep-topics", false, "keep the output topics (and the latency runs' input topics)")
	fl.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole command to this file")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func (c kafkaBenchConfig) guarantees() []string {
	if c.guarantee == "both" && c.eosFirst {
		return []string{"exactly-once", "at-least-once"}
	}
	if c.guarantee == "both" {
		return []string{"at-least-once", "exactly-once"}
	}
	return []string{c.guarantee}
}

func (c kafkaBenchConfig) validate() error {
	var errs []error
	switch c.guarantee {
	case "exactly-once", "at-least-once", "both":
	default:
		errs = append(errs, fmt.Errorf("invalid --guarantee %q: use exactly-once, at-least-once or both", c.guarantee))
	}
	if c.records < 0 {
		errs = append(errs, fmt.Errorf("invalid --records %d: must not be negative", c.records))
	}
	if c.keys < 1 {
		errs = append(errs, fmt.Errorf("invalid --keys %d: must be at least 1", c.keys))
	}
	if c.interval <= 0 {
		errs = append(errs, fmt.Errorf("invalid --checkpoint-interval %s: must be positive (exactly-once commits at checkpoints)", c.interval))
	}
	if err := c.unaligned.validate(true, ""); err != nil {
		errs = append(errs, err)
	}
	if c.parallelism < 1 {
		errs = append(errs, fmt.Errorf("invalid --parallelism %d: must be at least 1", c.parallelism))
	}
	if c.rounds < 1 {
		errs = append(errs, fmt.Errorf("invalid --rounds %d: must be at least 1", c.rounds))
	}
	if c.latencyDur < 0 || c.latencySkip < 0 || (c.latencyDur > 0 && c.latencySkip >= c.latencyDur) {
		errs = append(errs, fmt.Errorf("invalid --latency-duration %s with --latency-skip %s: neither negative, and the skip shorter", c.latencyDur, c.latencySkip))
	}
	if c.latencyDur > 0 && c.rate <= 0 {
		errs = append(errs, fmt.Errorf("invalid --rate %v: must be positive", c.rate))
	}
	if c.serve && c.records == 0 {
		errs = append(errs, errors.New("--serve fills the input topic: set --records"))
	}
	return errors.Join(errs...)
}

// kafkaBench is one invocation: the broker's address, an admin client, the names it made.
type kafkaBench struct {
	cfg   kafkaBenchConfig
	addr  string
	cl    *kgo.Client
	adm   *kadm.Client
	base  string
	n     int
	input string
	// ownInput: the input topic was made by this invocation and goes at the end.
	ownInput bool
}

func newKafkaBench(addr string, cfg kafkaBenchConfig) (*kafkaBench, error) {
	// A short metadata age: the client learns of each topic it creates at once, not after kgo's 5 s.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("bench kafka: %w", err)
	}
	return &kafkaBench{cfg: cfg, addr: addr, cl: cl, adm: kadm.NewClient(cl),
		base: "runnel-bench-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().Unix(), 36)}, nil
}

func (k *kafkaBench) close() {
	if k.ownInput && !k.cfg.keepTopics {
		k.deleteTopics(k.input)
	}
	k.cl.Close()
}

// name returns a topic name (or transactional id prefix) no earlier call returned.
func (k *kafkaBench) name(what string) string {
	k.n++
	return fmt.Sprintf("%s-%s-%d", k.base, what, k.n)
}

func (k *kafkaBench) createTopic(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := k.adm.CreateTopic(ctx, kafkaBenchPartitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("bench kafka: creating topic %s at %s: %w", name, k.addr, err)
	}
	for {
		md, err := k.adm.Metadata(ctx, name)
		if err == nil {
			if td, ok := md.Topics[name]; ok && td.Err == nil && len(td.Partitions) == kafkaBenchPartitions {
				led := true
				for _, p := range td.Partitions {
					led = led && p.Err == nil && p.Leader >= 0
				}
				if led {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench kafka: topic %s has no leader for each partition after 30 s: %v", name, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (k *kafkaBench) deleteTopics(names ...string) {
	if k.cfg.keepTopics || len(names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k.adm.DeleteTopics(ctx, names...) // best effort: a topic left behind costs disk only
}

// topicRecords returns the records in topic (the sum of its partitions' end offsets), or -1 when it does
// not exist.
func (k *kafkaBench) topicRecords(ctx context.Context, topic string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	td, err := k.adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("bench kafka: describing topic %s: %w", topic, err)
	}
	if !td.Has(topic) {
		return -1, nil
	}
	ends, err := k.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("bench kafka: listing the end offsets of %s: %w", topic, err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

// prepareInput makes sure the throughput input exists and holds cfg.records records.
func (k *kafkaBench) prepareInput(ctx context.Context) error {
	k.input = k.cfg.inputTopic
	if k.input == "" {
		k.input = k.name("in")
	}
	n, err := k.topicRecords(ctx, k.input)
	if err != nil {
		return err
	}
	switch {
	case n == k.cfg.records:
		return nil
	case n >= 0:
		return usageError(fmt.Errorf("the input topic %s holds %d records, not --records %d", k.input, n, k.cfg.records))
	}
	if err := k.createTopic(ctx, k.input); err != nil {
		return err
	}
	k.ownInput = k.cfg.inputTopic == ""
	return k.fill(ctx, k.input, k.cfg.records)
}

// fill produces n records to topic as fast as the broker takes them.
func (k *kafkaBench) fill(ctx context.Context, topic string, n int64) error {
	p, err := kgo.NewClient(kgo.SeedBrokers(k.addr), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(10*time.Millisecond),
		kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return fmt.Errorf("bench kafka: %w", err)
	}
	defer p.Close()
	var failed atomic.Pointer[error]
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	for i := range n {
		if e := failed.Load(); e != nil {
			break
		}
		p.Produce(ctx, kafkaBenchInput(i, k.cfg.keys, time.Now()), done)
	}
	if err := p.Flush(ctx); err != nil {
		return fmt.Errorf("bench kafka: filling %s: %w", topic, err)
	}
	if e := failed.Load(); e != nil {
		return fmt.Errorf("bench kafka: filling %s: %w", topic, *e)
	}
	return nil
}

// kafkaBenchInput is input record seq.
func kafkaBenchInput(seq, keys int64, produced time.Time) *kgo.Record {
	v := make([]byte, 0, kafkaBenchInValue)
	v = be.BigEndian.AppendUint64(v, uint64(produced.UnixNano()))
	v = be.BigEndian.AppendUint64(v, uint64(seq))
	return &kgo.Record{Key: be.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(seq%keys)), Value: v}
}

func (k *kafkaBench) serve(ctx context.Context, out io.Writer) error {
	if err := k.prepareInput(ctx); err != nil {
		return err
	}
	if err := json.NewEncoder(out).Encode(map[string]any{"bootstrap": k.addr, "input_topic": k.input, "records": k.cfg.records}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (k *kafkaBench) run(ctx context.Context, log io.Writer) (kafkaBenchResult, error) {
	cfg := k.cfg
	res := kafkaBenchResult{Engine: "runnel", Bootstrap: k.addr, Records: cfg.records, Keys: cfg.keys, Parallelism: cfg.parallelism,
		CheckpointIntervalMs: cfg.interval.Milliseconds(), Summary: map[string]kafkaSummary{}}
	if cfg.records > 0 {
		fmt.Fprintf(log, "bench kafka: filling the input with %d records\n", cfg.records)
		if err := k.prepareInput(ctx); err != nil {
			return res, err
		}
		res.InputTopic = k.input
		if cfg.warmup {
			for _, g := range cfg.guarantees() {
				r, err := k.throughputRun(ctx, g)
				if err != nil {
					return res, fmt.Errorf("warm-up: %w", err)
				}
				fmt.Fprintf(log, "bench kafka: warm-up %-13s %10.0f records/s (discarded)\n", g, r.RecordsPerS)
			}
		}
	}
	for round := 1; round <= cfg.rounds; round++ {
		for _, g := range cfg.guarantees() {
			if cfg.records == 0 {
				break
			}
			r, err := k.throughputRun(ctx, g)
			if err != nil {
				return res, fmt.Errorf("round %d, %s throughput: %w", round, g, err)
			}
			r.Round = round
			fmt.Fprintf(log, "bench kafka: round %d %-13s %10.0f records/s (%d checkpoints)\n", round, g, r.RecordsPerS, r.Checkpoints)
			res.Throughput = append(res.Throughput, r)
		}
		for _, g := range cfg.guarantees() {
			if cfg.latencyDur == 0 {
				break
			}
			r, err := k.latencyRun(ctx, g)
			if err != nil {
				return res, fmt.Errorf("round %d, %s latency: %w", round, g, err)
			}
			r.Round = round
			fmt.Fprintf(log, "bench kafka: round %d %-13s latency p50 %.1f ms p99 %.1f ms (%d samples)\n", round, g, r.P50Ms, r.P99Ms, r.Samples)
			res.Latency = append(res.Latency, r)
		}
	}
	summarizeKafkaBench(&res)
	res.LoadAvg1m, res.Cores = loadAvg1m(), runtime.NumCPU()
	return res, nil
}

// summarizeKafkaBench fills in the medians, the ranges and the ratio.
func summarizeKafkaBench(res *kafkaBenchResult) {
	by := map[string]*kafkaSummary{}
	get := func(g string) *kafkaSummary {
		if by[g] == nil {
			by[g] = &kafkaSummary{}
		}
		return by[g]
	}
	tp, p50, p99 := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for _, r := range res.Throughput {
		tp[r.Guarantee] = append(tp[r.Guarantee], r.RecordsPerS)
	}
	for _, r := range res.Latency {
		p50[r.Guarantee] = append(p50[r.Guarantee], r.P50Ms)
		p99[r.Guarantee] = append(p99[r.Guarantee], r.P99Ms)
	}
	for g, v := range tp {
		s := get(g)
		s.RecordsPerS, s.RecordsPerSMin, s.RecordsPerSMax = medianRange(v)
	}
	for g, v := range p50 {
		s := get(g)
		s.P50Ms, s.P50MsMin, s.P50MsMax = medianRange(v)
		s.P99Ms, s.P99MsMin, s.P99MsMax = medianRange(p99[g])
	}
	for g, s := range by {
		res.Summary[g] = *s
	}
	if eos, alo := res.Summary["exactly-once"], res.Summary["at-least-once"]; eos.RecordsPerS > 0 && alo.RecordsPerS > 0 {
		res.RatioEOSALO = eos.RecordsPerS / alo.RecordsPerS
	}
}

func medianRange(v []float64) (med, lo, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	med = s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return med, s[0], s[len(s)-1]
}

func writeKafkaBench(out io.Writer, res kafkaBenchResult) {
	fmt.Fprintf(out, "kafka -> keyBy -> running count -> kafka: parallelism %d, checkpoints every %s, %d keys, broker %s\n",
		res.Parallelism, time.Duration(res.CheckpointIntervalMs)*time.Millisecond, res.Keys, res.Bootstrap)
	for _, g := range []string{"at-least-once", "exactly-once"} {
		s, ok := res.Summary[g]
		if !ok {
			continue
		}
		if s.RecordsPerS > 0 {
			fmt.Fprintf(out, "%-13s throughput %10.0f records/s (range %.0f-%.0f, %d records)\n", g, s.RecordsPerS, s.RecordsPerSMin, s.RecordsPerSMax, res.Records)
		}
		if s.P50Ms > 0 {
			fmt.Fprintf(out, "%-13s latency    p50 %7.1f ms (%.1f-%.1f)  p99 %7.1f ms (%.1f-%.1f), read_committed\n", g,
				s.P50Ms, s.P50MsMin, s.P50MsMax, s.P99Ms, s.P99MsMin, s.P99MsMax)
		}
	}
	if res.RatioEOSALO > 0 {
		fmt.Fprintf(out, "ratio exactly-once / at-least-once throughput %.3f\n", res.RatioEOSALO)
	}
	fmt.Fprintf(out, "load average (1 min) %.2f on %d cores\n", res.LoadAvg1m, res.Cores)
}

// checkpointConfig is the runs' checkpoint configuration.
func (k *kafkaBench) checkpointConfig() runnel.CheckpointConfig {
	cc := runnel.CheckpointConfig{Interval: k.cfg.interval}
	k.cfg.unaligned.apply(&cc)
	return cc
}

// kafkaBenchJob builds the pipeline: source (decode notes the first record in first) -> keyBy -> running
// count -> sink.
func (k *kafkaBench) kafkaBenchJob(src kafka.SourceConfig, sink kafka.SinkConfig, first *atomic.Int64) *runnel.Environment {
	env := runnel.NewEnvironment(runnel.WithParallelism(k.cfg.parallelism), runnel.WithLogger(slog.New(slog.DiscardHandler)),
		runnel.WithCheckpointing(k.checkpointConfig()))
	decode := func(r kafka.Record) (kafkaBenchRec, error) {
		if first.Load() == 0 {
			first.CompareAndSwap(0, time.Now().UnixNano())
		}
		if len(r.Key) != 8 || len(r.Value) != kafkaBenchInValue {
			return kafkaBenchRec{}, fmt.Errorf("record of %d+%d bytes, want 8+%d", len(r.Key), len(r.Value), kafkaBenchInValue)
		}
		return kafkaBenchRec{Key: int64(be.BigEndian.Uint64(r.Key)), Produced: int64(be.BigEndian.Uint64(r.Value)),
			Seq: int64(be.BigEndian.Uint64(r.Value[8:])), Count: 1}, nil
	}
	in := runnel.FromSource(env, kafka.Source(src, decode)).Name("kafka-in").Uid("kafka-in").WithCodec(codec.MustStruct[kafkaBenchRec]())
	counts := runnel.Reduce(runnel.KeyBy(in, func(v kafkaBenchRec) int64 { return v.Key }),
		func(acc, v kafkaBenchRec) (kafkaBenchRec, error) { v.Count += acc.Count; return v, nil }).Name("count").Uid("count")
	counts.SinkTo(kafka.Sink(sink, func(v kafkaBenchRec, key, value []byte) ([]byte, []byte, error) {
		value = be.BigEndian.AppendUint64(value, uint64(v.Produced))
		value = be.BigEndian.AppendUint64(value, uint64(v.Seq))
		return be.BigEndian.AppendUint64(key, uint64(v.Key)), be.BigEndian.AppendUint64(value, uint64(v.Count)), nil
	})).Name("kafka-out").Uid("kafka-out")
	return env
}

func (k *kafkaBench) sinkConfig(topic, guarantee string) kafka.SinkConfig {
	c := kafka.SinkConfig{Brokers: []string{k.addr}, Topic: topic, Guarantee: kafka.AtLeastOnce}
	if guarantee == "exactly-once" {
		c.Guarantee, c.TransactionalIDPrefix = kafka.ExactlyOnce, topic
	}
	return c
}

// outputReader reads an output topic read_committed from its start, in a goroutine, and notes each
// record's sequence number (duplicates are counted) and, when lat is set, its latency.
type outputReader struct {
	cl       *kgo.Client
	seen     []uint64 // bitmap of the sequence numbers read
	distinct atomic.Int64
	dups     atomic.Int64
	lastNs   atomic.Int64 // when the last new sequence number was read
	err      atomic.Pointer[error]
	done     chan struct{}
	cancel   context.CancelFunc
	stopOnce sync.Once
	// latency: for records produced at or after from and after the first output record was read (the
	// pipeline runs end to end), produce-to-read times in nanoseconds. firstNs is when that was.
	from    int64
	lat     []int64
	firstNs atomic.Int64
}

func (k *kafkaBench) startReader(topic string, expect int64, latencyFrom time.Time) (*outputReader, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("bench kafka: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &outputReader{cl: cl, seen: make([]uint64, (expect+63)/64), done: make(chan struct{}), cancel: cancel}
	if !latencyFrom.IsZero() {
		r.from = latencyFrom.UnixNano()
		r.lat = make([]int64, 0, expect)
	}
	go r.loop(ctx)
	return r, nil
}

func (r *outputReader) loop(ctx context.Context) {
	defer close(r.done)
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		now := time.Now().UnixNano()
		fs.EachError(func(t string, p int32, err error) {
			err = fmt.Errorf("bench kafka: reading %s/%d: %w", t, p, err)
			r.err.CompareAndSwap(nil, &err)
		})
		fs.EachRecord(func(rec *kgo.Record) {
			if len(rec.Value) != kafkaBenchOutValue {
				err := fmt.Errorf("bench kafka: output record %s/%d@%d of %d bytes, want %d", rec.Topic, rec.Partition, rec.Offset, len(rec.Value), kafkaBenchOutValue)
				r.err.CompareAndSwap(nil, &err)
				return
			}
			produced, seq := int64(be.BigEndian.Uint64(rec.Value)), int64(be.BigEndian.Uint64(rec.Value[8:]))
			if seq < 0 || seq/64 >= int64(len(r.seen)) {
				err := fmt.Errorf("bench kafka: output record %s/%d@%d has sequence number %d, beyond the input", rec.Topic, rec.Partition, rec.Offset, seq)
				r.err.CompareAndSwap(nil, &err)
				return
			}
			if r.seen[seq/64]&(1<<(seq%64)) != 0 {
				r.dups.Add(1)
				return
			}
			r.seen[seq/64] |= 1 << (seq % 64)
			if r.firstNs.Load() == 0 {
				r.firstNs.Store(now)
				r.from = max(r.from, now)
			}
			if r.lat != nil && produced >= r.from {
				r.lat = append(r.lat, now-produced)
			}
			r.lastNs.Store(now)
			r.distinct.Add(1)
		})
	}
}

// wait waits until the reader has read want distinct records, the reader failed, or timeout passes
// (quiet: since the last new record) or ctx ends.
func (r *outputReader) wait(ctx context.Context, want int64, quiet time.Duration) error {
	last, lastAt := int64(-1), time.Now()
	for {
		if e := r.err.Load(); e != nil {
			return *e
		}
		n := r.distinct.Load()
		if n >= want {
			return nil
		}
		if n != last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) > quiet {
			return fmt.Errorf("bench kafka: the read_committed reader of the output has read %d of %d records, and nothing new for %s", n, want, quiet)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// stop stops the reader and waits for its goroutine; stopping twice is harmless.
func (r *outputReader) stop() {
	r.stopOnce.Do(func() {
		r.cancel()
		<-r.done
		r.cl.Close()
	})
}

// runJob runs env in a goroutine; the returned channel gets the job's outcome.
func runJob(ctx context.Context, env *runnel.Environment, name string) <-chan jobOutcome {
	ch := make(chan jobOutcome, 1)
	go func() {
		res, err := env.Execute(ctx, name)
		ch <- jobOutcome{res, err, time.Now()}
	}()
	return ch
}

type jobOutcome struct {
	res *runnel.JobResult
	err error
	end time.Time
}

func (o jobOutcome) check(want string) error {
	if o.err != nil {
		return o.err
	}
	if o.res.Status != want {
		return fmt.Errorf("job %s, not %s: %s", o.res.Status, want, o.res.Error)
	}
	return nil
}

// throughputRun reads the whole input into a fresh output topic under the guarantee.
func (k *kafkaBench) throughputRun(ctx context.Context, guarantee string) (kafkaThroughputRun, error) {
	out := k.name("out")
	run := kafkaThroughputRun{Guarantee: guarantee, Records: k.cfg.records, OutputTopic: out}
	if err := k.createTopic(ctx, out); err != nil {
		return run, err
	}
	defer k.deleteTopics(out)
	reader, err := k.startReader(out, k.cfg.records, time.Time{})
	if err != nil {
		return run, err
	}
	defer reader.stop()
	var first atomic.Int64
	env := k.kafkaBenchJob(kafka.SourceConfig{Brokers: []string{k.addr}, Topic: k.input, Bounded: true}, k.sinkConfig(out, guarantee), &first)
	jobCtx, cancelJob := context.WithCancel(ctx)
	defer cancelJob()
	start := time.Now()
	done := runJob(jobCtx, env, "kafka-bench-"+guarantee)
	var o jobOutcome
	select {
	case o = <-done:
	case <-ctx.Done():
		cancelJob()
		<-done
		return run, ctx.Err()
	}
	if err := o.check("FINISHED"); err != nil {
		return run, fmt.Errorf("bench kafka: %s run: %w", guarantee, err)
	}
	if err := reader.wait(ctx, k.cfg.records, 30*time.Second); err != nil {
		return run, err
	}
	if first.Load() == 0 {
		return run, errors.New("bench kafka: the source decoded no record")
	}
	elapsed := time.Duration(reader.lastNs.Load() - first.Load())
	run.ElapsedMs = float64(elapsed) / 1e6
	run.RecordsPerS = float64(k.cfg.records) / elapsed.Seconds()
	run.JobMs = float64(o.end.Sub(start)) / 1e6
	run.Duplicates = reader.dups.Load()
	if o.res.Checkpoints != nil {
		run.Checkpoints = o.res.Checkpoints.Completed
	}
	return run, nil
}

// latencyRun produces a fresh input at cfg.rate while the job runs and measures produce-to-read times at
// a read_committed reader of the output.
func (k *kafkaBench) latencyRun(ctx context.Context, guarantee string) (kafkaLatencyRun, error) {
	cfg := k.cfg
	in, out := k.name("lat-in"), k.name("lat-out")
	run := kafkaLatencyRun{Guarantee: guarantee, Rate: cfg.rate, InputTopic: in, OutputTopic: out}
	for _, t := range []string{in, out} {
		if err := k.createTopic(ctx, t); err != nil {
			return run, err
		}
	}
	defer k.deleteTopics(in, out)
	total := int64(cfg.rate * cfg.latencyDur.Seconds())
	var first atomic.Int64
	env := k.kafkaBenchJob(kafka.SourceConfig{Brokers: []string{k.addr}, Topic: in}, k.sinkConfig(out, guarantee), &first)
	jobCtx, cancelJob := context.WithCancel(ctx)
	defer cancelJob()
	done := runJob(jobCtx, env, "kafka-bench-latency-"+guarantee)
	// The input is produced from when the job was submitted; --latency-skip counts from there, as in the
	// Flink harness (whose submission returns once its MiniCluster is up).
	start := time.Now()
	reader, err := k.startReader(out, total, start.Add(cfg.latencySkip))
	if err != nil {
		cancelJob()
		<-done
		return run, err
	}
	defer reader.stop()
	produced, perr := k.produceAtRate(jobCtx, in, total, start)
	run.Produced = produced
	waitErr := perr
	if waitErr == nil {
		waitErr = reader.wait(jobCtx, total, 30*time.Second)
	}
	cancelJob()
	o := <-done
	if waitErr != nil {
		if o.err == nil && o.res.Status == "FAILED" {
			return run, fmt.Errorf("bench kafka: %s latency run: job FAILED: %s (%v)", guarantee, o.res.Error, waitErr)
		}
		return run, waitErr
	}
	if err := o.check("CANCELED"); err != nil {
		return run, fmt.Errorf("bench kafka: %s latency run: %w", guarantee, err)
	}
	reader.stop() // reader.lat is complete: the reader's goroutine is done
	lat := reader.lat
	if len(lat) == 0 {
		return run, errors.New("bench kafka: no latency sample: --latency-skip, or the time to the first output, covers the whole run")
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / 1e6 }
	run.Samples, run.P50Ms, run.P99Ms, run.MaxMs = len(lat), pct(0.5), pct(0.99), float64(lat[len(lat)-1])/1e6
	run.FirstOutputMs = float64(reader.firstNs.Load()-start.UnixNano()) / 1e6
	run.Duplicates = reader.dups.Load()
	return run, nil
}

// produceAtRate produces total records to topic at cfg.rate from start, each stamped with its produce
// time, and returns how many it produced.
func (k *kafkaBench) produceAtRate(ctx context.Context, topic string, total int64, start time.Time) (int64, error) {
	p, err := kgo.NewClient(kgo.SeedBrokers(k.addr), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	if err != nil {
		return 0, fmt.Errorf("bench kafka: %w", err)
	}
	defer p.Close()
	var failed atomic.Pointer[error]
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	var sent int64
	for sent < total {
		due := min(total, int64(time.Since(start).Seconds()*k.cfg.rate)+1)
		for ; sent < due; sent++ {
			p.Produce(ctx, kafkaBenchInput(sent, k.cfg.keys, time.Now()), done)
		}
		if e := failed.Load(); e != nil {
			return sent, fmt.Errorf("bench kafka: producing the latency input: %w", *e)
		}
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	if err := p.Flush(ctx); err != nil {
		return sent, fmt.Errorf("bench kafka: producing the latency input: %w", err)
	}
	return sent, nil
}

// loadAvg1m is the machine's 1-minute load average (0 where /proc/loadavg is missing).
func loadAvg1m() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(raw) + " 0")[0], 64)
	return f
}

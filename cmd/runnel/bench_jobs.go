package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/bench/throughput"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// benchThroughputJob names bench/throughput's pipeline as a registered job, so that a JobManager and
// TaskManager processes of this binary can build it (`runnel bench throughput --processes N`).
const benchThroughputJob = "bench-throughput"

// init registers the benchmark's job: a registered job must be known before any role runs, and the
// TaskManager and JobManager processes the bench starts never run the bench command itself.
func init() {
	runnel.Register(benchThroughputJob, func(args []string) (*runnel.Environment, error) {
		return buildBenchThroughput(args)
	})
}

// benchThroughputArgs are the arguments of the bench-throughput job.
type benchThroughputArgs struct {
	records     uint64
	keys        int64
	parallelism int
}

// args renders a as the command line buildBenchThroughput parses.
func (a benchThroughputArgs) args() []string {
	return []string{fmt.Sprintf("--records=%d", a.records), fmt.Sprintf("--keys=%d", a.keys), fmt.Sprintf("--parallelism=%d", a.parallelism)}
}

// buildBenchThroughput builds, from args (--records N --keys K --parallelism P), the pipeline of
// bench/throughput: generator -> map (value+1) -> keyBy(key) -> reduce (sum) -> discard sink, with its
// 100 ms buffer timeout and its records (subtask s emits {Key: (seq*P+s) % K, Value: seq}). opts are what
// only the calling process adds (a logger); they must not change the graph.
func buildBenchThroughput(args []string, opts ...runnel.Option) (*runnel.Environment, error) {
	fs := pflag.NewFlagSet(benchThroughputJob, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var a benchThroughputArgs
	fs.Uint64Var(&a.records, "records", 20_000_000, "records in total")
	fs.Int64Var(&a.keys, "keys", 1024, "distinct keys")
	fs.IntVar(&a.parallelism, "parallelism", 3, "parallelism of every operator")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%s: %w", benchThroughputJob, err)
	}
	switch {
	case a.records < 1:
		return nil, fmt.Errorf("%s: invalid --records %d: must be at least 1", benchThroughputJob, a.records)
	case a.keys < 1:
		return nil, fmt.Errorf("%s: invalid --keys %d: must be at least 1", benchThroughputJob, a.keys)
	case a.parallelism < 1:
		return nil, fmt.Errorf("%s: invalid --parallelism %d: must be at least 1", benchThroughputJob, a.parallelism)
	}
	p, keys := uint64(a.parallelism), uint64(a.keys)
	env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(a.parallelism),
		runnel.WithBufferTimeout(100 * time.Millisecond)}, opts...)...)
	src := runnel.FromSource(env, connector.Generator(func(s int, seq uint64) throughput.Record {
		return throughput.Record{Key: int64((seq*p + uint64(s)) % keys), Value: int64(seq)}
	}, connector.GeneratorOptions{TotalRecords: a.records})).Name("generator")
	mapped := runnel.Map(src, func(r throughput.Record) (throughput.Record, error) { r.Value++; return r, nil }).
		Name("map").WithCodec(codec.MustStruct[throughput.Record]())
	sums := runnel.Reduce(runnel.KeyBy(mapped, func(r throughput.Record) int64 { return r.Key }),
		func(acc, r throughput.Record) (throughput.Record, error) { acc.Value += r.Value; return acc, nil }).Name("sum")
	sums.SinkTo(connector.Discard[throughput.Record]()).Name("sink")
	return env, env.Err()
}

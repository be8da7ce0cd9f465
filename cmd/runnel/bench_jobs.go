package main

import (
	"fmt"
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

// benchThroughputOptions are the bench-throughput job's defaults: bench/throughput's 100 ms buffer timeout.
var benchThroughputOptions = []runnel.Option{runnel.WithParallelism(3), runnel.WithBufferTimeout(100 * time.Millisecond)}

// init registers the benchmark's job: a registered job must be known before any role runs, and the
// TaskManager and JobManager processes the bench starts never run the bench command itself.
func init() {
	runnel.RegisterJob(benchThroughputJob, "the pipeline of runnel bench throughput --processes: generator -> map -> keyBy -> sum -> discard",
		func(fs *pflag.FlagSet) runnel.Job {
			var a benchThroughputArgs
			fs.Uint64Var(&a.records, "records", 20_000_000, "records in total")
			fs.Int64Var(&a.keys, "keys", 1024, "distinct keys")
			return runnel.BuildFunc(func(env *runnel.Environment, args []string) error {
				if len(args) > 0 {
					return fmt.Errorf("unexpected arguments %q: the job takes flags only", args)
				}
				a.parallelism = env.Config().Parallelism
				return a.build(env)
			})
		}, benchThroughputOptions...)
}

// benchThroughputArgs are the arguments of the bench-throughput job.
type benchThroughputArgs struct {
	records     uint64
	keys        int64
	parallelism int
}

// args renders a as the command line the job is built from.
func (a benchThroughputArgs) args() []string {
	return []string{fmt.Sprintf("--records=%d", a.records), fmt.Sprintf("--keys=%d", a.keys), fmt.Sprintf("--parallelism=%d", a.parallelism)}
}

// build adds the pipeline of bench/throughput to env: generator -> map (value+1) -> keyBy(key) -> reduce
// (sum) -> discard sink, with its records (subtask s emits {Key: (seq*P+s) % K, Value: seq}).
func (a benchThroughputArgs) build(env *runnel.Environment) error {
	switch {
	case a.records < 1:
		return fmt.Errorf("invalid --records %d: must be at least 1", a.records)
	case a.keys < 1:
		return fmt.Errorf("invalid --keys %d: must be at least 1", a.keys)
	}
	p, keys := uint64(a.parallelism), uint64(a.keys)
	src := runnel.FromSource(env, connector.Generator(func(s int, seq uint64) throughput.Record {
		return throughput.Record{Key: int64((seq*p + uint64(s)) % keys), Value: int64(seq)}
	}, connector.GeneratorOptions{TotalRecords: a.records})).Name("generator")
	mapped := runnel.Map(src, func(r throughput.Record) (throughput.Record, error) { r.Value++; return r, nil }).
		Name("map").WithCodec(codec.MustStruct[throughput.Record]())
	sums := runnel.Reduce(runnel.KeyBy(mapped, func(r throughput.Record) int64 { return r.Key }),
		func(acc, r throughput.Record) (throughput.Record, error) { acc.Value += r.Value; return acc, nil }).Name("sum")
	sums.SinkTo(connector.Discard[throughput.Record]()).Name("sink")
	return env.Err()
}

package runnel_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

type kv struct{ Key, Value int64 }

var quiet = slog.New(slog.DiscardHandler)

// runBench runs a job over b.N records and reports records/s and allocations per record.
func runBench(b *testing.B, build func(env *runnel.Environment, src *runnel.Stream[kv])) {
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet))
	src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) kv { return kv{Key: int64(s) % 1024, Value: int64(s)} },
		connector.GeneratorOptions{TotalRecords: uint64(b.N)})).WithCodec(codec.MustStruct[kv]())
	build(env, src)
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := env.Execute(context.Background(), "bench"); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkChainedMap measures source -> map -> sink fused into one task: no serialization.
func BenchmarkChainedMap(b *testing.B) {
	runBench(b, func(env *runnel.Environment, src *runnel.Stream[kv]) {
		runnel.Map(src, func(v kv) (kv, error) { v.Value++; return v, nil }).SinkTo(connector.Discard[kv]())
	})
}

// BenchmarkChainedFlatMap measures source -> flatMap -> map -> sink fused into one task: a function that
// emits through a Collector, and the operators behind it.
func BenchmarkChainedFlatMap(b *testing.B) {
	runBench(b, func(env *runnel.Environment, src *runnel.Stream[kv]) {
		f := runnel.FlatMap(src, func(v kv, out runnel.Collector[kv]) error { out.Collect(v); return nil })
		runnel.Map(f, func(v kv) (kv, error) { v.Value++; return v, nil }).SinkTo(connector.Discard[kv]())
	})
}

// BenchmarkKeyedReduce measures source -> keyBy -> reduce -> sink: one local network shuffle with
// serialization, key hashing and keyed state.
func BenchmarkKeyedReduce(b *testing.B) {
	runBench(b, func(env *runnel.Environment, src *runnel.Stream[kv]) {
		runnel.Reduce(runnel.KeyBy(src, func(v kv) int64 { return v.Key }), func(a, v kv) (kv, error) {
			a.Value += v.Value
			return a, nil
		}).SinkTo(connector.Discard[kv]())
	})
}

// BenchmarkKeyedReduceTCP is BenchmarkKeyedReduce with the shuffle over TCP between two TaskManagers.
func BenchmarkKeyedReduceTCP(b *testing.B) {
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet), runnel.WithTaskManagers(2), runnel.WithSlotsPerTaskManager(1), runnel.WithChaining(false))
	src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) kv { return kv{Key: int64(s) % 1024, Value: int64(s)} },
		connector.GeneratorOptions{TotalRecords: uint64(b.N)})).WithCodec(codec.MustStruct[kv]())
	runnel.Reduce(runnel.KeyBy(src, func(v kv) int64 { return v.Key }), func(a, v kv) (kv, error) {
		a.Value += v.Value
		return a, nil
	}).SinkTo(connector.Discard[kv]())
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := env.Execute(context.Background(), "bench"); err != nil {
		b.Fatal(err)
	}
}

// timedKV is the bench source with event time: the value is the timestamp.
func timedKV(src *runnel.Stream[kv]) *runnel.Stream[kv] {
	return src.WithTimestamps(runnel.BoundedOutOfOrderness[kv](0).WithTimestampAssigner(func(v kv, _ int64) int64 { return v.Value }))
}

// BenchmarkTimedChainedMap is BenchmarkChainedMap on a stream with event time.
func BenchmarkTimedChainedMap(b *testing.B) {
	runBench(b, func(env *runnel.Environment, src *runnel.Stream[kv]) {
		runnel.Map(timedKV(src), func(v kv) (kv, error) { v.Value++; return v, nil }).SinkTo(connector.Discard[kv]())
	})
}

// BenchmarkTimedKeyedReduce is BenchmarkKeyedReduce on a stream with event time: timestamps cross the
// shuffle, and watermarks too.
func BenchmarkTimedKeyedReduce(b *testing.B) {
	runBench(b, func(env *runnel.Environment, src *runnel.Stream[kv]) {
		runnel.Reduce(runnel.KeyBy(timedKV(src), func(v kv) int64 { return v.Key }), func(a, v kv) (kv, error) {
			a.Value += v.Value
			return a, nil
		}).SinkTo(connector.Discard[kv]())
	})
}

//go:build !race

package runnel_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// TestPerRecordPathAllocatesNothing runs jobs with and without event time over n and 5n records: the
// allocations of the extra records, per record, must be nil (setup and the task loop's timers allocate a
// little, independent of the record count). Not under the race detector, which allocates on its own.
func TestPerRecordPathAllocatesNothing(t *testing.T) {
	const n = 100_000
	build := map[string]func(src *runnel.Stream[kv]){
		"chained map": func(src *runnel.Stream[kv]) {
			runnel.Map(src, func(v kv) (kv, error) { v.Value++; return v, nil }).SinkTo(connector.Discard[kv]())
		},
		"keyed reduce": func(src *runnel.Stream[kv]) {
			runnel.Reduce(runnel.KeyBy(src, func(v kv) int64 { return v.Key }), func(a, v kv) (kv, error) {
				a.Value += v.Value
				return a, nil
			}).SinkTo(connector.Discard[kv]())
		},
		"flat map keyed process": func(src *runnel.Stream[kv]) {
			f := runnel.FlatMap(src, func(v kv, out runnel.Collector[kv]) error { out.Collect(v); return nil })
			runnel.Process(runnel.KeyBy(f, func(v kv) int64 { return v.Key }), func() runnel.KeyedProcessFunction[int64, kv, kv] { return passKV{} }).
				SinkTo(connector.Discard[kv]())
		},
	}
	for name, b := range build {
		for _, timed := range []bool{false, true} {
			label := name
			if timed {
				label += " timed"
			}
			t.Run(label, func(t *testing.T) {
				allocs := func(records uint64) uint64 {
					env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet))
					src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) kv { return kv{Key: int64(s) % 1024, Value: int64(s)} },
						connector.GeneratorOptions{TotalRecords: records})).WithCodec(codec.MustStruct[kv]())
					if timed {
						src = timedKV(src)
					}
					b(src)
					var before, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					if _, err := env.Execute(context.Background(), "allocs"); err != nil {
						t.Fatal(err)
					}
					runtime.ReadMemStats(&after)
					return after.Mallocs - before.Mallocs
				}
				small, large := allocs(n), allocs(5*n)
				perRecord := (float64(large) - float64(small)) / (4 * n)
				t.Logf("%d allocations for %d records, %d for %d: %.4f per record", small, n, large, 5*n, perRecord)
				if perRecord > 0.01 {
					t.Fatalf("%.4f allocations per record, want none", perRecord)
				}
			})
		}
	}
}

type passKV struct {
	runnel.KeyedProcessBase[int64, kv]
}

func (passKV) ProcessElement(_ runnel.KeyedContext[int64], v kv, out runnel.Collector[kv]) error {
	out.Collect(v)
	return nil
}

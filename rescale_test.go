package runnel_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// TestRescaleKeepsDownstreamParallelism rescales a keyed sum from a savepoint (2 to 3 and 3 to 2) while
// everything downstream of it keeps its own parallelism: a sink at 1 fed by the sums directly, and a keyed
// max at 2 behind the sums with its own sink at 1. Those operators did not change, but their inputs did
// (another number of producers): their in-flight channel positions belong to channels that no longer
// exist, and they start their channels fresh, as every producer does after a restore. Every result must
// be exact: the sums carry their keyed state across the rescale, the max keeps its own.
func TestRescaleKeepsDownstreamParallelism(t *testing.T) {
	const keys, perSubtask = 40, 3000
	// The first run is throttled (two seconds of input, stopped after 150 ms, so that the savepoint falls
	// inside the input on a loaded machine too), the rescaled one is not.
	build := func(sumP int, rate float64, direct, behind runnel.Sink[keyed], opts ...runnel.Option) *runnel.Environment {
		env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet)}, opts...)...)
		src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed { return keyed{F0: int64(s*2+uint64(sub)) % keys, F1: 1} },
			connector.GeneratorOptions{RecordsPerSubtask: perSubtask, RatePerSubtask: rate})).Name("source")
		sums := runnel.Reduce(runnel.KeyBy(src.WithCodec(keyedCodec), func(v keyed) int64 { return v.F0 }),
			func(a, b keyed) (keyed, error) { a.F1 += b.F1; return a, nil }).Name("sum").WithCodec(keyedCodec).SetParallelism(sumP)
		sums.Rebalance().SinkTo(direct).Name("direct").SetParallelism(1)
		highest := runnel.Reduce(runnel.KeyBy(sums, func(v keyed) int64 { return v.F0 }),
			func(a, b keyed) (keyed, error) { return keyed{F0: a.F0, F1: max(a.F1, b.F1)}, nil }).Name("max").WithCodec(keyedCodec)
		highest.Rebalance().SinkTo(behind).Name("behind").SetParallelism(1)
		return env
	}
	want := map[int64]int64{}
	for sub := uint64(0); sub < 2; sub++ {
		for s := uint64(0); s < perSubtask; s++ {
			want[int64(s*2+sub)%keys]++
		}
	}
	for _, tc := range []struct{ from, to int }{{2, 3}, {3, 2}} {
		t.Run(fmt.Sprintf("sum %d to %d", tc.from, tc.to), func(t *testing.T) {
			dir := t.TempDir() + "/sp"
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			res, err := build(tc.from, 1500, connector.Discard[keyed](), connector.Discard[keyed](), runnel.WithSavepointOnStop(dir)).Execute(ctx, "first")
			if err != nil || res.Status != "CANCELED" || res.Savepoint != dir {
				t.Fatalf("first run: %v, %+v", err, res)
			}
			if v := res.Vertex("source"); v == nil || v.RecordsOut == 0 || v.RecordsOut >= 2*perSubtask {
				t.Fatalf("the savepoint must fall inside the input: the source emitted %+v", v)
			}
			direct, behind := connector.NewCollect[keyed](), connector.NewCollect[keyed]()
			res, err = build(tc.to, 0, direct, behind, runnel.WithRestoreFrom(dir)).Execute(context.Background(), "rescaled")
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("rescaled run: %v, %+v", err, res)
			}
			if got := latest(direct.Records()); !maps.Equal(got, want) {
				t.Fatalf("sums at the sink fed by the rescaled operator: %v, want %v", got, want)
			}
			if got := latest(behind.Records()); !maps.Equal(got, want) {
				t.Fatalf("maxima of the operator behind the rescaled one: %v, want %v", got, want)
			}
		})
	}
}

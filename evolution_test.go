package runnel_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// evolving describes one version of an evolving job: a generated keyed stream whose per-key sum (uid
// "sums") feeds a keyed maximum (uid "max"), each with a sink.
type evolving struct {
	chaining    bool
	sumName     string // the sum's name; its uid stays "sums"
	sumP        int
	extraMap    bool // a stateless operator added between the source and the sum
	withMax     bool // the keyed maximum and its sink
	allowDrop   bool
	restoreFrom string
	savepointTo string
	rate        float64 // records a second per source subtask; 0: as fast as possible
}

func (e evolving) build(sumsOut, maxima runnel.Sink[keyed]) *runnel.Environment {
	const keys, perSubtask = 40, 3000
	opts := []runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet), runnel.WithChaining(e.chaining)}
	if e.restoreFrom != "" {
		opts = append(opts, runnel.WithRestoreFrom(e.restoreFrom))
	}
	if e.savepointTo != "" {
		opts = append(opts, runnel.WithSavepointOnStop(e.savepointTo))
	}
	if e.allowDrop {
		opts = append(opts, runnel.WithAllowNonRestoredState())
	}
	env := runnel.NewEnvironment(opts...)
	src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed { return keyed{F0: int64(s*2+uint64(sub)) % keys, F1: 1} },
		connector.GeneratorOptions{RecordsPerSubtask: perSubtask, RatePerSubtask: e.rate})).Name("source").WithCodec(keyedCodec)
	// A stateless map chained to the source in every version: with chaining, the source's vertex is
	// "source -> double", without, two vertices.
	in := runnel.Map(src, func(v keyed) (keyed, error) { v.F1 *= 2; return v, nil }).Name("double").WithCodec(keyedCodec)
	if e.extraMap {
		in = in.Filter(func(keyed) (bool, error) { return true, nil }).Name("pass").WithCodec(keyedCodec)
	}
	sums := runnel.Reduce(runnel.KeyBy(in, func(v keyed) int64 { return v.F0 }),
		func(a, b keyed) (keyed, error) { a.F1 += b.F1; return a, nil }).Name(e.sumName).Uid("sums").WithCodec(keyedCodec).SetParallelism(e.sumP)
	sums.Rebalance().SinkTo(sumsOut).Name("sums-out").SetParallelism(1)
	if e.withMax {
		highest := runnel.Reduce(runnel.KeyBy(sums, func(v keyed) int64 { return v.F0 }),
			func(a, b keyed) (keyed, error) { return keyed{F0: a.F0, F1: max(a.F1, b.F1)}, nil }).Name("max").WithCodec(keyedCodec)
		highest.Rebalance().SinkTo(maxima).Name("max-out").SetParallelism(1)
	}
	return env
}

// TestJobEvolutionAcrossSavepoint restores a savepoint into changed versions of the job that took it:
// state is mapped to operators by uid, so the keyed sums (and the maxima behind them) must come out exact
// whatever the chaining, with the sum renamed, with an operator added, at another parallelism; state of an
// operator the job dropped fails the start, naming its uid, unless allow-non-restored-state.
func TestJobEvolutionAcrossSavepoint(t *testing.T) {
	want := map[int64]int64{}
	for sub := uint64(0); sub < 2; sub++ {
		for s := uint64(0); s < 3000; s++ {
			want[int64(s*2+sub)%40] += 2
		}
	}
	base := evolving{chaining: true, sumName: "sum", sumP: 2, withMax: true}
	for _, tc := range []struct {
		name        string
		first, then func(evolving) evolving
		wantErr     string // the restore fails naming this
	}{
		{name: "chained, restored without chaining", then: func(e evolving) evolving { e.chaining = false; return e }},
		{name: "not chained, restored with chaining", first: func(e evolving) evolving { e.chaining = false; return e },
			then: func(e evolving) evolving { e.chaining = true; return e }},
		{name: "sum renamed, same uid", then: func(e evolving) evolving { e.sumName = "total"; return e }},
		{name: "stateless operator added", then: func(e evolving) evolving { e.extraMap = true; return e }},
		{name: "rescaled and not chained", then: func(e evolving) evolving { e.sumP, e.chaining = 3, false; return e }},
		{name: "stateful operator dropped", then: func(e evolving) evolving { e.withMax = false; return e }, wantErr: `"max"`},
		{name: "stateful operator dropped, allowed", then: func(e evolving) evolving { e.withMax, e.allowDrop = false, true; return e }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, then := base, base
			if tc.first != nil {
				first = tc.first(first)
				then = tc.first(then)
			}
			if tc.then != nil {
				then = tc.then(then)
			}
			// The first run is throttled (two seconds of input, stopped after 150 ms: the savepoint falls
			// inside the input on a loaded machine too), the restored one is not.
			first.savepointTo, first.rate = t.TempDir()+"/sp", 1500
			then.restoreFrom = first.savepointTo
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			res, err := first.build(connector.Discard[keyed](), connector.Discard[keyed]()).Execute(ctx, "first")
			if err != nil || res.Status != "CANCELED" || res.Savepoint != first.savepointTo {
				t.Fatalf("first run: %v, %+v", err, res)
			}
			if v := res.Vertex("source"); v == nil || v.RecordsOut == 0 || v.RecordsOut >= 6000 {
				t.Fatalf("the savepoint must fall inside the input: the source emitted %+v", v)
			}
			sums, maxima := connector.NewCollect[keyed](), connector.NewCollect[keyed]()
			res, err = then.build(sums, maxima).Execute(context.Background(), "then")
			if tc.wantErr != "" {
				if !errors.Is(err, checkpoint.ErrIncompatible) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "allow-non-restored-state") {
					t.Fatalf("restore without the dropped operator: %v, want an incompatible checkpoint naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || res.Status != "FINISHED" {
				t.Fatalf("restored run: %v, %+v", err, res)
			}
			if got := latest(sums.Records()); !maps.Equal(got, want) {
				t.Fatalf("sums: %v, want %v", got, want)
			}
			if then.withMax {
				if got := latest(maxima.Records()); !maps.Equal(got, want) {
					t.Fatalf("maxima: %v, want %v", got, want)
				}
			}
		})
	}
}

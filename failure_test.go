package runnel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func seq(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = int64(i)
	}
	return s
}

func topologies() []struct {
	name string
	opts []runnel.Option
} {
	return []struct {
		name string
		opts []runnel.Option
	}{
		{"local", []runnel.Option{runnel.WithParallelism(2)}},
		{"tcp", []runnel.Option{runnel.WithParallelism(2), runnel.WithTaskManagers(2), runnel.WithChaining(false)}},
	}
}

// TestSumExact runs a keyed sum over both channel kinds and checks every key's exact result.
func TestSumExact(t *testing.T) {
	const n, keys = 20000, 37
	for _, tp := range topologies() {
		t.Run(tp.name, func(t *testing.T) {
			env := runnel.NewEnvironment(append(tp.opts, runnel.WithBufferSize(256))...)
			src := runnel.FromSource(env, connector.Collection(seq(n)))
			pairs := runnel.Map(src, func(v int64) (codec.Tuple2[int64, int64], error) {
				return codec.Tuple2[int64, int64]{F0: v % keys, F1: v}, nil
			}).WithCodec(codec.Pair(codec.Int64(), codec.Int64()))
			sums := runnel.Reduce(runnel.KeyBy(pairs, func(p codec.Tuple2[int64, int64]) int64 { return p.F0 }),
				func(a, b codec.Tuple2[int64, int64]) (codec.Tuple2[int64, int64], error) {
					a.F1 += b.F1
					return a, nil
				}).WithCodec(codec.Pair(codec.Int64(), codec.Int64()))
			sink := connector.NewCollect[codec.Tuple2[int64, int64]]()
			sums.Rebalance().SinkTo(sink)
			res, err := env.Execute(context.Background(), "sum")
			if err != nil {
				t.Fatal(err)
			}
			want := map[int64]int64{}
			for i := int64(0); i < n; i++ {
				want[i%keys] += i
			}
			got := map[int64]int64{}
			recs := sink.Records()
			for _, r := range recs {
				got[r.F0] = max(got[r.F0], r.F1)
			}
			if len(recs) != n {
				t.Fatalf("sink got %d records, want %d", len(recs), n)
			}
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("sum[%d] = %d, want %d", k, got[k], v)
				}
			}
			if v := res.Vertex("reduce"); v == nil || v.RecordsIn != n {
				t.Fatalf("reduce vertex counters: %+v", v)
			}
		})
	}
}

func TestFailureNamesSubtaskAndCancelsJob(t *testing.T) {
	for _, mode := range []string{"error", "panic"} {
		for _, tp := range topologies() {
			t.Run(mode+"/"+tp.name, func(t *testing.T) {
				env := runnel.NewEnvironment(tp.opts...)
				// An unbounded generator: the job can only end because the failure cancels it.
				src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) int64 { return int64(s) }, connector.GeneratorOptions{}))
				m := runnel.Map(src, func(v int64) (int64, error) {
					if v == 5000 {
						if mode == "panic" {
							panic("boom at 5000")
						}
						return 0, errors.New("bad record 5000")
					}
					return v, nil
				}).Name("fragile")
				m.Rebalance().SinkTo(connector.Discard[int64]())
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				res, err := env.Execute(ctx, "fail")
				if err == nil {
					t.Fatal("job did not fail")
				}
				if res.Status != "FAILED" {
					t.Fatalf("status %s", res.Status)
				}
				msg := err.Error()
				want := "bad record 5000"
				if mode == "panic" {
					want = "boom at 5000"
				}
				if !strings.Contains(msg, want) || !strings.Contains(msg, "fragile") || !strings.Contains(msg, "[") {
					t.Fatalf("error %q does not name the cause and the subtask", msg)
				}
				for _, v := range res.Vertices {
					for _, s := range v.Subtasks {
						if s.State != "CANCELED" && s.State != "FAILED" && s.State != "FINISHED" {
							t.Fatalf("subtask %s[%d] left in %s", v.Name, s.Index, s.State)
						}
					}
				}
			})
		}
	}
}

func TestCancelUnboundedJob(t *testing.T) {
	for _, tp := range topologies() {
		t.Run(tp.name, func(t *testing.T) {
			env := runnel.NewEnvironment(tp.opts...)
			src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) int64 { return int64(s) }, connector.GeneratorOptions{RatePerSubtask: 100000}))
			sums := runnel.Reduce(runnel.KeyBy(src, func(v int64) int64 { return v % 10 }), func(a, b int64) (int64, error) { return a + b, nil })
			sums.SinkTo(connector.Discard[int64]())
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			res, err := env.Execute(ctx, "cancel")
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != "CANCELED" {
				t.Fatalf("status %s", res.Status)
			}
			if v := res.Vertex("reduce"); v == nil || v.RecordsIn == 0 {
				t.Fatalf("nothing reached the reducer before cancellation: %+v", v)
			}
		})
	}
}

type unencodable struct {
	M map[string]int
}

func TestBadJobsAreRejected(t *testing.T) {
	cases := []struct {
		name  string
		build func(env *runnel.Environment)
		opts  []runnel.Option
		want  string
	}{
		{"nil map function", func(env *runnel.Environment) {
			runnel.Map[int64, int64](runnel.FromSource(env, connector.Collection(seq(3))), nil).SinkTo(connector.Discard[int64]())
		}, nil, "Map: nil function"},
		{"parallelism 0", func(env *runnel.Environment) {
			runnel.FromSource(env, connector.Collection(seq(3))).SinkTo(connector.Discard[int64]())
		}, []runnel.Option{runnel.WithParallelism(0)}, "WithParallelism: parallelism must be at least 1"},
		{"operator parallelism 0", func(env *runnel.Environment) {
			runnel.FromSource(env, connector.Collection(seq(3))).SetParallelism(0).SinkTo(connector.Discard[int64]())
		}, nil, "parallelism must be at least 1"},
		{"dangling stream", func(env *runnel.Environment) {
			src := runnel.FromSource(env, connector.Collection(seq(3)))
			runnel.Map(src, func(v int64) (int64, error) { return v, nil }).Name("lost")
			src.SinkTo(connector.Discard[int64]())
		}, nil, `operator "lost"`},
		{"no operators", func(env *runnel.Environment) {}, nil, "no operators"},
		{"type without codec crosses network", func(env *runnel.Environment) {
			src := runnel.FromSource(env, connector.Collection(seq(3)))
			m := runnel.Map(src, func(v int64) (unencodable, error) { return unencodable{}, nil }).Name("mk")
			m.Rebalance().SinkTo(connector.Discard[unencodable]())
		}, nil, `operator "mk"`},
		{"duplicate names", func(env *runnel.Environment) {
			src := runnel.FromSource(env, connector.Collection(seq(3))).Name("x")
			src.SinkTo(connector.Discard[int64]()).Name("x")
		}, nil, `two operators are named "x"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(tc.opts...)
			tc.build(env)
			_, err := env.Execute(context.Background(), "bad")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// A type that can live inside a chain needs no codec.
func TestChainedTypeNeedsNoCodec(t *testing.T) {
	env := runnel.NewEnvironment()
	src := runnel.FromSource(env, connector.Collection(seq(10)))
	m := runnel.Map(src, func(v int64) (unencodable, error) { return unencodable{M: map[string]int{"v": int(v)}}, nil })
	sink := connector.NewCollect[unencodable]()
	m.SinkTo(sink)
	if _, err := env.Execute(context.Background(), "chained"); err != nil {
		t.Fatal(err)
	}
	if n := len(sink.Records()); n != 10 {
		t.Fatalf("got %d records", n)
	}
}

func TestRecordTooLargeAndCodecErrorsFailTheJob(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codec runnel.Codec[string]
		want  string
	}{
		{"too large", codec.String(), "exceeds the maximum record size of 100 bytes"},
		{"codec error", failingCodec{}, "cannot encode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithMaxRecordSize(100), runnel.WithParallelism(2))
			src := runnel.FromSource(env, connector.Collection([]string{"small", strings.Repeat("x", 101)})).WithCodec(tc.codec)
			src.Rebalance().SinkTo(connector.Discard[string]())
			_, err := env.Execute(context.Background(), "big")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

type failingCodec struct{}

func (failingCodec) Append(dst []byte, v string) ([]byte, error) {
	if len(v) > 50 {
		return dst, errors.New("cannot encode long strings")
	}
	return append(dst, v...), nil
}

func (failingCodec) Decode(src []byte, v *string) error { *v = string(src); return nil }

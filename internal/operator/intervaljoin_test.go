package operator

import (
	"fmt"
	"slices"
	"testing"

	"github.com/runnel-dev/runnel/codec"
)

// joinStep is a step of an interval join script: a record of the left (side 'a') or right ('b') input at
// ts, or a watermark ('w').
type joinStep struct {
	side byte
	ts   int64
}

// TestIntervalJoinLateness holds the interval join to Flink's rules, worked out by hand for each script: a
// record is late only when its timestamp is below the watermark (one at the watermark joins), a pair
// a at ta and b at tb joins when ta+lower <= tb <= ta+upper and carries max(ta, tb), and a side's record
// stays in state until the watermark reaches ta+upper (left) or tb-lower (right), but never goes before
// the watermark reaches its own timestamp. Both backends.
func TestIntervalJoinLateness(t *testing.T) {
	for _, tc := range []struct {
		name         string
		lower, upper int64
		script       []joinStep
		want         []string
	}{
		// a@1000 and b@1000 are at the watermark: not late. a@999 is below it: late, dropped, though b@1200
		// would join it (999+500 >= 1200).
		{"at the watermark", -500, 500,
			[]joinStep{{'w', 1000}, {'a', 1000}, {'a', 999}, {'b', 1200}, {'b', 1000}},
			[]string{"a1000 b1000 @1000", "a1000 b1200 @1200"}},
		{"at the watermark, the right side first", -500, 500,
			[]joinStep{{'w', 1000}, {'b', 1000}, {'b', 999}, {'a', 1200}},
			[]string{"a1200 b1000 @1200"}},
		// lower -2000, upper -1000: b comes 1 to 2 s before a. a@5000 is kept until the watermark reaches
		// 5000 (its own time; ta+upper = 4000 is earlier), so b@4000, at watermark 4000, still joins it.
		{"a negative upper bound keeps the left side until its own time", -2000, -1000,
			[]joinStep{{'a', 5000}, {'w', 4000}, {'b', 4000}, {'w', 5000}, {'b', 4500}},
			[]string{"a5000 b4000 @5000"}},
		// lower 1000, upper 2000: b comes 1 to 2 s after a. b@5000 is kept until the watermark reaches 5000
		// (tb-lower = 4000 is earlier), so a@4000, at watermark 4000, still joins it.
		{"a positive lower bound keeps the right side until its own time", 1000, 2000,
			[]joinStep{{'b', 5000}, {'w', 4000}, {'a', 4000}, {'w', 5000}, {'a', 3500}},
			[]string{"a4000 b5000 @5000"}},
		// lower 0, upper 1000: a@1000 goes once the watermark reaches 2000, so b@2000, at watermark 2000,
		// finds nothing (Flink's cleanup time ta+upper); b@1999 was late already.
		{"cleaned at the last time a partner joins", 0, 1000,
			[]joinStep{{'a', 1000}, {'b', 1500}, {'w', 2000}, {'b', 2000}, {'b', 1999}},
			[]string{"a1000 b1500 @1500"}},
	} {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(tc.name+"/"+backend, func(t *testing.T) {
				spec := &IntervalJoinSpec[int64, int64, int64, string]{
					Key1: func(int64) int64 { return 1 }, Key2: func(int64) int64 { return 1 }, KeyCodec: codec.Int64(),
					Lower: tc.lower, Upper: tc.upper, CodecA: codec.Int64(), CodecB: codec.Int64(),
					Fn: func(a, b int64, jc JoinContext, out Collector[string]) error {
						if jc.LeftTimestamp() != a || jc.RightTimestamp() != b {
							return fmt.Errorf("join context %d/%d for a%d b%d", jc.LeftTimestamp(), jc.RightTimestamp(), a, b)
						}
						out.Collect(fmt.Sprintf("a%d b%d", a, b))
						return nil
					},
				}
				log := &windowLog{}
				b, err := spec.Build(windowTestContext(backend), []any{Collector[Timed[string]](log)})
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := b.Close(); err != nil {
						t.Error(err)
					}
				}()
				left, right := b.Input.(Collector[Timed[int64]]), b.Input2.(Collector[Timed[int64]])
				for _, s := range tc.script {
					switch s.side {
					case 'a':
						left.Collect(Timed[int64]{Ts: s.ts, V: s.ts})
					case 'b':
						right.Collect(Timed[int64]{Ts: s.ts, V: s.ts})
					default:
						if err := b.Watermark(s.ts); err != nil {
							t.Fatal(err)
						}
					}
				}
				got := slices.Clone(log.got)
				slices.Sort(got)
				if !slices.Equal(got, tc.want) {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
			})
		}
	}
}

package sequence

import (
	"strings"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/internal/run"
)

// TestNewerIsAStrictTotalOrder: the sink's order replaces a key's counters by those emitted later (a later
// attempt, more records seen, the final ones at the same count), and it is strict and total, which makes
// merging the sink's accumulator a join.
func TestNewerIsAStrictTotalOrder(t *testing.T) {
	base := Counters{Key: 3, Records: 10, Seen: 10, Last: 9, Attempt: 1}
	with := func(f func(c *Counters)) Counters { c := base; f(&c); return c }
	cases := []struct {
		name  string
		later Counters // newer than base
	}{
		{"a later attempt, fewer records (a replay)", with(func(c *Counters) { c.Attempt, c.Seen, c.Records = 2, 3, 3 })},
		{"more records seen", with(func(c *Counters) { c.Seen, c.Records = 11, 11 })},
		{"final at the same count", with(func(c *Counters) { c.Final, c.Lost = true, 5 })},
		{"a tie on the emission order broken by the counters", with(func(c *Counters) { c.Lost = 1 })},
		{"a tie broken by duplicates", with(func(c *Counters) { c.Duplicated = 1 })},
		{"a tie broken by reorders", with(func(c *Counters) { c.OutOfOrder = 1 })},
		{"a tie broken by the last seq", with(func(c *Counters) { c.Last = 10 })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !newer(tc.later, base) || newer(base, tc.later) {
				t.Fatalf("newer(later, base) = %v, newer(base, later) = %v; want true, false", newer(tc.later, base), newer(base, tc.later))
			}
			if newer(tc.later, tc.later) {
				t.Fatal("newer is not irreflexive")
			}
		})
	}
	if newer(base, base) {
		t.Fatal("newer(base, base)")
	}
}

// TestBuildRegistersTheSinkAccumulator: Build registers the sink under SinkAccumulator (a second
// registration of the name is refused), and the sink's encoding carries its counters to another copy.
func TestBuildRegistersTheSinkAccumulator(t *testing.T) {
	env := runnel.NewEnvironment()
	j := New(nil)
	if err := j.Build(env, run.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	runnel.RegisterAccumulator(env, SinkAccumulator, j.sink)
	if err := env.Err(); err == nil || !strings.Contains(err.Error(), `RegisterAccumulator("sequence.sink"): an accumulator of that name is already registered`) {
		t.Fatalf("a second registration: err = %v", err)
	}
	w, _ := j.sink.CreateWriter(nil)
	_ = w.Write(Counters{Key: 1, Records: 5, Seen: 5, Last: 4})
	_ = w.Close()
	data, err := j.sink.EncodeAccumulator()
	if err != nil {
		t.Fatal(err)
	}
	other := New(nil)
	if err := other.Build(runnel.NewEnvironment(), run.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := other.sink.MergeAccumulator(data); err != nil {
		t.Fatal(err)
	}
	if got := other.Latest()[1]; got.Records != 5 {
		t.Fatalf("merged counters %+v", got)
	}
}

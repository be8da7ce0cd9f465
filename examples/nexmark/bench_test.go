package nexmark_test

import (
	"testing"

	"github.com/runnel-dev/runnel/examples/nexmark"
)

// TestGeneratorAllocations: a person, an auction or a bid costs at most one allocation (its strings);
// a bid's channel and url come from the shared table.
func TestGeneratorAllocations(t *testing.T) {
	g, err := nexmark.NewGenerator(nexmark.GeneratorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var e nexmark.Event
	for _, n := range []uint64{50, 51, 54} {
		g.Event(n, &e) // warm the scratch buffer and the channel table
		if a := testing.AllocsPerRun(100, func() { g.Event(n, &e) }); a > 1 {
			t.Errorf("event %d (%s): %v allocations, want at most 1", n, e.Kind, a)
		}
	}
}

func BenchmarkGenerator(b *testing.B) {
	g, err := nexmark.NewGenerator(nexmark.GeneratorConfig{})
	if err != nil {
		b.Fatal(err)
	}
	var e nexmark.Event
	b.ReportAllocs()
	n := uint64(0)
	for b.Loop() {
		g.Event(n, &e)
		n++
	}
}

func BenchmarkAppendEvent(b *testing.B) {
	evs := generate(b, nexmark.GeneratorConfig{}, 1000)
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		buf = nexmark.AppendEvent(buf[:0], &evs[i%len(evs)])
		i++
	}
}

func BenchmarkEventCodec(b *testing.B) {
	evs := generate(b, nexmark.GeneratorConfig{}, 1000)
	c := nexmark.EventCodec()
	buf := make([]byte, 0, 4096)
	var e nexmark.Event
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		buf, _ = c.Append(buf[:0], evs[i%len(evs)])
		if err := c.Decode(buf, &e); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

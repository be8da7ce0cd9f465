package nexmark_test

import (
	"bytes"
	"context"
	"log/slog"
	"syscall"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/nexmark"
	"github.com/runnel-dev/runnel/internal/heapbudget"
)

// TestGeneratorAllocations: the events' strings come from 16 KB slabs, so a batch of events costs a few
// allocations, not one per event; a bid's channel and url come from the shared table.
func TestGeneratorAllocations(t *testing.T) {
	g, err := nexmark.NewGenerator(nexmark.GeneratorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]nexmark.Event, 1000)
	n := uint64(0)
	batch := func() {
		for i := range evs {
			g.Event(n, &evs[i])
			n++
		}
	}
	batch() // warm the channel table
	// 1000 events hold about 89 KB of strings: 6 slabs.
	if a := testing.AllocsPerRun(20, batch); a > 8 {
		t.Errorf("%v allocations per 1000 events, want at most 8", a)
	}
}

// TestGeneratorStringsStay: the strings of an event stay as they were made while the generator goes on
// making the strings of many more events (slabs are never reused).
func TestGeneratorStringsStay(t *testing.T) {
	g, err := nexmark.NewGenerator(nexmark.GeneratorConfig{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	const kept = 300
	var evs [kept]nexmark.Event
	var want [kept][]byte
	for i := range evs {
		g.Event(uint64(i), &evs[i])
		want[i] = nexmark.AppendEvent(nil, &evs[i])
	}
	var e nexmark.Event
	for n := uint64(kept); n < 200_000; n++ {
		g.Event(n, &e)
	}
	for i := range evs {
		if got := nexmark.AppendEvent(nil, &evs[i]); !bytes.Equal(got, want[i]) {
			t.Fatalf("event %d changed:\n got %s\nwant %s", i, got, want[i])
		}
	}
}

// processCPU returns the CPU time the process has used, user and system, in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// reportCPU reports the process's CPU time per op (the collector's included) from now until the returned
// function is called after the loop: on a machine shared with other work it varies less than the time.
func reportCPU(b *testing.B) func() {
	start := processCPU(b)
	return func() { b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op") }
}

func BenchmarkGenerator(b *testing.B) {
	g, err := nexmark.NewGenerator(nexmark.GeneratorConfig{})
	if err != nil {
		b.Fatal(err)
	}
	var e nexmark.Event
	b.ReportAllocs()
	defer reportCPU(b)()
	n := uint64(0)
	for b.Loop() {
		g.Event(n, &e)
		n++
	}
}

// BenchmarkGeneratorBatch fills batches as a source subtask of two does: every other event, into a reused
// slice of a poll's size.
func BenchmarkGeneratorBatch(b *testing.B) {
	g, err := nexmark.NewGenerator(nexmark.GeneratorConfig{})
	if err != nil {
		b.Fatal(err)
	}
	evs := make([]nexmark.Event, 512)
	b.ReportAllocs()
	defer reportCPU(b)()
	n := uint64(0)
	for b.Loop() {
		for i := range evs {
			g.Event(n, &evs[i])
			n += 2
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
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

// BenchmarkQuery runs whole queries as `runnel bench nexmark` does (parallelism 2, the generator's events
// with event time, a counting sink), a job of queryEvents events per op, and reports the wall and CPU time
// per event: a form that benchstat can compare between builds with less noise than single runs of the
// command. Each op pays a job's start; -benchtime 5x is a fair size. The collector is paced by the default
// heap budget, as in the processes that run tasks.
func BenchmarkQuery(b *testing.B) {
	const queryEvents = 1_000_000
	pacer := heapbudget.Start(heapbudget.Default)
	defer pacer.Stop()
	for _, q := range []string{"q0", "q1", "q5", "q8", "q18", "q19"} {
		b.Run(q, func(b *testing.B) {
			cpu := processCPU(b)
			for b.Loop() {
				env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(slog.New(slog.DiscardHandler)))
				events := nexmark.Events(env, nexmark.Source(nexmark.GeneratorConfig{Events: queryEvents}), 0, nexmark.DefaultOutOfOrderness)
				r, err := nexmark.Build(q, events)
				if err != nil {
					b.Fatal(err)
				}
				c := &nexmark.Counter{}
				r.ToCounter(c)
				res, err := env.Execute(context.Background(), "bench-"+q)
				if err != nil || res.Status != "FINISHED" {
					b.Fatalf("%s: %v %+v", q, err, res)
				}
				if c.Count() == 0 {
					b.Fatalf("%s: no results", q)
				}
			}
			events := float64(b.N * queryEvents)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
			b.ReportMetric(float64(processCPU(b)-cpu)/events, "cpu-ns/event")
		})
	}
}

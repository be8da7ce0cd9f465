package throughput

import (
	"context"
	"testing"
)

// BenchmarkEnginePipeline runs the standard pipeline in the engine with b.N records: ns/op is the wall time
// per record at parallelism 2. With -cpuprofile it shows where the per-record time goes.
func BenchmarkEnginePipeline(b *testing.B) {
	cfg := Config{Records: uint64(b.N), Keys: 1024, Parallelism: 2}
	b.ReportAllocs()
	b.ResetTimer()
	if _, _, _, err := runEngine(context.Background(), cfg); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBaselinePipeline is the hand-written baseline of the same pipeline.
func BenchmarkBaselinePipeline(b *testing.B) {
	cfg := Config{Records: uint64(b.N), Keys: 1024, Parallelism: 2}
	b.ReportAllocs()
	b.ResetTimer()
	runBaseline(cfg)
}

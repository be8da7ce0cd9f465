package throughput

import (
	"context"
	"testing"
)

func TestEngineAndBaselineAgree(t *testing.T) {
	for _, cfg := range []Config{
		{Records: 50_001, Keys: 97, Verify: true},
		{Records: 10_000, Keys: 1024, Parallelism: 3, Verify: true},
	} {
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Direct computation of the final sums.
		p := uint64(cfg.Parallelism)
		if p == 0 {
			p = 2
		}
		want := map[int64]int64{}
		for s := uint64(0); s < p; s++ {
			n := cfg.Records / p
			if s < cfg.Records%p {
				n++
			}
			for seq := uint64(0); seq < n; seq++ {
				want[int64((seq*p+s)%uint64(cfg.Keys))] += int64(seq) + 1
			}
		}
		if c := Checksum(want); res.EngineChecksum != c || res.BaselineChecksum != c {
			t.Fatalf("%+v: checksums engine %x baseline %x, want %x", cfg, res.EngineChecksum, res.BaselineChecksum, c)
		}
		if res.EngineRPS <= 0 || res.BaselineRPS <= 0 || res.Ratio <= 0 {
			t.Fatalf("figures %+v", res)
		}
	}
}

func TestBadConfig(t *testing.T) {
	if _, err := Run(context.Background(), Config{Records: 0, Keys: 1}); err == nil {
		t.Fatal("no error for 0 records")
	}
	if _, err := Run(context.Background(), Config{Records: 10, Keys: 0}); err == nil {
		t.Fatal("no error for 0 keys")
	}
}

// TestDashboardOverhead runs the pipeline with its dashboard served and read: the reader reads the job's
// documents while it runs, and the job finishes as without it.
func TestDashboardOverhead(t *testing.T) {
	res, err := RunDashboardOverhead(context.Background(), Config{Records: 3_000_000, Keys: 1024, Runs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reads < 6 || res.EngineRPS <= 0 || res.DashboardRPS <= 0 {
		t.Fatalf("%+v: want every document of the job read once at least", res)
	}
}

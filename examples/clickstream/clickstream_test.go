package clickstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/clickstream"
	"github.com/runnel-dev/runnel/examples/internal/run"
)

func TestClickstreamExact(t *testing.T) {
	const p, records = 2, 20_000
	job := clickstream.New(nil)
	job.Records, job.Users, job.Pages, job.EmitEvery = records, 97, 7, 10
	env := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithTaskManagers(2))
	if err := job.Build(env, run.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "clickstream")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v %+v", err, res)
	}
	// Direct computation: each subtask emits records/p clicks.
	type key struct {
		user int64
		page int32
	}
	clicks := map[int64]int64{}
	perPage := map[key]int64{}
	for s := 0; s < p; s++ {
		for seq := uint64(0); seq < records/p; seq++ {
			c := clickstream.GenerateClick(97, 7, s, seq)
			clicks[c.User]++
			perPage[key{c.User, c.Page}]++
		}
	}
	got := job.Totals()
	if len(got) != len(clicks) {
		t.Fatalf("%d users, want %d", len(got), len(clicks))
	}
	for u, n := range clicks {
		g := got[u]
		if !g.Final || g.Clicks != n {
			t.Fatalf("user %d: %+v, want %d clicks (final)", u, g, n)
		}
		var pages int32
		top, topN := int32(-1), int64(0)
		for pg := int32(0); pg < 7; pg++ {
			if m := perPage[key{u, pg}]; m > 0 {
				pages++
				if m > topN {
					top, topN = pg, m
				}
			}
		}
		if g.Pages != pages || g.TopPage != top || g.TopClicks != topN {
			t.Fatalf("user %d: %+v, want pages %d top %d (%d)", u, g, pages, top, topN)
		}
	}
	var b strings.Builder
	job.Summary(&b, res)
	if !strings.Contains(b.String(), "97 users, 20000 clicks") {
		t.Fatalf("summary: %s", b.String())
	}
}

func TestClickstreamUnboundedCancel(t *testing.T) {
	job := clickstream.New(nil)
	job.Rate = 20_000
	env := runnel.NewEnvironment(runnel.WithParallelism(2))
	if err := job.Build(env, run.Options{Duration: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := env.Execute(ctx, "clickstream")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "CANCELED" {
		t.Fatalf("status %s", res.Status)
	}
}

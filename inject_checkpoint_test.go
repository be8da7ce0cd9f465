package runnel_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// holdingSource emits 0..n-1 with a hold in the middle: after n/2 records each attempt emits nothing until
// it hears that a checkpoint of at least holdUntil completed. So the job runs through checkpoints without
// records however fast or slow the machine is, and injections armed by those checkpoints fire at the first
// record after the hold.
type holdingSource struct{ n, holdUntil int64 }

func (s *holdingSource) CreateReader(runnel.RuntimeContext) (runnel.SourceReader[int64], error) {
	return &holdingReader{src: s, wake: make(chan struct{}, 1)}, nil
}

type holdingReader struct {
	src   *holdingSource
	next  int64
	heard bool // a checkpoint of at least holdUntil completed in this attempt
	wake  chan struct{}
}

func (r *holdingReader) PollNext(out runnel.Collector[int64]) (runnel.InputStatus, error) {
	for i := 0; i < 64 && r.next < r.src.n; i++ {
		if r.next >= r.src.n/2 && !r.heard {
			return runnel.NothingAvailable, nil
		}
		out.Collect(r.next)
		r.next++
	}
	if r.next == r.src.n {
		return runnel.EndOfInput, nil
	}
	return runnel.MoreAvailable, nil
}

func (r *holdingReader) Available() <-chan struct{} { return r.wake }
func (r *holdingReader) Close() error               { return nil }

func (r *holdingReader) SnapshotState(int64) ([]byte, error) {
	return binary.AppendVarint(nil, r.next), nil
}

func (r *holdingReader) RestoreState(b []byte) error {
	v, k := binary.Varint(b)
	if k <= 0 || k != len(b) {
		return fmt.Errorf("holding source: bad state % x", b)
	}
	r.next = v
	return nil
}

func (r *holdingReader) NotifyCheckpointComplete(id int64) error {
	if id >= r.src.holdUntil && !r.heard {
		r.heard = true
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// TestInjectionAfterCheckpoint fails a subtask twice with chk-N injections: each fires at the first record
// after the subtask heard of checkpoint N (or a later one), so each failover restores a checkpoint at least
// that new, and the count comes out exact.
func TestInjectionAfterCheckpoint(t *testing.T) {
	const n = 4000
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 10 * time.Millisecond}),
		runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"),
		runnel.WithFailureInjection("map[0]@chk-2", "map[0]@chk-4"))
	src := runnel.FromSource(env, runnel.Source[int64](&holdingSource{n: n, holdUntil: 5})).Name("source")
	sink := connector.NewCollect[int64]()
	runnel.Map(src, func(v int64) (int64, error) { return v, nil }).Name("map").Rebalance().SinkTo(sink).Name("sink")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "after checkpoints")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if len(res.Failovers) != 2 {
		t.Fatalf("%d failovers, want 2: %+v", len(res.Failovers), res.Failovers)
	}
	for i, f := range res.Failovers {
		spec := []string{"map[0]@chk-2", "map[0]@chk-4"}[i]
		if !strings.Contains(f.Cause, "injected failure "+spec) {
			t.Fatalf("failover %d: cause %q, want %s", i, f.Cause, spec)
		}
		// The source held its records back until checkpoint 5 completed, so no record, and no failure,
		// came before it.
		if f.CheckpointRestored == nil || *f.CheckpointRestored < 5 {
			t.Fatalf("failover %d restored %v, want checkpoint 5 or later", i, f.CheckpointRestored)
		}
	}
	seen := make([]int, n)
	for _, v := range sink.Records() {
		seen[v]++
	}
	for v, c := range seen {
		if c != 1 {
			t.Fatalf("record %d came %d times, want once", v, c)
		}
	}
}

// TestUnfiredInjectionsAreReported runs a bounded job with one injection it reaches and two it does not (a
// count its subtask never sees, a checkpoint that never comes): the result lists the two, and the log
// warns of each, so that a test or demo that asked for failures knows it got fewer.
func TestUnfiredInjectionsAreReported(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	env := runnel.NewEnvironment(runnel.WithParallelism(1), runnel.WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))),
		runnel.WithRestartStrategy("fixed-delay:attempts=2,delay=0s"),
		runnel.WithFailureInjection("map[0]@100", "map[0]@1000000", "map[0]@chk-1"))
	src := runnel.FromSource(env, connector.Collection(make([]int64, 1000))).Name("source")
	runnel.Map(src, func(v int64) (int64, error) { return v, nil }).Name("map").SinkTo(connector.Discard[int64]())
	res, err := env.Execute(context.Background(), "unfired")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v, %+v", err, res)
	}
	if want := []string{"map[0]@1000000", "map[0]@chk-1"}; !slices.Equal(res.UnfiredInjections, want) || len(res.Failovers) != 1 {
		t.Fatalf("unfired %q and %d failovers, want %q and 1", res.UnfiredInjections, len(res.Failovers), want)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, spec := range res.UnfiredInjections {
		if !strings.Contains(logs.String(), `level=WARN msg="a failure injection never fired: the job ended before it was due" job=unfired injection=`+spec) {
			t.Errorf("no WARN for %s in:\n%s", spec, logs.String())
		}
	}
}

// lockedWriter serializes writes to w: the job logs from several goroutines.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

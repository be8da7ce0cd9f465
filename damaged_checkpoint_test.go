package runnel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// TestFailoverPassesOverDamagedNewestCheckpoint damages every state blob of the newest checkpoint of a
// running job and then fails a subtask: the failover must restore the older, valid checkpoint, report
// that one, and deploy the restarted subtasks with it (restoring the damaged one would fail every
// restart), and the sums must come out exact.
func TestFailoverPassesOverDamagedNewestCheckpoint(t *testing.T) {
	dir := t.TempDir()
	const keys, per, p = 7, 6000, 2
	var fail atomic.Bool
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	env := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithLogger(logger),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 300 * time.Millisecond, Retained: 3, Storage: dir}),
		runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"))
	src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed { return keyed{F0: int64(s) % keys, F1: 1} },
		connector.GeneratorOptions{RecordsPerSubtask: per, RatePerSubtask: 5000})).Name("source")
	m := runnel.Map(src, func(v keyed) (keyed, error) {
		if fail.CompareAndSwap(true, false) {
			return v, errors.New("failure after the newest checkpoint was damaged")
		}
		return v, nil
	}).Name("map").WithCodec(keyedCodec)
	sums := runnel.Reduce(runnel.KeyBy(m, func(v keyed) int64 { return v.F0 }),
		func(a, b keyed) (keyed, error) { a.F1 += b.F1; return a, nil }).Name("sum").WithCodec(keyedCodec)
	sink := connector.NewCollect[keyed]()
	sums.SinkTo(sink).Name("sink")

	// Once checkpoint 2 is committed, damage all its state and fail the map at its next record: the next
	// checkpoint is 300 ms away, so 2 is the newest when the failover looks.
	damaged := make(chan error, 1)
	go func() {
		chk := filepath.Join(dir, "chk-2")
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(filepath.Join(chk, "_metadata")); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		n, err := damageStateBlobs(chk)
		if err == nil && n == 0 {
			err = fmt.Errorf("no state blob in %s", chk)
		}
		fail.Store(true)
		damaged <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "damaged-newest")
	if derr := <-damaged; derr != nil {
		t.Fatal(derr)
	}
	if err != nil {
		t.Fatalf("job: %v (result %+v)", err, res)
	}
	if len(res.Failovers) != 1 {
		t.Fatalf("%d failovers, want 1: %+v", len(res.Failovers), res.Failovers)
	}
	if f := res.Failovers[0]; f.CheckpointRestored == nil || *f.CheckpointRestored != 1 {
		t.Fatalf("failover restored %v, want checkpoint 1 (2 is damaged): %+v", f.CheckpointRestored, f)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"checkpoint is damaged; restoring an older one\" job=damaged-newest checkpoint=2") {
		t.Fatalf("no WARN names the damaged checkpoint 2; logs:\n%s", logs.String())
	}
	got := latest(sink.Records())
	for k := int64(0); k < keys; k++ {
		want := int64(0)
		for i := int64(0); i < per; i++ {
			if i%keys == k {
				want += p
			}
		}
		if got[k] != want {
			t.Fatalf("key %d = %d, want %d (all %v)", k, got[k], want, got)
		}
	}
}

// damageStateBlobs flips a byte in the middle of every state blob of a checkpoint directory and returns
// how many it damaged.
func damageStateBlobs(chk string) (int, error) {
	n := 0
	err := filepath.WalkDir(chk, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "_metadata" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			return err
		}
		b[len(b)/2] ^= 0xff
		n++
		return os.WriteFile(path, b, 0o644)
	})
	return n, err
}

// TestFailoverWithEveryCheckpointDamagedFailsTheJob damages the state of every retained checkpoint before a
// failure: no restart can restore a valid state, so the job fails at once, saying so, instead of restarting
// from a damaged checkpoint again and again under the default (unlimited) restart strategy.
func TestFailoverWithEveryCheckpointDamagedFailsTheJob(t *testing.T) {
	dir := t.TempDir()
	var fail atomic.Bool
	env := runnel.NewEnvironment(runnel.WithParallelism(2), runnel.WithLogger(quiet),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 300 * time.Millisecond, Retained: 3, Storage: dir}))
	src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed { return keyed{F0: int64(s) % 5, F1: 1} },
		connector.GeneratorOptions{RecordsPerSubtask: 20000, RatePerSubtask: 5000})).Name("source")
	m := runnel.Map(src, func(v keyed) (keyed, error) {
		if fail.CompareAndSwap(true, false) {
			return v, errors.New("failure after every checkpoint was damaged")
		}
		return v, nil
	}).Name("map").WithCodec(keyedCodec)
	runnel.Reduce(runnel.KeyBy(m, func(v keyed) int64 { return v.F0 }),
		func(a, b keyed) (keyed, error) { a.F1 += b.F1; return a, nil }).Name("sum").WithCodec(keyedCodec).
		SinkTo(connector.Discard[keyed]()).Name("sink")
	damaged := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(filepath.Join(dir, "chk-2", "_metadata")); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		total := 0
		for _, chk := range []string{"chk-1", "chk-2"} {
			n, err := damageStateBlobs(filepath.Join(dir, chk))
			if err != nil {
				damaged <- err
				return
			}
			total += n
		}
		if total == 0 {
			damaged <- errors.New("no state blob damaged")
			return
		}
		fail.Store(true)
		damaged <- nil
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "all-damaged")
	if derr := <-damaged; derr != nil {
		t.Fatal(derr)
	}
	if ctx.Err() != nil {
		t.Fatalf("the job kept restarting from damaged checkpoints: %+v", res.Failovers)
	}
	if err == nil || res.Status != "FAILED" || !strings.Contains(err.Error(), "no valid checkpoint to restore") {
		t.Fatalf("status %s, error %v: want FAILED for want of a valid checkpoint", res.Status, err)
	}
}

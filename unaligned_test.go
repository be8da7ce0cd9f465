package runnel_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// slowSumJob builds generator -> map (fails once when fail is set) -> keyBy -> sum -> collect sink, the sum
// slowed to about rate records per second so that it backpressures the map and the sources.
func slowSumJob(env *runnel.Environment, keys, per int64, rate float64, fail *atomic.Bool, sumParallelism ...int) *connector.Collect[keyed] {
	src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed { return keyed{F0: int64(s) % keys, F1: 1} },
		connector.GeneratorOptions{RecordsPerSubtask: uint64(per), RatePerSubtask: 2 * rate})).Name("source")
	m := runnel.Map(src, func(v keyed) (keyed, error) {
		if fail.CompareAndSwap(true, false) {
			return v, errors.New("injected failure")
		}
		return v, nil
	}).Name("map").WithCodec(keyedCodec)
	var mu sync.Mutex
	var n int64
	var start time.Time
	sums := runnel.Reduce(runnel.KeyBy(m, func(v keyed) int64 { return v.F0 }), func(a, b keyed) (keyed, error) {
		// Paced: the sum subtasks together run at about rate records per second.
		mu.Lock()
		if n == 0 {
			start = time.Now()
		}
		n++
		var d time.Duration
		if n%32 == 0 {
			d = time.Until(start.Add(time.Duration(float64(n) / rate * float64(time.Second))))
		}
		mu.Unlock()
		if d > 0 {
			time.Sleep(d)
		}
		a.F1 += b.F1
		return a, nil
	}).Name("sum").WithCodec(keyedCodec)
	if len(sumParallelism) > 0 {
		sums = sums.SetParallelism(sumParallelism[0])
	}
	sink := connector.NewCollect[keyed]()
	sums.SinkTo(sink).Name("sink")
	return sink
}

// inflightEntry returns where the value of the channel state entry of an unaligned checkpoint lies in a
// state blob's bytes, or ok false.
func inflightEntry(b []byte) (start, n int, ok bool) {
	name := []byte("\x00inflight")
	i := bytes.Index(b, name)
	if i < 0 || i+len(name)+binary.MaxVarintLen64 > len(b) {
		return 0, 0, false
	}
	at := i + len(name)
	l, k := binary.Uvarint(b[at : at+binary.MaxVarintLen64])
	if k <= 0 {
		return 0, 0, false
	}
	start = at + binary.MaxVarintLen64
	return start, int(l), start+int(l) <= len(b)
}

// TestUnalignedDamagedChannelStatePassedOver: an unaligned checkpoint of a backpressured job holds records
// in flight; a byte of that channel state is flipped in storage (nothing else), and a failure follows.
// The failover finds the checkpoint damaged, restores the one before, says so, and the sums come out
// exact.
func TestUnalignedDamagedChannelStatePassedOver(t *testing.T) {
	dir := t.TempDir()
	const keys, per, p = 7, 30000, 2
	var fail atomic.Bool
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	env := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithLogger(logger), runnel.WithChaining(false),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 300 * time.Millisecond, Retained: 3, Storage: dir, Unaligned: true}),
		runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"))
	sink := slowSumJob(env, keys, per, 15000, &fail)

	damaged := make(chan error, 1)
	go func() {
		damaged <- func() error {
			chk := filepath.Join(dir, "chk-2")
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := os.Stat(filepath.Join(chk, "_metadata")); err == nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
			n := 0
			err := filepath.WalkDir(chk, func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() == "_metadata" {
					return err
				}
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				start, l, ok := inflightEntry(b)
				if !ok || l < 64 { // an empty entry is a few bytes: no records in flight here
					return nil
				}
				b[start+l/2] ^= 0xff
				n++
				return os.WriteFile(path, b, 0o644)
			})
			if err == nil && n == 0 {
				err = fmt.Errorf("no state blob in %s holds records in flight", chk)
			}
			fail.Store(true)
			return err
		}()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "damaged-channel-state")
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
	if !strings.Contains(logs.String(), "checkpoint is damaged; restoring an older one\" job=damaged-channel-state checkpoint=2") {
		t.Fatalf("no WARN names the damaged checkpoint 2; logs:\n%s", logs.String())
	}
	checkKeyedSums(t, sink, keys, per, p)
}

// TestUnalignedCheckpointRescaleRefused: a retained unaligned checkpoint of a backpressured job holds
// records in flight. Restored at the parallelism it was taken with, by a new run of the job, it finishes
// with exact sums (the records in flight are processed once); restored with the sum at another
// parallelism it is refused, with a message that says to take a savepoint.
func TestUnalignedCheckpointRescaleRefused(t *testing.T) {
	dir := t.TempDir()
	const keys, per, p = 7, 30000, 2
	var never atomic.Bool
	env := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithLogger(quiet), runnel.WithChaining(false),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 200 * time.Millisecond, Retained: 100, Storage: dir, Unaligned: true}))
	slowSumJob(env, keys, per, 15000, &never)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	found := make(chan string, 1)
	go func() {
		defer cancel()
		for id := 1; ctx.Err() == nil; {
			chk := filepath.Join(dir, fmt.Sprintf("chk-%d", id))
			if _, err := os.Stat(filepath.Join(chk, "_metadata")); err != nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			held := false
			_ = filepath.WalkDir(chk, func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() == "_metadata" {
					return err
				}
				if b, err := os.ReadFile(path); err == nil {
					if _, l, ok := inflightEntry(b); ok && l >= 64 {
						held = true
					}
				}
				return nil
			})
			if held {
				found <- chk
				return
			}
			id++
		}
	}()
	if res, err := env.Execute(ctx, "unaligned-rescale"); err != nil || res.Status != "CANCELED" {
		t.Fatalf("first run: %v, %+v", err, res)
	}
	var chk string
	select {
	case chk = <-found:
	default:
		t.Fatal("no checkpoint held records in flight")
	}

	env2 := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithLogger(quiet), runnel.WithChaining(false),
		runnel.WithRestoreFrom(chk), runnel.WithRestartStrategy("none"))
	slowSumJob(env2, keys, per, 15000, &never, p+1)
	res, err := env2.Execute(context.Background(), "unaligned-rescale")
	msg := fmt.Sprint(err)
	if res != nil {
		msg += " " + res.Error
	}
	if (err == nil && res.Status != "FAILED") || !strings.Contains(msg, "unaligned checkpoint's records in flight cannot be redistributed") || !strings.Contains(msg, "savepoint") {
		t.Fatalf("restore with the sum at parallelism %d: %v, %+v", p+1, err, res)
	}

	env3 := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithLogger(quiet), runnel.WithChaining(false),
		runnel.WithRestoreFrom(chk), runnel.WithRestartStrategy("none"))
	sink := slowSumJob(env3, keys, per, 30000, &never)
	if res, err := env3.Execute(context.Background(), "unaligned-rescale"); err != nil || res.Status != "FINISHED" {
		t.Fatalf("restore at parallelism %d: %v, %+v", p, err, res)
	}
	checkKeyedSums(t, sink, keys, per, p)
}

// checkKeyedSums checks the latest sum per key of p sources of per records each, keyed by i % keys.
func checkKeyedSums(t *testing.T, sink *connector.Collect[keyed], keys, per, p int64) {
	t.Helper()
	got := latest(sink.Records())
	for k := range keys {
		want := int64(0)
		for i := range per {
			if i%keys == k {
				want += p
			}
		}
		if got[k] != want {
			t.Fatalf("key %d = %d, want %d (all %v)", k, got[k], want, got)
		}
	}
}

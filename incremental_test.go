package runnel_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// bucketCounts counts each key's records in a map state by bucket (so that the incremental snapshots
// have per-key maps to leave out or write) and emits the key's total.
type bucketCounts struct {
	runnel.KeyedProcessBase[int64, keyed]
	m runnel.MapState[int64, int64]
}

func (f *bucketCounts) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	f.m, err = runnel.NewMapState[int64, int64](ctx, "buckets")
	return err
}

func (f *bucketCounts) ProcessElement(_ runnel.KeyedContext[int64], v keyed, out runnel.Collector[keyed]) error {
	n, _ := f.m.Get(v.F1 % 4)
	f.m.Put(v.F1%4, n+1)
	total := int64(0)
	f.m.Range(func(_, c int64) bool { total += c; return true })
	out.Collect(keyed{F0: v.F0, F1: total})
	return nil
}

// incrementalJob is generator -> keyBy -> bucketCounts (parallelism p) -> collect sink at 1. Most keys
// are touched rarely (key s*s % keys), so that deltas leave most of them out.
func incrementalJob(p int, rate float64, sink runnel.Sink[keyed], opts ...runnel.Option) *runnel.Environment {
	return incrementalJobOf(p, rate, false, sink, opts...)
}

// incrementalJobOf is incrementalJob, evolved with an operator chained behind counts if evolved says so.
func incrementalJobOf(p int, rate float64, evolved bool, sink runnel.Sink[keyed], opts ...runnel.Option) *runnel.Environment {
	const perSubtask, keys = 4000, incrementalKeys
	env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet)}, opts...)...)
	src := runnel.FromSource(env, connector.Generator(func(sub int, s uint64) keyed {
		return keyed{F0: int64(s*s+uint64(sub)) % keys, F1: int64(s)}
	}, connector.GeneratorOptions{RecordsPerSubtask: perSubtask, RatePerSubtask: rate})).Name("source").WithCodec(keyedCodec)
	counts := runnel.Process(runnel.KeyBy(src, func(v keyed) int64 { return v.F0 }),
		func() runnel.KeyedProcessFunction[int64, keyed, keyed] { return &bucketCounts{} }).
		Name("counts").WithCodec(keyedCodec).SetParallelism(p)
	if evolved {
		// A stateless operator chained behind counts: the vertex holds other uids than in the
		// checkpoint, so its state is re-mapped by uid.
		counts = runnel.Map(counts, func(v keyed) (keyed, error) { return v, nil }).Name("pass").Uid("pass").WithCodec(keyedCodec)
	}
	counts.Rebalance().SinkTo(sink).Name("sink").SetParallelism(1)
	return env
}

// incrementalKeys are many, so that a checkpoint 20 ms after the last one changes a few per cent of them
// and chains grow long before they start again.
const incrementalKeys = 4000

func incrementalWant() map[int64]int64 {
	want := map[int64]int64{}
	for sub := uint64(0); sub < 2; sub++ {
		for s := uint64(0); s < 4000; s++ {
			want[int64(s*s+sub)%incrementalKeys]++
		}
	}
	return want
}

// TestIncrementalCheckpointsRestoreAndRescale stops a job with incremental checkpoints every 20 ms
// after a while, with a savepoint, and restores it at other parallelisms: from the savepoint (2 to 3)
// and from the retained checkpoints in its storage (2 to 1, reading the shared blobs there; and into a
// job with an operator chained behind the stateful one, whose state is then re-mapped by uid). The
// checkpoints must really be chains (a handle lists several blobs), and every restored run must count
// exactly. The storage holds, after the first run, every shared blob a retained checkpoint lists and no
// other one of a checkpoint up to the newest. Then a shared blob that only the newest checkpoint lists
// is deleted: a restore from the storage names it, falls back to the checkpoint before, and is exact too.
func TestIncrementalCheckpointsRestoreAndRescale(t *testing.T) {
	dir := t.TempDir()
	storage, sp := filepath.Join(dir, "chk"), filepath.Join(dir, "sp")
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	res, err := incrementalJob(2, 6000, connector.Discard[keyed](), runnel.WithIncrementalCheckpoints(),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond, Storage: storage}),
		runnel.WithSavepointOnStop(sp)).Execute(ctx, "first")
	if err != nil || res.Status != "CANCELED" || res.Savepoint != sp {
		t.Fatalf("first run: %v, %+v", err, res)
	}
	if v := res.Vertex("source"); v == nil || v.RecordsOut == 0 || v.RecordsOut >= 8000 {
		t.Fatalf("the savepoint must fall inside the input: the source emitted %+v", v)
	}
	st, err := checkpoint.OpenExisting(context.Background(), storage)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checkSharedRetention(t, st)
	latestCP, _, err := st.Latest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The retained checkpoints (the newest two) are incremental: at most one of them starts a chain.
	chained := false
	ids, err := st.IDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if cp, err := st.ReadCheckpoint(context.Background(), id); err == nil {
			for _, h := range cp.States {
				chained = chained || (len(h.Blobs) > 1 && h.Blobs[0].Shared)
			}
		}
	}
	if !chained || !latestCP.HasShared() {
		t.Fatalf("no retained checkpoint is a chain (ids %v; the newest: %+v)", ids, latestCP.States)
	}
	for _, tc := range []struct {
		name    string
		p       int
		from    string
		evolved bool
	}{
		{"savepoint 2 to 3", 3, sp, false},
		{"storage 2 to 1", 1, storage, false},
		{"storage re-mapped by uid", 2, storage, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := connector.NewCollect[keyed]()
			res, err := incrementalJobOf(tc.p, 0, tc.evolved, sink, runnel.WithIncrementalCheckpoints(), runnel.WithRestoreFrom(tc.from),
				runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond})).Execute(context.Background(), "rescaled")
			if err != nil || res.Status != "FINISHED" || res.RestoredFrom == nil {
				t.Fatalf("restored run: %v, %+v", err, res)
			}
			if got, want := latest(sink.Records()), incrementalWant(); !maps.Equal(got, want) {
				t.Fatalf("%d keys counted, want %d; counts differ: %v", len(got), len(want), diffCounts(got, want))
			}
		})
	}
	// The newest checkpoint's own shared blob of a counts subtask goes: the restore falls back.
	var gone string
	for _, h := range latestCP.States {
		if slices.Contains(h.Operators, "counts") {
			gone = h.Blobs[len(h.Blobs)-1].Key
			break
		}
	}
	if err := os.Remove(filepath.Join(storage, "shared", gone)); err != nil {
		t.Fatal(err)
	}
	sink := connector.NewCollect[keyed]()
	res, err = incrementalJob(2, 0, sink, runnel.WithRestoreFrom(storage),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 20 * time.Millisecond})).Execute(context.Background(), "fallback")
	if err != nil || res.Status != "FINISHED" || res.RestoredFrom == nil {
		t.Fatalf("fallback run: %v, %+v", err, res)
	}
	if res.RestoredFrom.CheckpointID >= latestCP.ID || len(res.RestoredFrom.Skipped) == 0 ||
		!strings.Contains(res.RestoredFrom.Skipped[0], gone) || !strings.Contains(res.RestoredFrom.Skipped[0], "missing blob") {
		t.Fatalf("restored from %+v, want a checkpoint before %d and the missing %s named", res.RestoredFrom, latestCP.ID, gone)
	}
	if got, want := latest(sink.Records()), incrementalWant(); !maps.Equal(got, want) {
		t.Fatalf("after the fallback: counts differ: %v", diffCounts(got, want))
	}
}

// checkSharedRetention checks that every shared blob a retained checkpoint lists is in storage, and that
// every other one was written for a checkpoint newer than the newest retained (in progress at the end).
func checkSharedRetention(t *testing.T, st *checkpoint.Storage) {
	t.Helper()
	ctx := context.Background()
	ids, err := st.IDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	newest := int64(0)
	for _, id := range ids {
		cp, err := st.ReadCheckpoint(ctx, id)
		if errors.Is(err, checkpoint.ErrIncomplete) {
			continue
		}
		if err != nil {
			t.Fatalf("retained checkpoint %d: %v", id, err) // a missing shared blob shows here
		}
		newest = max(newest, id)
		for _, h := range cp.States {
			for _, ref := range h.Blobs {
				listed[ref.Key] = ref.Shared
			}
		}
	}
	keys, err := st.SharedKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		var v, i, a, c int64
		if _, err := fmt.Sscanf(k, "v%d-%d-a%d-c%d-", &v, &i, &a, &c); err != nil {
			t.Fatalf("shared blob %s: %v", k, err)
		}
		if !listed[k] && c <= newest {
			t.Errorf("shared blob %s of checkpoint %d is listed by no retained checkpoint (%v), the newest is %d", k, c, ids, newest)
		}
	}
	if len(keys) == 0 || !slices.ContainsFunc(keys, func(k string) bool { return listed[k] }) {
		t.Fatalf("no shared blob in use: %v", keys)
	}
}

func diffCounts(got, want map[int64]int64) []string {
	var d []string
	for k, w := range want {
		if got[k] != w && len(d) < 5 {
			d = append(d, fmt.Sprintf("key %d: %d, want %d", k, got[k], w))
		}
	}
	return d
}

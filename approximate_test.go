package runnel_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

// seqRec is a record numbered per source subtask, padded to a chosen size.
type seqRec struct {
	Src, Seq int64
	Pad      []byte
}

// seenSink keeps, per source subtask, the sequence numbers its writers received, in checkpointed state:
// after a restore it holds exactly what the restored attempt is accountable for, so the numbers missing at
// the end are the loss of approximate recovery.
type seenSink struct {
	mu   sync.Mutex
	seen map[string]map[int64][]int64 // writer -> src -> seqs
}

func newSeenSink() *seenSink { return &seenSink{seen: map[string]map[int64][]int64{}} }

func (s *seenSink) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[seqRec], error) {
	return &seenWriter{s: s, name: fmt.Sprintf("%d", ctx.SubtaskIndex()), seen: map[int64][]int64{}}, nil
}

// missing returns, over all writers, how many sequence numbers of src below n were never seen, and how many
// were seen twice.
func (s *seenSink) missing(src, n int64) (lost, dup int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	count := make(map[int64]int)
	for _, w := range s.seen {
		for _, q := range w[src] {
			count[q]++
		}
	}
	for q := int64(0); q < n; q++ {
		switch c := count[q]; {
		case c == 0:
			lost++
		case c > 1:
			dup += int64(c - 1)
		}
	}
	return lost, dup
}

type seenWriter struct {
	s    *seenSink
	name string
	seen map[int64][]int64
}

func (w *seenWriter) Write(r seqRec) error {
	w.seen[r.Src] = append(w.seen[r.Src], r.Seq)
	return nil
}

func (w *seenWriter) publish() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	m := make(map[int64][]int64, len(w.seen))
	for k, v := range w.seen {
		m[k] = append([]int64(nil), v...)
	}
	w.s.seen[w.name] = m
}

func (w *seenWriter) Flush() error { w.publish(); return nil }
func (w *seenWriter) Close() error { w.publish(); return nil }

func (w *seenWriter) SnapshotState(int64) ([]byte, error) {
	var b []byte
	srcs := make([]int64, 0, len(w.seen))
	for k := range w.seen {
		srcs = append(srcs, k)
	}
	sort.Slice(srcs, func(i, j int) bool { return srcs[i] < srcs[j] })
	b = binary.AppendUvarint(b, uint64(len(srcs)))
	for _, k := range srcs {
		b = binary.AppendVarint(b, k)
		b = binary.AppendUvarint(b, uint64(len(w.seen[k])))
		for _, q := range w.seen[k] {
			b = binary.AppendVarint(b, q)
		}
	}
	return b, nil
}

func (w *seenWriter) RestoreState(b []byte) error {
	bad := errors.New("bad sink state")
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return bad
	}
	b = b[k:]
	w.seen = map[int64][]int64{}
	for i := uint64(0); i < n; i++ {
		src, k := binary.Varint(b)
		if k <= 0 {
			return bad
		}
		b = b[k:]
		m, k := binary.Uvarint(b)
		if k <= 0 {
			return bad
		}
		b = b[k:]
		for j := uint64(0); j < m; j++ {
			q, k := binary.Varint(b)
			if k <= 0 {
				return bad
			}
			b = b[k:]
			w.seen[src] = append(w.seen[src], q)
		}
	}
	return nil
}

func seqSource(perSubtask uint64, rate float64, pad int) runnel.Source[seqRec] {
	return connector.Generator(func(sub int, s uint64) seqRec {
		return seqRec{Src: int64(sub), Seq: int64(s), Pad: make([]byte, pad)}
	}, connector.GeneratorOptions{RecordsPerSubtask: perSubtask, RatePerSubtask: rate})
}

func approximateOpts(extra ...runnel.Option) []runnel.Option {
	return append([]runnel.Option{runnel.WithLogger(quiet), runnel.WithParallelism(2), runnel.WithChaining(false),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 30 * time.Millisecond, ApproximateLocalRecovery: true}),
		runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s")}, extra...)
}

func attempts(res *runnel.JobResult) map[string]int {
	m := map[string]int{}
	for _, v := range res.Vertices {
		for _, s := range v.Subtasks {
			m[fmt.Sprintf("%s[%d]", v.Name, s.Index)] = s.Attempt
		}
	}
	return m
}

func sumLost(res *runnel.JobResult) (lost uint64) {
	for _, f := range res.Failovers {
		lost += f.RecordsLost
	}
	return lost
}

// TestApproximateChain: source -> map -> sink, every subtask on its own TaskManager slot (all edges over
// TCP, or all local); map[0] fails. Exactly map[0] and sink[0] restart, once; the sources never; the sink's
// output goes on past the failure; the numbers it misses are exactly the reported loss.
func TestApproximateChain(t *testing.T) {
	const per = 12000
	for _, tc := range []struct {
		name string
		opts []runnel.Option
	}{
		{"tcp", []runnel.Option{runnel.WithTaskManagers(3), runnel.WithSlotSharing(false), runnel.WithSlotsPerTaskManager(2)}},
		{"local", []runnel.Option{runnel.WithTaskManagers(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(approximateOpts(append(tc.opts, runnel.WithFailureInjection("map[0]@4000"))...)...)
			src := runnel.FromSource(env, seqSource(per, 24000, 8)).Name("source").WithCodec(codec.MustStruct[seqRec]())
			m := runnel.Map(src, func(r seqRec) (seqRec, error) { return r, nil }).Name("map").WithCodec(codec.MustStruct[seqRec]())
			sink := newSeenSink()
			m.SinkTo(sink).Name("sink")
			res, err := env.Execute(context.Background(), "approximate-chain")
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Failovers) != 1 || fmt.Sprint(res.Failovers[0].Restarted) != "[map[0] sink[0]]" {
				t.Fatalf("failovers %+v", res.Failovers)
			}
			want := map[string]int{"source[0]": 0, "source[1]": 0, "map[0]": 1, "map[1]": 0, "sink[0]": 1, "sink[1]": 0}
			if got := attempts(res); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("attempts %v, want %v", got, want)
			}
			// The failure strikes at record 4000 of 12000: output goes on past it if less than the 8000 after
			// it is lost (the loss itself depends on the outage, which a loaded machine stretches).
			lost, dup := sink.missing(0, per)
			if dup != 0 || uint64(lost) != sumLost(res) || lost == 0 || lost >= per-4000 {
				t.Fatalf("sink misses %d and duplicates %d of subtask 0's records; the failover reports %+v", lost, dup, res.Failovers[0])
			}
			if lost1, dup1 := sink.missing(1, per); lost1 != 0 || dup1 != 0 {
				t.Fatalf("the untouched path lost %d, duplicated %d", lost1, dup1)
			}
		})
	}
}

// TestApproximateShuffleLargeRecords: source -> keyBy -> map(p=2) -> sink(p=1) with records spanning
// several buffers; map[0] fails. Only map[0] and the sink restart; map[1] and the sources never; no record
// arrives corrupted; the loss is exact.
func TestApproximateShuffleLargeRecords(t *testing.T) {
	const per = 3000
	env := runnel.NewEnvironment(approximateOpts(runnel.WithTaskManagers(2), runnel.WithBufferSize(128),
		runnel.WithFailureInjection("map[0]@1000"))...)
	src := runnel.FromSource(env, seqSource(per, 6000, 300)).Name("source").WithCodec(codec.MustStruct[seqRec]())
	keyed := runnel.KeyBy(src, func(r seqRec) int64 { return r.Seq % 16 })
	m := runnel.Process(keyed, func() runnel.KeyedProcessFunction[int64, seqRec, seqRec] { return &passThrough{} }).
		Name("map").WithCodec(codec.MustStruct[seqRec]())
	sink := newSeenSink()
	m.SinkTo(sink).Name("sink").SetParallelism(1)
	res, err := env.Execute(context.Background(), "approximate-shuffle")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failovers) != 1 || fmt.Sprint(res.Failovers[0].Restarted) != "[map[0] sink[0]]" {
		t.Fatalf("failovers %+v", res.Failovers)
	}
	for name, a := range attempts(res) {
		if want := map[bool]int{true: 1, false: 0}[name == "map[0]" || name == "sink[0]"]; a != want {
			t.Errorf("%s attempt %d, want %d", name, a, want)
		}
	}
	var lost, dup int64
	for src := int64(0); src < 2; src++ {
		l, d := sink.missing(src, per)
		lost, dup = lost+l, dup+d
	}
	if dup != 0 || uint64(lost) != sumLost(res) {
		t.Fatalf("sink misses %d, duplicates %d; failover %+v", lost, dup, res.Failovers[0])
	}
	if v := res.Vertex("map"); v.Subtasks[1].RecordsIn == 0 {
		t.Fatal("map[1] saw nothing")
	}
}

type passThrough struct {
	runnel.KeyedProcessBase[int64, seqRec]
}

func (passThrough) ProcessElement(_ runnel.KeyedContext[int64], v seqRec, out runnel.Collector[seqRec]) error {
	if len(v.Pad) != 300 {
		return fmt.Errorf("record %d/%d arrived with %d pad bytes", v.Src, v.Seq, len(v.Pad))
	}
	out.Collect(v)
	return nil
}

// TestApproximateSourceFailure: a failed source restarts with everything downstream of it; the other source
// runs on.
func TestApproximateSourceFailure(t *testing.T) {
	for _, sched := range []string{"pipelined-region", "eager"} {
		t.Run(sched, func(t *testing.T) {
			env := runnel.NewEnvironment(approximateOpts(runnel.WithTaskManagers(2), runnel.WithScheduling(sched),
				runnel.WithFailureInjection("source[1]@3000"))...)
			src := runnel.FromSource(env, seqSource(8000, 20000, 0)).Name("source").WithCodec(codec.MustStruct[seqRec]())
			m := runnel.Map(src, func(r seqRec) (seqRec, error) { return r, nil }).Name("map").WithCodec(codec.MustStruct[seqRec]())
			sink := newSeenSink()
			m.Rebalance().SinkTo(sink).Name("sink")
			res, err := env.Execute(context.Background(), "approximate-source")
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Failovers) != 1 || fmt.Sprint(res.Failovers[0].Restarted) != "[source[1] map[1] sink[0] sink[1]]" {
				t.Fatalf("failovers %+v", res.Failovers)
			}
			got := attempts(res)
			if got["source[0]"] != 0 || got["map[0]"] != 0 || got["source[1]"] != 1 {
				t.Fatalf("attempts %v", got)
			}
		})
	}
}

// TestApproximateCheckpointsContinue: with checkpoints every 200 ms, checkpoints keep completing after each
// of several failovers.
func TestApproximateCheckpointsContinue(t *testing.T) {
	env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithParallelism(2), runnel.WithChaining(false), runnel.WithTaskManagers(2),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: 200 * time.Millisecond, ApproximateLocalRecovery: true}),
		runnel.WithRestartStrategy("fixed-delay:attempts=5,delay=0s"),
		runnel.WithFailureInjection("map[0]@500ms", "map[1]@1100ms", "sink[0]@1700ms"))
	src := runnel.FromSource(env, seqSource(0, 5000, 0)).Name("source").WithCodec(codec.MustStruct[seqRec]())
	m := runnel.Map(src, func(r seqRec) (seqRec, error) { return r, nil }).Name("map").WithCodec(codec.MustStruct[seqRec]())
	m.SinkTo(newSeenSink()).Name("sink")
	ctx, cancel := context.WithTimeout(context.Background(), 2600*time.Millisecond)
	defer cancel()
	res, err := env.Execute(ctx, "approximate-checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failovers) != 3 {
		t.Fatalf("failovers %+v", res.Failovers)
	}
	var last int64 = -1
	for i, f := range res.Failovers {
		if f.CheckpointRestored == nil || *f.CheckpointRestored <= last {
			t.Fatalf("failover %d restored %v after %d: no checkpoint completed in between", i, f.CheckpointRestored, last)
		}
		last = *f.CheckpointRestored
	}
	if res.Checkpoints.LastCompletedID <= last {
		t.Fatalf("no checkpoint completed after the last failover (last completed %d, restored %d)", res.Checkpoints.LastCompletedID, last)
	}
	if !strings.Contains(res.Status, "CANCELED") {
		t.Fatalf("status %s", res.Status)
	}
}

// TestApproximateReportsLossPerChannel: the per-channel breakdown adds up to the failover's totals.
func TestApproximateReportsLossPerChannel(t *testing.T) {
	env := runnel.NewEnvironment(approximateOpts(runnel.WithTaskManagers(2), runnel.WithFailureInjection("map[0]@4000"))...)
	src := runnel.FromSource(env, seqSource(12000, 24000, 8)).Name("source").WithCodec(codec.MustStruct[seqRec]())
	m := runnel.Map(src, func(r seqRec) (seqRec, error) { return r, nil }).Name("map").WithCodec(codec.MustStruct[seqRec]())
	m.SinkTo(newSeenSink()).Name("sink")
	res, err := env.Execute(context.Background(), "approximate-channels")
	if err != nil {
		t.Fatal(err)
	}
	f := res.Failovers[0]
	var lost, dropped uint64
	for _, c := range f.Channels {
		lost += c.RecordsLost
		dropped += c.RecordsDropped
		if c.To != "map[0]" && c.To != "sink[0]" {
			t.Fatalf("channel to a subtask that did not restart: %+v", c)
		}
	}
	if lost != f.RecordsLost || dropped != f.RecordsDropped || len(f.Channels) == 0 {
		t.Fatalf("channels %+v do not add up to %+v", f.Channels, f)
	}
}

package connector_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeContext is the RuntimeContext of one subtask, for driving readers and writers without a job.
type fakeContext struct {
	subtask, parallelism, attempt int
	checkpointing                 bool
}

func (c fakeContext) JobName() string      { return "test" }
func (c fakeContext) OperatorName() string { return "op" }
func (c fakeContext) TaskName() string {
	return fmt.Sprintf("op [%d/%d] #%d", c.subtask+1, c.parallelism, c.attempt)
}
func (c fakeContext) SubtaskIndex() int           { return c.subtask }
func (c fakeContext) Parallelism() int            { return c.parallelism }
func (c fakeContext) MaxParallelism() int         { return 128 }
func (c fakeContext) Attempt() int                { return c.attempt }
func (c fakeContext) Logger() *slog.Logger        { return slog.New(slog.DiscardHandler) }
func (c fakeContext) Done() <-chan struct{}       { return nil }
func (c fakeContext) Checkpointing() bool         { return c.checkpointing }
func (c fakeContext) Metrics() runnel.MetricGroup { return nil }

func ctxOf(subtask, parallelism int) fakeContext {
	return fakeContext{subtask: subtask, parallelism: parallelism}
}

// quietEnv adds a logger that drops everything to opts.
func quietEnv(opts ...runnel.Option) []runnel.Option {
	return append(opts, runnel.WithLogger(slog.New(slog.DiscardHandler)))
}

// sliceCollector keeps what a reader emits.
type sliceCollector[T any] struct{ items []T }

func (c *sliceCollector[T]) Collect(v T) { c.items = append(c.items, v) }

// maxPolls bounds every drain loop, so a reader that never ends fails the test instead of hanging it.
const maxPolls = 10_000

// newReader creates the reader of one subtask or fails the test.
func newReader[T any](t *testing.T, src runnel.Source[T], ctx runnel.RuntimeContext) runnel.SourceReader[T] {
	t.Helper()
	r, err := src.CreateReader(ctx)
	if err != nil {
		t.Fatalf("CreateReader(subtask %d of %d): %v", ctx.SubtaskIndex(), ctx.Parallelism(), err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// pollN polls r up to n times, stopping at end of input, and returns what it emitted and whether it ended.
func pollN[T any](t *testing.T, r runnel.SourceReader[T], n int) ([]T, bool) {
	t.Helper()
	out := &sliceCollector[T]{}
	for range n {
		st, err := r.PollNext(out)
		if err != nil {
			t.Fatalf("PollNext: %v", err)
		}
		switch st {
		case runnel.EndOfInput:
			return out.items, true
		case runnel.NothingAvailable:
			t.Fatalf("PollNext: NothingAvailable from a reader that should never wait")
		}
	}
	return out.items, false
}

// drain polls r to its end.
func drain[T any](t *testing.T, r runnel.SourceReader[T]) []T {
	t.Helper()
	items, ended := pollN(t, r, maxPolls)
	if !ended {
		t.Fatalf("reader did not end after %d polls (%d records)", maxPolls, len(items))
	}
	return items
}

func checkpointed(t *testing.T, r any) runnel.CheckpointedReader {
	t.Helper()
	cr, ok := r.(runnel.CheckpointedReader)
	if !ok {
		t.Fatalf("%T does not implement runnel.CheckpointedReader", r)
	}
	return cr
}

func snapshot(t *testing.T, r any) []byte {
	t.Helper()
	b, err := checkpointed(t, r).SnapshotState(1)
	if err != nil {
		t.Fatalf("SnapshotState: %v", err)
	}
	return b
}

func uvarint(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func execute(t *testing.T, env *runnel.Environment) *runnel.JobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, t.Name())
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return res
}

// sameMultiset reports whether got and want hold the same elements, each as often, in any order.
func sameMultiset[T interface{ ~string | ~int64 }](t *testing.T, got, want []T) {
	t.Helper()
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	if slices.Equal(got, want) {
		return
	}
	t.Fatalf("got %d records, want %d; first difference in sorted order: %s", len(got), len(want), firstDiff(got, want))
}

// firstDiff describes where two sequences part, with long values shortened.
func firstDiff[T any](got, want []T) string {
	short := func(v T) string {
		s := fmt.Sprintf("%q", fmt.Sprint(v))
		if len(s) > 40 {
			s = fmt.Sprintf("%s... (%d bytes)", s[:40], len(fmt.Sprint(v)))
		}
		return s
	}
	for i := range min(len(got), len(want)) {
		if a, b := fmt.Sprint(got[i]), fmt.Sprint(want[i]); a != b {
			return fmt.Sprintf("[%d] got %s, want %s", i, short(got[i]), short(want[i]))
		}
	}
	if len(got) > len(want) {
		return fmt.Sprintf("[%d] got extra %s", len(want), short(got[len(want)]))
	}
	if len(want) > len(got) {
		return fmt.Sprintf("[%d] missing %s", len(got), short(want[len(got)]))
	}
	return "none"
}

func int64s(from, to int64) []int64 {
	s := make([]int64, 0, to-from)
	for v := from; v < to; v++ {
		s = append(s, v)
	}
	return s
}

func TestCollectionJobEmitsEveryItemOnce(t *testing.T) {
	for _, n := range []int64{0, 1, 3, 5000} {
		for p := 1; p <= 4; p++ {
			t.Run(fmt.Sprintf("items=%d/p=%d", n, p), func(t *testing.T) {
				env := runnel.NewEnvironment(quietEnv(runnel.WithParallelism(p))...)
				sink := connector.NewCollect[int64]()
				runnel.FromSource(env, connector.Collection(int64s(0, n))).SinkTo(sink)
				execute(t, env)
				sameMultiset(t, sink.Records(), int64s(0, n))
			})
		}
	}
}

func TestCollectionSubtaskTakesEveryPthItemInOrder(t *testing.T) {
	items := int64s(0, 1500)
	for p := 1; p <= 4; p++ {
		for i := range p {
			r := newReader(t, connector.Collection(items), ctxOf(i, p))
			var want []int64
			for v := int64(i); v < int64(len(items)); v += int64(p) {
				want = append(want, v)
			}
			if got := drain(t, r); !slices.Equal(got, want) {
				t.Fatalf("p=%d subtask %d: %s", p, i, firstDiff(got, want))
			}
		}
	}
}

func TestCollectionRestore(t *testing.T) {
	items := int64s(0, 2000)
	const p = 3
	tests := []struct {
		name    string
		state   []byte
		want    []int64 // the records after the restore, when the state is good
		wantErr bool
	}{
		{name: "own start", state: uvarint(1), want: every(items, 1, p)},
		{name: "own middle", state: uvarint(1000), want: every(items, 1000, p)},
		{name: "own end", state: uvarint(2002), want: nil},
		{name: "subtask 0 position", state: uvarint(0), wantErr: true},
		{name: "subtask 0 later position", state: uvarint(999), wantErr: true},
		{name: "subtask 2 position", state: uvarint(2), wantErr: true},
		{name: "past the end", state: uvarint(2005), wantErr: true},
		{name: "empty", state: nil, wantErr: true},
		{name: "truncated varint", state: []byte{0x80}, wantErr: true},
		{name: "trailing bytes", state: append(uvarint(4), 0), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newReader(t, connector.Collection(items), ctxOf(1, p))
			err := checkpointed(t, r).RestoreState(tc.state)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("RestoreState(% x) accepted a position that is not subtask 1's", tc.state)
				}
				return
			}
			if err != nil {
				t.Fatalf("RestoreState(% x): %v", tc.state, err)
			}
			if got := drain(t, r); !slices.Equal(got, tc.want) {
				t.Fatalf("after restore: %s", firstDiff(got, tc.want))
			}
		})
	}
}

func TestCollectionSnapshotThenRestoreContinues(t *testing.T) {
	items := int64s(0, 3000)
	for _, polls := range []int{0, 1, 2, 100} {
		t.Run(fmt.Sprintf("polls=%d", polls), func(t *testing.T) {
			src := connector.Collection(items)
			before := newReader(t, src, ctxOf(1, 2))
			first, _ := pollN(t, before, polls)
			state := snapshot(t, before)
			r := newReader(t, src, ctxOf(1, 2))
			if err := checkpointed(t, r).RestoreState(state); err != nil {
				t.Fatalf("RestoreState: %v", err)
			}
			got := append(first, drain(t, r)...)
			if want := every(items, 1, 2); !slices.Equal(got, want) {
				t.Fatalf("before + after restore: %s", firstDiff(got, want))
			}
		})
	}
}

// pollAndKeep makes a reader, polls it n times (or to its end) and returns it.
func pollAndKeep[T any](t *testing.T, src runnel.Source[T], ctx runnel.RuntimeContext, n int) runnel.SourceReader[T] {
	t.Helper()
	r := newReader(t, src, ctx)
	pollN(t, r, n)
	return r
}

// every returns items[from], items[from+step], ...
func every[T any](items []T, from, step int) []T {
	var out []T
	for i := from; i < len(items); i += step {
		out = append(out, items[i])
	}
	return out
}

// genRec is what the generator tests emit: who made the record and its sequence number.
type genRec struct {
	Subtask int
	Seq     uint64
}

func genFn(subtask int, seq uint64) genRec { return genRec{subtask, seq} }

func TestGeneratorBoundedSplit(t *testing.T) {
	tests := []struct {
		name string
		opts connector.GeneratorOptions
		p    int
		want []uint64 // records per subtask
	}{
		{"total divides", connector.GeneratorOptions{TotalRecords: 9}, 3, []uint64{3, 3, 3}},
		{"total remainder", connector.GeneratorOptions{TotalRecords: 10}, 3, []uint64{4, 3, 3}},
		{"total remainder 2", connector.GeneratorOptions{TotalRecords: 11}, 4, []uint64{3, 3, 3, 2}},
		{"total below parallelism", connector.GeneratorOptions{TotalRecords: 2}, 5, []uint64{1, 1, 0, 0, 0}},
		{"total large", connector.GeneratorOptions{TotalRecords: 5000}, 3, []uint64{1667, 1667, 1666}},
		{"total overrides per subtask", connector.GeneratorOptions{TotalRecords: 10, RecordsPerSubtask: 100}, 4, []uint64{3, 3, 2, 2}},
		{"per subtask", connector.GeneratorOptions{RecordsPerSubtask: 7}, 3, []uint64{7, 7, 7}},
		{"per subtask large", connector.GeneratorOptions{RecordsPerSubtask: 1500}, 2, []uint64{1500, 1500}},
		{"single", connector.GeneratorOptions{TotalRecords: 1}, 1, []uint64{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(quietEnv(runnel.WithParallelism(tc.p))...)
			sink := connector.NewCollect[genRec]()
			runnel.FromSource(env, connector.Generator(genFn, tc.opts)).SinkTo(sink)
			execute(t, env)
			got := make([][]uint64, tc.p)
			for _, r := range sink.Records() {
				if r.Subtask < 0 || r.Subtask >= tc.p {
					t.Fatalf("record from subtask %d of %d", r.Subtask, tc.p)
				}
				got[r.Subtask] = append(got[r.Subtask], r.Seq)
			}
			for i, seqs := range got {
				// A subtask's records reach its chained sink in order.
				want := make([]uint64, tc.want[i])
				for s := range want {
					want[s] = uint64(s)
				}
				if !slices.Equal(seqs, want) {
					t.Errorf("subtask %d: sequence numbers %s", i, firstDiff(seqs, want))
				}
			}
		})
	}
}

func TestGeneratorRateLimit(t *testing.T) {
	const rate, runFor = 2000.0, 300 * time.Millisecond
	r := newReader(t, connector.Generator(genFn, connector.GeneratorOptions{RatePerSubtask: rate}), ctxOf(0, 1))
	out := &sliceCollector[genRec]{}
	waits := 0
	start := time.Now()
	for time.Since(start) < runFor {
		st, err := r.PollNext(out)
		if err != nil {
			t.Fatal(err)
		}
		switch st {
		case runnel.EndOfInput:
			t.Fatal("unbounded generator ended")
		case runnel.NothingAvailable:
			waits++
			ch := r.Available()
			if ch == nil {
				t.Fatal("NothingAvailable with a nil Available channel: the task would never wake")
			}
			select {
			case <-ch:
			case <-time.After(2 * time.Second):
				t.Fatal("Available did not become ready within 2s at 2000 records/s")
			}
		}
	}
	elapsed := time.Since(start)
	n := len(out.items)
	// The generator can never run ahead of its clock, which started after start; a loaded machine may
	// make it lag behind, hence the generous lower bound.
	if limit := int(rate*elapsed.Seconds()) + 1; n > limit {
		t.Errorf("%d records in %s, more than %d allowed at %v/s", n, elapsed, limit, rate)
	}
	if low := int(rate * runFor.Seconds() / 2); n < low {
		t.Errorf("%d records in %s, fewer than %d at %v/s", n, elapsed, low, rate)
	}
	if waits == 0 {
		t.Error("a rate-limited generator never said NothingAvailable")
	}
	for i, rec := range out.items {
		if rec.Seq != uint64(i) {
			t.Fatalf("record %d has sequence number %d", i, rec.Seq)
		}
	}
}

func TestGeneratorRateLimitInJob(t *testing.T) {
	const perSubtask, rate = 200, 2000.0
	env := runnel.NewEnvironment(quietEnv(runnel.WithParallelism(2))...)
	sink := connector.NewCollect[genRec]()
	runnel.FromSource(env, connector.Generator(genFn, connector.GeneratorOptions{RecordsPerSubtask: perSubtask, RatePerSubtask: rate})).SinkTo(sink)
	start := time.Now()
	execute(t, env)
	elapsed := time.Since(start)
	if n := len(sink.Records()); n != 2*perSubtask {
		t.Fatalf("got %d records, want %d", n, 2*perSubtask)
	}
	// The first record is due at once, the last one (perSubtask-1)/rate later.
	if least := time.Duration(float64(perSubtask-1) / rate * float64(time.Second)); elapsed < least {
		t.Fatalf("job took %s, less than the %s the rate allows", elapsed, least)
	}
}

func TestGeneratorRestore(t *testing.T) {
	seqs := func(from, to uint64) []uint64 {
		var s []uint64
		for v := from; v < to; v++ {
			s = append(s, v)
		}
		return s
	}
	tests := []struct {
		name        string
		opts        connector.GeneratorOptions
		subtask, p  int
		pollsBefore int
		pollsAfter  int // 0: drain to the end
		want        []uint64
	}{
		{"bounded middle", connector.GeneratorOptions{RecordsPerSubtask: 2000}, 1, 2, 1, 0, seqs(512, 2000)},
		{"bounded start", connector.GeneratorOptions{RecordsPerSubtask: 700}, 0, 1, 0, 0, seqs(0, 700)},
		{"bounded ended", connector.GeneratorOptions{RecordsPerSubtask: 700}, 0, 1, 5, 0, nil},
		{"total split", connector.GeneratorOptions{TotalRecords: 3001}, 0, 2, 2, 0, seqs(1024, 1501)},
		{"total split, empty subtask", connector.GeneratorOptions{TotalRecords: 3}, 4, 5, 0, 0, nil},
		{"total split, empty subtask after end", connector.GeneratorOptions{TotalRecords: 3}, 3, 5, 1, 0, nil},
		{"unbounded", connector.GeneratorOptions{}, 0, 1, 2, 1, seqs(1024, 1536)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := connector.Generator(genFn, tc.opts)
			state := snapshot(t, pollAndKeep(t, src, ctxOf(tc.subtask, tc.p), tc.pollsBefore))
			r := newReader(t, src, ctxOf(tc.subtask, tc.p))
			if err := checkpointed(t, r).RestoreState(state); err != nil {
				t.Fatalf("RestoreState(% x): %v", state, err)
			}
			var recs []genRec
			if tc.pollsAfter > 0 {
				recs, _ = pollN(t, r, tc.pollsAfter)
			} else {
				recs = drain(t, r)
			}
			var got []uint64
			for _, rec := range recs {
				if rec.Subtask != tc.subtask {
					t.Fatalf("record of subtask %d from subtask %d's reader", rec.Subtask, tc.subtask)
				}
				got = append(got, rec.Seq)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("after restore: %s", firstDiff(got, tc.want))
			}
		})
	}
}

func TestGeneratorRestoreKeepsRate(t *testing.T) {
	src := connector.Generator(genFn, connector.GeneratorOptions{RatePerSubtask: 1000})
	r := newReader(t, src, ctxOf(0, 1))
	if err := checkpointed(t, r).RestoreState(uvarint(5000)); err != nil {
		t.Fatal(err)
	}
	out := &sliceCollector[genRec]{}
	st, err := r.PollNext(out)
	if err != nil {
		t.Fatal(err)
	}
	// The rate clock restarts at the restored position: one record is due now, not 5000 at once.
	if st != runnel.MoreAvailable || len(out.items) != 1 || out.items[0].Seq != 5000 {
		t.Fatalf("first poll after restore: status %v, records %v; want one record with sequence number 5000", st, out.items)
	}
}

func TestGeneratorBadState(t *testing.T) {
	tests := []struct {
		name       string
		opts       connector.GeneratorOptions
		subtask, p int
		state      []byte
		wantErr    string
	}{
		{"empty", connector.GeneratorOptions{}, 0, 1, nil, "bad checkpointed position"},
		{"truncated varint", connector.GeneratorOptions{}, 0, 1, []byte{0xff}, "bad checkpointed position"},
		{"trailing bytes", connector.GeneratorOptions{}, 0, 1, append(uvarint(3), 1), "bad checkpointed position"},
		{"past the limit", connector.GeneratorOptions{RecordsPerSubtask: 10}, 0, 1, uvarint(11), "taken at record 11 of this subtask, past the 10 records"},
		{"past the split", connector.GeneratorOptions{TotalRecords: 10}, 1, 3, uvarint(4), "past the 3 records"},
		{"past an empty split", connector.GeneratorOptions{TotalRecords: 2}, 3, 4, uvarint(1), "past the 0 records"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newReader(t, connector.Generator(genFn, tc.opts), ctxOf(tc.subtask, tc.p))
			if err := checkpointed(t, r).RestoreState(tc.state); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("RestoreState(% x): %v, want an error saying %q", tc.state, err, tc.wantErr)
			}
		})
	}
}

func TestGeneratorInvalid(t *testing.T) {
	tests := []struct {
		name    string
		src     runnel.Source[genRec]
		wantErr string
	}{
		{"nil function", connector.Generator[genRec](nil, connector.GeneratorOptions{}), "nil function"},
		{"negative rate", connector.Generator(genFn, connector.GeneratorOptions{RatePerSubtask: -1}), "negative rate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.src.CreateReader(ctxOf(0, 1)); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CreateReader: got error %v, want one containing %q", err, tc.wantErr)
			}
			env := runnel.NewEnvironment(quietEnv()...)
			runnel.FromSource(env, tc.src).SinkTo(connector.Discard[genRec]())
			if _, err := env.Execute(context.Background(), "invalid"); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Execute: got error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestPrintTo(t *testing.T) {
	const n = 300
	for _, p := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			var buf bytes.Buffer
			env := runnel.NewEnvironment(quietEnv(runnel.WithParallelism(p))...)
			runnel.FromSource(env, connector.Collection(int64s(0, n))).SinkTo(connector.PrintTo[int64](&buf))
			execute(t, env)
			checkPrinted(t, buf.String(), n, p)
		})
	}
}

// checkPrinted checks that out holds the records 0..n-1 of a Collection, one a line, prefixed "N> " by
// their 1-based subtask when p > 1.
func checkPrinted(t *testing.T, out string, n, p int) {
	t.Helper()
	var got, want []string
	for line := range strings.Lines(out) {
		got = append(got, line)
	}
	for v := range n {
		if p > 1 {
			// Collection gives item v to subtask v % p, and the sink is chained to it.
			want = append(want, fmt.Sprintf("%d> %d\n", v%p+1, v))
		} else {
			want = append(want, fmt.Sprintf("%d\n", v))
		}
	}
	sameMultiset(t, got, want)
}

func TestPrintWritesToStdout(t *testing.T) {
	f, err := os.Create(t.TempDir() + "/stdout")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stdout := os.Stdout
	os.Stdout = f // Print takes os.Stdout when it is called.
	sink := connector.Print[int64]()
	os.Stdout = stdout

	env := runnel.NewEnvironment(quietEnv(runnel.WithParallelism(2))...)
	runnel.FromSource(env, connector.Collection(int64s(0, 50))).SinkTo(sink)
	execute(t, env)
	out, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	checkPrinted(t, string(out), 50, 2)
}

func TestCollect(t *testing.T) {
	if got := connector.NewCollect[int64]().Records(); len(got) != 0 {
		t.Fatalf("new Collect has records %v", got)
	}
	for _, n := range []int64{1, 1023, 1024, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			env := runnel.NewEnvironment(quietEnv(runnel.WithParallelism(3))...)
			sink := connector.NewCollect[int64]()
			runnel.FromSource(env, connector.Collection(int64s(0, n))).SinkTo(sink)
			execute(t, env)
			got := sink.Records()
			sameMultiset(t, got, int64s(0, n))
			got[0] = -1
			if sink.Records()[0] == -1 {
				t.Fatal("Records returned the sink's own slice, not a copy")
			}
		})
	}
}

func TestDiscard(t *testing.T) {
	const n = 10_000
	env := runnel.NewEnvironment(quietEnv(runnel.WithParallelism(2), runnel.WithChaining(false))...)
	runnel.FromSource(env, connector.Generator(func(_ int, seq uint64) int64 { return int64(seq) },
		connector.GeneratorOptions{TotalRecords: n})).Rebalance().SinkTo(connector.Discard[int64]()).Name("discard")
	res := execute(t, env)
	if v := res.Vertex("discard"); v == nil || v.RecordsIn != n {
		t.Fatalf("discard vertex %+v, want %d records in", v, n)
	}
}

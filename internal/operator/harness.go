package operator

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/state"
	"github.com/runnel-dev/runnel/internal/task"
)

// The operator test harness (as Flink's OneInputStreamOperatorTestHarness and its two-input and keyed
// kin) runs one operator of one subtask by hand: a test hands it records, watermarks and processing time,
// takes a snapshot and restores it into a fresh operator, and reads what the operator emitted, its
// watermarks and its side outputs. It is a chain of that one operator, driven through the chain's own
// open, snapshot, restore, watermark and timer paths, with a fake clock and no job, network or goroutine.
//
// It lives in this package, not in a package of its own, so that this package's tests (which reach the
// operators' internals) and other packages' tests use the same harness: a harness package would import
// this one, and this package's tests could not import it back. The linker drops it from binaries, which
// never call it.

// TB is the part of *testing.T a harness reports to: a failed step fails the test.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(f func())
}

// HarnessConfig describes the subtask a harness runs its operator in; the zero value is subtask 0 of 1
// on the heap backend, at processing time 0.
type HarnessConfig struct {
	// Name is the operator's name, in errors and metrics ("op" when empty).
	Name string
	// StateBackend is where keyed state lives: "memory" (when empty) or "pebble".
	StateBackend string
	// Parallelism and Subtask place the subtask (1 and 0 when zero); MaxParallelism is the number of key
	// groups (128 when zero).
	Parallelism, Subtask, MaxParallelism int
	// ProcessingTime is where the harness's clock starts, in epoch ms.
	ProcessingTime int64
	// Checkpointing is what RuntimeContext.Checkpointing reports.
	Checkpointing bool
	// SideOutputs are the side output tags the harness records (SideOutput reads them); the operator's
	// other tags are dropped, as a job drops a tag no operator reads.
	SideOutputs []string
	// Restore is what the operator starts from after Open: one snapshot, or the snapshots of several
	// subtasks of another parallelism (the operator keeps what belongs to its subtask, as at a rescale).
	// The operator's watermark starts at the lowest of theirs.
	Restore []Snapshot
}

// Snapshot is what a harness took at a checkpoint: the operator's entry in the checkpoint and its input
// watermark.
type Snapshot struct {
	State     []byte
	Watermark int64
}

// harness is the part of a harness that does not depend on the operator's types.
type harness struct {
	t     TB
	cfg   HarnessConfig
	rt    *task.Runtime
	ctx   *Context
	c     *chain
	clock *clockwork.FakeClock
	// watermarks and statuses are what the operator emitted downstream, in order.
	watermarks []int64
	statuses   []bool
	sides      map[string][]Timed[any]
	// input is the operator's input watermark, which a snapshot records.
	input      int64
	checkpoint int64
	closed     bool
	// catching turns a failed step into a panic that Catch recovers, instead of a failed test.
	catching bool
}

// harnessFailure carries a failed step's error from the step to Catch.
type harnessFailure struct{ err error }

func newHarness(t TB, spec NodeSpec, cfg HarnessConfig, out any) (*harness, error) {
	cfg.Name = cmp.Or(cfg.Name, "op")
	cfg.StateBackend = cmp.Or(cfg.StateBackend, "memory")
	cfg.Parallelism = max(cfg.Parallelism, 1)
	if cfg.MaxParallelism == 0 {
		cfg.MaxParallelism = 128
	}
	clock := clockwork.NewFakeClockAt(time.UnixMilli(cfg.ProcessingTime))
	rt := &task.Runtime{
		Info: deploy.Info{JobName: "harness", VertexName: cfg.Name, Parallelism: cfg.Parallelism, MaxParallelism: cfg.MaxParallelism,
			Attempt: ident.Attempt{Subtask: ident.Subtask{Index: int32(cfg.Subtask)}}},
		Counters: task.NewCounters(), Cancel: make(chan struct{}), Logger: slog.New(slog.DiscardHandler), Clock: clock,
		StateBackend: cfg.StateBackend, Checkpointing: cfg.Checkpointing,
	}
	h := &harness{t: t, cfg: cfg, rt: rt, clock: clock, input: math.MinInt64, sides: map[string][]Timed[any]{}}
	ctx := NewContext(rt, cfg.Name)
	rt.Operators = append(rt.Operators, ctx.ref)
	ctx.mark = int32(len(rt.Operators))
	ctx.wmOut = []watermarkTarget{h}
	for _, tag := range cfg.SideOutputs {
		ctx.side = append(ctx.side, sideOutput{tag: tag, out: sideRecorder{h: h, tag: tag}})
	}
	h.ctx = ctx
	var b Built
	if err := h.run(func() (err error) { b, err = spec.Build(ctx, []any{out}); return err }); err != nil {
		return nil, fmt.Errorf("build %q: %w", cfg.Name, err)
	}
	h.c = &chain{names: []string{cfg.Name}, uids: []string{cfg.Name}, ctxs: []*Context{ctx}, ops: []Built{b}}
	if err := h.run(h.c.Open); err != nil {
		return nil, errors.Join(err, h.c.Close())
	}
	if err := h.run(h.restore); err != nil {
		return nil, errors.Join(err, h.c.Close())
	}
	t.Cleanup(func() {
		if err := h.close(); err != nil {
			t.Fatalf("close %q: %v", cfg.Name, err)
		}
	})
	return h, nil
}

// restore loads cfg.Restore as the task restores a checkpoint: the state, then the watermark floor.
func (h *harness) restore() error {
	snaps := h.cfg.Restore
	if len(snaps) == 0 {
		return nil
	}
	floor := int64(math.MaxInt64)
	parts := make([][]byte, len(snaps))
	for i, s := range snaps {
		parts[i], floor = s.State, min(floor, s.Watermark)
	}
	var err error
	if len(parts) == 1 {
		err = h.c.Restore(map[string][]byte{h.cfg.Name: parts[0]})
	} else {
		err = h.c.RestoreRescaled(map[string][][]byte{h.cfg.Name: parts})
	}
	if err != nil {
		return err
	}
	if floor == math.MinInt64 || floor == math.MaxInt64 {
		return nil
	}
	h.input = floor
	return h.c.RestoreWatermark(floor)
}

// run runs one step of the operator and returns its failure: an error, or what the operator aborted
// with (task.Abort), or a panic of its code.
func (h *harness) run(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			switch p := p.(type) {
			case *task.Failure:
				err = p.Err
			case harnessFailure:
				panic(p)
			default:
				err = h.ctx.panicError(p)
			}
		}
	}()
	return f()
}

// step runs f and fails the test (or the Catch around it) if it fails.
func (h *harness) step(what string, f func() error) {
	h.t.Helper()
	if h.closed {
		h.fail(fmt.Errorf("%s: the harness is closed", what))
	}
	if err := h.run(f); err != nil {
		h.fail(fmt.Errorf("%s: %w", what, err))
	}
}

func (h *harness) fail(err error) {
	h.t.Helper()
	if h.catching {
		panic(harnessFailure{err})
	}
	h.t.Fatalf("operator %q: %v", h.cfg.Name, err)
}

// Catch runs f, a sequence of the harness's steps, and returns the failure of the first that fails
// (where it stops) instead of failing the test: for tests of failures.
func (h *harness) Catch(f func()) (err error) {
	if h.catching {
		panic("harness: Catch inside Catch")
	}
	h.catching = true
	defer func() {
		h.catching = false
		if p := recover(); p != nil {
			hf, ok := p.(harnessFailure)
			if !ok {
				panic(p)
			}
			err = hf.err
		}
	}()
	f()
	return nil
}

// watermark hands the operator input watermark ms, as the task does once its inputs' watermark moves.
func (h *harness) watermark(ms int64) {
	h.t.Helper()
	h.input = max(h.input, ms)
	h.step(fmt.Sprintf("watermark %d", ms), func() error { return h.c.ProcessWatermark(ms) })
}

// SetProcessingTime moves the clock to ms (never back) and fires what is due, as the task's mailbox
// does between records: the operators' processing-time work at or before ms, until none is left.
func (h *harness) SetProcessingTime(ms int64) {
	h.t.Helper()
	now := h.clock.Now().UnixMilli()
	if ms < now {
		h.fail(fmt.Errorf("processing time %d: the clock is at %d already", ms, now))
	}
	h.clock.Advance(time.Duration(ms-now) * time.Millisecond)
	h.step(fmt.Sprintf("processing time %d", ms), func() error {
		for steps := 0; h.c.NextDeadline() <= ms; steps++ {
			if steps == 1<<20 {
				return fmt.Errorf("still due at %d after %d steps", h.c.NextDeadline(), steps)
			}
			if err := h.c.OnProcessingTime(ms); err != nil {
				return err
			}
		}
		return nil
	})
}

// Clock is the harness's clock, for a test that moves it without firing what is due (SetProcessingTime
// fires).
func (h *harness) Clock() *clockwork.FakeClock { return h.clock }

// EndInput tells the operator that its input has ended (a bounded input).
func (h *harness) EndInput() {
	h.t.Helper()
	h.step("end of input", h.c.EndInput)
}

// Snapshot takes a checkpoint of the operator, as the task does at a barrier: the state its checkpoint
// entry holds, and the input watermark.
func (h *harness) Snapshot() Snapshot {
	h.t.Helper()
	h.checkpoint++
	var buf bytes.Buffer
	h.step(fmt.Sprintf("checkpoint %d", h.checkpoint), func() error {
		ws, err := h.c.Snapshot(h.checkpoint)
		if err != nil {
			return err
		}
		for _, w := range ws {
			if err := w.Write(&buf); err != nil {
				return err
			}
		}
		return nil
	})
	return Snapshot{State: buf.Bytes(), Watermark: h.input}
}

// NotifyCheckpointComplete tells the operator that checkpoint id (a Snapshot's, counted from 1) completed.
func (h *harness) NotifyCheckpointComplete(id int64) {
	h.t.Helper()
	h.step(fmt.Sprintf("checkpoint %d complete", id), func() error { return h.c.NotifyCheckpointComplete(id) })
}

// Watermarks returns the watermarks the operator emitted, in order.
func (h *harness) Watermarks() []int64 { return slices.Clone(h.watermarks) }

// WatermarkStatuses returns the watermark statuses the operator emitted, in order (true: idle).
func (h *harness) WatermarkStatuses() []bool { return slices.Clone(h.statuses) }

// Metric returns the value of the operator's metric name (a counter or gauge it registered) and whether
// it has one.
func (h *harness) Metric(name string) (int64, bool) {
	h.rt.Counters.Publish()
	for _, m := range h.rt.Counters.PublishedMetrics() {
		if m.Name == h.cfg.Name+"/"+name {
			return m.Value, true
		}
	}
	return 0, false
}

// Close closes the operator (the test's cleanup does, if the test did not).
func (h *harness) Close() {
	h.t.Helper()
	if err := h.close(); err != nil {
		h.fail(fmt.Errorf("close: %w", err))
	}
}

func (h *harness) close() error {
	if h.closed {
		return nil
	}
	h.closed = true
	return h.run(h.c.Close)
}

func (h *harness) emitWatermark(ms int64) error {
	h.watermarks = append(h.watermarks, ms)
	return nil
}

func (h *harness) emitWatermarkStatus(idle bool) error {
	h.statuses = append(h.statuses, idle)
	return nil
}

func (h *harness) harnessCore() *harness { return h }

// sideRecorder is the harness's consumer of one side output tag; EmitSide hands it values of any type.
type sideRecorder struct {
	h   *harness
	tag string
}

func (r sideRecorder) record(v any, ts int64) {
	r.h.sides[r.tag] = append(r.h.sides[r.tag], Timed[any]{Ts: ts, V: v})
}

// Harnessed is a harness of either kind, for the functions that read any harness.
type Harnessed interface {
	harnessCore() *harness
}

// SideOutput returns what the operator emitted to side output tag (one of HarnessConfig.SideOutputs), in
// order, with the timestamp of the record being processed (math.MinInt64 on a stream without event time).
func SideOutput[T any](h Harnessed, tag string) []Timed[T] {
	c := h.harnessCore()
	c.t.Helper()
	if !slices.Contains(c.cfg.SideOutputs, tag) {
		c.fail(fmt.Errorf("side output %q: not in HarnessConfig.SideOutputs %q", tag, c.cfg.SideOutputs))
	}
	var out []Timed[T]
	for i, r := range c.sides[tag] {
		v, ok := r.V.(T)
		if !ok {
			c.fail(fmt.Errorf("side output %q: record %d is a %T, not a %T", tag, i, r.V, *new(T)))
		}
		out = append(out, Timed[T]{Ts: r.Ts, V: v})
	}
	return out
}

// StateKeys returns the keys that hold keyed state in the operator, sorted where K is ordered: a test
// that every window, timer or join buffer was cleaned up wants none.
func StateKeys[K comparable](h Harnessed) []K {
	c := h.harnessCore()
	c.t.Helper()
	b, ok := c.ctx.backend.(state.KeyedBackend[K])
	if !ok {
		c.fail(fmt.Errorf("state keys: the operator keeps no keyed state of keys %T (%T)", *new(K), c.ctx.backend))
	}
	var keys []K
	if err := b.ForEachKey(func(k K) error { keys = append(keys, k); return nil }); err != nil {
		c.fail(fmt.Errorf("state keys: %w", err))
	}
	return keys
}

// recorder is the harness's downstream: it keeps what the operator emits.
type recorder[T any] struct{ got []T }

func (r *recorder[T]) Collect(v T)         { r.got = append(r.got, v) }
func (r *recorder[T]) CollectBatch(vs []T) { r.got = append(r.got, vs...) }

// Harness runs one operator with one input: In is the record type it takes (Timed[T] on a stream with
// event time), Out what it emits.
type Harness[In, Out any] struct {
	*harness
	in  BatchCollector[In]
	out *recorder[Out]
}

// NewHarness builds the operator spec describes, opens it and restores cfg.Restore; a failure fails the
// test. The test's cleanup closes it.
func NewHarness[In, Out any](t TB, spec NodeSpec, cfg HarnessConfig) *Harness[In, Out] {
	t.Helper()
	h, err := BuildHarness[In, Out](t, spec, cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return h
}

// BuildHarness is NewHarness returning the failure, for tests of operators that refuse to be built.
func BuildHarness[In, Out any](t TB, spec NodeSpec, cfg HarnessConfig) (*Harness[In, Out], error) {
	out := &recorder[Out]{}
	core, err := newHarness(t, spec, cfg, Collector[Out](out))
	if err != nil {
		return nil, err
	}
	in, ok := core.c.ops[0].Input.(Collector[In])
	if !ok {
		return nil, errors.Join(fmt.Errorf("operator %q takes %T, not Collector[%T]", core.cfg.Name, core.c.ops[0].Input, *new(In)), core.close())
	}
	return &Harness[In, Out]{harness: core, in: asBatch(in), out: out}, nil
}

// Process hands the operator one record.
func (h *Harness[In, Out]) Process(v In) {
	h.t.Helper()
	h.step("record", func() error { h.in.Collect(v); return nil })
}

// ProcessBatch hands the operator a run of records at once, as a network buffer or a chained batch does.
func (h *Harness[In, Out]) ProcessBatch(vs []In) {
	h.t.Helper()
	h.step("batch", func() error { h.in.CollectBatch(vs); return nil })
}

// Watermark hands the operator input watermark ms.
func (h *Harness[In, Out]) Watermark(ms int64) {
	h.t.Helper()
	h.watermark(ms)
}

// WatermarkStatus tells the operator that its input went idle or is active again.
func (h *Harness[In, Out]) WatermarkStatus(idle bool) {
	h.t.Helper()
	h.step("watermark status", func() error { return h.c.ProcessWatermarkStatus(idle) })
}

// Output returns what the operator emitted, in order.
func (h *Harness[In, Out]) Output() []Out { return slices.Clone(h.out.got) }

// TakeOutput returns what the operator emitted since the last TakeOutput, and forgets it.
func (h *Harness[In, Out]) TakeOutput() []Out {
	got := h.out.got
	h.out.got = nil
	return got
}

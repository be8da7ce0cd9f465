package operator

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/runnel-dev/runnel/internal/watermark"
)

// TwoInputHarness runs one operator with two inputs (a co-process function, a join), as Harness does one
// with one: In1 and In2 are the record types of its inputs, Out what it emits. The watermark it hands the
// operator is the task's for two inputs (watermark.TwoInputValve): the lower of the two inputs', once both
// have one.
type TwoInputHarness[In1, In2, Out any] struct {
	*harness
	in1   BatchCollector[In1]
	in2   BatchCollector[In2]
	out   *recorder[Out]
	valve *watermark.TwoInputValve
}

// NewTwoInputHarness builds the two-input operator spec describes, opens it and restores cfg.Restore; a
// failure fails the test. The test's cleanup closes it.
func NewTwoInputHarness[In1, In2, Out any](t TB, spec NodeSpec, cfg HarnessConfig) *TwoInputHarness[In1, In2, Out] {
	t.Helper()
	h, err := BuildTwoInputHarness[In1, In2, Out](t, spec, cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return h
}

// BuildTwoInputHarness is NewTwoInputHarness returning the failure.
func BuildTwoInputHarness[In1, In2, Out any](t TB, spec NodeSpec, cfg HarnessConfig) (*TwoInputHarness[In1, In2, Out], error) {
	out := &recorder[Out]{}
	core, err := newHarness(t, spec, cfg, Collector[Out](out))
	if err != nil {
		return nil, err
	}
	b := core.c.ops[0]
	in1, ok1 := b.Input.(Collector[In1])
	in2, ok2 := b.Input2.(Collector[In2])
	if !ok1 || !ok2 {
		err := fmt.Errorf("operator %q takes %T and %T, not Collector[%T] and Collector[%T]", core.cfg.Name, b.Input, b.Input2, *new(In1), *new(In2))
		return nil, errors.Join(err, core.close())
	}
	valve := watermark.NewTwoInputValve(1, 1)
	if core.input != math.MinInt64 {
		valve = watermark.NewTwoInputValveAt(1, 1, watermark.Watermark(core.input))
	}
	return &TwoInputHarness[In1, In2, Out]{harness: core, in1: asBatch(in1), in2: asBatch(in2), out: out, valve: valve}, nil
}

// Process1 hands the operator a record of its first input.
func (h *TwoInputHarness[In1, In2, Out]) Process1(v In1) {
	h.t.Helper()
	h.step("record of input 1", func() error { h.in1.Collect(v); return nil })
}

// Process2 hands the operator a record of its second input.
func (h *TwoInputHarness[In1, In2, Out]) Process2(v In2) {
	h.t.Helper()
	h.step("record of input 2", func() error { h.in2.Collect(v); return nil })
}

// ProcessBatch1 hands the operator a run of records of its first input.
func (h *TwoInputHarness[In1, In2, Out]) ProcessBatch1(vs []In1) {
	h.t.Helper()
	h.step("batch of input 1", func() error { h.in1.CollectBatch(vs); return nil })
}

// ProcessBatch2 hands the operator a run of records of its second input.
func (h *TwoInputHarness[In1, In2, Out]) ProcessBatch2(vs []In2) {
	h.t.Helper()
	h.step("batch of input 2", func() error { h.in2.CollectBatch(vs); return nil })
}

// Watermark1 is a watermark of the first input; the operator gets the combined watermark when it moves.
func (h *TwoInputHarness[In1, In2, Out]) Watermark1(ms int64) {
	h.t.Helper()
	h.apply(h.valve.OnWatermark(0, 0, watermark.Watermark(ms)))
}

// Watermark2 is a watermark of the second input.
func (h *TwoInputHarness[In1, In2, Out]) Watermark2(ms int64) {
	h.t.Helper()
	h.apply(h.valve.OnWatermark(1, 0, watermark.Watermark(ms)))
}

// Idle1 says the first input went idle (true) or is active again; an idle input does not hold the
// other's watermark back.
func (h *TwoInputHarness[In1, In2, Out]) Idle1(idle bool) {
	h.t.Helper()
	h.apply(h.status(0, idle))
}

// Idle2 says the second input went idle or is active again.
func (h *TwoInputHarness[In1, In2, Out]) Idle2(idle bool) {
	h.t.Helper()
	h.apply(h.status(1, idle))
}

func (h *TwoInputHarness[In1, In2, Out]) status(input int, idle bool) watermark.Result {
	if idle {
		return h.valve.OnIdle(input, 0)
	}
	return h.valve.OnActive(input, 0)
}

// apply carries out what the valve decided, as the task does: a status change, then a watermark that
// moved.
func (h *TwoInputHarness[In1, In2, Out]) apply(r watermark.Result) {
	h.t.Helper()
	if r.StatusChanged {
		idle := r.Status == watermark.Idle
		h.step("watermark status", func() error { return h.c.ProcessWatermarkStatus(idle) })
	}
	if r.Advanced {
		h.watermark(int64(r.Watermark))
	}
}

// Output returns what the operator emitted, in order.
func (h *TwoInputHarness[In1, In2, Out]) Output() []Out { return slices.Clone(h.out.got) }

// TakeOutput returns what the operator emitted since the last TakeOutput, and forgets it.
func (h *TwoInputHarness[In1, In2, Out]) TakeOutput() []Out {
	got := h.out.got
	h.out.got = nil
	return got
}

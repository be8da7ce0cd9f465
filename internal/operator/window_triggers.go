package operator

import (
	"fmt"

	"github.com/runnel-dev/runnel/codec"
)

// The built-in triggers, with Flink's semantics.

// EventTimeTrigger fires a window once the watermark passes its end, and at once for a record that comes
// after that (within the allowed lateness): the default of event-time windows.
func EventTimeTrigger[T any]() MergingTrigger[T] { return eventTimeTrigger[T]{} }

type eventTimeTrigger[T any] struct{}

func (eventTimeTrigger[T]) OnElement(_ T, _ int64, w TimeWindow, ctx TriggerContext) (TriggerResult, error) {
	if w.MaxTimestamp() <= ctx.CurrentWatermark() {
		return Fire, nil
	}
	ctx.RegisterEventTimeTimer(w.MaxTimestamp())
	return Continue, nil
}

func (eventTimeTrigger[T]) OnEventTime(ts int64, w TimeWindow, _ TriggerContext) (TriggerResult, error) {
	if ts == w.MaxTimestamp() {
		return Fire, nil
	}
	return Continue, nil
}

func (eventTimeTrigger[T]) OnProcessingTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, nil
}

func (eventTimeTrigger[T]) Clear(w TimeWindow, ctx TriggerContext) error {
	ctx.DeleteEventTimeTimer(w.MaxTimestamp())
	return nil
}

func (eventTimeTrigger[T]) CanMerge() bool { return true }

func (eventTimeTrigger[T]) OnMerge(w TimeWindow, ctx OnMergeContext) error {
	// A merged window whose end the watermark passed already fires with the next record or never; a
	// timer at its end would fire it at the next watermark.
	if w.MaxTimestamp() > ctx.CurrentWatermark() {
		ctx.RegisterEventTimeTimer(w.MaxTimestamp())
	}
	return nil
}

func (eventTimeTrigger[T]) String() string { return "EventTimeTrigger()" }

// ProcessingTimeTrigger fires a window once the clock passes its end: the default of processing-time
// windows.
func ProcessingTimeTrigger[T any]() MergingTrigger[T] { return processingTimeTrigger[T]{} }

type processingTimeTrigger[T any] struct{}

func (processingTimeTrigger[T]) OnElement(_ T, _ int64, w TimeWindow, ctx TriggerContext) (TriggerResult, error) {
	ctx.RegisterProcessingTimeTimer(w.MaxTimestamp())
	return Continue, nil
}

func (processingTimeTrigger[T]) OnEventTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, nil
}

func (processingTimeTrigger[T]) OnProcessingTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Fire, nil
}

func (processingTimeTrigger[T]) Clear(w TimeWindow, ctx TriggerContext) error {
	ctx.DeleteProcessingTimeTimer(w.MaxTimestamp())
	return nil
}

func (processingTimeTrigger[T]) CanMerge() bool { return true }

func (processingTimeTrigger[T]) OnMerge(w TimeWindow, ctx OnMergeContext) error {
	if w.MaxTimestamp() > ctx.CurrentProcessingTime() {
		ctx.RegisterProcessingTimeTimer(w.MaxTimestamp())
	}
	return nil
}

func (processingTimeTrigger[T]) String() string { return "ProcessingTimeTrigger()" }

// CountTrigger fires a window at every n-th record it gets (and does not purge it: with the default
// contents kept, each firing sees every record so far). Windows that merge add their counts.
func CountTrigger[T any](n int64) MergingTrigger[T] {
	return &countTrigger[T]{n: n, count: NewWindowState("count", func(a, b int64) int64 { return a + b }, codec.Int64())}
}

type countTrigger[T any] struct {
	n     int64
	count *WindowState[int64]
}

func (t *countTrigger[T]) WindowStates() []AnyWindowState { return []AnyWindowState{t.count} }

func (t *countTrigger[T]) OnElement(_ T, _ int64, _ TimeWindow, ctx TriggerContext) (TriggerResult, error) {
	c, _ := t.count.Value(ctx)
	if c+1 >= t.n {
		// Zero where Flink clears: the same count, without giving up the key's entry at every firing.
		t.count.Update(ctx, 0)
		return Fire, nil
	}
	t.count.Update(ctx, c+1)
	return Continue, nil
}

func (t *countTrigger[T]) OnEventTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, nil
}

func (t *countTrigger[T]) OnProcessingTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, nil
}

func (t *countTrigger[T]) Clear(_ TimeWindow, ctx TriggerContext) error {
	t.count.Clear(ctx)
	return nil
}

func (t *countTrigger[T]) CanMerge() bool { return true }

func (t *countTrigger[T]) OnMerge(_ TimeWindow, ctx OnMergeContext) error {
	ctx.MergeWindowState(t.count)
	return nil
}

func (t *countTrigger[T]) String() string { return fmt.Sprintf("CountTrigger(%d)", t.n) }

// minInt64 is the merge of a next firing time: the earliest of the windows'.
func minInt64(a, b int64) int64 { return min(a, b) }

// ContinuousEventTimeTrigger fires a window every interval of event time, at the multiples of interval
// (aligned to the epoch) from the first record's, and once the watermark passes the window's end.
func ContinuousEventTimeTrigger[T any](interval int64) MergingTrigger[T] {
	return &continuousEventTimeTrigger[T]{interval: interval, next: NewWindowState("fire-time", minInt64, codec.Int64())}
}

type continuousEventTimeTrigger[T any] struct {
	interval int64
	next     *WindowState[int64] // the next firing time
}

func (t *continuousEventTimeTrigger[T]) WindowStates() []AnyWindowState {
	return []AnyWindowState{t.next}
}

func (t *continuousEventTimeTrigger[T]) OnElement(_ T, ts int64, w TimeWindow, ctx TriggerContext) (TriggerResult, error) {
	if w.MaxTimestamp() <= ctx.CurrentWatermark() {
		return Fire, nil
	}
	ctx.RegisterEventTimeTimer(w.MaxTimestamp())
	if _, ok := t.next.Value(ctx); !ok {
		next := ts - ts%t.interval + t.interval
		ctx.RegisterEventTimeTimer(next)
		t.next.Update(ctx, next)
	}
	return Continue, nil
}

func (t *continuousEventTimeTrigger[T]) OnEventTime(ts int64, w TimeWindow, ctx TriggerContext) (TriggerResult, error) {
	if ts == w.MaxTimestamp() {
		return Fire, nil
	}
	if next, ok := t.next.Value(ctx); ok && next == ts {
		t.next.Update(ctx, ts+t.interval)
		ctx.RegisterEventTimeTimer(ts + t.interval)
		return Fire, nil
	}
	return Continue, nil
}

func (t *continuousEventTimeTrigger[T]) OnProcessingTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, nil
}

func (t *continuousEventTimeTrigger[T]) Clear(_ TimeWindow, ctx TriggerContext) error {
	if next, ok := t.next.Value(ctx); ok {
		ctx.DeleteEventTimeTimer(next)
		t.next.Clear(ctx)
	}
	return nil
}

func (t *continuousEventTimeTrigger[T]) CanMerge() bool { return true }

func (t *continuousEventTimeTrigger[T]) OnMerge(_ TimeWindow, ctx OnMergeContext) error {
	ctx.MergeWindowState(t.next)
	if next, ok := t.next.Value(ctx); ok {
		ctx.RegisterEventTimeTimer(next)
	}
	return nil
}

func (t *continuousEventTimeTrigger[T]) String() string {
	return fmt.Sprintf("ContinuousEventTimeTrigger(%d)", t.interval)
}

// ContinuousProcessingTimeTrigger fires a window every interval of processing time, at the multiples of
// interval (aligned to the epoch) from the clock at its first record.
func ContinuousProcessingTimeTrigger[T any](interval int64) MergingTrigger[T] {
	return &continuousProcessingTimeTrigger[T]{interval: interval, next: NewWindowState("fire-time", minInt64, codec.Int64())}
}

type continuousProcessingTimeTrigger[T any] struct {
	interval int64
	next     *WindowState[int64]
}

func (t *continuousProcessingTimeTrigger[T]) WindowStates() []AnyWindowState {
	return []AnyWindowState{t.next}
}

func (t *continuousProcessingTimeTrigger[T]) OnElement(_ T, _ int64, _ TimeWindow, ctx TriggerContext) (TriggerResult, error) {
	if _, ok := t.next.Value(ctx); !ok {
		now := ctx.CurrentProcessingTime()
		next := now - now%t.interval + t.interval
		ctx.RegisterProcessingTimeTimer(next)
		t.next.Update(ctx, next)
	}
	return Continue, nil
}

func (t *continuousProcessingTimeTrigger[T]) OnEventTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, nil
}

func (t *continuousProcessingTimeTrigger[T]) OnProcessingTime(ts int64, _ TimeWindow, ctx TriggerContext) (TriggerResult, error) {
	if next, ok := t.next.Value(ctx); ok && next == ts {
		t.next.Update(ctx, ts+t.interval)
		ctx.RegisterProcessingTimeTimer(ts + t.interval)
		return Fire, nil
	}
	return Continue, nil
}

func (t *continuousProcessingTimeTrigger[T]) Clear(_ TimeWindow, ctx TriggerContext) error {
	if next, ok := t.next.Value(ctx); ok {
		ctx.DeleteProcessingTimeTimer(next)
		t.next.Clear(ctx)
	}
	return nil
}

func (t *continuousProcessingTimeTrigger[T]) CanMerge() bool { return true }

func (t *continuousProcessingTimeTrigger[T]) OnMerge(_ TimeWindow, ctx OnMergeContext) error {
	ctx.MergeWindowState(t.next)
	return nil
}

func (t *continuousProcessingTimeTrigger[T]) String() string {
	return fmt.Sprintf("ContinuousProcessingTimeTrigger(%d)", t.interval)
}

// PurgingTrigger makes every firing of nested a firing that purges: FIRE becomes FIRE_AND_PURGE.
func PurgingTrigger[T any](nested Trigger[T]) MergingTrigger[T] { return purgingTrigger[T]{nested} }

type purgingTrigger[T any] struct{ nested Trigger[T] }

func purging(r TriggerResult, err error) (TriggerResult, error) {
	if r.IsFire() {
		r = FireAndPurge
	}
	return r, err
}

func (t purgingTrigger[T]) WindowStates() []AnyWindowState {
	if s, ok := t.nested.(WindowStateDeclarer); ok {
		return s.WindowStates()
	}
	return nil
}

func (t purgingTrigger[T]) OnElement(v T, ts int64, w TimeWindow, ctx TriggerContext) (TriggerResult, error) {
	return purging(t.nested.OnElement(v, ts, w, ctx))
}

func (t purgingTrigger[T]) OnEventTime(ts int64, w TimeWindow, ctx TriggerContext) (TriggerResult, error) {
	return purging(t.nested.OnEventTime(ts, w, ctx))
}

func (t purgingTrigger[T]) OnProcessingTime(ts int64, w TimeWindow, ctx TriggerContext) (TriggerResult, error) {
	return purging(t.nested.OnProcessingTime(ts, w, ctx))
}

func (t purgingTrigger[T]) Clear(w TimeWindow, ctx TriggerContext) error {
	return t.nested.Clear(w, ctx)
}

func (t purgingTrigger[T]) CanMerge() bool {
	m, ok := t.nested.(MergingTrigger[T])
	return ok && m.CanMerge()
}

func (t purgingTrigger[T]) OnMerge(w TimeWindow, ctx OnMergeContext) error {
	m, ok := t.nested.(MergingTrigger[T])
	if !ok {
		return fmt.Errorf("%s cannot merge", t.nested)
	}
	return m.OnMerge(w, ctx)
}

func (t purgingTrigger[T]) String() string { return fmt.Sprintf("PurgingTrigger(%s)", t.nested) }

package runnel

import (
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/operator"
)

// Triggers (docs/eventtime.md §4.2): a trigger decides when a window fires and when its contents are
// purged, as Flink's Trigger does. A window without one fires with its assigner's default:
// EventTimeTrigger for event-time windows, ProcessingTimeTrigger for processing-time windows. Set one with
// WindowedStream.Trigger; the built-in triggers are below, and a type with the Trigger methods is a custom
// one.

// Trigger decides when a window fires (Flink's Trigger): OnElement for each record a window gets,
// OnEventTime and OnProcessingTime for the window's timers, Clear when the window is done. One value
// serves every key, window and subtask: what it keeps per window goes in window states (WindowState,
// listed by a WindowStates method), its timers through the TriggerContext.
type Trigger[T any] = operator.Trigger[T]

// MergingTrigger is a Trigger that runs on merging (session) windows: OnMerge sets it up for the window
// that windows merged into (Flink's canMerge and onMerge). A Trigger without it is refused on session
// windows when the job is built.
type MergingTrigger[T any] = operator.MergingTrigger[T]

// TriggerContext is what a trigger reaches for its key and window: the clocks, the window's timers and
// window states.
type TriggerContext = operator.TriggerContext

// OnMergeContext is the context of MergingTrigger.OnMerge; MergeWindowState folds the merged windows'
// values of a window state into the window's.
type OnMergeContext = operator.OnMergeContext

// TriggerResult is what a trigger decides: Continue, Fire, Purge or FireAndPurge.
type TriggerResult = operator.TriggerResult

// The trigger results.
const (
	// Continue does nothing.
	Continue = operator.Continue
	// Fire hands the window's contents to the window function and keeps them.
	Fire = operator.Fire
	// Purge drops the window's contents without firing; the window's trigger state and timers stay.
	Purge = operator.Purge
	// FireAndPurge fires the window, then drops its contents.
	FireAndPurge = operator.FireAndPurge
)

// WindowState is a value kept per key and window, by a trigger (its partitioned state) or by a
// process-window function (Flink's windowState()): Value, Update and Clear read and write the value of
// the window the context is about. List it in the trigger's or function's WindowStates method.
type WindowState[V any] = operator.WindowState[V]

// AnyWindowState is a WindowState of any value type, as WindowStates lists it.
type AnyWindowState = operator.AnyWindowState

// WindowStateDeclarer is a trigger or process-window function that keeps window states: WindowStates
// lists them, so that the window operator declares them before the first record.
type WindowStateDeclarer = operator.WindowStateDeclarer

// WindowClearer is a process-window function told when a window is done (Flink's
// ProcessWindowFunction.clear): at its cleanup time, after its last firing, before its window states go.
type WindowClearer[K comparable] = operator.WindowClearer[K]

// NewWindowState describes a window state named name. merge combines the values of windows that merge
// (nil: the state never merges: per-window state of a process-window function, where windows merge, is
// refused). Values are checkpointed with codec.For[V] unless a codec is given.
func NewWindowState[V any](name string, merge func(a, b V) V, c ...Codec[V]) *WindowState[V] {
	vc := first(c)
	if vc == nil {
		vc, _ = codec.For[V]()
	}
	return operator.NewWindowState(name, merge, vc)
}

// EventTimeTrigger fires a window once the watermark passes its end, and at once for each record that
// comes after that within the allowed lateness: the default of event-time windows.
func EventTimeTrigger[T any]() MergingTrigger[T] { return operator.EventTimeTrigger[T]() }

// ProcessingTimeTrigger fires a window once the clock passes its end: the default of processing-time
// windows.
func ProcessingTimeTrigger[T any]() MergingTrigger[T] { return operator.ProcessingTimeTrigger[T]() }

// CountTrigger fires a window at every n-th record it gets, and does not purge it: each firing sees every
// record so far (wrap it in PurgingTrigger for the records since the last firing). It does not fire at
// the window's end. Session windows that merge add their counts.
func CountTrigger[T any](n int64) MergingTrigger[T] {
	if n < 1 {
		return badTrigger[T]{fmt.Errorf("CountTrigger: the count must be at least 1, got %d", n)}
	}
	return operator.CountTrigger[T](n)
}

// ContinuousEventTimeTrigger fires a window every interval of event time, at the multiples of interval
// (aligned to the epoch) after its first record's timestamp, as the watermark passes them, and once the
// watermark passes the window's end; it keeps the window's contents.
func ContinuousEventTimeTrigger[T any](interval time.Duration) MergingTrigger[T] {
	ms, err := millis("ContinuousEventTimeTrigger: the interval", interval, time.Millisecond)
	if err != nil {
		return badTrigger[T]{err}
	}
	return operator.ContinuousEventTimeTrigger[T](ms)
}

// ContinuousProcessingTimeTrigger fires a window every interval of processing time, at the multiples of
// interval (aligned to the epoch) after the clock at its first record; it keeps the window's contents.
func ContinuousProcessingTimeTrigger[T any](interval time.Duration) MergingTrigger[T] {
	ms, err := millis("ContinuousProcessingTimeTrigger: the interval", interval, time.Millisecond)
	if err != nil {
		return badTrigger[T]{err}
	}
	return operator.ContinuousProcessingTimeTrigger[T](ms)
}

// PurgingTrigger turns every firing of nested into a firing that purges the window's contents (FIRE
// becomes FIRE_AND_PURGE).
func PurgingTrigger[T any](nested Trigger[T]) MergingTrigger[T] {
	if b, ok := nested.(badTrigger[T]); ok {
		return b
	}
	return operator.PurgingTrigger(nested)
}

// badTrigger is a trigger made with bad arguments: WindowedStream.Trigger reports its error.
type badTrigger[T any] struct{ err error }

func (b badTrigger[T]) OnElement(T, int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, b.err
}
func (b badTrigger[T]) OnEventTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, b.err
}
func (b badTrigger[T]) OnProcessingTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, b.err
}
func (b badTrigger[T]) Clear(TimeWindow, TriggerContext) error   { return b.err }
func (b badTrigger[T]) CanMerge() bool                           { return true }
func (b badTrigger[T]) OnMerge(TimeWindow, OnMergeContext) error { return b.err }
func (b badTrigger[T]) String() string                           { return b.err.Error() }

// Trigger sets the trigger that decides when the windows fire, in place of the assigner's default. A
// trigger that cannot merge windows is refused on session windows when the job is built.
func (w *WindowedStream[K, T]) Trigger(t Trigger[T]) *WindowedStream[K, T] {
	switch t := t.(type) {
	case nil:
		w.ks.s.env.addErr(fmt.Errorf("Trigger: nil trigger (at %s)", origin()))
	case badTrigger[T]:
		w.ks.s.env.addErr(fmt.Errorf("Trigger: %w (at %s)", t.err, origin()))
	}
	w.trigger = t
	return w
}

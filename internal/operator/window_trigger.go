package operator

import (
	"fmt"

	"github.com/runnel-dev/runnel/internal/state"
)

// TriggerResult is what a trigger decides for its window (Flink's TriggerResult): whether the window
// fires now, and whether its contents are purged (after firing, if both).
type TriggerResult uint8

const (
	// Continue does nothing.
	Continue TriggerResult = 0
	// Fire hands the window's contents to the window function and keeps them.
	Fire TriggerResult = 1
	// Purge drops the window's contents without firing; the window and the trigger's state stay.
	Purge TriggerResult = 2
	// FireAndPurge fires the window, then drops its contents.
	FireAndPurge = Fire | Purge
)

// IsFire says the window fires.
func (r TriggerResult) IsFire() bool { return r&Fire != 0 }

// IsPurge says the window's contents go.
func (r TriggerResult) IsPurge() bool { return r&Purge != 0 }

func (r TriggerResult) String() string {
	return [...]string{"CONTINUE", "FIRE", "PURGE", "FIRE_AND_PURGE"}[r&3]
}

// Trigger decides when a window fires and when its contents are purged (Flink's Trigger). One value
// serves every key and window of the operator, on every subtask: what it keeps per window goes in window
// states (TriggerWithState), its timers through the context; both are checkpointed with the window.
// Timers it registers are the window's: they come back to OnEventTime or OnProcessingTime with the window.
type Trigger[T any] interface {
	// OnElement is called for each record added to window w, with the record's timestamp (its processing
	// time on a stream without event time).
	OnElement(v T, ts int64, w TimeWindow, ctx TriggerContext) (TriggerResult, error)
	// OnEventTime is called when an event-time timer of w fires.
	OnEventTime(ts int64, w TimeWindow, ctx TriggerContext) (TriggerResult, error)
	// OnProcessingTime is called when a processing-time timer of w fires.
	OnProcessingTime(ts int64, w TimeWindow, ctx TriggerContext) (TriggerResult, error)
	// Clear removes what the trigger keeps for w (its timers, its states): the window is done, at its
	// cleanup time or because it merged into another.
	Clear(w TimeWindow, ctx TriggerContext) error
	String() string
}

// MergingTrigger is a trigger that can run on merging windows (sessions): OnMerge sets it up for the
// window that windows merged into (Flink's canMerge and onMerge). A trigger without it, or whose
// CanMerge is false, is refused on a merging assigner when the job is built.
type MergingTrigger[T any] interface {
	Trigger[T]
	CanMerge() bool
	OnMerge(w TimeWindow, ctx OnMergeContext) error
}

// WindowStateDeclarer is a trigger or a process-window function that keeps window states: the operator
// declares the states it lists before the first record.
type WindowStateDeclarer interface {
	WindowStates() []AnyWindowState
}

// TriggerContext is what a trigger reaches for the key and window it is called for.
type TriggerContext interface {
	WindowStateScope
	// CurrentWatermark is the operator's watermark.
	CurrentWatermark() int64
	// CurrentProcessingTime is the task's clock.
	CurrentProcessingTime() int64
	// RegisterEventTimeTimer asks for OnEventTime with the window once the watermark reaches ts.
	RegisterEventTimeTimer(ts int64)
	// RegisterProcessingTimeTimer asks for OnProcessingTime with the window once the clock reaches ts.
	RegisterProcessingTimeTimer(ts int64)
	// DeleteEventTimeTimer removes the window's event-time timer at ts, if there is one.
	DeleteEventTimeTimer(ts int64)
	// DeleteProcessingTimeTimer removes the window's processing-time timer at ts, if there is one.
	DeleteProcessingTimeTimer(ts int64)
}

// OnMergeContext is the context of OnMerge: windows merged into the one the trigger is called for.
type OnMergeContext interface {
	TriggerContext
	// MergeWindowState folds s's values of the merged windows into the window's, with s's merge function.
	MergeWindowState(s AnyWindowState)
}

// triggerContext is the TriggerContext (and OnMergeContext) of a window operator: its timers, and the
// trigger's window states, about the window w of the current key.
type triggerContext struct {
	w       TimeWindow
	merged  []TimeWindow // the windows that merged into w, during OnMerge
	states  *windowStates
	event   state.Timers
	proc    state.Timers
	mark    *int64
	now     func() int64
	failf   func(string, ...any)
	hasTime bool // the stream has event time: event-time timers can fire
}

func (c *triggerContext) windowScope() (*windowStates, TimeWindow) { return c.states, c.w }
func (c *triggerContext) CurrentWatermark() int64                  { return *c.mark }
func (c *triggerContext) CurrentProcessingTime() int64             { return c.now() }
func (c *triggerContext) ns() state.Namespace                      { return state.Namespace{A: c.w.Start, B: c.w.End} }

func (c *triggerContext) RegisterEventTimeTimer(ts int64) {
	if !c.hasTime {
		c.failf("trigger: RegisterEventTimeTimer: the stream has no event time; give it a WatermarkStrategy (WithTimestamps)")
	}
	c.event.Register(ts, c.ns())
}
func (c *triggerContext) RegisterProcessingTimeTimer(ts int64) { c.proc.Register(ts, c.ns()) }
func (c *triggerContext) DeleteEventTimeTimer(ts int64)        { c.event.Delete(ts, c.ns()) }
func (c *triggerContext) DeleteProcessingTimeTimer(ts int64)   { c.proc.Delete(ts, c.ns()) }

func (c *triggerContext) MergeWindowState(s AnyWindowState) {
	for i, d := range c.states.decls {
		if d == s {
			if err := c.states.tables[i].merge(c.w, c.merged); err != nil {
				c.failf("trigger %w", err)
			}
			return
		}
	}
	c.failf("window state %q is not declared: the trigger must list it in WindowStates", s.Name())
}

// CheckTrigger refuses a trigger that cannot run on the assigner's windows: one that cannot merge, on
// merging windows.
func CheckTrigger[T any](t Trigger[T], a WindowAssigner) error {
	if _, merging := a.(MergingWindowAssigner); !merging || t == nil {
		return nil
	}
	if m, ok := t.(MergingTrigger[T]); !ok || !m.CanMerge() {
		return fmt.Errorf("trigger %s cannot run on %s: windows merge, and the trigger does not (it must implement MergingTrigger with CanMerge true)", t, a)
	}
	return nil
}

// IsDefaultTrigger says t is the default trigger of a's windows (or nil), which the operator runs built
// in.
func IsDefaultTrigger[T any](t Trigger[T], a WindowAssigner) bool {
	switch t.(type) {
	case nil:
		return true
	case eventTimeTrigger[T]:
		return a.IsEventTime()
	case processingTimeTrigger[T]:
		return !a.IsEventTime()
	}
	return false
}

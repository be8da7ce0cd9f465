package operator

import (
	"fmt"

	"github.com/runnel-dev/runnel/internal/state"
)

// windowOp is the window operator (Flink's WindowOperator): per record, the assigner's windows (merged
// into the key's sessions by a merging window set), the record added to each window's contents, and the
// trigger asked whether the window fires; timers bring the trigger back, and at a window's cleanup time
// its state goes. The default trigger of the assigner's domain is built in, as the paths that per record
// cost the least: an incremental window registers its timers with its accumulator, not per record.
type windowOp[K comparable, T, ACC, V, Out any] struct {
	windowBase[K, T, V, Out]
	assigner    WindowAssigner
	contents    windowContents[T, V]
	incremental bool              // contents say when a window is new
	sessions    *mergingWindowSet // merging assigners only
	trigger     Trigger[T]        // nil: the default trigger
	merging     MergingTrigger[T] // trigger, on a merging assigner
	tctx        *triggerContext   // with trigger
	event, proc state.Timers      // the timers the watermark and the clock fire; nil where none can
	mergedWins  []TimeWindow      // scratch
	fireEvent   func(int64, state.Namespace) error
	fireProc    func(int64, state.Namespace) error
}

func newWindowOp[K comparable, T, ACC, V, Out any](ctx *Context, s *WindowSpec[K, T, ACC, V, Out], b state.KeyedBackend[K]) (*windowOp[K, T, ACC, V, Out], error) {
	o := &windowOp[K, T, ACC, V, Out]{assigner: s.Assigner, trigger: s.Trigger}
	if err := o.init(ctx, s, b); err != nil {
		return nil, err
	}
	eb := state.Engine(b)
	var err error
	switch {
	case s.Evictor != nil:
		var ts *int64
		if s.Timed {
			ts = &o.kc.ts
		}
		o.contents, err = newEvictingContents(eb, s.ElemCodec, s.Evictor, s.Inc, &o.windowBase, ts, o.emit)
	case s.Inc != nil:
		o.contents, err = newIncrementalContents(eb, s.Inc, o.emit)
		o.incremental = true
	default:
		o.contents, err = newListingContents[T, V](eb, s.ElemCodec, o.emit)
	}
	if err != nil {
		return nil, err
	}
	if _, ok := s.Assigner.(MergingWindowAssigner); ok {
		if o.sessions, err = newMergingWindowSet(eb, o.isLate, o); err != nil {
			return nil, err
		}
	}
	if o.trigger == nil {
		o.fireEvent, o.fireProc = o.onTimer, o.onTimer
		if o.eventTime {
			o.event = o.timers
		} else {
			o.proc = o.timers
		}
		return o, nil
	}
	// A trigger may ask for timers of either domain.
	o.merging, _ = o.trigger.(MergingTrigger[T])
	o.tctx = &triggerContext{mark: &o.watermark, now: ctx.CurrentProcessingTime, failf: o.kc.failf, hasTime: s.Timed}
	if o.eventTime {
		o.tctx.event = o.timers
		o.tctx.proc, err = state.NewTimers[K](eb, "\x00timers/processing")
	} else {
		o.tctx.proc = o.timers
		o.tctx.event, err = state.NewTimers[K](eb, "\x00timers/event")
	}
	if err != nil {
		return nil, err
	}
	var list []AnyWindowState
	if d, ok := o.trigger.(WindowStateDeclarer); ok {
		list = d.WindowStates()
	}
	if o.tctx.states, err = declareWindowStates(b, "trigger", "\x00trigger/", list, o.kc); err != nil {
		return nil, err
	}
	o.proc = o.tctx.proc
	if s.Timed {
		o.event = o.tctx.event
	}
	o.fireEvent = func(ts int64, ns state.Namespace) error { return o.onTriggerTimer(EventTime, ts, ns) }
	o.fireProc = func(ts int64, ns state.Namespace) error { return o.onTriggerTimer(ProcessingTime, ts, ns) }
	return o, nil
}

func (o *windowOp[K, T, ACC, V, Out]) base() *windowBase[K, T, V, Out] { return &o.windowBase }

// process adds record v at time ts to its windows; a record that belongs to no window that is not late is
// dropped and counted.
func (o *windowOp[K, T, ACC, V, Out]) process(v T, ts int64) {
	o.kc.b.SetCurrentKey(o.key(v))
	o.wins = o.assigner.AssignWindows(ts, o.wins[:0])
	taken := false
	for _, w := range o.wins {
		sw := w // where w's contents are
		if o.sessions != nil {
			w, sw = o.sessions.add(w)
		}
		if o.isLate(w) {
			continue
		}
		taken = true
		created, err := o.contents.add(sw, v, ts)
		if err != nil {
			o.kc.fail(err)
		}
		if o.trigger != nil {
			o.onElement(v, ts, w, sw)
			continue
		}
		// An incremental window's timers are registered with its accumulator (they are restored together);
		// a listing window's, and a session's (merging moves them), at every record (finding out whether a
		// list is new would cost a read).
		fired := o.fired(w)
		if !created && o.incremental && o.sessions == nil && !fired {
			continue
		}
		o.registerCleanup(w)
		if fired {
			// Within the allowed lateness of a window that fired: it fires again with the late record, now
			// (its end has passed, so a timer there would fire it once more at the next watermark).
			if err := o.contents.fire(w, sw); err != nil {
				o.kc.fail(err)
			}
			continue
		}
		o.timers.Register(w.MaxTimestamp(), w.namespace())
	}
	if !taken {
		o.dropLate(v)
	}
}

// onElement asks the trigger about window w (contents under sw) after a record was added, and does what
// it says; the window's cleanup timer is registered either way, as in Flink.
func (o *windowOp[K, T, ACC, V, Out]) onElement(v T, ts int64, w, sw TimeWindow) {
	o.tctx.w = w
	r, err := o.trigger.OnElement(v, ts, w, o.tctx)
	if err != nil {
		o.kc.fail(fmt.Errorf("trigger %s: %w", o.trigger, err))
	}
	if err := o.apply(r, w, sw); err != nil {
		o.kc.fail(err)
	}
	o.timers.Register(o.cleanupTime(w), w.namespace())
}

// apply does what a trigger decided for window w: fire, then purge its contents.
func (o *windowOp[K, T, ACC, V, Out]) apply(r TriggerResult, w, sw TimeWindow) error {
	if r.IsFire() {
		if err := o.contents.fire(w, sw); err != nil {
			return err
		}
	}
	if r.IsPurge() {
		o.contents.clear(sw)
	}
	return nil
}

// mergeWindows implements windowMerger: the merged sessions' timers go (the default trigger's) or the
// trigger merges them into union (OnMerge) and clears each, and their contents join target.
func (o *windowOp[K, T, ACC, V, Out]) mergeWindows(union, target TimeWindow, merged []sessionWindow) {
	if o.trigger == nil {
		for _, s := range merged {
			o.timers.Delete(s.W.MaxTimestamp(), s.W.namespace())
			o.timers.Delete(o.cleanupTime(s.W), s.W.namespace())
		}
	} else {
		o.mergedWins = o.mergedWins[:0]
		for _, s := range merged {
			o.mergedWins = append(o.mergedWins, s.W)
		}
		o.tctx.w, o.tctx.merged = union, o.mergedWins
		err := o.merging.OnMerge(union, o.tctx)
		o.tctx.merged = nil
		if err != nil {
			o.kc.fail(fmt.Errorf("trigger %s: merge: %w", o.trigger, err))
		}
		for _, s := range merged {
			o.tctx.w = s.W
			if err := o.trigger.Clear(s.W, o.tctx); err != nil {
				o.kc.fail(fmt.Errorf("trigger %s: clear: %w", o.trigger, err))
			}
			o.timers.Delete(o.cleanupTime(s.W), s.W.namespace())
		}
	}
	for _, s := range merged {
		if s.State != target {
			if err := o.contents.merge(target, s.State); err != nil {
				o.kc.fail(err)
			}
		}
	}
}

// stateWindow is where window w's contents are: w itself unless w is a session that merged into another's.
func (o *windowOp[K, T, ACC, V, Out]) stateWindow(w TimeWindow) TimeWindow {
	if o.sessions == nil {
		return w
	}
	sw, _ := o.sessions.stateWindow(w)
	return sw
}

// onTimer handles a window's timer under the default trigger: at its end it fires, at its cleanup time its
// state goes.
func (o *windowOp[K, T, ACC, V, Out]) onTimer(ts int64, ns state.Namespace) error {
	w := windowOf(ns)
	if ts == w.MaxTimestamp() {
		if err := o.contents.fire(w, o.stateWindow(w)); err != nil {
			return err
		}
	}
	if ts == o.cleanupTime(w) {
		return o.clearAll(w, o.stateWindow(w))
	}
	return nil
}

// onTriggerTimer hands a window's timer to the trigger and does what it says; at the window's cleanup time
// (a timer of the assigner's domain) its state goes. A timer of a session that is no more (it merged into
// another) does nothing.
func (o *windowOp[K, T, ACC, V, Out]) onTriggerTimer(d TimeDomain, ts int64, ns state.Namespace) error {
	w, sw := windowOf(ns), windowOf(ns)
	if o.sessions != nil {
		var ok bool
		if sw, ok = o.sessions.stateWindow(w); !ok {
			return nil
		}
	}
	o.tctx.w = w
	var (
		r   TriggerResult
		err error
	)
	if d == EventTime {
		r, err = o.trigger.OnEventTime(ts, w, o.tctx)
	} else {
		r, err = o.trigger.OnProcessingTime(ts, w, o.tctx)
	}
	if err != nil {
		return fmt.Errorf("trigger %s: %w", o.trigger, err)
	}
	if err := o.apply(r, w, sw); err != nil {
		return err
	}
	if (d == EventTime) == o.eventTime && ts == o.cleanupTime(w) {
		return o.clearAll(w, sw)
	}
	return nil
}

// clearAll drops everything of window w (contents under sw): its contents, its trigger's state, the
// function's window states, its session.
func (o *windowOp[K, T, ACC, V, Out]) clearAll(w, sw TimeWindow) error {
	o.contents.clear(sw)
	if o.trigger != nil {
		o.tctx.w = w
		if err := o.trigger.Clear(w, o.tctx); err != nil {
			return fmt.Errorf("trigger %s: clear: %w", o.trigger, err)
		}
	}
	if o.sessions != nil {
		o.sessions.retire(w)
	}
	return o.clearWindow(w)
}

func (o *windowOp[K, T, ACC, V, Out]) onWatermark(ms int64) error {
	if !o.advance(ms) || o.event == nil {
		return nil
	}
	return fireEventTimers(o.event, ms, o.fireEvent)
}

func (o *windowOp[K, T, ACC, V, Out]) clocked() bool       { return o.proc != nil }
func (o *windowOp[K, T, ACC, V, Out]) nextDeadline() int64 { return nextTimer(o.proc) }
func (o *windowOp[K, T, ACC, V, Out]) onProcessingTime(now int64) error {
	return fireProcessingTimers(o.proc, now, o.fireProc)
}

// restored gives the keys of a restored checkpoint their session sets (mergingWindowSet.listRestored).
func (o *windowOp[K, T, ACC, V, Out]) restored() error {
	if o.sessions == nil {
		return nil
	}
	keys := func(f func() error) error { return o.kc.b.ForEachKey(func(K) error { return f() }) }
	return o.sessions.listRestored(keys, o.contents.each, o.registerWindow)
}

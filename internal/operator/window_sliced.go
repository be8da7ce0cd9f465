package operator

import (
	"github.com/runnel-dev/runnel/internal/state"
)

// slicedWindowOp is the operator of incremental sliding windows with the default trigger (Flink SQL's
// slicing window operator; docs/eventtime.md §4.4): each record goes to the one slice (gcd of size and
// slide wide) its time is in, and a window fires from its slices. Timers go as a chain, one window at a
// time: the slice's first window that has not fired gets a timer when the slice is new, and a window that
// fires gives the next window its timer if that window holds any of its slices (a slice beyond it started
// a chain of its own). So a key holds a timer per chain, not one per window, and a record writes one
// accumulator, not size/slide.
type slicedWindowOp[K comparable, T, ACC, V, Out any] struct {
	windowBase[K, T, V, Out]
	assigner SlidingWindows
	slice    int64
	inc      *Incremental[T, ACC, V]
	acc      *incrementalContents[T, ACC, V] // slices, and windows of a checkpoint from before slicing
	onTimer  func(int64, state.Namespace) error
}

func newSlicedWindowOp[K comparable, T, ACC, V, Out any](ctx *Context, s *WindowSpec[K, T, ACC, V, Out], b state.KeyedBackend[K], slice int64) (*slicedWindowOp[K, T, ACC, V, Out], error) {
	o := &slicedWindowOp[K, T, ACC, V, Out]{assigner: s.Assigner.(SlidingWindows), slice: slice, inc: s.Inc}
	if err := o.init(ctx, s, b); err != nil {
		return nil, err
	}
	var err error
	if o.acc, err = newIncrementalContents(state.Engine(b), s.Inc, o.emit); err != nil {
		return nil, err
	}
	o.onTimer = o.onSlicedTimer
	return o, nil
}

func (o *slicedWindowOp[K, T, ACC, V, Out]) base() *windowBase[K, T, V, Out] { return &o.windowBase }

// process adds record v at time ts to its slice (its windows in o.wins, newest first).
func (o *slicedWindowOp[K, T, ACC, V, Out]) process(v T, ts int64) {
	o.kc.b.SetCurrentKey(o.key(v))
	o.wins = o.assigner.AssignWindows(ts, o.wins[:0])
	// The windows that are not late are the newest ones: a prefix of o.wins.
	n := len(o.wins)
	for n > 0 && o.isLate(o.wins[n-1]) {
		n--
	}
	if n == 0 {
		o.dropLate(v)
		return
	}
	p := ts - floorMod(ts-o.assigner.Offset, o.slice)
	created, err := o.acc.add(TimeWindow{Start: p, End: p + o.slice}, v, ts)
	if err != nil {
		o.kc.fail(err)
	}
	for i := n - 1; i >= 0; i-- { // oldest first
		w := o.wins[i]
		if o.fired(w) {
			// Within the allowed lateness of a window that fired: it fires again with the record, now.
			o.registerCleanup(w)
			if _, err := o.fire(w); err != nil {
				o.kc.fail(err)
			}
			continue
		}
		if created {
			o.registerWindow(w)
		}
		return
	}
}

// fire fires window w from its slices, oldest first, merged into a new accumulator (Merge may reuse its
// first argument, never one in state). A checkpoint taken before windows were sliced holds the window's
// own accumulator under w itself (an extent of Size, where slices have a smaller one): it comes first. It
// says whether the next window, w+Slide, holds any of w's slices.
func (o *slicedWindowOp[K, T, ACC, V, Out]) fire(w TimeWindow) (bool, error) {
	inc := o.inc
	acc, have := o.acc.acc.Get(w)
	if have {
		var err error
		if acc, err = inc.Merge(inc.Create(), acc); err != nil {
			return false, err
		}
	} else {
		acc = inc.Create()
	}
	more := false
	next := w.Start + o.assigner.Slide
	for p := w.Start; p < w.End; p += o.slice {
		a, ok := o.acc.acc.Get(TimeWindow{Start: p, End: p + o.slice})
		if !ok {
			continue
		}
		var err error
		if acc, err = inc.Merge(acc, a); err != nil {
			return false, err
		}
		have = true
		more = more || p >= next
	}
	if !have {
		return more, nil
	}
	o.acc.vs = append(o.acc.vs[:0], inc.Result(acc))
	return more, o.emit(w, o.acc.vs)
}

// onSlicedTimer handles a window's timer: at its end it fires and passes the chain on to the next window;
// at its cleanup time the slices that no later window holds go (earlier windows' went before).
func (o *slicedWindowOp[K, T, ACC, V, Out]) onSlicedTimer(ts int64, ns state.Namespace) error {
	w, slide := windowOf(ns), o.assigner.Slide
	if ts == w.MaxTimestamp() {
		more, err := o.fire(w)
		if err != nil {
			return err
		}
		if more {
			o.registerWindow(TimeWindow{Start: w.Start + slide, End: w.End + slide})
		}
	}
	if ts == o.cleanupTime(w) {
		o.acc.clear(w)
		for p := w.Start; p < w.Start+slide; p += o.slice {
			o.acc.clear(TimeWindow{Start: p, End: p + o.slice})
		}
		return o.clearWindow(w)
	}
	return nil
}

func (o *slicedWindowOp[K, T, ACC, V, Out]) onWatermark(ms int64) error {
	if !o.advance(ms) || !o.eventTime {
		return nil
	}
	return fireEventTimers(o.timers, ms, o.onTimer)
}

func (o *slicedWindowOp[K, T, ACC, V, Out]) clocked() bool       { return !o.eventTime }
func (o *slicedWindowOp[K, T, ACC, V, Out]) nextDeadline() int64 { return nextTimer(o.timers) }
func (o *slicedWindowOp[K, T, ACC, V, Out]) onProcessingTime(now int64) error {
	return fireProcessingTimers(o.timers, now, o.onTimer)
}
func (o *slicedWindowOp[K, T, ACC, V, Out]) restored() error { return nil }

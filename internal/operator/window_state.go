package operator

import (
	"fmt"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// WindowState is a value kept per key and window: by a trigger (Flink's partitioned trigger state, read
// through its TriggerContext) or by a process-window function (Flink's windowState(), read through its
// WindowContext). Make it once (a package variable or a field) and list it in the trigger's or the
// function's WindowStates (WindowStateDeclarer), so that the operator declares it before the first record.
// One WindowState may serve every subtask: the values live in the operator.
type WindowState[V any] struct {
	name  string
	codec codec.Codec[V]
	merge func(a, b V) V
}

// NewWindowState describes a window state named name. merge combines the values of windows that merge
// (OnMergeContext.MergeWindowState: Flink's ReducingState), nil where the state never merges; c encodes the
// values for checkpoints (nil: codec.For[V]).
func NewWindowState[V any](name string, merge func(a, b V) V, c codec.Codec[V]) *WindowState[V] {
	return &WindowState[V]{name: name, codec: c, merge: merge}
}

// Name is the state's name.
func (s *WindowState[V]) Name() string { return s.name }

// Value returns the value of the window ctx is about and whether it has one.
func (s *WindowState[V]) Value(ctx WindowStateScope) (V, bool) {
	t, w := tableOf(ctx, s)
	return t.m.Get(w)
}

// Update sets the value of the window ctx is about.
func (s *WindowState[V]) Update(ctx WindowStateScope, v V) {
	t, w := tableOf(ctx, s)
	t.m.Put(w, v)
}

// Clear removes the value of the window ctx is about.
func (s *WindowState[V]) Clear(ctx WindowStateScope) {
	t, w := tableOf(ctx, s)
	t.m.Remove(w)
}

// AnyWindowState is a WindowState of any value type, as a trigger or function lists it to be declared.
type AnyWindowState interface {
	Name() string
	declare(b state.Backend, prefix string) (windowTable, error)
}

func (s *WindowState[V]) declare(b state.Backend, prefix string) (windowTable, error) {
	wc, err := codec.Struct[TimeWindow]()
	if err != nil {
		return nil, err
	}
	m, err := state.NewMap[TimeWindow, V](b, prefix+s.name, wc, s.codec)
	if err != nil {
		return nil, err
	}
	return &windowStateTable[V]{s: s, m: m}, nil
}

// WindowStateScope is a context that window states are read through: a TriggerContext or a
// WindowContext, about one key and window.
type WindowStateScope interface {
	windowScope() (*windowStates, TimeWindow)
}

// windowTable is a declared window state, of any value type.
type windowTable interface {
	remove(w TimeWindow)
	// merge folds the values of windows from into window to, and removes them.
	merge(to TimeWindow, from []TimeWindow) error
}

type windowStateTable[V any] struct {
	s *WindowState[V]
	m state.MapState[TimeWindow, V]
}

func (t *windowStateTable[V]) remove(w TimeWindow) { t.m.Remove(w) }

func (t *windowStateTable[V]) merge(to TimeWindow, from []TimeWindow) error {
	if t.s.merge == nil {
		return fmt.Errorf("window state %q cannot merge: it has no merge function", t.s.name)
	}
	acc, have := t.m.Get(to)
	for _, w := range from {
		if w == to {
			continue
		}
		v, ok := t.m.Get(w)
		if !ok {
			continue
		}
		if have {
			acc = t.s.merge(acc, v)
		} else {
			acc, have = v, true
		}
		t.m.Remove(w)
	}
	if have {
		t.m.Put(to, acc)
	}
	return nil
}

// windowStates are the window states declared by one party (the trigger, or the function) of a window
// operator, and the window the party is about.
type windowStates struct {
	owner  string // "trigger" or "window function", for errors
	decls  []AnyWindowState
	tables []windowTable
	kc     interface{ failf(string, ...any) }
}

// declareWindowStates declares the window states that party lists, under prefix.
func declareWindowStates(b state.Backend, owner, prefix string, list []AnyWindowState, kc interface{ failf(string, ...any) }) (*windowStates, error) {
	ws := &windowStates{owner: owner, kc: kc}
	for _, d := range list {
		t, err := d.declare(state.Engine(b), prefix)
		if err != nil {
			return nil, fmt.Errorf("%s window state %q: %w", owner, d.Name(), err)
		}
		ws.decls = append(ws.decls, d)
		ws.tables = append(ws.tables, t)
	}
	return ws, nil
}

// tableOf finds the table of s among the states of the party behind ctx.
func tableOf[V any](ctx WindowStateScope, s *WindowState[V]) (*windowStateTable[V], TimeWindow) {
	ws, w := ctx.windowScope()
	for i, d := range ws.decls {
		if d == AnyWindowState(s) {
			return ws.tables[i].(*windowStateTable[V]), w
		}
	}
	ws.kc.failf("window state %q is not declared: the %s must list it in WindowStates", s.name, ws.owner)
	panic("unreachable: failf aborts")
}

// removeAll removes every state's value of window w.
func (ws *windowStates) removeAll(w TimeWindow) {
	for _, t := range ws.tables {
		t.remove(w)
	}
}

package operator

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// sessionWindow is a session window of a key and the window its contents are stored under: the window
// it began as, or the state window of a session it merged into.
type sessionWindow struct {
	W, State TimeWindow
}

// windowMerger is what a merging window set tells its operator: windows merged into union, whose contents
// go to state window target (the trigger and the timers of the merged windows are the operator's to
// settle, then the contents move).
type windowMerger interface {
	mergeWindows(union, target TimeWindow, merged []sessionWindow)
}

// mergingWindowSet is, per key, the session windows and the state window each one's contents are under
// (Flink's MergingWindowSet): a session that grows keeps its contents where they are, and finding a key's
// sessions is one read, not a scan of its contents (which on pebble passes every version a merge left
// behind).
type mergingWindowSet struct {
	sessions state.ValueState[[]sessionWindow]
	isLate   func(TimeWindow) bool
	op       windowMerger
	merged   []sessionWindow // scratch
}

func newMergingWindowSet(b state.Backend, isLate func(TimeWindow) bool, op windowMerger) (*mergingWindowSet, error) {
	s, err := state.NewValue[[]sessionWindow](b, "\x00window/sessions", sessionsCodec{})
	if err != nil {
		return nil, err
	}
	return &mergingWindowSet{sessions: s, isLate: isLate, op: op}, nil
}

// add merges the current key's session windows that overlap or touch w into one and returns it with the
// state window its contents are under (w and w when nothing overlaps: a new session). A merged window that
// would be late is returned without a change: the record is then dropped, and the windows stay as they
// were. Extending one session moves nothing: its contents stay under its state window, and only the key's
// list of sessions is written; when sessions merge, the others' contents join the first one's.
func (m *mergingWindowSet) add(w TimeWindow) (TimeWindow, TimeWindow) {
	set, _ := m.sessions.Value()
	union, first, n := w, -1, 0
	for i, s := range set {
		if s.W.intersects(w) {
			n++
			union = union.cover(s.W)
			if first < 0 {
				first = i
			}
		}
	}
	if m.isLate(union) {
		return union, union
	}
	if n == 1 && set[first].W == union {
		return union, set[first].State // within a session: nothing changes
	}
	// A new list, never the one read: the heap backend's snapshot may still hold that one.
	next := make([]sessionWindow, 0, len(set)+1)
	target := w
	if first >= 0 {
		target = set[first].State
	}
	m.merged = m.merged[:0]
	for _, s := range set {
		if s.W.intersects(w) {
			m.merged = append(m.merged, s)
		} else {
			next = append(next, s)
		}
	}
	if len(m.merged) > 0 {
		m.op.mergeWindows(union, target, m.merged)
	}
	m.sessions.Update(append(next, sessionWindow{W: union, State: target}))
	return union, target
}

// stateWindow is where session w's contents are, and whether w is a session of the current key.
func (m *mergingWindowSet) stateWindow(w TimeWindow) (TimeWindow, bool) {
	set, _ := m.sessions.Value()
	for _, s := range set {
		if s.W == w {
			return s.State, true
		}
	}
	return w, false
}

// retire removes session w from the current key's set once its state is gone.
func (m *mergingWindowSet) retire(w TimeWindow) {
	set, _ := m.sessions.Value()
	i := slices.IndexFunc(set, func(s sessionWindow) bool { return s.W == w })
	switch {
	case i < 0:
	case len(set) == 1:
		m.sessions.Clear()
	default:
		m.sessions.Update(slices.Delete(slices.Clone(set), i, i+1))
	}
}

// listRestored gives every key with session contents but no set (a checkpoint from before the sets,
// where each window was its own state window) its set, and merges the sessions of a key that touch (a
// checkpoint of a build that merged only overlapping sessions), once after a restore. contents are the
// operator's; merge does what mergeSessions' merging does, for restored sessions (registerWindow: the
// union's timers).
func (m *mergingWindowSet) listRestored(keys func(func() error) error, each func(func(TimeWindow)), registerWindow func(TimeWindow)) error {
	return keys(func() error {
		set, listed := m.sessions.Value()
		if !listed {
			each(func(x TimeWindow) { set = append(set, sessionWindow{W: x, State: x}) })
		}
		merged, changed := m.mergeRestored(set, registerWindow)
		if len(merged) > 0 && (changed || !listed) {
			m.sessions.Update(merged)
		}
		return nil
	})
}

// mergeRestored merges the sessions of the current key that overlap or touch one another, as add would
// have: the contents of each group join its earliest session's state window, the members' timers go and
// the union's are registered (overdue ones fire at the next watermark). It returns the key's sessions, and
// whether any merged (set itself is never changed: a snapshot may hold it).
func (m *mergingWindowSet) mergeRestored(set []sessionWindow, registerWindow func(TimeWindow)) ([]sessionWindow, bool) {
	if len(set) < 2 {
		return set, false
	}
	sorted := slices.Clone(set)
	slices.SortFunc(sorted, func(a, b sessionWindow) int {
		if a.W.Start != b.W.Start {
			return cmp.Compare(a.W.Start, b.W.Start)
		}
		return cmp.Compare(a.W.End, b.W.End)
	})
	out := make([]sessionWindow, 0, len(sorted))
	changed := false
	for i := 0; i < len(sorted); {
		union, j := sorted[i].W, i+1
		for j < len(sorted) && union.intersects(sorted[j].W) {
			union = union.cover(sorted[j].W)
			j++
		}
		if j == i+1 {
			out = append(out, sorted[i])
			i = j
			continue
		}
		changed = true
		target := sorted[i].State
		m.op.mergeWindows(union, target, sorted[i:j])
		registerWindow(union)
		out = append(out, sessionWindow{W: union, State: target})
		i = j
	}
	if !changed {
		return set, false
	}
	return out, true
}

// sessionsCodec encodes a key's session windows: a count, then each session's four times (varints).
type sessionsCodec struct{}

func (sessionsCodec) Append(dst []byte, v []sessionWindow) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	for _, s := range v {
		dst = binary.AppendVarint(dst, s.W.Start)
		dst = binary.AppendVarint(dst, s.W.End)
		dst = binary.AppendVarint(dst, s.State.Start)
		dst = binary.AppendVarint(dst, s.State.End)
	}
	return dst, nil
}

func (sessionsCodec) Decode(src []byte, v *[]sessionWindow) error {
	n, k := binary.Uvarint(src)
	if k <= 0 || n > uint64(len(src)) {
		return fmt.Errorf("%w: session windows: bad count", codec.ErrMalformed)
	}
	src = src[k:]
	out := make([]sessionWindow, n)
	for i := range out {
		var t [4]int64
		for j := range t {
			x, k := binary.Varint(src)
			if k <= 0 {
				return fmt.Errorf("%w: session windows: session %d of %d is cut short", codec.ErrMalformed, i, n)
			}
			t[j], src = x, src[k:]
		}
		out[i] = sessionWindow{W: TimeWindow{Start: t[0], End: t[1]}, State: TimeWindow{Start: t[2], End: t[3]}}
	}
	if len(src) != 0 {
		return fmt.Errorf("%w: session windows: %d bytes after the last", codec.ErrMalformed, len(src))
	}
	*v = out
	return nil
}

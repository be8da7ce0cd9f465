package operator

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// TimeWindow is a window of time [Start, End), in epoch milliseconds.
type TimeWindow struct {
	Start, End int64
}

// MaxTimestamp is the last millisecond in the window: End - 1. Window results carry it as their timestamp.
func (w TimeWindow) MaxTimestamp() int64 { return w.End - 1 }

// intersects says w and o overlap or touch (one ends where the other starts): session windows that do
// merge, as in Flink ([0,1000) and [1000,2000) make [0,2000)).
func (w TimeWindow) intersects(o TimeWindow) bool { return w.Start <= o.End && o.Start <= w.End }

func (w TimeWindow) cover(o TimeWindow) TimeWindow {
	return TimeWindow{Start: min(w.Start, o.Start), End: max(w.End, o.End)}
}

// WindowKind is the shape of a WindowAssigner's windows.
type WindowKind uint8

const (
	// Tumbling windows of Size, aligned to the epoch plus Offset, do not overlap.
	Tumbling WindowKind = iota
	// Sliding windows of Size start every Slide (plus Offset); a record belongs to ceil(Size/Slide) of them.
	Sliding
	// Session windows of a key are the record times plus Gap, merged while they overlap or touch.
	Session
)

// WindowAssigner says which windows a record belongs to (docs/eventtime.md §4.1). All times are ms.
type WindowAssigner struct {
	Kind                     WindowKind
	Size, Slide, Offset, Gap int64
	// EventTime: windows of the records' timestamps, fired by the watermark; else of the processing time at
	// which records arrive, fired by the clock.
	EventTime bool
}

// floorMod is x mod m in [0, m), also for negative x.
func floorMod(x, m int64) int64 {
	r := x % m
	if r < 0 {
		r += m
	}
	return r
}

// assign appends the windows of a record at ts to buf.
func (a *WindowAssigner) assign(ts int64, buf []TimeWindow) []TimeWindow {
	switch a.Kind {
	case Tumbling:
		start := ts - floorMod(ts-a.Offset, a.Size)
		return append(buf, TimeWindow{Start: start, End: start + a.Size})
	case Sliding:
		last := ts - floorMod(ts-a.Offset, a.Slide)
		for s := last; s > ts-a.Size; s -= a.Slide {
			buf = append(buf, TimeWindow{Start: s, End: s + a.Size})
		}
		return buf
	default:
		return append(buf, TimeWindow{Start: ts, End: ts + a.Gap})
	}
}

// AggregateFunction folds the records of a window into an accumulator, incrementally.
type AggregateFunction[T, ACC, Out any] interface {
	// CreateAccumulator returns the accumulator of an empty window.
	CreateAccumulator() ACC
	// Add folds v into acc and returns the result.
	Add(v T, acc ACC) ACC
	// Result returns the window's result.
	Result(acc ACC) Out
	// Merge combines two accumulators as if their records had been added to one: of two session windows
	// that merge, or of the slices a sliding window is made of. It may change and return a, never b.
	Merge(a, b ACC) ACC
}

// WindowContext is the context of a process-window function: the key and the window being fired.
type WindowContext[K comparable] interface {
	KeyedContext[K]
	// Window is the window being fired.
	Window() TimeWindow
	// CurrentWatermark is the operator's watermark.
	CurrentWatermark() int64
}

// ProcessWindowFunction gets the contents of a window when it fires: every record (a listing window) or
// the incremental aggregate's one result.
type ProcessWindowFunction[K comparable, T, Out any] interface {
	Open(ctx KeyedContext[K]) error
	Process(ctx WindowContext[K], elements []T, out Collector[Out]) error
	Close() error
}

// Incremental is how a window keeps its contents as one accumulator: AggregateFunction's methods as
// functions (a reduce is an aggregate whose accumulator is the record).
type Incremental[T, ACC, V any] struct {
	Create func() ACC
	Add    func(v T, acc ACC) (ACC, error)
	Result func(acc ACC) V
	Merge  func(a, b ACC) (ACC, error)
	Codec  codec.Codec[ACC]
}

// WindowSpec runs a keyed window operator. T is the record, ACC the accumulator of an incremental window,
// V what a window hands its process function (the accumulator's result, or the records themselves for a
// listing window), Out what the operator emits.
type WindowSpec[K comparable, T, ACC, V, Out any] struct {
	Key      func(T) K
	KeyCodec codec.Codec[K]
	Assigner WindowAssigner
	// Lateness is how long after a window's end (in event time) records still update it and fire it
	// again; until then its state is kept.
	Lateness int64
	// Timed: the stream has event time; records are Timed[T] and results Timed[Out] at the window's
	// MaxTimestamp.
	Timed bool
	// Inc keeps the window incrementally; nil: the window lists its records (ElemCodec), and V is T.
	Inc       *Incremental[T, ACC, V]
	ElemCodec codec.Codec[T]
	// NewProcess makes the process-window function per subtask.
	NewProcess func() ProcessWindowFunction[K, V, Out]
	// LateTag, when set, is the side output that late records go to instead of being dropped.
	LateTag string
	// unsliced keeps an accumulator per sliding window even where slices would do (tests compare the two).
	unsliced bool
}

// maxSlicesPerWindow bounds the slices a sliced window is made of: a window fires by reading each of its
// slices, so past this, a sliding window keeps its own accumulator.
const maxSlicesPerWindow = 64

// sliceWidth is the width of the slices that the windows of an incremental sliding window are made of, or 0
// where each window keeps its own accumulator (docs/eventtime.md §4.4). The slices are the gcd of size and
// slide, aligned as the windows are, so every window is a whole number of them and every record is in one.
func (s *WindowSpec[K, T, ACC, V, Out]) sliceWidth() int64 {
	a := s.Assigner
	if s.Inc == nil || s.unsliced || a.Kind != Sliding || a.Slide <= 0 || a.Slide >= a.Size {
		return 0
	}
	g, b := a.Size, a.Slide
	for b != 0 {
		g, b = b, g%b
	}
	if a.Size/g > maxSlicesPerWindow {
		return 0
	}
	return g
}

func (s *WindowSpec[K, T, ACC, V, Out]) Build(ctx *Context, downstream []any) (Built, error) {
	if s.Assigner.EventTime && !s.Timed {
		return Built{}, fmt.Errorf("operator %q: an event-time window needs a stream with event time (WithTimestamps)", ctx.operator)
	}
	b, err := newKeyedBackend(ctx, s.KeyCodec)
	if err != nil {
		return Built{}, err
	}
	op, err := newWindowOp(ctx, s, b)
	if err != nil {
		b.Close()
		return Built{}, err
	}
	v, err := ctx.rt.Counters.Counter(ctx.operator, "late_records_dropped")
	if err != nil {
		b.Close()
		return Built{}, fmt.Errorf("operator %q: %w", ctx.operator, err)
	}
	op.late = &Counter{v: v}
	built := keyedBuilt(b)
	if op.sessions != nil {
		restore, restoreParts := built.Restore, built.RestoreParts
		built.Restore = func(data []byte) error {
			if err := restore(data); err != nil {
				return err
			}
			return op.listRestoredSessions(b)
		}
		built.RestoreParts = func(parts [][]byte) error {
			if err := restoreParts(parts); err != nil {
				return err
			}
			return op.listRestoredSessions(b)
		}
	}
	if s.Timed {
		out, err := combine[Timed[Out]](ctx, downstream)
		if err != nil {
			b.Close()
			return Built{}, err
		}
		batch := &batcher[Timed[Out]]{next: out}
		op.stamp = &stamper[Out]{next: batch}
		op.out, op.flush = op.stamp, batch.flush
		built.Input = wrapIn[Timed[T]](ctx, &timedWindowInput[K, T, ACC, V, Out]{op: op})
	} else {
		out, err := combine[Out](ctx, downstream)
		if err != nil {
			b.Close()
			return Built{}, err
		}
		batch := &batcher[Out]{next: out}
		op.out, op.flush = batch, batch.flush
		built.Input = wrapIn[T](ctx, &windowInput[K, T, ACC, V, Out]{op: op})
	}
	built.Open = func() error {
		defer b.SealDeclarations()
		return op.fn.Open(op.kc)
	}
	built.Close = func() error {
		if n := op.late.Value(); n > 0 {
			ctx.Logger().Info("window operator dropped late records", "late_records_dropped", n)
		}
		return errors.Join(op.fn.Close(), b.Close())
	}
	built.Watermark = func(ms int64) error {
		err := op.onWatermark(ms)
		op.flush()
		if err != nil {
			return err
		}
		return ctx.EmitWatermark(ms)
	}
	built.RestoreWatermark = func(floor int64) { op.watermark = max(op.watermark, floor) }
	if !s.Assigner.EventTime {
		built.NextDeadline = func() int64 {
			if next, ok := op.timers.Next(); ok {
				return next
			}
			return math.MaxInt64
		}
		built.OnProcessingTime = func(now int64) error {
			err := op.onProcessingTime(now)
			op.flush()
			return err
		}
	}
	return built, nil
}

type windowOp[K comparable, T, ACC, V, Out any] struct {
	spec  *WindowSpec[K, T, ACC, V, Out]
	kc    *keyedContext[K]
	wc    windowContext[K]
	acc   state.MapState[TimeWindow, ACC]   // incremental windows
	elems state.ListMapState[TimeWindow, T] // listing windows
	// sessions is, per key, its session windows and the state window each one's contents are under (session
	// assigners only): a session that grows keeps its contents where they are, and finding a key's sessions
	// is one read, not a scan of its contents (which on pebble passes every version a merge left behind).
	sessions state.ValueState[[]sessionWindow]
	timers   state.Timers // event or processing time, as the assigner
	fn       ProcessWindowFunction[K, V, Out]
	out      Collector[Out]
	stamp    *stamper[Out] // the timed output, nil untimed
	flush    func()
	// watermark is the operator's input watermark; late counts the records dropped as late (the metric
	// late_records_dropped).
	watermark int64
	late      *Counter
	// slice is the width of the slices the windows are made of (an incremental sliding window), 0 where
	// each window keeps its own accumulator (sliceWidth).
	slice   int64
	wins    []TimeWindow // scratch
	merging []TimeWindow // scratch
	vs      []V          // scratch: the one result of an incremental window
}

func newWindowOp[K comparable, T, ACC, V, Out any](ctx *Context, s *WindowSpec[K, T, ACC, V, Out], b state.KeyedBackend[K]) (*windowOp[K, T, ACC, V, Out], error) {
	op := &windowOp[K, T, ACC, V, Out]{spec: s, kc: &keyedContext[K]{Context: ctx, b: b, timed: s.Timed}, watermark: math.MinInt64,
		slice: s.sliceWidth()}
	op.wc = windowContext[K]{keyedContext: op.kc, cur: new(TimeWindow), watermark: &op.watermark}
	eb := state.Engine(b)
	wc, err := codec.Struct[TimeWindow]()
	if err != nil {
		return nil, err
	}
	if s.Inc != nil {
		if op.acc, err = state.NewMap[TimeWindow, ACC](eb, "\x00window/acc", wc, s.Inc.Codec); err != nil {
			return nil, fmt.Errorf("operator %q: %w", ctx.operator, err)
		}
	} else if op.elems, err = state.NewListMap[TimeWindow, T](eb, "\x00window/elems", wc, s.ElemCodec); err != nil {
		return nil, fmt.Errorf("operator %q: %w", ctx.operator, err)
	}
	if s.Assigner.Kind == Session {
		if op.sessions, err = state.NewValue[[]sessionWindow](eb, "\x00window/sessions", sessionsCodec{}); err != nil {
			return nil, fmt.Errorf("operator %q: %w", ctx.operator, err)
		}
	}
	name := "\x00timers/processing"
	if s.Assigner.EventTime {
		name = "\x00timers/event"
	}
	if op.timers, err = state.NewTimers[K](eb, name); err != nil {
		return nil, fmt.Errorf("operator %q: %w", ctx.operator, err)
	}
	if op.fn = s.NewProcess(); op.fn == nil {
		return nil, fmt.Errorf("operator %q: the window function factory returned nil", ctx.operator)
	}
	return op, nil
}

// cleanupTime is when a window's state goes: its end plus the allowed lateness in event time, its end in
// processing time.
func (o *windowOp[K, T, ACC, V, Out]) cleanupTime(w TimeWindow) int64 {
	if o.spec.Assigner.EventTime && o.spec.Lateness > 0 {
		return w.MaxTimestamp() + o.spec.Lateness
	}
	return w.MaxTimestamp()
}

// isLate says a window is past its cleanup time: records for it are late.
func (o *windowOp[K, T, ACC, V, Out]) isLate(w TimeWindow) bool {
	return o.spec.Assigner.EventTime && o.cleanupTime(w) <= o.watermark
}

// process adds record v at time ts to its windows; a record that belongs to no window that is not late is
// dropped and counted.
func (o *windowOp[K, T, ACC, V, Out]) process(v T, ts int64) {
	o.kc.b.SetCurrentKey(o.spec.Key(v))
	o.wins = o.spec.Assigner.assign(ts, o.wins[:0])
	if o.slice > 0 {
		o.processSliced(v, ts)
		return
	}
	taken := false
	for _, w := range o.wins {
		ns := w // where w's contents are
		if o.spec.Assigner.Kind == Session {
			w, ns = o.mergeSessions(w)
		}
		if o.isLate(w) {
			continue
		}
		taken = true
		created, err := o.add(ns, v)
		if err != nil {
			o.kc.fail(err)
		}
		// An incremental window's timers are registered with its accumulator (they are restored together);
		// a listing window's, and a session's (merging moves them), at every record (finding out whether a
		// list is new would cost a read).
		if !created && o.acc != nil && o.spec.Assigner.Kind != Session && !(o.spec.Assigner.EventTime && w.MaxTimestamp() <= o.watermark) {
			continue
		}
		o.registerCleanup(w)
		if o.spec.Assigner.EventTime && w.MaxTimestamp() <= o.watermark {
			// Within the allowed lateness of a window that fired: it fires again with the late record, now
			// (its end has passed, so a timer there would fire it once more at the next watermark).
			if err := o.fire(w); err != nil {
				o.kc.fail(err)
			}
			continue
		}
		o.timers.Register(w.MaxTimestamp(), state.Namespace{A: w.Start, B: w.End})
	}
	if !taken {
		o.dropLate(v)
	}
}

// dropLate sends a record that no window takes to the late side output, or counts it as dropped.
func (o *windowOp[K, T, ACC, V, Out]) dropLate(v T) {
	if o.spec.LateTag != "" {
		EmitSide(o.kc, o.spec.LateTag, v)
	} else {
		o.late.Inc()
	}
}

// processSliced adds record v at time ts (its windows in o.wins, newest first) to its slice. A window is
// made of slices and fires from them; timers go as a chain, one window at a time: the slice's first window
// that has not fired gets a timer when the slice is new, and a window that fires gives the next window its
// timer if that window holds any of its slices (a slice beyond it started a chain of its own). So a key
// holds a timer per chain, not one per window, and a record writes one accumulator, not size/slide.
func (o *windowOp[K, T, ACC, V, Out]) processSliced(v T, ts int64) {
	// The windows that are not late are the newest ones: a prefix of o.wins.
	n := len(o.wins)
	for n > 0 && o.isLate(o.wins[n-1]) {
		n--
	}
	if n == 0 {
		o.dropLate(v)
		return
	}
	p := ts - floorMod(ts-o.spec.Assigner.Offset, o.slice)
	created, err := o.add(TimeWindow{Start: p, End: p + o.slice}, v)
	if err != nil {
		o.kc.fail(err)
	}
	for i := n - 1; i >= 0; i-- { // oldest first
		w := o.wins[i]
		if o.spec.Assigner.EventTime && w.MaxTimestamp() <= o.watermark {
			// Within the allowed lateness of a window that fired: it fires again with the record, now.
			o.registerCleanup(w)
			if err := o.fire(w); err != nil {
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

// registerWindow registers the timers of window w: at its end, and at its cleanup time if that is later.
func (o *windowOp[K, T, ACC, V, Out]) registerWindow(w TimeWindow) {
	o.timers.Register(w.MaxTimestamp(), state.Namespace{A: w.Start, B: w.End})
	o.registerCleanup(w)
}

// registerCleanup registers the cleanup timer of window w where it is not its end's.
func (o *windowOp[K, T, ACC, V, Out]) registerCleanup(w TimeWindow) {
	if c := o.cleanupTime(w); c != w.MaxTimestamp() {
		o.timers.Register(c, state.Namespace{A: w.Start, B: w.End})
	}
}

// add adds v to window w and says whether w's accumulator was new (always false for a listing window).
func (o *windowOp[K, T, ACC, V, Out]) add(w TimeWindow, v T) (bool, error) {
	if o.acc == nil {
		o.elems.Append(w, v)
		return false, nil
	}
	a, ok := o.acc.Get(w)
	if !ok {
		a = o.spec.Inc.Create()
	}
	a, err := o.spec.Inc.Add(v, a)
	if err != nil {
		return false, err
	}
	o.acc.Put(w, a)
	return !ok, nil
}

// sessionWindow is a session window of a key and the window its contents are stored under: the window
// it began as, or the state window of a session it merged into.
type sessionWindow struct {
	W, State TimeWindow
}

// mergeSessions merges the current key's session windows that overlap or touch w into one and returns it with the
// state window its contents are under (w and w when nothing overlaps: a new session). A merged window that
// would be late is returned without a change: the record is then dropped, and the windows stay as they
// were. Extending one session moves nothing: its contents stay under its state window, and only the
// key's list of sessions is written; when sessions merge, the others' contents join the first one's.
func (o *windowOp[K, T, ACC, V, Out]) mergeSessions(w TimeWindow) (TimeWindow, TimeWindow) {
	set, _ := o.sessions.Value()
	o.merging = o.merging[:0]
	union := w
	first := -1
	for i, s := range set {
		if s.W.intersects(w) {
			o.merging = append(o.merging, s.State)
			union = union.cover(s.W)
			if first < 0 {
				first = i
			}
		}
	}
	if o.isLate(union) {
		return union, union
	}
	if first >= 0 && len(o.merging) == 1 && set[first].W == union {
		return union, set[first].State // within a session: nothing changes
	}
	// A new list, never the one read: the heap backend's snapshot may still hold that one.
	next := make([]sessionWindow, 0, len(set)+1)
	target := w
	if first >= 0 {
		target = set[first].State
	}
	for _, s := range set {
		if !s.W.intersects(w) {
			next = append(next, s)
			continue
		}
		o.timers.Delete(s.W.MaxTimestamp(), state.Namespace{A: s.W.Start, B: s.W.End})
		o.timers.Delete(o.cleanupTime(s.W), state.Namespace{A: s.W.Start, B: s.W.End})
		if s.State != target {
			o.mergeContents(target, s.State)
		}
	}
	o.sessions.Update(append(next, sessionWindow{W: union, State: target}))
	return union, target
}

// mergeContents moves the contents of state window from into state window to.
func (o *windowOp[K, T, ACC, V, Out]) mergeContents(to, from TimeWindow) {
	if o.acc != nil {
		b, okB := o.acc.Get(from)
		if !okB {
			return
		}
		if a, okA := o.acc.Get(to); okA {
			var err error
			if b, err = o.spec.Inc.Merge(a, b); err != nil {
				o.kc.fail(err)
			}
		}
		o.acc.Put(to, b)
		o.acc.Remove(from)
		return
	}
	for _, e := range slices.Clone(o.elems.Get(from)) {
		o.elems.Append(to, e)
	}
	o.elems.Remove(from)
}

// listRestoredSessions gives every key with session windows but no list of them (a checkpoint from before
// the lists, where each window was its own state window) its list, and merges the sessions of a key that
// touch (a checkpoint of a build that merged only overlapping sessions), once after a restore.
func (o *windowOp[K, T, ACC, V, Out]) listRestoredSessions(b state.KeyedBackend[K]) error {
	return b.ForEachKey(func(K) error {
		set, listed := o.sessions.Value()
		if !listed {
			if o.acc != nil {
				o.acc.Range(func(x TimeWindow, _ ACC) bool { set = append(set, sessionWindow{W: x, State: x}); return true })
			} else {
				o.elems.Range(func(x TimeWindow, _ []T) bool { set = append(set, sessionWindow{W: x, State: x}); return true })
			}
		}
		merged, changed := o.mergeRestoredSessions(set)
		if len(merged) > 0 && (changed || !listed) {
			o.sessions.Update(merged)
		}
		return nil
	})
}

// mergeRestoredSessions merges the sessions of the current key that overlap or touch one another, as
// mergeSessions would have: the contents of each group join its earliest session's state window, the
// members' timers go and the union's are registered (overdue ones fire at the next watermark). It returns
// the key's sessions, and whether any merged (set itself is never changed: a snapshot may hold it).
func (o *windowOp[K, T, ACC, V, Out]) mergeRestoredSessions(set []sessionWindow) ([]sessionWindow, bool) {
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
		for _, s := range sorted[i:j] {
			o.timers.Delete(s.W.MaxTimestamp(), state.Namespace{A: s.W.Start, B: s.W.End})
			o.timers.Delete(o.cleanupTime(s.W), state.Namespace{A: s.W.Start, B: s.W.End})
			if s.State != target {
				o.mergeContents(target, s.State)
			}
		}
		o.registerWindow(union)
		out = append(out, sessionWindow{W: union, State: target})
		i = j
	}
	if !changed {
		return set, false
	}
	return out, true
}

// stateWindow is where window w's contents are: w itself unless w is a session that merged into another's.
func (o *windowOp[K, T, ACC, V, Out]) stateWindow(w TimeWindow) TimeWindow {
	if o.sessions == nil {
		return w
	}
	set, _ := o.sessions.Value()
	for _, s := range set {
		if s.W == w {
			return s.State
		}
	}
	return w
}

// dropSession removes session w from the current key's list once its state is gone.
func (o *windowOp[K, T, ACC, V, Out]) dropSession(w TimeWindow) {
	set, _ := o.sessions.Value()
	i := slices.IndexFunc(set, func(s sessionWindow) bool { return s.W == w })
	switch {
	case i < 0:
	case len(set) == 1:
		o.sessions.Clear()
	default:
		o.sessions.Update(slices.Delete(slices.Clone(set), i, i+1))
	}
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

// fire hands window w's contents to the process function.
func (o *windowOp[K, T, ACC, V, Out]) fire(w TimeWindow) error {
	if o.slice > 0 {
		_, err := o.fireSliced(w)
		return err
	}
	var vs []V
	sw := o.stateWindow(w)
	if o.acc != nil {
		a, ok := o.acc.Get(sw)
		if !ok {
			return nil
		}
		o.vs = append(o.vs[:0], o.spec.Inc.Result(a))
		vs = o.vs
	} else {
		es := o.elems.Get(sw)
		if len(es) == 0 {
			return nil
		}
		// A listing window's V is T (the API makes it so).
		vs = any(es).([]V)
	}
	return o.emit(w, vs)
}

// fireSliced fires window w from its slices, oldest first, merged into a new accumulator (Merge may
// reuse its first argument, never one in state). A checkpoint taken before windows were sliced holds
// the window's own accumulator under w itself (an extent of Size, where slices have a smaller one): it
// comes first. It says whether the next window, w+Slide, holds any of w's slices.
func (o *windowOp[K, T, ACC, V, Out]) fireSliced(w TimeWindow) (bool, error) {
	inc := o.spec.Inc
	acc, have := o.acc.Get(w)
	if have {
		var err error
		if acc, err = inc.Merge(inc.Create(), acc); err != nil {
			return false, err
		}
	} else {
		acc = inc.Create()
	}
	more := false
	next := w.Start + o.spec.Assigner.Slide
	for p := w.Start; p < w.End; p += o.slice {
		a, ok := o.acc.Get(TimeWindow{Start: p, End: p + o.slice})
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
	o.vs = append(o.vs[:0], inc.Result(acc))
	return more, o.emit(w, o.vs)
}

// emit hands vs, the contents of window w, to the process function.
func (o *windowOp[K, T, ACC, V, Out]) emit(w TimeWindow, vs []V) error {
	*o.wc.cur = w
	if o.stamp != nil {
		o.stamp.ts = w.MaxTimestamp()
		o.kc.ts = w.MaxTimestamp()
	}
	if err := o.fn.Process(o.wc, vs, o.out); err != nil {
		return fmt.Errorf("window [%d, %d): %w", w.Start, w.End, err)
	}
	return nil
}

// onTimer handles a window's timer: at its end it fires, at its cleanup time its state goes.
func (o *windowOp[K, T, ACC, V, Out]) onTimer(ts int64, ns state.Namespace) error {
	w := TimeWindow{Start: ns.A, End: ns.B}
	if o.slice > 0 {
		return o.onSlicedTimer(ts, w)
	}
	if ts == w.MaxTimestamp() {
		if err := o.fire(w); err != nil {
			return err
		}
	}
	if ts == o.cleanupTime(w) {
		sw := o.stateWindow(w)
		if o.acc != nil {
			o.acc.Remove(sw)
		} else {
			o.elems.Remove(sw)
		}
		if o.sessions != nil {
			o.dropSession(w)
		}
	}
	return nil
}

// onSlicedTimer handles a sliced window's timer: at its end it fires and passes the chain on to the next
// window; at its cleanup time the slices that no later window holds go (earlier windows' went before).
func (o *windowOp[K, T, ACC, V, Out]) onSlicedTimer(ts int64, w TimeWindow) error {
	slide := o.spec.Assigner.Slide
	if ts == w.MaxTimestamp() {
		more, err := o.fireSliced(w)
		if err != nil {
			return err
		}
		if more {
			o.registerWindow(TimeWindow{Start: w.Start + slide, End: w.End + slide})
		}
	}
	if ts == o.cleanupTime(w) {
		o.acc.Remove(w)
		for p := w.Start; p < w.Start+slide; p += o.slice {
			o.acc.Remove(TimeWindow{Start: p, End: p + o.slice})
		}
	}
	return nil
}

func (o *windowOp[K, T, ACC, V, Out]) onWatermark(ms int64) error {
	if ms <= o.watermark {
		return nil
	}
	o.watermark = ms
	if !o.spec.Assigner.EventTime {
		return nil
	}
	if next, ok := o.timers.Next(); !ok || next > ms {
		return nil
	}
	return o.timers.FireUpTo(ms, o.onTimer)
}

func (o *windowOp[K, T, ACC, V, Out]) onProcessingTime(now int64) error {
	fired := 0
	for fired < maxTimersPerStep {
		next, ok := o.timers.Next()
		if !ok || next > now {
			return nil
		}
		err := o.timers.FireUpTo(next, func(ts int64, ns state.Namespace) error {
			fired++
			return o.onTimer(ts, ns)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// windowContext is the WindowContext handed to process-window functions.
type windowContext[K comparable] struct {
	*keyedContext[K]
	cur       *TimeWindow
	watermark *int64
}

func (c windowContext[K]) Window() TimeWindow      { return *c.cur }
func (c windowContext[K]) CurrentWatermark() int64 { return *c.watermark }

// windowInput takes the records of a stream without event time (processing-time windows).
type windowInput[K comparable, T, ACC, V, Out any] struct{ op *windowOp[K, T, ACC, V, Out] }

func (in *windowInput[K, T, ACC, V, Out]) Collect(v T) {
	o := in.op
	prev := o.kc.enter()
	o.process(v, o.kc.CurrentProcessingTime())
	o.flush()
	o.kc.leave(prev)
}

func (in *windowInput[K, T, ACC, V, Out]) CollectBatch(vs []T) {
	o := in.op
	prev := o.kc.enter()
	now := o.kc.CurrentProcessingTime()
	for _, v := range vs {
		o.process(v, now)
	}
	o.flush()
	o.kc.leave(prev)
}

// timedWindowInput takes the records of a stream with event time.
type timedWindowInput[K comparable, T, ACC, V, Out any] struct{ op *windowOp[K, T, ACC, V, Out] }

func (in *timedWindowInput[K, T, ACC, V, Out]) Collect(v Timed[T]) {
	o := in.op
	prev := o.kc.enter()
	in.one(v)
	o.flush()
	o.kc.leave(prev)
}

func (in *timedWindowInput[K, T, ACC, V, Out]) CollectBatch(vs []Timed[T]) {
	o := in.op
	prev := o.kc.enter()
	for _, v := range vs {
		in.one(v)
	}
	o.flush()
	o.kc.leave(prev)
}

func (in *timedWindowInput[K, T, ACC, V, Out]) one(v Timed[T]) {
	o := in.op
	ts := v.Ts
	if !o.spec.Assigner.EventTime {
		ts = o.kc.CurrentProcessingTime()
	}
	o.kc.ts = v.Ts
	o.process(v.V, ts)
}

// PassWindow is the process-window function of a window without one: it emits what the window holds (the
// incremental result).
type PassWindow[K comparable, V any] struct{}

func (PassWindow[K, V]) Open(KeyedContext[K]) error { return nil }
func (PassWindow[K, V]) Close() error               { return nil }
func (PassWindow[K, V]) Process(_ WindowContext[K], vs []V, out Collector[V]) error {
	for _, v := range vs {
		out.Collect(v)
	}
	return nil
}

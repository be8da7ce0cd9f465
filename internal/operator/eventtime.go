package operator

import (
	"fmt"
	"math"
	"time"

	"github.com/runnel-dev/runnel/internal/task"
	"github.com/runnel-dev/runnel/internal/watermark"
)

// WatermarkGenerator makes watermarks from a stream's records; it is called on the task goroutine:
// OnEvent with every record and its timestamp (a punctuated generator emits here), OnPeriodicEmit every
// watermark interval (a periodic one emits here).
type WatermarkGenerator[T any] interface {
	OnEvent(v T, ts int64, out WatermarkOutput)
	OnPeriodicEmit(out WatermarkOutput)
}

// WatermarkOutput takes what a WatermarkGenerator emits.
type WatermarkOutput interface {
	// EmitWatermark promises that no record at or below ts follows; a value at or below one emitted before
	// is ignored, so the output is monotone. A watermark emitted from OnEvent goes out after the records of
	// the poll (or batch) that contains the record: a watermark may be late, never early.
	EmitWatermark(ts int64)
	// MarkIdle says the stream has no records for now: consumers do not wait for its watermark.
	MarkIdle()
	// MarkActive says records come again (any record does so too).
	MarkActive()
}

// WatermarkSpec is a WatermarkStrategy as the runtime takes it (docs/eventtime.md §1.3, §2.2).
type WatermarkSpec[T any] struct {
	// Assign returns the timestamp of v; recordTs is the timestamp it carried (math.MinInt64: none). nil
	// keeps the record's timestamp.
	Assign func(v T, recordTs int64) int64
	// Bound is the out-of-orderness of the built-in generator, used when NewGenerator is nil.
	Bound time.Duration
	// NewGenerator makes a custom generator per subtask; nil for the built-in one.
	NewGenerator func() WatermarkGenerator[T]
	// Idleness, when above zero, marks the stream idle after that long without records.
	Idleness time.Duration
	// Interval is the periodic emission interval; 0 turns periodic emission off (punctuated generators and
	// the end of input still emit).
	Interval time.Duration
}

// MaxSplits bounds the splits one source subtask tracks watermarks for (SplitOutput.ForSplit): past it
// the source fails, naming itself, rather than grow a table per split without end.
const MaxSplits = 4096

// SplitOutput is implemented by the Collector a source reader gets when its stream has event time. A
// reader that reads several splits (the partitions of a Kafka topic) emits each split's records through
// ForSplit(id): each split then has its own watermark generator and idleness detector, and the source's
// watermark is the lowest of its active splits', so a fast split does not make a slow one's records late
// and an idle one does not hold the others back. ReleaseSplit says a split has ended (it stops counting).
type SplitOutput[T any] interface {
	ForSplit(id int) Collector[T]
	ReleaseSplit(id int)
}

// TimestampedCollector is implemented by the Collectors of a timed source: CollectWithTimestamp hands over
// a record with the timestamp it carries (a Kafka record's), which the strategy's assigner gets as recordTs
// (or which is kept without one).
type TimestampedCollector[T any] interface {
	CollectWithTimestamp(v T, ts int64)
}

// splitWM is the watermark generation of one split: its generator, its idleness, its watermark.
type splitWM[T any] struct {
	g        *tsGen[T]
	id       int
	builtin  *watermark.Generator
	custom   WatermarkGenerator[T]
	idle     *watermark.IdleDetector
	wm       int64 // the split's watermark (monotone)
	pending  int64 // what a custom generator emitted since the last flush
	marked   bool  // a custom generator marked the split idle
	isIdle   bool  // the idleness detector said idle
	released bool
}

// EmitWatermark implements WatermarkOutput for a custom generator.
func (s *splitWM[T]) EmitWatermark(ts int64) { s.pending = max(s.pending, ts) }

// MarkIdle implements WatermarkOutput.
func (s *splitWM[T]) MarkIdle() { s.marked = true }

// MarkActive implements WatermarkOutput.
func (s *splitWM[T]) MarkActive() { s.marked = false }

func (s *splitWM[T]) active() bool { return !s.released && !s.isIdle && !s.marked }

// tsGen is one subtask's watermark generation for a source or a timestamps operator: it stamps records,
// feeds the generators and idleness detectors of its splits (one, unless a reader uses SplitOutput), and
// sends the lowest active split's watermark and the subtask's status on through ctx, only ever upwards.
type tsGen[T any] struct {
	spec   *WatermarkSpec[T]
	ctx    *Context
	main   *splitWM[T] // the split of records collected without ForSplit
	splits []*splitWM[T]
	byID   map[int]*splitWM[T]
	period int64 // ms between periodic calls; 0: none
	next   int64 // the processing time of the next periodic call; math.MaxInt64: none
	// emitted is the last watermark sent; idleOut says the last status sent was idle.
	emitted int64
	idleOut bool
	ended   bool
}

func newTSGen[T any](ctx *Context, spec *WatermarkSpec[T]) (*tsGen[T], error) {
	g := &tsGen[T]{spec: spec, ctx: ctx, emitted: math.MinInt64, next: math.MaxInt64, byID: map[int]*splitWM[T]{}}
	if spec.NewGenerator == nil && spec.Bound < 0 {
		return nil, fmt.Errorf("operator %q: out-of-orderness bound %s is negative", ctx.operator, spec.Bound)
	}
	main, err := g.newSplit(-1)
	if err != nil {
		return nil, err
	}
	g.main = main
	switch {
	case spec.Interval > 0:
		g.period = max(spec.Interval.Milliseconds(), 1)
	case spec.Idleness > 0:
		g.period = max(spec.Idleness.Milliseconds(), 1)
	}
	return g, nil
}

func (g *tsGen[T]) newSplit(id int) (*splitWM[T], error) {
	s := &splitWM[T]{g: g, id: id, wm: math.MinInt64, pending: math.MinInt64}
	if g.spec.NewGenerator != nil {
		if s.custom = g.spec.NewGenerator(); s.custom == nil {
			return nil, fmt.Errorf("operator %q: the watermark generator factory returned nil", g.ctx.operator)
		}
	} else {
		s.builtin = watermark.BoundedOutOfOrderness(g.spec.Bound)
	}
	if g.spec.Idleness > 0 {
		s.idle = watermark.IdleAfter(g.spec.Idleness)
	}
	return s, nil
}

// split returns split id, made at its first use. The main split (-1) counts once it had a record, or,
// with idleness, once it went idle without one (periodic).
func (g *tsGen[T]) split(id int) *splitWM[T] {
	if s, ok := g.byID[id]; ok {
		return s
	}
	if len(g.byID) == MaxSplits {
		g.ctx.failf("source reads more than %d splits (SplitOutput.ForSplit), the most one subtask tracks watermarks for", MaxSplits)
	}
	s, err := g.newSplit(id)
	if err != nil {
		g.ctx.fail(err)
	}
	g.byID[id] = s
	g.splits = append(g.splits, s)
	return s
}

// start arms the periodic calls.
func (g *tsGen[T]) start() {
	if g.period > 0 {
		g.next = g.ctx.CurrentProcessingTime() + g.period
	}
}

// stamp returns the timestamp of record v of split s and tells the split's generator and idleness
// detector of it.
func (g *tsGen[T]) stamp(s *splitWM[T], v *T, recordTs int64) int64 {
	if s == g.main && len(g.splits) == 0 {
		g.splits = append(g.splits, s)
	}
	ts := recordTs
	if g.spec.Assign != nil {
		ts = g.spec.Assign(*v, recordTs)
	}
	if s.idle != nil {
		s.idle.OnEvent()
	}
	s.isIdle, s.marked = false, false
	if g.idleOut {
		// A record makes the stream active again. Idleness went out at a tick or after a poll or batch, so
		// no record precedes this one since: the status goes out before it, as it must.
		g.status(false)
	}
	if s.builtin != nil {
		s.builtin.OnEvent(ts)
	} else {
		s.custom.OnEvent(*v, ts, s)
	}
	return ts
}

// flush sends what custom generators emitted during the poll or batch that just ended.
func (g *tsGen[T]) flush() {
	if g.spec.NewGenerator == nil {
		return
	}
	for _, s := range g.splits {
		s.wm = max(s.wm, s.pending)
	}
	g.combine()
}

// periodic is the generators' periodic call at processing time now.
func (g *tsGen[T]) periodic(now int64) {
	g.next = now + g.period
	if g.ended {
		return
	}
	if len(g.splits) == 0 {
		// Nothing was read yet. With idleness the subtask goes idle all the same once the timeout passes
		// from this first check, as Flink's idleness timer does: a subtask with no split or partition to
		// read must not hold back the watermark of every task downstream.
		if s := g.main; s.idle != nil && s.idle.Tick(now) {
			s.isIdle = true
			g.splits = append(g.splits, s)
			g.combine()
		}
		return
	}
	for _, s := range g.splits {
		switch {
		case s.builtin != nil && g.spec.Interval > 0:
			s.wm = max(s.wm, int64(s.builtin.Current()))
		case s.custom != nil && g.spec.Interval > 0:
			s.custom.OnPeriodicEmit(s)
			s.wm = max(s.wm, s.pending)
		}
		if s.idle != nil && s.idle.Tick(now) {
			s.isIdle = true
		}
	}
	g.combine()
}

// combine sends the lowest watermark of the active splits if it advanced, and the subtask's status: idle
// once no split is active (and some are idle), active again when one is.
func (g *tsGen[T]) combine() {
	if g.ended || len(g.splits) == 0 {
		return
	}
	lo, active, idle := int64(math.MaxInt64), 0, 0
	for _, s := range g.splits {
		switch {
		case s.active():
			lo = min(lo, s.wm)
			active++
		case !s.released:
			idle++
		}
	}
	if active == 0 {
		if idle > 0 {
			g.status(true)
		}
		return
	}
	if g.idleOut {
		g.status(false)
	}
	if lo != math.MinInt64 {
		g.emit(lo)
	}
}

// release marks split id ended: it stops counting.
func (g *tsGen[T]) release(id int) {
	if s, ok := g.byID[id]; ok && !s.released {
		s.released = true
		g.combine()
	}
}

// end sends MaxWatermark: the input ended, so every window fires and every event timer runs.
func (g *tsGen[T]) end() {
	if g.ended {
		return
	}
	g.flush()
	g.ended = true
	if g.idleOut {
		g.status(false)
	}
	g.emit(math.MaxInt64)
}

func (g *tsGen[T]) emit(w int64) {
	if w <= g.emitted || g.ended && w != math.MaxInt64 {
		return
	}
	g.emitted = w
	g.ctx.counters().Watermark = w
	if err := g.ctx.EmitWatermark(w); err != nil {
		g.ctx.fail(err)
	}
}

func (g *tsGen[T]) status(idle bool) {
	if idle == g.idleOut {
		return
	}
	g.idleOut = idle
	if err := g.ctx.EmitWatermarkStatus(idle); err != nil {
		g.ctx.fail(err)
	}
}

// hooks sets the processing-time and restore hooks of the operator that owns g.
func (g *tsGen[T]) hooks(b *Built) {
	// Restored: never emit below what was emitted before the snapshot. The generators start afresh and
	// rebuild their maxima from the replayed records.
	b.RestoreWatermark = func(floor int64) { g.emitted = max(g.emitted, floor) }
	if g.period == 0 {
		return
	}
	b.NextDeadline = func() int64 { return g.next }
	b.OnProcessingTime = func(now int64) error { g.periodic(now); return nil }
}

// stampingCollector is the Collector[T] a timed source's reader emits to (one per split): it stamps each
// record and hands it on as Timed[T]. The main one is also the reader's SplitOutput.
type stampingCollector[T any] struct {
	g    *tsGen[T]
	s    *splitWM[T]
	next *batcher[Timed[T]]
	cols *columnsOut[T]                // nil unless the chained operator takes batches as columns
	byID map[int]*stampingCollector[T] // the split collectors made by ForSplit (the main one's only)
}

// columnsOut is where a timed source's batches go when the operator chained to it takes them as columns
// (timedColumns): the source's own slice of values beside a column of their timestamps, so that no record
// is copied into a batch of Timed[T] on its way.
type columnsOut[T any] struct {
	next timedColumns[T]
	ts   []int64 // the timestamps of the batch in hand (capacity maxBatch)
	c    *task.Counters
}

func (c *stampingCollector[T]) Collect(v T) {
	addTimed(c.next, c.g.stamp(c.s, &v, math.MinInt64), &v)
}

func (c *stampingCollector[T]) CollectWithTimestamp(v T, ts int64) {
	addTimed(c.next, c.g.stamp(c.s, &v, ts), &v)
}

// CollectBatch stamps each record in place. To operators that take columns it hands vs itself, in runs
// of at most maxBatch, beside the run's timestamps; otherwise it copies each record once, into the batch:
// a record of a source with strings is large, and every copy of it into the heap costs write barriers
// while the collector marks.
func (c *stampingCollector[T]) CollectBatch(vs []T) {
	if o := c.cols; o != nil {
		// What was collected one by one before this batch goes first.
		c.next.flush()
		for len(vs) > 0 {
			n := min(len(vs), maxBatch)
			ts := o.ts[:n]
			for i := range ts {
				ts[i] = c.g.stamp(c.s, &vs[i], math.MinInt64)
			}
			o.c.In += uint64(n)
			o.next.CollectColumns(ts, vs[:n])
			vs = vs[n:]
		}
		return
	}
	for i := range vs {
		addTimed(c.next, c.g.stamp(c.s, &vs[i], math.MinInt64), &vs[i])
	}
}

// ForSplit implements SplitOutput.
func (c *stampingCollector[T]) ForSplit(id int) Collector[T] {
	if sc, ok := c.byID[id]; ok {
		return sc
	}
	sc := &stampingCollector[T]{g: c.g, s: c.g.split(id), next: c.next, cols: c.cols}
	c.byID[id] = sc
	return sc
}

// ReleaseSplit implements SplitOutput.
func (c *stampingCollector[T]) ReleaseSplit(id int) {
	c.g.release(id)
	delete(c.byID, id)
}

// TimedSourceSpec runs a Source whose stream has event time: the source assigns timestamps and makes
// watermarks itself, with no extra operator (WithTimestamps straight on FromSource).
type TimedSourceSpec[T any] struct {
	Source     Source[T]
	Watermarks *WatermarkSpec[T]
}

func (s *TimedSourceSpec[T]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Timed[T]](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	g, err := newTSGen(ctx, s.Watermarks)
	if err != nil {
		return Built{}, err
	}
	in := wrapIn[Timed[T]](ctx, out)
	b := &batcher[Timed[T]]{next: &countingCollector[Timed[T]]{next: asBatch(in), c: ctx.counters()}}
	sc := &stampingCollector[T]{g: g, s: g.main, next: b, byID: map[int]*stampingCollector[T]{}}
	if tc := columnsOf[T](in); tc != nil {
		sc.cols = &columnsOut[T]{next: tc, ts: make([]int64, maxBatch), c: ctx.counters()}
	}
	d := &sourceDriver[T]{ctx: ctx, out: sc,
		after: func(st InputStatus) {
			b.flush()
			g.flush()
			if st == EndOfInput {
				g.end()
			}
		}}
	built := sourceBuilt(ctx, s.Source, d)
	open := built.Open
	built.Open = func() error {
		g.start()
		return open()
	}
	g.hooks(&built)
	return built, nil
}

// TimestampsSpec assigns timestamps and makes watermarks on a stream that does not come straight from a
// source (Flink's assignTimestampsAndWatermarks): In is T, or Timed[T] on a stream that had event time
// already. It ignores the watermarks from upstream except MaxWatermark, the end of input, as Flink does.
type TimestampsSpec[In, T any] struct {
	// Unwrap returns the value and the timestamp it carries (math.MinInt64: none).
	Unwrap     func(In) (T, int64)
	Watermarks *WatermarkSpec[T]
}

func (s *TimestampsSpec[In, T]) Build(ctx *Context, downstream []any) (Built, error) {
	out, err := combine[Timed[T]](ctx, downstream)
	if err != nil {
		return Built{}, err
	}
	g, err := newTSGen(ctx, s.Watermarks)
	if err != nil {
		return Built{}, err
	}
	op := &timestampsOp[In, T]{unwrap: s.Unwrap, g: g, out: out, ctx: ctx}
	built := Built{
		Input: wrapIn[In](ctx, op),
		Open:  func() error { g.start(); return nil },
		// An input without event time ends without MaxWatermark: the end of input sends it.
		EndInput: func() error { g.end(); return nil },
		Watermark: func(ms int64) error {
			if ms == math.MaxInt64 {
				g.end()
			}
			return nil
		},
		// Statuses of upstream say nothing about the watermarks made here.
		WatermarkStatus: func(bool) error { return nil },
	}
	g.hooks(&built)
	return built, nil
}

type timestampsOp[In, T any] struct {
	unwrap func(In) (T, int64)
	g      *tsGen[T]
	out    BatchCollector[Timed[T]]
	ctx    *Context
	buf    []Timed[T]
}

func (o *timestampsOp[In, T]) Collect(v In) {
	prev := o.ctx.enter()
	x, ts := o.unwrap(v)
	o.out.Collect(Timed[T]{Ts: o.g.stamp(o.g.main, &x, ts), V: x})
	o.g.flush()
	o.ctx.leave(prev)
}

func (o *timestampsOp[In, T]) CollectBatch(vs []In) {
	prev := o.ctx.enter()
	buf := o.buf[:0]
	for _, v := range vs {
		x, ts := o.unwrap(v)
		buf = append(buf, Timed[T]{Ts: o.g.stamp(o.g.main, &x, ts), V: x})
	}
	o.buf = buf
	o.out.CollectBatch(buf)
	o.g.flush()
	o.ctx.leave(prev)
}

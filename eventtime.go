package runnel

import (
	"fmt"
	"math"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/operator"
)

// Event time (docs/eventtime.md): a stream gets timestamps and watermarks from a WatermarkStrategy given to
// WithTimestamps; every stream derived from it has event time too. Timestamps and watermarks are int64
// milliseconds since the Unix epoch (TimeOf and Millis convert); durations are time.Duration, in whole
// milliseconds.

// DefaultWatermarkInterval is how often sources and timestamp assigners emit periodic watermarks unless
// WithWatermarkInterval says otherwise (Flink's default).
const DefaultWatermarkInterval = 200 * time.Millisecond

// WithWatermarkInterval sets how often periodic watermarks are emitted; 0 turns periodic emission off
// (punctuated generators and the end of input still emit).
func WithWatermarkInterval(d time.Duration) Option {
	return func(c *Config) { c.WatermarkInterval, c.watermarkIntervalSet = d, true }
}

// Clock is a source of processing time: the wall clock (clockwork.NewRealClock) or, in tests, a manual one
// (clockwork.NewFakeClock) that moves only when told to.
type Clock = clockwork.Clock

// WithClock runs the job's processing time on c: processing-time timers, periodic watermarks, idleness
// and the other deadlines of the tasks follow it. For tests of time-dependent jobs (a manual clock fires
// a one-minute timer at once); only jobs that run in this process (Execute) take it.
func WithClock(c Clock) Option { return func(cfg *Config) { cfg.Clock = c } }

// MetricGroup registers an operator's metrics (RuntimeContext.Metrics): counters and gauges, per subtask
// in the JobResult and in /metrics as runnel_operator_metric.
type MetricGroup = operator.MetricGroup

// Counter is an operator metric that counts up, added to on the task goroutine.
type Counter = operator.Counter

// TimerService gives a keyed function the clocks and timers for the current key; times are epoch ms.
type TimerService = operator.TimerService

// TimeDomain says which clock fired a timer: EventTime or ProcessingTime.
type TimeDomain = operator.TimeDomain

// The time domains of timers.
const (
	EventTime      = operator.EventTime
	ProcessingTime = operator.ProcessingTime
)

// TimerContext is the context of OnTimer: the timer's key is current.
type TimerContext[K comparable] = operator.TimerContext[K]

// TimerHandler is the optional half of a KeyedProcessFunction that gets the timers it registered:
// OnTimer(ctx, ts, out). What it emits on a stream with event time takes the timer's time.
type TimerHandler[K comparable, Out any] = operator.TimerHandler[K, Out]

// WatermarkGenerator makes watermarks from a stream's records, on the task goroutine: OnEvent with every
// record and its timestamp (emit there: punctuated), OnPeriodicEmit every watermark interval (emit there:
// periodic).
type WatermarkGenerator[T any] = operator.WatermarkGenerator[T]

// WatermarkOutput takes what a WatermarkGenerator emits; watermarks at or below one emitted before are
// ignored.
type WatermarkOutput = operator.WatermarkOutput

// TimestampedWriter is a SinkWriter that wants the timestamps of a stream with event time: WriteTimed is
// called instead of Write.
type TimestampedWriter[T any] = operator.TimestampedWriter[T]

// SplitOutput is implemented by the Collector a source reader gets when its stream has event time: a
// reader of several splits (partitions) emits each one's records through ForSplit(id), so that each split
// has its own watermark and idleness, and the source's watermark is the lowest of its active splits';
// ReleaseSplit says a split has ended. At most MaxSplits splits per subtask.
type SplitOutput[T any] = operator.SplitOutput[T]

// TimestampedCollector is implemented by the Collectors of a source with event time: CollectWithTimestamp
// hands over a record with a timestamp of its own (a Kafka record's), which the assigner gets as recordTs.
type TimestampedCollector[T any] = operator.TimestampedCollector[T]

// MaxSplits bounds the splits one source subtask tracks watermarks for.
const MaxSplits = operator.MaxSplits

// WatermarkStrategy says how a stream gets its timestamps and watermarks. Make one with
// BoundedOutOfOrderness, MonotonousTimestamps or CustomWatermarks, and refine it with
// WithTimestampAssigner and WithIdleness.
type WatermarkStrategy[T any] struct {
	bound    time.Duration
	newGen   func() WatermarkGenerator[T]
	assign   func(v T, recordTs int64) int64
	idleness time.Duration
	err      error
}

// BoundedOutOfOrderness is the strategy for records that arrive at most bound out of order: the watermark
// is the highest timestamp seen minus bound minus 1 ms (Flink's rule).
func BoundedOutOfOrderness[T any](bound time.Duration) WatermarkStrategy[T] {
	w := WatermarkStrategy[T]{bound: bound}
	if bound < 0 || bound%time.Millisecond != 0 {
		w.err = fmt.Errorf("BoundedOutOfOrderness: the bound must be whole milliseconds, at least 0, got %s", bound)
	}
	return w
}

// MonotonousTimestamps is the strategy for records whose timestamps never decrease: the watermark is the
// highest timestamp seen minus 1 ms.
func MonotonousTimestamps[T any]() WatermarkStrategy[T] { return WatermarkStrategy[T]{} }

// CustomWatermarks is the strategy of a generator of the job's own; newGen makes one per parallel subtask.
func CustomWatermarks[T any](newGen func() WatermarkGenerator[T]) WatermarkStrategy[T] {
	w := WatermarkStrategy[T]{newGen: newGen}
	if newGen == nil {
		w.err = fmt.Errorf("CustomWatermarks: nil generator factory")
	}
	return w
}

// WithTimestampAssigner returns the strategy with f giving each record's timestamp (epoch ms); recordTs is
// the timestamp the record had (math.MinInt64 when it had none).
func (w WatermarkStrategy[T]) WithTimestampAssigner(f func(v T, recordTs int64) int64) WatermarkStrategy[T] {
	w.assign = f
	if f == nil && w.err == nil {
		w.err = fmt.Errorf("WithTimestampAssigner: nil function")
	}
	return w
}

// WithIdleness returns the strategy with the stream declared idle after timeout without records, so that
// it does not hold back the watermark of the operators it feeds; its first record makes it active again.
// As in Flink, the timeout runs from the first periodic watermark check without a record, so a subtask
// that never reads one (a source with more subtasks than partitions or splits) goes idle too.
func (w WatermarkStrategy[T]) WithIdleness(timeout time.Duration) WatermarkStrategy[T] {
	w.idleness = timeout
	if (timeout < time.Millisecond || timeout%time.Millisecond != 0) && w.err == nil {
		w.err = fmt.Errorf("WithIdleness: the timeout must be whole milliseconds, at least 1 ms, got %s", timeout)
	}
	return w
}

// TimeOf returns the time of an event-time timestamp or watermark (epoch ms).
func TimeOf(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// Millis returns t as an event-time timestamp (epoch ms), for timestamp assigners that hold a time.Time.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// MinWatermark and MaxWatermark bound event time: no watermark yet, and the end of time (the end of bounded
// input, after which every window has fired).
const (
	MinWatermark int64 = math.MinInt64
	MaxWatermark int64 = math.MaxInt64
)

// WithTimestamps gives the stream event time: timestamps from the strategy's assigner (or the ones the
// records had) and watermarks from its generator. On a stream straight out of FromSource the source does it
// itself; elsewhere an operator ("timestamps", chained) does, and ignores the watermarks from upstream
// but the end of input's, as Flink's assignTimestampsAndWatermarks does.
func (s *Stream[T]) WithTimestamps(w WatermarkStrategy[T]) *Stream[T] {
	if w.err != nil {
		s.env.addErr(fmt.Errorf("WithTimestamps: %w (at %s)", w.err, origin()))
		return s
	}
	if w.assign == nil && !s.timed {
		s.env.addErr(fmt.Errorf("WithTimestamps: the stream has no timestamps yet, so the strategy needs WithTimestampAssigner (at %s)", origin()))
		return s
	}
	spec := &operator.WatermarkSpec[T]{Assign: w.assign, Bound: w.bound, NewGenerator: w.newGen, Idleness: w.idleness,
		Interval: s.env.watermarkInterval()}
	if n, src := s.foldableSource(); src != nil {
		n.Payload = &operator.TimedSourceSpec[T]{Source: src.Source, Watermarks: spec}
		// The source itself now has event time, so every handle of its stream has: s too.
		s.timed = true
		return s
	}
	var op any
	if s.timed {
		op = &operator.TimestampsSpec[operator.Timed[T], T]{Watermarks: spec,
			Unwrap: func(v operator.Timed[T]) (T, int64) { return v.V, v.Ts }}
	} else {
		op = &operator.TimestampsSpec[T, T]{Watermarks: spec, Unwrap: func(v T) (T, int64) { return v, math.MinInt64 }}
	}
	n := s.env.addNode(graph.OperatorNode, "timestamps", op)
	connect(s, n)
	return newStreamOf[T](s.env, n, true)
}

// foldableSource returns the source node behind s when the strategy can go into the source itself: s is
// the plain output of one FromSource that nothing reads yet.
func (s *Stream[T]) foldableSource() (*graph.StreamNode, *operator.SourceSpec[T]) {
	if s.timed || len(s.inputs) != 1 || s.inputs[0].patternSet {
		return nil, nil
	}
	n := s.inputs[0].node
	src, ok := n.Payload.(*operator.SourceSpec[T])
	if !ok {
		return nil, nil
	}
	for _, e := range s.env.edges {
		if e.Source == n.ID {
			return nil, nil
		}
	}
	return n, src
}

// watermarkInterval is the periodic watermark interval of the environment's streams.
func (e *Environment) watermarkInterval() time.Duration {
	if !e.cfg.watermarkIntervalSet {
		return DefaultWatermarkInterval
	}
	return e.cfg.WatermarkInterval
}

package operator

import (
	"fmt"
	"math"

	"github.com/runnel-dev/runnel/internal/state"
)

// TimerService is what a keyed function gets from ctx.TimerService(): the clocks, and timers for the
// current key (docs/eventtime.md §3). Times are epoch milliseconds.
type TimerService interface {
	// CurrentProcessingTime is the task's wall clock.
	CurrentProcessingTime() int64
	// CurrentWatermark is the operator's input watermark (math.MinInt64 before the first).
	CurrentWatermark() int64
	// RegisterEventTimeTimer asks for OnTimer once the watermark reaches ts; once per (key, ts).
	RegisterEventTimeTimer(ts int64)
	// RegisterProcessingTimeTimer asks for OnTimer once the wall clock reaches ts; once per (key, ts).
	RegisterProcessingTimeTimer(ts int64)
	// DeleteEventTimeTimer removes the current key's event-time timer at ts, if there is one.
	DeleteEventTimeTimer(ts int64)
	// DeleteProcessingTimeTimer removes the current key's processing-time timer at ts, if there is one.
	DeleteProcessingTimeTimer(ts int64)
}

// TimeDomain says which clock fired a timer.
type TimeDomain uint8

const (
	// EventTime timers fire when the watermark passes them.
	EventTime TimeDomain = iota
	// ProcessingTime timers fire when the wall clock passes them.
	ProcessingTime
)

func (d TimeDomain) String() string {
	if d == EventTime {
		return "event time"
	}
	return "processing time"
}

// TimerContext is the context of OnTimer: the timer's key is current.
type TimerContext[K comparable] interface {
	KeyedContext[K]
	// TimeDomain says whether an event-time or a processing-time timer fired.
	TimeDomain() TimeDomain
}

// TimerHandler is the optional half of a keyed process function that gets the timers it registered. What
// it emits on a stream with event time takes the timer's time as its timestamp.
type TimerHandler[K comparable, Out any] interface {
	OnTimer(ctx TimerContext[K], ts int64, out Collector[Out]) error
}

// maxTimersPerStep bounds the processing-time timers fired in one mailbox step, so that barriers and mail
// are never starved; the rest fire at the next step.
const maxTimersPerStep = 4096

// timerService is one keyed operator instance's timers: two timers states in its keyed backend (so they
// are checkpointed, restored and rescaled with its other keyed state) and its current watermark.
type timerService[K comparable] struct {
	kc        *keyedContext[K]
	event     state.Timers
	proc      state.Timers
	watermark int64
	// handler says the function has OnTimer; registering without one is an error.
	handler bool
	// firing is the domain of the timer being fired, read by TimeDomain.
	firing TimeDomain
	// due is called for each timer that fires, with its domain and time (the operator emits through it).
	due func(d TimeDomain, ts int64) error
}

func newTimerService[K comparable](kc *keyedContext[K], handler bool) (*timerService[K], error) {
	b := state.Engine(kc.b)
	ev, err := state.NewTimers[K](b, "\x00timers/event")
	if err != nil {
		return nil, fmt.Errorf("operator %q: %w", kc.operator, err)
	}
	pr, err := state.NewTimers[K](b, "\x00timers/processing")
	if err != nil {
		return nil, fmt.Errorf("operator %q: %w", kc.operator, err)
	}
	return &timerService[K]{kc: kc, event: ev, proc: pr, watermark: math.MinInt64, handler: handler}, nil
}

func (s *timerService[K]) CurrentProcessingTime() int64 { return s.kc.CurrentProcessingTime() }
func (s *timerService[K]) CurrentWatermark() int64      { return s.watermark }

func (s *timerService[K]) check(what string, event bool) {
	switch {
	case !s.handler:
		s.kc.failf("%s: the process function has no OnTimer method (runnel.TimerHandler) to receive the timer", what)
	case event && !s.kc.timed:
		s.kc.failf("%s: the stream has no event time; give it a WatermarkStrategy (WithTimestamps)", what)
	}
}

func (s *timerService[K]) RegisterEventTimeTimer(ts int64) {
	s.check("RegisterEventTimeTimer", true)
	s.event.Register(ts, state.Namespace{})
}

func (s *timerService[K]) RegisterProcessingTimeTimer(ts int64) {
	s.check("RegisterProcessingTimeTimer", false)
	s.proc.Register(ts, state.Namespace{})
}

func (s *timerService[K]) DeleteEventTimeTimer(ts int64) { s.event.Delete(ts, state.Namespace{}) }

func (s *timerService[K]) DeleteProcessingTimeTimer(ts int64) { s.proc.Delete(ts, state.Namespace{}) }

// onWatermark advances the operator's watermark to ms and fires the event-time timers it completes, in
// time order; the caller forwards the watermark after what they emitted.
func (s *timerService[K]) onWatermark(ms int64) error {
	if ms <= s.watermark {
		return nil
	}
	s.watermark = ms
	if next, ok := s.event.Next(); !ok || next > ms {
		return nil
	}
	s.firing = EventTime
	return s.event.FireUpTo(ms, func(ts int64, _ state.Namespace) error { return s.due(EventTime, ts) })
}

// nextDeadline is the earliest processing-time timer.
func (s *timerService[K]) nextDeadline() int64 {
	if next, ok := s.proc.Next(); ok {
		return next
	}
	return math.MaxInt64
}

// onProcessingTime fires the processing-time timers due at now, at most maxTimersPerStep of them: whole
// times at once, so that a time's timers are never split over steps.
func (s *timerService[K]) onProcessingTime(now int64) error {
	fired := 0
	s.firing = ProcessingTime
	for fired < maxTimersPerStep {
		next, ok := s.proc.Next()
		if !ok || next > now {
			return nil
		}
		err := s.proc.FireUpTo(next, func(ts int64, _ state.Namespace) error {
			fired++
			return s.due(ProcessingTime, ts)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// timerContext is the TimerContext of a keyed process operator: its keyed context, with the domain of the
// timer being fired.
type timerContext[K comparable] struct {
	*keyedContext[K]
	s *timerService[K]
}

func (c timerContext[K]) TimeDomain() TimeDomain { return c.s.firing }

// TimerService returns the operator's timer service.
func (k *keyedContext[K]) TimerService() TimerService { return k.timers }

// withTimers gives a keyed process operator its timer service and hooks: the watermark fires event-time
// timers (after which the watermark goes on), the processing-time deadline fires the others. onTimer emits
// what a timer produces; flush hands it on before the watermark.
func withTimers[K comparable, Out any](built *Built, kc *keyedContext[K], fn any, onTimer func(ctx TimerContext[K], ts int64) error, flush func()) error {
	_, handler := fn.(TimerHandler[K, Out])
	svc, err := newTimerService(kc, handler)
	if err != nil {
		return err
	}
	kc.timers = svc
	tc := timerContext[K]{keyedContext: kc, s: svc}
	svc.due = func(d TimeDomain, ts int64) error {
		if err := onTimer(tc, ts); err != nil {
			return fmt.Errorf("OnTimer (%s, %d): %w", d, ts, err)
		}
		return nil
	}
	built.RestoreWatermark = func(floor int64) { svc.watermark = max(svc.watermark, floor) }
	built.Watermark = func(ms int64) error {
		err := svc.onWatermark(ms)
		flush()
		if err != nil {
			return err
		}
		return kc.EmitWatermark(ms)
	}
	if handler {
		built.NextDeadline = svc.nextDeadline
		built.OnProcessingTime = func(now int64) error {
			err := svc.onProcessingTime(now)
			flush()
			return err
		}
	}
	return nil
}

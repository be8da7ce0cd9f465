package task

import (
	"fmt"
	"log/slog"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/determinants"
	"github.com/runnel-dev/runnel/internal/network"
)

// steps is a task's side of its determinant log under task failover (docs/taskfailover.md §3, §8): live,
// it records each step the task takes (the channel it took an input buffer from, the time a step began,
// a call of the processing-time timers) with the records emitted before it; replaying, it reads them back,
// names the channel of each next buffer, and checks that every step emitted what it emitted in the failed
// attempt. It decides nothing about records and owns no goroutine; the task goroutine owns it.
type steps struct {
	log *determinants.Log // nil: the task keeps no log, and every method does nothing
	// reader reads the log while the attempt replays (Config.Replay); nil once live. next is the entry
	// whose buffer the replay waits for, when have.
	reader *determinants.Reader
	next   determinants.Entry
	have   bool
	clock  *stepClock // the operators' clock when the task keeps a log
	// out is the task's output record count when it took its last buffer or event: each step's entry
	// records the records emitted since, which the replay checks. replayed counts the replayed steps.
	out      uint64
	replayed int64
	broken   bool // the log broke: said once
	warn     *slog.Logger
}

// replaying reports whether the attempt still takes its steps from the log.
func (s *steps) replaying() bool { return s.reader != nil }

// record appends a step to the log, if the task keeps one and is live. A log that breaks (past its bound)
// is said once; it cannot be replayed any more, and the job master falls back when this subtask fails.
func (s *steps) record(e determinants.Entry) {
	if s.log == nil || s.reader != nil {
		return
	}
	if err := s.log.Append(e); err != nil {
		s.broke(err)
	}
}

func (s *steps) broke(err error) {
	if !s.broken {
		s.broken = true
		s.warn.Warn("determinant log", "err", err)
	}
}

// begin begins a step: live, it reads the underlying clock and records the time if it changed since the
// last step; replaying, the log's Time entries set it (replayTo).
func (s *steps) begin() {
	c := s.clock
	if c == nil || s.reader != nil {
		return
	}
	now := c.Clock.Now().UnixMilli()
	if now != c.ms.Load() || !c.recorded {
		c.ms.Store(now)
		c.recorded = true
		s.record(determinants.Entry{Kind: determinants.Time, Value: now})
	}
}

// timers begins a step that runs the processing-time timers at now (the underlying clock's time) and
// records it; it returns the time the timers run at, the step's.
func (s *steps) timers(now int64) int64 {
	if s.clock != nil {
		s.begin()
		now = s.clock.ms.Load()
	}
	s.record(determinants.Entry{Kind: determinants.Timers, Value: now})
	return now
}

// took records that the live task took a buffer (or, isEvent, an event) of channel ch, having emitted out
// records in all.
func (s *steps) took(ch int, isEvent bool, out uint64) {
	s.begin()
	kind := determinants.Buffer
	if isEvent {
		kind = determinants.Event
	}
	s.record(determinants.Entry{Kind: kind, Channel: ch, Value: int64(out - s.out)})
	s.out = out
}

// mark notes that checkpoint id is taken here: a restore from it replays what the task takes after this
// point, from the step's time on, whatever came before the mark.
func (s *steps) mark(id int64) {
	if s.log == nil || s.reader != nil {
		return
	}
	if err := s.log.Mark(id); err != nil {
		s.broke(err)
	}
	if s.clock != nil {
		s.record(determinants.Entry{Kind: determinants.Time, Value: s.clock.ms.Load()})
	}
}

// truncate drops the log up to checkpoint id, which completed: no attempt will restore an older one.
func (s *steps) truncate(id int64) {
	if s.log != nil && s.reader == nil {
		s.log.Truncate(id)
	}
}

// replayTo reads the log up to its next buffer or event step, running the timer steps before it with
// runTimers, and returns the channel that step takes its buffer from. ok is false once the log is used up:
// the task is live from here, appending, and ended is called once.
func (s *steps) replayTo(channels int, runTimers func(ms int64) error, ended func()) (ch int, ok bool, err error) {
	for s.reader != nil && !s.have {
		e, more, err := s.reader.Next()
		switch {
		case err != nil:
			return -1, false, fmt.Errorf("replay: %w", err)
		case !more:
			s.reader = nil
			ended()
		case e.Kind == determinants.Time:
			if s.clock != nil {
				s.clock.ms.Store(e.Value)
			}
		case e.Kind == determinants.Timers:
			// The failed attempt's processing-time timers ran here, at this time.
			if err := runTimers(e.Value); err != nil {
				return -1, false, err
			}
		case (e.Kind != determinants.Buffer && e.Kind != determinants.Event) || e.Channel >= channels:
			return -1, false, fmt.Errorf("%w: determinant %v, which this task cannot replay", deploy.ErrReplayDiverged, e)
		default:
			s.next, s.have = e, true
		}
	}
	if s.reader == nil {
		return -1, false, nil
	}
	return s.next.Channel, true, nil
}

// replayedTook checks the buffer the replay took for its step (replayTo's channel), the task having
// emitted out records in all; the step is then done.
func (s *steps) replayedTook(kind network.Kind, out uint64) error {
	s.replayed++
	if isEvent := kind == network.KindEvent; isEvent != (s.next.Kind == determinants.Event) {
		return fmt.Errorf("%w: at step %d the log says %v, the channel has a %s buffer", deploy.ErrReplayDiverged, s.replayed, s.next, kind)
	}
	// The steps before this one must have emitted what they emitted in the failed attempt: otherwise
	// what this attempt regenerates is not what its consumers had, and dropping it would lose or
	// duplicate records (docs/taskfailover.md §8).
	if n := out - s.out; n != uint64(s.next.Value) {
		return fmt.Errorf("%w: before step %d (%v) the failed attempt had emitted %d records since its previous step, this attempt %d; an operator does not emit the same for the same input (randomness, wall-clock time read directly, or state outside Runnel's)",
			deploy.ErrReplayDiverged, s.replayed, s.next, s.next.Value, n)
	}
	s.out = out
	s.have = false
	return nil
}

package nexmark

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/runnel-dev/runnel"
)

// pollEvents is how many events a generator reader emits per poll at most: a few hundred keeps the
// task's control messages (barriers, cancellation) prompt, and the batch buffer at about 200 KB.
const pollEvents = 512

// Source returns the generated Nexmark stream as a source: subtask s of P generates the events n ≡ s
// (mod P) in increasing n, so the subtasks together generate exactly the stream of parallelism 1. Its
// checkpointed state is the next n, so a restore rewinds exactly. With cfg.Rate > 0, event n is emitted no
// earlier than n/Rate seconds after the reader started (or, after a restore, after the restored n):
// a restored source keeps the rate from its restart on rather than catching up.
func Source(cfg GeneratorConfig) runnel.Source[Event] { return &source{cfg: cfg} }

type source struct{ cfg GeneratorConfig }

func (s *source) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[Event], error) {
	g, err := NewGenerator(s.cfg)
	if err != nil {
		return nil, err
	}
	return &generatorReader{gen: g, cfg: s.cfg, next: uint64(ctx.SubtaskIndex()), step: uint64(ctx.Parallelism()),
		base: uint64(ctx.SubtaskIndex())}, nil
}

type generatorReader struct {
	gen        *Generator
	cfg        GeneratorConfig
	next, step uint64 // the next event number and the parallelism
	base       uint64 // the event number at which the rate clock started
	start      time.Time
	timer      *time.Timer
	wake       chan struct{}
	buf        []Event // one poll's events, handed to a BatchCollector
}

func (r *generatorReader) ended() bool { return r.cfg.Events > 0 && r.next >= r.cfg.Events }

// due returns the first event number (over all subtasks) not yet due at the configured rate, or the end of
// the stream when unthrottled.
func (r *generatorReader) due() uint64 {
	if r.cfg.Rate <= 0 {
		return ^uint64(0)
	}
	if r.start.IsZero() {
		r.start = time.Now()
	}
	return r.base + uint64(time.Since(r.start).Seconds()*float64(r.cfg.Rate)) + 1
}

// PollNext emits up to pollEvents due events.
func (r *generatorReader) PollNext(out runnel.Collector[Event]) (runnel.InputStatus, error) {
	if r.ended() {
		return runnel.EndOfInput, nil
	}
	due := r.due()
	if r.cfg.Events > 0 {
		due = min(due, r.cfg.Events)
	}
	if r.next >= due {
		r.arm(time.Duration(float64(r.next-due+1) / float64(r.cfg.Rate) * float64(time.Second)))
		return runnel.NothingAvailable, nil
	}
	if cap(r.buf) < pollEvents {
		r.buf = make([]Event, pollEvents)
	}
	buf := r.buf[:0]
	for len(buf) < pollEvents && r.next < due {
		buf = buf[:len(buf)+1]
		r.gen.Event(r.next, &buf[len(buf)-1])
		r.next += r.step
	}
	if bc, ok := out.(runnel.BatchCollector[Event]); ok {
		bc.CollectBatch(buf)
	} else {
		for i := range buf {
			out.Collect(buf[i])
		}
	}
	if r.ended() {
		return runnel.EndOfInput, nil
	}
	return runnel.MoreAvailable, nil
}

// arm makes Available ready after d.
func (r *generatorReader) arm(d time.Duration) {
	if r.wake == nil {
		r.wake = make(chan struct{}, 1)
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(d, func() {
			select {
			case r.wake <- struct{}{}:
			default:
			}
		})
		return
	}
	r.timer.Reset(d)
}

// Available implements runnel.SourceReader.
func (r *generatorReader) Available() <-chan struct{} { return r.wake }

// ReplaysDeterministically implements runnel.DeterministicReader: event n is a function of n (its dateTime
// too), whatever the rate lets a poll emit.
func (r *generatorReader) ReplaysDeterministically() bool { return true }

// SnapshotState implements runnel.CheckpointedReader: the next event number.
func (r *generatorReader) SnapshotState(int64) ([]byte, error) {
	return binary.AppendUvarint(nil, r.next), nil
}

// RestoreState implements runnel.CheckpointedReader: the restored n must be this subtask's (n ≡ s mod P)
// and, in a bounded stream, at most one step past its end.
func (r *generatorReader) RestoreState(b []byte) error {
	v, n := binary.Uvarint(b)
	if n != len(b) || n <= 0 || v%r.step != r.next%r.step || (r.cfg.Events > 0 && v >= r.cfg.Events+r.step) {
		return fmt.Errorf("nexmark generator: bad checkpointed position % x for subtask %d of %d", b, r.next%r.step, r.step)
	}
	r.next, r.base = v, v
	return nil
}

// Close implements runnel.SourceReader.
func (r *generatorReader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

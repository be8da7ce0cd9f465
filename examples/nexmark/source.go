package nexmark

import (
	"encoding/binary"
	"fmt"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
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
		pace: connector.NewPacer(float64(s.cfg.Rate), uint64(ctx.SubtaskIndex()))}, nil
}

type generatorReader struct {
	gen        *Generator
	cfg        GeneratorConfig
	next, step uint64           // the next event number and the parallelism
	pace       *connector.Pacer // over event numbers of all subtasks
	buf        []Event          // one poll's events, handed to a BatchCollector
}

func (r *generatorReader) ended() bool { return r.cfg.Events > 0 && r.next >= r.cfg.Events }

// PollNext emits up to pollEvents due events.
func (r *generatorReader) PollNext(out runnel.Collector[Event]) (runnel.InputStatus, error) {
	if r.ended() {
		return runnel.EndOfInput, nil
	}
	due := r.pace.Due()
	if r.cfg.Events > 0 {
		due = min(due, r.cfg.Events)
	}
	if r.next >= due {
		r.pace.Wait(r.next)
		return runnel.NothingAvailable, nil
	}
	if cap(r.buf) < pollEvents {
		r.buf = make([]Event, pollEvents)
	}
	buf := r.buf[:0]
	for len(buf) < pollEvents && r.next < due {
		buf = buf[:len(buf)+1]
		r.gen.refill(r.next, &buf[len(buf)-1])
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

// Available implements runnel.SourceReader.
func (r *generatorReader) Available() <-chan struct{} { return r.pace.Available() }

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
	r.next = v
	r.pace.Restart(v)
	return nil
}

// Close implements runnel.SourceReader.
func (r *generatorReader) Close() error {
	r.pace.Close()
	return nil
}

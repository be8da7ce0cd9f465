package nats

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runnel-dev/runnel"
)

// SinkConfig configures a JetStream sink.
type SinkConfig struct {
	// URL is the NATS server URL (several separated by commas); required.
	URL string
	// Stream is the stream the sink writes to; required. Every subject published to must be one of its
	// subjects (the server refuses the others).
	Stream string
	// Subject is the subject of records whose Msg has none.
	Subject string
	// IDPrefix starts every message id the sink makes. Default: "runnel:" followed by the job's and the
	// operator's names. Runs of a job that start afresh (not from a checkpoint or savepoint) repeat their
	// ids, so that a restart before the first checkpoint writes nothing twice; give each run its own
	// prefix when two fresh runs within the duplicate window must both be written.
	IDPrefix string
	// FlushTimeout bounds the wait for publish acknowledgements at a checkpoint or the end of input, and
	// for room among MaxPending (default 30 s).
	FlushTimeout time.Duration
	// MaxPending bounds the publishes awaiting acknowledgement (default 4000).
	MaxPending int
	// Options are passed to every connection the sink makes.
	Options []natsgo.Option
}

func (c *SinkConfig) check() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("nats sink: no server URL: set SinkConfig.URL"))
	}
	if c.Stream == "" {
		errs = append(errs, errors.New("nats sink: no stream: set SinkConfig.Stream"))
	}
	if c.Subject != "" && (!validSubject(c.Subject) || strContainsWildcard(c.Subject)) {
		errs = append(errs, fmt.Errorf("nats sink: Subject %q is not a subject one can publish to", c.Subject))
	}
	if c.FlushTimeout < 0 || c.MaxPending < 0 {
		errs = append(errs, fmt.Errorf("nats sink: negative FlushTimeout %s or MaxPending %d", c.FlushTimeout, c.MaxPending))
	}
	return errors.Join(errs...)
}

// strContainsWildcard reports whether subject s has a wildcard token, which one cannot publish to.
func strContainsWildcard(s string) bool {
	for _, t := range strings.Split(s, ".") {
		if t == "*" || t == ">" {
			return true
		}
	}
	return false
}

// Sink publishes records to cfg.Stream; encode turns a record into a message (an error fails the job).
//
// Each message carries a Nats-Msg-Id: prefix:SUBTASK:N, where N counts the records the subtask has
// written since the job started afresh (a checkpoint holds the count and a restore continues from it), or
// prefix:ID when encode sets Msg.ID. The sink waits for every publish to be acknowledged before a
// checkpoint's barrier goes on and at the end of input, so a completed checkpoint covers everything written
// before it. After a restore the job writes again what it wrote since the restored checkpoint, and the
// stream drops each message whose id it has seen within its duplicate window.
//
// So the sink writes each record exactly once when, after a failure, the job is running again within the
// duplicate window (less the checkpoint interval) and the replay repeats the ids: with positional ids,
// when each sink subtask gets the same records in the same order again, which holds when its input comes
// through one channel from a deterministic chain (a NATS or Kafka source of one partition, or a subtask
// reading one channel); with Msg.ID, when the replay produces the same records in any order (for example
// a key and a count that rises by one per record). Records that a replay makes differently (a running sum
// over input merged from several channels, whose interleaving changes) get other ids and are written as
// well: at least once. A job whose checkpoint interval is not shorter than the duplicate window is
// refused at submission (CheckJob).
func Sink[T any](cfg SinkConfig, encode func(T) (Msg, error)) runnel.Sink[T] {
	return &sink[T]{cfg: cfg, encode: encode}
}

type sink[T any] struct {
	cfg    SinkConfig
	encode func(T) (Msg, error)
	// interval is the job's checkpoint interval, which CheckJob hears before any writer is made (0: none).
	interval time.Duration
}

// CheckJob implements runnel.JobChecker: at submission it connects, checks the stream and its subject,
// and refuses a duplicate window not longer than the job's checkpoint interval, since a record replayed
// after a restore could come after the window forgot its first copy.
func (s *sink[T]) CheckJob(js runnel.JobSettings) error {
	if err := s.cfg.check(); err != nil {
		return err
	}
	if s.encode == nil {
		return errors.New("nats sink: nil encode function")
	}
	s.interval = js.Checkpoint.Interval
	nc, err := connect(s.cfg.URL, s.cfg.Options, "runnel sink check of job "+js.Name)
	if err != nil {
		return fmt.Errorf("nats sink: connect to %s (stream %q): %w", s.cfg.URL, s.cfg.Stream, err)
	}
	defer nc.Close()
	jsc, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats sink: %s: %w", s.where(), err)
	}
	_, err = s.checkStream(jsc)
	return err
}

func (s *sink[T]) where() string {
	return fmt.Sprintf("stream %q at %s", s.cfg.Stream, s.cfg.URL)
}

// checkStream checks that the stream exists, takes SinkConfig.Subject and keeps message ids longer than
// the checkpoint interval; it returns the stream's duplicate window.
func (s *sink[T]) checkStream(js jetstream.JetStream) (time.Duration, error) {
	cfg := s.cfg
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	st, err := js.Stream(ctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("nats sink: stream %q does not exist at %s", cfg.Stream, cfg.URL)
	}
	if err != nil {
		return 0, fmt.Errorf("nats sink: %s: %w", s.where(), err)
	}
	info := st.CachedInfo()
	if cfg.Subject != "" && len(info.Config.Subjects) > 0 {
		ok := false
		for _, f := range info.Config.Subjects {
			ok = ok || subjectMatches(f, cfg.Subject)
		}
		if !ok {
			return 0, fmt.Errorf("nats sink: subject %q is not one of the subjects %q of %s", cfg.Subject, info.Config.Subjects, s.where())
		}
	}
	window := info.Config.Duplicates
	if s.interval > 0 && window <= s.interval {
		return 0, fmt.Errorf("nats sink: the duplicate window of %s is %s, not longer than the checkpoint interval %s: a record written again after a restore could come when the stream no longer knows its id, and be written twice; make the stream's Duplicates longer than the checkpoint interval plus the time a restart takes", s.where(), window, s.interval)
	}
	return window, nil
}

// CreateWriter implements runnel.Sink: it connects and checks the stream again (see CheckJob).
func (s *sink[T]) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[T], error) {
	if err := s.cfg.check(); err != nil {
		return nil, err
	}
	if s.encode == nil {
		return nil, errors.New("nats sink: nil encode function")
	}
	w := &sinkWriter[T]{s: s, ctx: ctx, sub: strconv.Itoa(ctx.SubtaskIndex()), prefix: s.cfg.IDPrefix,
		timeout: s.cfg.FlushTimeout, last: time.Now()}
	if w.prefix == "" {
		w.prefix = "runnel:" + ctx.JobName() + ":" + ctx.OperatorName()
	}
	if w.timeout == 0 {
		w.timeout = 30 * time.Second
	}
	maxPending := s.cfg.MaxPending
	if maxPending == 0 {
		maxPending = 4000
	}
	nc, err := connect(s.cfg.URL, s.cfg.Options, "runnel sink "+ctx.TaskName())
	if err != nil {
		return nil, fmt.Errorf("nats sink: connect to %s (stream %q): %w", s.cfg.URL, s.cfg.Stream, err)
	}
	w.nc = nc
	if err := w.setUp(maxPending); err != nil {
		nc.Close()
		return nil, err
	}
	w.dupCount = ctx.Metrics().Counter("duplicates")
	return w, nil
}

func (w *sinkWriter[T]) where() string { return w.s.where() }

func (w *sinkWriter[T]) setUp(maxPending int) error {
	js, err := jetstream.New(w.nc, jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncErrHandler(w.failed), jetstream.WithPublishAsyncAckHandler(w.acked))
	if err != nil {
		return fmt.Errorf("nats sink: %s: %w", w.where(), err)
	}
	w.js = js
	w.window, err = w.s.checkStream(js)
	return err
}

type sinkWriter[T any] struct {
	s       *sink[T]
	ctx     runnel.RuntimeContext
	nc      *natsgo.Conn
	js      jetstream.JetStream
	sub     string // the subtask index, in ids
	prefix  string
	timeout time.Duration
	window  time.Duration // the stream's duplicate window
	n       uint64        // records written since the job started afresh: the position in ids
	last    time.Time     // the last snapshot (or the writer's creation)
	warned  bool

	dups     atomic.Int64 // publishes the stream acknowledged as duplicates, counted on a client goroutine
	dupCount *runnel.Counter

	mu  sync.Mutex
	err error // the first failed publish, reported at the next call
}

// failed is the publish error callback (on a client goroutine): it keeps the first error.
func (w *sinkWriter[T]) failed(_ jetstream.JetStream, m *natsgo.Msg, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("nats sink: publish to %q (%s, id %s): %w", m.Subject, w.where(), m.Header.Get(jetstream.MsgIDHeader), err)
	}
}

// acked is the publish acknowledgement callback (on a client goroutine).
func (w *sinkWriter[T]) acked(_ jetstream.JetStream, _ *natsgo.Msg, ack *jetstream.PubAck) {
	if ack.Duplicate {
		w.dups.Add(1)
	}
}

func (w *sinkWriter[T]) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Write implements runnel.SinkWriter: it publishes the record asynchronously.
func (w *sinkWriter[T]) Write(v T) error {
	if err := w.failure(); err != nil {
		return err
	}
	m, err := w.s.encode(v)
	if err != nil {
		return fmt.Errorf("nats sink: encode: %w", err)
	}
	w.n++
	subject := m.Subject
	if subject == "" {
		subject = w.s.cfg.Subject
	}
	if subject == "" {
		return errors.New("nats sink: a record has no subject and SinkConfig.Subject is not set")
	}
	var id string
	if m.ID != "" {
		id = w.prefix + ":" + m.ID
	} else {
		id = w.prefix + ":" + w.sub + ":" + strconv.FormatUint(w.n, 10)
	}
	// The publish sets headers: copy the caller's, which it may reuse.
	msg := &natsgo.Msg{Subject: subject, Data: m.Data, Header: maps.Clone(m.Header)}
	_, err = w.js.PublishMsgAsync(msg, jetstream.WithMsgID(id), jetstream.WithExpectStream(w.s.cfg.Stream),
		jetstream.WithStallWait(w.timeout))
	if err != nil {
		return fmt.Errorf("nats sink: publish to %q (%s, id %s): %w", subject, w.where(), id, err)
	}
	return nil
}

// Flush implements runnel.SinkWriter: it waits until the stream acknowledged every record written so far.
func (w *sinkWriter[T]) Flush() error {
	select {
	case <-w.js.PublishAsyncComplete():
	case <-time.After(w.timeout):
		return fmt.Errorf("nats sink: %d publishes to %s not acknowledged after %s", w.js.PublishAsyncPending(), w.where(), w.timeout)
	case <-w.ctx.Done():
		return fmt.Errorf("nats sink: cancelled while waiting for publish acknowledgements from %s", w.where())
	}
	// The counter is the task goroutine's: it takes the duplicates acknowledged so far.
	w.dupCount.Add(w.dups.Load() - w.dupCount.Value())
	return w.failure()
}

// sinkStateVersion starts the writer's checkpointed state.
const sinkStateVersion = 1

// SnapshotState implements runnel.CheckpointedWriter: a checkpoint completes only once every record
// written before its barrier is stored; the state is the count of records written, the position the ids
// of a restored writer continue from.
func (w *sinkWriter[T]) SnapshotState(int64) ([]byte, error) {
	if err := w.Flush(); err != nil {
		return nil, err
	}
	now := time.Now()
	if gap := now.Sub(w.last); gap >= w.window && !w.warned {
		// The interval set may not be the one the job runs with, or checkpoints fail or are slow.
		w.warned = true
		w.ctx.Logger().Warn("nats sink: checkpoints came further apart than the stream's duplicate window: a record replayed after a restore may be written twice",
			"stream", w.s.cfg.Stream, "between_checkpoints", gap, "duplicate_window", w.window)
	}
	w.last = now
	return binary.AppendUvarint([]byte{sinkStateVersion}, w.n), nil
}

// RestoreState implements runnel.CheckpointedWriter: ids continue from the restored position, so that the
// records written again get the ids they had.
func (w *sinkWriter[T]) RestoreState(b []byte) error {
	if len(b) < 2 || b[0] != sinkStateVersion {
		return fmt.Errorf("nats sink: malformed checkpointed state % x", b)
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || 1+k != len(b) {
		return fmt.Errorf("nats sink: malformed checkpointed state % x", b)
	}
	w.n = n
	return nil
}

// Close implements runnel.SinkWriter: it closes the connection; publishes not yet acknowledged may be lost
// (a failing or cancelled job, whose restore writes them again).
func (w *sinkWriter[T]) Close() error {
	w.nc.Close()
	return nil
}

// Package nats holds Runnel's NATS JetStream source and sink, built on github.com/nats-io/nats.go and its
// jetstream package (nats-server 2.14 or later: the source resets consumers). It uses only Runnel's public
// API, like a user's own connector.
//
// The source reads a stream exactly once into the job's state. Each source subtask reads its share of the
// stream's subjects (SourceConfig.Subjects, split over the subtasks like Kafka partitions) through a
// durable pull consumer of its own, and checkpoints, per subject filter, the stream sequence up to which
// it read it, in union list state: a restore at another parallelism gives each filter's position to the
// subtask that reads it now. The subject filters themselves must stay as they were: a restore with others
// is refused, since a position says nothing about subjects it was not taken for.
//
// Messages are acknowledged only when the checkpoint that covers them completes: one acknowledgement of
// the last message covers all before it (AckAll), except on a work-queue stream, which takes only
// explicit acknowledgements and so gets one per message, and deletes each as it is acknowledged. A
// restored subtask resets its consumer to the message after the smallest restored position of its
// filters, which drops what the failed attempt had been delivered and restarts delivery in stream order
// from there, and it drops every message at or below its filter's position, and every one that comes
// again (a redelivery after AckWait): with exactly-once checkpoints each message of its subjects affects
// the state once. One exception: a stream with work-queue retention deletes the messages it acknowledged,
// so a restore from a checkpoint older than the newest completed one (a savepoint, or a damaged newest
// checkpoint passed over) does not get back those the newer checkpoints acknowledged. The consumers of a
// run at another parallelism are deleted when the new run's subtasks start (on a stream with interest
// retention, each once the new consumers have all of its subjects, so that no message loses its last
// interest). On a work-queue stream, whose consumers' subjects must not overlap, a subtask also deletes
// its own consumer when an earlier run left it with other subjects (a fresh run with other subject
// filters), and waits a moment for its siblings to do the same with theirs. A bounded subtask reads its subjects up to the newest message they held when it started,
// found by its sequence: the server's count of what a consumer has left to deliver can fall short. When
// nothing has come for a second, it asks the stream whether a message of its subjects is left up to that
// end, and ends if none is (the stream's limits deleted the rest, the end's message among them).
//
// A bounded subtask deletes its consumer once a checkpoint taken after its end completed (without
// checkpoints, at its end), when no restore will read its subjects again: a finished bounded job leaves no
// consumer behind. A cancelled or failed job leaves its consumers for a restore, which creates them again
// if they are gone; the server deletes one that no one pulled from for SourceConfig.InactiveThreshold
// (DefaultInactiveThreshold on a stream with limits or work-queue retention; never on one with interest
// retention, whose messages would go with the consumer's interest).
//
// The sink publishes each record with a message id (the Nats-Msg-Id header) that a replay after a restore
// repeats, waits for every publish acknowledgement at each checkpoint barrier and at the end of input, and
// leaves it to the stream's duplicate window to drop the replayed copies: exactly once while the job
// recovers within that window and the replay repeats the ids (see Sink).
//
// Each source subtask and each sink subtask owns one NATS connection (with the goroutines nats.go runs for
// it); a source subtask also owns the goroutine that pulls messages from its consumer (and the pull
// iterator's own goroutines). The source stops its puller at its bounded end or in Close, and Close closes
// the connection.
package nats

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runnel-dev/runnel"
)

// Msg is a JetStream message: what the source hands to its decode function, and what the sink's encode
// function returns.
type Msg struct {
	// Subject is the message's subject. The sink publishes to SinkConfig.Subject when it is empty.
	Subject string
	// Data is the payload. The source's decode function may keep it.
	Data []byte
	// Header holds the message's headers (nil for none).
	Header natsgo.Header
	// Sequence is the message's sequence in its stream (source only).
	Sequence uint64
	// Time is when the stream stored the message (source only); it is the record's timestamp on a stream
	// with event time (the timestamp assigner's recordTs).
	Time time.Time
	// ID, set by the sink's encode function, is the record's identity: the sink then publishes it with
	// Nats-Msg-Id SinkConfig.IDPrefix + ":" + ID instead of an id from its position. The source sets it
	// to the message's Nats-Msg-Id header.
	ID string
}

// DefaultInactiveThreshold is the source's SourceConfig.InactiveThreshold on a stream with limits or
// work-queue retention when none is set: a day, longer than a restart or an upgrade takes.
const DefaultInactiveThreshold = 24 * time.Hour

// StartAt says where a source subtask starts when no checkpoint holds its position.
type StartAt int

const (
	// Earliest starts at the oldest message the stream holds.
	Earliest StartAt = iota
	// Latest starts after the newest message: only messages stored from now on.
	Latest
)

// SourceConfig configures a JetStream source.
type SourceConfig struct {
	// URL is the NATS server URL (several separated by commas); required.
	URL string
	// Stream is the JetStream stream to read; required.
	Stream string
	// Subjects are the subject filters the source reads, which split the stream over the subtasks: filter
	// j goes to subtask j mod parallelism, like Kafka partitions. They must not overlap (no message may
	// match two). Empty reads the whole stream with subtask 0, the others idle. A stream whose subjects
	// carry a partition number (a subject transform with {{partition(n, ...)}}) splits into n filters.
	Subjects []string
	// ConsumerPrefix names the source's durable consumers: subtask i of a source at parallelism p reads
	// through consumer ConsumerPrefix_i_p. Default: "runnel_" followed by the job's and the operator's
	// names (characters other than letters, digits, '-' and '_' become '_'). Two jobs reading one stream
	// need different prefixes.
	ConsumerPrefix string
	// StartAt is where a subtask without a checkpointed position starts (default Earliest).
	StartAt StartAt
	// Bounded stops each subtask once it has read its subjects up to the newest message they held when it
	// started; otherwise the source never ends.
	Bounded bool
	// AckWait is how long the server waits for an acknowledgement before it delivers a message again
	// (default 10 minutes). Messages are acknowledged when a checkpoint covering them completes, so keep it
	// above the checkpoint interval plus a checkpoint's duration: a redelivery is dropped by sequence, but
	// costs a second transfer.
	AckWait time.Duration
	// MaxAckPending bounds the messages delivered and not yet acknowledged (0: no bound). At the bound the
	// consumer delivers nothing more until a checkpoint completes.
	MaxAckPending int
	// InactiveThreshold lets the server delete a consumer that no one pulled from for that long: a job
	// that was cancelled or failed and is not restored leaves nothing behind for longer (a restore
	// creates the consumers again at the checkpointed positions). 0 is DefaultInactiveThreshold on a
	// stream with limits or work-queue retention, where the messages stay without the consumer, and never
	// on one with interest retention, where deleting a consumer deletes the messages only it was
	// interested in, which a restore would then miss; negative is never. A bounded job that finished
	// deletes its consumers itself.
	InactiveThreshold time.Duration
	// Options are passed to every connection the source makes (credentials, TLS, timeouts ...).
	Options []natsgo.Option
}

func (c *SourceConfig) check() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("nats source: no server URL: set SourceConfig.URL"))
	}
	if c.Stream == "" {
		errs = append(errs, errors.New("nats source: no stream: set SourceConfig.Stream"))
	}
	if c.StartAt != Earliest && c.StartAt != Latest {
		errs = append(errs, fmt.Errorf("nats source: StartAt %d is neither Earliest nor Latest", c.StartAt))
	}
	if c.AckWait < 0 || c.MaxAckPending < 0 {
		errs = append(errs, fmt.Errorf("nats source: negative AckWait %s or MaxAckPending %d", c.AckWait, c.MaxAckPending))
	}
	for i, s := range c.Subjects {
		if !validSubject(s) {
			errs = append(errs, fmt.Errorf("nats source: Subjects[%d] %q is not a subject filter", i, s))
			continue
		}
		for j, o := range c.Subjects[:i] {
			if validSubject(o) && subjectsOverlap(s, o) {
				errs = append(errs, fmt.Errorf("nats source: Subjects[%d] %q and Subjects[%d] %q overlap: a message matching both would be read twice", j, o, i, s))
			}
		}
	}
	if c.ConsumerPrefix != "" && !validName.MatchString(c.ConsumerPrefix) {
		errs = append(errs, fmt.Errorf("nats source: ConsumerPrefix %q may hold only letters, digits, '-' and '_'", c.ConsumerPrefix))
	}
	return errors.Join(errs...)
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Source reads cfg.Stream; decode turns each message into a T (an error fails the job, naming the
// message's stream, sequence and subject).
func Source[T any](cfg SourceConfig, decode func(Msg) (T, error)) runnel.Source[T] {
	return &source[T]{cfg: cfg, decode: decode}
}

type source[T any] struct {
	cfg    SourceConfig
	decode func(Msg) (T, error)
}

// pollBatch bounds the messages one PollNext emits, and the pull iterator's buffer.
const pollBatch = 500

// requestTimeout bounds each JetStream API request (stream and consumer info, creating and resetting the
// consumer, acknowledgements).
const requestTimeout = 10 * time.Second

// Rescalable implements runnel.RescalableSource: the positions are union list state, which a restore at
// another parallelism gives every subtask whole.
func (s *source[T]) Rescalable() bool { return true }

// CreateReader implements runnel.Source: it connects and checks that the stream exists, so that a wrong
// URL or stream fails the job at once. The consumer is set up at the first poll, after a restore.
func (s *source[T]) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[T], error) {
	if err := s.cfg.check(); err != nil {
		return nil, err
	}
	if s.decode == nil {
		return nil, errors.New("nats source: nil decode function")
	}
	st, err := runnel.NewUnionListState[position](ctx, positionsState)
	if err != nil {
		return nil, fmt.Errorf("nats source: %w", err)
	}
	r := &sourceReader[T]{src: s, ctx: ctx, state: st, pos: map[string]uint64{}, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
	p, i := ctx.Parallelism(), ctx.SubtaskIndex()
	if len(s.cfg.Subjects) == 0 {
		if i == 0 {
			r.filters, r.splits = []string{""}, []int{0}
		}
	} else {
		for j, f := range s.cfg.Subjects {
			if j%p == i {
				r.filters, r.splits = append(r.filters, f), append(r.splits, j)
			}
		}
	}
	prefix := s.cfg.ConsumerPrefix
	if prefix == "" {
		prefix = sanitize("runnel_" + ctx.JobName() + "_" + ctx.OperatorName())
	}
	r.prefix, r.consumer = prefix, consumerName(prefix, i, p)
	r.dropped = ctx.Metrics().Counter("redeliveries_dropped")
	nc, err := connect(s.cfg.URL, s.cfg.Options, "runnel source "+ctx.TaskName())
	if err != nil {
		return nil, fmt.Errorf("nats source: connect to %s (stream %q): %w", s.cfg.URL, s.cfg.Stream, err)
	}
	r.nc = nc
	if r.js, err = jetstream.New(nc); err == nil {
		_, err = r.streamInfo()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return r, nil
}

type sourceReader[T any] struct {
	src      *source[T]
	ctx      runnel.RuntimeContext
	nc       *natsgo.Conn
	js       jetstream.JetStream
	stream   jetstream.Stream
	state    runnel.OperatorListState[position]
	prefix   string   // SourceConfig.ConsumerPrefix or its default
	consumer string   // the durable consumer's name
	filters  []string // this subtask's subject filters ("" alone: the whole stream); none: it idles
	splits   []int    // the index in SourceConfig.Subjects of each filter: its split id for watermarks
	dropped  *runnel.Counter

	// pos holds, per filter of the subtask, the sequence up to which the restored checkpoint read it (a
	// filter without one starts at StartAt); restored says the job started before (the state came from a
	// checkpoint); restoreErr is a restored state this run cannot take.
	pos          map[string]uint64
	restored     bool
	tookRestored bool
	restoreErr   error

	started  bool
	last     uint64 // the sequence up to which the subtask read its subjects in stream order
	maxPos   uint64 // the largest of pos
	lastMsg  jetstream.Msg
	end      uint64 // a bounded subtask's end: the sequence of its subjects' newest message when it started
	finished bool   // a bounded subtask has read up to its end
	// quiet is how long a bounded subtask waits without a delivery before it asks the stream whether a
	// message of its subjects is left up to its end (quietCheck unless a test says otherwise); quietSince
	// is when it last got one or asked; quietTimer wakes the task to ask.
	quiet      time.Duration
	quietSince time.Time
	quietTimer *time.Timer
	// endSnapshot is the first checkpoint taken after the bounded read ended (0: none yet): once it
	// completes, the subtask is done for good and deletes its consumer (removed).
	endSnapshot int64
	removed     bool
	announced   bool     // the splits were announced to a SplitOutput
	explicit    bool     // a work-queue stream: every message is acknowledged on its own (AckExplicit)
	replies     []string // explicit: the reply subjects of the messages since the last snapshot
	acks        []pendingAck

	it   jetstream.MessagesContext
	done chan struct{} // closed when the pull goroutine ended

	mu      sync.Mutex
	fetched []jetstream.Msg // messages the pull goroutine handed over, in delivery order
	err     error           // the pull goroutine's failure
	stopped atomic.Bool     // Close or the end of a bounded subtask stopped the iterator
	ready   chan struct{}   // signalled when messages or an error arrive
	room    chan struct{}   // signalled when PollNext took the fetched messages
}

// pendingAck is what checkpoint id's completion acknowledges: the last message emitted before its
// barrier, whose acknowledgement (AckAll) covers every message before it, or, on a work-queue stream, the
// reply subjects of every message since the checkpoint before.
type pendingAck struct {
	id      int64
	msg     jetstream.Msg
	replies []string
}

func (r *sourceReader[T]) where() string {
	return fmt.Sprintf("stream %q at %s", r.src.cfg.Stream, r.src.cfg.URL)
}

// streamInfo fetches the stream's configuration and state, naming the stream and server when it fails.
func (r *sourceReader[T]) streamInfo() (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	st, err := r.js.Stream(ctx, r.src.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("nats source: stream %q does not exist at %s", r.src.cfg.Stream, r.src.cfg.URL)
	}
	if err != nil {
		return nil, fmt.Errorf("nats source: %s: %w", r.where(), err)
	}
	r.stream = st
	return st.CachedInfo(), nil
}

// lastOfSubjects returns the sequence of the newest message of the subtask's subjects that the stream
// holds (0: none).
func (r *sourceReader[T]) lastOfSubjects() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	var last uint64
	for _, f := range r.filters {
		if f == "" {
			f = ">" // the whole stream
		}
		m, err := r.stream.GetLastMsgForSubject(ctx, f)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("nats source: find the newest message of %q in %s: %w", f, r.where(), err)
		}
		last = max(last, m.Sequence)
	}
	return last, nil
}

// moreUpToEnd reports whether the stream holds a message of the subtask's subjects with a sequence after
// seq and not after its end.
func (r *sourceReader[T]) moreUpToEnd(seq uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	for _, f := range r.filters {
		if f == "" {
			f = ">"
		}
		m, err := r.stream.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(f))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("nats source: find the message of %q after sequence %d in %s: %w", f, seq, r.where(), err)
		}
		if m.Sequence <= r.end {
			return true, nil
		}
	}
	return false, nil
}

// quietCheck is how long a bounded subtask goes without a delivery before it asks the stream whether a
// message of its subjects is left up to its end.
const quietCheck = time.Second

// quietEnd says whether a bounded subtask that got no delivery for r.quiet has read its end: the server
// stops delivering without ever counting zero pending when the messages left were deleted (by the
// stream's limits) after the last delivery counted them, and the end's own message may be one of them.
// Short of r.quiet it arms a timer that wakes the task to ask again.
func (r *sourceReader[T]) quietEnd() (bool, error) {
	now := time.Now()
	if r.quietSince.IsZero() {
		r.quietSince = now
	}
	if now.Sub(r.quietSince) >= r.quietFor() {
		r.quietSince = now
		more, err := r.moreUpToEnd(r.last)
		if err != nil || !more {
			return !more && err == nil, err
		}
	}
	wait := r.quietFor() - now.Sub(r.quietSince)
	if r.quietTimer == nil {
		r.quietTimer = time.AfterFunc(wait, func() { r.signal(r.ready) })
	} else {
		r.quietTimer.Reset(wait)
	}
	return false, nil
}

func (r *sourceReader[T]) quietFor() time.Duration {
	if r.quiet > 0 {
		return r.quiet
	}
	return quietCheck
}

// start creates or updates the subtask's consumer, resets it to where the subtask starts, and starts
// pulling.
func (r *sourceReader[T]) start() error {
	r.started = true
	r.takeRestored()
	if r.restoreErr != nil {
		return r.restoreErr
	}
	cfg := r.src.cfg
	if len(r.filters) == 0 {
		// More subtasks than subject filters: this one reads nothing, and on a work-queue stream it
		// deletes the consumer an earlier run of its index left, whose subjects a sibling may need now.
		if info, err := r.streamInfo(); err != nil || info.Config.Retention != jetstream.WorkQueuePolicy {
			return err
		}
		return r.dropStale(nil)
	}
	info, err := r.streamInfo()
	if err != nil {
		return err
	}
	// Where to start: after the smallest restored position of its filters (a filter without one is at
	// the start of the stream, or at its end with Latest); messages of a filter up to its own position are
	// dropped. On a work-queue stream acknowledged messages are gone and every message left is
	// unacknowledged: a checkpoint whose completion this subtask did not hear before it failed left its
	// messages there, so it starts at the first one, drops those up to the restored positions, and its
	// next acknowledgement covers them.
	for _, f := range r.filters {
		if _, ok := r.pos[f]; !ok {
			r.pos[f] = 0
			if cfg.StartAt == Latest {
				r.pos[f] = info.State.LastSeq
			}
		}
	}
	r.last, r.maxPos = r.pos[r.filters[0]], 0
	for _, f := range r.filters {
		r.last, r.maxPos = min(r.last, r.pos[f]), max(r.maxPos, r.pos[f])
	}
	start := r.last + 1
	if info.Config.Retention == jetstream.WorkQueuePolicy {
		start = max(1, min(start, info.State.FirstSeq))
	}
	if cfg.Bounded {
		// The end is a sequence, not a count of what is left: the server's count of a consumer's pending
		// messages (the consumer info's, and each delivery's) is kept up as messages come and go, and
		// can fall short, for example when a reset meets the deletions of a work queue's
		// acknowledgements, which a failed attempt sent for the checkpoint this one restores.
		if r.end, err = r.lastOfSubjects(); err != nil {
			return err
		}
		if r.end < start || r.last >= r.end {
			r.finished = true
			return nil
		}
	}
	ackWait, maxPending := cfg.AckWait, cfg.MaxAckPending
	if ackWait == 0 {
		ackWait = 10 * time.Minute
	}
	if maxPending == 0 {
		maxPending = -1
	}
	if cfg.InactiveThreshold == 0 && info.Config.Retention != jetstream.InterestPolicy {
		cfg.InactiveThreshold = DefaultInactiveThreshold
	}
	// DeliverAll lets a reset move the consumer to any sequence; AckAll lets one acknowledgement per
	// checkpoint cover every message before it. A work-queue stream takes only explicit acknowledgements.
	r.explicit = info.Config.Retention == jetstream.WorkQueuePolicy
	ackPolicy := jetstream.AckAllPolicy
	if r.explicit {
		ackPolicy = jetstream.AckExplicitPolicy
	}
	ccfg := jetstream.ConsumerConfig{
		Durable: r.consumer, Description: "runnel source " + r.ctx.TaskName(),
		DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: ackPolicy, AckWait: ackWait,
		MaxDeliver: -1, MaxAckPending: maxPending, InactiveThreshold: max(0, cfg.InactiveThreshold),
	}
	if len(r.filters) == 1 {
		ccfg.FilterSubject = r.filters[0]
	} else {
		ccfg.FilterSubjects = r.filters
	}
	if r.explicit {
		if err := r.dropStale(r.filters); err != nil {
			return err
		}
	}
	cons, err := r.createConsumer(ccfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	// The reset drops what the consumer had delivered and not yet had acknowledged (a failed attempt's
	// messages) and sets its acknowledgement floor below start: delivery goes on in stream order from start.
	_, err = r.js.ResetConsumerToSequence(ctx, cfg.Stream, r.consumer, start)
	if err != nil {
		return fmt.Errorf("nats source: reset consumer %q of %s to sequence %d: %w (the source needs nats-server 2.14 or later)", r.consumer, r.where(), start, err)
	}
	if r.it, err = cons.Messages(jetstream.PullMaxMessages(pollBatch)); err != nil {
		return fmt.Errorf("nats source: pull from consumer %q of %s: %w", r.consumer, r.where(), err)
	}
	r.done = make(chan struct{})
	go r.pull()
	return nil
}

// jsErrWQConsumerNotUnique is the server's error code for a consumer whose subjects overlap another
// consumer's on a work-queue stream.
const jsErrWQConsumerNotUnique = 10100

// createConsumer creates or updates the subtask's consumer, and deletes the consumers a run of the source
// at another parallelism left (their names say so). On a work-queue stream, whose consumers' subjects must
// not overlap, those keep the new consumers out until they are gone; so does, for a moment, the consumer
// of a sibling subtask that an earlier run at this parallelism left with other subjects, until the
// sibling, starting too, drops it (dropStale): the creation is tried again for up to requestTimeout.
func (r *sourceReader[T]) createConsumer(ccfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	deadline := time.Now().Add(requestTimeout)
	wait, othersDeleted := 20*time.Millisecond, false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		cons, err := r.js.CreateOrUpdateConsumer(ctx, r.src.cfg.Stream, ccfg)
		cancel()
		if err == nil {
			return cons, r.deleteOthers()
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrWQConsumerNotUnique || time.Now().After(deadline) {
			return nil, fmt.Errorf("nats source: create consumer %q on %s: %w (a consumer of that name made otherwise, or one of other subjects that overlap, must be deleted; or set SourceConfig.ConsumerPrefix)", r.consumer, r.where(), err)
		}
		if !othersDeleted {
			if err := r.deleteOthers(); err != nil {
				return nil, err
			}
			othersDeleted = true
			continue
		}
		time.Sleep(wait)
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// dropStale deletes, on a work-queue stream, the subtask's consumer when an earlier run left it with other
// subject filters than want (none: the subtask reads nothing now): the subjects may be a sibling's now, and
// a work queue lets no two consumers share one. Nothing is lost: the messages it had been delivered and
// not acknowledged stay in the stream, and the new consumer is reset to where the subtask starts anyway.
func (r *sourceReader[T]) dropStale(want []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	c, err := r.stream.Consumer(ctx, r.consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nats source: consumer %q of %s: %w", r.consumer, r.where(), err)
	}
	if sameFilters(consumerFilters(c.CachedInfo().Config), want) {
		return nil
	}
	if err := r.stream.DeleteConsumer(ctx, r.consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("nats source: delete consumer %q of %s, left by an earlier run with other subjects: %w", r.consumer, r.where(), err)
	}
	return nil
}

// consumerFilters returns the subject filters of a consumer's configuration (none: the whole stream).
func consumerFilters(c jetstream.ConsumerConfig) []string {
	if c.FilterSubject != "" {
		return []string{c.FilterSubject}
	}
	return c.FilterSubjects
}

// sameFilters reports whether two lists of subject filters name the same subjects ("" is the whole
// stream, as no filter).
func sameFilters(a, b []string) bool {
	set := func(fs []string) []string {
		out := slices.DeleteFunc(slices.Clone(fs), func(f string) bool { return f == "" })
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(set(a), set(b))
}

// consumerName names the consumer of subtask i of p.
func consumerName(prefix string, i, p int) string {
	return prefix + "_" + strconv.Itoa(i) + "_" + strconv.Itoa(p)
}

// otherRun reports whether consumer name is one of the source's at another parallelism than p: named by
// consumerName, or prefix_i (a consumer of the source's older versions).
func otherRun(name, prefix string, p int) bool {
	rest, ok := strings.CutPrefix(name, prefix+"_")
	if !ok {
		return false
	}
	num := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || strconv.Itoa(n) != s {
			return -1
		}
		return n
	}
	is, ps, two := strings.Cut(rest, "_")
	if !two {
		return num(is) >= 0
	}
	i, q := num(is), num(ps)
	return i >= 0 && i < q && q != p
}

// deleteOthers deletes the consumers a run of the source at another parallelism left. Their messages stay
// on a stream with limits or work-queue retention; on one with interest retention a consumer goes only
// once the consumers of today's subtasks have every subject it had, so that no message loses the last
// interest in it (the subtask that creates the last of them deletes it).
func (r *sourceReader[T]) deleteOthers() error {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	p := r.ctx.Parallelism()
	names := r.stream.ConsumerNames(ctx)
	var others []string
	for name := range names.Name() {
		if otherRun(name, r.prefix, p) {
			others = append(others, name)
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("nats source: list the consumers of %s: %w", r.where(), err)
	}
	interest := r.stream.CachedInfo().Config.Retention == jetstream.InterestPolicy
	for _, name := range others {
		if interest {
			ok, err := r.covered(ctx, name)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
		}
		if err := r.stream.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("nats source: delete consumer %q of %s, left by a run at another parallelism: %w", name, r.where(), err)
		}
	}
	return nil
}

// covered reports whether every subject filter of consumer name is a filter of the consumer of the
// subtask that reads it now.
func (r *sourceReader[T]) covered(ctx context.Context, name string) (bool, error) {
	filtersOf := func(name string) ([]string, error) {
		c, err := r.stream.Consumer(ctx, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("nats source: consumer %q of %s: %w", name, r.where(), err)
		}
		cfg := c.CachedInfo().Config
		if len(cfg.FilterSubjects) > 0 {
			return cfg.FilterSubjects, nil
		}
		return []string{cfg.FilterSubject}, nil
	}
	old, err := filtersOf(name)
	if err != nil {
		return false, err
	}
	p := r.ctx.Parallelism()
	for _, f := range old {
		j := slices.Index(r.src.cfg.Subjects, f)
		if j < 0 && (f != "" || len(r.src.cfg.Subjects) > 0) {
			return false, nil // a subject the source does not read now: the consumer stays for it
		}
		now, err := filtersOf(consumerName(r.prefix, max(j, 0)%p, p))
		if err != nil || !slices.Contains(now, f) {
			return false, err
		}
	}
	return true, nil
}

// pull runs on its own goroutine until the iterator stops: it hands the messages over to PollNext.
func (r *sourceReader[T]) pull() {
	defer close(r.done)
	for {
		msg, err := r.it.Next()
		if err != nil {
			if r.stopped.Load() {
				return
			}
			r.mu.Lock()
			r.err = fmt.Errorf("nats source: read consumer %q of %s: %w", r.consumer, r.where(), err)
			r.mu.Unlock()
			r.signal(r.ready)
			return
		}
		r.mu.Lock()
		r.fetched = append(r.fetched, msg)
		backlog := len(r.fetched)
		r.mu.Unlock()
		r.signal(r.ready)
		// Do not run far ahead of the task: past a few polls' worth, wait until it takes them. The
		// iterator's buffer then fills and it stops pulling.
		for backlog >= 4*pollBatch && !r.stopped.Load() {
			select {
			case <-r.room:
			case <-time.After(10 * time.Millisecond): // look at stopped again
			}
			r.mu.Lock()
			backlog = len(r.fetched)
			r.mu.Unlock()
		}
	}
}

func (r *sourceReader[T]) signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// PollNext implements runnel.SourceReader: it emits the messages pulled since the last poll.
func (r *sourceReader[T]) PollNext(out runnel.Collector[T]) (runnel.InputStatus, error) {
	if !r.started {
		if err := r.start(); err != nil {
			return runnel.EndOfInput, err
		}
	}
	if len(r.filters) == 0 {
		// An unbounded subtask without subjects idles (and takes part in checkpoints).
		if r.src.cfg.Bounded {
			return runnel.EndOfInput, nil
		}
		return runnel.NothingAvailable, nil
	}
	if r.finished {
		r.stop()
		if !r.ctx.Checkpointing() {
			r.removeConsumers() // nothing will be restored
		}
		return runnel.EndOfInput, nil
	}
	r.mu.Lock()
	batch, err := r.fetched, r.err
	if len(batch) > pollBatch {
		batch = batch[:pollBatch:pollBatch]
		r.fetched = r.fetched[pollBatch:]
	} else {
		r.fetched = nil
	}
	more := len(r.fetched) > 0
	r.mu.Unlock()
	r.signal(r.room)
	if len(batch) == 0 {
		if err != nil {
			return runnel.EndOfInput, err
		}
		if r.src.cfg.Bounded {
			done, err := r.quietEnd()
			if err != nil {
				return runnel.EndOfInput, err
			}
			if done {
				r.finished = true
				r.stop()
				if !r.ctx.Checkpointing() {
					r.removeConsumers() // nothing will be restored
				}
				return runnel.EndOfInput, nil
			}
		}
		return runnel.NothingAvailable, nil
	}
	r.quietSince = time.Time{}
	splits, _ := out.(runnel.SplitOutput[T])
	if len(r.filters) < 2 {
		splits = nil // one split: the source's own watermark is the split's
	}
	if splits != nil && !r.announced {
		// Every split counts from the start, so that one read first does not carry the watermark past
		// the messages of those not read yet.
		r.announced = true
		for _, j := range r.splits {
			splits.ForSplit(j)
		}
	}
	moved := false // lastMsg moved on: without checkpoints, acknowledge it at once
	for _, m := range batch {
		md, err := m.Metadata()
		if err != nil {
			return runnel.EndOfInput, fmt.Errorf("nats source: message on %q from consumer %q of %s: %w", m.Subject(), r.consumer, r.where(), err)
		}
		seq := md.Sequence.Stream
		if seq <= r.last {
			// Delivered again (its acknowledgement waits for a checkpoint that took longer than AckWait,
			// or the restored checkpoint covered it): the state has it already. On a work queue it may be
			// one the restored checkpoint covered and whose acknowledgement was lost: acknowledge it again.
			r.dropped.Inc()
			if r.explicit {
				r.replies = append(r.replies, m.Reply())
			}
			continue
		}
		if r.src.cfg.Bounded && seq > r.end {
			r.finished = true // stored after the subtask started; delivery is in stream order
			break
		}
		// Up to the largest restored position, a message may be of a filter whose position is past it:
		// after a rescale the subtask that read that filter had got further. The state has it already.
		if seq > r.maxPos || seq > r.pos[r.filters[r.filterOf(m.Subject())]] {
			msg := Msg{Subject: m.Subject(), Data: m.Data(), Header: m.Headers(), Sequence: seq, Time: md.Timestamp}
			if msg.Header != nil {
				msg.ID = msg.Header.Get(jetstream.MsgIDHeader)
			}
			v, err := r.src.decode(msg)
			if err != nil {
				return runnel.EndOfInput, fmt.Errorf("nats source: decode message %d of stream %q (subject %q): %w", seq, r.src.cfg.Stream, msg.Subject, err)
			}
			c := out
			if splits != nil {
				c = splits.ForSplit(r.splits[r.filterOf(msg.Subject)])
			}
			if tc, ok := c.(runnel.TimestampedCollector[T]); ok {
				tc.CollectWithTimestamp(v, md.Timestamp.UnixMilli())
			} else {
				c.Collect(v)
			}
		}
		r.last, r.lastMsg, moved = seq, m, true
		if r.explicit {
			r.replies = append(r.replies, m.Reply())
		}
		if r.src.cfg.Bounded {
			if seq >= r.end {
				r.finished = true
				break
			}
			if md.NumPending == 0 {
				// The server counts nothing left, short of the end: the end's message may be gone (a
				// stream with limits deletes messages), or the count fell short. The stream says which.
				more, err := r.moreUpToEnd(seq)
				if err != nil {
					return runnel.EndOfInput, err
				}
				if !more {
					r.finished = true
					break
				}
			}
		}
	}
	if !r.ctx.Checkpointing() {
		// Without checkpoints nothing will be restored: acknowledge what was emitted at once.
		var err error
		if r.explicit {
			err = r.ackReplies(r.replies)
			r.replies = r.replies[:0]
		} else if moved {
			err = r.lastMsg.Ack()
		}
		if err != nil {
			r.ctx.Logger().Warn("nats source: acknowledge", "consumer", r.consumer, "stream", r.src.cfg.Stream, "seq", r.last, "err", err)
		}
		if r.finished {
			r.removeConsumers()
		}
	}
	if r.finished {
		r.stop()
		return runnel.EndOfInput, nil
	}
	if more {
		return runnel.MoreAvailable, nil
	}
	return runnel.NothingAvailable, nil
}

// filterOf returns the index in filters of the filter that subject matches.
func (r *sourceReader[T]) filterOf(subject string) int {
	if len(r.filters) > 1 {
		for k, f := range r.filters {
			if subjectMatches(f, subject) {
				return k
			}
		}
	}
	return 0 // the server delivered only matching subjects
}

// Available implements runnel.SourceReader.
func (r *sourceReader[T]) Available() <-chan struct{} { return r.ready }

// ReplaysDeterministically implements runnel.DeterministicReader: one consumer delivers the messages of
// all of the subtask's filters in stream order, from the restored positions on. A filter without a
// restored position starts from the same place again only at the oldest message of a stream that keeps
// acknowledged messages.
func (r *sourceReader[T]) ReplaysDeterministically() bool {
	if !r.started {
		r.takeRestored()
	}
	all := true
	for _, f := range r.filters {
		_, ok := r.pos[f]
		all = all && ok
	}
	return r.restored && all || r.src.cfg.StartAt == Earliest && !r.workQueue()
}

func (r *sourceReader[T]) workQueue() bool {
	info, err := r.streamInfo()
	return err != nil || info.Config.Retention == jetstream.WorkQueuePolicy
}

// positionsState names the union list state of the source's positions.
const positionsState = "nats-positions"

// position is one element of the positions state: subject filter Filter ("" for the whole stream) was read
// up to stream sequence Last, or, without Read, not at all yet (the subtask had not started). Every
// subtask snapshots its filters, so the state lists every filter of the source, and, once the job started
// (or was restored), the element startedMarker: a restored subtask without a position for one of its
// filters, even one that read nothing before, knows that the filters changed.
type position struct {
	Filter string
	Last   uint64
	Read   bool
}

// startedMarker is the Filter of the element that says the job started; no subject filter is.
const startedMarker = "\x00started"

// takeRestored reads the restored positions (the state is restored after CreateReader) into pos, once. A
// restore at another parallelism gives every subtask every position; it takes those of its filters. The
// filters must be the ones the source reads now: a position says nothing about subjects it was not taken
// for.
func (r *sourceReader[T]) takeRestored() {
	if r.tookRestored {
		return
	}
	r.tookRestored = true
	elems := r.state.Get()
	if len(elems) == 0 {
		return
	}
	r.restored = true
	read := map[string]uint64{}
	var had []string
	for _, e := range elems {
		if e.Filter == startedMarker || slices.Contains(had, e.Filter) {
			continue
		}
		had = append(had, e.Filter)
		if e.Read {
			read[e.Filter] = e.Last
		}
	}
	// A restore at the same parallelism gives a subtask its own elements, at another one every subtask's.
	want := r.src.cfg.Subjects
	if len(want) == 0 {
		want = []string{""}
	}
	for _, f := range had {
		if !slices.Contains(want, f) {
			r.restoreErr = fmt.Errorf("nats source: the checkpoint read subject filter %q of %s, which SourceConfig.Subjects %q does not have: a position says nothing about subjects it was not taken for; restore with the subject filters it was taken with (the parallelism may change)", f, r.where(), r.src.cfg.Subjects)
			return
		}
	}
	for _, f := range r.filters {
		if !slices.Contains(had, f) {
			r.restoreErr = fmt.Errorf("nats source: subject filter %q of %s is new to the checkpoint, which read %q: a position says nothing about subjects it was not taken for; restore with the subject filters it was taken with (the parallelism may change)", f, r.where(), had)
			return
		}
	}
	for _, f := range r.filters {
		if last, ok := read[f]; ok {
			r.pos[f] = last
		}
	}
}

// SnapshotState implements runnel.CheckpointedReader: the position of each filter goes to the union list
// state (so that a restore at another parallelism can redistribute them), not into the reader's own bytes,
// which stay empty. It also notes the messages to acknowledge when checkpoint id completes.
func (r *sourceReader[T]) SnapshotState(id int64) ([]byte, error) {
	if r.finished && r.endSnapshot == 0 {
		r.endSnapshot = id
	}
	if !r.started {
		// A checkpoint before the first poll: the restored positions go on as they came.
		r.takeRestored()
		if r.restoreErr != nil {
			return nil, r.restoreErr
		}
	}
	if r.explicit {
		if len(r.replies) > 0 {
			r.acks = append(r.acks, pendingAck{id: id, replies: r.replies})
			r.replies = nil
		}
	} else if r.lastMsg != nil && (len(r.acks) == 0 || r.acks[len(r.acks)-1].msg != r.lastMsg) {
		r.acks = append(r.acks, pendingAck{id: id, msg: r.lastMsg})
	}
	elems := make([]position, 0, len(r.filters)+1)
	if r.started || r.restored {
		elems = append(elems, position{Filter: startedMarker})
	}
	for _, f := range r.filters {
		last, ok := r.pos[f]
		if r.started && ok {
			last = max(last, r.last) // every message of f up to last was read, in stream order
		}
		elems = append(elems, position{Filter: f, Last: last, Read: ok})
	}
	r.state.Update(elems)
	return nil, nil
}

// sourceStateVersion starts the reader's checkpointed bytes of the source's older format.
const sourceStateVersion = 1

// RestoreState implements runnel.CheckpointedReader for checkpoints of the source before its positions
// were list state: the stream sequence the subtask had read up to, and its subject filters, which must be
// the ones it reads now (such a checkpoint restores at its own parallelism only).
func (r *sourceReader[T]) RestoreState(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	bad := fmt.Errorf("nats source: malformed checkpointed position % x", b)
	if b[0] != sourceStateVersion {
		return bad
	}
	b = b[1:]
	last, k := binary.Uvarint(b)
	if k <= 0 {
		return bad
	}
	b = b[k:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return bad
	}
	b = b[k:]
	var filters []string
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b[k:])) {
			return bad
		}
		filters, b = append(filters, string(b[k:k+int(l)])), b[k+int(l):]
	}
	if len(b) != 0 {
		return bad
	}
	if !slices.Equal(filters, r.filters) {
		return fmt.Errorf("nats source: the checkpoint of subtask %d read %s with subject filters %q, but it reads %q now: keep SourceConfig.Subjects and the parallelism", r.ctx.SubtaskIndex(), r.where(), filters, r.filters)
	}
	r.restored = true
	for _, f := range filters {
		r.pos[f] = last
	}
	return nil
}

// NotifyCheckpointComplete implements runnel.CheckpointListener: it acknowledges the last message the
// completed checkpoint covers, and with it (AckAll) every one before. An acknowledgement that fails is
// logged: the next one covers it, and a restore resets the consumer anyway. Once a checkpoint taken after
// the end of a bounded read completed, no restore reads again what the subtask read: it deletes its
// consumer.
func (r *sourceReader[T]) NotifyCheckpointComplete(id int64) error {
	var ack jetstream.Msg
	var replies []string
	n := 0
	for n < len(r.acks) && r.acks[n].id <= id {
		ack = r.acks[n].msg
		replies = append(replies, r.acks[n].replies...)
		n++
	}
	r.acks = r.acks[n:]
	if len(replies) > 0 {
		if err := r.ackReplies(replies); err != nil {
			r.ctx.Logger().Warn("nats source: acknowledge the messages of a completed checkpoint", "checkpoint", id,
				"consumer", r.consumer, "stream", r.src.cfg.Stream, "err", err)
		}
	} else if ack != nil {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		err := ack.DoubleAck(ctx)
		cancel()
		if err != nil {
			md, _ := ack.Metadata()
			var seq uint64
			if md != nil {
				seq = md.Sequence.Stream
			}
			r.ctx.Logger().Warn("nats source: acknowledge the messages of a completed checkpoint", "checkpoint", id,
				"consumer", r.consumer, "stream", r.src.cfg.Stream, "seq", seq, "err", err)
		}
	}
	if r.endSnapshot != 0 && id >= r.endSnapshot {
		r.removeConsumers()
	}
	return nil
}

// removeConsumers deletes the consumer of a subtask that finished its bounded read for good, and those a
// run at another parallelism left. A failure is logged: the consumer goes after InactiveThreshold then.
func (r *sourceReader[T]) removeConsumers() {
	if r.removed || len(r.filters) == 0 {
		return
	}
	r.removed = true
	r.stop()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	err := r.stream.DeleteConsumer(ctx, r.consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		err = nil
	}
	if err == nil {
		err = r.deleteOthers()
	}
	if err != nil {
		r.ctx.Logger().Warn("nats source: delete the consumers of a finished bounded read", "consumer", r.consumer, "stream", r.src.cfg.Stream, "err", err)
	}
}

// ackReplies acknowledges each message of a work queue by its reply subject, as Msg.Ack does, the last
// one as a request: the server answers once it processed it, and with it (in order) those before, so that
// the messages are gone when it returns.
func (r *sourceReader[T]) ackReplies(replies []string) error {
	if len(replies) == 0 {
		return nil
	}
	for _, reply := range replies[:len(replies)-1] {
		if err := r.nc.Publish(reply, ackPayload); err != nil {
			return err
		}
	}
	_, err := r.nc.Request(replies[len(replies)-1], ackPayload, requestTimeout)
	return err
}

// ackPayload is JetStream's positive acknowledgement.
var ackPayload = []byte("+ACK")

// stop stops the pull iterator and waits for the pull goroutine.
func (r *sourceReader[T]) stop() {
	if r.quietTimer != nil {
		r.quietTimer.Stop()
	}
	if r.it == nil || r.stopped.Swap(true) {
		return
	}
	r.it.Stop()
	<-r.done
}

// Close implements runnel.SourceReader: it stops pulling and closes the connection, after sending what
// acknowledgements it holds.
func (r *sourceReader[T]) Close() error {
	r.stopped.Store(true) // before any Stop, so that the pull goroutine takes its end for one
	if r.quietTimer != nil {
		r.quietTimer.Stop()
	}
	if r.it != nil {
		r.it.Stop()
		<-r.done
	}
	if r.nc != nil {
		_ = r.nc.FlushTimeout(time.Second)
		r.nc.Close()
	}
	return nil
}

// connect opens a connection that gives up at once when no server answers: a job retries through its
// restart strategy.
func connect(url string, opts []natsgo.Option, name string) (*natsgo.Conn, error) {
	return natsgo.Connect(url, append([]natsgo.Option{natsgo.Name(name)}, opts...)...)
}

// sanitize makes s a valid consumer name: characters other than letters, digits, '-' and '_' become '_'.
func sanitize(s string) string {
	return strings.Map(func(c rune) rune {
		if c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			return c
		}
		return '_'
	}, s)
}

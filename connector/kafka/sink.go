package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
)

// DeliveryGuarantee says what the Kafka sink promises about the records of a job that fails and restarts
// from a checkpoint (Flink's DeliveryGuarantee).
type DeliveryGuarantee int

// The delivery guarantees of the Kafka sink.
const (
	// AtLeastOnce (the default) waits at every checkpoint until Kafka acknowledged every record written
	// before its barrier: nothing a completed checkpoint covers is lost, and the records written after
	// the checkpoint a job restarts from are written again (duplicates).
	AtLeastOnce DeliveryGuarantee = iota
	// ExactlyOnce writes the records of each checkpoint's epoch in a Kafka transaction, prepared at the
	// checkpoint's barrier and committed when the checkpoint completes: a read_committed consumer sees
	// every record once, one checkpoint interval (plus the checkpoint's duration) after it was written.
	// It needs periodic checkpoints and SinkConfig.TransactionalIDPrefix.
	ExactlyOnce
	// None hands records to the producer and waits for nothing at checkpoints (only at the end of a
	// bounded input): records the producer still held when the job failed are lost, records written
	// after the restored checkpoint come again.
	None
)

func (g DeliveryGuarantee) String() string {
	switch g {
	case AtLeastOnce:
		return "at-least-once"
	case ExactlyOnce:
		return "exactly-once"
	case None:
		return "none"
	}
	return fmt.Sprintf("DeliveryGuarantee(%d)", int(g))
}

// Defaults of SinkConfig.
const (
	// DefaultTransactionTimeout is the transaction timeout of an exactly-once sink: the broker's default
	// transaction.max.timeout.ms, the largest it allows unless raised, as Flink recommends.
	DefaultTransactionTimeout = 15 * time.Minute
	// DefaultRecoveryTime is how long an exactly-once sink assumes a checkpoint takes to complete and, if
	// the job fails meanwhile, the job takes to restart and restore: see SinkConfig.RecoveryTime.
	DefaultRecoveryTime = time.Minute
)

// SinkConfig configures a Kafka sink.
type SinkConfig struct {
	// Brokers are the seed brokers ("host:port"); required.
	Brokers []string
	// Topic is the topic written to; required.
	Topic string
	// Guarantee is the delivery guarantee: AtLeastOnce (default), ExactlyOnce or None.
	Guarantee DeliveryGuarantee
	// TransactionalIDPrefix starts the transactional ids of an exactly-once sink; required with it, and
	// unique per job and sink: the ids are PREFIX-SUBTASK-K (K numbers each subtask's few producers), and
	// a job that starts aborts every open transaction under its prefix that it does not commit.
	TransactionalIDPrefix string
	// TransactionTimeout is the timeout of the exactly-once sink's transactions (default 15 minutes):
	// Kafka aborts a transaction that stays open longer, and its records are lost. A job is refused at
	// submission when it is shorter than the checkpoint interval plus RecoveryTime. The broker's
	// transaction.max.timeout.ms (15 minutes by default) caps it: a longer one fails the first write.
	TransactionTimeout time.Duration
	// RecoveryTime is the time, on top of the checkpoint interval, that a transaction must survive: the
	// checkpoint's completion after the barrier and, when the job fails before the commit, detecting the
	// failure, the restart delay and the restore that commits it (default 1 minute). Only the submission
	// check reads it.
	RecoveryTime time.Duration
	// Partition, when set, picks the partition of each record among the topic's partitions, in
	// [0, partitions). Without it a record with a key goes to the partition of the murmur2 hash of its key,
	// as Kafka's Java producer does, and records without a key are spread in sticky batches.
	Partition func(r *kgo.Record, partitions int) int
	// Linger is how long the producer may wait to fill a batch (default 5 ms).
	Linger time.Duration
	// FlushTimeout bounds the wait for acknowledgements at a checkpoint or the end of input, and for each
	// commit or abort (default 30 s).
	FlushTimeout time.Duration
	// ClientOptions are passed to every Kafka client the sink makes.
	ClientOptions []kgo.Opt
}

func (c *SinkConfig) check() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("kafka sink: no brokers: set SinkConfig.Brokers"))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("kafka sink: no topic: set SinkConfig.Topic"))
	}
	if c.Linger < 0 || c.FlushTimeout < 0 {
		errs = append(errs, fmt.Errorf("kafka sink: negative Linger %s or FlushTimeout %s", c.Linger, c.FlushTimeout))
	}
	switch c.Guarantee {
	case AtLeastOnce, None:
	case ExactlyOnce:
		if c.TransactionalIDPrefix == "" {
			errs = append(errs, errors.New("kafka sink: exactly-once needs SinkConfig.TransactionalIDPrefix, unique per job and sink"))
		}
		if c.TransactionTimeout < 0 || c.RecoveryTime < 0 {
			errs = append(errs, fmt.Errorf("kafka sink: negative TransactionTimeout %s or RecoveryTime %s", c.TransactionTimeout, c.RecoveryTime))
		}
	default:
		errs = append(errs, fmt.Errorf("kafka sink: %s is not a delivery guarantee; use AtLeastOnce, ExactlyOnce or None", c.Guarantee))
	}
	return errors.Join(errs...)
}

func (c *SinkConfig) txnTimeout() time.Duration {
	if c.TransactionTimeout == 0 {
		return DefaultTransactionTimeout
	}
	return c.TransactionTimeout
}

func (c *SinkConfig) recoveryTime() time.Duration {
	if c.RecoveryTime == 0 {
		return DefaultRecoveryTime
	}
	return c.RecoveryTime
}

// Sink writes records to cfg.Topic. encode appends a record's key and value to the given slices (which it
// may grow) and returns them; an empty key lets the partitioner spread the record. The slices are reused
// once Kafka acknowledged the record, so the sink allocates nothing per record in steady state. On a
// stream with event time a record's timestamp is its event time.
func Sink[T any](cfg SinkConfig, encode func(v T, key, value []byte) ([]byte, []byte, error)) runnel.Sink[T] {
	if encode == nil {
		return &sink[T]{cfg: cfg}
	}
	return &sink[T]{cfg: cfg, encode: func(v T, r *kgo.Record) error {
		key, value, err := encode(v, r.Key, r.Value)
		r.Key, r.Value = key, value
		if len(key) == 0 {
			r.Key = nil // no key: the partitioner spreads the record
		}
		return err
	}}
}

// RecordSink writes records to cfg.Topic, each made by encode into r: Key and Value (empty, to append
// to), Headers (empty, to append to), Timestamp (the record's event time on a stream with event time,
// else zero, which stands for the time it is produced) and, when cfg.Partition is nil and the client
// options set kgo.ManualPartitioner, Partition. A nil Key lets the partitioner spread the record. The
// record and its slices are reused once Kafka acknowledged it.
func RecordSink[T any](cfg SinkConfig, encode func(v T, r *kgo.Record) error) runnel.Sink[T] {
	return &sink[T]{cfg: cfg, encode: encode}
}

type sink[T any] struct {
	cfg    SinkConfig
	encode func(T, *kgo.Record) error
}

// CheckJob implements runnel.JobChecker: an exactly-once sink needs periodic checkpoints, and
// transactions that outlive a checkpoint interval plus the recovery time.
func (s *sink[T]) CheckJob(js runnel.JobSettings) error {
	if err := s.cfg.check(); err != nil {
		return err
	}
	if s.cfg.Guarantee != ExactlyOnce {
		return nil
	}
	interval := js.Checkpoint.Interval
	if interval <= 0 {
		return errors.New("kafka sink: exactly-once commits its transactions when checkpoints complete, and the job takes no periodic checkpoints: set CheckpointConfig.Interval (--checkpoint-interval), or use AtLeastOnce")
	}
	timeout, recovery := s.cfg.txnTimeout(), s.cfg.recoveryTime()
	if timeout < interval+recovery {
		return fmt.Errorf("kafka sink: the transaction timeout %s (SinkConfig.TransactionTimeout) is shorter than the checkpoint interval %s plus the recovery time %s (SinkConfig.RecoveryTime) that a transaction must survive; Kafka would abort transactions whose checkpoint completed, losing their records: set a timeout of at least %s, at most the broker's transaction.max.timeout.ms (15 minutes by default), or checkpoint more often",
			timeout, interval, recovery, interval+recovery)
	}
	return nil
}

// CreateWriter implements runnel.Sink.
func (s *sink[T]) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[T], error) {
	if err := s.cfg.check(); err != nil {
		return nil, err
	}
	if s.encode == nil {
		return nil, errors.New("kafka sink: nil encode function")
	}
	if s.cfg.Guarantee == ExactlyOnce && !ctx.Checkpointing() {
		return nil, errors.New("kafka sink: exactly-once needs periodic checkpoints, and the job takes none")
	}
	w := &sinkWriter[T]{s: s, rctx: ctx}
	w.done = w.acked
	if s.cfg.Guarantee == ExactlyOnce {
		w.txn = s.newTxnWriter(&s.cfg, ctx.SubtaskIndex(), ctx.Parallelism(), ctx.Logger())
		return w, nil
	}
	cl, err := kgo.NewClient(s.clientOpts()...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	w.cl = cl
	return w, nil
}

// Settle implements runnel.Settler: after a job ended failed or cancelled, it settles what subtask
// st.Subtask left open as a restore from st's checkpoint would (see settle).
func (s *sink[T]) Settle(ctx context.Context, st runnel.Settlement) error {
	return s.settle(ctx, st.State, st.Subtask, st.Parallelism, st.Logger)
}

// settle settles, with no writer running, the transactions of subtask sub: it commits those its
// exactly-once state b lists and aborts every other open one of the subtask (txnWriter.start). A sink
// that is not exactly once, with no exactly-once state to settle, does nothing.
func (s *sink[T]) settle(ctx context.Context, b []byte, sub, par int, log *slog.Logger) error {
	var rs *restoredState
	cfg := s.cfg
	if len(b) > 0 {
		d, err := decodeTxnState(b)
		if err != nil {
			return err
		}
		rs = &d
		if cfg.Guarantee != ExactlyOnce {
			cfg.TransactionalIDPrefix = d.prefix
		}
	}
	if rs == nil && cfg.Guarantee != ExactlyOnce {
		return nil
	}
	t := s.newTxnWriter(&cfg, sub, par, log)
	t.base = ctx
	err := t.start(rs)
	return errors.Join(err, t.close())
}

// flushTimeout is SinkConfig.FlushTimeout or its default.
func (s *sink[T]) flushTimeout() time.Duration {
	if s.cfg.FlushTimeout == 0 {
		return 30 * time.Second
	}
	return s.cfg.FlushTimeout
}

// newTxnWriter makes the transactions of subtask sub, under cfg (the sink's, or one with the prefix of
// restored state).
func (s *sink[T]) newTxnWriter(cfg *SinkConfig, sub, par int, log *slog.Logger) *txnWriter {
	return &txnWriter{cfg: cfg, sub: sub, par: par, log: log, timeout: s.flushTimeout(), opts: s.clientOpts, pool: map[int]*txnProducer{}}
}

// clientOpts are the options of the sink's producers: the user's last, so that they win.
func (s *sink[T]) clientOpts() []kgo.Opt {
	cfg := &s.cfg
	linger := cfg.Linger
	if linger == 0 {
		linger = 5 * time.Millisecond
	}
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.DefaultProduceTopic(cfg.Topic), kgo.ProducerLinger(linger)}
	if f := cfg.Partition; f != nil {
		opts = append(opts, kgo.RecordPartitioner(kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
			return f
		})))
	}
	return append(opts, cfg.ClientOptions...)
}

type sinkWriter[T any] struct {
	s    *sink[T]
	rctx runnel.RuntimeContext
	done func(*kgo.Record, error) // w.acked, made once
	cl   *kgo.Client              // the producer of AtLeastOnce and None
	txn  *txnWriter               // the transactions of ExactlyOnce

	mu   sync.Mutex
	free []*kgo.Record // acknowledged records, for reuse
	err  error         // the first failed write, reported at the next call
}

// acked is the produce callback (on a client goroutine): it keeps the first error and recycles the record.
func (w *sinkWriter[T]) acked(rec *kgo.Record, err error) {
	w.mu.Lock()
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("kafka sink: write to %s: %w", w.s.cfg.Topic, err)
	}
	rec.Key, rec.Value, rec.Headers = rec.Key[:0], rec.Value[:0], rec.Headers[:0]
	w.free = append(w.free, rec)
	w.mu.Unlock()
}

// Write implements runnel.SinkWriter: it hands the record to the producer, which sends it in a batch.
func (w *sinkWriter[T]) Write(v T) error { return w.write(v, time.Time{}) }

// WriteTimed implements runnel.TimestampedWriter: on a stream with event time the Kafka record's
// timestamp is the record's event time.
func (w *sinkWriter[T]) WriteTimed(v T, ts int64) error { return w.write(v, time.UnixMilli(ts)) }

func (w *sinkWriter[T]) write(v T, ts time.Time) error {
	w.mu.Lock()
	err := w.err
	var rec *kgo.Record
	if n := len(w.free); n > 0 {
		rec, w.free = w.free[n-1], w.free[:n-1]
	}
	w.mu.Unlock()
	if err != nil {
		return err
	}
	cl := w.cl
	if w.txn != nil {
		if cl, err = w.txn.current(); err != nil {
			return err
		}
	}
	if rec == nil {
		rec = &kgo.Record{}
	}
	rec.Topic, rec.Partition, rec.Offset, rec.Timestamp = "", 0, 0, ts
	if err := w.s.encode(v, rec); err != nil {
		w.acked(rec, nil)
		return fmt.Errorf("kafka sink: encode: %w", err)
	}
	cl.Produce(context.Background(), rec, w.done)
	return nil
}

// flush waits until Kafka acknowledged every record cl was given.
func (w *sinkWriter[T]) flush(cl *kgo.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.s.flushTimeout())
	defer cancel()
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("kafka sink: flush %s: %w", w.s.cfg.Topic, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Flush implements runnel.SinkWriter: at the end of the input it waits until Kafka acknowledged every
// record written so far. The transaction of an exactly-once sink stays open: the final checkpoint, which
// follows, prepares it and commits it.
func (w *sinkWriter[T]) Flush() error {
	if w.txn != nil {
		if w.txn.cur == nil {
			return nil
		}
		return w.flush(w.txn.cur.cl)
	}
	return w.flush(w.cl)
}

// SnapshotState implements runnel.CheckpointedWriter. At least once, a checkpoint completes only once
// every record written before its barrier is acknowledged; exactly once, the transaction of the epoch
// the barrier ends is flushed and left open (prepared), and listed in the state, for the checkpoint's
// completion (or the restore of the checkpoint) to commit.
func (w *sinkWriter[T]) SnapshotState(id int64) ([]byte, error) {
	switch {
	case w.txn != nil:
		if c := w.txn.cur; c != nil {
			if err := w.flush(c.cl); err != nil {
				return nil, err
			}
		}
		return w.txn.snapshot(id)
	case w.s.cfg.Guarantee == None:
		w.mu.Lock()
		defer w.mu.Unlock()
		return nil, w.err
	}
	return nil, w.flush(w.cl)
}

// RestoreState implements runnel.CheckpointedWriter: exactly once, it commits the transactions the
// restored checkpoint lists and aborts every other open one of this subtask. The guarantee may change
// across a savepoint: an exactly-once sink restored from an at-least-once one's state starts afresh, and
// an at-least-once or no-guarantee sink restored from an exactly-once one's state settles its
// transactions as exactly once would, then writes without.
func (w *sinkWriter[T]) RestoreState(b []byte) error {
	if w.txn != nil {
		if len(b) == 0 {
			return nil
		}
		return w.txn.restore(b)
	}
	if len(b) == 0 {
		return nil
	}
	return w.s.settle(context.Background(), b, w.rctx.SubtaskIndex(), w.rctx.Parallelism(), w.rctx.Logger())
}

// NotifyCheckpointComplete implements runnel.CheckpointListener: exactly once, it commits the
// transactions prepared for checkpoints up to id.
func (w *sinkWriter[T]) NotifyCheckpointComplete(id int64) error {
	if w.txn == nil {
		return nil
	}
	return w.txn.commitUpTo(id)
}

// NotifyCheckpointAborted implements runnel.CheckpointAbortListener: exactly once, it notes that the
// checkpoint can never complete. The transaction prepared for it stays open while the subtask runs (the
// next checkpoint lists it too, and its completion commits it); Close aborts it if every later checkpoint
// the subtask took was aborted as well.
func (w *sinkWriter[T]) NotifyCheckpointAborted(id int64) error {
	if w.txn != nil {
		w.txn.aborted(id)
	}
	return nil
}

// Close implements runnel.SinkWriter: it closes the clients. At least once, records not yet acknowledged
// may be lost (a failing or cancelled job; its checkpoint did not complete). Exactly once, it aborts the
// open transaction and the prepared ones whose checkpoints it heard aborted (with every later one it took);
// the other prepared ones stay for the restore to settle (see txnWriter.close).
func (w *sinkWriter[T]) Close() error {
	if w.txn != nil {
		return w.txn.close()
	}
	w.cl.Close()
	return nil
}

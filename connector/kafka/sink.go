package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
)

// SinkConfig configures a Kafka sink.
type SinkConfig struct {
	// Brokers are the seed brokers ("host:port"); required.
	Brokers []string
	// Topic is the topic written to; required.
	Topic string
	// Linger is how long the producer may wait to fill a batch (default 5 ms).
	Linger time.Duration
	// FlushTimeout bounds the wait for acknowledgements at a checkpoint or the end of input (default 30 s).
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
	return errors.Join(errs...)
}

// Sink writes records to cfg.Topic. encode appends a record's key and value to the given slices (which it
// may grow) and returns them; an empty key lets the producer pick the partition. The slices are reused once Kafka
// acknowledged the record, so the sink allocates nothing per record in steady state.
func Sink[T any](cfg SinkConfig, encode func(v T, key, value []byte) ([]byte, []byte, error)) runnel.Sink[T] {
	return &sink[T]{cfg: cfg, encode: encode}
}

type sink[T any] struct {
	cfg    SinkConfig
	encode func(T, []byte, []byte) ([]byte, []byte, error)
}

// CreateWriter implements runnel.Sink.
func (s *sink[T]) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[T], error) {
	if err := s.cfg.check(); err != nil {
		return nil, err
	}
	if s.encode == nil {
		return nil, errors.New("kafka sink: nil encode function")
	}
	linger, timeout := s.cfg.Linger, s.cfg.FlushTimeout
	if linger == 0 {
		linger = 5 * time.Millisecond
	}
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.cfg.Brokers...), kgo.DefaultProduceTopic(s.cfg.Topic),
		kgo.ProducerLinger(linger)}, s.cfg.ClientOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	w := &sinkWriter[T]{s: s, cl: cl, timeout: timeout}
	w.done = w.acked
	return w, nil
}

type sinkWriter[T any] struct {
	s       *sink[T]
	cl      *kgo.Client
	timeout time.Duration
	done    func(*kgo.Record, error) // w.acked, made once

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
	rec.Key, rec.Value = rec.Key[:0], rec.Value[:0]
	w.free = append(w.free, rec)
	w.mu.Unlock()
}

// Write implements runnel.SinkWriter: it hands the record to the producer, which sends it in a batch.
func (w *sinkWriter[T]) Write(v T) error {
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
	if rec == nil {
		rec = &kgo.Record{}
	}
	key, value, err := w.s.encode(v, rec.Key[:0], rec.Value[:0])
	if err != nil {
		return fmt.Errorf("kafka sink: encode: %w", err)
	}
	rec.Key, rec.Value = key, value
	if len(key) == 0 {
		rec.Key = nil // no key: the producer picks the partition
	}
	rec.Topic, rec.Partition, rec.Offset, rec.Headers = "", 0, 0, rec.Headers[:0]
	w.cl.Produce(context.Background(), rec, w.done)
	return nil
}

// Flush implements runnel.SinkWriter: it waits until Kafka acknowledged every record written so far.
func (w *sinkWriter[T]) Flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	if err := w.cl.Flush(ctx); err != nil {
		return fmt.Errorf("kafka sink: flush %s: %w", w.s.cfg.Topic, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// SnapshotState implements runnel.CheckpointedWriter: a checkpoint completes only once every record
// written before its barrier is acknowledged. The sink keeps no state of its own.
func (w *sinkWriter[T]) SnapshotState(int64) ([]byte, error) {
	return nil, w.Flush()
}

// RestoreState implements runnel.CheckpointedWriter.
func (w *sinkWriter[T]) RestoreState([]byte) error { return nil }

// Close implements runnel.SinkWriter: it closes the client; records not yet acknowledged may be lost (a
// failing or cancelled job; its checkpoint did not complete).
func (w *sinkWriter[T]) Close() error {
	w.cl.Close()
	return nil
}

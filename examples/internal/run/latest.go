package run

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// LatestSink keeps the newest value per key that any of its writers saw: the final result of a running
// aggregate, whatever was replayed before it. Writers buffer and publish every 1024 records and at the end,
// so a summary taken after cancellation still sees recent values.
//
// It is a runnel.Accumulator: its encoding is the values kept, and merging one keeps, per key, the newer
// of the two values. That is a join (commutative, associative, idempotent) when newer is a strict total
// order on the values a key can take (irreflexive, and for two different values exactly one is newer): then
// merging computes the newest per key whatever the order and repetition of what is merged.
type LatestSink[K comparable, V any] struct {
	key   func(V) K
	newer func(a, b V) bool // a replaces b
	codec codec.Codec[V]    // nil when codecErr says why V cannot be encoded
	// codecErr is codec.For's error for V: only the accumulator methods need a codec, so a sink of a type
	// without one still works in one process.
	codecErr error

	mu     sync.Mutex
	latest map[K]V
}

// NewLatestSink makes a sink keyed by key; newer says whether a value replaces the one kept for its key.
// Values are encoded, as an accumulator, with codec.For[V].
func NewLatestSink[K comparable, V any](key func(V) K, newer func(a, b V) bool) *LatestSink[K, V] {
	c, err := codec.For[V]()
	return &LatestSink[K, V]{key: key, newer: newer, codec: c, codecErr: err, latest: map[K]V{}}
}

var _ runnel.Accumulator = (*LatestSink[int64, int64])(nil)

// Latest returns a copy of the values kept so far.
func (s *LatestSink[K, V]) Latest() map[K]V {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[K]V, len(s.latest))
	for k, v := range s.latest {
		out[k] = v
	}
	return out
}

// latestFormat is the first byte of an encoding; a decoder refuses any other, so a change of format is an
// error rather than garbage.
const latestFormat = 1

// EncodeAccumulator implements runnel.Accumulator: the format byte, the number of values as a uvarint, then
// each value's codec encoding preceded by its length as a uvarint, sorted by those bytes so that equal
// contents encode alike.
func (s *LatestSink[K, V]) EncodeAccumulator() ([]byte, error) {
	if s.codecErr != nil {
		return nil, fmt.Errorf("LatestSink: no codec for its values: %w", s.codecErr)
	}
	s.mu.Lock()
	vals := make([][]byte, 0, len(s.latest))
	var err error
	for _, v := range s.latest {
		var b []byte
		if b, err = s.codec.Append(nil, v); err != nil {
			break
		}
		vals = append(vals, b)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("LatestSink: encoding a value: %w", err)
	}
	slices.SortFunc(vals, bytes.Compare)
	out := binary.AppendUvarint([]byte{latestFormat}, uint64(len(vals)))
	for _, b := range vals {
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out, nil
}

// MergeAccumulator implements runnel.Accumulator: every value of data replaces the one kept for its key when
// it is newer. data is decoded in full before anything changes, so bad bytes leave the sink as it was.
func (s *LatestSink[K, V]) MergeAccumulator(data []byte) error {
	if s.codecErr != nil {
		return fmt.Errorf("LatestSink: no codec for its values: %w", s.codecErr)
	}
	vals, err := s.decode(data)
	if err != nil {
		return fmt.Errorf("LatestSink: accumulator of %d bytes: %w", len(data), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range vals {
		k := s.key(v)
		if old, ok := s.latest[k]; !ok || s.newer(v, old) {
			s.latest[k] = v
		}
	}
	return nil
}

func (s *LatestSink[K, V]) decode(data []byte) ([]V, error) {
	if len(data) == 0 {
		return nil, errors.New("empty")
	}
	if data[0] != latestFormat {
		return nil, fmt.Errorf("format %d, want %d", data[0], latestFormat)
	}
	rest := data[1:]
	n, k := binary.Uvarint(rest)
	if k <= 0 {
		return nil, errors.New("bad value count")
	}
	rest = rest[k:]
	// Each value takes at least its length byte: a count beyond that is corrupt, and checking it first
	// keeps a corrupt count from sizing the allocation below.
	if n > uint64(len(rest)) {
		return nil, fmt.Errorf("%d values cannot fit in %d bytes", n, len(rest))
	}
	vals := make([]V, n)
	for i := range vals {
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > uint64(len(rest)-k) {
			return nil, fmt.Errorf("value %d of %d: length runs past the end", i, n)
		}
		rest = rest[k:]
		if err := s.codec.Decode(rest[:l], &vals[i]); err != nil {
			return nil, fmt.Errorf("value %d of %d: %w", i, n, err)
		}
		rest = rest[l:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%d bytes after the last value", len(rest))
	}
	return vals, nil
}

// CreateWriter implements runnel.Sink.
func (s *LatestSink[K, V]) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[V], error) {
	return &latestWriter[K, V]{s: s, buf: map[K]V{}}, nil
}

type latestWriter[K comparable, V any] struct {
	s   *LatestSink[K, V]
	buf map[K]V
	n   int
}

func (w *latestWriter[K, V]) Write(v V) error {
	k := w.s.key(v)
	if old, ok := w.buf[k]; !ok || w.s.newer(v, old) {
		w.buf[k] = v
	}
	if w.n++; w.n >= 1024 {
		w.publish()
	}
	return nil
}

func (w *latestWriter[K, V]) publish() {
	w.s.mu.Lock()
	for k, v := range w.buf {
		if old, ok := w.s.latest[k]; !ok || w.s.newer(v, old) {
			w.s.latest[k] = v
		}
	}
	w.s.mu.Unlock()
	clear(w.buf)
	w.n = 0
}

func (w *latestWriter[K, V]) Flush() error { w.publish(); return nil }
func (w *latestWriter[K, V]) Close() error { w.publish(); return nil }

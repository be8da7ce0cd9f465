package run

import (
	"sync"

	"github.com/runnel-dev/runnel"
)

// LatestSink keeps the newest value per key that any of its writers saw: the final result of a running
// aggregate, whatever was replayed before it. Writers buffer and publish every 1024 records and at the end,
// so a summary taken after cancellation still sees recent values.
type LatestSink[K comparable, V any] struct {
	key   func(V) K
	newer func(a, b V) bool // a replaces b

	mu     sync.Mutex
	latest map[K]V
}

// NewLatestSink makes a sink keyed by key; newer says whether a value replaces the one kept for its key.
func NewLatestSink[K comparable, V any](key func(V) K, newer func(a, b V) bool) *LatestSink[K, V] {
	return &LatestSink[K, V]{key: key, newer: newer, latest: map[K]V{}}
}

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

package recovery

import (
	"sort"
	"sync/atomic"
	"time"
)

// counter is an int64 alone on its cache line, so that the subtasks updating neighbouring counters do not
// slow each other down.
type counter struct {
	atomic.Int64
	_ [56]byte
}

// silence is an interval in which a path saw no record, in nanoseconds since the probe's epoch. Open
// silences were still going on when the run ended.
type silence struct {
	path     int
	from, to int64
	open     bool
}

func (s silence) length() int64 { return s.to - s.from }

// silences watches the arrival of records per path at one stage of the pipeline (the map, the sinks),
// over all subtasks of the stage and all their attempts, and notes each silence of at least min. A record
// costs one clock read and one compare-and-swap on its path's last arrival time; nothing is allocated. The
// notes go into a buffer fixed at creation; silences beyond its capacity are counted, not kept.
type silences struct {
	epoch   time.Time
	min     int64
	last    []counter // per path: the latest arrival, ns since epoch; 0 before the first
	buf     []silence
	n       atomic.Int64
	dropped atomic.Int64
}

func newSilences(epoch time.Time, paths int, min time.Duration, capacity int) *silences {
	return &silences{epoch: epoch, min: int64(min), last: make([]counter, paths), buf: make([]silence, capacity)}
}

// observe notes the arrival of a record of path now. Arrivals from several goroutines may be observed out
// of order by a few nanoseconds; the latest time wins, so an earlier one never opens a silence.
func (s *silences) observe(path int) {
	now := int64(time.Since(s.epoch))
	l := &s.last[path]
	for {
		old := l.Load()
		if now <= old {
			return
		}
		if l.CompareAndSwap(old, now) {
			if old != 0 && now-old >= s.min {
				s.add(silence{path: path, from: old, to: now})
			}
			return
		}
	}
}

func (s *silences) add(x silence) {
	i := s.n.Add(1) - 1
	if i >= int64(len(s.buf)) {
		s.dropped.Add(1)
		return
	}
	s.buf[i] = x
}

// finish closes the silences still going on at end (ns since epoch) and returns all silences, sorted by
// start. Call it after every observer stopped.
func (s *silences) finish(end int64) []silence {
	for p := range s.last {
		if old := s.last[p].Load(); old != 0 && end-old >= s.min {
			s.add(silence{path: p, from: old, to: end, open: true})
		}
	}
	n := min(s.n.Load(), int64(len(s.buf)))
	out := append([]silence(nil), s.buf[:n]...)
	sort.Slice(out, func(i, j int) bool { return out[i].from < out[j].from })
	return out
}

// sample is what the sampler read at time t (ns since the epoch): the records all sources had emitted,
// all sinks had received, and the sinks had received of the affected path.
type sample struct {
	t        int64
	n        int64
	sunk     int64
	sunkPath int64
}

// sampler reads the sources' and the sinks' counters every interval into a timeline fixed at creation.
type sampler struct {
	epoch    time.Time
	emitted  []counter
	received []counter // per sink subtask and path: received[subtask*paths+path]
	paths    int
	samples  []sample
	stop     chan struct{}
	done     chan struct{}
}

func startSampler(epoch time.Time, emitted, received []counter, paths int, interval time.Duration, capacity int) *sampler {
	s := &sampler{epoch: epoch, emitted: emitted, received: received, paths: paths, samples: make([]sample, 0, capacity),
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.run(interval)
	return s
}

func (s *sampler) run(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	s.take()
	for {
		select {
		case <-t.C:
			s.take()
		case <-s.stop:
			s.take()
			return
		}
	}
}

func (s *sampler) take() {
	if len(s.samples) == cap(s.samples) {
		return
	}
	x := sample{t: int64(time.Since(s.epoch))}
	for i := range s.emitted {
		x.n += s.emitted[i].Load()
	}
	for i := range s.received {
		v := s.received[i].Load()
		x.sunk += v
		if i%s.paths == FailedSubtask {
			x.sunkPath += v
		}
	}
	s.samples = append(s.samples, x)
}

// finish stops the sampler and returns its timeline.
func (s *sampler) finish() []sample {
	close(s.stop)
	<-s.done
	return s.samples
}

// emittedAt interpolates the timeline linearly: the records emitted by time t.
func emittedAt(samples []sample, t int64) float64 {
	return countAt(samples, t, func(s sample) int64 { return s.n })
}

// countAt interpolates the timeline of the count that of picks from a sample linearly: its value at time
// t, the first or the last sample's outside the timeline.
func countAt(samples []sample, t int64, of func(sample) int64) float64 {
	if len(samples) == 0 {
		return 0
	}
	i := sort.Search(len(samples), func(i int) bool { return samples[i].t >= t })
	switch {
	case i == 0:
		return float64(of(samples[0]))
	case i == len(samples):
		return float64(of(samples[len(samples)-1]))
	}
	a, b := samples[i-1], samples[i]
	if b.t == a.t {
		return float64(of(b))
	}
	return float64(of(a)) + float64(of(b)-of(a))*float64(t-a.t)/float64(b.t-a.t)
}

// firstEmission returns the time of the first sample with records emitted (-1: none).
func firstEmission(samples []sample) int64 {
	for i, s := range samples {
		if s.n > 0 {
			if i > 0 {
				return samples[i-1].t
			}
			return s.t
		}
	}
	return -1
}

package report

import (
	"sync"
	"time"
)

// ThroughputInterval is how often a running job's throughput is sampled (Throughput.Add), and
// MaxThroughputSamples how many samples are kept: the last five minutes. Past it the oldest sample is
// dropped for each new one.
const (
	ThroughputInterval   = time.Second
	MaxThroughputSamples = 300
)

// ThroughputSample is a job's throughput per vertex over the interval that ends at At.
type ThroughputSample struct {
	At       time.Time    `json:"at"`
	Vertices []VertexRate `json:"vertices"`
}

// VertexRate is one vertex's records per second over a sample's interval, summed over its subtasks, and
// its busy and backpressured time as the result at the sample's end gave them (VertexResult: the highest of
// its running subtasks').
type VertexRate struct {
	Name                     string  `json:"name"`
	RecordsInPerSecond       float64 `json:"records_in_per_s"`
	RecordsOutPerSecond      float64 `json:"records_out_per_s"`
	BusyMsPerSecond          int64   `json:"busy_ms_per_s"`
	BackpressuredMsPerSecond int64   `json:"backpressured_ms_per_s"`
}

// Throughput is the recent throughput of one job: the records its vertices took in and emitted per
// second, from the differences between the results it is given. It reads no clock and starts nothing:
// its owner adds a result every ThroughputInterval while the job runs, and any goroutine may read it.
type Throughput struct {
	mu      sync.Mutex
	samples []ThroughputSample // a ring of MaxThroughputSamples once full; next is the oldest then
	next    int
	prevAt  time.Time
	prev    map[subtaskKey]subtaskCount
}

type subtaskKey struct {
	vertex  string
	subtask int
}

type subtaskCount struct {
	attempt int
	in, out uint64
}

// Add takes the job's result r as it is at time at and appends the throughput since the previous Add
// (nothing for the first, which only sets the baseline). A subtask's counters count its current attempt
// from 0: one whose attempt changed since the previous Add counts all its new attempt's records (a
// restarted attempt began within the interval, or one taken over later).
func (t *Throughput) Add(at time.Time, r *JobResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := make(map[subtaskKey]subtaskCount, len(t.prev))
	dt := at.Sub(t.prevAt).Seconds()
	first := t.prev == nil
	s := ThroughputSample{At: at, Vertices: make([]VertexRate, 0, len(r.Vertices))}
	for _, v := range r.Vertices {
		var in, out uint64
		for _, st := range v.Subtasks {
			k := subtaskKey{v.Name, st.Index}
			c := subtaskCount{st.Attempt, st.RecordsIn, st.RecordsOut}
			cur[k] = c
			p, ok := t.prev[k]
			if !ok || p.attempt != c.attempt {
				p = subtaskCount{}
			}
			in += since(p.in, c.in)
			out += since(p.out, c.out)
		}
		s.Vertices = append(s.Vertices, VertexRate{Name: v.Name, RecordsInPerSecond: perSecond(in, dt), RecordsOutPerSecond: perSecond(out, dt),
			BusyMsPerSecond: v.BusyMsPerSecond, BackpressuredMsPerSecond: v.BackpressuredMsPerSecond})
	}
	t.prev, t.prevAt = cur, at
	if first || dt <= 0 {
		return
	}
	if len(t.samples) < MaxThroughputSamples {
		t.samples = append(t.samples, s)
		return
	}
	t.samples[t.next] = s
	t.next = (t.next + 1) % MaxThroughputSamples
}

// since is what a counter gained from was to now; a counter that went back (a new attempt under the same
// number cannot, but a report of an older one can arrive late) gained nothing.
func since(was, now uint64) uint64 {
	if now < was {
		return 0
	}
	return now - was
}

func perSecond(n uint64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(n) / seconds
}

// Samples returns the samples kept, oldest first, in a slice of the caller's own.
func (t *Throughput) Samples() []ThroughputSample {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ThroughputSample, 0, len(t.samples))
	out = append(out, t.samples[t.next:]...)
	return append(out, t.samples[:t.next]...)
}

package task

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/runnel-dev/runnel/internal/deploy"
)

// metric is a registered metric: a counter the task goroutine adds to, or a gauge it reads at publish.
type metric struct {
	name      string
	counter   *int64
	gauge     func() int64
	published atomic.Int64
}

// metrics is a task's table of operator metrics. Registration and Publish happen on the task goroutine
// (building and opening the chain, and the loop); Published on any goroutine.
type metrics struct {
	table []*metric
	// ro is a copy of table for readers on other goroutines, replaced at each registration.
	ro atomic.Pointer[[]*metric]
}

// Counter registers a counter of operator op and returns it: the task goroutine adds to it without atomics.
func (c *Counters) Counter(op, name string) (*int64, error) {
	v := new(int64)
	return v, c.register(&metric{name: op + "/" + name, counter: v})
}

// Gauge registers a gauge of operator op: f is called on the task goroutine whenever the counters are
// published (every 200 ms at most).
func (c *Counters) Gauge(op, name string, f func() int64) error {
	return c.register(&metric{name: op + "/" + name, gauge: f})
}

func (c *Counters) register(m *metric) error {
	for _, x := range c.m.table {
		if x.name == m.name {
			return fmt.Errorf("metric %q is registered twice", m.name)
		}
	}
	if len(c.m.table) == deploy.MaxMetricsPerTask {
		return fmt.Errorf("metric %q: the task has %d metrics already, the most it may (MaxMetricsPerTask)", m.name, deploy.MaxMetricsPerTask)
	}
	c.m.table = append(c.m.table, m)
	ro := slices.Clone(c.m.table)
	c.m.ro.Store(&ro)
	return nil
}

// publishMetrics copies the counters and reads the gauges, on the task goroutine.
func (c *Counters) publishMetrics() {
	for _, m := range c.m.table {
		if m.gauge != nil {
			m.published.Store(m.gauge())
		} else {
			m.published.Store(*m.counter)
		}
	}
}

// PublishedMetrics returns the metrics as last published (nil when the task has none).
func (c *Counters) PublishedMetrics() []deploy.Metric {
	ro := c.m.ro.Load()
	if ro == nil {
		return nil
	}
	out := make([]deploy.Metric, len(*ro))
	for i, m := range *ro {
		out[i] = deploy.Metric{Name: m.name, Value: m.published.Load()}
	}
	return out
}

package task

import (
	"time"

	"github.com/runnel-dev/runnel/internal/deploy"
)

func (r *run) flushAll() {
	for _, p := range r.outputs {
		p.FlushAll()
	}
}

// flushRequested flushes the outputs a reader reconnected to, so that a restarted consumer gets the records
// waiting for it without the buffer timeout's delay.
func (r *run) flushRequested() {
	for _, p := range r.outputs {
		if p.TakeFlushRequest() {
			p.FlushAll()
		}
	}
}

// checkOutput reports the first record the attempt emitted, at began (beforeWork before the work that
// emitted it), and sends it on at once: a restarted task's first records end an outage, and should not
// wait for the buffer timeout. The time before the work, not after it: a restarted sink writes its first
// record as its first buffer begins, and the end of that buffer came, on a loaded machine, tens of
// milliseconds after what its readers saw.
func (r *run) checkOutput(began time.Time) {
	if !r.outputSeen && r.t.counters.Out > 0 {
		r.outputSeen = true
		r.flushAll()
		r.t.observe(deploy.Observation{Kind: deploy.FirstOutput, At: began})
	}
}

// beforeWork returns the time before work that may emit the attempt's first record (a poll, a buffer, a
// watermark, timers), for checkOutput after it; once the attempt emitted a record, the zero time, without
// reading the clock.
func (r *run) beforeWork() time.Time {
	if r.outputSeen {
		return time.Time{}
	}
	return time.Now()
}

// checkRegenerated ends the regeneration of a task failover's new attempt once every output it took over
// is past what its stream held (network.ResultPartition.Takeover): it reports, per subpartition, the
// records that were dropped as its consumers had them, and takes the checkpoints it deferred meanwhile.
func (r *run) checkRegenerated() {
	for _, p := range r.outputs {
		if p.Regenerating() {
			return
		}
	}
	r.regenerating = false
	now := time.Now()
	for i, p := range r.outputs {
		for sub := range r.t.cfg.Outputs[i].Subpartitions {
			if n := p.Discarded(sub); n > 0 {
				r.t.observe(deploy.Observation{Kind: deploy.DuplicatesDropped, At: now, Channel: deploy.ChannelSpec{Partition: p.ID(), Subpartition: sub}, Records: n})
			}
		}
	}
	r.runDeferredTriggers()
}

package nexmark

import (
	"time"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// SessionGap is q11's session gap: a bidder's session ends 10 s after their last bid.
const SessionGap = 10 * time.Second

// bidderCount is the row of q11 and q12: a bidder's bids in the window [Start, End).
type bidderCount struct{ Bidder, Count, Start, End int64 }

func appendBidderCount(dst []byte, c *bidderCount) []byte {
	o := BeginObject(dst)
	o.Int("bidder", c.Bidder)
	o.Int("bid_count", c.Count)
	o.Int("starttime", c.Start)
	o.Int("endtime", c.End)
	return o.End()
}

// withSession is q11's process-window function: the count with its bidder and session.
type withSession struct {
	runnel.ProcessWindowBase[int64]
}

func (withSession) Process(ctx runnel.WindowContext[int64], counts []int64, out runnel.Collector[bidderCount]) error {
	w := ctx.Window()
	for _, n := range counts {
		out.Collect(bidderCount{Bidder: ctx.CurrentKey(), Count: n, Start: w.Start, End: w.End})
	}
	return nil
}

// q11 counts the bids of each bidder's sessions: bids keyed by bidder in event-time session windows with
// a gap of 10 s (a bid at t opens [t, t + 10 s), overlapping sessions merge), a count per session when the
// watermark passes its end: {bidder, bid_count, starttime, endtime}. State per bidder: their open
// sessions, each a count, freed when the session fires; so the state is bounded by the bidders active in
// the last gap plus the watermark's bound.
func q11(events *runnel.Stream[Event]) Result {
	bidders := bids(events, func(b Bid) (int64, bool) { return b.Bidder, true })
	counts := runnel.WindowAggregateProcess(
		runnel.Window(runnel.KeyBy(bidders, func(b int64) int64 { return b }), runnel.EventTimeSessionWindows(SessionGap)),
		runnel.AggregateFunction[int64, int64, int64](count{}),
		func() runnel.ProcessWindowFunction[int64, int64, bidderCount] { return withSession{} }).
		Name("sessions").WithCodec(codec.MustStruct[bidderCount]())
	return newResult(counts, appendBidderCount)
}

// q12 counts the bids of each bidder per tumbling window of 10 s of processing time (the time a bid
// reaches the count, aligned to the epoch): {bidder, bid_count, starttime, endtime}. Which window a bid
// falls in depends on when it is processed, so only what does not (each bidder's total over the windows)
// is reproducible.
//
// A keyed process function rather than TumblingProcessingTimeWindows: a bounded input (--input, --events)
// ends before its last windows' end, and pending processing-time timers are dropped at the end of input
// (docs/eventtime.md §3.3), so the window operator would never emit them. Here EndInput emits every
// window still open, so that the counts over a bounded input are complete.
func q12(events *runnel.Stream[Event]) Result {
	bidders := bids(events, func(b Bid) (int64, bool) { return b.Bidder, true })
	counts := runnel.Process(runnel.KeyBy(bidders, func(b int64) int64 { return b }),
		func() runnel.KeyedProcessFunction[int64, int64, bidderCount] { return &processingTimeCount{} }).
		Name("proctime-count").WithCodec(codec.MustStruct[bidderCount]())
	return newResult(counts, appendBidderCount)
}

// processingTimeCount is q12's count, keyed by bidder: the window the bidder's current bids fall in and
// their count; a processing-time timer at the window's last millisecond emits it and frees the key (as
// Flink's processing-time windows fire at their MaxTimestamp). State per bidder: one window, from their
// first bid in it to its end: bounded by the bidders active in 10 s.
type processingTimeCount struct {
	runnel.KeyedProcessBase[int64, bidderCount]
	window runnel.ValueState[bidderCount]
}

// q12Size is q12's window size in milliseconds.
const q12Size = int64(WindowSize / time.Millisecond)

func (p *processingTimeCount) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	p.window, err = runnel.NewValueState(ctx, "window", codec.MustStruct[bidderCount]())
	return err
}

func (p *processingTimeCount) ProcessElement(ctx runnel.KeyedContext[int64], bidder int64, out runnel.Collector[bidderCount]) error {
	ts := ctx.TimerService()
	now := ts.CurrentProcessingTime()
	start := now - ((now%q12Size)+q12Size)%q12Size
	w, ok := p.window.Value()
	if ok && w.Start != start {
		// The window ended but its timer has not run yet (timers run between batches): emit it now.
		out.Collect(w)
		ts.DeleteProcessingTimeTimer(w.End - 1)
		ok = false
	}
	if !ok {
		w = bidderCount{Bidder: bidder, Start: start, End: start + q12Size}
		ts.RegisterProcessingTimeTimer(w.End - 1)
	}
	w.Count++
	p.window.Update(w)
	return nil
}

func (p *processingTimeCount) OnTimer(_ runnel.TimerContext[int64], _ int64, out runnel.Collector[bidderCount]) error {
	if w, ok := p.window.Value(); ok {
		out.Collect(w)
		p.window.Clear()
	}
	return nil
}

// EndInput emits the windows still open: the input is over, so their counts are final.
func (p *processingTimeCount) EndInput(ctx runnel.KeyedContext[int64], out runnel.Collector[bidderCount]) error {
	return ctx.ForEachKey(func(int64) error {
		if w, ok := p.window.Value(); ok {
			out.Collect(w)
			p.window.Clear()
		}
		return nil
	})
}

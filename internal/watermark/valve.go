package watermark

import (
	"fmt"
	"strings"
)

// ChannelState is what a Valve knows of one input channel.
type ChannelState struct {
	// Watermark is the highest watermark the channel delivered since it was created or last reset;
	// MaxWatermark once it finished.
	Watermark Watermark
	// Status is the channel's own status.
	Status Status
	// CaughtUp says an active channel counts toward the output: its watermark has reached the output since
	// it became active (or was reset). Always false for idle and finished channels.
	CaughtUp bool
}

// String returns "100", "idle:100", "finished" or "10 catching up".
func (c ChannelState) String() string {
	switch {
	case c.Status == Finished:
		return "finished"
	case c.Status == Idle:
		return "idle:" + c.Watermark.String()
	case !c.CaughtUp:
		return c.Watermark.String() + " catching up"
	}
	return c.Watermark.String()
}

// Valve decides the watermark of one input gate of N channels: the minimum over its active, caught-up
// channels, flushed to the highest when the last active channel goes idle, never moving back. Create it
// with NewValve; see the package documentation for the rules. Its table holds exactly N channels (16 bytes
// each) and never grows. A Valve is not safe for concurrent use.
type Valve struct {
	chans []ChannelState
	out   Watermark
	// status is derived from the counts: Finished if every channel finished, else Idle if none is active.
	status      Status
	numActive   int
	numFinished int
	// numAtOut counts the counted (active, caught-up) channels whose watermark equals out. While it is
	// above zero, a watermark on another counted channel cannot move the minimum, so OnWatermark scans the
	// table only when the last channel holding the output moves on: amortized O(1) for channels that
	// advance in turn, O(N) at worst.
	numAtOut int
	// noFlush keeps the output where it is when the last active channel goes idle: the valve of a
	// TwoInputValve over its inputs, since Flink combines the inputs of an operator without a flush.
	noFlush bool
}

// NewValve returns a valve for a gate of n input channels (at least one), all active, with no watermark
// yet: the output is MinWatermark until every channel delivered a watermark.
func NewValve(n int) *Valve {
	if n < 1 {
		panic(fmt.Sprintf("watermark: %d input channels, want at least 1", n))
	}
	v := &Valve{chans: make([]ChannelState, n), out: MinWatermark, numActive: n, numAtOut: n}
	for i := range v.chans {
		v.chans[i] = ChannelState{Watermark: MinWatermark, Status: Active, CaughtUp: true}
	}
	return v
}

// NewValveAt returns a valve restored at floor, the output it had when a checkpoint was taken: every
// channel is active at floor, as if each had sent it, so the output never goes below it and moves once
// every channel is above it; a watermark below floor is Behind. NewValveAt(n, MinWatermark) is NewValve(n).
// Why not channels at MinWatermark catching up: a channel would then count once it passed the output,
// and a slower channel still between floor and that output would see its records turned late.
func NewValveAt(n int, floor Watermark) *Valve {
	v := NewValve(n)
	if floor == MaxWatermark {
		panic("watermark: a valve restored at MaxWatermark has nothing left to decide")
	}
	v.out = floor
	for i := range v.chans {
		v.chans[i].Watermark = floor
	}
	return v
}

// OnWatermark handles watermark w read from channel ch. A watermark at or below the channel's own is
// ignored (Behind, Repeated), as is any on a finished channel. On an idle channel it is recorded, so that
// the channel counts at once when it becomes active again (and in a flush, see OnIdle), but moves nothing
// while the channel is idle.
func (v *Valve) OnWatermark(ch int, w Watermark) Result {
	v.checkChannel(ch)
	c := &v.chans[ch]
	switch {
	case c.Status == Finished:
		return v.ignored(ChannelFinished)
	case w < c.Watermark:
		return v.ignored(Behind)
	case w == c.Watermark:
		return v.ignored(Repeated)
	}
	prev := c.Watermark
	c.Watermark = w
	if c.Status != Active {
		return v.result(v.out, v.status)
	}
	before := v.out
	switch {
	case !c.CaughtUp:
		if w < v.out {
			return v.result(before, v.status)
		}
		c.CaughtUp = true
		v.recompute()
	case prev == v.out:
		// ch was one of the channels holding the output back.
		v.numAtOut--
		if v.numAtOut == 0 {
			v.recompute()
		}
	}
	return v.result(before, v.status)
}

// OnIdle handles an idle status read from channel ch: the channel stops holding the output back, which may
// advance it to the minimum of the others. If it was the last active channel, the valve becomes idle,
// and if the channel held the output (its watermark is the output), the valve first flushes: the output
// moves to the highest watermark of the channels that did not finish, as Flink's StatusWatermarkValve
// does, since no channel will move the minimum on any more.
func (v *Valve) OnIdle(ch int) Result {
	v.checkChannel(ch)
	c := &v.chans[ch]
	switch c.Status {
	case Finished:
		return v.ignored(ChannelFinished)
	case Idle:
		return v.ignored(AlreadyIdle)
	}
	before, status := v.out, v.status
	held := c.Watermark == v.out
	c.Status, c.CaughtUp = Idle, false
	v.numActive--
	v.recompute()
	if v.status == Idle && held && !v.noFlush {
		v.flush()
	}
	return v.result(before, status)
}

// OnActive handles an active status read from channel ch. The channel counts again at once if its
// watermark is at or above the output; otherwise it is catching up and counts from its first watermark at
// or above the output, so that it never moves the output back.
func (v *Valve) OnActive(ch int) Result {
	v.checkChannel(ch)
	c := &v.chans[ch]
	switch c.Status {
	case Finished:
		return v.ignored(ChannelFinished)
	case Active:
		return v.ignored(AlreadyActive)
	}
	before, status := v.out, v.status
	c.Status, c.CaughtUp = Active, c.Watermark >= v.out
	v.numActive++
	v.recompute()
	return v.result(before, status)
}

// OnFinished handles the end of partition read from channel ch: the channel stops counting, which may
// advance the output to the minimum of the others; once every channel finished, the output is
// MaxWatermark. A channel's end does not by itself move the output past idle or catching-up channels: a
// producer that ended with a drain sent MaxWatermark before its end of partition, and that did.
func (v *Valve) OnFinished(ch int) Result {
	v.checkChannel(ch)
	c := &v.chans[ch]
	if c.Status == Finished {
		return v.ignored(ChannelFinished)
	}
	before, status := v.out, v.status
	if c.Status == Active {
		v.numActive--
	}
	*c = ChannelState{Watermark: MaxWatermark, Status: Finished}
	v.numFinished++
	v.recompute()
	return v.result(before, status)
}

// OnChannelReset handles channel ch being reconnected to a new attempt of its producer (approximate
// recovery). The channel is active, with no watermark yet, and catching up: it counts from its first
// watermark at or above the output, so it neither moves the output back nor holds it back meanwhile. Only
// while the valve has emitted no watermark (the output is MinWatermark) does it count at once, as at the
// start. A finished channel is live again.
func (v *Valve) OnChannelReset(ch int) Result {
	v.checkChannel(ch)
	c := &v.chans[ch]
	before, status := v.out, v.status
	switch c.Status {
	case Finished:
		v.numFinished--
		v.numActive++
	case Idle:
		v.numActive++
	}
	*c = ChannelState{Watermark: MinWatermark, Status: Active, CaughtUp: v.out == MinWatermark}
	v.recompute()
	return v.result(before, status)
}

// Current returns the valve's output: the highest watermark it has emitted, MinWatermark if none.
func (v *Valve) Current() Watermark { return v.out }

// Status returns Finished if every channel finished, Idle if no channel is active, else Active.
func (v *Valve) Status() Status { return v.status }

// Idle reports whether no channel is active and not every channel finished: the task forwards an idle
// status downstream, so that its consumers do not wait for its watermark.
func (v *Valve) Idle() bool { return v.status == Idle }

// NumChannels returns the number of input channels.
func (v *Valve) NumChannels() int { return len(v.chans) }

// Channel returns what the valve knows of channel ch.
func (v *Valve) Channel(ch int) ChannelState {
	v.checkChannel(ch)
	return v.chans[ch]
}

// String describes the state: "active, output 50: 0=100 1=50 2=idle:30 3=finished 4=10 catching up".
func (v *Valve) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, output %s:", v.status, v.out)
	for i, c := range v.chans {
		fmt.Fprintf(&b, " %d=%s", i, c)
	}
	return b.String()
}

// recompute sets out to the minimum over the counted channels if that is higher, MaxWatermark once every
// channel finished, and recounts numAtOut and the status. Counted channels never lie below out (they
// count only once caught up, and out rises only to their minimum), so out never moves back.
func (v *Valve) recompute() {
	v.status = Active
	switch {
	case v.numFinished == len(v.chans):
		v.out, v.numAtOut, v.status = MaxWatermark, 0, Finished
		return
	case v.numActive == 0:
		v.status = Idle
	}
	lowest, at := MaxWatermark, 0
	for i := range v.chans {
		c := &v.chans[i]
		if c.Status != Active || !c.CaughtUp {
			continue
		}
		switch {
		case c.Watermark < lowest:
			lowest, at = c.Watermark, 1
		case c.Watermark == lowest:
			at++
		}
	}
	if at == 0 {
		v.numAtOut = 0
		return
	}
	if lowest < v.out {
		panic(fmt.Sprintf("watermark: bug: a counted channel is at %s, below the output %s (%s)", lowest, v.out, v))
	}
	v.out, v.numAtOut = lowest, at
}

// flush raises the output of a valve that just became idle to the highest watermark of its idle channels.
// A finished channel does not take part: its end does not push the output past the idle ones (OnFinished).
// The output stays monotone, and no channel counts until it is active again and caught up with it.
func (v *Valve) flush() {
	for i := range v.chans {
		if c := &v.chans[i]; c.Status == Idle && c.Watermark > v.out {
			v.out = c.Watermark
		}
	}
}

func (v *Valve) result(before Watermark, status Status) Result {
	return Result{Watermark: v.out, Advanced: v.out > before, Status: v.status, StatusChanged: v.status != status}
}

func (v *Valve) ignored(r Reason) Result {
	return Result{Watermark: v.out, Status: v.status, Ignored: r}
}

func (v *Valve) checkChannel(ch int) {
	if ch < 0 || ch >= len(v.chans) {
		panic(fmt.Sprintf("watermark: channel %d out of range [0, %d)", ch, len(v.chans)))
	}
}

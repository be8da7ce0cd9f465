package watermark

import "fmt"

// TwoInputValve decides the watermark of an operator with two inputs (a co-process function, a join):
// each input has its own Valve over its channels, and the operator's watermark is a third Valve over the
// two inputs, fed with what the input valves return. So the rules of a gate apply between the inputs too:
// an idle input does not hold the other back, a finished one stops counting, both finished is
// MaxWatermark, both idle is idle, and an input that becomes active again below the operator's watermark
// counts once it catches up. A TwoInputValve is not safe for concurrent use.
type TwoInputValve struct {
	inputs   [2]*Valve
	combined *Valve
}

// NewTwoInputValve returns the valve of an operator whose first input has n1 channels and whose second
// has n2 (at least one each).
func NewTwoInputValve(n1, n2 int) *TwoInputValve {
	return newTwoInputValve(NewValve(n1), NewValve(n2), NewValve(2))
}

// NewTwoInputValveAt returns a two-input valve restored at floor (see NewValveAt): neither input nor the
// operator goes below it.
func NewTwoInputValveAt(n1, n2 int, floor Watermark) *TwoInputValve {
	return newTwoInputValve(NewValveAt(n1, floor), NewValveAt(n2, floor), NewValveAt(2, floor))
}

// newTwoInputValve sets combined not to flush when both inputs are idle: each input's valve flushes its own
// channels, but the operator's watermark is the minimum over its active inputs and stays where it is once
// none is active, as Flink's combined watermark of an operator's inputs does.
func newTwoInputValve(in0, in1, combined *Valve) *TwoInputValve {
	combined.noFlush = true
	return &TwoInputValve{inputs: [2]*Valve{in0, in1}, combined: combined}
}

// OnWatermark handles watermark w read from channel ch of input 0 or 1; the Result is the operator's.
func (t *TwoInputValve) OnWatermark(input, ch int, w Watermark) Result {
	return t.apply(input, t.in(input).OnWatermark(ch, w))
}

// OnIdle handles an idle status read from channel ch of input.
func (t *TwoInputValve) OnIdle(input, ch int) Result { return t.apply(input, t.in(input).OnIdle(ch)) }

// OnActive handles an active status read from channel ch of input.
func (t *TwoInputValve) OnActive(input, ch int) Result {
	return t.apply(input, t.in(input).OnActive(ch))
}

// OnFinished handles the end of partition read from channel ch of input.
func (t *TwoInputValve) OnFinished(input, ch int) Result {
	return t.apply(input, t.in(input).OnFinished(ch))
}

// OnChannelReset handles channel ch of input being reconnected to a new producer attempt.
func (t *TwoInputValve) OnChannelReset(input, ch int) Result {
	return t.apply(input, t.in(input).OnChannelReset(ch))
}

// Current returns the operator's watermark.
func (t *TwoInputValve) Current() Watermark { return t.combined.Current() }

// Status returns the operator's status: Finished if both inputs finished, Idle if neither is active.
func (t *TwoInputValve) Status() Status { return t.combined.Status() }

// Idle reports whether neither input is active and not both finished.
func (t *TwoInputValve) Idle() bool { return t.combined.Idle() }

// Input returns the valve of input 0 or 1, to be read (its Current is the input's watermark, for metrics);
// events go through the TwoInputValve.
func (t *TwoInputValve) Input(input int) *Valve { return t.in(input) }

// String describes both inputs and the operator: "active, output 50; input 0: ...; input 1: ...".
func (t *TwoInputValve) String() string {
	return fmt.Sprintf("%s, output %s; input 0: %s; input 1: %s",
		t.combined.Status(), t.combined.Current(), t.inputs[0], t.inputs[1])
}

func (t *TwoInputValve) in(input int) *Valve {
	if input != 0 && input != 1 {
		panic(fmt.Sprintf("watermark: input %d, want 0 or 1", input))
	}
	return t.inputs[input]
}

// apply turns what input's valve did into events on the combined valve, in the order in which the task
// would forward them downstream (an active status, the watermark, an idle status), and returns the
// combined valve's change over all of them.
func (t *TwoInputValve) apply(input int, r Result) Result {
	c := t.combined
	before, status := c.out, c.status
	if r.Ignored != Taken {
		return c.ignored(r.Ignored)
	}
	if r.StatusChanged && r.Status == Active {
		if c.chans[input].Status == Finished {
			// A reset revived a finished input. Its valve stays at MaxWatermark (it never moves back) and
			// will not advance again, so the input holds nothing back until it finishes again.
			c.OnChannelReset(input)
			c.OnWatermark(input, r.Watermark)
		} else {
			c.OnActive(input)
		}
	}
	// An input whose last channel finished advances to MaxWatermark by finishing, not by a watermark:
	// OnFinished alone tells the combined valve, so that the input does not push the operator past an idle
	// other input (as a finished channel does not in a valve).
	if r.Advanced && !(r.StatusChanged && r.Status == Finished) {
		c.OnWatermark(input, r.Watermark)
	}
	if r.StatusChanged {
		switch r.Status {
		case Idle:
			c.OnIdle(input)
		case Finished:
			c.OnFinished(input)
		}
	}
	return c.result(before, status)
}

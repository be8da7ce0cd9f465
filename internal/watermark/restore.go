package watermark

import "fmt"

// ValveSnapshot is what a Valve needs to be restored after a failover within a run: its output and what it
// knew of each channel when a checkpoint was taken.
type ValveSnapshot struct {
	Out      Watermark
	Channels []ChannelState
}

// Snapshot returns the valve's output and a copy of its channels' states.
func (v *Valve) Snapshot() ValveSnapshot {
	return ValveSnapshot{Out: v.out, Channels: append([]ChannelState(nil), v.chans...)}
}

// NewValveFrom returns a valve restored from s, for the same channels of the same producers (a failover
// within a run; after a rescale or in a new run, NewValveAt at the output is all that holds). Each channel
// that counted toward the output (active and caught up) keeps its own watermark, so that a watermark on
// another channel moves the output exactly as it did before the failure, which a replay of the task's input
// must reproduce. Every other channel is active at the output, as NewValveAt makes them all: the producer
// of an idle or finished channel may be restarted, and a restarted producer starts active without saying
// so. s.Out must not be MaxWatermark (an input that ended has nothing left to decide).
func NewValveFrom(s ValveSnapshot) *Valve {
	v := NewValveAt(len(s.Channels), s.Out)
	for i, c := range s.Channels {
		if c.Status == Active && c.CaughtUp && c.Watermark > s.Out {
			v.chans[i].Watermark = c.Watermark
		}
	}
	v.recompute()
	if v.out != s.Out {
		panic(fmt.Sprintf("watermark: bug: a valve restored at %s has output %s", s.Out, v.out))
	}
	return v
}

// Snapshot returns the snapshots of input 0's valve, input 1's and the valve over the two inputs.
func (t *TwoInputValve) Snapshot() [3]ValveSnapshot {
	return [3]ValveSnapshot{t.inputs[0].Snapshot(), t.inputs[1].Snapshot(), t.combined.Snapshot()}
}

// NewTwoInputValveFrom returns a two-input valve restored from what Snapshot returned, as NewValveFrom
// restores each of its three valves. The valve over the inputs takes an input's own output as that input's
// watermark, which it is whenever the input counted.
func NewTwoInputValveFrom(s [3]ValveSnapshot) *TwoInputValve {
	if len(s[2].Channels) != 2 {
		panic(fmt.Sprintf("watermark: a two-input valve over %d inputs", len(s[2].Channels)))
	}
	return newTwoInputValve(NewValveFrom(s[0]), NewValveFrom(s[1]), NewValveFrom(s[2]))
}

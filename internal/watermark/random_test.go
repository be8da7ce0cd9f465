package watermark

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// op is one call on a Valve: 'w'atermark, 'i'dle, 'a'ctive, 'f'inished, 'r'eset.
type op struct {
	kind byte
	ch   int
	w    Watermark
}

func (o op) String() string {
	switch o.kind {
	case 'w':
		return fmt.Sprintf("wm %d %s", o.ch, o.w)
	case 'i':
		return fmt.Sprintf("idle %d", o.ch)
	case 'a':
		return fmt.Sprintf("active %d", o.ch)
	case 'f':
		return fmt.Sprintf("end %d", o.ch)
	}
	return fmt.Sprintf("reset %d", o.ch)
}

// valveChecker drives a Valve and checks every Result and the state after it against the rules of the
// package documentation, keeping its own record of what each channel delivered.
type valveChecker struct {
	v       *Valve
	highest []Watermark // the highest watermark each channel delivered since its start or reset
	status  []Status
	history []string
}

func newValveChecker(n int) *valveChecker {
	c := &valveChecker{v: NewValve(n), highest: make([]Watermark, n), status: make([]Status, n)}
	for i := range c.highest {
		c.highest[i] = MinWatermark
	}
	return c
}

func (c *valveChecker) step(o op) error {
	c.history = append(c.history, o.String())
	beforeOut, beforeStatus := c.v.Current(), c.v.Status()
	var r Result
	var want Reason
	st := c.status[o.ch]
	// flushTo is the output an idle status must leave if it makes the valve idle (Flink's flush): the
	// highest watermark of the channels that did not finish if the channel held the output, else the output.
	flushTo := beforeOut
	if o.kind == 'i' && st == Active && c.highest[o.ch] == beforeOut {
		for i, h := range c.highest {
			if c.status[i] != Finished {
				flushTo = max(flushTo, h)
			}
		}
	}
	switch o.kind {
	case 'w':
		switch {
		case st == Finished:
			want = ChannelFinished
		case o.w < c.highest[o.ch]:
			want = Behind
		case o.w == c.highest[o.ch]:
			want = Repeated
		default:
			c.highest[o.ch] = o.w
		}
		r = c.v.OnWatermark(o.ch, o.w)
	case 'i':
		switch st {
		case Finished:
			want = ChannelFinished
		case Idle:
			want = AlreadyIdle
		default:
			c.status[o.ch] = Idle
		}
		r = c.v.OnIdle(o.ch)
	case 'a':
		switch st {
		case Finished:
			want = ChannelFinished
		case Active:
			want = AlreadyActive
		default:
			c.status[o.ch] = Active
		}
		r = c.v.OnActive(o.ch)
	case 'f':
		if st == Finished {
			want = ChannelFinished
		}
		c.status[o.ch] = Finished
		r = c.v.OnFinished(o.ch)
	case 'r':
		c.status[o.ch], c.highest[o.ch] = Active, MinWatermark
		r = c.v.OnChannelReset(o.ch)
	}
	out, status := c.v.Current(), c.v.Status()
	switch {
	case r.Ignored != want:
		return fmt.Errorf("ignored %s, want %s", r.Ignored, want)
	case r.Watermark != out || r.Status != status:
		return fmt.Errorf("result %s disagrees with the valve: %s", r, c.v)
	case r.Advanced != (out > beforeOut):
		return fmt.Errorf("result %s after output %s", r, beforeOut)
	case r.StatusChanged != (status != beforeStatus):
		return fmt.Errorf("result %s after status %s", r, beforeStatus)
	case out < beforeOut:
		return fmt.Errorf("output moved back from %s to %s", beforeOut, out)
	case want != Taken && (out != beforeOut || status != beforeStatus):
		return fmt.Errorf("an ignored event changed the valve from %s, %s", beforeStatus, beforeOut)
	case beforeStatus == Idle && status == Idle && out != beforeOut:
		return fmt.Errorf("idle valve advanced from %s to %s", beforeOut, out)
	case o.kind == 'i' && beforeStatus == Active && status == Idle && out != flushTo:
		return fmt.Errorf("the last active channel went idle: output %s, want %s (from %s)", out, flushTo, beforeOut)
	case o.kind != 'i' && beforeStatus == Active && status == Idle && out != beforeOut:
		return fmt.Errorf("the valve became idle by %s: output %s moved from %s", o, out, beforeOut)
	}
	return c.checkState()
}

// checkState checks the valve's state on its own, from the channels' watermarks and statuses.
func (c *valveChecker) checkState() error {
	out := c.v.Current()
	numActive, numFinished := 0, 0
	lowest, counted, allCaughtUp := MaxWatermark, 0, true
	for i := range c.highest {
		ch := c.v.Channel(i)
		if ch.Status != c.status[i] {
			return fmt.Errorf("channel %d is %s, want %s", i, ch.Status, c.status[i])
		}
		switch ch.Status {
		case Finished:
			numFinished++
			continue
		case Idle:
			if ch.CaughtUp {
				return fmt.Errorf("idle channel %d counts", i)
			}
		case Active:
			numActive++
			// An active channel counts exactly when its watermark reached the output: one below it is
			// catching up, one at or above it holds the output back.
			if ch.CaughtUp != (ch.Watermark >= out) {
				return fmt.Errorf("channel %d at %s: caught up %t with output %s", i, ch.Watermark, ch.CaughtUp, out)
			}
			if !ch.CaughtUp {
				allCaughtUp = false
				break
			}
			counted++
			lowest = min(lowest, ch.Watermark)
		}
		if ch.Watermark != c.highest[i] {
			return fmt.Errorf("channel %d at %s, but it delivered %s", i, ch.Watermark, c.highest[i])
		}
	}
	wantStatus := Active
	switch {
	case numFinished == len(c.highest):
		wantStatus = Finished
	case numActive == 0:
		wantStatus = Idle
	}
	switch {
	case c.v.Status() != wantStatus:
		return fmt.Errorf("status %s, want %s", c.v.Status(), wantStatus)
	case wantStatus == Finished && out != MaxWatermark:
		return fmt.Errorf("every channel finished, output %s", out)
	case counted > 0 && out != lowest:
		return fmt.Errorf("output %s, but the counted channels' minimum is %s", out, lowest)
	case numActive > 0 && allCaughtUp && out != lowest:
		return fmt.Errorf("every active channel caught up, output %s, minimum %s", out, lowest)
	}
	return nil
}

// randomOp draws an event that moves watermarks forward mostly, sometimes back, with idleness, ends and
// resets sprinkled in.
func randomOp(rng *rand.Rand, n int, last []Watermark) op {
	ch := rng.IntN(n)
	switch p := rng.IntN(100); {
	case p < 70:
		w := last[ch] + Watermark(rng.IntN(20)) - 4
		switch rng.IntN(50) {
		case 0:
			w = MinWatermark
		case 1:
			w = MaxWatermark
		}
		if w != MinWatermark && w != MaxWatermark {
			last[ch] = w
		}
		return op{kind: 'w', ch: ch, w: w}
	case p < 80:
		return op{kind: 'i', ch: ch}
	case p < 90:
		return op{kind: 'a', ch: ch}
	case p < 94:
		return op{kind: 'f', ch: ch}
	}
	last[ch] -= 30 // a new producer attempt starts behind the old one
	return op{kind: 'r', ch: ch}
}

// TestValveRandom drives valves of 1 to 6 channels with seeded random events and checks every step.
func TestValveRandom(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 11))
		n := 1 + rng.IntN(6)
		c := newValveChecker(n)
		last := make([]Watermark, n)
		for range 200 {
			if err := c.step(randomOp(rng, n, last)); err != nil {
				t.Fatalf("seed %d, %d channels: %v\nafter %s\nstate %s", seed, n, err, strings.Join(c.history, "; "), c.v)
			}
		}
	}
}

// FuzzValve decodes the input as events on a valve of 1 to 4 channels, two bytes each (kind and channel,
// then the watermark's step), and checks every step.
func FuzzValve(f *testing.F) {
	f.Add([]byte{3, 0, 5, 1, 7, 2, 9, 3, 40, 4, 1})
	f.Add([]byte{1, 0, 9, 10, 3, 11, 0, 20, 5, 30, 1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		n := 1 + int(data[0])%4
		c := newValveChecker(n)
		last := make([]Watermark, n)
		for i := 1; i+1 < len(data); i += 2 {
			ch := int(data[i]>>4) % n
			var o op
			switch data[i] & 0x0f % 8 {
			case 0, 1, 2, 3:
				last[ch] += Watermark(data[i+1]) - 64
				o = op{kind: 'w', ch: ch, w: last[ch]}
			case 4:
				o = op{kind: 'i', ch: ch}
			case 5:
				o = op{kind: 'a', ch: ch}
			case 6:
				o = op{kind: 'f', ch: ch}
			default:
				o = op{kind: 'r', ch: ch}
			}
			if err := c.step(o); err != nil {
				t.Fatalf("%v\nafter %s\nstate %s", err, strings.Join(c.history, "; "), c.v)
			}
		}
	})
}

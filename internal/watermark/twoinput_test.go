package watermark

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// twoInputEvent applies one script event to t: as valveEvent, with the channel written INPUT.CH.
func twoInputEvent(t *TwoInputValve, fields []string) (Result, error) {
	if len(fields) < 2 {
		return Result{}, fmt.Errorf("event %q: want an event and INPUT.CH", strings.Join(fields, " "))
	}
	in, ch, ok := strings.Cut(fields[1], ".")
	input, err1 := strconv.Atoi(in)
	c, err2 := strconv.Atoi(ch)
	if !ok || err1 != nil || err2 != nil {
		return Result{}, fmt.Errorf("channel %q: want INPUT.CH", fields[1])
	}
	switch fields[0] {
	case "wm":
		if len(fields) != 3 {
			return Result{}, fmt.Errorf("event %q: want wm INPUT.CH W", strings.Join(fields, " "))
		}
		w, err := parseWatermark(fields[2])
		if err != nil {
			return Result{}, err
		}
		return t.OnWatermark(input, c, w), nil
	case "idle":
		return t.OnIdle(input, c), nil
	case "active":
		return t.OnActive(input, c), nil
	case "end":
		return t.OnFinished(input, c), nil
	case "reset":
		return t.OnChannelReset(input, c), nil
	}
	return Result{}, fmt.Errorf("unknown event %q", fields[0])
}

// TestTwoInputValve runs scripts as TestValve does, on an operator with two inputs; channels are INPUT.CH.
func TestTwoInputValve(t *testing.T) {
	cases := []struct {
		name   string
		n1, n2 int
		script string
	}{
		{"minimum of the inputs", 2, 1, `
			wm 0.0 100 -> min
			wm 1.0 50  -> min
			wm 0.1 80  -> 50 advanced
			wm 1.0 90  -> 80 advanced
			state      -> active, output 80; input 0: active, output 80: 0=100 1=80; input 1: active, output 90: 0=90`},
		{"an idle input does not hold the other back", 1, 1, `
			wm 0.0 100 -> min
			idle 1.0   -> 100 advanced
			wm 0.0 150 -> 150 advanced
			idle 0.0   -> 150, became idle
			active 1.0 -> 150, became active
			wm 1.0 120 -> 150
			wm 1.0 160 -> 160 advanced
			wm 0.0 170 -> 160
			active 0.0 -> 160
			state      -> active, output 160; input 0: active, output 170: 0=170; input 1: active, output 160: 0=160`},
		{"an input idle only in part still counts", 2, 1, `
			wm 0.0 10 -> min
			wm 1.0 20 -> min
			idle 0.1  -> 10 advanced
			wm 0.0 30 -> 20 advanced`},
		{"one input finished, then both", 1, 2, `
			wm 0.0 10  -> min
			wm 1.0 20  -> min
			wm 1.1 30  -> 10 advanced
			end 0.0    -> 20 advanced
			wm 1.0 40  -> 30 advanced
			end 1.0    -> 30
			end 1.1    -> max advanced, became finished
			state      -> finished, output max; input 0: finished, output max: 0=finished; input 1: finished, output max: 0=finished 1=finished`},
		{"finished input and idle input: idle", 1, 1, `
			wm 0.0 10 -> min
			wm 1.0 20 -> 10 advanced
			idle 1.0  -> 10
			end 0.0   -> 10, became idle
			end 1.0   -> max advanced, became finished`},
		{"a reset channel holds neither input back", 2, 1, `
			wm 0.0 10 -> min
			wm 0.1 10 -> min
			wm 1.0 10 -> 10 advanced
			reset 0.0 -> 10
			wm 0.1 20 -> 10
			wm 1.0 20 -> 20 advanced
			wm 0.0 5  -> 20
			state     -> active, output 20; input 0: active, output 20: 0=5 catching up 1=20; input 1: active, output 20: 0=20`},
		{"a reset revives a finished input", 1, 1, `
			wm 0.0 10 -> min
			end 1.0   -> 10 advanced
			end 0.0   -> max advanced, became finished
			reset 1.0 -> max, became active
			wm 1.0 50 -> max
			end 1.0   -> max, became finished`},
		{"a reset revives one input; the other still counts", 1, 1, `
			wm 0.0 10 -> min
			end 1.0   -> 10 advanced
			reset 1.0 -> 10
			wm 0.0 20 -> 20 advanced
			wm 1.0 30 -> 20
			wm 0.0 40 -> 40 advanced`},
		// Flink: each input's valve flushes its own channels when they all go idle, and the operator's
		// watermark is the minimum over its active inputs, left where it is once neither is active.
		{"an input flushes its channels; the operator does not flush its inputs", 2, 1, `
			wm 0.0 9   -> min
			wm 0.1 5   -> min
			wm 1.0 20  -> 5 advanced
			idle 1.0   -> 5
			idle 0.0   -> 5
			idle 0.1   -> 9 advanced, became idle
			state      -> idle, output 9; input 0: idle, output 9: 0=idle:9 1=idle:5; input 1: idle, output 20: 0=idle:20
			active 1.0 -> 20 advanced, became active
			idle 1.0   -> 20, became idle`},
		{"both inputs idle: no flush across them", 1, 1, `
			wm 0.0 9  -> min
			wm 1.0 5  -> 5 advanced
			idle 0.0  -> 5
			idle 1.0  -> 5, became idle
			state     -> idle, output 5; input 0: idle, output 9: 0=idle:9; input 1: idle, output 5: 0=idle:5
			active 1.0 -> 5, became active
			wm 1.0 7  -> 7 advanced`},
		{"ignored events say why", 1, 1, `
			wm 0.0 10 -> min
			wm 0.0 5  -> min, ignored (behind)
			idle 1.0  -> 10 advanced
			idle 1.0  -> 10, ignored (already idle)
			end 0.0   -> 10, became idle
			wm 0.0 99 -> 10, ignored (channel finished)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := NewTwoInputValve(tc.n1, tc.n2)
			runScript(t, tc.script, func(f []string) (Result, error) { return twoInputEvent(v, f) }, v.String)
		})
	}
}

// TestTwoInputValveRandom drives two-input valves with seeded random events. With watermarks and ends only,
// the operator's watermark must equal that of one valve over all the channels of both inputs; with every
// event, the combined valve must follow its inputs' outputs and statuses by the rules of a valve.
func TestTwoInputValveRandom(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 12))
		n := [2]int{1 + rng.IntN(3), 1 + rng.IntN(3)}
		onlyProgress := seed%2 == 0
		v := NewTwoInputValve(n[0], n[1])
		flat := NewValve(n[0] + n[1])
		last := [2][]Watermark{make([]Watermark, n[0]), make([]Watermark, n[1])}
		var history []string
		for range 150 {
			input := rng.IntN(2)
			o := randomOp(rng, n[input], last[input])
			if onlyProgress && o.kind != 'w' && o.kind != 'f' {
				continue
			}
			history = append(history, fmt.Sprintf("%d:%s", input, o))
			before := v.Current()
			var r, fr Result
			switch o.kind {
			case 'w':
				r, fr = v.OnWatermark(input, o.ch, o.w), flat.OnWatermark(input*n[0]+o.ch, o.w)
			case 'i':
				r = v.OnIdle(input, o.ch)
			case 'a':
				r = v.OnActive(input, o.ch)
			case 'f':
				r, fr = v.OnFinished(input, o.ch), flat.OnFinished(input*n[0]+o.ch)
			case 'r':
				r = v.OnChannelReset(input, o.ch)
			}
			err := func() error {
				switch {
				case r.Watermark != v.Current() || r.Status != v.Status():
					return fmt.Errorf("result %s disagrees with the valve", r)
				case r.Advanced != (v.Current() > before):
					return fmt.Errorf("result %s after output %s", r, before)
				case v.Current() < before:
					return fmt.Errorf("output moved back from %s", before)
				case onlyProgress && (fr.Watermark != r.Watermark || fr.Status != r.Status):
					return fmt.Errorf("operator %s, one valve over all channels %s", r, fr)
				case r.StatusChanged && r.Status == Idle && v.Current() > max(before, v.Input(input).Current()):
					// Only the input that went idle may have moved the operator (by its own flush).
					return fmt.Errorf("operator became idle at %s, past its own %s and input %d's %s",
						v.Current(), before, input, v.Input(input).Current())
				}
				// The combined valve's channel i is input i's output and status, and it follows the rules.
				c := &valveChecker{v: v.combined, highest: make([]Watermark, 2), status: make([]Status, 2)}
				for i := range 2 {
					c.highest[i], c.status[i] = v.Input(i).Current(), v.Input(i).Status()
				}
				return c.checkState()
			}()
			if err != nil {
				t.Fatalf("seed %d, inputs of %v channels: %v\nafter %s\nstate %s", seed, n, err, strings.Join(history, "; "), v)
			}
		}
	}
}

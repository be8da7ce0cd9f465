package watermark

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// parseWatermark reads "min", "max" or decimal milliseconds.
func parseWatermark(s string) (Watermark, error) {
	switch s {
	case "min":
		return MinWatermark, nil
	case "max":
		return MaxWatermark, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("watermark %q: %w", s, err)
	}
	return Watermark(n), nil
}

// valveEvent applies one script event to v: "wm CH W", "idle CH", "active CH", "end CH", "reset CH".
func valveEvent(v *Valve, fields []string) (Result, error) {
	if len(fields) < 2 {
		return Result{}, fmt.Errorf("event %q: want an event and a channel", strings.Join(fields, " "))
	}
	ch, err := strconv.Atoi(fields[1])
	if err != nil {
		return Result{}, fmt.Errorf("channel %q: %w", fields[1], err)
	}
	switch fields[0] {
	case "wm":
		if len(fields) != 3 {
			return Result{}, fmt.Errorf("event %q: want wm CH W", strings.Join(fields, " "))
		}
		w, err := parseWatermark(fields[2])
		if err != nil {
			return Result{}, err
		}
		return v.OnWatermark(ch, w), nil
	case "idle":
		return v.OnIdle(ch), nil
	case "active":
		return v.OnActive(ch), nil
	case "end":
		return v.OnFinished(ch), nil
	case "reset":
		return v.OnChannelReset(ch), nil
	}
	return Result{}, fmt.Errorf("unknown event %q", fields[0])
}

// runScript runs "EVENT -> RESULT" and "state -> STATE" lines against step and state.
func runScript(t *testing.T, script string, step func([]string) (Result, error), state func() string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(script), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		ev, want, ok := strings.Cut(line, "->")
		if !ok {
			t.Fatalf("line %q: no ->", line)
		}
		ev, want = strings.TrimSpace(ev), strings.TrimSpace(want)
		var got string
		if ev == "state" {
			got = state()
		} else {
			r, err := step(strings.Fields(ev))
			if err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			got = r.String()
		}
		if got != want {
			t.Fatalf("%s\n got %s\nwant %s\nstate %s", ev, got, want, state())
		}
	}
}

// TestValve runs scripts: each line is an event and the Result it must return, "EVENT -> RESULT", or
// "state -> STATE" for the valve's String. Events: "wm CH W" (W in milliseconds, min or max), "idle CH",
// "active CH", "end CH" (end of partition), "reset CH" (a new producer attempt).
func TestValve(t *testing.T) {
	cases := []struct {
		name   string
		n      int
		script string
	}{
		// The minimum over channels.
		{"one channel", 1, `
			state    -> active, output min: 0=min
			wm 0 10  -> 10 advanced
			wm 0 20  -> 20 advanced
			state    -> active, output 20: 0=20`},
		{"output waits for every channel", 3, `
			wm 0 100 -> min
			wm 1 50  -> min
			wm 2 70  -> 50 advanced
			state    -> active, output 50: 0=100 1=50 2=70
			wm 1 80  -> 70 advanced
			wm 0 110 -> 70
			wm 2 120 -> 80 advanced`},
		{"channels at the same minimum", 3, `
			wm 0 10 -> min
			wm 1 10 -> min
			wm 2 10 -> 10 advanced
			wm 0 20 -> 10
			wm 1 20 -> 10
			wm 2 20 -> 20 advanced`},
		{"a channel never goes back", 2, `
			wm 0 100 -> min
			wm 1 100 -> 100 advanced
			wm 0 40  -> 100, ignored (behind)
			wm 0 100 -> 100, ignored (repeated)
			wm 0 min -> 100, ignored (behind)
			state    -> active, output 100: 0=100 1=100
			wm 0 120 -> 100
			wm 1 110 -> 110 advanced`},
		{"max watermark on every channel", 2, `
			wm 0 max -> min
			wm 1 5   -> 5 advanced
			wm 1 max -> max advanced
			state    -> active, output max: 0=max 1=max`},

		// Idleness.
		{"an idle channel does not hold the output back", 3, `
			wm 0 100 -> min
			wm 1 200 -> min
			idle 2   -> 100 advanced
			state    -> active, output 100: 0=100 1=200 2=idle:min
			wm 0 300 -> 200 advanced`},
		{"going idle advances to the others' minimum", 3, `
			wm 0 10 -> min
			wm 1 20 -> min
			wm 2 30 -> 10 advanced
			idle 0  -> 20 advanced
			idle 1  -> 30 advanced
			idle 2  -> 30, became idle
			state   -> idle, output 30: 0=idle:10 1=idle:20 2=idle:30`},
		{"all idle: flushed, then the output does not advance", 2, `
			wm 0 50  -> min
			wm 1 90  -> 50 advanced
			idle 1   -> 50
			idle 0   -> 90 advanced, became idle
			wm 1 200 -> 90
			wm 0 300 -> 90
			idle 0   -> 90, ignored (already idle)
			state    -> idle, output 90: 0=idle:300 1=idle:200`},
		{"watermarks recorded while idle count on activation", 2, `
			wm 0 50  -> min
			wm 1 60  -> 50 advanced
			idle 0   -> 60 advanced
			wm 0 70  -> 60
			wm 1 100 -> 100 advanced
			active 0 -> 100
			state    -> active, output 100: 0=70 catching up 1=100
			wm 0 90  -> 100
			wm 0 100 -> 100
			state    -> active, output 100: 0=100 1=100
			wm 1 130 -> 100
			wm 0 120 -> 120 advanced`},
		{"active again at or above the output counts at once", 2, `
			wm 0 50  -> min
			wm 1 60  -> 50 advanced
			idle 0   -> 60 advanced
			wm 0 200 -> 60
			active 0 -> 60
			state    -> active, output 60: 0=200 1=60
			wm 1 300 -> 200 advanced`},
		{"active again below the output does not move it back", 2, `
			wm 0 10  -> min
			wm 1 10  -> 10 advanced
			idle 0   -> 10
			wm 1 500 -> 500 advanced
			active 0 -> 500
			wm 0 20  -> 500
			wm 1 600 -> 600 advanced
			wm 0 700 -> 600
			wm 1 800 -> 700 advanced`},
		{"the gate becomes active again", 2, `
			idle 0   -> min
			idle 1   -> min, became idle
			active 1 -> min, became active
			active 1 -> min, ignored (already active)
			wm 1 40  -> 40 advanced
			state    -> active, output 40: 0=idle:min 1=40`},
		{"becoming active can advance the output", 2, `
			wm 0 100 -> min
			wm 1 50  -> 50 advanced
			idle 0   -> 50
			idle 1   -> 100 advanced, became idle
			wm 0 150 -> 100
			active 0 -> 150 advanced, became active`},
		{"idle channel finishes", 2, `
			wm 1 70 -> min
			idle 0  -> 70 advanced
			end 0   -> 70
			state   -> active, output 70: 0=finished 1=70`},

		// End of partition.
		{"a finished channel stops counting", 3, `
			wm 0 10  -> min
			wm 1 20  -> min
			wm 2 30  -> 10 advanced
			end 0    -> 20 advanced
			wm 0 99  -> 20, ignored (channel finished)
			idle 0   -> 20, ignored (channel finished)
			active 0 -> 20, ignored (channel finished)
			end 0    -> 20, ignored (channel finished)
			end 1    -> 30 advanced
			state    -> active, output 30: 0=finished 1=finished 2=30
			end 2    -> max advanced, became finished
			state    -> finished, output max: 0=finished 1=finished 2=finished`},
		{"all finished without any watermark", 2, `
			end 1 -> min
			end 0 -> max advanced, became finished`},
		{"finished and idle: idle, no advance", 3, `
			wm 0 10 -> min
			wm 1 20 -> min
			wm 2 30 -> 10 advanced
			idle 1  -> 10
			idle 2  -> 10
			end 0   -> 10, became idle
			end 1   -> 10
			end 2   -> max advanced, became finished`},
		{"drained producer: max then end passes idle channels", 2, `
			wm 0 10  -> min
			idle 1   -> 10 advanced
			wm 0 max -> max advanced
			end 0    -> max, became idle`},

		// Approximate recovery: a new producer attempt behind a channel.
		{"reset channel does not move the output back", 2, `
			wm 0 100 -> min
			wm 1 100 -> 100 advanced
			reset 0  -> 100
			state    -> active, output 100: 0=min catching up 1=100
			wm 0 min -> 100, ignored (repeated)
			wm 0 40  -> 100
			wm 1 150 -> 150 advanced
			wm 0 160 -> 150
			state    -> active, output 150: 0=160 1=150
			wm 1 200 -> 160 advanced`},
		{"reset channel does not hold the output back", 2, `
			wm 0 10  -> min
			wm 1 10  -> 10 advanced
			reset 0  -> 10
			wm 1 20  -> 20 advanced
			wm 1 30  -> 30 advanced`},
		{"reset before any output counts at once", 2, `
			wm 0 10  -> min
			reset 0  -> min
			wm 1 20  -> min
			wm 0 5   -> 5 advanced`},
		{"reset of the only active channel", 2, `
			wm 0 10  -> min
			wm 1 20  -> 10 advanced
			idle 1   -> 10
			reset 0  -> 10
			wm 0 5   -> 10
			wm 0 15  -> 15 advanced`},
		{"reset revives an idle channel and the gate", 2, `
			wm 0 10  -> min
			wm 1 20  -> 10 advanced
			idle 0   -> 20 advanced
			idle 1   -> 20, became idle
			reset 0  -> 20, became active
			state    -> active, output 20: 0=min catching up 1=idle:20
			wm 0 25  -> 25 advanced`},
		{"reset revives a finished channel", 2, `
			wm 0 10  -> min
			wm 1 20  -> 10 advanced
			end 0    -> 20 advanced
			reset 0  -> 20
			wm 0 15  -> 20
			wm 0 30  -> 20
			wm 1 40  -> 30 advanced`},
		{"reset after the valve finished", 2, `
			end 0    -> min
			end 1    -> max advanced, became finished
			reset 1  -> max, became active
			wm 1 50  -> max
			wm 1 max -> max
			end 1    -> max, became finished`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := NewValve(tc.n)
			runScript(t, tc.script, func(f []string) (Result, error) { return valveEvent(v, f) }, v.String)
		})
	}
}

// TestValveFlushWhenAllIdle holds the valve to Flink's rule for the last active channel going idle
// (StatusWatermarkValve): if that channel's watermark is the output, the valve first emits the highest
// watermark of all channels, then the idle status, since no channel will move the minimum on any more;
// otherwise it only becomes idle. A channel active again below the output never moves it back. Channels
// that finished do not take part (Runnel's: a finished channel's end does not push the output past idle
// ones), and a valve left with idle channels by a channel's end does not flush.
func TestValveFlushWhenAllIdle(t *testing.T) {
	cases := []struct {
		name   string
		n      int
		script string
	}{
		{"the channel with data goes idle last", 2, `
			wm 0 5  -> min
			wm 1 9  -> 5 advanced
			idle 0  -> 9 advanced
			idle 1  -> 9, became idle
			state   -> idle, output 9: 0=idle:5 1=idle:9`},
		{"the channel at the minimum goes idle last: the output jumps to the highest", 2, `
			wm 0 9  -> min
			wm 1 5  -> 5 advanced
			idle 0  -> 5
			idle 1  -> 9 advanced, became idle
			state   -> idle, output 9: 0=idle:9 1=idle:5`},
		{"channels that never sent a watermark go idle after the one with data", 3, `
			wm 0 1999 -> min
			idle 0    -> min
			idle 1    -> min
			idle 2    -> 1999 advanced, became idle`},
		{"one channel", 1, `
			wm 0 7  -> 7 advanced
			idle 0  -> 7, became idle`},
		{"nothing sent anywhere: idle at min", 2, `
			idle 0  -> min
			idle 1  -> min, became idle`},
		{"a channel active again below the output does not move it back", 2, `
			wm 0 3   -> min
			wm 1 9   -> 3 advanced
			idle 1   -> 3
			idle 0   -> 9 advanced, became idle
			active 0 -> 9, became active
			state    -> active, output 9: 0=3 catching up 1=idle:9
			wm 0 5   -> 9
			wm 0 9   -> 9
			state    -> active, output 9: 0=9 1=idle:9
			wm 0 12  -> 12 advanced`},
		{"the last channel going idle was catching up: no flush", 3, `
			wm 0 12  -> min
			wm 1 3   -> min
			wm 2 10  -> 3 advanced
			idle 1   -> 10 advanced
			active 1 -> 10
			idle 0   -> 10
			idle 2   -> 10
			idle 1   -> 10, became idle
			state    -> idle, output 10: 0=idle:12 1=idle:3 2=idle:10`},
		{"a finished channel does not take part", 3, `
			wm 1 20  -> min
			wm 2 10  -> min
			end 0    -> 10 advanced
			idle 1   -> 10
			idle 2   -> 20 advanced, became idle
			state    -> idle, output 20: 0=finished 1=idle:20 2=idle:10`},
		{"the last active channel finishes: no flush", 2, `
			wm 0 9  -> min
			wm 1 5  -> 5 advanced
			idle 0  -> 5
			end 1   -> 5, became idle`},
		{"idle, active, idle again: flushes each time", 2, `
			wm 0 10  -> min
			wm 1 20  -> 10 advanced
			idle 1   -> 10
			idle 0   -> 20 advanced, became idle
			active 1 -> 20, became active
			wm 1 30  -> 30 advanced
			wm 0 40  -> 30
			idle 1   -> 40 advanced, became idle`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := NewValve(tc.n)
			runScript(t, tc.script, func(f []string) (Result, error) { return valveEvent(v, f) }, v.String)
		})
	}
	t.Run("restored at a floor", func(t *testing.T) {
		v := NewValveAt(2, 100)
		runScript(t, `
			wm 1 150 -> 100
			idle 1   -> 100
			idle 0   -> 150 advanced, became idle`, func(f []string) (Result, error) { return valveEvent(v, f) }, v.String)
	})
}

// TestValveInvalidInput: indexes out of range and an empty gate are bugs of the caller and panic.
func TestValveInvalidInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
		want string
	}{
		{"no channels", func() { NewValve(0) }, "watermark: 0 input channels, want at least 1"},
		{"negative channel", func() { NewValve(2).OnWatermark(-1, 5) }, "watermark: channel -1 out of range [0, 2)"},
		{"channel past the end", func() { NewValve(2).OnIdle(2) }, "watermark: channel 2 out of range [0, 2)"},
		{"reset past the end", func() { NewValve(1).OnChannelReset(1) }, "watermark: channel 1 out of range [0, 1)"},
		{"third input", func() { NewTwoInputValve(1, 1).OnFinished(2, 0) }, "watermark: input 2, want 0 or 1"},
		{"negative bound", func() { BoundedOutOfOrderness(-1) }, "watermark: out-of-orderness bound -1ns, want at least 0"},
		{"zero idle timeout", func() { IdleAfter(0) }, "watermark: idle timeout 0s, want at least 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if got := fmt.Sprint(recover()); got != tc.want {
					t.Errorf("panic %q, want %q", got, tc.want)
				}
			}()
			tc.f()
		})
	}
}

// TestStrings covers the names used in logs.
func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{MinWatermark.String(), "min"},
		{MaxWatermark.String(), "max"},
		{Watermark(-5).String(), "-5"},
		{Watermark(math.MaxInt64 - 1).String(), "9223372036854775806"},
		{Status(9).String(), "status(9)"},
		{Reason(9).String(), "reason(9)"},
		{Taken.String(), "taken"},
		{Result{Watermark: 7, Advanced: true, Status: Idle, StatusChanged: true}.String(), "7 advanced, became idle"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestValveAtFloor: a restored valve never emits below its floor, moves once every channel passed it, and
// ignores watermarks below it; at MinWatermark it is a new valve.
func TestValveAtFloor(t *testing.T) {
	v := NewValveAt(2, 100)
	if v.Current() != 100 {
		t.Fatalf("restored output %s, want 100", v.Current())
	}
	steps := []struct {
		ch      int
		w       Watermark
		want    Watermark
		ignored Reason
	}{
		{0, 50, 100, Behind},
		{0, 120, 100, Taken},
		{1, 99, 100, Behind},
		{1, 110, 110, Taken},
		{1, 130, 120, Taken},
	}
	for i, s := range steps {
		r := v.OnWatermark(s.ch, s.w)
		if r.Watermark != s.want || r.Ignored != s.ignored || r.Advanced != (s.want > 100 && s.ignored == Taken && (i == 3 || i == 4)) {
			t.Fatalf("step %d: %+v, want output %s, reason %s", i, r, s.want, s.ignored)
		}
	}
	if NewValveAt(3, MinWatermark).String() != NewValve(3).String() {
		t.Fatal("a valve at MinWatermark is not a new valve")
	}
}

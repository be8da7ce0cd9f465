package task

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/watermark"
)

// Event time at the task (docs/eventtime.md §2.4, §3.4)
//
// A task whose chain reads a stream with event time owns one watermark.Valve over the channels of its timed
// inputs: the watermark and watermark-status events of each channel go to it, a channel's end of data or
// end of partition finishes the channel, and what the valve decides goes to the chain's head in the order
// the valve's Result prescribes. Channels of an input without event time never count (they carry no
// watermarks by construction), and a watermark on one is a broken producer. Once every timed channel
// finished, the valve's MaxWatermark reaches the chain before EndInput, so every window fires and every
// event-time timer runs.
//
// Processing time: the chain reports its earliest deadline, and the loop keeps one timer for it, selected
// beside the mailbox and the flush ticker. The deadline is asked for again after each piece of work, and the
// timer moved only when it changed.

// eventTime is a run's part in event time: the valve, which gate channel is which of its channels, and the
// processing-time deadline. The task goroutine owns it.
type eventTime struct {
	valve gateValve // nil: no timed input
	vch   []int32   // gate channel -> valve channel, -1 for a channel of an untimed input
	// finished marks the valve channels told OnFinished, so end of data and end of partition count once.
	finished []bool
	// ignored counts watermark events that changed nothing (a valve Result with a reason).
	ignored uint64
	// idleOut says the last status handed to the chain was idle.
	idleOut bool

	clock    clockwork.Clock
	timer    clockwork.Timer // nil until the chain first has a deadline
	deadline int64           // what timer is set for; math.MaxInt64: not set
	off      bool            // the input ended: no more processing-time work
}

// gateValve is the valve over a task's timed channels, numbered 0..n-1: a watermark.Valve, or a
// two-input valve when both inputs of a two-input head have event time.
type gateValve interface {
	OnWatermark(ch int, w watermark.Watermark) watermark.Result
	OnIdle(ch int) watermark.Result
	OnActive(ch int) watermark.Result
	OnFinished(ch int) watermark.Result
	// restored returns a valve of the same channels at floor (watermark.NewValveAt).
	restored(floor watermark.Watermark) gateValve
	// snapshot returns the states of the valve's valves: one, or a two-input valve's three.
	snapshot() []watermark.ValveSnapshot
	// restoredFrom returns a valve restored from what snapshot returned (watermark.NewValveFrom), or false
	// when s is not of a valve of the same channels.
	restoredFrom(s []watermark.ValveSnapshot) (gateValve, bool)
}

type oneValve struct{ *watermark.Valve }

func (v oneValve) restored(floor watermark.Watermark) gateValve {
	return oneValve{watermark.NewValveAt(v.NumChannels(), floor)}
}

func (v oneValve) snapshot() []watermark.ValveSnapshot {
	return []watermark.ValveSnapshot{v.Snapshot()}
}

func (v oneValve) restoredFrom(s []watermark.ValveSnapshot) (gateValve, bool) {
	if len(s) != 1 || len(s[0].Channels) != v.NumChannels() {
		return nil, false
	}
	return oneValve{watermark.NewValveFrom(s[0])}, true
}

// twoValves numbers the channels of both inputs: the first n[0] are input 0's.
type twoValves struct {
	*watermark.TwoInputValve
	n [2]int
}

func (v twoValves) split(ch int) (int, int) {
	if ch < v.n[0] {
		return 0, ch
	}
	return 1, ch - v.n[0]
}

func (v twoValves) OnWatermark(ch int, w watermark.Watermark) watermark.Result {
	in, c := v.split(ch)
	return v.TwoInputValve.OnWatermark(in, c, w)
}
func (v twoValves) OnIdle(ch int) watermark.Result {
	in, c := v.split(ch)
	return v.TwoInputValve.OnIdle(in, c)
}
func (v twoValves) OnActive(ch int) watermark.Result {
	in, c := v.split(ch)
	return v.TwoInputValve.OnActive(in, c)
}
func (v twoValves) OnFinished(ch int) watermark.Result {
	in, c := v.split(ch)
	return v.TwoInputValve.OnFinished(in, c)
}
func (v twoValves) restored(floor watermark.Watermark) gateValve {
	return twoValves{watermark.NewTwoInputValveAt(v.n[0], v.n[1], floor), v.n}
}

func (v twoValves) snapshot() []watermark.ValveSnapshot {
	s := v.TwoInputValve.Snapshot()
	return s[:]
}

func (v twoValves) restoredFrom(s []watermark.ValveSnapshot) (gateValve, bool) {
	if len(s) != 3 || len(s[0].Channels) != v.n[0] || len(s[1].Channels) != v.n[1] || len(s[2].Channels) != 2 {
		return nil, false
	}
	return twoValves{watermark.NewTwoInputValveFrom([3]watermark.ValveSnapshot(s)), v.n}, true
}

// setupValve builds the valve over the channels of the chain's timed inputs: one valve over them, or a
// two-input valve when timed channels feed both inputs of the head. An input without event time never
// counts (it carries no watermarks, and counting it would hold the other back for ever).
func (r *run) setupValve() {
	et := &r.et
	var n [2]int
	for _, input := range r.in.logical {
		if r.chain.InputTimed(input) {
			n[r.chain.LogicalInput(input)]++
		}
	}
	et.vch = make([]int32, len(r.in.logical))
	next := [2]int{0, n[0]}
	if n[0] == 0 || n[1] == 0 {
		next = [2]int{0, 0} // one valve over whichever input has event time
	}
	for idx, input := range r.in.logical {
		et.vch[idx] = -1
		if r.chain.InputTimed(input) {
			l := r.chain.LogicalInput(input)
			et.vch[idx] = int32(next[l])
			next[l]++
		}
	}
	switch {
	case n[0] > 0 && n[1] > 0:
		et.valve = twoValves{watermark.NewTwoInputValve(n[0], n[1]), n}
	case n[0]+n[1] > 0:
		et.valve = oneValve{watermark.NewValve(n[0] + n[1])}
	default:
		return
	}
	et.finished = make([]bool, n[0]+n[1])
}

// onWatermarkEvent feeds a watermark or watermark-status event of gate channel idx to the valve and carries
// out what it decides.
func (r *run) onWatermarkEvent(idx int, ev network.Event) error {
	et := &r.et
	if et.valve == nil || et.vch[idx] < 0 {
		return fmt.Errorf("input channel %d: %s on an input without event time", idx, ev.Type)
	}
	ch := int(et.vch[idx])
	var res watermark.Result
	switch {
	case ev.Type == network.EventWatermark:
		res = et.valve.OnWatermark(ch, watermark.Watermark(ev.TimestampMillis))
	case ev.Idle():
		res = et.valve.OnIdle(ch)
	default:
		res = et.valve.OnActive(ch)
	}
	return r.applyValve(res)
}

// finishChannel tells the valve that gate channel idx delivers nothing more (end of data or of partition).
func (r *run) finishChannel(idx int) error {
	et := &r.et
	if et.valve == nil || et.vch[idx] < 0 || et.finished[et.vch[idx]] {
		return nil
	}
	et.finished[et.vch[idx]] = true
	return r.applyValve(et.valve.OnFinished(int(et.vch[idx])))
}

// applyValve carries out a valve's Result in the order the watermark package prescribes: a status that
// became active, then an advanced watermark, then a status that became idle.
func (r *run) applyValve(res watermark.Result) error {
	if res.Ignored != watermark.Taken {
		r.et.ignored++
		return nil
	}
	et := &r.et
	// A valve that finished while idle advances to MaxWatermark: consumers told idle hear active first, so
	// that they take it.
	if et.idleOut && (res.StatusChanged && res.Status == watermark.Active || res.Advanced) {
		et.idleOut = false
		if err := r.chain.ProcessWatermarkStatus(false); err != nil {
			return err
		}
	}
	if res.Advanced {
		r.t.counters.Watermark = int64(res.Watermark)
		began := r.beforeWork()
		if err := r.chain.ProcessWatermark(int64(res.Watermark)); err != nil {
			return err
		}
		r.checkOutput(began)
	}
	if res.StatusChanged && res.Status == watermark.Idle {
		et.idleOut = true
		if err := r.chain.ProcessWatermarkStatus(true); err != nil {
			return err
		}
	}
	return nil
}

// timerC is the channel of the processing-time timer; nil (never ready) while the chain has no deadline.
func (r *run) timerC() <-chan time.Time {
	if r.et.timer == nil || r.et.deadline == math.MaxInt64 || r.et.off || r.steps.replaying() {
		// While the task replays, its timers run where the determinant log says (nextBuffer).
		return nil
	}
	return r.et.timer.Chan()
}

// rearm sets the processing-time timer to the chain's deadline, if that changed.
func (r *run) rearm() {
	et := &r.et
	if et.off {
		return
	}
	d := r.chain.NextDeadline()
	if d == et.deadline {
		return
	}
	et.deadline = d
	if d == math.MaxInt64 {
		if et.timer != nil {
			et.timer.Stop()
		}
		return
	}
	wait := time.Duration(d-et.clock.Now().UnixMilli()) * time.Millisecond
	if et.timer == nil {
		et.timer = et.clock.NewTimer(max(wait, 0))
		return
	}
	et.timer.Stop()
	// clockwork's timers, like the standard library's since Go 1.23, drop a value not received once
	// stopped; a stale one would only cause an early call that finds nothing due.
	et.timer.Reset(max(wait, 0))
}

// onTimer runs the chain's processing-time work that is due.
func (r *run) onTimer() error {
	r.et.deadline = math.MaxInt64 // the timer fired: it is no longer set
	now := r.steps.timers(r.et.clock.Now().UnixMilli())
	began := r.beforeWork()
	if err := r.chain.OnProcessingTime(now); err != nil {
		return err
	}
	r.checkOutput(began)
	r.rearm()
	return nil
}

// stopTimer releases the processing-time timer.
func (r *run) stopTimer() {
	if r.et.timer != nil {
		r.et.timer.Stop()
	}
}

// watermarkName is the entry of a snapshot that holds the task's watermark floor: its watermark when the
// snapshot was taken (8 bytes, little-endian), written when it had one. A restored task never goes below
// it (docs/eventtime.md §2.6), so a replayed record is judged late exactly as before the failure.
const watermarkName = "\x00watermark"

// watermarkFloor returns the writer of the floor entry, or nil while the task has no watermark.
func (r *run) watermarkFloor() *StateWriter {
	w := r.t.counters.Watermark
	if w == math.MinInt64 {
		return nil
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(w))
	return &StateWriter{Operator: watermarkName, Write: func(out io.Writer) error { _, err := out.Write(b); return err }}
}

// floorOf gathers the floors of the blobs a restore reads: the lowest of them holds.
type floorOf struct {
	floor int64
	seen  bool
}

func (f *floorOf) add(b []byte) error {
	if len(b) != 8 {
		return fmt.Errorf("watermark floor entry of %d bytes, want 8", len(b))
	}
	w := int64(binary.LittleEndian.Uint64(b))
	if !f.seen || w < f.floor {
		f.floor, f.seen = w, true
	}
	return nil
}

// valveName is the entry of a snapshot that holds the state of the task's valve (encodeValves), written
// with the floor. A failover within the run restores the valve from it (restoreFloor), so that a replay
// under task failover sees each channel's watermark as the failed attempt did: a valve restored at the
// floor alone holds the output at the floor until every channel passed it again, and a window the failed
// attempt fired on a watermark of one channel would not fire in the replay.
const valveName = "\x00valves"

// valveFormat is the first byte of a valve entry.
const valveFormat = 1

// valveState returns the writer of the valve entry, or nil while the task has no timed input or no
// watermark.
func (r *run) valveState() *StateWriter {
	if r.et.valve == nil || r.t.counters.Watermark == math.MinInt64 {
		return nil
	}
	w := bytesEntry(valveName, encodeValves(r.et.valve.snapshot()))
	return &w
}

// encodeValves writes the format byte, the number of valves, and per valve its output (8 bytes,
// little-endian), its number of channels (uvarint) and per channel the watermark (8 bytes), the status and
// whether it caught up (a byte each).
func encodeValves(vs []watermark.ValveSnapshot) []byte {
	b := []byte{valveFormat, byte(len(vs))}
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v.Out))
		b = binary.AppendUvarint(b, uint64(len(v.Channels)))
		for _, c := range v.Channels {
			b = binary.LittleEndian.AppendUint64(b, uint64(c.Watermark))
			caught := byte(0)
			if c.CaughtUp {
				caught = 1
			}
			b = append(b, byte(c.Status), caught)
		}
	}
	return b
}

// decodeValves reads what encodeValves wrote, refusing anything else with an error that says what is wrong.
func decodeValves(b []byte) ([]watermark.ValveSnapshot, error) {
	if len(b) < 2 || b[0] != valveFormat {
		return nil, fmt.Errorf("valve entry: %d bytes, not of format %d", len(b), valveFormat)
	}
	n := int(b[1])
	if n != 1 && n != 3 {
		return nil, fmt.Errorf("valve entry of %d valves, want 1 or 3", n)
	}
	b = b[2:]
	vs := make([]watermark.ValveSnapshot, n)
	for i := range vs {
		if len(b) < 8 {
			return nil, fmt.Errorf("valve entry: valve %d cut short", i)
		}
		vs[i].Out = watermark.Watermark(binary.LittleEndian.Uint64(b))
		chans, k := binary.Uvarint(b[8:])
		if k <= 0 || chans == 0 || chans > uint64(len(b[8+k:])/10) {
			return nil, fmt.Errorf("valve entry: valve %d: a bad channel count", i)
		}
		b = b[8+k:]
		vs[i].Channels = make([]watermark.ChannelState, chans)
		for j := range vs[i].Channels {
			st := watermark.Status(b[8])
			if st > watermark.Finished || b[9] > 1 {
				return nil, fmt.Errorf("valve entry: valve %d channel %d: status %d, caught up %d", i, j, b[8], b[9])
			}
			vs[i].Channels[j] = watermark.ChannelState{Watermark: watermark.Watermark(binary.LittleEndian.Uint64(b)),
				Status: st, CaughtUp: b[9] == 1}
			b = b[10:]
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("valve entry: %d bytes past its end", len(b))
	}
	return vs, nil
}

// restoreFloor starts the task's event time at the restored floor: the valve, the operators' current
// watermarks and what the sources emit never go below it. valves, when not nil, is the valve's state at
// the snapshot, read by a failover within the run from the subtask's own checkpoint: the valve takes it
// when it is of the same channels and at the floor.
func (r *run) restoreFloor(f floorOf, valves []watermark.ValveSnapshot) error {
	if !f.seen || f.floor == math.MinInt64 {
		return nil
	}
	if f.floor == math.MaxInt64 {
		// The input had ended at the snapshot (and its entry says so too): nothing is left to decide.
		r.t.counters.Watermark = f.floor
		return nil
	}
	if et := &r.et; et.valve != nil {
		restored := false
		if exactValves(valves, f.floor) {
			et.valve, restored = et.valve.restoredFrom(valves)
		}
		if !restored {
			et.valve = et.valve.restored(watermark.Watermark(f.floor))
		}
	}
	r.t.counters.Watermark = f.floor
	return r.chain.RestoreWatermark(f.floor)
}

// exactValves reports whether valves can restore the valve exactly: the last valve (the task's, over both
// inputs when there are two) is at the floor, and no valve's input had ended.
func exactValves(valves []watermark.ValveSnapshot, floor int64) bool {
	if len(valves) == 0 || valves[len(valves)-1].Out != watermark.Watermark(floor) {
		return false
	}
	for _, v := range valves {
		if v.Out == watermark.MaxWatermark {
			return false
		}
	}
	return true
}

// NoEventTime gives a Chain without event time or processing-time work the methods for them: no input is
// timed, a watermark is refused, and there is never a deadline. Embed it.
type NoEventTime struct{}

// InputTimed reports that no input has event time.
func (NoEventTime) InputTimed(int) bool { return false }

// LogicalInput reports that every input feeds the head's first.
func (NoEventTime) LogicalInput(int) int { return 0 }

// ProcessWatermark refuses a watermark.
func (NoEventTime) ProcessWatermark(ms int64) error {
	return fmt.Errorf("watermark %d for a chain without event time", ms)
}

// ProcessWatermarkStatus refuses a watermark status.
func (NoEventTime) ProcessWatermarkStatus(bool) error {
	return fmt.Errorf("watermark status for a chain without event time")
}

// NextDeadline reports no deadline.
func (NoEventTime) NextDeadline() int64 { return math.MaxInt64 }

// OnProcessingTime does nothing.
func (NoEventTime) OnProcessingTime(int64) error { return nil }

// RestoreWatermark does nothing.
func (NoEventTime) RestoreWatermark(int64) error { return nil }

package watermark

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Watermark is a point in event time: milliseconds since the Unix epoch. A watermark w says that no record
// with a timestamp at or below w is to follow on the stream that carried it.
type Watermark int64

const (
	// MinWatermark means no watermark yet: the start of every channel and of every valve.
	MinWatermark Watermark = math.MinInt64
	// MaxWatermark is the end of time, sent at the end of bounded input so that every window fires and every
	// event-time timer runs; a finished channel counts as having sent it.
	MaxWatermark Watermark = math.MaxInt64
)

// String returns "min", "max" or the milliseconds in decimal.
func (w Watermark) String() string {
	switch w {
	case MinWatermark:
		return "min"
	case MaxWatermark:
		return "max"
	}
	return strconv.FormatInt(int64(w), 10)
}

// Status is whether a channel or a whole valve is expected to move the watermark on.
type Status uint8

const (
	// Active: watermarks are expected; an active channel that has caught up holds the output back.
	Active Status = iota
	// Idle: the producer sends no records for now and asked not to be waited for.
	Idle
	// Finished: the producer ended; nothing follows. Its watermark counts as MaxWatermark.
	Finished
)

// String returns "active", "idle" or "finished".
func (s Status) String() string {
	switch s {
	case Active:
		return "active"
	case Idle:
		return "idle"
	case Finished:
		return "finished"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Reason says why an event changed nothing. The zero Reason means the event was taken.
type Reason uint8

const (
	// Taken: the event was applied (it may still leave the output where it was).
	Taken Reason = iota
	// Behind: the watermark is below the channel's own; a channel's watermark never goes back. A producer
	// restarted under approximate recovery without OnChannelReset shows up as this.
	Behind
	// Repeated: the watermark equals the channel's own.
	Repeated
	// ChannelFinished: the channel has finished; only OnChannelReset revives it.
	ChannelFinished
	// AlreadyIdle: OnIdle on an idle channel.
	AlreadyIdle
	// AlreadyActive: OnActive on an active channel.
	AlreadyActive
)

// String names the reason ("behind").
func (r Reason) String() string {
	switch r {
	case Taken:
		return "taken"
	case Behind:
		return "behind"
	case Repeated:
		return "repeated"
	case ChannelFinished:
		return "channel finished"
	case AlreadyIdle:
		return "already idle"
	case AlreadyActive:
		return "already active"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Result is what the caller must do after an event. Carry it out in this order: if StatusChanged and Status
// is Active, forward an active status on every output; if Advanced, forward Watermark (to the operator,
// then on every output); if StatusChanged and Status is Idle, forward an idle status. A status that changed
// to Finished needs nothing: the Watermark advanced to MaxWatermark in the same step, and the task's end of
// input follows.
type Result struct {
	// Watermark is the valve's output after the event.
	Watermark Watermark
	// Advanced says the output moved forward with this event.
	Advanced bool
	// Status is the valve's status after the event.
	Status Status
	// StatusChanged says Status differs from the status before the event.
	StatusChanged bool
	// Ignored says why the event changed nothing, for logging; Taken if it was applied. An ignored event
	// leaves the other fields describing the unchanged valve.
	Ignored Reason
}

// String lists what changed ("100 advanced, became active") or why nothing did ("50, ignored (behind)").
func (r Result) String() string {
	var b strings.Builder
	b.WriteString(r.Watermark.String())
	if r.Advanced {
		b.WriteString(" advanced")
	}
	if r.StatusChanged {
		b.WriteString(", became ")
		b.WriteString(r.Status.String())
	}
	if r.Ignored != Taken {
		b.WriteString(", ignored (")
		b.WriteString(r.Ignored.String())
		b.WriteString(")")
	}
	return b.String()
}

package network

import (
	"encoding/binary"
	"fmt"
)

// EventType names the kind of an in-band event.
type EventType uint8

const (
	// EventEndOfPartition says the producer will send nothing more on this subpartition.
	EventEndOfPartition EventType = 1
	// EventBarrier is a checkpoint barrier.
	EventBarrier EventType = 2
	// EventCancelCheckpoint tells consumers to abandon alignment for a checkpoint.
	EventCancelCheckpoint EventType = 3
	// EventEndOfData says the producer will send no more records on this subpartition, though it still
	// sends barriers and cancel markers, and its end of partition later: its input ended and it waits for
	// a checkpoint that covers its end before it finishes (Flink's EndOfData, FLIP-147). A consumer that
	// has it (or an end of partition) on every channel ends its own input.
	EventEndOfData EventType = 4
	// EventWatermark is a watermark: the producer promises no more records on this channel with a
	// timestamp at or below TimestampMillis (epoch milliseconds). Build it with WatermarkEvent.
	EventWatermark EventType = 5
	// EventWatermarkStatus says whether the producer is idle (Flags WatermarkIdle: do not wait for its
	// watermark) or active again (Flags WatermarkActive). Build it with WatermarkStatusEvent.
	EventWatermarkStatus EventType = 6
	// 7 was a producer-restarted event, which a takeover no longer needs (its stream goes on unchanged,
	// ResultPartition.Takeover); it is not reused, and DecodeEvent refuses it as unknown.
)

// The Flags of an EventWatermarkStatus; any other value is refused by DecodeEvent.
const (
	// WatermarkActive marks a producer that sends records and watermarks again.
	WatermarkActive uint32 = 0
	// WatermarkIdle marks a producer that has nothing to send for now: its consumers stop waiting for it.
	WatermarkIdle uint32 = 1
)

func (t EventType) String() string {
	switch t {
	case EventEndOfPartition:
		return "end-of-partition"
	case EventBarrier:
		return "barrier"
	case EventCancelCheckpoint:
		return "cancel-checkpoint"
	case EventEndOfData:
		return "end-of-data"
	case EventWatermark:
		return "watermark"
	case EventWatermarkStatus:
		return "watermark-status"
	}
	return fmt.Sprintf("event(%d)", uint8(t))
}

// Event is an in-band control message that travels in order with the records of a channel.
type Event struct {
	Type EventType
	// CheckpointID is set for barriers and cancel markers.
	CheckpointID int64
	// TimestampMillis is the trigger time of a barrier's checkpoint, or a watermark's value.
	TimestampMillis int64
	// Flags carries checkpoint options (for example at-least-once) for barriers, and WatermarkIdle or
	// WatermarkActive for a watermark status.
	Flags uint32
}

// WatermarkEvent returns the event that carries watermark ms (epoch milliseconds; any int64, the valve's
// MinWatermark and MaxWatermark included).
func WatermarkEvent(ms int64) Event { return Event{Type: EventWatermark, TimestampMillis: ms} }

// WatermarkStatusEvent returns the event that says the producer went idle (idle) or is active again.
func WatermarkStatusEvent(idle bool) Event {
	if idle {
		return Event{Type: EventWatermarkStatus, Flags: WatermarkIdle}
	}
	return Event{Type: EventWatermarkStatus, Flags: WatermarkActive}
}

// Idle reports whether a watermark status event says idle. It is false for every other event.
func (e Event) Idle() bool { return e.Type == EventWatermarkStatus && e.Flags == WatermarkIdle }

// isWatermarkType reports whether t is one of the event types a reconnectable subpartition re-sends to a
// new reader (see Subpartition.lastWatermark).
func isWatermarkType(t EventType) bool { return t == EventWatermark || t == EventWatermarkStatus }

const eventSize = 1 + 8 + 8 + 4

func (e Event) append(dst []byte) []byte {
	dst = append(dst, byte(e.Type))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.CheckpointID))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.TimestampMillis))
	dst = binary.LittleEndian.AppendUint32(dst, e.Flags)
	return dst
}

// DecodeEvent parses the payload of an event buffer. It refuses, wrapping ErrCorrupt, a payload of another
// size, an unknown type, and a watermark or watermark status with a field set that its type does not use
// (or a status other than idle and active): such bytes were never written by this package, so they are
// damage, and reading them as a watermark could fire windows early.
func DecodeEvent(b []byte) (Event, error) {
	if len(b) != eventSize {
		return Event{}, fmt.Errorf("%w: event payload of %d bytes, want %d", ErrCorrupt, len(b), eventSize)
	}
	e := Event{
		Type:            EventType(b[0]),
		CheckpointID:    int64(binary.LittleEndian.Uint64(b[1:])),
		TimestampMillis: int64(binary.LittleEndian.Uint64(b[9:])),
		Flags:           binary.LittleEndian.Uint32(b[17:]),
	}
	switch e.Type {
	case EventEndOfPartition, EventBarrier, EventCancelCheckpoint, EventEndOfData:
	case EventWatermark:
		if e.CheckpointID != 0 || e.Flags != 0 {
			return Event{}, fmt.Errorf("%w: watermark event %d with checkpoint id %d and flags %#x, want both zero",
				ErrCorrupt, e.TimestampMillis, e.CheckpointID, e.Flags)
		}
	case EventWatermarkStatus:
		if e.Flags != WatermarkActive && e.Flags != WatermarkIdle {
			return Event{}, fmt.Errorf("%w: watermark status with flags %#x, want %d (active) or %d (idle)",
				ErrCorrupt, e.Flags, WatermarkActive, WatermarkIdle)
		}
		if e.CheckpointID != 0 || e.TimestampMillis != 0 {
			return Event{}, fmt.Errorf("%w: watermark status with checkpoint id %d and timestamp %d, want both zero",
				ErrCorrupt, e.CheckpointID, e.TimestampMillis)
		}
	default:
		return Event{}, fmt.Errorf("%w: unknown event type %d", ErrCorrupt, b[0])
	}
	return e, nil
}

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
	}
	return fmt.Sprintf("event(%d)", uint8(t))
}

// Event is an in-band control message that travels in order with the records of a channel.
type Event struct {
	Type EventType
	// CheckpointID is set for barriers and cancel markers.
	CheckpointID int64
	// TimestampMillis is the trigger time of a barrier's checkpoint.
	TimestampMillis int64
	// Flags carries checkpoint options (for example at-least-once) for barriers.
	Flags uint32
}

const eventSize = 1 + 8 + 8 + 4

func (e Event) append(dst []byte) []byte {
	dst = append(dst, byte(e.Type))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.CheckpointID))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.TimestampMillis))
	dst = binary.LittleEndian.AppendUint32(dst, e.Flags)
	return dst
}

// DecodeEvent parses the payload of an event buffer.
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
	default:
		return Event{}, fmt.Errorf("%w: unknown event type %d", ErrCorrupt, b[0])
	}
	return e, nil
}

package network

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestEventRoundTrip holds every event type to its encoding, and refuses payloads that are none of them.
func TestEventRoundTrip(t *testing.T) {
	for _, e := range []Event{
		{Type: EventEndOfPartition},
		{Type: EventBarrier, CheckpointID: 7, TimestampMillis: 1234, Flags: 1},
		{Type: EventCancelCheckpoint, CheckpointID: 9},
		{Type: EventEndOfData},
		WatermarkEvent(0),
		WatermarkEvent(1_700_000_000_123),
		WatermarkEvent(-42),
		WatermarkEvent(math.MinInt64), // the valve's MinWatermark
		WatermarkEvent(math.MaxInt64), // MaxWatermark, sent before end of data
		WatermarkStatusEvent(true),
		WatermarkStatusEvent(false),
	} {
		got, err := DecodeEvent(e.append(nil))
		if err != nil || got != e {
			t.Errorf("%s: decoded %+v, %v", e.Type, got, err)
		}
	}
	bad := []struct {
		name    string
		payload []byte
		want    string // in the error
	}{
		{"unknown type 0", Event{Type: 0}.append(nil), "unknown event type 0"},
		{"retired type 7", Event{Type: 7, CheckpointID: 3}.append(nil), "unknown event type 7"},
		{"unknown type 8", Event{Type: 8}.append(nil), "unknown event type 8"},
		{"unknown type 255", Event{Type: 255}.append(nil), "unknown event type 255"},
		{"short", Event{Type: EventEndOfData}.append(nil)[:eventSize-1], "event payload of 20 bytes, want 21"},
		{"long", append(Event{Type: EventEndOfData}.append(nil), 0), "event payload of 22 bytes, want 21"},
		{"short watermark", WatermarkEvent(5).append(nil)[:9], "event payload of 9 bytes"},
		{"watermark with flags", Event{Type: EventWatermark, TimestampMillis: 5, Flags: 1}.append(nil), "watermark event 5 with checkpoint id 0 and flags 0x1"},
		{"watermark with checkpoint id", Event{Type: EventWatermark, CheckpointID: 3}.append(nil), "watermark event 0 with checkpoint id 3"},
		{"status neither idle nor active", Event{Type: EventWatermarkStatus, Flags: 2}.append(nil), "watermark status with flags 0x2, want 0 (active) or 1 (idle)"},
		{"status with all flags", Event{Type: EventWatermarkStatus, Flags: math.MaxUint32}.append(nil), "watermark status with flags 0xffffffff"},
		{"status with a timestamp", Event{Type: EventWatermarkStatus, Flags: WatermarkIdle, TimestampMillis: 9}.append(nil), "watermark status with checkpoint id 0 and timestamp 9"},
		{"status with checkpoint id", Event{Type: EventWatermarkStatus, CheckpointID: 1}.append(nil), "watermark status with checkpoint id 1"},
	}
	for _, tc := range bad {
		_, err := DecodeEvent(tc.payload)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrCorrupt saying %q", tc.name, err, tc.want)
		}
	}
	for typ, want := range map[EventType]string{
		EventEndOfData:       "end-of-data",
		EventWatermark:       "watermark",
		EventWatermarkStatus: "watermark-status",
		9:                    "event(9)",
	} {
		if s := typ.String(); s != want {
			t.Errorf("EventType(%d).String() = %q, want %q", uint8(typ), s, want)
		}
	}
	if !WatermarkStatusEvent(true).Idle() || WatermarkStatusEvent(false).Idle() || (Event{Type: EventBarrier, Flags: WatermarkIdle}).Idle() {
		t.Error("Idle() is true exactly for an idle watermark status")
	}
}

// FuzzDecodeEvent feeds arbitrary event payloads: DecodeEvent must never panic, must refuse with ErrCorrupt
// whatever it does not accept, and what it accepts must encode back to the same bytes (no two payloads
// decode to one event, so no damage passes for a valid event by being normalised away).
func FuzzDecodeEvent(f *testing.F) {
	for _, e := range []Event{
		{Type: EventEndOfPartition},
		{Type: EventBarrier, CheckpointID: 7, TimestampMillis: 1234, Flags: 1},
		{Type: EventCancelCheckpoint, CheckpointID: 9},
		{Type: EventEndOfData},
		WatermarkEvent(1_700_000_000_123),
		WatermarkEvent(math.MinInt64),
		WatermarkStatusEvent(true),
		WatermarkStatusEvent(false),
		{Type: EventWatermarkStatus, Flags: 2},
	} {
		f.Add(e.append(nil))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, payload []byte) {
		e, err := DecodeEvent(payload)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if again := e.append(nil); !bytes.Equal(again, payload) {
			t.Fatalf("%+v decoded from % x encodes as % x", e, payload, again)
		}
	})
}

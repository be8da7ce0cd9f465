package network

import (
	"errors"
	"testing"
)

// TestEventRoundTrip holds every event type to its encoding, and refuses payloads that are none of them.
func TestEventRoundTrip(t *testing.T) {
	for _, e := range []Event{
		{Type: EventEndOfPartition},
		{Type: EventBarrier, CheckpointID: 7, TimestampMillis: 1234, Flags: 1},
		{Type: EventCancelCheckpoint, CheckpointID: 9},
		{Type: EventEndOfData},
	} {
		got, err := DecodeEvent(e.append(nil))
		if err != nil || got != e {
			t.Errorf("%s: decoded %+v, %v", e.Type, got, err)
		}
	}
	bad := []struct {
		name    string
		payload []byte
	}{
		{"unknown type 0", Event{Type: 0}.append(nil)},
		{"unknown type 5", Event{Type: 5}.append(nil)},
		{"short", Event{Type: EventEndOfData}.append(nil)[:eventSize-1]},
		{"long", append(Event{Type: EventEndOfData}.append(nil), 0)},
	}
	for _, tc := range bad {
		if _, err := DecodeEvent(tc.payload); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", tc.name, err)
		}
	}
	if s := EventEndOfData.String(); s != "end-of-data" {
		t.Errorf("EventEndOfData.String() = %q", s)
	}
}

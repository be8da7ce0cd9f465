package task

import (
	"bytes"
	"encoding/binary"
	"io"
	"maps"
	"testing"

	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// TestStatesRoundTrip pins the subtask state blob: what encodeStates writes in place, with padded lengths,
// decodeStates reads back, also in reused memory.
func TestStatesRoundTrip(t *testing.T) {
	want := map[string][]byte{
		"empty":          {},
		"small":          []byte("abc"),
		"large":          bytes.Repeat([]byte{7, 1, 0}, 50_000),
		channelStateName: {3, 1, 2, 3},
	}
	var writers []StateWriter
	for _, name := range []string{"empty", "small", "large", channelStateName} {
		data := want[name]
		writers = append(writers, StateWriter{Operator: name, Write: func(w io.Writer) error { _, err := w.Write(data); return err }})
	}
	var mem checkpoint.BlobMemory
	for round := range 2 {
		blob := checkpoint.NewBlob(mem)
		if err := encodeStates(blob, writers); err != nil {
			t.Fatal(err)
		}
		got, err := decodeStates(blob.Payload())
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !maps.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("round %d: decoded %d states, differing from what was written", round, len(got))
		}
		mem = blob.Memory()
	}
}

func TestPaddedUvarint(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 300, 1 << 40, 1<<63 + 5, ^uint64(0)} {
		var b [binary.MaxVarintLen64]byte
		putPaddedUvarint(b[:], v)
		got, n := binary.Uvarint(b[:])
		if got != v || n != len(b) {
			t.Errorf("%d: read back %d from %d bytes", v, got, n)
		}
	}
}

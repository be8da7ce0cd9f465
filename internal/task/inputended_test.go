package task

import (
	"io"
	"testing"

	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// TestInputEndedInState: InputEndedInState tells a snapshot taken after the end of the input (it holds the entry
// snapshotTaken adds then) from one taken before, and refuses a malformed blob.
func TestInputEndedInState(t *testing.T) {
	blob := func(writers ...StateWriter) []byte {
		b := checkpoint.NewBlob(checkpoint.BlobMemory{})
		if err := encodeStates(b, writers); err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b.Payload()...)
	}
	op := StateWriter{Operator: "sum", Write: func(w io.Writer) error { _, err := w.Write([]byte("state")); return err }}
	r := &run{in: newInput(nil, nil, 0)}
	if w := r.snapshotTaken(1); w != nil {
		t.Fatal("an entry before the end of the input")
	}
	before := blob(op)
	r.in.closed = true
	after := blob(op, *r.snapshotTaken(2))
	for _, tc := range []struct {
		name    string
		payload []byte
		want    bool
	}{{"before", before, false}, {"after", after, true}, {"empty", blob(), false}} {
		got, err := InputEndedInState(tc.payload)
		if err != nil || got != tc.want {
			t.Errorf("%s the end of the input: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := InputEndedInState(after[:len(after)-1]); err == nil {
		t.Error("a truncated blob was read")
	}
}

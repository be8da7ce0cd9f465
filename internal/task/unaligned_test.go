package task

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
)

// inflightRun is a run with two input channels, from two subtasks of vertex 3 (result 5), and one output
// of two subpartitions (result 7): enough to encode and decode channel state.
func inflightRun() *run {
	ch := func(index int32, attempt int32) deploy.ChannelSpec {
		return deploy.ChannelSpec{Partition: ident.PartitionID{Result: 5, Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: 3, Index: index}, Number: attempt}}, Subpartition: 1}
	}
	return &run{t: &Task{cfg: Config{Outputs: []deploy.OutputSpec{{Result: 7, Subpartitions: 2}}}},
		in: newInput([]deploy.ChannelSpec{ch(0, 0), ch(1, 4)}, []int{0, 0}, 0)}
}

// TestInflightEntryRoundTrip: what an unaligned checkpoint stores decodes to the same channels, buffers,
// parts of records and barriers after the snapshot, keyed by producer vertex, subtask and subpartition
// (not attempt); an empty state is empty.
func TestInflightEntryRoundTrip(t *testing.T) {
	r := inflightRun()
	u := &pendingUnaligned{
		inputs:   [][][]byte{{[]byte("buffer one"), []byte("two")}, nil},
		partials: [][]byte{nil, []byte("a record's start")},
		after:    []bool{true, false},
		outputs:  [][]network.OutputChannelState{{{NextSeq: 12, Buffers: [][]byte{[]byte("queued")}}, {NextSeq: 3}}},
	}
	st, err := decodeInflight(r.encodeInflight(u))
	if err != nil {
		t.Fatal(err)
	}
	want := inflightState{
		inputs: []inputChannelState{
			{channel: channelKey{result: 5, vertex: 3, index: 0, subpartition: 1}, barrierAfter: true, buffers: [][]byte{[]byte("buffer one"), []byte("two")}},
			{channel: channelKey{result: 5, vertex: 3, index: 1, subpartition: 1}, partial: []byte("a record's start"), buffers: [][]byte{}},
		},
		outputs: []outputState{{result: 7, subs: []network.OutputChannelState{{NextSeq: 12, Buffers: [][]byte{[]byte("queued")}}, {NextSeq: 3, Buffers: [][]byte{}}}}},
	}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("decoded %+v\nwant    %+v", st, want)
	}
	if st.empty() {
		t.Fatal("a state with buffers is empty")
	}
	empty := &pendingUnaligned{inputs: make([][][]byte, 2), after: make([]bool, 2), outputs: [][]network.OutputChannelState{{{NextSeq: 1}, {NextSeq: 2}}}}
	if st, err := decodeInflight(r.encodeInflight(empty)); err != nil || !st.empty() {
		t.Fatalf("empty state: %+v, %v", st, err)
	}
}

// TestInflightEntryRefusesBadBytes: an entry that does not decode is refused with an error that says so,
// whatever byte is wrong or missing; another format's names its version.
func TestInflightEntryRefusesBadBytes(t *testing.T) {
	r := inflightRun()
	good := r.encodeInflight(&pendingUnaligned{
		inputs: [][][]byte{{[]byte("x")}, nil}, partials: [][]byte{nil, []byte("p")}, after: []bool{false, true},
		outputs: [][]network.OutputChannelState{{{NextSeq: 1, Buffers: [][]byte{[]byte("q")}}, {}}},
	})
	for cut := range len(good) {
		if _, err := decodeInflight(good[:cut]); err == nil {
			t.Fatalf("the first %d of %d bytes decode", cut, len(good))
		}
	}
	if _, err := decodeInflight(append(good[:len(good):len(good)], 0)); !errors.Is(err, errMalformedInflight) {
		t.Fatalf("a trailing byte: %v", err)
	}
	other := append([]byte{9}, good[1:]...)
	if _, err := decodeInflight(other); err == nil || !strings.Contains(err.Error(), "format 9") {
		t.Fatalf("format 9: %v", err)
	}
	if err := refuseInflight(4, "sum", 1, good); !errors.Is(err, ErrRescaleUnaligned) || !strings.Contains(err.Error(), "savepoint") {
		t.Fatalf("rescaling records in flight: %v", err)
	}
	empty := r.encodeInflight(&pendingUnaligned{inputs: make([][][]byte, 2), after: make([]bool, 2)})
	if err := refuseInflight(4, "sum", 1, empty); err != nil {
		t.Fatalf("rescaling an empty channel state: %v", err)
	}
}

package task

import (
	"encoding/binary"
	"testing"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
)

func TestRestorePositions(t *testing.T) {
	prod := func(idx, n int32) ident.PartitionID {
		return ident.PartitionID{Result: 3, Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: 1, Index: idx}, Number: n}}
	}
	recorded := []deploy.ChannelSpec{{Partition: prod(0, 0), Subpartition: 1}, {Partition: prod(1, 2), Subpartition: 1}}
	positions := encodePositions(recorded, []uint64{500, 70})
	legacy := binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(nil, 2), 11), 12)
	for _, tc := range []struct {
		name     string
		sameRun  bool
		states   map[string][]byte
		channels []deploy.ChannelSpec
		want     []uint64
	}{
		{"same producers", true, map[string][]byte{channelPositionsName: positions}, recorded, []uint64{500, 70}},
		{"a producer restarted since: its new sequence starts at 0", true, map[string][]byte{channelPositionsName: positions},
			[]deploy.ChannelSpec{{Partition: prod(0, 1), Subpartition: 1}, {Partition: prod(1, 2), Subpartition: 1}}, []uint64{0, 70}},
		{"channels in another order", true, map[string][]byte{channelPositionsName: positions},
			[]deploy.ChannelSpec{recorded[1], recorded[0]}, []uint64{70, 500}},
		{"upstream rescaled: a third channel, the others kept", true, map[string][]byte{channelPositionsName: positions},
			append(append([]deploy.ChannelSpec{}, recorded...), deploy.ChannelSpec{Partition: prod(2, 0), Subpartition: 1}), []uint64{500, 70, 0}},
		{"savepoint of another run: all fresh", false, map[string][]byte{channelPositionsName: positions}, recorded, []uint64{0, 0}},
		{"legacy entry, channels line up", true, map[string][]byte{channelStateName: legacy}, recorded, []uint64{11, 12}},
		{"legacy entry, channel count changed: fresh", true, map[string][]byte{channelStateName: legacy},
			append(append([]deploy.ChannelSpec{}, recorded...), deploy.ChannelSpec{Partition: prod(2, 0)}), []uint64{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{in: newInput(tc.channels, make([]int, len(tc.channels)), 0)}
			states := map[string][]byte{"op": {1}}
			for k, v := range tc.states {
				states[k] = v
			}
			if err := r.restorePositions(&deploy.RestoreSpec{CheckpointID: 9, SameRun: tc.sameRun}, states, false); err != nil {
				t.Fatal(err)
			}
			for i, w := range tc.want {
				if r.in.restored[i] != w {
					t.Fatalf("channel %d restored at %d, want %d (all %v)", i, r.in.restored[i], w, r.in.restored)
				}
				// What the channel delivers before a position that names its producer is in the state: the
				// decoder drops it.
				if got := r.in.decoders[i].Resume(); tc.states[channelPositionsName] != nil && w > 0 && got != w {
					t.Fatalf("channel %d's decoder resumes at %d, want %d", i, got, w)
				}
			}
			if len(states) != 1 || states["op"] == nil {
				t.Fatalf("the task's own entries were not taken out of the operators' states: %v", states)
			}
		})
	}
}

func TestDecodePositionsRejectsDamage(t *testing.T) {
	good := encodePositions([]deploy.ChannelSpec{{Subpartition: 1}}, []uint64{5})
	for _, b := range [][]byte{nil, good[:len(good)-1], append(append([]byte{}, good...), 0), binary.AppendUvarint(nil, 1<<40)} {
		if _, err := decodePositions(b); err == nil {
			t.Fatalf("decodePositions(%x) accepted damaged input", b)
		}
	}
	if m, err := decodePositions(good); err != nil || len(m) != 1 {
		t.Fatalf("decodePositions(good) = %v, %v", m, err)
	}
}

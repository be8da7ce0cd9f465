package task

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
)

// TestInputSide drives the input side through scripts of what a task takes from its channels, and checks
// each answer against what the protocol says: a channel's first buffer joins it, and its loss is the
// records between the restored position and the buffer's first; ends of data and of partition end the
// task's input once every channel delivered one; records after an end break the protocol; a checkpoint
// records, per channel, the first record the task has not had.
func TestInputSide(t *testing.T) {
	type step struct {
		do  string // restore (ch at seq), event (ch, first record seq), eod, eop, records, close
		ch  int
		seq uint64
		// want: the join of an event (nil: none), the end of an eod or eop, the error's text ("": none)
		join *join
		end  end
		err  string
	}
	for _, tc := range []struct {
		name      string
		channels  int
		steps     []step
		positions []uint64
		drained   bool
	}{
		{name: "a fresh channel joins on its first event, losing nothing", channels: 2,
			steps: []step{
				{do: "event", ch: 0, seq: 0, join: &join{}},
				{do: "event", ch: 0, seq: 0},
				{do: "records", ch: 0},
			},
			positions: []uint64{0, 0}},
		{name: "a restored channel joining past its position counts the gap", channels: 2,
			steps: []step{
				{do: "restore", ch: 0, seq: 5},
				{do: "event", ch: 0, seq: 9, join: &join{Lost: 4}},
				{do: "event", ch: 1, seq: 3, join: &join{Lost: 3}},
			},
			// Past the gap: a restore of this checkpoint must not count it again.
			positions: []uint64{9, 3}},
		{name: "an event before the restored position loses nothing", channels: 1,
			steps: []step{
				{do: "restore", ch: 0, seq: 5},
				{do: "event", ch: 0, seq: 3, join: &join{}},
			},
			// The decoder still drops what the state holds: the position stays the restored one.
			positions: []uint64{5}},
		{name: "a restored channel not joined yet keeps its position", channels: 2,
			steps:     []step{{do: "restore", ch: 1, seq: 40}},
			positions: []uint64{0, 40}},
		{name: "ends of data, then of partition, end the input", channels: 2,
			steps: []step{
				{do: "eod", ch: 0, end: end{}},
				{do: "records", ch: 0, err: "records after the channel's end of data"},
				{do: "records", ch: 1},
				{do: "eop", ch: 0, end: end{first: true}},
				{do: "eop", ch: 0, end: end{}},
				{do: "eod", ch: 1, end: end{done: true}},
				{do: "eop", ch: 1, end: end{first: true, done: true}},
			},
			positions: []uint64{0, 0}, drained: true},
		{name: "an end of partition without end of data ends the channel's records", channels: 1,
			steps: []step{
				{do: "eop", ch: 0, end: end{first: true, done: true}},
				{do: "records", ch: 0, err: "records after the channel's end of data"},
				{do: "eod", ch: 0, end: end{done: true}},
			},
			positions: []uint64{0}, drained: true},
		{name: "records after the task's input ended break the protocol", channels: 2,
			steps: []step{
				{do: "close"},
				{do: "records", ch: 1, err: "records after the task's input ended"},
			},
			positions: []uint64{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			channels := make([]deploy.ChannelSpec, tc.channels)
			for i := range channels {
				channels[i] = deploy.ChannelSpec{Partition: ident.PartitionID{Result: 1, Producer: ident.Attempt{Subtask: ident.Subtask{Index: int32(i)}}}}
			}
			in := newInput(channels, make([]int, tc.channels), 0)
			for i, s := range tc.steps {
				var (
					gotJoin *join
					gotEnd  end
					err     error
				)
				switch s.do {
				case "restore":
					in.restorePositions(map[channelID]uint64{channelOf(channels[s.ch]): s.seq})
				case "event":
					if j, ok := in.joinOnEvent(s.ch, s.seq); ok {
						gotJoin = &j
					}
				case "eod":
					gotEnd, err = in.endOfData(s.ch)
				case "eop":
					gotEnd, err = in.endOfPartition(s.ch)
				case "records":
					err = in.recordsAllowed(s.ch)
				case "close":
					in.closed = true
				default:
					t.Fatalf("step %d: unknown %q", i, s.do)
				}
				switch {
				case (gotJoin == nil) != (s.join == nil) || gotJoin != nil && *gotJoin != *s.join:
					t.Fatalf("step %d (%s %d): join %+v, want %+v", i, s.do, s.ch, gotJoin, s.join)
				case gotEnd != s.end:
					t.Fatalf("step %d (%s %d): end %+v, want %+v", i, s.do, s.ch, gotEnd, s.end)
				case s.err == "" && err != nil:
					t.Fatalf("step %d (%s %d): %v", i, s.do, s.ch, err)
				case s.err != "" && (err == nil || !strings.Contains(err.Error(), s.err) || !errors.Is(err, network.ErrCorrupt)):
					t.Fatalf("step %d (%s %d): error %v, want one saying %q that wraps ErrCorrupt", i, s.do, s.ch, err, s.err)
				}
			}
			if got := in.positions(); !slices.Equal(got, tc.positions) {
				t.Errorf("positions %v, want %v", got, tc.positions)
			}
			if in.drained() != tc.drained {
				t.Errorf("drained %v, want %v", in.drained(), tc.drained)
			}
		})
	}
}

// TestInputLegacyPositions reads the positions entry that named no producers: taken only when the
// channels line up one to one.
func TestInputLegacyPositions(t *testing.T) {
	entry := func(vs ...uint64) []byte {
		b := binary.AppendUvarint(nil, uint64(len(vs)))
		for _, v := range vs {
			b = binary.AppendUvarint(b, v)
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		entry   []byte
		want    []uint64
		wantErr bool
	}{
		{"channels line up", entry(11, 12), []uint64{11, 12}, false},
		{"another channel count: fresh", entry(11, 12, 13), []uint64{0, 0}, false},
		{"cut short", entry(11, 12)[:2], nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newInput(make([]deploy.ChannelSpec, 2), make([]int, 2), 0)
			err := in.restoreLegacyPositions(tc.entry)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want one: %v", err, tc.wantErr)
			}
			if !tc.wantErr && !slices.Equal(in.restored, tc.want) {
				t.Fatalf("restored %v, want %v", in.restored, tc.want)
			}
		})
	}
}

package task

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/network"
)

// input is a task's input side, channel by channel (what Flink's CheckpointedInputGate adds to the gate,
// without the gate): the record decoders, which drop what a restarted producer regenerates below the
// position the state holds; each channel's join, its first buffer to this attempt, whose gap after the
// restored position is approximate recovery's loss; the ends of data and of partition, and the end of the
// task's input; the positions a checkpoint records and a restore sets. It reads no gate, clock or chain
// and starts no goroutine: the task hands it what it took from the gate and carries out what it says.
type input struct {
	channels []deploy.ChannelSpec // by gate channel index
	logical  []int                // gate channel -> network input of the chain
	decoders []*network.RecordDecoder
	restored []uint64 // per channel: records consumed at the restored checkpoint
	joined   []bool
	// joinedAt is, per joined channel, the position its gap ends at: the first record after the join. A
	// checkpoint records it until the decoder synchronises on a data buffer, since a channel may join on
	// an event: a barrier, or the last watermark a reconnectable subpartition re-sends to a new reader.
	joinedAt []uint64
	// ended marks the channels that delivered their end of partition.
	ended      []bool
	endedCount int
	// dataEnded marks the channels that delivered end of data or end of partition: no more records.
	dataEnded      []bool
	dataEndedCount int
	// stored holds, per channel, the buffers a restored unaligned checkpoint stored for it (nil: none).
	stored []*storedChannel
	// closed says the task's input ended: its operators heard EndInput (or the restored checkpoint says
	// they had), and records after it break the protocol.
	closed bool
}

// newInput returns the input side of a task reading channels, each feeding network input logical[i] of
// the chain, with decoders of records up to maxRecordSize bytes.
func newInput(channels []deploy.ChannelSpec, logical []int, maxRecordSize int) *input {
	n := len(channels)
	in := &input{channels: channels, logical: logical, restored: make([]uint64, n), joined: make([]bool, n),
		joinedAt: make([]uint64, n), ended: make([]bool, n), dataEnded: make([]bool, n)}
	for range channels {
		in.decoders = append(in.decoders, network.NewRecordDecoder(maxRecordSize))
	}
	return in
}

// join is a channel's first buffer to this attempt: Lost counts the records after the restored position
// and before the first one received, PartialSkipped the pieces of a record cut by the gap.
type join struct {
	Lost, PartialSkipped uint64
}

// joinOnEvent notes an event buffer of channel idx whose first record would be firstSeq, and returns the
// channel's join if this is its first buffer.
func (in *input) joinOnEvent(idx int, firstSeq uint64) (join, bool) {
	if in.joined[idx] {
		return join{}, false
	}
	return in.join(idx, firstSeq, 0), true
}

func (in *input) join(idx int, firstSeq, partial uint64) join {
	in.joined[idx] = true
	in.joinedAt[idx] = max(firstSeq, in.restored[idx])
	return join{Lost: in.joinedAt[idx] - in.restored[idx], PartialSkipped: partial}
}

// end is what an end of data or of partition on a channel calls for.
type end struct {
	// first: the channel's first end of partition; its aligner hears of it.
	first bool
	// done: every channel delivered end of data or end of partition: the task's input ended.
	done bool
}

// endOfPartition takes channel idx's end of partition.
func (in *input) endOfPartition(idx int) (end, error) {
	if in.decoders[idx].InRecord() {
		return end{}, fmt.Errorf("input channel %d: %w: end of partition inside a record", idx, network.ErrCorrupt)
	}
	if in.ended[idx] {
		return end{done: in.done()}, nil
	}
	in.ended[idx] = true
	in.endedCount++
	in.endData(idx)
	return end{first: true, done: in.done()}, nil
}

// endOfData takes channel idx's end of data: the channel still carries barriers and its end of partition;
// only its records are over.
func (in *input) endOfData(idx int) (end, error) {
	if in.decoders[idx].InRecord() {
		return end{}, fmt.Errorf("input channel %d: %w: end of data inside a record", idx, network.ErrCorrupt)
	}
	in.endData(idx)
	return end{done: in.done()}, nil
}

func (in *input) endData(idx int) {
	if !in.dataEnded[idx] {
		in.dataEnded[idx] = true
		in.dataEndedCount++
	}
}

// done reports whether every channel delivered end of data or end of partition.
func (in *input) done() bool { return in.dataEndedCount == len(in.channels) }

// drained reports whether every channel delivered its end of partition.
func (in *input) drained() bool { return in.endedCount == len(in.channels) }

// records sets buf, a buffer of records of channel idx, into the channel's decoder, and returns the
// decoder and the channel's join if the decoder synchronised on its first records now. It refuses records
// after the channel's or the task's input ended: the producer broke the protocol, and taking them would
// count them twice after a restore.
func (in *input) records(idx int, buf *network.Buffer) (*network.RecordDecoder, join, bool, error) {
	if err := in.recordsAllowed(idx); err != nil {
		return nil, join{}, false, err
	}
	dec := in.decoders[idx]
	synced, err := dec.SetBuffer(buf)
	if err != nil {
		return nil, join{}, false, fmt.Errorf("input channel %d: %w", idx, err)
	}
	if synced && !in.joined[idx] {
		return dec, in.join(idx, dec.NextSeq(), dec.PartialRecordsSkipped), true, nil
	}
	return dec, join{}, false, nil
}

func (in *input) recordsAllowed(idx int) error {
	switch {
	case in.dataEnded[idx]:
		return fmt.Errorf("input channel %d: %w: records after the channel's end of data", idx, network.ErrCorrupt)
	case in.closed:
		return fmt.Errorf("input channel %d: %w: records after the task's input ended", idx, network.ErrCorrupt)
	}
	return nil
}

// positions returns, per channel, the first record the task has not had: what a checkpoint records.
func (in *input) positions() []uint64 {
	seqs := make([]uint64, len(in.decoders))
	for i, d := range in.decoders {
		// Past a gap the attempt counted (or a restore of this checkpoint would count it again), and past
		// the records a rejoining decoder still drops. A channel joined on an event (its gap counted
		// there) before its first data buffer stands at the gap's end, though its decoder may still wait
		// to drop what its restored state holds.
		switch {
		case d.Synced():
			seqs[i] = d.Resume()
		case in.joined[i]:
			seqs[i] = max(in.joinedAt[i], d.Resume())
		case d.Rejoining():
			seqs[i] = d.Resume()
		default:
			seqs[i] = in.restored[i]
		}
	}
	return seqs
}

// restorePositions sets each channel's restored position from the positions entry of a checkpoint
// (decodePositions): a channel that reads the producer attempt and subpartition it names starts there, and
// its decoder drops what it receives below it; the others start at 0 of their producer's sequence.
func (in *input) restorePositions(recorded map[channelID]uint64) {
	for i, c := range in.channels {
		if seq, ok := recorded[channelOf(c)]; ok {
			in.restored[i] = seq
			// The state holds every record before seq; a channel served from its producer's log starts at
			// the checkpoint's barrier, which may lie before it (the checkpoint was taken while the task
			// still dropped what a restarted producer regenerated).
			in.decoders[i].SkipTo(seq)
		}
	}
}

// restorePositionsOf sets the restored positions as restorePositions does, matching the channels by
// producer vertex, subtask and subpartition (key), whatever the producer's attempt.
func (in *input) restorePositionsOf(recorded map[channelID]uint64, key func(idx int) channelKey) {
	byKey := make(map[channelKey]uint64, len(recorded))
	for c, seq := range recorded {
		p := c.partition
		byKey[channelKey{result: uint64(p.Result), vertex: uint64(p.Producer.Vertex), index: uint64(p.Producer.Index), subpartition: c.subpartition}] = seq
	}
	for i := range in.channels {
		if seq, ok := byKey[key(i)]; ok {
			in.restored[i] = seq
			in.decoders[i].SkipTo(seq)
		}
	}
}

// restorePartial gives channel idx's decoder the first part of a record that spans buffers, as an
// unaligned checkpoint stored it (network.RecordDecoder.PartialRecord): the channel's next buffer
// continues it.
func (in *input) restorePartial(idx int, raw []byte) error {
	b, err := network.NewBufferFrom(raw)
	if err != nil {
		return err
	}
	dec := in.decoders[idx]
	if _, err := dec.SetBuffer(b); err != nil {
		return err
	}
	rec, err := dec.Next()
	if err != nil {
		return err
	}
	if rec != nil || !dec.InRecord() {
		return errors.New("the stored part of a record is a whole record")
	}
	return nil
}

// restoreLegacyPositions sets the restored positions from the legacy entry, which did not name the
// producers: only when the channels still line up one to one (otherwise they start fresh).
func (in *input) restoreLegacyPositions(legacy []byte) error {
	n, k := binary.Uvarint(legacy)
	if k <= 0 || n != uint64(len(in.restored)) {
		return nil
	}
	legacy = legacy[k:]
	for i := range in.restored {
		v, k := binary.Uvarint(legacy)
		if k <= 0 {
			return errors.New("malformed channel positions")
		}
		in.restored[i], legacy = v, legacy[k:]
	}
	return nil
}

// replayed returns, per channel, how many records the task read again from the restored position on: the
// records of a replay, counted on the channels whose decoder synchronised.
func (in *input) replayed() []uint64 {
	out := make([]uint64, len(in.decoders))
	for idx, dec := range in.decoders {
		if dec.Synced() && dec.NextSeq() > in.restored[idx] {
			out[idx] = dec.NextSeq() - in.restored[idx]
		}
	}
	return out
}

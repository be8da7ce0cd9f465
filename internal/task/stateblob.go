package task

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
)

// stateBlobName is the name of the one blob that holds all operator states of a subtask.
const stateBlobName = "state"

// channelStateName is the entry of the task's own state in the blob written by earlier versions: how many
// records it had consumed on each input channel, by channel index. The NUL keeps it apart from operator
// names. It is still read (see restorePositions); channelPositionsName replaced it.
const channelStateName = "\x00channels"

// channelPositionsName is the entry of the task's own state in the blob: for each input channel, which
// producer attempt and subpartition it read and how many records of that attempt's sequence it had
// consumed. Sequence numbers count one producer attempt's records, so a position means something only for
// the attempt it was read from: a restored channel whose producer is now another attempt (restarted since)
// or another subtask (the job was rescaled) starts at 0 of the current producer's sequence.
const channelPositionsName = "\x00channel-positions"

// operatorsOf lists, sorted, the operator uids that have an entry among writers (the task's own entries,
// whose names begin with a NUL, are not operators): what the checkpoint metadata records, so that a restore
// knows which operators' state it must place.
func operatorsOf(writers []StateWriter) []string {
	var ops []string
	for _, w := range writers {
		if !strings.HasPrefix(w.Operator, "\x00") {
			ops = append(ops, w.Operator)
		}
	}
	slices.Sort(ops)
	return ops
}

// encodeStates frames the operators' states into one blob: count, then per operator its name and its
// bytes, each with a uvarint length. An operator's bytes are written in place after a length of
// binary.MaxVarintLen64 bytes, filled in afterwards as a padded uvarint (binary.Uvarint reads it like any
// other), so that a large state is not copied once more.
func encodeStates(w *checkpoint.Blob, writers []StateWriter) error {
	var lb [binary.MaxVarintLen64]byte
	w.Write(lb[:binary.PutUvarint(lb[:], uint64(len(writers)))])
	for _, sw := range writers {
		w.Write(lb[:binary.PutUvarint(lb[:], uint64(len(sw.Operator)))])
		w.WriteString(sw.Operator)
		at := w.Len()
		var pad [binary.MaxVarintLen64]byte
		w.Write(pad[:])
		if err := sw.Write(w); err != nil {
			return fmt.Errorf("operator %q: %w", sw.Operator, err)
		}
		putPaddedUvarint(w.Payload()[at:at+binary.MaxVarintLen64], uint64(w.Len()-at-binary.MaxVarintLen64))
	}
	return nil
}

// putPaddedUvarint writes v into all of b (binary.MaxVarintLen64 bytes) as a uvarint with continuation
// bytes to spare.
func putPaddedUvarint(b []byte, v uint64) {
	last := len(b) - 1
	for i := range last {
		b[i] = byte(v) | 0x80
		v >>= 7
	}
	b[last] = byte(v)
}

// decodeStates is the inverse of encodeStates.
func decodeStates(b []byte) (map[string][]byte, error) {
	errBad := errors.New("malformed subtask state blob")
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errBad
	}
	b = b[k:]
	out := make(map[string][]byte, n)
	for i := uint64(0); i < n; i++ {
		var parts [2][]byte
		for j := range parts {
			l, k := binary.Uvarint(b)
			if k <= 0 || l > uint64(len(b)-k) {
				return nil, errBad
			}
			parts[j] = b[k : k+int(l)]
			b = b[k+int(l):]
		}
		out[string(parts[0])] = parts[1]
	}
	if len(b) != 0 {
		return nil, errBad
	}
	return out, nil
}

// channelID names what a channel reads: one subpartition of one producer attempt's partition.
type channelID struct {
	partition    ident.PartitionID
	subpartition int
}

func channelOf(c deploy.ChannelSpec) channelID {
	return channelID{partition: c.Partition, subpartition: c.Subpartition}
}

// encodePositions writes, for each channel, its producer attempt, subpartition and consumed position:
// count, then per channel result, vertex, index, attempt, subpartition, position (uvarints).
func encodePositions(channels []deploy.ChannelSpec, seqs []uint64) []byte {
	b := make([]byte, 0, 1+len(channels)*8)
	b = binary.AppendUvarint(b, uint64(len(channels)))
	for i, c := range channels {
		p := c.Partition
		for _, v := range []uint64{uint64(p.Result), uint64(p.Producer.Vertex), uint64(p.Producer.Index),
			uint64(p.Producer.Number), uint64(c.Subpartition), seqs[i]} {
			b = binary.AppendUvarint(b, v)
		}
	}
	return b
}

// maxPositionChannels bounds the channels a positions entry may name, before anything is allocated for
// them: far above any real task's inputs (parallelism is limited to 32768 per vertex).
const maxPositionChannels = 1 << 20

// decodePositions reads what encodePositions wrote.
func decodePositions(b []byte) (map[channelID]uint64, error) {
	bad := errors.New("malformed channel positions")
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxPositionChannels {
		return nil, bad
	}
	b = b[k:]
	out := make(map[channelID]uint64, n)
	var f [6]uint64
	for range n {
		for j := range f {
			v, k := binary.Uvarint(b)
			if k <= 0 {
				return nil, bad
			}
			f[j], b = v, b[k:]
		}
		if f[0] > math.MaxInt32 || f[1] > math.MaxInt32 || f[2] > math.MaxInt32 || f[3] > math.MaxInt32 || f[4] > math.MaxInt32 {
			return nil, bad
		}
		id := channelID{partition: ident.PartitionID{Result: ident.ResultID(f[0]),
			Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: ident.VertexID(f[1]), Index: int32(f[2])}, Number: int32(f[3])}},
			subpartition: int(f[4])}
		out[id] = f[5]
	}
	if len(b) != 0 {
		return nil, bad
	}
	return out, nil
}

package task

import (
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"

	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// incremental is the chain of a task's incremental checkpoints. Its writes run one after another, in
// checkpoint order (each waits for prev), so that a delta always builds on the write before it, and only
// if that one was stored.
type incremental struct {
	// prev is closed when the last write started so far has finished (nil before the first).
	prev chan struct{}
	// chain lists the blobs the next delta builds on, oldest (a full one) first; nil after a failed
	// write, so that the next one is full. total is their size, dead how much of it later blobs
	// supersede (what the deltas report, and the entries of operators that write no deltas, which each
	// blob holds whole); whole is that part of the last blob. The chain starts again with a full blob once
	// dead bytes are as many as live ones (a restore reads at most about twice the state), or after
	// maxChain blobs.
	chain              []checkpoint.BlobRef
	total, dead, whole int64
	// superseded and written gather, while a blob is encoded, what its deltas supersede and the size of
	// its entries of operators that write no deltas.
	superseded, written int64
}

// maxChain bounds the blobs a restore of an incremental checkpoint reads per subtask.
const maxChain = 64

// deltasName is the task's own entry in an incremental blob that lists the operators whose entries are
// deltas (StateWriter.Delta) of the blobs before it in the handle: a count, then per operator its uid,
// each with a uvarint length.
const deltasName = "\x00deltas"

// plan returns the writers of the next incremental blob: the deltas of the operators that write them
// when the chain may grow, the whole state otherwise, and the task's entry naming the deltas; and how
// many deltas there are. The writers count what stored needs.
func (c *incremental) plan(writers []StateWriter) ([]StateWriter, int) {
	c.superseded, c.written = 0, 0
	full := c.chain == nil || len(c.chain) >= maxChain || 2*c.dead >= c.total
	out := make([]StateWriter, 0, len(writers)+1)
	var names []string
	for _, w := range writers {
		switch {
		case w.Delta != nil && !full:
			names = append(names, w.Operator)
			delta := w.Delta
			w.Write = func(out io.Writer) error {
				n, err := delta(out)
				c.superseded += n
				return err
			}
		case w.Delta == nil:
			write := w.Write
			w.Write = func(out io.Writer) error {
				b, _ := out.(*checkpoint.Blob)
				if b == nil {
					return write(out)
				}
				at := b.Len()
				err := write(out)
				c.written += int64(b.Len() - at)
				return err
			}
		}
		out = append(out, w)
	}
	if len(names) == 0 {
		return out, 0
	}
	entry := appendList(nil, names)
	out = append(out, bytesEntry(deltasName, entry))
	return out, len(names)
}

// stored records a blob written with delta entries or without, and returns the chain the handle lists.
func (c *incremental) stored(ref checkpoint.BlobRef, delta bool) []checkpoint.BlobRef {
	if !delta {
		c.chain, c.total, c.dead = nil, 0, 0
	} else {
		c.dead += c.whole + c.superseded
	}
	c.total += ref.Size
	c.whole = c.written
	c.chain = append(slices.Clip(c.chain), ref)
	return slices.Clone(c.chain)
}

// decodeDeltas reads the entry plan writes.
func decodeDeltas(b []byte) (map[string]bool, error) {
	names, err := splitList(b, errors.New("malformed list of delta entries"))
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[string(n)] = true
	}
	return out, nil
}

// appendList appends items as a count and each item with its length (uvarints): the form of the deltas
// entry and of JoinPieces.
func appendList[T ~string | ~[]byte](b []byte, items []T) []byte {
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = binary.AppendUvarint(b, uint64(len(it)))
		b = append(b, it...)
	}
	return b
}

// splitList reads what appendList wrote, the whole of b; the items alias b. Anything else is bad.
func splitList(b []byte, bad error) ([][]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, bad
	}
	b = b[k:]
	out := make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, bad
		}
		out = append(out, b[k:k+int(l)])
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return nil, bad
	}
	return out, nil
}

// JoinPieces frames the entries one operator has in the blobs of an incremental chain, from the last
// whole one on, as the operator's state: the restore hands the operator all of them (SplitPieces).
func JoinPieces(pieces [][]byte) []byte {
	n := len(piecesMagic) + binary.MaxVarintLen64
	for _, p := range pieces {
		n += binary.MaxVarintLen64 + len(p)
	}
	return appendList(append(make([]byte, 0, n), piecesMagic...), pieces)
}

// piecesMagic starts what JoinPieces makes. Only operators that write deltas get it, and their own state
// never starts so (keyed state starts with its snapshot magic or operator list state's).
const piecesMagic = "\x00RNPIECES"

// SplitPieces returns the pieces JoinPieces framed, and false if b is not so framed (a single state).
func SplitPieces(b []byte) ([][]byte, bool, error) {
	if !strings.HasPrefix(string(b[:min(len(b), len(piecesMagic))]), piecesMagic) {
		return nil, false, nil
	}
	out, err := splitList(b[len(piecesMagic):], errors.New("malformed chain of incremental state"))
	return out, true, err
}

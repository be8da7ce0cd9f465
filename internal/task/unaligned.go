package task

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/network"
)

// Unaligned checkpoints (Flink's FLIP-76; docs/checkpoints.md, "Unaligned checkpoints")
//
// A task snapshots an unaligned checkpoint at its first barrier, or when its alignment of an aligned one
// took longer than the aligned checkpoint timeout: its operators' state as usual, and at once it forwards
// the barrier ahead of what its output queues hold (network.ResultPartition.OvertakeWithBarrier), which
// hands back copies of the overtaken buffers: the output channel state. Then it goes on processing every
// channel, and stores, as the input channel state, what each channel that had not delivered the barrier
// delivers until it does (or ends), together with the part of a record that spans buffers its decoder held
// at the snapshot. When the last barrier came, the checkpoint is complete and written, the channel state as
// one more entry of the task's state blob (inflightName).
//
// A restore puts the output channel state back into the new partitions first, numbering on from where
// the checkpoint stood, and hands each input channel its stored buffers before what it delivers live
// (storedChannel), so that the records travel again in the order they had. A channel whose barrier came
// after the snapshot gets its barrier back after its stored buffers: a replay under task failover takes
// the buffers in the order the failed attempt took them, barrier included.

// Barrier flags (network.Event.Flags and the triggers' flags). Bit 0 marks an at-least-once checkpoint.
const (
	// FlagUnaligned marks an unaligned checkpoint's barrier.
	FlagUnaligned uint32 = 1 << 1
	// FlagAlignedTimeout marks the barrier of a checkpoint that starts aligned and that a task switches to
	// unaligned once its alignment took longer than CheckpointSetup.AlignedTimeout.
	FlagAlignedTimeout uint32 = 1 << 2
)

// inflightName is the entry, in the state blob of an unaligned checkpoint, that holds the task's channel
// state. Every task writes it in such a checkpoint, empty or not, so that a restore knows its producers
// number on from where the checkpoint stood.
const inflightName = "\x00inflight"

// inflightVersion is the format of the inflightName entry.
const inflightVersion = 1

// MaxInputChannelState bounds the bytes of input channel state one checkpoint of one task stores: what its
// channels deliver between its snapshot and their barriers. Past it the task declines the checkpoint (a
// failed checkpoint, counted against the tolerable failures) and stores no more. Under backpressure a
// channel delivers little before its barrier, which overtook its producer's queue; the bound is for a
// producer whose own barrier comes late while its channel flows fast.
const MaxInputChannelState = 256 << 20

// pendingUnaligned is an unaligned checkpoint snapshotted and still storing its input channel state.
type pendingUnaligned struct {
	id       int64
	writers  []StateWriter
	outputs  [][]network.OutputChannelState // per output partition, per subpartition
	inputs   [][][]byte                     // per input channel, the buffers stored, oldest first
	partials [][]byte                       // per input channel, the part of a record its decoder held
	storing  []bool                         // the channel has not delivered the barrier and not ended
	after    []bool                         // the channel delivered the barrier after the snapshot
	bytes    int64
	overflow bool
}

// unalignedFlags returns the flags a checkpoint triggered at a source (or a task triggered directly) is
// forwarded with, from the trigger's: an unaligned checkpoint of a job with an aligned checkpoint timeout
// starts aligned.
func (r *run) unalignedFlags(flags uint32) uint32 {
	if flags&FlagUnaligned != 0 && r.cp.setup.AlignedTimeout > 0 {
		return flags&^FlagUnaligned | FlagAlignedTimeout
	}
	return flags
}

// snapshotUnaligned snapshots checkpoint id unaligned: the chain's state and the task's entries, the
// barrier forwarded ahead of the output queues, and, with store, the input channels that have not
// delivered it (as the aligner says) stored from now on. It reports whether it took the snapshot (a
// declined one is not).
func (r *run) snapshotUnaligned(id, ts int64, flags uint32, store bool) bool {
	writers, ok := r.snapshotChain(id)
	if !ok {
		return false
	}
	u := &pendingUnaligned{id: id, writers: writers}
	ev := network.Event{Type: network.EventBarrier, CheckpointID: id, TimestampMillis: ts, Flags: flags&^FlagAlignedTimeout | FlagUnaligned}
	for _, p := range r.outputs {
		st, err := p.OvertakeWithBarrier(ev)
		if err != nil {
			Abort(fmt.Errorf("forward barrier of checkpoint %d: %w", id, err))
		}
		u.outputs = append(u.outputs, st)
	}
	n := len(r.in.channels)
	u.inputs, u.partials, u.storing, u.after = make([][][]byte, n), make([][]byte, n), make([]bool, n), make([]bool, n)
	for i, d := range r.in.decoders {
		// The rest of a buffer in progress is a buffer of the channel's state; the first part of a
		// record that spans buffers goes back into the decoder on a restore, so that a replay takes the
		// buffers the failed attempt took, no more.
		if d.More() {
			rest := d.Unconsumed()
			u.inputs[i] = append(u.inputs[i], rest)
			u.bytes += int64(len(rest))
		} else if part := d.PartialRecord(); part != nil {
			u.partials[i] = part
			u.bytes += int64(len(part))
		}
		u.storing[i] = store && r.aligner != nil && !r.aligner.Received(i) && !r.aligner.Ended(i)
	}
	r.uc = u
	return true
}

// storeInput stores buf, just taken from channel idx, in the pending unaligned checkpoint's input channel
// state if the channel has not delivered the checkpoint's barrier. Barriers and cancel markers are not
// stored (the aligner hears them), nor an end of partition: the channel ends there.
func (u *pendingUnaligned) storeInput(idx int, buf *network.Buffer) {
	if buf.Kind == network.KindEvent {
		p := buf.Payload()
		if len(p) == 0 {
			return
		}
		switch network.EventType(p[0]) {
		case network.EventBarrier, network.EventCancelCheckpoint:
			return
		case network.EventEndOfPartition:
			u.storing[idx] = false
			return
		}
	}
	if u.overflow {
		return
	}
	u.bytes += int64(buf.Len())
	if u.bytes > MaxInputChannelState {
		u.overflow = true
		u.inputs = nil
		return
	}
	u.inputs[idx] = append(u.inputs[idx], bytes.Clone(buf.Bytes()))
}

// barrierArrived notes that channel idx delivered the barrier of checkpoint id.
func (u *pendingUnaligned) barrierArrived(idx int, id int64) {
	if id == u.id && u.storing[idx] {
		u.storing[idx] = false
		u.after[idx] = true
	}
}

// completeUnaligned writes the pending unaligned checkpoint id, whose input channel state is complete.
func (r *run) completeUnaligned(id int64) {
	u := r.uc
	if u == nil || u.id != id {
		return
	}
	r.uc = nil
	if u.overflow {
		r.cp.decline(id, fmt.Errorf("the input channel state of unaligned checkpoint %d passed %d bytes (MaxInputChannelState): its producers' barriers came late while their channels delivered data", id, MaxInputChannelState))
		return
	}
	entry := r.encodeInflight(u)
	writers := append(u.writers, bytesEntry(inflightName, entry))
	n := u.bytes
	for _, subs := range u.outputs {
		for _, s := range subs {
			for _, x := range s.Buffers {
				n += int64(len(x))
			}
		}
	}
	r.cp.write(id, writers, AckStats{Alignment: r.align.took(id), ChannelStateBytes: n})
}

// dropUnaligned forgets the pending unaligned checkpoint id, which the task abandoned.
func (r *run) dropUnaligned(id int64) {
	if r.uc != nil && r.uc.id == id {
		r.uc = nil
	}
}

// inflightState is the decoded inflightName entry.
type inflightState struct {
	inputs  []inputChannelState
	outputs []outputState
}

// inputChannelState is one input channel's stored buffers.
type inputChannelState struct {
	channel channelKey
	// barrierAfter says the channel delivered the checkpoint's barrier after the snapshot, after the
	// stored buffers.
	barrierAfter bool
	// partial is the first part of a record that spans buffers, which the channel's decoder held at the
	// snapshot, as a sealed buffer (network.RecordDecoder.PartialRecord), or nil.
	partial []byte
	buffers [][]byte
}

// outputState is one output partition's overtaken buffers, per subpartition.
type outputState struct {
	result uint64
	subs   []network.OutputChannelState
}

// channelKey names an input channel regardless of the producer's attempt: in an unaligned checkpoint
// the producers number on across a restore.
type channelKey struct {
	result, vertex, index uint64
	subpartition          int
}

func (r *run) keyOf(idx int) channelKey {
	c := r.in.channels[idx]
	p := c.Partition
	return channelKey{result: uint64(p.Result), vertex: uint64(p.Producer.Vertex), index: uint64(p.Producer.Index), subpartition: c.Subpartition}
}

// encodeInflight writes the entry: version, input channels (producer result, vertex, index, subpartition,
// whether the barrier came after, buffers), outputs (result, per subpartition the next record and the
// buffers), every number a uvarint and every buffer length-prefixed.
func (r *run) encodeInflight(u *pendingUnaligned) []byte {
	b := []byte{inflightVersion}
	b = binary.AppendUvarint(b, uint64(len(u.inputs)))
	appendBufs := func(b []byte, bufs [][]byte) []byte {
		b = binary.AppendUvarint(b, uint64(len(bufs)))
		for _, x := range bufs {
			b = binary.AppendUvarint(b, uint64(len(x)))
			b = append(b, x...)
		}
		return b
	}
	for i, bufs := range u.inputs {
		k := r.keyOf(i)
		for _, v := range []uint64{k.result, k.vertex, k.index, uint64(k.subpartition)} {
			b = binary.AppendUvarint(b, v)
		}
		flags := byte(0)
		if u.after[i] {
			flags |= 1
		}
		if u.partials != nil && u.partials[i] != nil {
			flags |= 2
		}
		b = append(b, flags)
		if flags&2 != 0 {
			b = binary.AppendUvarint(b, uint64(len(u.partials[i])))
			b = append(b, u.partials[i]...)
		}
		b = appendBufs(b, bufs)
	}
	b = binary.AppendUvarint(b, uint64(len(u.outputs)))
	for o, subs := range u.outputs {
		b = binary.AppendUvarint(b, uint64(r.t.cfg.Outputs[o].Result))
		b = binary.AppendUvarint(b, uint64(len(subs)))
		for _, s := range subs {
			b = binary.AppendUvarint(b, s.NextSeq)
			b = appendBufs(b, s.Buffers)
		}
	}
	return b
}

// errMalformedInflight says the channel state entry does not decode.
var errMalformedInflight = errors.New("malformed channel state of an unaligned checkpoint")

// decodeInflight is the inverse of encodeInflight.
func decodeInflight(b []byte) (inflightState, error) {
	var st inflightState
	if len(b) == 0 {
		return st, errMalformedInflight
	}
	if b[0] != inflightVersion {
		return st, fmt.Errorf("channel state of format %d, this build reads format %d", b[0], inflightVersion)
	}
	b = b[1:]
	bad := false
	num := func() uint64 {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			bad = true
			return 0
		}
		b = b[k:]
		return v
	}
	bufs := func() [][]byte {
		n := num()
		if bad || n > uint64(len(b)) {
			bad = true
			return nil
		}
		out := make([][]byte, 0, n)
		for range n {
			l := num()
			if bad || l > uint64(len(b)) {
				bad = true
				return nil
			}
			out = append(out, b[:l:l])
			b = b[l:]
		}
		return out
	}
	n := num()
	if bad || n > uint64(len(b)) {
		return st, errMalformedInflight
	}
	for range n {
		var in inputChannelState
		in.channel = channelKey{result: num(), vertex: num(), index: num(), subpartition: int(num())}
		if bad || len(b) == 0 || b[0] > 3 {
			return st, errMalformedInflight
		}
		flags := b[0]
		in.barrierAfter = flags&1 != 0
		b = b[1:]
		if flags&2 != 0 {
			l := num()
			if bad || l > uint64(len(b)) {
				return st, errMalformedInflight
			}
			in.partial, b = b[:l:l], b[l:]
		}
		in.buffers = bufs()
		if bad {
			return st, errMalformedInflight
		}
		st.inputs = append(st.inputs, in)
	}
	n = num()
	if bad || n > uint64(len(b)) {
		return st, errMalformedInflight
	}
	for range n {
		o := outputState{result: num()}
		subs := num()
		if bad || subs > uint64(len(b)) {
			return st, errMalformedInflight
		}
		for range subs {
			s := network.OutputChannelState{NextSeq: num()}
			s.Buffers = bufs()
			if bad {
				return st, errMalformedInflight
			}
			o.subs = append(o.subs, s)
		}
		st.outputs = append(st.outputs, o)
	}
	if len(b) != 0 {
		return st, errMalformedInflight
	}
	return st, nil
}

// empty reports whether the state holds no buffer.
func (st inflightState) empty() bool {
	for _, in := range st.inputs {
		if len(in.buffers) > 0 {
			return false
		}
	}
	for _, o := range st.outputs {
		for _, s := range o.subs {
			if len(s.Buffers) > 0 {
				return false
			}
		}
	}
	return true
}

// restoreInflight puts an unaligned checkpoint's channel state back: the output channel state into the
// new partitions (not into partitions taken over, whose streams hold it), and each input channel's stored
// buffers in front of what it delivers. Call it before anything is written or read.
func (r *run) restoreInflight(id int64, entry []byte) error {
	st, err := decodeInflight(entry)
	if err != nil {
		return fmt.Errorf("restore from checkpoint %d: %w", id, err)
	}
	if !r.t.cfg.TakeOver {
		for _, o := range st.outputs {
			p := r.outputByResult(o.result)
			if p == nil {
				return fmt.Errorf("restore from checkpoint %d: channel state of result %d, which this subtask does not produce", id, o.result)
			}
			if len(o.subs) != p.NumSubpartitions() {
				// Its consumers were rescaled: what it held for them cannot be split up.
				if (inflightState{outputs: []outputState{o}}).empty() {
					continue
				}
				return fmt.Errorf("restore from checkpoint %d: %s: %w (its output to %d consumers held records in flight; it has %d now)",
					id, r.t.cfg.Info.Name(), ErrRescaleUnaligned, len(o.subs), p.NumSubpartitions())
			}
			for s, sub := range o.subs {
				if err := p.RestoreOutput(s, sub); err != nil {
					return fmt.Errorf("restore from checkpoint %d: %w", id, err)
				}
			}
		}
	}
	if len(st.inputs) == 0 {
		return nil
	}
	byKey := make(map[channelKey]int, len(r.in.channels))
	for i := range r.in.channels {
		byKey[r.keyOf(i)] = i
	}
	r.in.stored = make([]*storedChannel, len(r.in.channels))
	for _, in := range st.inputs {
		idx, ok := byKey[in.channel]
		if !ok {
			// Its producers were rescaled.
			if len(in.buffers) == 0 && in.partial == nil {
				continue
			}
			return fmt.Errorf("restore from checkpoint %d: %s: %w (its channel from subtask %d of vertex %d held records in flight; it reads no such channel now)",
				id, r.t.cfg.Info.Name(), ErrRescaleUnaligned, in.channel.index, in.channel.vertex)
		}
		if len(in.buffers) == 0 && !in.barrierAfter && in.partial == nil {
			continue
		}
		sc := &storedChannel{InputChannel: r.gate.Channel(idx)}
		next := r.in.restored[idx]
		if in.partial != nil {
			if err := r.in.restorePartial(idx, in.partial); err != nil {
				return fmt.Errorf("restore from checkpoint %d: input channel %d: %w", id, idx, err)
			}
		}
		for k, raw := range in.buffers {
			b, err := network.NewBufferFrom(raw)
			if err != nil {
				return fmt.Errorf("restore from checkpoint %d: input channel %d, stored buffer %d: %w", id, idx, k, err)
			}
			sc.stored = append(sc.stored, b)
			next = b.FirstSeq
			if b.Kind == network.KindData {
				next += uint64(b.Starts)
			}
		}
		if in.barrierAfter && r.t.cfg.Checkpoints != nil {
			// Its place only matters to a replay; a job restored without checkpoints has no aligner for it.
			sc.stored = append(sc.stored, network.NewEventBuffer(network.Event{Type: network.EventBarrier, CheckpointID: id, Flags: FlagUnaligned}, next))
		}
		r.in.stored[idx] = sc
		// The stored buffers are the channel's first: its join, and the loss before it, is reckoned where
		// it goes on live (crossToLive).
		r.in.joined[idx] = true
		r.gate.SetChannel(idx, sc)
		r.gate.Notify(idx)
	}
	return nil
}

func (r *run) outputByResult(result uint64) *network.ResultPartition {
	for i, o := range r.t.cfg.Outputs {
		if uint64(o.Result) == result {
			return r.outputs[i]
		}
	}
	return nil
}

// crossToLive handles buf, the first buffer channel idx delivers live after its stored ones. A channel
// whose producer numbers on from the checkpoint (it restored the same checkpoint, or replays its log from
// it) goes on where the stored buffers end, even inside a record. Otherwise (approximate recovery: the
// producer kept running and dropped what nobody read) there is a gap: the decoder drops the record it was
// inside, if any, and the channel joins anew, its loss counted from the first record it had not had.
func (r *run) crossToLive(idx int, buf *network.Buffer) {
	dec := r.in.decoders[idx]
	r.in.joined[idx] = false
	want := dec.NextSeq()
	seamless := dec.Synced() && !dec.Rejoining()
	if seamless {
		switch {
		case buf.Kind == network.KindEvent && dec.InRecord():
			// A barrier that overtook the rest of the record: its next record is the one after.
			seamless = buf.FirstSeq == want+1
		case buf.Kind == network.KindEvent:
			seamless = buf.FirstSeq == want
		case dec.InRecord():
			seamless = buf.Continuation > 0 && buf.FirstSeq == want+1
		default:
			seamless = buf.Continuation == 0 && buf.FirstSeq == want
		}
	}
	resume := dec.Resume()
	r.in.restored[idx] = resume
	if seamless {
		r.joined(idx, r.in.join(idx, want, 0))
		return
	}
	if resume == 0 {
		dec.Reset()
	} else {
		dec.SkipTo(resume)
	}
}

// storedChannel hands out an input channel's stored buffers, then what the channel delivers.
type storedChannel struct {
	network.InputChannel
	stored []*network.Buffer
	// out counts stored buffers handed out and not recycled: they are recycled in the order they were
	// handed out, before any live one, and grant the producer no credit.
	out int
	// crossed says a live buffer was handed out; fresh that it was the last Poll's.
	crossed, fresh bool
}

// Poll implements network.InputChannel.
func (c *storedChannel) Poll() (*network.Buffer, error) {
	if len(c.stored) > 0 {
		b := c.stored[0]
		c.stored[0] = nil
		c.stored = c.stored[1:]
		c.out++
		return b, nil
	}
	b, err := c.InputChannel.Poll()
	if b != nil && !c.crossed {
		c.crossed, c.fresh = true, true
	}
	return b, err
}

// Recycle implements network.InputChannel.
func (c *storedChannel) Recycle(b *network.Buffer) {
	if c.out > 0 {
		c.out--
		return
	}
	c.InputChannel.Recycle(b)
}

// takeFresh reports, once, that the last buffer handed out was the channel's first live one.
func (c *storedChannel) takeFresh() bool {
	if c.fresh {
		c.fresh = false
		return true
	}
	return false
}

// barrierCheckpoint is what the aligner is told of a barrier event.
func barrierCheckpoint(ev network.Event) barrier.Checkpoint {
	return barrier.Checkpoint{ID: ev.CheckpointID, TimestampMillis: ev.TimestampMillis, Flags: ev.Flags, Unaligned: ev.Flags&FlagUnaligned != 0}
}

package task

import (
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/network"
)

// nextBuffer returns the next input buffer and its channel (nil: none now). While the attempt replays, that
// is the next buffer of the channel the determinant log names, whatever the others hold; live, the gate's
// next, which is recorded in the log if the task keeps one.
func (r *run) nextBuffer() (int, *network.Buffer, error) {
	if r.steps.replaying() {
		idx, ok, err := r.steps.replayTo(r.gate.NumChannels(), r.replayTimers, r.replayed)
		if err != nil {
			return idx, nil, err
		}
		if ok {
			buf, err := r.gate.NextFrom(idx)
			if err != nil || buf == nil {
				return idx, nil, err
			}
			if err := r.steps.replayedTook(buf.Kind, r.t.counters.Out); err != nil {
				return idx, nil, err
			}
			return idx, buf, nil
		}
	}
	idx, buf, err := r.gate.Next()
	if buf != nil {
		r.steps.took(idx, buf.Kind == network.KindEvent, r.t.counters.Out)
	}
	return idx, buf, err
}

// replayTimers runs the processing-time timers where the failed attempt ran them, at its time.
func (r *run) replayTimers(ms int64) error {
	began := r.beforeWork()
	if err := r.chain.OnProcessingTime(ms); err != nil {
		return err
	}
	r.checkOutput(began)
	return nil
}

// processBuffer handles one buffer of channel idx and recycles it. It returns true once every channel
// delivered end of data or end of partition (no more records: the input ended).
func (r *run) processBuffer(idx int, buf *network.Buffer) (bool, error) {
	if r.in.stored != nil {
		if sc := r.in.stored[idx]; sc != nil && sc.takeFresh() {
			r.crossToLive(idx, buf)
		}
	}
	if r.uc != nil && r.uc.storing[idx] {
		r.uc.storeInput(idx, buf)
	}
	if buf.Kind == network.KindEvent {
		defer r.gate.Recycle(idx, buf)
		if j, ok := r.in.joinOnEvent(idx, buf.FirstSeq); ok {
			r.joined(idx, j)
		}
		return r.processEvent(idx, buf.Payload())
	}
	dec, j, joined, err := r.in.records(idx, buf)
	if err != nil {
		r.gate.Recycle(idx, buf)
		return false, err
	}
	if joined {
		r.joined(idx, j)
	}
	return false, r.processRecords(idx, buf, dec)
}

// processRecords hands the records of buf, a data buffer of channel idx set into dec, to the chain, and
// recycles buf once they are all processed; a chain that stopped between batches (yield.go) leaves the
// rest in dec, and buf in progress.
func (r *run) processRecords(idx int, buf *network.Buffer, dec *network.RecordDecoder) error {
	kept := false
	defer func() {
		// Also when the chain fails (a panic): a local channel's buffer belongs to its producer's pool,
		// and a producer that keeps running (approximate recovery) needs it back.
		if !kept {
			r.gate.Recycle(idx, buf)
		}
	}()
	began := r.beforeWork()
	n, err := r.chain.ProcessBuffer(r.in.logical[idx], dec)
	r.t.counters.In += uint64(n)
	if err != nil {
		return fmt.Errorf("input channel %d: %w", idx, err)
	}
	r.checkOutput(began)
	if dec.More() {
		kept = true
		r.y.curIdx, r.y.cur = idx, buf
	}
	return nil
}

// processEvent carries out the event of channel idx whose payload is b.
func (r *run) processEvent(idx int, b []byte) (bool, error) {
	ev, err := network.DecodeEvent(b)
	if err != nil {
		return false, fmt.Errorf("input channel %d: %w", idx, err)
	}
	switch ev.Type {
	case network.EventEndOfPartition:
		end, err := r.in.endOfPartition(idx)
		if err != nil || !end.first {
			return end.done, err
		}
		if err := r.finishChannel(idx); err != nil {
			return false, err
		}
		if r.aligner != nil {
			r.apply(r.aligner.OnEndOfPartition(idx))
		}
		return end.done, nil
	case network.EventEndOfData:
		end, err := r.in.endOfData(idx)
		if err != nil {
			return false, err
		}
		if err := r.finishChannel(idx); err != nil {
			return false, err
		}
		return end.done, nil
	case network.EventWatermark, network.EventWatermarkStatus:
		return false, r.onWatermarkEvent(idx, ev)
	case network.EventBarrier:
		if r.aligner == nil {
			return false, fmt.Errorf("input channel %d: barrier of checkpoint %d, but checkpointing is off for this task", idx, ev.CheckpointID)
		}
		r.align.barrier(ev.CheckpointID, ev.Flags, r.cp.setup.AlignedTimeout)
		if r.uc != nil {
			r.uc.barrierArrived(idx, ev.CheckpointID)
		}
		r.apply(r.aligner.OnBarrier(idx, barrierCheckpoint(ev)))
		return false, nil
	case network.EventCancelCheckpoint:
		if r.aligner != nil {
			r.apply(r.aligner.OnCancelMarker(idx, ev.CheckpointID))
		}
		return false, nil
	default:
		return false, fmt.Errorf("input channel %d: unexpected %s event", idx, ev.Type)
	}
}

// joined reports the first buffer of channel idx: the records lost on it are those after the restored
// position and before the first one received.
func (r *run) joined(idx int, j join) {
	r.t.observe(deploy.Observation{Kind: deploy.ChannelJoined, At: time.Now(), Channel: r.in.channels[idx], Lost: j.Lost,
		PartialSkipped: j.PartialSkipped, SnapshotBefore: r.lastSnapshot})
}

// replayed reports the end of the replay: the records read again on each input channel, then ReplayDone.
func (r *run) replayed() {
	now := time.Now()
	for idx, n := range r.in.replayed() {
		if n > 0 {
			r.t.observe(deploy.Observation{Kind: deploy.ChannelReplayed, At: now, Channel: r.in.channels[idx], Records: n})
		}
	}
	r.t.observe(deploy.Observation{Kind: deploy.ReplayDone, At: now})
}

package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
)

func (r *run) setupOutputs() error {
	t := r.t
	if len(t.cfg.Outputs) == 0 {
		return nil
	}
	n := 0
	for _, o := range t.cfg.Outputs {
		// A subpartition's queue is as long as a remote input channel's credit: the one knob
		// (WithNetworkBuffersPerChannel) sizes both ends of a channel.
		n += t.cfg.CreditsPerChannel*o.Subpartitions + 2
	}
	pool, err := t.env.Memory.NewPool(t.cfg.Info.Name()+" output", n)
	if err != nil {
		return fmt.Errorf("deploy: %w", err)
	}
	pool.MeasureWaits(&t.counters.times.backpressured)
	r.outPool = pool
	owner := t.cfg.Info.Attempt
	if t.cfg.TakeOver {
		owner.Number = t.cfg.PartitionAttempt
	}
	from := t.cfg.restoredID()
	for _, o := range t.cfg.Outputs {
		id := ident.PartitionID{Result: o.Result, Producer: owner}
		if t.cfg.TakeOver {
			// The failed attempt's partition, which its consumers still read: regenerate into it from the
			// barrier of the restored checkpoint.
			p, err := t.env.Partitions.Lookup(id)
			if err != nil {
				return fmt.Errorf("take over partition %s: %w", id, err)
			}
			if err := p.Takeover(pool, t.cancel, from); err != nil {
				return err
			}
			r.regenerating = r.regenerating || p.Regenerating()
			r.outputs = append(r.outputs, p)
			continue
		}
		opts := network.PartitionOptions{
			Subpartitions: o.Subpartitions, Reconnectable: o.Reconnectable, MaxRecordSize: t.cfg.MaxRecordSize,
			Blocking: o.Blocking, SpillDir: t.env.SpillDir,
		}
		if o.Logged {
			if t.env.LogBudget == nil {
				return fmt.Errorf("deploy: partition %s is logged, but the TaskManager has no in-flight log budget", id)
			}
			opts.Log, opts.LogFrom = t.env.LogBudget, from
		}
		p, err := network.NewResultPartition(id, opts, pool, t.cancel)
		if err != nil {
			return err
		}
		if err := t.env.Partitions.Register(p); err != nil {
			return err
		}
		r.outputs = append(r.outputs, p)
	}
	outputs := slices.Clone(r.outputs)
	t.counters.outputs.Store(&outputs)
	return nil
}

func (r *run) setupInputs() error {
	t := r.t
	total, remote := 0, 0
	for _, in := range t.cfg.Inputs {
		total += len(in.Channels)
		for _, c := range in.Channels {
			if !c.Local {
				remote++
			}
		}
	}
	if total == 0 {
		r.in = newInput(nil, nil, 0)
		return nil
	}
	credits := t.cfg.CreditsPerChannel
	if remote > 0 {
		pool, err := t.env.Memory.NewPool(t.cfg.Info.Name()+" input", remote*credits)
		if err != nil {
			return fmt.Errorf("deploy: %w", err)
		}
		r.inPool = pool
	}
	r.gate = network.NewInputGate(total)
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.ConnectTimeout)
	defer cancel()
	// Connecting may wait for producers that are not deployed yet; cancellation must cut that short.
	go func() {
		select {
		case <-t.cancel:
			cancel()
		case <-ctx.Done():
		}
	}()
	idx := 0
	var channels []deploy.ChannelSpec
	var logical []int
	for input, in := range t.cfg.Inputs {
		for _, c := range in.Channels {
			ch, err := r.connect(ctx, c, idx, credits)
			if err != nil {
				return fmt.Errorf("connect input %d channel to %s[%d]: %w", input, c.Partition, c.Subpartition, err)
			}
			r.gate.SetChannel(idx, ch)
			logical = append(logical, input)
			channels = append(channels, c)
			idx++
		}
	}
	r.in = newInput(channels, logical, t.cfg.MaxRecordSize)
	return nil
}

// connect opens one channel, waiting for a local producer that is not deployed yet.
func (r *run) connect(ctx context.Context, c deploy.ChannelSpec, idx, credits int) (network.InputChannel, error) {
	t := r.t
	owner := t.cfg.Info.Attempt
	notify := r.gate.Notifier(idx)
	// A partition with an in-flight log (task failover) is read from the barrier of the checkpoint this
	// attempt restored, or from its start; others ignore it.
	from := t.cfg.restoredID()
	if !c.Local {
		return t.env.ConnectRemote(ctx, c, owner, r.inPool, credits, notify, from)
	}
	backoff := time.Millisecond
	for {
		v, err := t.env.Partitions.CreateViewFrom(c.Partition, c.Subpartition, owner, credits, notify, from)
		if err == nil {
			return network.NewLocalInputChannel(v), nil
		}
		if !errors.Is(err, network.ErrPartitionNotFound) {
			return nil, err
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			if t.canceled() {
				return nil, errCanceled
			}
			return nil, fmt.Errorf("%w (gave up after %s)", err, t.cfg.ConnectTimeout)
		case <-timer.C:
		}
		if backoff < 100*time.Millisecond {
			backoff *= 2
		}
	}
}

package runnel

import (
	"fmt"

	"github.com/runnel-dev/runnel/internal/task"
)

// DefaultNetworkBuffersPerChannel is the size of the network queues unless WithNetworkBuffersPerChannel
// changes it: each output subpartition may fill this many buffers (its producer shares two more among all
// of them), and each remote input channel holds as many (its credit).
const DefaultNetworkBuffersPerChannel = task.DefaultCreditsPerChannel

// MaxNetworkBuffersPerChannel bounds WithNetworkBuffersPerChannel: 1024 buffers of the default 32 KiB are
// 32 MiB queued on one channel, far past what keeps a channel busy. Only a benchmark of how data queued
// under backpressure slows checkpoints wants queues that long.
const MaxNetworkBuffersPerChannel = 1024

// WithNetworkBuffersPerChannel sets the length of the network queues, in buffers (default
// DefaultNetworkBuffersPerChannel, at least 1, at most MaxNetworkBuffersPerChannel): how many buffers each
// output subpartition of a task may fill before its producer waits, and the credit of each remote input
// channel (Flink's taskmanager.network.memory.buffers-per-channel). Longer queues absorb bursts and hide
// the latency of a network round trip; under backpressure they are data that an aligned checkpoint's
// barrier waits behind. Every task takes its buffers from its TaskManager's network memory
// (WithNetworkMemory), which must hold them all.
func WithNetworkBuffersPerChannel(n int) Option {
	return func(c *Config) { c.NetworkBuffersPerChannel, c.networkBuffersSet = n, true }
}

// validateNetworkBuffers checks WithNetworkBuffersPerChannel.
func (c *Config) validateNetworkBuffers() error {
	if !c.networkBuffersSet {
		return nil
	}
	n := c.NetworkBuffersPerChannel
	if n < 1 || n > MaxNetworkBuffersPerChannel {
		return fmt.Errorf("WithNetworkBuffersPerChannel: between 1 and %d buffers (MaxNetworkBuffersPerChannel), got %d", MaxNetworkBuffersPerChannel, n)
	}
	if need := int64(n) * int64(c.BufferSize); c.BufferSize > 0 && need > c.NetworkMemoryBytes {
		return fmt.Errorf("WithNetworkBuffersPerChannel: %d buffers of %d bytes are %d bytes, more than the %d bytes of network memory (WithNetworkMemory) of a TaskManager",
			n, c.BufferSize, need, c.NetworkMemoryBytes)
	}
	return nil
}

// networkBuffersPerChannel is the setting the tasks get: 0 when unset, which they read as the default.
func (c *Config) networkBuffersPerChannel() int {
	if !c.networkBuffersSet {
		return 0
	}
	return c.NetworkBuffersPerChannel
}

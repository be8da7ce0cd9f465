package network

import "sync"

// LocalInputChannel reads a subpartition of a partition on the same TaskManager: buffers are handed over by
// pointer, no copy, and go back to the producer's pool on Recycle, which also returns the credit.
type LocalInputChannel struct {
	view  *View
	ended bool // end-of-partition was delivered; the partition may be released from now on
	once  sync.Once
}

// NewLocalInputChannel wraps a view created with the channel's initial credit.
func NewLocalInputChannel(v *View) *LocalInputChannel { return &LocalInputChannel{view: v} }

// Poll implements InputChannel.
func (c *LocalInputChannel) Poll() (*Buffer, error) {
	if c.ended {
		return nil, nil
	}
	b, err := c.view.Poll()
	if b != nil && isEndOfPartition(b) {
		c.ended = true
	}
	return b, err
}

// Recycle implements InputChannel.
func (c *LocalInputChannel) Recycle(b *Buffer) {
	b.Recycle()
	c.view.AddCredit(1)
}

// Release implements InputChannel.
func (c *LocalInputChannel) Release() { c.once.Do(c.view.Release) }

package network

import (
	"sync"
)

// InputChannel is one consumer-side connection to one producer subpartition. Local and TCP channels both
// implement it, with the same credit semantics.
type InputChannel interface {
	// Poll returns the next buffer the channel holds, or nil when none is ready. Once the channel has
	// delivered end-of-partition it returns nil forever.
	Poll() (*Buffer, error)
	// Recycle hands back a buffer returned by Poll once its bytes are no longer needed; it grants the
	// producer one credit.
	Recycle(b *Buffer)
	// Release closes the channel: the view is released (locally or by closing the connection). It does
	// not release the producer's partition.
	Release()
}

// InputGate multiplexes the channels of one input of a consumer task. Channels report availability through
// Notify; the task polls Next without blocking and waits on Wake when nothing is available.
type InputGate struct {
	channels []InputChannel

	mu      sync.Mutex
	avail   []int
	head    int
	queued  []bool
	blocked []bool // not polled until unblocked (barrier alignment)
	pending []bool // notified while blocked
	wake    chan struct{}
}

// NewInputGate makes a gate for n channels; channels are attached with SetChannel before use.
func NewInputGate(n int) *InputGate {
	return &InputGate{
		channels: make([]InputChannel, n),
		avail:    make([]int, 0, n),
		queued:   make([]bool, n),
		blocked:  make([]bool, n),
		pending:  make([]bool, n),
		wake:     make(chan struct{}, 1),
	}
}

// NumChannels returns the number of channels.
func (g *InputGate) NumChannels() int { return len(g.channels) }

// SetChannel installs channel i.
func (g *InputGate) SetChannel(i int, ch InputChannel) { g.channels[i] = ch }

// Channel returns channel i.
func (g *InputGate) Channel(i int) InputChannel { return g.channels[i] }

// Notify marks channel i as possibly having data and wakes the consumer. Safe from any goroutine.
func (g *InputGate) Notify(i int) {
	g.mu.Lock()
	if g.blocked[i] {
		g.pending[i] = true
		g.mu.Unlock()
		return
	}
	if !g.queued[i] {
		g.queued[i] = true
		if g.head > 0 && len(g.avail) == cap(g.avail) {
			// At most one entry per channel is live, so compacting keeps the slice within its capacity.
			n := copy(g.avail, g.avail[g.head:])
			g.avail, g.head = g.avail[:n], 0
		}
		g.avail = append(g.avail, i)
	}
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Block stops Next from reading channel i until UnblockAll; its data waits in the channel (and, through
// credit, at the producer). Barrier alignment uses it.
func (g *InputGate) Block(i int) {
	g.mu.Lock()
	g.blocked[i] = true
	if g.queued[i] {
		g.pending[i] = true
	}
	g.mu.Unlock()
}

// Blocked reports whether channel i is blocked.
func (g *InputGate) Blocked(i int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.blocked[i]
}

// UnblockAll resumes reading every blocked channel.
func (g *InputGate) UnblockAll() {
	var resume []int
	g.mu.Lock()
	for i, b := range g.blocked {
		if b {
			g.blocked[i] = false
			if g.pending[i] {
				g.pending[i] = false
				resume = append(resume, i)
			}
		}
	}
	g.mu.Unlock()
	for _, i := range resume {
		g.Notify(i)
	}
}

// Wakeup wakes the consumer waiting on Wake without marking any channel: something else it waits for
// (buffers for its output) became available. Safe from any goroutine.
func (g *InputGate) Wakeup() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Notifier returns a function that notifies channel i; channels call it as their availability listener.
func (g *InputGate) Notifier(i int) func() { return func() { g.Notify(i) } }

// Wake returns a channel that receives after a Notify; the consumer waits on it when Next returned nothing.
func (g *InputGate) Wake() <-chan struct{} { return g.wake }

func (g *InputGate) pop() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		if g.head == len(g.avail) {
			g.avail, g.head = g.avail[:0], 0
			return -1
		}
		i := g.avail[g.head]
		g.head++
		g.queued[i] = false
		if g.blocked[i] {
			g.pending[i] = true
			continue
		}
		return i
	}
}

// Next returns the next buffer from any channel with data, and the channel's index, or (-1, nil, nil) when
// no channel has data now. Channels are served round-robin.
func (g *InputGate) Next() (int, *Buffer, error) {
	for {
		i := g.pop()
		if i < 0 {
			return -1, nil, nil
		}
		b, err := g.channels[i].Poll()
		if err != nil {
			return i, nil, err
		}
		if b != nil {
			// It may hold more; look again after the other channels had their turn.
			g.Notify(i)
			return i, b, nil
		}
	}
}

// NextFrom returns the next buffer of channel i, or nil when it has none now, whatever the other channels
// hold: a task that replays the input order its failed attempt recorded (docs/taskfailover.md §4) takes its
// buffers so. The channel's Notify wakes Wake as usual; the round-robin order of Next is left as it was.
func (g *InputGate) NextFrom(i int) (*Buffer, error) { return g.channels[i].Poll() }

// Recycle returns a buffer obtained from channel i.
func (g *InputGate) Recycle(i int, b *Buffer) { g.channels[i].Recycle(b) }

// Release releases all channels.
func (g *InputGate) Release() {
	for _, ch := range g.channels {
		if ch != nil {
			ch.Release()
		}
	}
}

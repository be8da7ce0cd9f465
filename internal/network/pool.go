package network

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// NetworkMemory is the budget of network buffers of one TaskManager. Every task's BufferPool reserves its
// buffers from it at creation, so a TaskManager cannot grow past its configured network memory; a task that
// does not fit fails to deploy with ErrInsufficientBuffers.
type NetworkMemory struct {
	mu         sync.Mutex
	bufferSize int
	total      int // buffers
	reserved   int
}

// NewNetworkMemory makes a budget of totalBytes split into buffers of bufferSize bytes.
func NewNetworkMemory(totalBytes int64, bufferSize int) (*NetworkMemory, error) {
	if bufferSize < MinBufferSize {
		return nil, fmt.Errorf("buffer size %d is below the minimum of %d bytes", bufferSize, MinBufferSize)
	}
	n := totalBytes / int64(bufferSize)
	if n < 1 {
		return nil, fmt.Errorf("network memory of %d bytes holds no buffer of %d bytes", totalBytes, bufferSize)
	}
	return &NetworkMemory{bufferSize: bufferSize, total: int(n)}, nil
}

// BufferSize returns the size of each buffer, header included.
func (m *NetworkMemory) BufferSize() int { return m.bufferSize }

// Free returns the number of buffers not reserved by any pool.
func (m *NetworkMemory) Free() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total - m.reserved
}

// NewPool reserves count buffers for a pool named name (the task and its purpose, for error messages).
func (m *NetworkMemory) NewPool(name string, count int) (*BufferPool, error) {
	if count < 1 {
		return nil, fmt.Errorf("buffer pool %s: needs at least one buffer, asked for %d", name, count)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reserved+count > m.total {
		return nil, fmt.Errorf("%w: pool %s needs %d buffers of %d bytes, only %d of %d are free; raise the TaskManager's network memory or lower parallelism",
			ErrInsufficientBuffers, name, count, m.bufferSize, m.total-m.reserved, m.total)
	}
	m.reserved += count
	return newBufferPool(name, m.bufferSize, count, m), nil
}

func (m *NetworkMemory) unreserve(count int) {
	m.mu.Lock()
	m.reserved -= count
	m.mu.Unlock()
}

// BufferPool is a bounded pool of equally sized buffers. Buffers are allocated lazily up to the limit and
// reused after Recycle; when all are in use, Request blocks, which is how backpressure reaches a producer.
type BufferPool struct {
	name      string
	size      int
	limit     int
	free      chan *Buffer
	allocated atomic.Int32
	memory    *NetworkMemory
	destroyed atomic.Bool
	// waits, when set, measures the time Request blocks for want of a buffer: the owning task's
	// backpressured time.
	waits *WaitClock
	// onAvailable, when set, is called when a buffer comes back while watching is set (WatchAvailable).
	onAvailable func()
	watching    atomic.Bool
	// onExhausted, when set, is called by a Request that finds no free buffer, before it waits.
	onExhausted func()
}

// OnExhausted makes the pool call f, on the requesting goroutine, when a Request finds no free buffer and
// is about to wait: a task pauses its input there, so that it waits for its output in its mailbox loop
// after the record it is writing. Called before the pool is used.
func (p *BufferPool) OnExhausted(f func()) { p.onExhausted = f }

// OnAvailable makes the pool call f, from the goroutine that recycles, when a buffer comes back after
// WatchAvailable: a task that waits for its output in its mailbox loop, rather than in Request, is woken
// so. Called before the pool is used.
func (p *BufferPool) OnAvailable(f func()) { p.onAvailable = f }

// WatchAvailable asks for one call of the OnAvailable function at the next recycle, and reports whether a
// buffer is free already (then there may be no call: look again before waiting).
func (p *BufferPool) WatchAvailable() bool {
	p.watching.Store(true)
	return p.Available() > 0
}

// MeasureWaits makes w measure the time Request waits for a buffer (nil: none). Called before the pool is
// used; w is then updated by the goroutine that requests.
func (p *BufferPool) MeasureWaits(w *WaitClock) { p.waits = w }

// NewBufferPool makes a pool outside any NetworkMemory budget (tests, benchmarks).
func NewBufferPool(name string, bufferSize, count int) *BufferPool {
	if bufferSize < MinBufferSize {
		panic(fmt.Sprintf("network: buffer size %d below minimum %d", bufferSize, MinBufferSize))
	}
	return newBufferPool(name, bufferSize, count, nil)
}

func newBufferPool(name string, size, count int, m *NetworkMemory) *BufferPool {
	return &BufferPool{name: name, size: size, limit: count, free: make(chan *Buffer, count), memory: m}
}

// Size returns the size of each buffer including its header.
func (p *BufferPool) Size() int { return p.size }

// Limit returns the maximum number of buffers of the pool.
func (p *BufferPool) Limit() int { return p.limit }

// Available returns the number of buffers that can be requested without blocking.
func (p *BufferPool) Available() int { return len(p.free) + p.limit - int(p.allocated.Load()) }

// TryRequest returns a buffer if one is free now, or nil.
func (p *BufferPool) TryRequest() *Buffer {
	select {
	case b := <-p.free:
		b.free = false
		return b
	default:
	}
	return p.allocate()
}

func (p *BufferPool) allocate() *Buffer {
	for {
		n := p.allocated.Load()
		if int(n) >= p.limit {
			return nil
		}
		if p.allocated.CompareAndSwap(n, n+1) {
			return &Buffer{data: make([]byte, HeaderSize, p.size), pool: p}
		}
	}
}

// Request returns a buffer, blocking until one is recycled or cancel is closed.
func (p *BufferPool) Request(cancel <-chan struct{}) (*Buffer, error) { return p.request(cancel, nil) }

// request is Request that also stops waiting when abandon is closed, returning neither a buffer nor an
// error: the caller knows why it gave up (a result partition whose consumer is gone).
func (p *BufferPool) request(cancel, abandon <-chan struct{}) (*Buffer, error) {
	if b := p.TryRequest(); b != nil {
		return b, nil
	}
	// Every buffer is in use: the readers are behind, and the wait is the producer's backpressure. The
	// clock is read only here, off the path of a request that finds a buffer.
	if p.onExhausted != nil {
		p.onExhausted()
	}
	w := p.waits
	if w != nil {
		w.Start(Monotonic())
	}
	b, err := p.wait(cancel, abandon)
	if w != nil {
		w.Stop(Monotonic())
	}
	return b, err
}

// wait is request's blocking part.
func (p *BufferPool) wait(cancel, abandon <-chan struct{}) (*Buffer, error) {
	select {
	case b := <-p.free:
		b.free = false
		return b, nil
	case <-cancel:
		return nil, fmt.Errorf("request buffer from pool %s: %w", p.name, ErrCanceled)
	case <-abandon:
		return nil, nil
	}
}

func (p *BufferPool) put(b *Buffer) {
	if b.free {
		panic(fmt.Sprintf("network: buffer pool %s: buffer recycled twice", p.name))
	}
	b.free = true
	b.data = b.data[:HeaderSize]
	select {
	case p.free <- b:
	default:
		panic(fmt.Sprintf("network: buffer pool %s: more buffers recycled than allocated (double recycle)", p.name))
	}
	if p.watching.Load() && p.watching.Swap(false) && p.onAvailable != nil {
		p.onAvailable()
	}
}

// Destroy gives the pool's reservation back to its NetworkMemory. Buffers still held elsewhere may be
// recycled afterwards; they are simply collected.
func (p *BufferPool) Destroy() {
	if p.destroyed.Swap(true) {
		return
	}
	if p.memory != nil {
		p.memory.unreserve(p.limit)
	}
}

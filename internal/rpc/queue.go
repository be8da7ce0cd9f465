package rpc

import "sync"

// queue is a bounded FIFO from any number of producers to the goroutine that drains it: a session's
// outbound messages (the sender goroutine drains it into the stream) or one direction of a Pipe (the
// peer's Recv drains it). It holds at most limit items; push past that fails, and the caller ends the
// session (protocol.Session: a message is never dropped silently). Its backing array grows with use, not
// with the bound, since a mini-cluster holds two queues per TaskManager and most stay nearly empty.
type queue[T any] struct {
	mu    sync.Mutex
	ready sync.Cond // signalled when an item arrives or the queue closes
	items []T
	limit int
	// err is set once the queue is closed; drain says the items already queued are still handed out
	// before pop returns err (a session closed by its own side delivers what it had sent).
	err   error
	drain bool
}

func newQueue[T any](limit int) *queue[T] {
	q := &queue[T]{limit: limit}
	q.ready.L = &q.mu
	return q
}

// push appends v. It fails with the queue's error once closed, and with full when limit items wait.
func (q *queue[T]) push(v T) (full bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return false, q.err
	}
	if len(q.items) >= q.limit {
		return true, nil
	}
	q.items = append(q.items, v)
	q.ready.Signal()
	return false, nil
}

// pop waits for the next item; after close it returns the error (once the items are drained, if asked).
func (q *queue[T]) pop() (T, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if len(q.items) > 0 && (q.err == nil || q.drain) {
			v := q.items[0]
			var zero T
			q.items[0] = zero // the popped slot no longer keeps its message alive
			q.items = q.items[1:]
			return v, nil
		}
		if q.err != nil {
			var zero T
			return zero, q.err
		}
		q.ready.Wait()
	}
}

// close closes the queue with err (not nil); drain keeps what is queued for pop. Only the first close
// counts.
func (q *queue[T]) close(err error, drain bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return
	}
	q.err, q.drain = err, drain
	if !drain {
		clear(q.items)
		q.items = nil
	}
	q.ready.Broadcast()
}

// len returns how many items wait (for tests and metrics).
func (q *queue[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

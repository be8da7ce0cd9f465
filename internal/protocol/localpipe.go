package protocol

import (
	"fmt"
	"io"
	"sync"
)

// LocalPipe returns the two ends of an in-process session that passes envelopes as they are, without
// marshalling them. Each direction holds at most SendQueue messages; a Send past that ends the session.
func LocalPipe() (a, b Session) {
	p := &localPipe{done: make(chan struct{})}
	ab, ba := make(chan Envelope, SendQueue), make(chan Envelope, SendQueue)
	return &localEnd{p: p, out: ab, in: ba}, &localEnd{p: p, out: ba, in: ab}
}

type localPipe struct {
	once   sync.Once
	done   chan struct{}
	reason error
}

func (p *localPipe) close(reason error) {
	p.once.Do(func() {
		if reason == nil {
			reason = io.EOF
		}
		p.reason = reason
		close(p.done)
	})
}

type localEnd struct {
	p       *localPipe
	out, in chan Envelope
}

func (e *localEnd) Send(m Envelope) error {
	select {
	case <-e.p.done:
		return e.p.reason
	default:
	}
	select {
	case e.out <- m:
		return nil
	default:
		err := fmt.Errorf("peer is not reading: %d messages queued", SendQueue)
		e.p.close(err)
		return err
	}
}

func (e *localEnd) Recv() (Envelope, error) {
	// What was sent before the end is still delivered: the end comes after it.
	select {
	case m := <-e.in:
		return m, nil
	default:
	}
	select {
	case m := <-e.in:
		return m, nil
	case <-e.p.done:
		select {
		case m := <-e.in:
			return m, nil
		default:
		}
		return Envelope{}, e.p.reason
	}
}

func (e *localEnd) Close(reason error) { e.p.close(reason) }

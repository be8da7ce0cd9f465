package rpc

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc/pb"
)

// MaxMessageBytes bounds one encoded message, on every transport (gRPC's limit both ways): a Send of a
// bigger one ends the session, as a gRPC stream would.
const MaxMessageBytes = 16 << 20

// Pipe returns the two ends of an in-memory session: jm is the JobManager's end, tm the TaskManager's.
// Every Send marshals its envelope with protobuf and every Recv unmarshals and converts it back, so what
// the mini-cluster's TaskManagers and JobManager exchange is exactly what would cross a process, and a body
// that could not cross (a closure, an unknown type) fails here too. Each direction holds at most
// protocol.SendQueue messages; a Send past that ends the session ("peer is not reading"). Close on either
// end ends both: the peer still receives what the closing end had sent, then the reason. A Pipe starts no
// goroutine.
func Pipe() (jm, tm protocol.Session) {
	return newPipe(protocol.SendQueue)
}

// newPipe is Pipe with another bound, for tests.
func newPipe(limit int) (jm, tm protocol.Session) {
	p := &pipe{toTM: newQueue[[]byte](limit), toJM: newQueue[[]byte](limit), limit: limit}
	return &pipeEnd{p: p, jm: true}, &pipeEnd{p: p}
}

// pipe is the state both ends share.
type pipe struct {
	toTM, toJM *queue[[]byte]
	limit      int
	mu         sync.Mutex
	err        error // why the session ended; nil while it lasts
}

// end ends the session for both ends at once; drain (a Close) keeps what out holds for the peer, and
// drops the rest. The first end counts: it returns the reason the session ended with.
func (p *pipe) end(err error, out *queue[[]byte], drain bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.err = err
	for _, q := range []*queue[[]byte]{p.toTM, p.toJM} {
		q.close(err, drain && q == out)
	}
	return err
}

// pipeEnd is one end of a pipe.
type pipeEnd struct {
	p  *pipe
	jm bool // the JobManager's end: it sends ToTaskManager and receives FromTaskManager
}

func (e *pipeEnd) queues() (out, in *queue[[]byte]) {
	if e.jm {
		return e.p.toTM, e.p.toJM
	}
	return e.p.toJM, e.p.toTM
}

// Send implements protocol.Session.
func (e *pipeEnd) Send(env protocol.Envelope) error {
	var m proto.Message
	var err error
	if e.jm {
		m, err = encodeToTaskManager(env)
	} else {
		m, err = encodeFromTaskManager(env)
	}
	if err != nil {
		return e.fail(err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return e.fail(fmt.Errorf("marshal %T: %w", env.Body, err))
	}
	if len(b) > MaxMessageBytes {
		return e.fail(tooBig(env.Body, len(b)))
	}
	out, _ := e.queues()
	full, err := out.push(b)
	if err != nil {
		return err
	}
	if full {
		return e.fail(notReading(e.p.limit))
	}
	return nil
}

// fail ends the session with err, or returns why it had already ended.
func (e *pipeEnd) fail(err error) error {
	return e.p.end(err, nil, false)
}

// Recv implements protocol.Session.
func (e *pipeEnd) Recv() (protocol.Envelope, error) {
	_, in := e.queues()
	b, err := in.pop()
	if err != nil {
		return protocol.Envelope{}, err
	}
	var env protocol.Envelope
	var bye *pb.Goodbye
	if e.jm {
		m := &pb.FromTaskManager{}
		if err = proto.Unmarshal(b, m); err == nil {
			env, bye, err = decodeFromTaskManager(m)
		}
	} else {
		m := &pb.ToTaskManager{}
		if err = proto.Unmarshal(b, m); err == nil {
			env, bye, err = decodeToTaskManager(m)
		}
	}
	if err == nil && bye != nil {
		err = errors.New("a goodbye, which a pipe never sends") // Close ends a pipe without one
	}
	if err != nil {
		return protocol.Envelope{}, e.fail(fmt.Errorf("malformed message from the peer: %w", err))
	}
	return env, nil
}

// Close implements protocol.Session: the peer's Recv returns what this end had sent, then reason.
func (e *pipeEnd) Close(reason error) {
	if reason == nil {
		reason = io.EOF
	}
	out, _ := e.queues()
	e.p.end(reason, out, true)
}

// notReading is the reason a session ends when its peer leaves the send queue full.
func notReading(limit int) error {
	return fmt.Errorf("peer is not reading: %d messages queued", limit)
}

// tooBig is the reason a session ends when a message exceeds MaxMessageBytes.
func tooBig(body any, n int) error {
	return fmt.Errorf("a %T message of %d bytes exceeds the %d-byte limit of a session message", body, n, MaxMessageBytes)
}

package network

// This file holds the data server's admission decisions: which accepted connections it keeps, and which it
// closes, so that no flood of connections can take a TaskManager's file descriptors. It is a pure state
// machine: no goroutine, no clock (time is passed in), no socket; the Server feeds it and carries out what
// it returns.
//
// Every connection is pending from its accept until it has a view (its partition request was valid), then
// streaming until it closes. The limits:
//
//   - maxConns bounds all open connections. A connection beyond it is refused, unless a pending connection
//     has been pending for evictAfter or longer: then the oldest such one is closed to make room. A client
//     of the data plane sends its partition request right after connecting, so a connection silent for that
//     long is almost certainly not one; closing it lets the job's own new channels in while a flood of
//     silent connections lasts. Streaming connections are never closed to make room.
//   - maxPerHost, if positive, bounds the open connections from one remote IP address, in the same way, so
//     that one misbehaving host cannot take the whole budget from the others.

import (
	"container/list"
	"fmt"
	"time"
)

// admission tracks the open connections of a Server. Connections are named by an ID the caller chooses.
type admission struct {
	maxConns   int
	maxPerHost int // 0: no per-host limit
	evictAfter time.Duration

	conns   map[uint64]*admitted
	perHost map[string]int
	pending *list.List // of *admitted, oldest first
}

// admitted is one open connection.
type admitted struct {
	id    uint64
	host  string
	since time.Time
	elem  *list.Element // in pending, nil once streaming
}

// admitDecision is what the caller must do with a new connection: keep it, or close it (refused, with the
// reason), and in either case close the connection evict first if it is non-zero (it is already forgotten).
type admitDecision struct {
	admit  bool
	reason string // why a refused connection was refused
	evict  uint64 // a pending connection to close to make room; 0 for none
}

func newAdmission(maxConns, maxPerHost int, evictAfter time.Duration) *admission {
	return &admission{maxConns: maxConns, maxPerHost: maxPerHost, evictAfter: evictAfter,
		conns: make(map[uint64]*admitted), perHost: make(map[string]int), pending: list.New()}
}

// open returns the number of open connections.
func (a *admission) open() int { return len(a.conns) }

// accept decides about a new connection id (never 0) from host at now.
func (a *admission) accept(id uint64, host string, now time.Time) admitDecision {
	var d admitDecision
	switch {
	case a.maxPerHost > 0 && a.perHost[host] >= a.maxPerHost:
		victim := a.oldestPending(now, host)
		if victim == nil {
			return admitDecision{reason: fmt.Sprintf("%d connections from %s are open, the most one host may have (ServerOptions.MaxConnectionsPerHost), and none of them is idle in its handshake", a.perHost[host], host)}
		}
		d.evict = victim.id
	case len(a.conns) >= a.maxConns:
		victim := a.oldestPending(now, "")
		if victim == nil {
			return admitDecision{reason: fmt.Sprintf("%d connections are open, the most the server takes (ServerOptions.MaxConnections), and none of them is idle in its handshake", len(a.conns))}
		}
		d.evict = victim.id
	}
	if d.evict != 0 {
		a.closed(d.evict)
	}
	c := &admitted{id: id, host: host, since: now}
	c.elem = a.pending.PushBack(c)
	a.conns[id] = c
	a.perHost[host]++
	d.admit = true
	return d
}

// oldestPending returns the oldest connection pending for evictAfter or longer (from host, unless host is
// ""), or nil.
func (a *admission) oldestPending(now time.Time, host string) *admitted {
	for e := a.pending.Front(); e != nil; e = e.Next() {
		c := e.Value.(*admitted)
		if now.Sub(c.since) < a.evictAfter {
			return nil // the rest are younger still
		}
		if host == "" || c.host == host {
			return c
		}
	}
	return nil
}

// streaming records that connection id got its view: it is no longer evictable.
func (a *admission) streaming(id uint64) {
	if c := a.conns[id]; c != nil && c.elem != nil {
		a.pending.Remove(c.elem)
		c.elem = nil
	}
}

// closed forgets connection id; unknown (already evicted) IDs are ignored.
func (a *admission) closed(id uint64) {
	c := a.conns[id]
	if c == nil {
		return
	}
	if c.elem != nil {
		a.pending.Remove(c.elem)
	}
	delete(a.conns, id)
	if a.perHost[c.host]--; a.perHost[c.host] == 0 {
		delete(a.perHost, c.host)
	}
}

// logLimiter lets one log line through per interval and counts the ones it held back, so that a flood of
// refusals costs one line per interval, not one per connection.
type logLimiter struct {
	every      time.Duration
	last       time.Time
	suppressed int
}

// allow reports whether to log now and, if so, how many lines were held back since the last one.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}

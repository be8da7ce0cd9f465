package mtls

import (
	"bytes"
	"cmp"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// Bounds of a RefusalLog's lines.
const (
	// LogInterval is the least time between two lines about the same peer host, and the window of
	// MaxLinesPerInterval.
	LogInterval = 10 * time.Second
	// MaxLinesPerInterval bounds the lines of one RefusalLog per LogInterval, whatever the number of peers:
	// a flood from many hosts costs at most one line a second.
	MaxLinesPerInterval = 10
)

// RefusalLog logs the TLS handshakes one listener refused (or that its peer refused), at WARN, with the
// peer's address and the reason: at most one line per peer host (IP address: every connection has a port
// of its own) per LogInterval, and at most MaxLinesPerInterval lines per LogInterval in all. The refusals
// past those bounds are counted, not logged; the next line says how many there were since the line
// before it ("unlogged") and how many failed in all ("failed_total"). A connection that closes before it
// sent anything (a port probe) is logged at DEBUG only, and not counted. It is safe for concurrent use.
type RefusalLog struct {
	log      *slog.Logger
	listener string
	now      func() time.Time

	mu          sync.Mutex
	hosts       map[string]time.Time // peer host -> when its last line was logged (only those within LogInterval)
	windowStart time.Time
	windowLines int
	unlogged    uint64
	total       uint64
}

// NewRefusalLog returns the log of the listener named listener ("control plane", "REST API"); a nil lg is
// slog.Default().
func NewRefusalLog(lg *slog.Logger, listener string) *RefusalLog {
	lg = cmp.Or(lg, slog.Default())
	return &RefusalLog{log: lg, listener: listener, now: time.Now, hosts: map[string]time.Time{}}
}

// Failed records a handshake with the peer at remote that failed with err.
func (l *RefusalLog) Failed(remote string, err error) {
	if ClosedEarly(err) {
		l.log.Debug("connection closed before its TLS handshake", "listener", l.listener, "peer", remote)
		return
	}
	l.failed(remote, Reason(err))
}

// failed logs (or counts) one failed handshake with remote, for reason.
func (l *RefusalLog) failed(remote, reason string) {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	now := l.now()
	l.mu.Lock()
	l.total++
	total := l.total
	if now.Sub(l.windowStart) >= LogInterval {
		l.windowStart, l.windowLines = now, 0
		for h, at := range l.hosts {
			if now.Sub(at) >= LogInterval {
				delete(l.hosts, h)
			}
		}
	}
	if at, ok := l.hosts[host]; (ok && now.Sub(at) < LogInterval) || l.windowLines >= MaxLinesPerInterval {
		l.unlogged++
		l.mu.Unlock()
		return
	}
	l.hosts[host] = now
	l.windowLines++
	unlogged := l.unlogged
	l.unlogged = 0
	l.mu.Unlock()
	l.log.Warn("TLS handshake failed; connection closed", "listener", l.listener, "peer", remote, "reason", reason,
		"unlogged", unlogged, "failed_total", total)
}

// httpHandshakeError starts the line net/http's server logs for a failed TLS handshake:
// "http: TLS handshake error from ADDR: REASON".
const httpHandshakeError = "http: TLS handshake error from "

// HTTPErrorLog returns a logger for http.Server.ErrorLog that sends the server's failed TLS handshakes to
// l and every other line of the server's to l's slog.Logger at WARN.
func (l *RefusalLog) HTTPErrorLog() *log.Logger {
	return log.New(httpLogWriter{l}, "", 0)
}

type httpLogWriter struct{ l *RefusalLog }

func (w httpLogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	if rest, ok := strings.CutPrefix(line, httpHandshakeError); ok {
		if remote, reason, ok := strings.Cut(rest, ": "); ok {
			if reason == "EOF" {
				w.l.log.Debug("connection closed before its TLS handshake", "listener", w.l.listener, "peer", remote)
			} else {
				w.l.failed(remote, reasonText(reason, nil)+" ("+reason+")")
			}
			return len(p), nil
		}
	}
	w.l.log.Warn(line, "listener", w.l.listener)
	return len(p), nil
}

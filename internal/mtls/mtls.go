// Package mtls says why a mutual-TLS handshake of the cluster failed, on both sides of the connection.
//
// The side that dialed gets a *HandshakeError, which names TLS, the peer and who refused what ("TLS
// handshake with the JobManager at 10.0.0.5:6123 failed: it refused our certificate (remote error: tls:
// unknown certificate authority)"). In TLS 1.3 the server checks the client's certificate after the
// client's side of the handshake ended, so a client learns of a refusal from the alert that answers its
// next read, and a write that comes first fails with a broken pipe or a reset instead: the gRPC client
// (internal/rpc's ClientCredentials) and the data plane's (internal/network) wait for that answer.
//
// The listening side logs every failed handshake at WARN through a RefusalLog, rate-limited: gRPC servers
// through internal/rpc's ServerCredentials, HTTP servers through RefusalLog.HTTPErrorLog. The data plane's
// server (internal/network) has a rate-limited line of its own.
package mtls

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
)

// HandshakeError is a TLS handshake that failed, as the side that dialed sees it.
type HandshakeError struct {
	// Peer says what was dialled ("the JobManager"); Addr is its address.
	Peer, Addr string
	// Err is what the handshake failed with.
	Err error
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("TLS handshake with %s at %s failed: %s", e.Peer, e.Addr, Reason(e.Err))
}

func (e *HandshakeError) Unwrap() error { return e.Err }

// Reason says in words why a handshake failed, from the side that saw err, and ends with err's own text in
// parentheses: "it refused our certificate (remote error: tls: bad certificate)", "we refused its
// certificate (tls: failed to verify certificate: x509: certificate signed by unknown authority)".
func Reason(err error) string {
	if err == nil {
		return "no error"
	}
	return reasonText(err.Error(), err) + " (" + err.Error() + ")"
}

// reasonText classifies a handshake error by its value where it has a type, else by its text (an HTTP
// server's log line has only the text).
func reasonText(text string, err error) string {
	var opErr *net.OpError
	remote := strings.Contains(text, "remote error: ") || errors.As(err, &opErr) && opErr.Op == "remote error"
	var verify *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	switch {
	case remote && strings.Contains(text, "certificate required"):
		return "it requires a certificate of an authority it trusts and we sent none"
	case remote && (strings.Contains(text, "certificate") || strings.Contains(text, "unknown authority")):
		return "it refused our certificate"
	case remote && strings.Contains(text, "protocol version"):
		return "it refused our TLS version"
	case remote:
		return "it refused the handshake"
	case errors.As(err, &verify) || strings.Contains(text, "failed to verify certificate"):
		return "we refused its certificate"
	case strings.Contains(text, "didn't provide a certificate"):
		return "it sent no certificate"
	case errors.As(err, &record) || strings.Contains(text, "does not look like a TLS handshake") ||
		strings.Contains(text, "HTTP request to an HTTPS server"):
		return "it does not speak TLS"
	case strings.Contains(text, "protocol version") || strings.Contains(text, "unsupported versions"):
		return "it offered no TLS version we accept"
	case errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(text, "i/o timeout"):
		return "it did not finish the handshake in time"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || strings.Contains(text, "connection reset") ||
		strings.Contains(text, "broken pipe"):
		return "the connection was reset during the handshake"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.HasSuffix(text, "EOF"):
		return "the connection closed during the handshake"
	}
	return "the handshake failed"
}

// ClosedEarly reports whether err, a failed TLS handshake's, is a connection that ended before its
// handshake said anything: a port probe or health check, not a refusal.
func ClosedEarly(err error) bool {
	return errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "remote error")
}

// PresentCertificate makes a client config present its first certificate to every server that asks for
// one, even a server whose list of accepted authorities leaves its authority out, to which Go's client
// would send none. Such a server then refuses the certificate it got (it logs "certificate signed by
// unknown authority", the client reads "unknown certificate authority"), which says what is wrong, where
// with no certificate both sides would only say that none was sent. The certificate goes only to a server
// the client verified: in TLS 1.3 the client's certificate follows the server's.
func PresentCertificate(cfg *tls.Config) {
	if len(cfg.Certificates) == 0 {
		return
	}
	cert := &cfg.Certificates[0]
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
}

package roles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/runnel-dev/runnel/internal/mtls"
)

// TLSFiles names the PEM files of a process's mutual TLS: its certificate and key, and the certificate
// authority that every peer's certificate must be signed by. ServerName, when set, is the name every
// peer's certificate is verified against instead of the host dialled (one certificate for a cluster).
type TLSFiles struct {
	Cert, Key, CA string
	ServerName    string
}

// load reads the TLS files: the server's config (client certificates required) and the client's (which
// presents its certificate to every server it trusts, so that a server of another authority says so).
func (f *TLSFiles) load() (server, client *tls.Config, err error) {
	if f == nil {
		return nil, nil, nil
	}
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, nil, errors.New("--tls-cert, --tls-key and --tls-ca go together: give all three or none")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", f.Cert, f.Key, err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", f.CA)
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS13}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: f.ServerName, MinVersion: tls.VersionTLS13}
	mtls.PresentCertificate(client)
	return server, client, nil
}

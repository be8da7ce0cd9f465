// Package mtlstest makes the certificate authorities and certificates of tests that run mutual TLS over
// loopback: a CA of a test's own, certificates it issues for 127.0.0.1, the TLS configs of a server and a
// client built from them, and their PEM files for tests that pass them to runnel's TLS flags. LogBuffer is
// the log that such a test's servers write their refusals to while the test reads it.
//
// Tests only: no package that ships imports it, and it imports no package of Runnel's, so that the tests
// of internal/mtls itself may use it.
package mtlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority of one test, with a P-256 ECDSA key; its certificates are valid from an
// hour ago for an hour.
type CA struct {
	// Cert is the authority's own certificate.
	Cert *x509.Certificate
	// Pool trusts this authority alone: a server's ClientCAs, a client's RootCAs.
	Pool *x509.CertPool
	key  *ecdsa.PrivateKey
}

// serial numbers every certificate of the test binary, so that no two an authority issues share one.
var serial atomic.Int64

// NewCA makes a certificate authority whose common name is name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Pool: pool, key: key}
}

// Issue makes a certificate whose common name is name, for 127.0.0.1 and localhost, good as a server's
// and as a client's, with a P-256 ECDSA key of its own.
func (ca *CA) Issue(t testing.TB, name string) tls.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// ServerConfig is a mutual-TLS server's config: a certificate of ca named name, clients with a
// certificate of ca only, TLS 1.3.
func (ca *CA) ServerConfig(t testing.TB, name string) *tls.Config {
	t.Helper()
	return &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, name)}, ClientCAs: ca.Pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

// ClientConfig is a mutual-TLS client's config: a certificate of ca named name, servers with a
// certificate of trust only, TLS 1.3. It presents the certificate as Go's client does, only to a server
// whose request names ca; internal/mtls.PresentCertificate makes it present the certificate always, as
// runnel's TLS flags do.
func (ca *CA) ClientConfig(t testing.TB, name string, trust *CA) *tls.Config {
	t.Helper()
	return &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, name)}, RootCAs: trust.Pool, MinVersion: tls.VersionTLS13}
}

// WriteCA writes the authority's certificate as PEM to dir/ca.pem and returns the file's path.
func (ca *CA) WriteCA(t testing.TB, dir string) string {
	t.Helper()
	return writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Cert.Raw)
}

// WriteIssued issues a certificate named name, as Issue does, and writes it and its key (PKCS #8) as PEM
// to dir/name.pem and dir/name.key; it returns the two files' paths.
func (ca *CA) WriteIssued(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	cert := ca.Issue(t, name)
	kder, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", cert.Certificate[0]),
		writePEM(t, filepath.Join(dir, name+".key"), "PRIVATE KEY", kder)
}

func writePEM(t testing.TB, path, kind string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

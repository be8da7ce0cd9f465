// Package hatest runs an etcd member inside a test (go.etcd.io/etcd/server/v3/embed) on loopback, for the
// tests of high availability: a real etcd, not a mock. It owns the member, which the test's cleanup stops.
package hatest

import (
	"net"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is one etcd member.
type Server struct {
	cfg *embed.Config
	e   *embed.Etcd
	// Endpoint is its client address (host:port), and Address the HA address that names it.
	Endpoint, Address string
}

// Start starts a member with its data in a temporary directory, stopped at the test's end.
func Start(t testing.TB) *Server {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = t.TempDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	client, peer := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	s := &Server{cfg: cfg, Endpoint: client.Host, Address: "etcd://" + client.Host}
	s.start(t)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	e, err := embed.StartEtcd(s.cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		t.Fatal("etcd not ready after 30 s")
	}
	s.e = e
}

// Stop stops the member: its clients lose etcd until Restart.
func (s *Server) Stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// Restart starts the stopped member again, with its data and on its addresses.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

// freeURL returns an http URL on a loopback port that was free a moment ago.
func freeURL(t testing.TB) url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return url.URL{Scheme: "http", Host: addr}
}

// Command runnel-etcd runs one etcd member on loopback for `runnel bench jm-loss`: a real etcd server
// (go.etcd.io/etcd/server/v3/embed, the version go.mod pins), in a process of its own so that the runnel
// binary does not link the etcd server. It exists because the bench must work on a machine without an
// etcd installation: the bench builds it with `go build` from this module into a temporary directory
// (or is given another etcd with --etcd-binary or --etcd).
//
//	runnel-etcd --dir DIR
//
// It keeps its data in DIR (which must exist), listens for clients on a free port of 127.0.0.1, and prints
//
//	etcd ready at etcd://127.0.0.1:PORT
//
// on stderr once the member serves. SIGTERM or SIGINT stops it (exit 0). Writes are not fsynced: the data
// is a benchmark's, thrown away afterwards.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "runnel-etcd:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "the member's data directory (must exist)")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		return errors.New("usage: runnel-etcd --dir DIR")
	}
	if fi, err := os.Stat(*dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("--dir %q: not a directory (%v)", *dir, err)
	}
	client, err := freeURL()
	if err != nil {
		return err
	}
	peer, err := freeURL()
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = *dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd on %s: %w", client.Host, err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return errors.New("etcd not ready after 60 s")
	case <-sigs:
		return nil
	}
	fmt.Fprintf(os.Stderr, "etcd ready at etcd://%s\n", client.Host)
	select {
	case <-sigs:
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd failed: %w", err)
	}
}

// freeURL returns an http URL on a loopback port that was free a moment ago.
func freeURL() (url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, fmt.Errorf("finding a free port: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return url.URL{Scheme: "http", Host: addr}, nil
}

// Package ha is the JobManager's high availability on etcd: the connection to an etcd cluster named by an
// etcd:// address, the election of one leading JobManager per Runnel cluster (go.etcd.io/etcd/client/v3
// concurrency.Election on a lease), and what a new leader needs to carry on: the submitted jobs and, per
// job, a pointer to its newest completed checkpoint. Every write a leader makes is fenced in etcd itself:
// it applies only while the writer's leader key is the one etcd holds, so a deposed leader that has not
// noticed yet changes nothing.
//
// Keys, under /runnel/CLUSTER/: leader/ (the election), jobs/ID (a Job, JSON), checkpoints/ID (a
// CheckpointPointer, JSON).
//
// It owns the etcd client and the lease keep-alive goroutines of the client library, which Close stops. It
// must not import the job master or the roles: they use it.
package ha

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Scheme is the scheme of an HA address: etcd://HOST:PORT[,HOST:PORT...].
const Scheme = "etcd"

// DefaultTTL is the lease of a leader: a leader that dies is replaced within it.
const DefaultTTL = 5 * time.Second

// dialTimeout bounds Open's first contact with etcd.
const dialTimeout = 5 * time.Second

// Config says which etcd cluster holds which Runnel cluster.
type Config struct {
	// Endpoints are the etcd members' client addresses (host:port).
	Endpoints []string
	// Cluster names the Runnel cluster: JobManagers, TaskManagers and clients of one cluster give the same.
	Cluster string
	// TTL is the leader's lease (DefaultTTL when 0); whole seconds, at least one.
	TTL time.Duration
}

// ParseAddress reads an HA address, etcd://HOST:PORT[,HOST:PORT...], into endpoints.
func ParseAddress(addr string) ([]string, error) {
	rest, ok := strings.CutPrefix(addr, Scheme+"://")
	if !ok {
		return nil, fmt.Errorf("HA address %q: want %s://HOST:PORT[,HOST:PORT...]", addr, Scheme)
	}
	var eps []string
	for _, hp := range strings.Split(strings.TrimSuffix(rest, "/"), ",") {
		u, err := url.Parse("//" + hp)
		if err != nil || u.Host == "" || u.Port() == "" || u.Path != "" || u.User != nil {
			return nil, fmt.Errorf("HA address %q: %q is not HOST:PORT", addr, hp)
		}
		eps = append(eps, u.Host)
	}
	return eps, nil
}

// Validate checks the configuration, naming what is wrong.
func (c Config) Validate() error {
	switch {
	case len(c.Endpoints) == 0:
		return errors.New("HA on etcd needs at least one endpoint")
	case c.Cluster == "":
		return errors.New("HA on etcd needs a cluster name (--ha-cluster)")
	case strings.ContainsAny(c.Cluster, "/ \t\n"):
		return fmt.Errorf("HA cluster name %q: no slashes or spaces", c.Cluster)
	case c.TTL < 0 || c.TTL%time.Second != 0 || (c.TTL > 0 && c.TTL < time.Second):
		return fmt.Errorf("HA lease %s: whole seconds, at least one", c.TTL)
	}
	return nil
}

func (c Config) ttl() time.Duration {
	if c.TTL == 0 {
		return DefaultTTL
	}
	return c.TTL
}

// ErrUnreachable is what Open's error wraps when etcd does not answer.
var ErrUnreachable = errors.New("HA store unreachable")

// Client is a connection to the etcd cluster of one Runnel cluster.
type Client struct {
	cfg  Config
	etcd *clientv3.Client
	root string // /runnel/CLUSTER/
}

// Open connects to etcd and checks that it answers, within dialTimeout: an unreachable etcd is an error
// that names the endpoints.
func Open(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: dialTimeout, Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	c := &Client{cfg: cfg, etcd: cl, root: "/runnel/" + cfg.Cluster + "/"}
	pctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if _, err := cl.Get(pctx, c.root+"probe"); err != nil {
		_ = cl.Close()
		return nil, fmt.Errorf("%w: etcd at %s does not answer (after %s): %w", ErrUnreachable, strings.Join(cfg.Endpoints, ","), dialTimeout, err)
	}
	return c, nil
}

// Close closes the connection; leaderships campaigned through it end (their leases expire).
func (c *Client) Close() error { return c.etcd.Close() }

// Config returns the client's configuration.
func (c *Client) Config() Config { return c.cfg }

func (c *Client) where() string {
	return fmt.Sprintf("cluster %q on etcd at %s", c.cfg.Cluster, strings.Join(c.cfg.Endpoints, ","))
}

package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrNotLeader is the error of a write whose writer no longer leads: another JobManager's leader key is
// the one etcd holds (or none is).
var ErrNotLeader = errors.New("this JobManager no longer leads")

// ErrNoLeader is Leader's error while no JobManager leads.
var ErrNoLeader = errors.New("no JobManager leads")

// Leadership is one JobManager's term as leader.
type Leadership struct {
	c       *Client
	me      Candidate
	session *concurrency.Session
	elect   *concurrency.Election
}

// Candidate is what a JobManager campaigns with: how the others reach it once it leads.
type Candidate struct {
	// Addr is its control-plane address (TaskManagers and clients), REST its REST API's ("": none).
	Addr string `json:"addr"`
	REST string `json:"rest,omitempty"`
}

// Campaign waits until this JobManager leads the cluster (or ctx ends) and returns its term. The term
// lasts while its lease is kept alive: Done is closed when it is not (etcd unreachable for a TTL, or
// Resign).
func (c *Client) Campaign(ctx context.Context, me Candidate) (*Leadership, error) {
	val, err := json.Marshal(me)
	if err != nil {
		return nil, fmt.Errorf("ha: candidate: %w", err)
	}
	s, err := concurrency.NewSession(c.etcd, concurrency.WithTTL(int(c.cfg.ttl().Seconds())), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("%s: lease: %w", c.where(), err)
	}
	e := concurrency.NewElection(s, c.root+"leader")
	if err := e.Campaign(ctx, string(val)); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("%s: campaign: %w", c.where(), err)
	}
	return &Leadership{c: c, me: me, session: s, elect: e}, nil
}

// Epoch is the term's number: the etcd revision at which its leader key was made. Later terms have
// higher epochs, so a TaskManager can refuse a command of an older term than one it heard.
func (l *Leadership) Epoch() int64 { return l.elect.Rev() }

// Done is closed when the term has ended: the lease expired or was revoked. A leader whose term ended must
// stop commanding; its fenced writes fail with ErrNotLeader from then on, and possibly a little before.
func (l *Leadership) Done() <-chan struct{} { return l.session.Done() }

// Resign ends the term at once, so that a standby can take over without waiting for the lease.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.elect.Resign(ctx)
	return errors.Join(err, l.session.Close())
}

// ended returns ErrNotLeader once the term has ended on this side (Done): its lease may outlive a lost
// etcd on the server, but a JobManager that stopped hearing from etcd for a TTL must act as deposed.
func (l *Leadership) ended() error {
	select {
	case <-l.session.Done():
		return ErrNotLeader
	default:
		return nil
	}
}

// bound returns ctx cut short when the term ends: a write that waits on an etcd it cannot reach gives up
// as soon as the term is over, rather than at the caller's deadline.
func (l *Leadership) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.session.Ctx(), cancel)
	return ctx, func() { stop(); cancel() }
}

// fenceErr is err, or ErrNotLeader when the term ended meanwhile.
func (l *Leadership) fenceErr(err error) error {
	if err != nil && l.ended() != nil {
		return errors.Join(ErrNotLeader, err)
	}
	return err
}

// fence is the comparison every write of the term is made under: its leader key is still the one that
// leads, as it was made.
func (l *Leadership) fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.elect.Key()), "=", l.elect.Rev())
}

// LeaderInfo says who leads.
type LeaderInfo struct {
	Candidate
	// Epoch is its term's number (Leadership.Epoch).
	Epoch int64 `json:"epoch"`
}

// Leader returns who leads now, or ErrNoLeader.
func (c *Client) Leader(ctx context.Context) (LeaderInfo, error) {
	resp, err := c.etcd.Get(ctx, c.root+"leader/", clientv3.WithFirstCreate()...)
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("%s: who leads: %w", c.where(), err)
	}
	if len(resp.Kvs) == 0 {
		return LeaderInfo{}, ErrNoLeader
	}
	kv := resp.Kvs[0]
	info := LeaderInfo{Epoch: kv.CreateRevision}
	if err := json.Unmarshal(kv.Value, &info.Candidate); err != nil {
		return LeaderInfo{}, fmt.Errorf("%s: the leader's key %s holds %q, not a JobManager's address: %w", c.where(), kv.Key, kv.Value, err)
	}
	return info, nil
}

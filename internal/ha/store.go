package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Job is a submitted job as etcd keeps it: enough for a new leader to build it again and to know where
// it stands.
type Job struct {
	// ID is the job's id (protocol.JobID's text); Run is the id of its current run (the JobID its
	// TaskManagers know it by).
	ID  string `json:"id"`
	Run string `json:"run,omitempty"`
	// Name and Args are the registered job and its command line, as submitted.
	Name string   `json:"name"`
	Args []string `json:"args"`
	// Build is the fingerprint of the binary that submitted it, Graph its job graph's: a leader of another
	// build must not run it.
	Build string `json:"build"`
	Graph string `json:"graph"`
	// Status is the job's last status the leader recorded.
	Status    string    `json:"status"`
	Submitted time.Time `json:"submitted"`
	// Leader and Epoch are the JobManager that runs the job and its term, as recorded.
	Leader string `json:"leader"`
	Epoch  int64  `json:"epoch"`
}

// CheckpointPointer names a job's newest completed checkpoint.
type CheckpointPointer struct {
	ID int64 `json:"id"`
	// Location is the checkpoint storage that holds it.
	Location string `json:"location"`
	// Run is the id of the job's run that took it.
	Run string `json:"run,omitempty"`
}

// maxJobs bounds the jobs Jobs reads: a cluster keeps that many at most (ended ones are deleted by the
// leader past its history).
const maxJobs = 10_000

func (c *Client) jobKey(id string) string        { return c.root + "jobs/" + id }
func (c *Client) checkpointKey(id string) string { return c.root + "checkpoints/" + id }

// PutJob records a job (a submission, or a change of its status), under the term's fence.
func (l *Leadership) PutJob(ctx context.Context, j Job) error {
	if j.ID == "" {
		return errors.New("ha: a job without an id")
	}
	j.Leader, j.Epoch = l.me.Addr, l.Epoch()
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("ha: job %s: %w", j.ID, err)
	}
	return l.fencedPut(ctx, l.c.jobKey(j.ID), string(b), "record job "+j.ID)
}

// DeleteJob forgets a job and its checkpoint pointer, under the term's fence.
func (l *Leadership) DeleteJob(ctx context.Context, id string) error {
	if err := l.ended(); err != nil {
		return fmt.Errorf("%s: forget job %s: %w", l.c.where(), id, err)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	resp, err := l.c.etcd.Txn(ctx).If(l.fence()).
		Then(clientv3.OpDelete(l.c.jobKey(id)), clientv3.OpDelete(l.c.checkpointKey(id))).Commit()
	if err != nil {
		return fmt.Errorf("%s: forget job %s: %w", l.c.where(), id, l.fenceErr(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("%s: forget job %s: %w", l.c.where(), id, ErrNotLeader)
	}
	return nil
}

// Jobs returns the jobs recorded, oldest key first.
func (c *Client) Jobs(ctx context.Context) ([]Job, error) {
	resp, err := c.etcd.Get(ctx, c.root+"jobs/", clientv3.WithPrefix(), clientv3.WithLimit(maxJobs))
	if err != nil {
		return nil, fmt.Errorf("%s: read the jobs: %w", c.where(), err)
	}
	out := make([]Job, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var j Job
		if err := json.Unmarshal(kv.Value, &j); err != nil {
			return nil, fmt.Errorf("%s: job record %s: %w", c.where(), kv.Key, err)
		}
		out = append(out, j)
	}
	return out, nil
}

// PutCheckpoint records cp as job id's newest completed checkpoint, under the term's fence. The job
// master calls it before the checkpoint counts as completed (before any task hears of it), so a new
// leader never restores older state than tasks were told had completed. A pointer never goes back: one
// older than the recorded one is refused.
func (l *Leadership) PutCheckpoint(ctx context.Context, id string, cp CheckpointPointer) error {
	if err := l.ended(); err != nil {
		return fmt.Errorf("%s: record checkpoint %d of job %s: %w", l.c.where(), cp.ID, id, err)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	key := l.c.checkpointKey(id)
	b, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("ha: checkpoint pointer of job %s: %w", id, err)
	}
	// Read, then write if nothing changed since: only the leader writes, so this is a check against a
	// caller that goes back, not a race to win.
	got, rev, err := l.c.checkpoint(ctx, id)
	if err != nil {
		return l.fenceErr(err)
	}
	if got != nil && got.ID > cp.ID {
		return fmt.Errorf("%s: job %s: checkpoint %d is older than the recorded %d", l.c.where(), id, cp.ID, got.ID)
	}
	resp, err := l.c.etcd.Txn(ctx).If(l.fence(), clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return fmt.Errorf("%s: record checkpoint %d of job %s: %w", l.c.where(), cp.ID, id, l.fenceErr(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("%s: record checkpoint %d of job %s: %w", l.c.where(), cp.ID, id, ErrNotLeader)
	}
	return nil
}

// Checkpoint returns job id's newest completed checkpoint as recorded, or nil.
func (c *Client) Checkpoint(ctx context.Context, id string) (*CheckpointPointer, error) {
	cp, _, err := c.checkpoint(ctx, id)
	return cp, err
}

// checkpoint returns the pointer and the revision of its last change (0: none).
func (c *Client) checkpoint(ctx context.Context, id string) (*CheckpointPointer, int64, error) {
	resp, err := c.etcd.Get(ctx, c.checkpointKey(id))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: read the checkpoint of job %s: %w", c.where(), id, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	var cp CheckpointPointer
	if err := json.Unmarshal(resp.Kvs[0].Value, &cp); err != nil {
		return nil, 0, fmt.Errorf("%s: checkpoint pointer of job %s: %w", c.where(), id, err)
	}
	return &cp, resp.Kvs[0].ModRevision, nil
}

// fencedPut puts key=value if the term still leads.
func (l *Leadership) fencedPut(ctx context.Context, key, value, what string) error {
	if err := l.ended(); err != nil {
		return fmt.Errorf("%s: %s: %w", l.c.where(), what, err)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	resp, err := l.c.etcd.Txn(ctx).If(l.fence()).Then(clientv3.OpPut(key, value)).Commit()
	if err != nil {
		return fmt.Errorf("%s: %s: %w", l.c.where(), what, l.fenceErr(err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("%s: %s: %w", l.c.where(), what, ErrNotLeader)
	}
	return nil
}
